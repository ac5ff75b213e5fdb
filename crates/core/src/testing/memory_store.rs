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
use crate::cas::CertificateAuthority;
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
use crate::plugins::fake::PluginVersionRow;
use crate::plugins::signatures::SigningKey;
use crate::plugins::{StoredBinding, StoredPlugin};
use crate::ports::*;
use crate::unit_of_work::{ChangeTx, GroupCommit};
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
    /// CAs (their port is faked in `cas::fake`), and when each was last claimed for a health
    /// check.
    pub cas: Vec<CertificateAuthority>,
    pub ca_health_checked_at: std::collections::HashMap<i64, i64>,
    /// Internal CAs' revocation markers and cached CRLs (the PKI's port is faked in `pki::fake`).
    pub crls: std::collections::HashMap<i64, crate::pki::CrlState>,
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
    /// The plugin registry (its port is faked in `plugins::fake`): component bytes by digest,
    /// versions, plugins, workspace bindings and the trust store of publisher keys.
    pub plugin_components: std::collections::HashMap<String, Vec<u8>>,
    pub plugin_versions: Vec<PluginVersionRow>,
    pub plugins: Vec<StoredPlugin>,
    pub plugin_bindings: Vec<StoredBinding>,
    pub plugin_signing_keys: Vec<SigningKey>,
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

impl Tx for MemoryTx {}

#[async_trait]
impl ChangeTx for MemoryTx {
    async fn insert_rows(&mut self, rows: &[NewRow<'_>]) -> StoreResult<()> {
        crate::ports::insert_each(self, rows).await
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.commit_tables();
        Ok(())
    }
}

#[async_trait]
impl GroupCommit<dyn Tx> for MemoryStore {
    async fn write_erased(&self, job: ErasedJob) -> Result<Box<dyn Any + Send>, Error> {
        let mut tx = self.tables.begin();
        let value = job(&mut tx).await?;
        tx.commit_tables();
        Ok(value)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn begin(&self) -> StoreResult<Box<dyn Tx>> {
        Ok(Box::new(self.tables.begin()))
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
