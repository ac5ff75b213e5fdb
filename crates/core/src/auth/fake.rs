//! Authentication's ports (`port` and `oidc::port`), faked whole over the in-memory store's
//! tables, with the rules the SQL stores keep: unique emails, memberships and identities;
//! sessions found by digest until they expire, a user's expired ones swept at their next
//! sign-in; a key's last use stamped at most once a minute; the IdP sync touching only the
//! memberships it made; and the stores' orders.

use async_trait::async_trait;

use super::oidc::port::{LoginAttempt, Membership, MembershipSource, OidcReads, OidcWrites};
use super::port::{AuthReads, AuthWrites};
use super::{ApiKey, Invitation, Member, Role, User, Workspace};
use crate::ids::{ApiKeyId, UserId, WorkspaceId};
use crate::pagination::{Page, PageRequest};
use crate::store_error::{StoreError, StoreResult};
use crate::testing::memory_store::{window, Tables};
use crate::testing::{MemoryStore, MemoryTx};

/// A row of `workspace_members`.
#[derive(Debug, Clone)]
pub struct MembershipRow {
    pub workspace_id: WorkspaceId,
    pub user_id: UserId,
    pub role: Role,
    pub joined_at: i64,
    pub source: MembershipSource,
}

impl MembershipRow {
    /// A membership made in Trellis (not by the IdP sync).
    pub fn manual(workspace_id: &str, user_id: &str, role: Role, joined_at: i64) -> Self {
        MembershipRow {
            workspace_id: workspace_id.into(),
            user_id: user_id.into(),
            role,
            joined_at,
            source: MembershipSource::Manual,
        }
    }

    fn is(&self, workspace_id: &WorkspaceId, user_id: &UserId) -> bool {
        &self.workspace_id == workspace_id && &self.user_id == user_id
    }
}

/// A row of `sessions`.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub token_hash: String,
    pub user_id: UserId,
    pub expires_at: i64,
}

/// A row of `user_identities`: who signed in as (issuer, subject).
#[derive(Debug, Clone)]
pub struct UserIdentityRow {
    pub issuer: String,
    pub subject: String,
    pub user_id: UserId,
    pub last_login_at: i64,
}

fn member_of(tables: &Tables, workspace_id: &WorkspaceId, user_id: &UserId) -> Option<Member> {
    let membership = tables.memberships.iter().find(|m| m.is(workspace_id, user_id))?;
    let user = tables.users.iter().find(|u| &u.id == user_id)?;
    Some(Member {
        user_id: user.id.clone(),
        email: user.email.clone(),
        first_name: user.first_name.clone(),
        role: membership.role,
        joined_at: membership.joined_at,
    })
}

fn insert_membership(tables: &mut Tables, row: MembershipRow) -> StoreResult<()> {
    if tables.memberships.iter().any(|m| m.is(&row.workspace_id, &row.user_id)) {
        return Err(StoreError::Unique("workspace_members".into()));
    }
    let known_user = tables.users.iter().any(|u| u.id == row.user_id);
    let known_workspace = tables.workspaces.iter().any(|w| w.id == row.workspace_id);
    if !known_user || !known_workspace {
        return Err(StoreError::Database("workspace_members: no such user or workspace".into()));
    }
    tables.memberships.push(row);
    Ok(())
}

fn set_current(tables: &mut Tables, user_id: &UserId, workspace_id: Option<&WorkspaceId>) {
    for user in tables.users.iter_mut().filter(|u| &u.id == user_id) {
        user.current_workspace_id = workspace_id.cloned();
    }
}

#[async_trait]
impl AuthReads for MemoryStore {
    async fn count_users(&self) -> StoreResult<i64> {
        Ok(self.snapshot().users.len() as i64)
    }
    async fn find_user_credentials(&self, email: &str) -> StoreResult<Option<(User, String)>> {
        let tables = self.snapshot();
        let Some(user) = tables.users.iter().find(|u| u.email == email).cloned() else { return Ok(None) };
        // A user made by OIDC sign-in has no password: the stores keep an empty hash.
        let hash = tables.password_hashes.get(&user.id).cloned().unwrap_or_default();
        Ok(Some((user, hash)))
    }
    async fn find_session_user(&self, token_hash: &str, now: i64) -> StoreResult<Option<User>> {
        let tables = self.snapshot();
        let Some(session) = tables.sessions.iter().find(|s| s.token_hash == token_hash && s.expires_at > now) else {
            return Ok(None);
        };
        Ok(tables.users.iter().find(|u| u.id == session.user_id).cloned())
    }
    async fn find_membership(&self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Role>> {
        Ok(self.snapshot().memberships.iter().find(|m| m.is(workspace_id, user_id)).map(|m| m.role))
    }
    async fn find_workspace(&self, id: &str) -> StoreResult<Option<Workspace>> {
        let found = self.snapshot().workspaces.into_iter().find(|w| w.id.as_str() == id);
        Ok(found.map(|w| Workspace { role: None, ..w }))
    }
    async fn find_workspaces_by_name(&self, name: &str) -> StoreResult<Vec<Workspace>> {
        let mut found: Vec<Workspace> = self
            .snapshot()
            .workspaces
            .into_iter()
            .filter(|w| w.name == name)
            .map(|w| Workspace { role: None, ..w })
            .collect();
        found.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(found)
    }
    async fn list_user_workspaces(&self, user_id: &str) -> StoreResult<Vec<Workspace>> {
        let tables = self.snapshot();
        let mut found: Vec<Workspace> = tables
            .memberships
            .iter()
            .filter(|m| m.user_id.as_str() == user_id)
            .filter_map(|m| {
                let workspace = tables.workspaces.iter().find(|w| w.id == m.workspace_id)?;
                Some(Workspace { role: Some(m.role), ..workspace.clone() })
            })
            .collect();
        found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(found)
    }
    async fn find_api_key_by_hash(&self, key_hash: &str) -> StoreResult<Option<ApiKey>> {
        let tables = self.snapshot();
        let id = tables.api_key_hashes.iter().find(|(_, hash)| hash.as_str() == key_hash).map(|(id, _)| id.clone());
        Ok(id.and_then(|id| tables.api_keys.iter().find(|k| k.id == id).cloned()))
    }
    async fn list_api_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>> {
        let mut keys: Vec<ApiKey> =
            self.snapshot().api_keys.into_iter().filter(|k| k.workspace_id.as_str() == workspace_id).collect();
        keys.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(keys)
    }
    async fn list_members(&self, workspace_id: &WorkspaceId, page: PageRequest) -> StoreResult<Page<Member>> {
        let tables = self.snapshot();
        let mut members: Vec<Member> = tables
            .memberships
            .iter()
            .filter(|m| &m.workspace_id == workspace_id)
            .filter_map(|m| member_of(&tables, &m.workspace_id, &m.user_id))
            .collect();
        members.sort_by(|a, b| b.joined_at.cmp(&a.joined_at).then_with(|| a.user_id.cmp(&b.user_id)));
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
        invitations.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(window(invitations, page))
    }
}

#[async_trait]
impl AuthWrites for MemoryTx {
    async fn touch_api_key(&mut self, id: &str, now: i64) -> StoreResult<()> {
        for key in self.working.api_keys.iter_mut().filter(|k| k.id.as_str() == id) {
            if key.last_used_at.is_none_or(|at| at < now - 60_000) {
                key.last_used_at = Some(now);
            }
        }
        Ok(())
    }
    async fn insert_workspace(&mut self, workspace: &Workspace, _: Option<&str>) -> StoreResult<()> {
        if self.working.workspaces.iter().any(|w| w.id == workspace.id) {
            return Err(StoreError::Unique("workspaces.id".into()));
        }
        self.working.workspaces.push(Workspace { role: None, ..workspace.clone() });
        Ok(())
    }
    async fn insert_user(&mut self, user: &User, password_hash: &str) -> StoreResult<()> {
        if self.working.users.iter().any(|u| u.email == user.email || u.id == user.id) {
            return Err(StoreError::Unique("users.email".into()));
        }
        // The stores insert without a current workspace: `set_current_workspace` sets it.
        self.working.users.push(User { current_workspace_id: None, ..user.clone() });
        self.working.password_hashes.insert(user.id.clone(), password_hash.to_string());
        Ok(())
    }
    async fn add_member(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
        at: i64,
    ) -> StoreResult<()> {
        insert_membership(&mut self.working, MembershipRow::manual(workspace_id.as_str(), user_id.as_str(), role, at))
    }
    async fn set_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()> {
        set_current(&mut self.working, user_id, Some(workspace_id));
        Ok(())
    }
    async fn insert_session(&mut self, token_hash: &str, user_id: &str, at: i64, expires_at: i64) -> StoreResult<()> {
        self.working.sessions.retain(|s| !(s.user_id.as_str() == user_id && s.expires_at <= at));
        if self.working.sessions.iter().any(|s| s.token_hash == token_hash) {
            return Err(StoreError::Unique("sessions.token_hash".into()));
        }
        self.working.sessions.push(SessionRow {
            token_hash: token_hash.to_string(),
            user_id: user_id.into(),
            expires_at,
        });
        Ok(())
    }
    async fn delete_session(&mut self, token_hash: &str) -> StoreResult<()> {
        self.working.sessions.retain(|s| s.token_hash != token_hash);
        Ok(())
    }
    async fn insert_api_key(&mut self, key: &ApiKey, key_hash: &str) -> StoreResult<()> {
        let taken = self.working.api_keys.iter().any(|k| k.id == key.id)
            || self.working.api_key_hashes.values().any(|hash| hash == key_hash);
        if taken {
            return Err(StoreError::Unique("api_keys".into()));
        }
        self.working.api_keys.push(key.clone());
        self.working.api_key_hashes.insert(key.id.clone(), key_hash.to_string());
        Ok(())
    }
    async fn delete_api_key(&mut self, workspace_id: &WorkspaceId, id: &ApiKeyId) -> StoreResult<bool> {
        let before = self.working.api_keys.len();
        self.working.api_keys.retain(|k| !(&k.workspace_id == workspace_id && &k.id == id));
        let deleted = self.working.api_keys.len() < before;
        if deleted {
            self.working.api_key_hashes.remove(id);
        }
        Ok(deleted)
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
        let owners =
            self.working.memberships.iter().filter(|m| &m.workspace_id == workspace_id && m.role == Role::Owner);
        Ok(owners.count() as i64)
    }
    async fn set_member_role(&mut self, workspace_id: &WorkspaceId, user_id: &UserId, role: Role) -> StoreResult<bool> {
        let mut changed = false;
        for membership in self.working.memberships.iter_mut().filter(|m| m.is(workspace_id, user_id)) {
            membership.role = role;
            changed = true;
        }
        Ok(changed)
    }
    async fn remove_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<bool> {
        let before = self.working.memberships.len();
        self.working.memberships.retain(|m| !m.is(workspace_id, user_id));
        Ok(self.working.memberships.len() < before)
    }
    async fn delete_user_api_keys(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
    ) -> StoreResult<Vec<ApiKeyId>> {
        let made = |k: &ApiKey| &k.workspace_id == workspace_id && k.created_by.as_deref() == Some(user_id.as_str());
        let ids: Vec<ApiKeyId> = self.working.api_keys.iter().filter(|k| made(k)).map(|k| k.id.clone()).collect();
        self.working.api_keys.retain(|k| !made(k));
        for id in &ids {
            self.working.api_key_hashes.remove(id);
        }
        Ok(ids)
    }
    async fn leave_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()> {
        let is_current = self
            .working
            .users
            .iter()
            .any(|u| &u.id == user_id && u.current_workspace_id.as_ref() == Some(workspace_id));
        if !is_current {
            return Ok(());
        }
        // The oldest remaining membership becomes current; none leaves the user without one.
        let oldest_other = self
            .working
            .memberships
            .iter()
            .filter(|m| &m.user_id == user_id && &m.workspace_id != workspace_id)
            .min_by(|a, b| (a.joined_at, &a.workspace_id).cmp(&(b.joined_at, &b.workspace_id)))
            .map(|m| m.workspace_id.clone());
        set_current(&mut self.working, user_id, oldest_other.as_ref());
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
        let (taken, kept): (Vec<Invitation>, Vec<Invitation>) =
            std::mem::take(&mut self.working.invitations).into_iter().partition(|i| i.email == email);
        self.working.invitations = kept;
        let mut live: Vec<Invitation> = taken.into_iter().filter(|i| i.expires_at > now).collect();
        live.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(live)
    }
}

#[async_trait]
impl OidcReads for MemoryStore {
    async fn find_login_attempt(&self, state_digest: &str) -> StoreResult<Option<LoginAttempt>> {
        Ok(self.snapshot().login_attempts.into_iter().find(|a| a.state_digest == state_digest))
    }
    async fn find_identity_user(&self, issuer: &str, subject: &str) -> StoreResult<Option<User>> {
        let tables = self.snapshot();
        let Some(identity) = tables.user_identities.iter().find(|i| i.issuer == issuer && i.subject == subject) else {
            return Ok(None);
        };
        Ok(tables.users.iter().find(|u| u.id == identity.user_id).cloned())
    }
    async fn has_identity(&self, user_id: &UserId, issuer: &str) -> StoreResult<bool> {
        Ok(self.snapshot().user_identities.iter().any(|i| &i.user_id == user_id && i.issuer == issuer))
    }
    async fn list_memberships(&self, user_id: &UserId) -> StoreResult<Vec<Membership>> {
        let mut rows: Vec<MembershipRow> =
            self.snapshot().memberships.into_iter().filter(|m| &m.user_id == user_id).collect();
        rows.sort_by(|a, b| (a.joined_at, &a.workspace_id).cmp(&(b.joined_at, &b.workspace_id)));
        Ok(rows
            .into_iter()
            .map(|m| Membership { workspace_id: m.workspace_id, role: m.role, source: m.source })
            .collect())
    }
}

#[async_trait]
impl OidcWrites for MemoryTx {
    async fn insert_login_attempt(&mut self, attempt: &LoginAttempt, now: i64) -> StoreResult<()> {
        self.working.login_attempts.retain(|a| a.expires_at > now);
        if self.working.login_attempts.iter().any(|a| a.state_digest == attempt.state_digest) {
            return Err(StoreError::Unique("oidc_login_attempts.state_digest".into()));
        }
        self.working.login_attempts.push(attempt.clone());
        Ok(())
    }
    async fn consume_login_attempt(&mut self, state_digest: &str, browser_digest: &str) -> StoreResult<bool> {
        let before = self.working.login_attempts.len();
        self.working.login_attempts.retain(|a| !(a.state_digest == state_digest && a.browser_digest == browser_digest));
        Ok(self.working.login_attempts.len() + 1 == before)
    }
    async fn insert_user_identity(
        &mut self,
        issuer: &str,
        subject: &str,
        user_id: &UserId,
        at: i64,
    ) -> StoreResult<()> {
        if self.working.user_identities.iter().any(|i| i.issuer == issuer && i.subject == subject) {
            return Err(StoreError::Unique("user_identities".into()));
        }
        self.working.user_identities.push(UserIdentityRow {
            issuer: issuer.to_string(),
            subject: subject.to_string(),
            user_id: user_id.clone(),
            last_login_at: at,
        });
        Ok(())
    }
    async fn touch_user_identity(&mut self, issuer: &str, subject: &str, at: i64) -> StoreResult<()> {
        for identity in self.working.user_identities.iter_mut().filter(|i| i.issuer == issuer && i.subject == subject) {
            identity.last_login_at = at;
        }
        Ok(())
    }
    async fn set_first_name(&mut self, user_id: &UserId, first_name: &str, _: i64) -> StoreResult<()> {
        for user in self.working.users.iter_mut().filter(|u| &u.id == user_id) {
            user.first_name = first_name.to_string();
        }
        Ok(())
    }
    async fn add_sourced_member(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
        source: MembershipSource,
        at: i64,
    ) -> StoreResult<()> {
        let row =
            MembershipRow { workspace_id: workspace_id.clone(), user_id: user_id.clone(), role, joined_at: at, source };
        insert_membership(&mut self.working, row)
    }
    async fn set_oidc_member_role(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
    ) -> StoreResult<bool> {
        let mut changed = false;
        let made_by_sync = |m: &MembershipRow| m.is(workspace_id, user_id) && m.source == MembershipSource::Oidc;
        for membership in self.working.memberships.iter_mut().filter(|m| made_by_sync(m)) {
            membership.role = role;
            changed = true;
        }
        Ok(changed)
    }
    async fn remove_oidc_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<bool> {
        let before = self.working.memberships.len();
        self.working.memberships.retain(|m| !(m.is(workspace_id, user_id) && m.source == MembershipSource::Oidc));
        Ok(self.working.memberships.len() < before)
    }
    async fn set_current_workspace_opt(
        &mut self,
        user_id: &UserId,
        workspace_id: Option<&WorkspaceId>,
    ) -> StoreResult<()> {
        set_current(&mut self.working, user_id, workspace_id);
        Ok(())
    }
}
