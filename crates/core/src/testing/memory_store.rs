//! `MemoryStore`: the storage ports over a few vectors. A transaction works on a copy of the
//! tables and swaps it in on commit, so a change that fails midway leaves nothing behind,
//! as with a database.

use crate::ids::{ApiKeyId, UserId, WorkspaceId};
use std::any::Any;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::attestation::devices::Device;
use crate::attestation::enrollment::PendingEnrollment;
use crate::attestation::nonces::Nonce;
use crate::attestation::policies::Policy as AttestationPolicy;
use crate::attestation::provision::AttestationRecord;
use crate::attestation::trust::TrustRoot;
use crate::audit::{AuditEntry, AuditFilter, NewAuditEntry};
use crate::auth::{ApiKey, Role, User, Workspace};
use crate::cas::{CaFields, CaStats, CaStatus, CertificateAuthority, HealthStatus, IssuedRecord, StoredAuthority};
use crate::certificates::revocation_requests::RevocationRequest;
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
use crate::ports::*;
use crate::webhooks::deliveries::{Completion, Delivery, DeliveryFilter, NewDelivery};
use crate::webhooks::worker::Subscriber;
use crate::webhooks::{DeliveryStats, ExternalIntegration, TargetKind, WebhookEndpoint};

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
    /// Certificates' renewal claim stamps.
    pub renewal_claims: std::collections::HashMap<i64, i64>,
    next_id: i64,
}

impl Tables {
    fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }
}

#[derive(Clone, Default)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
}

impl MemoryStore {
    /// Adds a CA, as if it had been created.
    pub fn put_ca(&self, ca: CertificateAuthority) {
        if let Ok(mut tables) = self.tables.lock() {
            tables.cas.push(ca);
        }
    }

    /// Adds a certificate as it stands (ids are the caller's).
    pub fn put_certificate(&self, certificate: Certificate) {
        if let Ok(mut tables) = self.tables.lock() {
            tables.certificates.push(certificate);
        }
    }

    /// A copy of the committed tables, for assertions.
    pub fn snapshot(&self) -> Tables {
        self.tables.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

pub struct MemoryTx {
    tables: Arc<Mutex<Tables>>,
    working: Tables,
}

/// What `claim_renewals` and `claim_renewal_info_checks` consider at all.
fn renewable(c: &Certificate) -> bool {
    c.auto_renewal && !c.revoked && c.ca_id.is_some() && c.renewed_by_id.is_none()
}

fn not_faked(what: &str) -> ! {
    panic!("MemoryStore does not fake `{what}` yet: extend crates/core/src/testing")
}

#[async_trait]
impl CertificateReads for MemoryStore {
    async fn find_certificate(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>> {
        Ok(self.snapshot().certificates.into_iter().find(|c| c.workspace_id == workspace_id && c.id == id))
    }
    async fn list_certificates(
        &self,
        workspace_id: &str,
        _filter: &CertificateFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Certificate>> {
        let mut mine: Vec<Certificate> =
            self.snapshot().certificates.into_iter().filter(|c| c.workspace_id == workspace_id).collect();
        mine.reverse();
        let total = mine.len() as i64;
        let items = mine.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
        Ok(Page { items, total, total_exact: true, request: page })
    }
    async fn certificate_statistics(&self, _: &str, _: i64) -> StoreResult<Statistics> {
        not_faked("certificate_statistics")
    }
    async fn list_usage(&self, _: &str, _: Option<i64>, _: PageRequest) -> StoreResult<Page<UsageRecord>> {
        not_faked("list_usage")
    }
    async fn list_identities(&self, _: &str, _: PageRequest) -> StoreResult<Page<MachineIdentity>> {
        not_faked("list_identities")
    }
    async fn find_identity(&self, _: &str, _: i64) -> StoreResult<Option<MachineIdentity>> {
        not_faked("find_identity")
    }
    async fn list_revocation_requests(
        &self,
        _: &str,
        _: Option<&str>,
        _: PageRequest,
    ) -> StoreResult<Page<RevocationRequest>> {
        not_faked("list_revocation_requests")
    }
}

#[async_trait]
impl CertificateWrites for MemoryTx {
    async fn insert_certificate(&mut self, new: &NewCertificate<'_>) -> StoreResult<Certificate> {
        let parsed = new.parsed;
        let duplicate = self
            .working
            .certificates
            .iter()
            .any(|c| c.workspace_id == new.workspace_id && c.fingerprint_sha256 == parsed.fingerprint_sha256);
        if duplicate {
            return Err(StoreError::Unique("certificates.workspace_id, fingerprint_sha256".into()));
        }
        let certificate = Certificate {
            id: self.working.next_id(),
            workspace_id: new.workspace_id.into(),
            common_name: parsed.common_name.clone(),
            issuer: parsed.issuer.clone(),
            subject: parsed.subject.clone(),
            serial_number: parsed.serial_number.clone(),
            not_before: parsed.not_before,
            expires_at: parsed.expires_at,
            signature_algorithm: parsed.signature_algorithm.clone(),
            signature_hash: parsed.signature_hash.clone(),
            key_algorithm: parsed.key_algorithm.clone(),
            key_size: parsed.key_size,
            fingerprint_sha256: parsed.fingerprint_sha256.clone(),
            usage_category: parsed.usage_category.as_str().into(),
            subject_alt_names: parsed.subject_alt_names.clone(),
            is_ca: parsed.is_ca,
            issuance_source: new.issuance_source,
            auto_renewal: new.auto_renewal,
            location: new.location.map(str::to_owned),
            metadata: new.metadata.clone(),
            ca_id: None,
            machine_identity_id: None,
            revoked: false,
            revoked_at: None,
            revocation_reason: None,
            certificate_pem: parsed.pem.clone(),
            chain_pem: new.chain_pem.map(str::to_owned),
            issuance_template: new.issuance_template.map(str::to_owned),
            csr_pem: new.csr_pem.map(str::to_owned),
            renewed_by_id: None,
            renewal_error: None,
            has_private_key: new.private_key_sealed.is_some(),
            created_at: new.created_at,
            updated_at: new.created_at,
        };
        self.working.certificates.push(certificate.clone());
        Ok(certificate)
    }
    async fn find_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>> {
        Ok(self.working.certificates.iter().find(|c| c.workspace_id == workspace_id && c.id == id).cloned())
    }
    async fn find_private_key(&mut self, _: &str, _: i64) -> StoreResult<Option<String>> {
        not_faked("find_private_key")
    }
    async fn update_certificate(
        &mut self,
        workspace_id: &str,
        id: i64,
        update: &CertificateUpdate<'_>,
        now: i64,
    ) -> StoreResult<Option<Certificate>> {
        let Some(c) = self.working.certificates.iter_mut().find(|c| c.workspace_id == workspace_id && c.id == id)
        else {
            return Ok(None);
        };
        if let Some(auto_renewal) = update.auto_renewal {
            c.auto_renewal = auto_renewal;
        }
        if let Some(location) = update.location {
            c.location = location.map(str::to_owned);
        }
        if let Some((at, reason)) = update.revoke {
            c.revoked = true;
            c.revoked_at = Some(at);
            c.revocation_reason = Some(reason.to_owned());
        }
        c.updated_at = now;
        Ok(Some(c.clone()))
    }
    async fn delete_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let before = self.working.certificates.len();
        self.working.certificates.retain(|c| !(c.workspace_id == workspace_id && c.id == id));
        Ok(self.working.certificates.len() < before)
    }
    async fn insert_usage(&mut self, _: &UsageRecord) -> StoreResult<UsageRecord> {
        not_faked("insert_usage")
    }
    async fn insert_identity(&mut self, _: &MachineIdentity) -> StoreResult<MachineIdentity> {
        not_faked("insert_identity")
    }
    async fn delete_identity(&mut self, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_identity")
    }
    async fn claim_expired(&mut self, _: i64, _: i64) -> StoreResult<Vec<Certificate>> {
        not_faked("claim_expired")
    }
    async fn claim_expiring(&mut self, _: i64, _: i64) -> StoreResult<Vec<Certificate>> {
        not_faked("claim_expiring")
    }
    async fn insert_revocation_request(&mut self, _: &RevocationRequest) -> StoreResult<RevocationRequest> {
        not_faked("insert_revocation_request")
    }
    async fn find_revocation_request(&mut self, _: &str, _: i64) -> StoreResult<Option<RevocationRequest>> {
        not_faked("find_revocation_request")
    }
    async fn update_revocation_request(
        &mut self,
        _: &RevocationRequest,
        _: crate::certificates::revocation_requests::RevocationStatus,
    ) -> StoreResult<Option<RevocationRequest>> {
        not_faked("update_revocation_request")
    }
}

#[async_trait]
impl AuditReads for MemoryStore {
    async fn list_audit(
        &self,
        workspace_id: &str,
        _: &AuditFilter,
        page: PageRequest,
    ) -> StoreResult<Page<AuditEntry>> {
        let items: Vec<AuditEntry> =
            self.snapshot().audit.into_iter().filter(|a| a.workspace_id.as_deref() == Some(workspace_id)).collect();
        Ok(Page { total: items.len() as i64, items, total_exact: true, request: page })
    }
}

#[async_trait]
impl AuditWrites for MemoryTx {
    async fn insert_audit(&mut self, entry: &NewAuditEntry<'_>) -> StoreResult<()> {
        let id = self.working.next_id();
        self.working.audit.push(AuditEntry {
            id,
            workspace_id: entry.workspace_id.map(str::to_owned),
            actor_type: entry.actor_type.into(),
            actor_id: entry.actor_id.into(),
            action: entry.action.into(),
            target_type: entry.target_type.into(),
            target_id: entry.target_id.map(str::to_owned),
            request_id: entry.request_id.map(str::to_owned),
            details: entry.details.clone(),
            created_at: entry.created_at,
        });
        Ok(())
    }
}

#[async_trait]
impl EventReads for MemoryStore {
    async fn list_events(&self, _: &str, _: Option<&str>, _: PageRequest) -> StoreResult<Page<OutboxEvent>> {
        not_faked("list_events")
    }
}

#[async_trait]
impl EventWrites for MemoryTx {
    async fn insert_event(&mut self, event: &NewEvent<'_>) -> StoreResult<()> {
        let id = self.working.next_id();
        self.working.events.push(OutboxEvent {
            id,
            workspace_id: event.workspace_id.into(),
            event_type: event.event_type.as_str().into(),
            payload: event.payload.clone(),
            created_at: event.created_at,
            processed_at: None,
        });
        Ok(())
    }
    async fn purge_delivered_events(&mut self, _: i64, _: i64) -> StoreResult<u64> {
        not_faked("purge_delivered_events")
    }
}

#[async_trait]
impl AuthReads for MemoryStore {
    async fn count_users(&self) -> StoreResult<i64> {
        not_faked("count_users")
    }
    async fn find_user_credentials(&self, _: &str) -> StoreResult<Option<(User, String)>> {
        not_faked("find_user_credentials")
    }
    async fn find_session_user(&self, _: &str, _: i64) -> StoreResult<Option<User>> {
        not_faked("find_session_user")
    }
    async fn find_membership(&self, _: &WorkspaceId, _: &UserId) -> StoreResult<Option<Role>> {
        not_faked("find_membership")
    }
    async fn find_workspace(&self, _: &str) -> StoreResult<Option<Workspace>> {
        not_faked("find_workspace")
    }
    async fn list_user_workspaces(&self, _: &str) -> StoreResult<Vec<Workspace>> {
        not_faked("list_user_workspaces")
    }
    async fn find_api_key_by_hash(&self, _: &str) -> StoreResult<Option<ApiKey>> {
        not_faked("find_api_key_by_hash")
    }
    async fn list_api_keys(&self, _: &str) -> StoreResult<Vec<ApiKey>> {
        not_faked("list_api_keys")
    }
}

#[async_trait]
impl AuthWrites for MemoryTx {
    async fn touch_api_key(&mut self, _: &str, _: i64) -> StoreResult<()> {
        not_faked("touch_api_key")
    }
    async fn insert_workspace(&mut self, _: &Workspace, _: Option<&str>) -> StoreResult<()> {
        not_faked("insert_workspace")
    }
    async fn insert_user(&mut self, _: &User, _: &str) -> StoreResult<()> {
        not_faked("insert_user")
    }
    async fn add_member(&mut self, _: &WorkspaceId, _: &UserId, _: Role, _: i64) -> StoreResult<()> {
        not_faked("add_member")
    }
    async fn set_current_workspace(&mut self, _: &UserId, _: &WorkspaceId) -> StoreResult<()> {
        not_faked("set_current_workspace")
    }
    async fn insert_session(&mut self, _: &str, _: &str, _: i64, _: i64) -> StoreResult<()> {
        not_faked("insert_session")
    }
    async fn delete_session(&mut self, _: &str) -> StoreResult<()> {
        not_faked("delete_session")
    }
    async fn insert_api_key(&mut self, _: &ApiKey, _: &str) -> StoreResult<()> {
        not_faked("insert_api_key")
    }
    async fn delete_api_key(&mut self, _: &WorkspaceId, _: &ApiKeyId) -> StoreResult<bool> {
        not_faked("delete_api_key")
    }
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
}

#[async_trait]
impl CaReads for MemoryStore {
    async fn find_ca(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>> {
        Ok(self.snapshot().cas.into_iter().find(|ca| ca.workspace_id == workspace_id && ca.id == id))
    }
    async fn list_cas(&self, _: &str, _: PageRequest) -> StoreResult<Page<CertificateAuthority>> {
        not_faked("list_cas")
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
    async fn crl_state(&self, _: i64, _: bool) -> StoreResult<crate::cas::CrlState> {
        not_faked("crl_state")
    }
}

#[async_trait]
impl IssuanceReads for MemoryStore {
    async fn list_issuance_policies(&self, _: &str) -> StoreResult<Vec<IssuancePolicy>> {
        // No policies: every issuance proceeds.
        Ok(Vec::new())
    }
    async fn find_request(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>> {
        Ok(self.snapshot().requests.into_iter().find(|r| r.workspace_id == workspace_id && r.id == id))
    }
    async fn list_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<CertificateRequest>> {
        let mut items: Vec<_> = self
            .snapshot()
            .requests
            .into_iter()
            .filter(|r| r.workspace_id == workspace_id && status.is_none_or(|s| r.status.as_str() == s))
            .collect();
        items.reverse();
        Ok(Page { total: items.len() as i64, items, total_exact: true, request: page })
    }
    async fn list_templates(&self, _: &str) -> StoreResult<Vec<StoredTemplate>> {
        not_faked("list_templates")
    }
    async fn find_template(&self, _: &str, _: &str) -> StoreResult<Option<StoredTemplate>> {
        not_faked("find_template")
    }
    async fn issuing_backlog(&self) -> StoreResult<(i64, Option<i64>)> {
        let tables = self.snapshot();
        let issuing: Vec<_> =
            tables.requests.iter().filter(|r| r.status == crate::issuance::requests::ISSUING).collect();
        Ok((issuing.len() as i64, issuing.iter().filter_map(|r| r.issuing_since).min()))
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
    async fn revoke_issued(&mut self, _: i64, _: &str, _: i64, _: &str) -> StoreResult<bool> {
        not_faked("revoke_issued")
    }
    async fn store_crl(&mut self, _: i64, _: &crate::cas::StoredCrl) -> StoreResult<bool> {
        not_faked("store_crl")
    }
}

#[async_trait]
impl IssuanceWrites for MemoryTx {
    async fn insert_issuance_policy(&mut self, _: &IssuancePolicy) -> StoreResult<IssuancePolicy> {
        not_faked("insert_issuance_policy")
    }
    async fn delete_issuance_policy(&mut self, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_issuance_policy")
    }
    async fn set_issuance_policy_config(&mut self, _: &str, _: i64, _: &serde_json::Value) -> StoreResult<bool> {
        not_faked("set_issuance_policy_config")
    }
    async fn insert_request(&mut self, request: &CertificateRequest) -> StoreResult<CertificateRequest> {
        let id = self.working.next_id();
        let row = CertificateRequest { id, updated_at: request.created_at, ..request.clone() };
        self.working.requests.push(row.clone());
        Ok(row)
    }
    async fn find_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>> {
        Ok(self.working.requests.iter().find(|r| r.workspace_id == workspace_id && r.id == id).cloned())
    }
    async fn update_request(
        &mut self,
        request: &CertificateRequest,
        from: crate::issuance::requests::RequestStatus,
    ) -> StoreResult<Option<CertificateRequest>> {
        let working = &mut self.working;
        let Some(row) = working
            .requests
            .iter_mut()
            .find(|r| r.workspace_id == request.workspace_id && r.id == request.id && r.status == from)
        else {
            return Ok(None);
        };
        *row = CertificateRequest { created_at: row.created_at, ..request.clone() };
        working.request_leases.remove(&request.id);
        Ok(Some(row.clone()))
    }
    async fn claim_issuing(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateRequest>> {
        let working = &mut self.working;
        let mut claimed = Vec::new();
        for row in working.requests.iter_mut() {
            if claimed.len() as i64 >= limit {
                break;
            }
            if row.status == crate::issuance::requests::ISSUING && row.poll_at.is_some_and(|at| at <= now) {
                row.poll_at = Some(lease_until);
                row.poll_attempts += 1;
                working.request_leases.insert(row.id, lease_owner.to_owned());
                claimed.push(row.clone());
            }
        }
        Ok(claimed)
    }
    async fn finish_poll(
        &mut self,
        request: &CertificateRequest,
        lease_owner: &str,
    ) -> StoreResult<Option<CertificateRequest>> {
        if self.working.request_leases.get(&request.id).map(String::as_str) != Some(lease_owner) {
            return Ok(None);
        }
        self.update_request(request, crate::issuance::requests::ISSUING).await
    }
    async fn insert_template(&mut self, _: &StoredTemplate) -> StoreResult<StoredTemplate> {
        not_faked("insert_template")
    }
    async fn update_template(&mut self, _: &StoredTemplate) -> StoreResult<Option<StoredTemplate>> {
        not_faked("update_template")
    }
    async fn delete_template(&mut self, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_template")
    }
    async fn claim_renewals(
        &mut self,
        now: i64,
        default_window_ms: i64,
        claimed_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>> {
        let tables = &mut self.working;
        let mut due: Vec<Certificate> = tables
            .certificates
            .iter()
            .filter(|c| renewable(c) && c.expires_at > now)
            .filter(|c| match tables.renewal_info.get(&c.id).and_then(|info| info.0) {
                Some(renew_at) => renew_at <= now,
                // Template windows are not kept here: the default applies.
                None => c.expires_at - default_window_ms < now,
            })
            .filter(|c| tables.renewal_claims.get(&c.id).is_none_or(|at| *at < claimed_before))
            .filter(|c| {
                !tables
                    .requests
                    .iter()
                    .any(|r| r.renews_certificate_id == Some(c.id) && r.status == crate::issuance::requests::ISSUING)
            })
            .cloned()
            .collect();
        due.sort_by_key(|c| c.expires_at);
        due.truncate(usize::try_from(limit).unwrap_or(0));
        for c in &due {
            tables.renewal_claims.insert(c.id, now);
        }
        Ok(due)
    }
    async fn claim_renewal_info_checks(
        &mut self,
        now: i64,
        next_check: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>> {
        let tables = &mut self.working;
        let next = |c: &Certificate| tables.renewal_info.get(&c.id).and_then(|info| info.1);
        let mut due: Vec<Certificate> = tables
            .certificates
            .iter()
            .filter(|c| renewable(c) && c.expires_at > now && next(c).is_none_or(|at| at <= now))
            .cloned()
            .collect();
        due.sort_by_key(|c| (next(c).unwrap_or(0), c.id));
        due.truncate(usize::try_from(limit).unwrap_or(0));
        for c in &due {
            tables.renewal_info.entry(c.id).or_default().1 = Some(next_check);
        }
        Ok(due)
    }
    async fn record_renewal_info(
        &mut self,
        _: &str,
        id: i64,
        renew_at: Option<i64>,
        window: Option<(i64, i64)>,
        next_check: i64,
    ) -> StoreResult<()> {
        let info = self.working.renewal_info.entry(id).or_default();
        let kept = info.0.filter(|at| window.is_some_and(|(start, end)| (start..=end).contains(at)));
        *info = (kept.or(renew_at), Some(next_check));
        Ok(())
    }
    async fn record_renewal(&mut self, workspace_id: &str, old_id: i64, new_id: i64) -> StoreResult<()> {
        if let Some(c) = self.working.certificates.iter_mut().find(|c| c.workspace_id == workspace_id && c.id == old_id)
        {
            c.renewed_by_id = Some(new_id);
            c.auto_renewal = false;
            c.renewal_error = None;
        }
        Ok(())
    }
    async fn record_renewal_failure(&mut self, _: &str, _: i64, _: &str) -> StoreResult<()> {
        not_faked("record_renewal_failure")
    }
}

#[async_trait]
impl DiscoveryReads for MemoryStore {
    async fn find_scan(&self, _: &str, _: i64) -> StoreResult<Option<Scan>> {
        not_faked("find_scan")
    }
    async fn list_scans(&self, _: &str, _: Option<&str>, _: Option<&str>, _: PageRequest) -> StoreResult<Page<Scan>> {
        not_faked("list_scans")
    }
    async fn known_certificates(&self, _: &str, _: &[String]) -> StoreResult<Vec<crate::discovery::KnownCertificate>> {
        not_faked("known_certificates")
    }
}

#[async_trait]
impl DiscoveryWrites for MemoryTx {
    async fn insert_scan(&mut self, _: &Scan) -> StoreResult<Scan> {
        not_faked("insert_scan")
    }
    async fn tls_scans_counted(&mut self, _: &str, _: i64) -> StoreResult<Vec<Scan>> {
        not_faked("tls_scans_counted")
    }
    async fn claim_scan(&mut self, _: Option<i64>, _: i64, _: i64) -> StoreResult<Option<Scan>> {
        not_faked("claim_scan")
    }
    async fn update_scan_progress(&mut self, _: &Scan) -> StoreResult<bool> {
        not_faked("update_scan_progress")
    }
    async fn finish_scan(&mut self, _: &Scan) -> StoreResult<bool> {
        not_faked("finish_scan")
    }
    async fn cancel_scan(&mut self, _: &str, _: i64, _: i64) -> StoreResult<Option<Scan>> {
        not_faked("cancel_scan")
    }
    async fn find_certificate_by_fingerprint(&mut self, _: &str, _: &str) -> StoreResult<Option<Certificate>> {
        not_faked("find_certificate_by_fingerprint")
    }
    async fn link_certificate_ca(&mut self, _: &str, _: i64, _: i64, _: i64) -> StoreResult<bool> {
        not_faked("link_certificate_ca")
    }
    async fn has_usage(&mut self, _: &str, _: i64, _: &str, _: Option<i64>) -> StoreResult<bool> {
        not_faked("has_usage")
    }
}

#[async_trait]
impl Tx for MemoryTx {
    async fn commit(self: Box<Self>) -> StoreResult<()> {
        let mut tables = self.tables.lock().map_err(|_| StoreError::Database("poisoned".into()))?;
        let commits = tables.commits + 1;
        *tables = self.working;
        tables.commits = commits;
        Ok(())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn begin(&self) -> StoreResult<Box<dyn Tx>> {
        Ok(Box::new(MemoryTx { tables: self.tables.clone(), working: self.snapshot() }))
    }
    async fn write_erased(&self, job: ErasedJob) -> Result<Box<dyn Any + Send>, Error> {
        let mut tx = MemoryTx { tables: self.tables.clone(), working: self.snapshot() };
        let value = job(&mut tx).await?;
        Box::new(tx).commit().await?;
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

#[async_trait]
impl AttestationReads for MemoryStore {
    async fn find_device(&self, _: &str, _: i64) -> StoreResult<Option<Device>> {
        not_faked("find_device")
    }
    async fn list_devices(&self, _: &str, _: PageRequest) -> StoreResult<Page<Device>> {
        not_faked("list_devices")
    }
    async fn find_attestation_policy(&self, _: &str, _: i64) -> StoreResult<Option<AttestationPolicy>> {
        not_faked("find_attestation_policy")
    }
    async fn list_attestation_policies(&self, _: &str) -> StoreResult<Vec<AttestationPolicy>> {
        not_faked("list_attestation_policies")
    }
    async fn list_trust_roots(&self, _: &str) -> StoreResult<Vec<TrustRoot>> {
        not_faked("list_trust_roots")
    }
    async fn list_attestation_records(&self, _: &str, _: i64, _: i64) -> StoreResult<Vec<AttestationRecord>> {
        not_faked("list_attestation_records")
    }
}

#[async_trait]
impl AttestationWrites for MemoryTx {
    async fn insert_device(&mut self, _: &Device) -> StoreResult<Device> {
        not_faked("insert_device")
    }
    async fn update_device(&mut self, _: &Device) -> StoreResult<bool> {
        not_faked("update_device")
    }
    async fn delete_device(&mut self, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_device")
    }
    async fn set_device_attestation(
        &mut self,
        _: &str,
        _: i64,
        _: crate::attestation::devices::DeviceStatus,
        _: i64,
        _: Option<TpmClock>,
    ) -> StoreResult<()> {
        not_faked("set_device_attestation")
    }
    async fn insert_attestation_policy(&mut self, _: &AttestationPolicy) -> StoreResult<AttestationPolicy> {
        not_faked("insert_attestation_policy")
    }
    async fn update_attestation_policy(&mut self, _: &AttestationPolicy) -> StoreResult<bool> {
        not_faked("update_attestation_policy")
    }
    async fn delete_attestation_policy(&mut self, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_attestation_policy")
    }
    async fn insert_nonce(&mut self, _: &Nonce) -> StoreResult<()> {
        not_faked("insert_nonce")
    }
    async fn find_nonce(&mut self, _: &str, _: &str) -> StoreResult<Option<Nonce>> {
        not_faked("find_nonce")
    }
    async fn consume_nonce(&mut self, _: &str, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("consume_nonce")
    }
    async fn put_enrollment(&mut self, _: &PendingEnrollment) -> StoreResult<()> {
        not_faked("put_enrollment")
    }
    async fn take_enrollment(&mut self, _: &str, _: i64) -> StoreResult<Option<PendingEnrollment>> {
        not_faked("take_enrollment")
    }
    async fn insert_trust_root(&mut self, _: &TrustRoot) -> StoreResult<TrustRoot> {
        not_faked("insert_trust_root")
    }
    async fn delete_trust_root(&mut self, _: &str, _: i64) -> StoreResult<bool> {
        not_faked("delete_trust_root")
    }
    async fn insert_attestation_record(&mut self, _: &AttestationRecord) -> StoreResult<AttestationRecord> {
        not_faked("insert_attestation_record")
    }
}
