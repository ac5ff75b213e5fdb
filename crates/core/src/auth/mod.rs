//! Authentication and tenancy: users, workspaces, sessions, API keys, scopes.
//!
//! Every request resolves to a [`Caller`]: who acts, in which workspace, with which
//! scopes. Domain services take the caller and scope every query to its workspace.

mod deps;
#[cfg(test)]
pub(crate) mod fake;
pub mod members;
pub mod oidc;
pub mod port;
mod rate_limit;
mod service;
#[cfg(test)]
mod use_case_tests;

pub use self::deps::{AuthDeps, AuthSettings};
pub use self::members::{redeem_invitations, Invitation, Member};
pub use self::rate_limit::LoginLimiter;
// Who calls and with which scopes is the vocabulary of every area, kept in the leaf `caller`;
// named here too, where it has always been found.
pub use self::service::*;
pub use crate::caller::scope::{self, parse_scopes, Role, Scope};
pub use crate::caller::{Actor, Caller, KeyKind};

use crate::ids::{ApiKeyId, UserId, WorkspaceId};

#[derive(Debug, Clone)]
pub struct User {
    pub id: UserId,
    pub email: String,
    pub first_name: String,
    pub is_admin: bool,
    pub current_workspace_id: Option<WorkspaceId>,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: WorkspaceId,
    pub name: String,
    /// The caller's role in it, when listed for a user.
    pub role: Option<Role>,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub workspace_id: WorkspaceId,
    pub name: String,
    pub kind: KeyKind,
    /// The first characters of the key, enough to recognise it in a list.
    pub prefix: String,
    pub scopes: Vec<Scope>,
    pub created_by: Option<String>,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
}
