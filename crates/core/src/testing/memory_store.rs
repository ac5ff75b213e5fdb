//! `MemoryStore`: the storage ports over a few vectors, on the fakes' kernel (`super::kernel`:
//! a transaction works on a copy of the tables and swaps it in on commit).

use crate::ids::{ApiKeyId, UserId};
use std::any::Any;

use async_trait::async_trait;

use crate::attestation::devices::Device;
use crate::attestation::enrollment::PendingEnrollment;
use crate::attestation::nonces::Nonce;
use crate::attestation::policies::Policy as AttestationPolicy;
use crate::attestation::provision::AttestationRecord;
use crate::attestation::trust::TrustRoot;
use crate::audit::{AuditEntry, AuditFilter};
use crate::auth::fake::{MembershipRow, SessionRow, UserIdentityRow};
use crate::auth::oidc::port::LoginAttempt;
use crate::auth::{ApiKey, Invitation, User, Workspace};
use crate::cas::{CaFields, CaStats, CaStatus, CertificateAuthority, HealthStatus};
use crate::certificates::revocation_requests::RevocationRequest;
use crate::certificates::{Certificate, MachineIdentity, UsageRecord};
use crate::discovery::Scan;
use crate::error::Error;
use crate::events::OutboxEvent;
use crate::issuance::policies::IssuancePolicy;
use crate::issuance::requests::CertificateRequest;
use crate::issuance::templates::StoredTemplate;
use crate::pagination::{Page, PageRequest};
use crate::pki::{IssuedRecord, StoredAuthority};
use crate::plugins::{NewPluginVersion, StoredBinding, StoredPlugin, StoredPluginVersion};
use crate::ports::*;
use crate::webhooks::deliveries::{Completion, Delivery, DeliveryFilter, NewDelivery};
use crate::webhooks::worker::Subscriber;
use crate::webhooks::{DeliveryStats, ExternalIntegration, TargetKind, WebhookEndpoint};

use super::kernel::{fake_tables, Committed, Working};

#[derive(Debug, Clone, Default)]
pub struct Tables {
    pub certificates: Vec<Certificate>,
    pub audit: Vec<AuditEntry>,
    pub events: Vec<OutboxEvent>,
    /// Internal CAs' keys and certificates.
    pub authorities: Vec<StoredAuthority>,
    /// Internal CAs' ledger (`internal_issued`).
    pub issued: Vec<IssuedRecord>,
    /// Transactions committed (each `write` job commits once here).
    pub commits: usize,
    /// CAs (read by id; tests put them here).
    pub cas: Vec<CertificateAuthority>,
    /// Certificate requests, and who holds each one's poll lease.
    pub requests: Vec<CertificateRequest>,
    pub request_leases: std::collections::HashMap<i64, String>,
    /// Per certificate: (renew_at, renewal_info_next_check).
    pub renewal_info: std::collections::HashMap<i64, (Option<i64>, Option<i64>)>,
    /// Revocations waiting for approval.
    pub revocation_requests: Vec<RevocationRequest>,
    /// Certificates' renewal claim stamps.
    pub renewal_claims: std::collections::HashMap<i64, i64>,
    /// Issuance policies and workspace templates (faked with the rest of issuance's port in
    /// `crate::issuance::fake`).
    pub policies: Vec<IssuancePolicy>,
    pub templates: Vec<StoredTemplate>,
    /// Usage records of certificates.
    pub usage: Vec<UsageRecord>,
    /// Sealed private keys of certificates issued here, by certificate id.
    pub private_keys: std::collections::HashMap<i64, String>,
    /// When each certificate's expiry was announced: (entering the window, passing it).
    pub expiry_announced: std::collections::HashMap<i64, (Option<i64>, Option<i64>)>,
    /// Machine identities (their certificate counts are computed when read).
    pub identities: Vec<MachineIdentity>,
    /// Discovery scans (their port is faked in `discovery::fake`).
    pub scans: Vec<Scan>,
    /// What each scan found: (workspace, scan, certificate, outcome).
    pub scan_certificates: Vec<(String, i64, i64, crate::discovery::FindingOutcome)>,
    /// Attestation's tables (its port is faked in `attestation::fake`).
    pub devices: Vec<Device>,
    pub attestation_policies: Vec<AttestationPolicy>,
    pub trust_roots: Vec<TrustRoot>,
    pub nonces: Vec<Nonce>,
    pub enrollments: Vec<PendingEnrollment>,
    pub attestation_records: Vec<AttestationRecord>,
    /// Tenancy and sign-in (their ports are faked in `auth::fake`): users and their password
    /// hashes, workspaces, memberships, invitations, API keys and their digests, sessions,
    /// OIDC sign-ins in flight and the identities users signed in as.
    pub users: Vec<User>,
    pub password_hashes: std::collections::HashMap<UserId, String>,
    pub workspaces: Vec<Workspace>,
    pub memberships: Vec<MembershipRow>,
    pub invitations: Vec<Invitation>,
    pub api_keys: Vec<ApiKey>,
    pub api_key_hashes: std::collections::HashMap<ApiKeyId, String>,
    pub sessions: Vec<SessionRow>,
    pub login_attempts: Vec<LoginAttempt>,
    pub user_identities: Vec<UserIdentityRow>,
    next_id: i64,
}

fake_tables!(Tables);

#[derive(Clone, Default)]
pub struct MemoryStore {
    tables: Committed<Tables>,
}

impl MemoryStore {
    /// Adds a CA, as if it had been created.
    pub fn put_ca(&self, ca: CertificateAuthority) {
        self.tables.with(|tables| tables.cas.push(ca));
    }

    /// Adds a certificate as it stands (ids are the caller's).
    pub fn put_certificate(&self, certificate: Certificate) {
        self.tables.with(|tables| tables.certificates.push(certificate));
    }

    /// Changes the committed tables in place (test setup).
    pub fn edit(&self, change: impl FnOnce(&mut Tables)) {
        self.tables.with(change);
    }

    /// A copy of the committed tables, for assertions.
    pub fn snapshot(&self) -> Tables {
        self.tables.snapshot()
    }
}

/// A transaction of [`MemoryStore`] (the area fakes write to its `working` tables).
pub type MemoryTx = Working<Tables>;

/// What `claim_renewals` and `claim_renewal_info_checks` consider at all.
pub(crate) fn renewable(c: &Certificate) -> bool {
    c.auto_renewal && !c.revoked && c.ca_id.is_some() && c.renewed_by_id.is_none()
}

fn not_faked(what: &str) -> ! {
    panic!("MemoryStore does not fake `{what}` yet: extend crates/core/src/testing")
}

#[async_trait]
impl AuditReads for MemoryStore {
    /// As the store: every filter member that is set must match; newest first.
    async fn list_audit(
        &self,
        workspace_id: &str,
        filter: &AuditFilter,
        page: PageRequest,
    ) -> StoreResult<Page<AuditEntry>> {
        let matches = |wanted: &Option<String>, value: Option<&str>| wanted.as_deref().is_none_or(|w| Some(w) == value);
        let mut items: Vec<AuditEntry> = self
            .snapshot()
            .audit
            .into_iter()
            .filter(|a| a.workspace_id.as_deref() == Some(workspace_id))
            .filter(|a| {
                matches(&filter.action, Some(&a.action))
                    && matches(&filter.actor_id, Some(&a.actor_id))
                    && matches(&filter.target_type, Some(&a.target_type))
                    && matches(&filter.target_id, a.target_id.as_deref())
                    && matches(&filter.request_id, a.request_id.as_deref())
                    && filter.since.is_none_or(|since| a.created_at >= since)
                    && filter.until.is_none_or(|until| a.created_at < until)
            })
            .collect();
        items.sort_by_key(|a| std::cmp::Reverse((a.created_at, a.id)));
        Ok(window(items, page))
    }
}

#[async_trait]
impl EventReads for MemoryStore {
    /// The workspace's events, newest first, of one type if asked.
    async fn list_events(
        &self,
        workspace_id: &str,
        event_type: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<OutboxEvent>> {
        let mut items: Vec<OutboxEvent> = self
            .snapshot()
            .events
            .into_iter()
            .filter(|e| e.workspace_id == workspace_id && event_type.is_none_or(|t| e.event_type == t))
            .collect();
        items.reverse();
        Ok(window(items, page))
    }
}

pub(crate) fn window<T>(items: Vec<T>, page: PageRequest) -> Page<T> {
    let total = items.len() as i64;
    let items = items.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
    Page { items, total, total_exact: true, request: page }
}

#[async_trait]
impl PluginReads for MemoryStore {
    async fn list_plugin_versions(&self) -> StoreResult<Vec<StoredPluginVersion>> {
        not_faked("list_plugin_versions")
    }
    async fn plugin_component(&self, _: &str) -> StoreResult<Option<Vec<u8>>> {
        not_faked("plugin_component")
    }
    async fn list_plugins(&self) -> StoreResult<Vec<StoredPlugin>> {
        not_faked("list_plugins")
    }
    async fn list_plugin_bindings(&self) -> StoreResult<Vec<StoredBinding>> {
        not_faked("list_plugin_bindings")
    }
    async fn list_workspace_plugin_bindings(&self, _: &str) -> StoreResult<Vec<StoredBinding>> {
        not_faked("list_workspace_plugin_bindings")
    }
    async fn any_plugin_installed(&self) -> StoreResult<bool> {
        not_faked("any_plugin_installed")
    }
    async fn list_plugin_signing_keys(&self) -> StoreResult<Vec<crate::plugins::signatures::SigningKey>> {
        not_faked("list_plugin_signing_keys")
    }
    async fn plugin_versions_signed_by(&self, _: &str) -> StoreResult<Vec<(String, String)>> {
        not_faked("plugin_versions_signed_by")
    }
    async fn plugin_version_signer(&self, _: &str, _: &str) -> StoreResult<Option<String>> {
        not_faked("plugin_version_signer")
    }
}

#[async_trait]
impl PluginWrites for MemoryTx {
    async fn insert_plugin_version(&mut self, _: &NewPluginVersion<'_>) -> StoreResult<()> {
        not_faked("insert_plugin_version")
    }
    async fn set_plugin_activation(&mut self, _: &str, _: Option<&str>, _: &[String], _: i64) -> StoreResult<()> {
        not_faked("set_plugin_activation")
    }
    async fn set_plugin_grants(&mut self, _: &str, _: &[String], _: i64) -> StoreResult<()> {
        not_faked("set_plugin_grants")
    }
    async fn delete_plugin(&mut self, _: &str, _: Option<&str>) -> StoreResult<()> {
        not_faked("delete_plugin")
    }
    async fn upsert_plugin_binding(&mut self, _: &StoredBinding, _: i64) -> StoreResult<()> {
        not_faked("upsert_plugin_binding")
    }
    async fn delete_plugin_binding(&mut self, _: &str, _: &str, _: &str) -> StoreResult<bool> {
        not_faked("delete_plugin_binding")
    }
    async fn insert_plugin_signing_key(&mut self, _: &crate::plugins::signatures::SigningKey) -> StoreResult<bool> {
        not_faked("insert_plugin_signing_key")
    }
    async fn revoke_plugin_signing_key(&mut self, _: &str, _: i64) -> StoreResult<()> {
        not_faked("revoke_plugin_signing_key")
    }
}

#[async_trait]
impl CaReads for MemoryStore {
    async fn find_ca(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>> {
        Ok(self.snapshot().cas.into_iter().find(|ca| ca.workspace_id == workspace_id && ca.id == id))
    }
    async fn list_cas(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<CertificateAuthority>> {
        let mine: Vec<CertificateAuthority> =
            self.snapshot().cas.into_iter().filter(|ca| ca.workspace_id == workspace_id).collect();
        let total = mine.len() as i64;
        let items = mine.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
        Ok(Page { items, total, total_exact: true, request: page })
    }
    async fn ca_stats(&self, _: &str) -> StoreResult<CaStats> {
        not_faked("ca_stats")
    }
    async fn find_authority(&self, ca_id: i64) -> StoreResult<Option<StoredAuthority>> {
        Ok(self.snapshot().authorities.into_iter().find(|a| a.ca_id == ca_id))
    }
    async fn find_issued(&self, _: i64, _: &str) -> StoreResult<Option<IssuedRecord>> {
        not_faked("find_issued")
    }
    async fn list_issued(&self, _: i64, _: i64, _: i64) -> StoreResult<Vec<IssuedRecord>> {
        not_faked("list_issued")
    }
    async fn list_revoked(&self, _: i64, _: i64) -> StoreResult<Vec<IssuedRecord>> {
        not_faked("list_revoked")
    }
    async fn list_workspace_revoked(&self, _: &str, _: PageRequest) -> StoreResult<Page<IssuedRecord>> {
        not_faked("list_workspace_revoked")
    }
    async fn find_issued_by_serial(&self, workspace_id: &str, serial_number: &str) -> StoreResult<Vec<IssuedRecord>> {
        let issued = self.snapshot().issued.into_iter();
        Ok(issued.filter(|r| r.workspace_id == workspace_id && r.serial_number == serial_number).collect())
    }
    async fn crl_state(&self, _: i64, _: bool) -> StoreResult<crate::pki::CrlState> {
        not_faked("crl_state")
    }
}

#[async_trait]
impl CaWrites for MemoryTx {
    async fn claim_ca_health_checks(&mut self, _: i64, _: i64, _: i64) -> StoreResult<Vec<CertificateAuthority>> {
        not_faked("claim_ca_health_checks")
    }
    async fn insert_ca(&mut self, _: &str, _: &CaFields, _: i64) -> StoreResult<CertificateAuthority> {
        not_faked("insert_ca")
    }
    async fn find_ca(&mut self, _: &str, _: i64) -> StoreResult<Option<CertificateAuthority>> {
        not_faked("find_ca")
    }
    async fn update_ca(&mut self, _: &str, _: i64, _: &CaFields, _: i64) -> StoreResult<Option<CertificateAuthority>> {
        not_faked("update_ca")
    }
    async fn set_ca_health(&mut self, _: &str, _: i64, _: CaStatus, _: HealthStatus, _: i64) -> StoreResult<()> {
        not_faked("set_ca_health")
    }
    async fn touch_ca_sync(&mut self, _: &str, _: i64, _: i64) -> StoreResult<Option<CertificateAuthority>> {
        not_faked("touch_ca_sync")
    }
    async fn delete_ca(&mut self, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_ca")
    }
    async fn insert_authority(&mut self, authority: &StoredAuthority) -> StoreResult<()> {
        if self.working.authorities.iter().any(|a| a.ca_id == authority.ca_id) {
            return Err(StoreError::Unique("internal_authorities".into()));
        }
        self.working.authorities.push(authority.clone());
        Ok(())
    }
    async fn insert_issued(&mut self, record: &IssuedRecord) -> StoreResult<()> {
        let issued = &mut self.working.issued;
        if issued.iter().any(|r| r.ca_id == record.ca_id && r.serial_number == record.serial_number) {
            return Err(StoreError::Unique("internal_issued_serial".into()));
        }
        let id = issued.len() as i64 + 1;
        issued.push(IssuedRecord { id, ..record.clone() });
        Ok(())
    }
    async fn revoke_issued(
        &mut self,
        ca_id: i64,
        serial_number: &str,
        at_secs: i64,
        reason: &str,
    ) -> StoreResult<bool> {
        let row = self.working.issued.iter_mut().find(|r| r.ca_id == ca_id && r.serial_number == serial_number);
        Ok(row
            .map(|row| {
                if row.revoked_at.is_none() {
                    row.revoked_at = Some(at_secs);
                    row.revocation_reason = Some(reason.to_owned());
                }
            })
            .is_some())
    }
    async fn store_crl(&mut self, _: i64, _: &crate::pki::StoredCrl) -> StoreResult<bool> {
        not_faked("store_crl")
    }
}

#[async_trait]
impl Tx for MemoryTx {
    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.commit_tables();
        Ok(())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn begin(&self) -> StoreResult<Box<dyn Tx>> {
        Ok(Box::new(self.tables.begin()))
    }
    async fn write_erased(&self, job: ErasedJob) -> Result<Box<dyn Any + Send>, Error> {
        let mut tx = self.tables.begin();
        let value = job(&mut tx).await?;
        tx.commit_tables();
        Ok(value)
    }
    async fn ping(&self) -> StoreResult<()> {
        Ok(())
    }
    async fn close(&self) {}
}

#[async_trait]
impl WebhookReads for MemoryStore {
    async fn find_webhook(&self, _: &str, _: &str) -> StoreResult<Option<WebhookEndpoint>> {
        not_faked("find_webhook")
    }
    async fn list_webhooks(&self, _: &str, _: PageRequest) -> StoreResult<Page<WebhookEndpoint>> {
        not_faked("list_webhooks")
    }
    async fn find_integration(&self, _: &str, _: &str) -> StoreResult<Option<ExternalIntegration>> {
        not_faked("find_integration")
    }
    async fn list_integrations(&self, _: &str, _: PageRequest) -> StoreResult<Page<ExternalIntegration>> {
        not_faked("list_integrations")
    }
    async fn delivery_stats(&self, _: &str, _: &[String], _: i64) -> StoreResult<Vec<(String, DeliveryStats)>> {
        not_faked("delivery_stats")
    }
    async fn list_deliveries(&self, _: &str, _: &DeliveryFilter, _: PageRequest) -> StoreResult<Page<Delivery>> {
        not_faked("list_deliveries")
    }
    async fn find_delivery(&self, _: &str, _: &str) -> StoreResult<Option<Delivery>> {
        not_faked("find_delivery")
    }
    async fn has_undelivered_events(&self) -> StoreResult<bool> {
        not_faked("has_undelivered_events")
    }
    async fn has_due_deliveries(&self, _: i64) -> StoreResult<bool> {
        not_faked("has_due_deliveries")
    }
    async fn delivery_backlog(&self) -> StoreResult<(i64, Option<i64>)> {
        not_faked("delivery_backlog")
    }
}

#[async_trait]
impl WebhookWrites for MemoryTx {
    async fn insert_webhook(&mut self, _: &WebhookEndpoint) -> StoreResult<()> {
        not_faked("insert_webhook")
    }
    async fn update_webhook(&mut self, _: &WebhookEndpoint) -> StoreResult<bool> {
        not_faked("update_webhook")
    }
    async fn delete_webhook(&mut self, _: &str, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_webhook")
    }
    async fn insert_integration(&mut self, _: &ExternalIntegration) -> StoreResult<()> {
        not_faked("insert_integration")
    }
    async fn update_integration(&mut self, _: &ExternalIntegration) -> StoreResult<bool> {
        not_faked("update_integration")
    }
    async fn delete_integration(&mut self, _: &str, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_integration")
    }
    async fn insert_delivery(&mut self, _: &NewDelivery) -> StoreResult<Delivery> {
        not_faked("insert_delivery")
    }
    async fn claim_outbox_events(&mut self, _: i64) -> StoreResult<Vec<OutboxEvent>> {
        not_faked("claim_outbox_events")
    }
    async fn subscribers(&mut self, _: &[String]) -> StoreResult<Vec<Subscriber>> {
        not_faked("subscribers")
    }
    async fn insert_deliveries(&mut self, _: &[NewDelivery]) -> StoreResult<()> {
        not_faked("insert_deliveries")
    }
    async fn mark_events_processed(&mut self, _: &[i64], _: i64) -> StoreResult<()> {
        not_faked("mark_events_processed")
    }
    async fn claim_deliveries(&mut self, _: i64, _: &str, _: i64, _: i64, _: &[String]) -> StoreResult<Vec<Delivery>> {
        not_faked("claim_deliveries")
    }
    async fn extend_leases(&mut self, _: &str, _: i64, _: i64) -> StoreResult<u64> {
        not_faked("extend_leases")
    }
    async fn complete_deliveries(&mut self, _: &[Completion]) -> StoreResult<u64> {
        not_faked("complete_deliveries")
    }
    async fn record_target_outcomes(
        &mut self,
        _: &[(TargetKind, String)],
        _: &[(TargetKind, String)],
        _: i64,
    ) -> StoreResult<()> {
        not_faked("record_target_outcomes")
    }
    async fn disable_target(&mut self, _: TargetKind, _: &str, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("disable_target")
    }
}
