//! The ports of the domain: what use cases need from storage, expressed without SQL.
//!
//! `trellis-store` implements them over SQLite and PostgreSQL; tests implement them in
//! memory. Reads go through [`Store`]; writes through a [`Tx`] that commits with the audit
//! rows and events of its change (see [`crate::unit_of_work`]).
//!
//! Every method that reads or changes workspace data takes the workspace id and must
//! confine itself to it: a row of another workspace is indistinguishable from an absent one.

use crate::ids::{ApiKeyId, UserId, WorkspaceId};
use std::any::Any;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::attestation::devices::Device;
use crate::attestation::enrollment::PendingEnrollment;
use crate::attestation::nonces::Nonce;
use crate::attestation::policies::Policy as AttestationPolicy;
use crate::attestation::provision::AttestationRecord;
use crate::attestation::trust::TrustRoot;
use crate::audit::{AuditEntry, AuditFilter, NewAuditEntry};
use crate::auth::{ApiKey, Role, User, Workspace};
use crate::cas::{CaFields, CaStats, CertificateAuthority, IssuedRecord, StoredAuthority};
use crate::certificates::revocation_requests::{RevocationRequest, RevocationStatus};
use crate::certificates::{
    Certificate, CertificateFilter, CertificateUpdate, MachineIdentity, NewCertificate, Statistics, UsageRecord,
};
use crate::discovery::Scan;
use crate::error::Error;
use crate::events::{NewEvent, OutboxEvent};
use crate::issuance::policies::IssuancePolicy;
use crate::issuance::requests::CertificateRequest;
use crate::issuance::templates::StoredTemplate;
use crate::pagination::{Page, PageRequest};
use crate::plugins::TpmClock;
use crate::plugins::{NewPluginVersion, StoredBinding, StoredPlugin, StoredPluginVersion};
use crate::webhooks::deliveries::{Completion, Delivery, DeliveryFilter, NewDelivery};
use crate::webhooks::worker::Subscriber;
use crate::webhooks::{DeliveryStats, ExternalIntegration, TargetKind, WebhookEndpoint};

/// Why a storage operation failed. Carries no driver types: the store maps its driver's
/// errors onto these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open database {url}: {message}")]
    Connect { url: String, message: String },
    #[error("migration {version} ({name}) failed: {message}")]
    Migration { version: i64, name: &'static str, message: String },
    #[error("uniqueness violated: {0}")]
    Unique(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The database failed or refused the statement; the message is the driver's.
    #[error("database error: {0}")]
    Database(String),
    /// The group-commit transaction a change was part of did not commit.
    #[error("the transaction failed: {0}")]
    BatchFailed(String),
    #[error("a write job panicked; its changes were rolled back")]
    JobPanicked,
    #[error("the database writer has stopped (shutting down)")]
    WriterStopped,
}

pub type StoreResult<T> = Result<T, StoreError>;

#[async_trait]
pub trait CertificateReads: Send + Sync {
    async fn find_certificate(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>>;
    async fn list_certificates(
        &self,
        workspace_id: &str,
        filter: &CertificateFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Certificate>>;
    async fn certificate_statistics(&self, workspace_id: &str, now: i64) -> StoreResult<Statistics>;
    async fn list_usage(
        &self,
        workspace_id: &str,
        certificate_id: Option<i64>,
        page: PageRequest,
    ) -> StoreResult<Page<UsageRecord>>;
    async fn list_identities(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<MachineIdentity>>;
    async fn list_revocation_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<RevocationRequest>>;
    async fn find_identity(&self, workspace_id: &str, id: i64) -> StoreResult<Option<MachineIdentity>>;
}

#[async_trait]
pub trait CertificateWrites: Send {
    async fn insert_certificate(&mut self, new: &NewCertificate<'_>) -> StoreResult<Certificate>;
    async fn find_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>>;
    /// The sealed private key of a certificate, if the service holds one.
    async fn find_private_key(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<String>>;
    async fn update_certificate(
        &mut self,
        workspace_id: &str,
        id: i64,
        update: &CertificateUpdate<'_>,
        now: i64,
    ) -> StoreResult<Option<Certificate>>;
    async fn delete_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    async fn insert_usage(&mut self, record: &UsageRecord) -> StoreResult<UsageRecord>;
    async fn insert_identity(&mut self, identity: &MachineIdentity) -> StoreResult<MachineIdentity>;
    async fn delete_identity(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Claims up to `limit` certificates (of every workspace) that passed expiry and were not
    /// announced yet; a claimed row is never returned again, so replicas never announce twice.
    async fn claim_expired(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>>;
    /// As [`CertificateWrites::claim_expired`], for certificates entering the expiring window.
    async fn claim_expiring(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>>;
    async fn insert_revocation_request(&mut self, request: &RevocationRequest) -> StoreResult<RevocationRequest>;
    async fn find_revocation_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<RevocationRequest>>;
    /// Moves a request from state `from`; `None` when it was not in `from`.
    async fn update_revocation_request(
        &mut self,
        request: &RevocationRequest,
        from: RevocationStatus,
    ) -> StoreResult<Option<RevocationRequest>>;
}

#[async_trait]
pub trait AuthReads: Send + Sync {
    async fn count_users(&self) -> StoreResult<i64>;
    /// The user and their Argon2id password hash.
    async fn find_user_credentials(&self, email: &str) -> StoreResult<Option<(User, String)>>;
    async fn find_session_user(&self, token_hash: &str, now: i64) -> StoreResult<Option<User>>;
    async fn find_membership(&self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Role>>;
    async fn find_workspace(&self, id: &str) -> StoreResult<Option<Workspace>>;
    async fn list_user_workspaces(&self, user_id: &str) -> StoreResult<Vec<Workspace>>;
    async fn find_api_key_by_hash(&self, key_hash: &str) -> StoreResult<Option<ApiKey>>;
    async fn list_api_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>>;
}

#[async_trait]
pub trait AuthWrites: Send {
    async fn touch_api_key(&mut self, id: &str, now: i64) -> StoreResult<()>;
    async fn insert_workspace(&mut self, workspace: &Workspace, created_by: Option<&str>) -> StoreResult<()>;
    async fn insert_user(&mut self, user: &User, password_hash: &str) -> StoreResult<()>;
    async fn add_member(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
        at: i64,
    ) -> StoreResult<()>;
    async fn set_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()>;
    async fn insert_session(&mut self, token_hash: &str, user_id: &str, at: i64, expires_at: i64) -> StoreResult<()>;
    async fn delete_session(&mut self, token_hash: &str) -> StoreResult<()>;
    async fn insert_api_key(&mut self, key: &ApiKey, key_hash: &str) -> StoreResult<()>;
    async fn delete_api_key(&mut self, workspace_id: &WorkspaceId, id: &ApiKeyId) -> StoreResult<bool>;
}

#[async_trait]
pub trait AuditReads: Send + Sync {
    async fn list_audit(
        &self,
        workspace_id: &str,
        filter: &AuditFilter,
        page: PageRequest,
    ) -> StoreResult<Page<AuditEntry>>;
}

/// The audit table is append-only: this port has no update or delete.
#[async_trait]
pub trait AuditWrites: Send {
    async fn insert_audit(&mut self, entry: &NewAuditEntry<'_>) -> StoreResult<()>;
}

#[async_trait]
pub trait EventReads: Send + Sync {
    async fn list_events(
        &self,
        workspace_id: &str,
        event_type: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<OutboxEvent>>;
}

#[async_trait]
pub trait EventWrites: Send {
    async fn insert_event(&mut self, event: &NewEvent<'_>) -> StoreResult<()>;
    /// Deletes up to `limit` events delivered (processed) before `before`; never an
    /// undelivered one. Returns how many went.
    async fn purge_delivered_events(&mut self, before: i64, limit: i64) -> StoreResult<u64>;
}

#[async_trait]
pub trait PluginReads: Send + Sync {
    async fn list_plugin_versions(&self) -> StoreResult<Vec<StoredPluginVersion>>;
    async fn plugin_component(&self, sha256: &str) -> StoreResult<Option<Vec<u8>>>;
    async fn list_plugins(&self) -> StoreResult<Vec<StoredPlugin>>;
    /// Bindings of every workspace: the runtime of each replica serves them all.
    async fn list_plugin_bindings(&self) -> StoreResult<Vec<StoredBinding>>;
    /// Bindings of one workspace.
    async fn list_workspace_plugin_bindings(&self, workspace_id: &str) -> StoreResult<Vec<StoredBinding>>;
    async fn any_plugin_installed(&self) -> StoreResult<bool>;
}

#[async_trait]
pub trait PluginWrites: Send {
    async fn insert_plugin_version(&mut self, new: &NewPluginVersion<'_>) -> StoreResult<()>;
    async fn set_plugin_activation(
        &mut self,
        plugin_id: &str,
        active_version: Option<&str>,
        previous_versions: &[String],
        at: i64,
    ) -> StoreResult<()>;
    async fn set_plugin_grants(&mut self, plugin_id: &str, hosts: &[String], at: i64) -> StoreResult<()>;
    async fn delete_plugin(&mut self, plugin_id: &str, version: Option<&str>) -> StoreResult<()>;
    async fn upsert_plugin_binding(&mut self, binding: &StoredBinding, at: i64) -> StoreResult<()>;
    async fn delete_plugin_binding(&mut self, workspace_id: &str, kind: &str, service_type: &str) -> StoreResult<bool>;
}

#[async_trait]
pub trait CaReads: Send + Sync {
    async fn find_ca(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>>;
    async fn list_cas(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<CertificateAuthority>>;
    async fn ca_stats(&self, workspace_id: &str) -> StoreResult<CaStats>;
    /// An internal CA's key material, by CA id alone (the unauthenticated CRL and OCSP
    /// endpoints know only the id).
    async fn find_authority(&self, ca_id: i64) -> StoreResult<Option<StoredAuthority>>;
    async fn find_issued(&self, ca_id: i64, serial_number: &str) -> StoreResult<Option<IssuedRecord>>;
    /// Issued certificates of a CA after ledger id `after`, oldest first.
    async fn list_issued(&self, ca_id: i64, after: i64, limit: i64) -> StoreResult<Vec<IssuedRecord>>;
    /// Every revoked certificate of a CA that has not expired (what its CRL lists).
    async fn list_revoked(&self, ca_id: i64, now_secs: i64) -> StoreResult<Vec<IssuedRecord>>;
    /// Revoked certificates of every internal CA of a workspace, newest first.
    async fn list_workspace_revoked(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<IssuedRecord>>;
    /// Ledger rows of the workspace's internal CAs with this serial (lowercase hex), whatever
    /// became of their CA records.
    async fn find_issued_by_serial(&self, workspace_id: &str, serial_number: &str) -> StoreResult<Vec<IssuedRecord>>;
    /// The CA's revocation marker and cached CRL (its DER only when `with_der`).
    async fn crl_state(&self, ca_id: i64, with_der: bool) -> StoreResult<crate::cas::CrlState>;
}

#[async_trait]
pub trait CaWrites: Send {
    async fn insert_ca(&mut self, workspace_id: &str, fields: &CaFields, at: i64) -> StoreResult<CertificateAuthority>;
    async fn find_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>>;
    async fn update_ca(
        &mut self,
        workspace_id: &str,
        id: i64,
        fields: &CaFields,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>>;
    async fn set_ca_health(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: crate::cas::CaStatus,
        health: crate::cas::HealthStatus,
        at: i64,
    ) -> StoreResult<()>;
    async fn touch_ca_sync(
        &mut self,
        workspace_id: &str,
        id: i64,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>>;
    /// Deletes the CA; its certificates stay and lose their link.
    async fn delete_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Claims up to `limit` CAs (of every workspace, `disconnected` ones excepted) not health-
    /// checked since `due_before`, stamping them checked at `now`: a claimed CA is not returned
    /// again within the interval, so replicas never probe one CA twice in it.
    async fn claim_ca_health_checks(
        &mut self,
        now: i64,
        due_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateAuthority>>;
    async fn insert_authority(&mut self, authority: &StoredAuthority) -> StoreResult<()>;
    async fn insert_issued(&mut self, record: &IssuedRecord) -> StoreResult<()>;
    /// Marks a serial revoked; false when the CA never issued it. Revoking twice keeps the
    /// first time and reason. A revocation that changed the row bumps the CA's revocation
    /// marker in the same transaction ([`crate::cas::CrlState::revocations`]).
    async fn revoke_issued(&mut self, ca_id: i64, serial_number: &str, at_secs: i64, reason: &str)
        -> StoreResult<bool>;
    /// Keeps `crl` as the CA's cached CRL unless one with an equal or higher number is kept
    /// already (another replica's): CRL numbers never go back. True when stored.
    async fn store_crl(&mut self, ca_id: i64, crl: &crate::cas::StoredCrl) -> StoreResult<bool>;
}

#[async_trait]
pub trait IssuanceReads: Send + Sync {
    /// The workspace's issuance policies in evaluation order (position, then id).
    async fn list_issuance_policies(&self, workspace_id: &str) -> StoreResult<Vec<IssuancePolicy>>;
    async fn find_request(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>>;
    async fn list_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<CertificateRequest>>;
    async fn list_templates(&self, workspace_id: &str) -> StoreResult<Vec<StoredTemplate>>;
    async fn find_template(&self, workspace_id: &str, id_or_name: &str) -> StoreResult<Option<StoredTemplate>>;
    /// Requests `issuing` in every workspace, and when the oldest of their orders was accepted.
    async fn issuing_backlog(&self) -> StoreResult<(i64, Option<i64>)>;
}

#[async_trait]
pub trait IssuanceWrites: Send {
    async fn insert_issuance_policy(&mut self, policy: &IssuancePolicy) -> StoreResult<IssuancePolicy>;
    async fn delete_issuance_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Replaces a policy's configuration (its secrets are sealed once its id is known).
    async fn set_issuance_policy_config(
        &mut self,
        workspace_id: &str,
        id: i64,
        config: &serde_json::Value,
    ) -> StoreResult<bool>;
    async fn insert_request(&mut self, request: &CertificateRequest) -> StoreResult<CertificateRequest>;
    async fn find_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>>;
    /// Moves a request from `from` to its new state; `None` when it was not in `from` (a
    /// concurrent decision won).
    async fn update_request(
        &mut self,
        request: &CertificateRequest,
        from: crate::issuance::requests::RequestStatus,
    ) -> StoreResult<Option<CertificateRequest>>;
    async fn insert_template(&mut self, template: &StoredTemplate) -> StoreResult<StoredTemplate>;
    async fn update_template(&mut self, template: &StoredTemplate) -> StoreResult<Option<StoredTemplate>>;
    async fn delete_template(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Claims up to `limit` auto-renewing certificates (of every workspace) due at `now` (their
    /// CA's suggested `renew_at` when stored, else inside their renewal window: their own, else
    /// `default_window_ms` before expiry) and not claimed since
    /// `claimed_before`; claimed rows are stamped `now`, so replicas never renew one at once.
    async fn claim_renewals(
        &mut self,
        now: i64,
        default_window_ms: i64,
        claimed_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>>;
    /// Claims up to `limit` auto-renewing certificates (of every workspace) whose CA renewal
    /// information (RFC 9773) is due to be asked at `now`, moving their next check to
    /// `next_check` (the claim: replicas skip them until then).
    async fn claim_renewal_info_checks(
        &mut self,
        now: i64,
        next_check: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>>;
    /// Stores when to renew as the CA suggests (`None`: the expiry-minus-window rule) and when
    /// to ask again. A stored time already inside `window` (start, end) stays: asking again
    /// does not pick a new time in the same window.
    async fn record_renewal_info(
        &mut self,
        workspace_id: &str,
        id: i64,
        renew_at: Option<i64>,
        window: Option<(i64, i64)>,
        next_check: i64,
    ) -> StoreResult<()>;
    /// Links a renewed certificate to its successor and moves auto-renewal to it.
    async fn record_renewal(&mut self, workspace_id: &str, old_id: i64, new_id: i64) -> StoreResult<()>;
    async fn record_renewal_failure(&mut self, workspace_id: &str, id: i64, error: &str) -> StoreResult<()>;
    /// Leases up to `limit` `issuing` requests (of every workspace) whose poll is due at `now`:
    /// their `poll_at` moves to `lease_until`, their attempts grow by one and `lease_owner`
    /// holds them, so replicas never poll one at once.
    async fn claim_issuing(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateRequest>>;
    /// Writes a polled request if it is still `issuing` under `lease_owner`'s lease (and
    /// releases it); `None` when the lease was lost.
    async fn finish_poll(
        &mut self,
        request: &CertificateRequest,
        lease_owner: &str,
    ) -> StoreResult<Option<CertificateRequest>>;
}

#[async_trait]
pub trait DiscoveryReads: Send + Sync {
    async fn find_scan(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Scan>>;
    async fn list_scans(
        &self,
        workspace_id: &str,
        scan_type: Option<&str>,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<Scan>>;
    /// The workspace's certificates among `fingerprints` (lowercase hex SHA-256): what a scan
    /// already knows, read for a whole page at once.
    async fn known_certificates(
        &self,
        workspace_id: &str,
        fingerprints: &[String],
    ) -> StoreResult<Vec<crate::discovery::KnownCertificate>>;
}

#[async_trait]
pub trait DiscoveryWrites: Send {
    async fn insert_scan(&mut self, scan: &Scan) -> StoreResult<Scan>;
    /// The workspace's `tls_endpoints` scans that count against its caps: pending or running
    /// ones, and those created after `since`. Locks the workspace's scans against another
    /// such read until this transaction ends (PostgreSQL: the workspace row; SQLite's writer is
    /// one at a time already), so two starts are judged one after the other.
    async fn tls_scans_counted(&mut self, workspace_id: &str, since: i64) -> StoreResult<Vec<Scan>>;
    /// Moves one scan to `running` (of any workspace): `only` if it is pending, else the oldest
    /// pending scan or one whose heartbeat is older than `stale_before`.
    async fn claim_scan(&mut self, only: Option<i64>, now: i64, stale_before: i64) -> StoreResult<Option<Scan>>;
    /// Writes counts and heartbeat; false when the scan is no longer running (cancelled).
    async fn update_scan_progress(&mut self, scan: &Scan) -> StoreResult<bool>;
    /// Writes the terminal state; false when the scan had already ended (cancelled).
    async fn finish_scan(&mut self, scan: &Scan) -> StoreResult<bool>;
    async fn cancel_scan(&mut self, workspace_id: &str, id: i64, at: i64) -> StoreResult<Option<Scan>>;
    async fn find_certificate_by_fingerprint(
        &mut self,
        workspace_id: &str,
        fingerprint_sha256: &str,
    ) -> StoreResult<Option<Certificate>>;
    /// Links a certificate without a CA to `ca_id`; false when it already had one.
    async fn link_certificate_ca(&mut self, workspace_id: &str, id: i64, ca_id: i64, at: i64) -> StoreResult<bool>;
    /// Whether the certificate has a usage record for `host` and `port`.
    async fn has_usage(
        &mut self,
        workspace_id: &str,
        certificate_id: i64,
        host: &str,
        port: Option<i64>,
    ) -> StoreResult<bool>;
}

#[async_trait]
pub trait WebhookReads: Send + Sync {
    async fn find_webhook(&self, workspace_id: &str, id: &str) -> StoreResult<Option<WebhookEndpoint>>;
    async fn list_webhooks(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<WebhookEndpoint>>;
    async fn find_integration(&self, workspace_id: &str, id: &str) -> StoreResult<Option<ExternalIntegration>>;
    async fn list_integrations(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<ExternalIntegration>>;
    /// Deliveries of each target finished at or after `since`, by outcome.
    async fn delivery_stats(
        &self,
        workspace_id: &str,
        target_ids: &[String],
        since: i64,
    ) -> StoreResult<Vec<(String, DeliveryStats)>>;
    async fn list_deliveries(
        &self,
        workspace_id: &str,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Delivery>>;
    async fn find_delivery(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Delivery>>;
    /// Whether some outbox event waits for fan-out (a read: no write lock taken).
    async fn has_undelivered_events(&self) -> StoreResult<bool>;
    /// Whether some delivery is due at `now` and not leased (a read).
    async fn has_due_deliveries(&self, now: i64) -> StoreResult<bool>;
    /// Pending deliveries of every workspace, and when the oldest of them was created.
    async fn delivery_backlog(&self) -> StoreResult<(i64, Option<i64>)>;
}

#[async_trait]
pub trait WebhookWrites: Send {
    async fn insert_webhook(&mut self, endpoint: &WebhookEndpoint) -> StoreResult<()>;
    /// Writes every field but id, workspace and creation time; false when absent.
    async fn update_webhook(&mut self, endpoint: &WebhookEndpoint) -> StoreResult<bool>;
    /// Deletes the endpoint; its pending deliveries end `failed`.
    async fn delete_webhook(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool>;
    async fn insert_integration(&mut self, integration: &ExternalIntegration) -> StoreResult<()>;
    async fn update_integration(&mut self, integration: &ExternalIntegration) -> StoreResult<bool>;
    async fn delete_integration(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool>;
    async fn insert_delivery(&mut self, delivery: &NewDelivery) -> StoreResult<Delivery>;

    // ---- the delivery worker ------------------------------------------------------------
    /// Up to `limit` undelivered outbox events, oldest first, locked for this transaction
    /// (on PostgreSQL rows another transaction holds are skipped: replicas share the work).
    async fn claim_outbox_events(&mut self, limit: i64) -> StoreResult<Vec<OutboxEvent>>;
    /// The enabled webhook endpoints and integrations of these workspaces.
    async fn subscribers(&mut self, workspace_ids: &[String]) -> StoreResult<Vec<Subscriber>>;
    /// Inserts fanned-out deliveries; one that exists already (same event and target) is
    /// skipped.
    async fn insert_deliveries(&mut self, deliveries: &[NewDelivery]) -> StoreResult<()>;
    async fn mark_events_processed(&mut self, ids: &[i64], at: i64) -> StoreResult<()>;
    /// Leases up to `limit` pending deliveries due at `now` whose lease is free or expired,
    /// skipping `exclude_targets`, soonest due first.
    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
        exclude_targets: &[String],
    ) -> StoreResult<Vec<Delivery>>;
    /// Extends every live lease of `lease_owner` to `lease_until`.
    async fn extend_leases(&mut self, lease_owner: &str, now: i64, lease_until: i64) -> StoreResult<u64>;
    /// Applies finished attempts; a completion whose lease another worker took over is
    /// dropped. Returns how many applied.
    async fn complete_deliveries(&mut self, completions: &[Completion]) -> StoreResult<u64>;
    /// Targets whose attempt succeeded stop failing; those whose attempt failed are failing
    /// since `at` unless they already were.
    async fn record_target_outcomes(
        &mut self,
        succeeded: &[(TargetKind, String)],
        failed: &[(TargetKind, String)],
        at: i64,
    ) -> StoreResult<()>;
    /// Switches a target off with a reason; false when it was already off or is gone.
    async fn disable_target(&mut self, kind: TargetKind, id: &str, reason: &str, at: i64) -> StoreResult<bool>;
}

#[async_trait]
pub trait AttestationReads: Send + Sync {
    async fn find_device(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Device>>;
    async fn list_devices(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<Device>>;
    async fn find_attestation_policy(&self, workspace_id: &str, id: i64) -> StoreResult<Option<AttestationPolicy>>;
    /// Oldest first (policy choice takes the first match).
    async fn list_attestation_policies(&self, workspace_id: &str) -> StoreResult<Vec<AttestationPolicy>>;
    async fn list_trust_roots(&self, workspace_id: &str) -> StoreResult<Vec<TrustRoot>>;
    /// Newest first.
    async fn list_attestation_records(
        &self,
        workspace_id: &str,
        device_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<AttestationRecord>>;
}

#[async_trait]
pub trait AttestationWrites: Send {
    async fn insert_device(&mut self, device: &Device) -> StoreResult<Device>;
    /// Writes every field but id, workspace and creation time; false when absent.
    async fn update_device(&mut self, device: &Device) -> StoreResult<bool>;
    async fn delete_device(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Status and last attestation time (and, for a passing quote, its clock).
    async fn set_device_attestation(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: crate::attestation::devices::DeviceStatus,
        at: i64,
        clock: Option<TpmClock>,
    ) -> StoreResult<()>;
    async fn insert_attestation_policy(&mut self, policy: &AttestationPolicy) -> StoreResult<AttestationPolicy>;
    async fn update_attestation_policy(&mut self, policy: &AttestationPolicy) -> StoreResult<bool>;
    async fn delete_attestation_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    async fn insert_nonce(&mut self, nonce: &Nonce) -> StoreResult<()>;
    async fn find_nonce(&mut self, workspace_id: &str, nonce: &str) -> StoreResult<Option<Nonce>>;
    /// Marks the nonce consumed at `at` if nobody has; false when another consumption won.
    async fn consume_nonce(&mut self, workspace_id: &str, nonce: &str, at: i64) -> StoreResult<bool>;
    /// Stores the device's pending enrollment, replacing an earlier one.
    async fn put_enrollment(&mut self, enrollment: &PendingEnrollment) -> StoreResult<()>;
    /// Removes and returns the device's pending enrollment.
    async fn take_enrollment(&mut self, workspace_id: &str, device_id: i64) -> StoreResult<Option<PendingEnrollment>>;
    async fn insert_trust_root(&mut self, root: &TrustRoot) -> StoreResult<TrustRoot>;
    async fn delete_trust_root(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    async fn insert_attestation_record(&mut self, record: &AttestationRecord) -> StoreResult<AttestationRecord>;
}

/// A row written for its own sake, with no answer needed: see [`Tx::insert_rows`].
pub enum NewRow<'a> {
    /// An internal CA's ledger row.
    Issued(&'a IssuedRecord),
    Audit(NewAuditEntry<'a>),
    Event(NewEvent<'a>),
}

/// A write transaction. Dropping it without [`Tx::commit`] rolls back.
#[async_trait]
pub trait Tx:
    CertificateWrites
    + AuthWrites
    + AuditWrites
    + EventWrites
    + PluginWrites
    + CaWrites
    + IssuanceWrites
    + DiscoveryWrites
    + WebhookWrites
    + AttestationWrites
    + Send
{
    async fn commit(self: Box<Self>) -> StoreResult<()>;

    /// Inserts `rows` in order, as `insert_issued`, `insert_audit` and `insert_event` would. A
    /// store may send them together (on SQLite one round trip to the connection instead of one
    /// each: what a unit of work's audit rows and events cost on the group-commit writer's
    /// path). An error fails the whole call.
    async fn insert_rows(&mut self, rows: &[NewRow<'_>]) -> StoreResult<()> {
        for row in rows {
            match row {
                NewRow::Issued(record) => self.insert_issued(record).await?,
                NewRow::Audit(entry) => self.insert_audit(entry).await?,
                NewRow::Event(event) => self.insert_event(event).await?,
            }
        }
        Ok(())
    }
}

/// A group-commit job with its result type erased (see [`Store::write`]).
pub type ErasedJob =
    Box<dyn for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<Box<dyn Any + Send>, Error>> + Send>;

/// The database.
#[async_trait]
pub trait Store:
    CertificateReads
    + AuthReads
    + AuditReads
    + EventReads
    + PluginReads
    + CaReads
    + IssuanceReads
    + DiscoveryReads
    + WebhookReads
    + AttestationReads
    + Send
    + Sync
    + 'static
{
    /// Opens a write transaction (on SQLite, writers queue for the one write slot).
    async fn begin(&self) -> StoreResult<Box<dyn Tx>>;
    /// Runs a job in a write transaction, possibly together with other jobs (group commit
    /// on SQLite); its changes commit if and only if it returns `Ok`. Use [`Store::write`].
    async fn write_erased(&self, job: ErasedJob) -> Result<Box<dyn Any + Send>, Error>;
    /// Readiness probe: the database answers a trivial query.
    async fn ping(&self) -> StoreResult<()>;
    async fn close(&self);
}

impl dyn Store {
    /// Runs `job` in a write transaction and commits it, possibly together with other jobs.
    /// The job must touch the database only through the `Tx` it is given: other calls on the
    /// store inside it would wait for the writer that is running it.
    pub async fn write<T, F>(&self, job: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<T, Error>> + Send + 'static,
    {
        let erased: ErasedJob = Box::new(move |tx| {
            Box::pin(async move { job(tx).await.map(|value| Box::new(value) as Box<dyn Any + Send>) })
        });
        let value = self.write_erased(erased).await?;
        value
            .downcast::<T>()
            .map(|value| *value)
            .map_err(|_| Error::Internal("group commit returned a foreign value".into()))
    }
}
