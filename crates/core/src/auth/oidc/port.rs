//! What OpenID Connect sign-in needs from outside the domain: the IdP over HTTP
//! ([`OidcTransport`], implemented by `trellis-egress`) and its own rows in the store
//! ([`OidcReads`] / [`OidcWrites`], implemented by `trellis-store`).

use async_trait::async_trait;

use crate::auth::{Role, User};
use crate::ids::{UserId, WorkspaceId};
use crate::store_error::StoreResult;

/// An answer from the IdP: the status and a bounded body.
#[derive(Debug, Clone)]
pub struct IdpAnswer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request to the IdP got no answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct IdpTransportError(pub String);

/// Outbound HTTP to the configured identity provider. The operator named the issuer, so its
/// implementation may reach private networks (an IdP on the LAN is normal); it never follows
/// redirects and bounds every body and every wait.
#[async_trait]
pub trait OidcTransport: Send + Sync {
    /// `GET url`, with `Authorization: Bearer` when `bearer` is given (userinfo).
    async fn get(&self, url: &str, bearer: Option<&str>) -> Result<IdpAnswer, IdpTransportError>;
    /// `POST url` with a form body, with HTTP Basic client authentication when `basic` is given.
    async fn post_form(
        &self,
        url: &str,
        basic: Option<(&str, &str)>,
        form: &[(&str, &str)],
    ) -> Result<IdpAnswer, IdpTransportError>;
}

/// The transport of a process without OIDC: reaches nothing.
pub struct NoOidcTransport;

#[async_trait]
impl OidcTransport for NoOidcTransport {
    async fn get(&self, _: &str, _: Option<&str>) -> Result<IdpAnswer, IdpTransportError> {
        Err(IdpTransportError("OpenID Connect is not configured".into()))
    }
    async fn post_form(
        &self,
        _: &str,
        _: Option<(&str, &str)>,
        _: &[(&str, &str)],
    ) -> Result<IdpAnswer, IdpTransportError> {
        Err(IdpTransportError("OpenID Connect is not configured".into()))
    }
}

/// A sign-in in flight, from the redirect to the IdP until its callback.
#[derive(Debug, Clone)]
pub struct LoginAttempt {
    pub state_digest: String,
    pub browser_digest: String,
    pub nonce: String,
    /// The PKCE verifier, sealed under the master key bound to `state_digest`.
    pub sealed_verifier: String,
    pub redirect: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// Where a membership came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipSource {
    /// Made in Trellis (CLI, workspace creation, the members API): the IdP sync never touches it.
    Manual,
    /// Made by the group mappings at a sign-in: re-synced at every sign-in.
    Oidc,
}

impl MembershipSource {
    pub fn as_str(self) -> &'static str {
        match self {
            MembershipSource::Manual => "manual",
            MembershipSource::Oidc => "oidc",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "manual" => Some(MembershipSource::Manual),
            "oidc" => Some(MembershipSource::Oidc),
            _ => None,
        }
    }
}

/// One of a user's memberships, with its source.
#[derive(Debug, Clone)]
pub struct Membership {
    pub workspace_id: WorkspaceId,
    pub role: Role,
    pub source: MembershipSource,
}

#[async_trait]
pub trait OidcReads: Send + Sync {
    async fn find_login_attempt(&self, state_digest: &str) -> StoreResult<Option<LoginAttempt>>;
    /// The user signed in as (issuer, subject), if any.
    async fn find_identity_user(&self, issuer: &str, subject: &str) -> StoreResult<Option<User>>;
    /// Whether `user_id` ever signed in through `issuer`.
    async fn has_identity(&self, user_id: &UserId, issuer: &str) -> StoreResult<bool>;
    async fn list_memberships(&self, user_id: &UserId) -> StoreResult<Vec<Membership>>;
}

#[async_trait]
pub trait OidcWrites: Send {
    /// Records a sign-in in flight (and sweeps the expired ones).
    async fn insert_login_attempt(&mut self, attempt: &LoginAttempt, now: i64) -> StoreResult<()>;
    /// Deletes the attempt if it is bound to this browser; true when this call consumed it
    /// (exactly one concurrent callback wins).
    async fn consume_login_attempt(&mut self, state_digest: &str, browser_digest: &str) -> StoreResult<bool>;
    async fn insert_user_identity(&mut self, issuer: &str, subject: &str, user_id: &UserId, at: i64)
        -> StoreResult<()>;
    async fn touch_user_identity(&mut self, issuer: &str, subject: &str, at: i64) -> StoreResult<()>;
    async fn set_first_name(&mut self, user_id: &UserId, first_name: &str, at: i64) -> StoreResult<()>;
    async fn add_sourced_member(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
        source: MembershipSource,
        at: i64,
    ) -> StoreResult<()>;
    /// Changes the role of an IdP-made membership; false when there is none.
    async fn set_oidc_member_role(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
    ) -> StoreResult<bool>;
    /// Removes an IdP-made membership (never a manual one); false when there is none.
    async fn remove_oidc_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<bool>;
    /// Sets (or clears) the user's current workspace.
    async fn set_current_workspace_opt(
        &mut self,
        user_id: &UserId,
        workspace_id: Option<&WorkspaceId>,
    ) -> StoreResult<()>;
}
