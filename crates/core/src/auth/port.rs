//! The storage port of authentication and tenancy: users and their password hashes,
//! workspaces, memberships, sessions, API keys and invitations. OpenID Connect sign-in keeps
//! its own rows behind `oidc::port`.
//!
//! Secrets never reach the store in the clear: sessions and API keys are found by the SHA-256
//! digest of their token, passwords by their Argon2id hash.

use async_trait::async_trait;

use super::oidc::port::{OidcReads, OidcWrites};
use super::{ApiKey, Invitation, Member, Role, User, Workspace};
use crate::ids::{ApiKeyId, UserId, WorkspaceId};
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;
use crate::unit_of_work::ChangeTx;

#[async_trait]
pub trait AuthReads: Send + Sync {
    async fn count_users(&self) -> StoreResult<i64>;
    /// The user and their Argon2id password hash.
    async fn find_user_credentials(&self, email: &str) -> StoreResult<Option<(User, String)>>;
    async fn find_session_user(&self, token_hash: &str, now: i64) -> StoreResult<Option<User>>;
    async fn find_membership(&self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Role>>;
    async fn find_workspace(&self, id: &str) -> StoreResult<Option<Workspace>>;
    async fn find_workspaces_by_name(&self, name: &str) -> StoreResult<Vec<Workspace>>;
    async fn list_user_workspaces(&self, user_id: &str) -> StoreResult<Vec<Workspace>>;
    async fn find_api_key_by_hash(&self, key_hash: &str) -> StoreResult<Option<ApiKey>>;
    async fn list_api_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>>;
    /// The workspace's members, newest first.
    async fn list_members(&self, workspace_id: &WorkspaceId, page: PageRequest) -> StoreResult<Page<Member>>;
    /// The workspace's invitations that have not expired at `now`, newest first.
    async fn list_invitations(
        &self,
        workspace_id: &WorkspaceId,
        now: i64,
        page: PageRequest,
    ) -> StoreResult<Page<Invitation>>;
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
    /// Serialises membership changes of one workspace until the transaction ends (the
    /// last-owner rule reads then writes); false when the workspace does not exist.
    async fn lock_workspace(&mut self, workspace_id: &WorkspaceId) -> StoreResult<bool>;
    async fn find_user_by_email(&mut self, email: &str) -> StoreResult<Option<User>>;
    async fn find_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Member>>;
    async fn count_owners(&mut self, workspace_id: &WorkspaceId) -> StoreResult<i64>;
    async fn set_member_role(&mut self, workspace_id: &WorkspaceId, user_id: &UserId, role: Role) -> StoreResult<bool>;
    async fn remove_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<bool>;
    /// Deletes the API keys `user_id` created in the workspace and answers their ids.
    async fn delete_user_api_keys(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
    ) -> StoreResult<Vec<ApiKeyId>>;
    /// Points the user's current workspace away from `workspace_id` (to another of their
    /// workspaces, or none) when it is the current one.
    async fn leave_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()>;
    /// Stores an invitation, replacing the one for the same workspace and e-mail.
    async fn put_invitation(&mut self, invitation: &Invitation) -> StoreResult<()>;
    async fn delete_invitation(&mut self, workspace_id: &WorkspaceId, id: &str) -> StoreResult<Option<Invitation>>;
    /// Removes every invitation for `email` and answers those not expired at `now`.
    async fn take_invitations(&mut self, email: &str, now: i64) -> StoreResult<Vec<Invitation>>;
}

/// A transaction the area's use cases write through: users, workspaces, keys and sessions, the
/// sign-in's identities and attempts, and (as a [`ChangeTx`]) a unit of work's rows and the
/// commit. The full transaction is one.
pub trait AuthTx: ChangeTx + AuthWrites + OidcWrites {}

impl<T: ?Sized + ChangeTx + AuthWrites + OidcWrites> AuthTx for T {}

/// What authentication, membership and sign-in need of storage. The full store is one
/// (`crate::ports`).
#[async_trait]
pub trait AuthStore: AuthReads + OidcReads + Send + Sync {
    async fn begin_auth(&self) -> StoreResult<Box<dyn AuthTx>>;
}
