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
use crate::webhooks::deliveries::{Delivery, DeliveryFilter};
use crate::webhooks::{DeliveryStats, ExternalIntegration, WebhookEndpoint};

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
    /// Webhook endpoints, integrations and deliveries (the port's rules are the webhooks fake's,
    /// `webhooks::fake`, over these rows).
    pub webhooks: Vec<WebhookEndpoint>,
    pub integrations: Vec<ExternalIntegration>,
    pub deliveries: Vec<crate::webhooks::fake::StoredDelivery>,
    next_id: i64,
}

fake_tables!(Tables);

impl crate::webhooks::fake::HasWebhookRows for Tables {
    fn webhook_rows(&mut self) -> crate::webhooks::fake::WebhookRows<'_> {
        crate::webhooks::fake::WebhookRows {
            webhooks: &mut self.webhooks,
            integrations: &mut self.integrations,
            deliveries: &mut self.deliveries,
            events: &mut self.events,
        }
    }
}

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

/// The webhooks port with the webhooks fake's rules (`webhooks::fake`) over these tables; its
/// writes come with `Working<Tables>` (`MemoryTx`) from the same fake.
#[async_trait]
impl WebhookReads for MemoryStore {
    async fn find_webhook(&self, workspace_id: &str, id: &str) -> StoreResult<Option<WebhookEndpoint>> {
        self.tables.find_webhook(workspace_id, id).await
    }
    async fn list_webhooks(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<WebhookEndpoint>> {
        self.tables.list_webhooks(workspace_id, page).await
    }
    async fn find_integration(&self, workspace_id: &str, id: &str) -> StoreResult<Option<ExternalIntegration>> {
        self.tables.find_integration(workspace_id, id).await
    }
    async fn list_integrations(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<ExternalIntegration>> {
        self.tables.list_integrations(workspace_id, page).await
    }
    async fn delivery_stats(
        &self,
        workspace_id: &str,
        target_ids: &[String],
        since: i64,
    ) -> StoreResult<Vec<(String, DeliveryStats)>> {
        self.tables.delivery_stats(workspace_id, target_ids, since).await
    }
    async fn list_deliveries(
        &self,
        workspace_id: &str,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Delivery>> {
        self.tables.list_deliveries(workspace_id, filter, page).await
    }
    async fn find_delivery(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Delivery>> {
        self.tables.find_delivery(workspace_id, id).await
    }
    async fn has_undelivered_events(&self) -> StoreResult<bool> {
        self.tables.has_undelivered_events().await
    }
    async fn has_due_deliveries(&self, now: i64) -> StoreResult<bool> {
        self.tables.has_due_deliveries(now).await
    }
    async fn delivery_backlog(&self) -> StoreResult<(i64, Option<i64>)> {
        self.tables.delivery_backlog().await
    }
}
