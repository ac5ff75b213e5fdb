//! `MemoryStore`: the storage ports over a few vectors, on the fakes' kernel (`super::kernel`:
//! a transaction works on a copy of the tables and swaps it in on commit).

use crate::ids::{ApiKeyId, UserId, WorkspaceId};
use std::any::Any;

use async_trait::async_trait;

use crate::attestation::devices::Device;
use crate::attestation::enrollment::PendingEnrollment;
use crate::attestation::nonces::Nonce;
use crate::attestation::policies::Policy as AttestationPolicy;
use crate::attestation::provision::AttestationRecord;
use crate::attestation::trust::TrustRoot;
use crate::audit::{AuditEntry, AuditFilter};
use crate::auth::{ApiKey, Invitation, Member, Role, User, Workspace};
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
    /// Tenancy: users, workspaces, memberships (workspace, user, role, joined at), invitations,
    /// API keys.
    pub users: Vec<User>,
    pub workspaces: Vec<Workspace>,
    pub memberships: Vec<(WorkspaceId, UserId, Role, i64)>,
    pub invitations: Vec<Invitation>,
    pub api_keys: Vec<ApiKey>,
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

fn member_of(tables: &Tables, workspace_id: &WorkspaceId, user_id: &UserId) -> Option<Member> {
    let (_, _, role, joined_at) = tables.memberships.iter().find(|(w, u, ..)| w == workspace_id && u == user_id)?;
    let user = tables.users.iter().find(|u| &u.id == user_id)?;
    Some(Member {
        user_id: user.id.clone(),
        email: user.email.clone(),
        first_name: user.first_name.clone(),
        role: *role,
        joined_at: *joined_at,
    })
}

#[async_trait]
impl AuthReads for MemoryStore {
    async fn count_users(&self) -> StoreResult<i64> {
        Ok(self.snapshot().users.len() as i64)
    }
    async fn find_user_credentials(&self, email: &str) -> StoreResult<Option<(User, String)>> {
        Ok(self.snapshot().users.into_iter().find(|u| u.email == email).map(|u| (u, String::new())))
    }
    async fn find_session_user(&self, _: &str, _: i64) -> StoreResult<Option<User>> {
        not_faked("find_session_user")
    }
    async fn find_membership(&self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Role>> {
        let tables = self.snapshot();
        Ok(tables.memberships.iter().find(|(w, u, ..)| w == workspace_id && u == user_id).map(|(_, _, r, _)| *r))
    }
    async fn find_workspace(&self, id: &str) -> StoreResult<Option<Workspace>> {
        Ok(self.snapshot().workspaces.into_iter().find(|w| w.id.as_str() == id))
    }
    async fn find_workspaces_by_name(&self, name: &str) -> StoreResult<Vec<Workspace>> {
        Ok(self.snapshot().workspaces.into_iter().filter(|w| w.name == name).collect())
    }
    async fn list_user_workspaces(&self, _: &str) -> StoreResult<Vec<Workspace>> {
        not_faked("list_user_workspaces")
    }
    async fn find_api_key_by_hash(&self, _: &str) -> StoreResult<Option<ApiKey>> {
        not_faked("find_api_key_by_hash")
    }
    async fn list_api_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>> {
        Ok(self.snapshot().api_keys.into_iter().filter(|k| k.workspace_id.as_str() == workspace_id).collect())
    }
    async fn list_members(&self, workspace_id: &WorkspaceId, page: PageRequest) -> StoreResult<Page<Member>> {
        let tables = self.snapshot();
        let mut members: Vec<Member> = tables
            .memberships
            .iter()
            .filter(|(w, ..)| w == workspace_id)
            .filter_map(|(w, u, ..)| member_of(&tables, w, u))
            .collect();
        members.sort_by(|a, b| b.joined_at.cmp(&a.joined_at).then(a.user_id.as_str().cmp(b.user_id.as_str())));
        Ok(window(members, page))
    }
    async fn list_invitations(
        &self,
        workspace_id: &WorkspaceId,
        now: i64,
        page: PageRequest,
    ) -> StoreResult<Page<Invitation>> {
        let mut invitations: Vec<Invitation> = self
            .snapshot()
            .invitations
            .into_iter()
            .filter(|i| &i.workspace_id == workspace_id && i.expires_at > now)
            .collect();
        invitations.sort_by_key(|i| std::cmp::Reverse(i.created_at));
        Ok(window(invitations, page))
    }
}

#[async_trait]
impl crate::auth::oidc::port::OidcReads for MemoryStore {
    async fn find_login_attempt(&self, _: &str) -> StoreResult<Option<crate::auth::oidc::port::LoginAttempt>> {
        not_faked("find_login_attempt")
    }
    async fn find_identity_user(&self, _: &str, _: &str) -> StoreResult<Option<User>> {
        not_faked("find_identity_user")
    }
    async fn has_identity(&self, _: &UserId, _: &str) -> StoreResult<bool> {
        not_faked("has_identity")
    }
    async fn list_memberships(&self, _: &UserId) -> StoreResult<Vec<crate::auth::oidc::port::Membership>> {
        not_faked("list_memberships")
    }
}

#[async_trait]
impl crate::auth::oidc::port::OidcWrites for MemoryTx {
    async fn insert_login_attempt(&mut self, _: &crate::auth::oidc::port::LoginAttempt, _: i64) -> StoreResult<()> {
        not_faked("insert_login_attempt")
    }
    async fn consume_login_attempt(&mut self, _: &str, _: &str) -> StoreResult<bool> {
        not_faked("consume_login_attempt")
    }
    async fn insert_user_identity(&mut self, _: &str, _: &str, _: &UserId, _: i64) -> StoreResult<()> {
        not_faked("insert_user_identity")
    }
    async fn touch_user_identity(&mut self, _: &str, _: &str, _: i64) -> StoreResult<()> {
        not_faked("touch_user_identity")
    }
    async fn set_first_name(&mut self, _: &UserId, _: &str, _: i64) -> StoreResult<()> {
        not_faked("set_first_name")
    }
    async fn add_sourced_member(
        &mut self,
        _: &WorkspaceId,
        _: &UserId,
        _: Role,
        _: crate::auth::oidc::port::MembershipSource,
        _: i64,
    ) -> StoreResult<()> {
        not_faked("add_sourced_member")
    }
    async fn set_oidc_member_role(&mut self, _: &WorkspaceId, _: &UserId, _: Role) -> StoreResult<bool> {
        not_faked("set_oidc_member_role")
    }
    async fn remove_oidc_member(&mut self, _: &WorkspaceId, _: &UserId) -> StoreResult<bool> {
        not_faked("remove_oidc_member")
    }
    async fn set_current_workspace_opt(&mut self, _: &UserId, _: Option<&WorkspaceId>) -> StoreResult<()> {
        not_faked("set_current_workspace_opt")
    }
}

#[async_trait]
impl AuthWrites for MemoryTx {
    async fn touch_api_key(&mut self, _: &str, _: i64) -> StoreResult<()> {
        not_faked("touch_api_key")
    }
    async fn insert_workspace(&mut self, workspace: &Workspace, _: Option<&str>) -> StoreResult<()> {
        self.working.workspaces.push(workspace.clone());
        Ok(())
    }
    async fn insert_user(&mut self, user: &User, _: &str) -> StoreResult<()> {
        if self.working.users.iter().any(|u| u.email == user.email) {
            return Err(StoreError::Unique("users.email".into()));
        }
        self.working.users.push(user.clone());
        Ok(())
    }
    async fn add_member(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
        at: i64,
    ) -> StoreResult<()> {
        if self.working.memberships.iter().any(|(w, u, ..)| w == workspace_id && u == user_id) {
            return Err(StoreError::Unique("workspace_members".into()));
        }
        self.working.memberships.push((workspace_id.clone(), user_id.clone(), role, at));
        Ok(())
    }
    async fn set_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()> {
        for user in self.working.users.iter_mut().filter(|u| &u.id == user_id) {
            user.current_workspace_id = Some(workspace_id.clone());
        }
        Ok(())
    }
    async fn insert_session(&mut self, _: &str, _: &str, _: i64, _: i64) -> StoreResult<()> {
        not_faked("insert_session")
    }
    async fn delete_session(&mut self, _: &str) -> StoreResult<()> {
        not_faked("delete_session")
    }
    async fn insert_api_key(&mut self, key: &ApiKey, _: &str) -> StoreResult<()> {
        self.working.api_keys.push(key.clone());
        Ok(())
    }
    async fn delete_api_key(&mut self, workspace_id: &WorkspaceId, id: &ApiKeyId) -> StoreResult<bool> {
        let before = self.working.api_keys.len();
        self.working.api_keys.retain(|k| !(&k.workspace_id == workspace_id && &k.id == id));
        Ok(self.working.api_keys.len() < before)
    }
    async fn lock_workspace(&mut self, workspace_id: &WorkspaceId) -> StoreResult<bool> {
        Ok(self.working.workspaces.iter().any(|w| &w.id == workspace_id))
    }
    async fn find_user_by_email(&mut self, email: &str) -> StoreResult<Option<User>> {
        Ok(self.working.users.iter().find(|u| u.email == email).cloned())
    }
    async fn find_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Member>> {
        Ok(member_of(&self.working, workspace_id, user_id))
    }
    async fn count_owners(&mut self, workspace_id: &WorkspaceId) -> StoreResult<i64> {
        Ok(self.working.memberships.iter().filter(|(w, _, r, _)| w == workspace_id && *r == Role::Owner).count() as i64)
    }
    async fn set_member_role(&mut self, workspace_id: &WorkspaceId, user_id: &UserId, role: Role) -> StoreResult<bool> {
        let mut changed = false;
        for membership in self.working.memberships.iter_mut().filter(|(w, u, ..)| w == workspace_id && u == user_id) {
            membership.2 = role;
            changed = true;
        }
        Ok(changed)
    }
    async fn remove_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<bool> {
        let before = self.working.memberships.len();
        self.working.memberships.retain(|(w, u, ..)| !(w == workspace_id && u == user_id));
        Ok(self.working.memberships.len() < before)
    }
    async fn delete_user_api_keys(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
    ) -> StoreResult<Vec<ApiKeyId>> {
        let made = |k: &ApiKey| &k.workspace_id == workspace_id && k.created_by.as_deref() == Some(user_id.as_str());
        let ids = self.working.api_keys.iter().filter(|k| made(k)).map(|k| k.id.clone()).collect();
        self.working.api_keys.retain(|k| !made(k));
        Ok(ids)
    }
    async fn leave_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()> {
        let other = self
            .working
            .memberships
            .iter()
            .find(|(w, u, ..)| u == user_id && w != workspace_id)
            .map(|(w, ..)| w.clone());
        for user in self.working.users.iter_mut().filter(|u| &u.id == user_id) {
            if user.current_workspace_id.as_ref() == Some(workspace_id) {
                user.current_workspace_id = other.clone();
            }
        }
        Ok(())
    }
    async fn put_invitation(&mut self, invitation: &Invitation) -> StoreResult<()> {
        self.working
            .invitations
            .retain(|i| !(i.workspace_id == invitation.workspace_id && i.email == invitation.email));
        self.working.invitations.push(invitation.clone());
        Ok(())
    }
    async fn delete_invitation(&mut self, workspace_id: &WorkspaceId, id: &str) -> StoreResult<Option<Invitation>> {
        let found = self.working.invitations.iter().position(|i| &i.workspace_id == workspace_id && i.id == id);
        Ok(found.map(|at| self.working.invitations.remove(at)))
    }
    async fn take_invitations(&mut self, email: &str, now: i64) -> StoreResult<Vec<Invitation>> {
        let (taken, kept) = std::mem::take(&mut self.working.invitations).into_iter().partition(|i| i.email == email);
        self.working.invitations = kept;
        Ok(taken.into_iter().filter(|i: &Invitation| i.expires_at > now).collect())
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
