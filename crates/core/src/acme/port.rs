//! The ACME server's ports: its storage (`trellis-store`'s `DbAcme`, shared by every replica)
//! and the challenge validator (`trellis-egress`'s `HostValidator`, under the egress rules).

use async_trait::async_trait;

use super::{
    Account, Authorization, AuthorizationStatus, Challenge, ChallengeStatus, DirectoryConfig, EabKey, Identifier,
    Order, OrderStatus,
};
use crate::store_error::StoreResult;

#[async_trait]
pub trait AcmeStore: Send + Sync + 'static {
    async fn directory(&self, ca_id: i64) -> StoreResult<Option<DirectoryConfig>>;
    async fn put_directory(&self, config: &DirectoryConfig) -> StoreResult<()>;

    /// Records `nonce` (one Trellis issued, checked by its MAC, unexpired) as spent until
    /// `expires_at`: true exactly once across replicas (server.rs, "Nonces").
    async fn spend_nonce(&self, nonce: &str, expires_at: i64) -> StoreResult<bool>;
    /// Forgets the spent nonces that expired by `now` (an expired nonce is refused by its
    /// own expiry, its record is no longer needed). Returns how many went.
    async fn sweep_nonces(&self, now: i64) -> StoreResult<u64>;

    async fn insert_eab_key(&self, key: &EabKey) -> StoreResult<()>;
    async fn eab_key_by_key_id(&self, key_id: &str) -> StoreResult<Option<EabKey>>;
    async fn eab_keys(&self, workspace_id: &str) -> StoreResult<Vec<EabKey>>;
    async fn revoke_eab_key(&self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool>;
    /// Binds the key to `account_id` if it is unbound and not revoked: true exactly once.
    async fn bind_eab_key(&self, id: &str, account_id: &str) -> StoreResult<bool>;
    async fn unbind_eab_key(&self, id: &str, account_id: &str) -> StoreResult<()>;

    async fn insert_account(&self, account: &Account) -> StoreResult<()>;
    async fn account(&self, ca_id: i64, id: &str) -> StoreResult<Option<Account>>;
    async fn account_in_workspace(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Account>>;
    async fn account_by_thumbprint(&self, ca_id: i64, thumbprint: &str) -> StoreResult<Option<Account>>;
    async fn accounts(&self, workspace_id: &str) -> StoreResult<Vec<Account>>;
    async fn update_account(&self, account: &Account) -> StoreResult<()>;

    /// Inserts an order; a second order replacing the same certificate while another that is
    /// not `invalid` does fails with `StoreError::Unique` (the database enforces "once").
    async fn insert_order(&self, order: &Order) -> StoreResult<()>;
    /// newOrder's writes in one transaction: the new authorizations, their challenges, then
    /// the order (`StoreError::Unique` as [`AcmeStore::insert_order`]); all or nothing.
    async fn insert_order_with_authorizations(
        &self,
        order: &Order,
        authorizations: &[(Authorization, Vec<Challenge>)],
    ) -> StoreResult<()>;
    async fn order(&self, ca_id: i64, id: &str) -> StoreResult<Option<Order>>;
    async fn order_by_fingerprint(&self, ca_id: i64, fingerprint: &str) -> StoreResult<Option<Order>>;
    async fn update_order(&self, order: &Order) -> StoreResult<()>;
    /// Writes the order only if its stored status is still `from` (a compare-and-set: true when
    /// this caller moved it). Finalize claims a ready order this way, so two finalize requests
    /// racing on one order issue once.
    async fn update_order_from(&self, order: &Order, from: OrderStatus) -> StoreResult<bool>;
    /// The order of the directory's CA that issued the certificate of `cert_id` (RFC 9773).
    async fn order_by_cert_id(&self, ca_id: i64, cert_id: &str) -> StoreResult<Option<Order>>;
    /// The order replacing `cert_id` that is not stored `invalid`, if any.
    async fn replacing_order(&self, ca_id: i64, cert_id: &str) -> StoreResult<Option<Order>>;
    /// Orders the account created since `since` (rate limits).
    async fn count_orders_since(&self, account_id: &str, since: i64) -> StoreResult<i64>;
    async fn order_ids(&self, account_id: &str) -> StoreResult<Vec<String>>;

    async fn insert_authorization(&self, authz: &Authorization) -> StoreResult<()>;
    async fn authorization(&self, ca_id: i64, id: &str) -> StoreResult<Option<Authorization>>;
    /// By id alone (the validator, which knows the challenge only).
    async fn authorization_by_id(&self, id: &str) -> StoreResult<Option<Authorization>>;
    /// A valid authorization of the account for the identifier, unexpired at `now` (reuse).
    async fn reusable_authorization(
        &self,
        account_id: &str,
        identifier: &Identifier,
        wildcard: bool,
        now: i64,
    ) -> StoreResult<Option<Authorization>>;
    async fn update_authorization_status(&self, id: &str, status: AuthorizationStatus) -> StoreResult<()>;
    async fn count_pending_authorizations(&self, account_id: &str, now: i64) -> StoreResult<i64>;

    async fn insert_challenge(&self, challenge: &Challenge) -> StoreResult<()>;
    async fn challenge(&self, id: &str) -> StoreResult<Option<Challenge>>;
    async fn challenges(&self, authz_id: &str) -> StoreResult<Vec<Challenge>>;
    /// Moves the challenge from `from` to the challenge's status (a compare-and-set: true when
    /// this caller moved it).
    async fn update_challenge(&self, challenge: &Challenge, from: ChallengeStatus) -> StoreResult<bool>;
    /// A validation's outcome in one transaction: the challenge moves from `from` to its status
    /// and, only if it did, its authorization takes `authz_status`. True when this caller moved it.
    async fn record_validation(
        &self,
        challenge: &Challenge,
        from: ChallengeStatus,
        authz_status: AuthorizationStatus,
    ) -> StoreResult<bool>;
    /// Challenges left `processing` since before `before` (a replica stopped mid-validation).
    async fn stale_processing_challenges(&self, before: i64) -> StoreResult<Vec<Challenge>>;
}

/// What a validation attempt found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidationFailure {
    /// Refused by the egress rules or the connection failed.
    Connection(String),
    Dns(String),
    Tls(String),
    IncorrectResponse(String),
}

/// Validates challenges by reaching out to the identifier (RFC 8555 §8.3-8.4, RFC 8737).
#[async_trait]
pub trait ChallengeValidator: Send + Sync + 'static {
    /// GET `http://{identifier}:{port}/.well-known/acme-challenge/{token}` must answer
    /// `key_authorization`.
    async fn http01(
        &self,
        identifier: &Identifier,
        token: &str,
        key_authorization: &str,
    ) -> Result<(), ValidationFailure>;
    /// `_acme-challenge.{name}` must have a TXT record equal to `digest` (base64url SHA-256 of
    /// the key authorization).
    async fn dns01(&self, name: &str, digest: &str) -> Result<(), ValidationFailure>;
    /// A TLS handshake with ALPN `acme-tls/1` must present a certificate for the identifier
    /// with the acmeIdentifier extension holding SHA-256 of the key authorization.
    async fn tls_alpn01(&self, identifier: &Identifier, key_authorization: &str) -> Result<(), ValidationFailure>;
}

/// Validates nothing (no validator configured): every challenge fails with `connection`.
pub struct NoValidator;

#[async_trait]
impl ChallengeValidator for NoValidator {
    async fn http01(&self, _: &Identifier, _: &str, _: &str) -> Result<(), ValidationFailure> {
        Err(ValidationFailure::Connection("no challenge validator is configured".into()))
    }
    async fn dns01(&self, _: &str, _: &str) -> Result<(), ValidationFailure> {
        Err(ValidationFailure::Connection("no challenge validator is configured".into()))
    }
    async fn tls_alpn01(&self, _: &Identifier, _: &str) -> Result<(), ValidationFailure> {
        Err(ValidationFailure::Connection("no challenge validator is configured".into()))
    }
}
