//! A read-through cache in front of the [`AcmeStore`] for the two rows every ACME POST reads:
//! the directory's settings (by CA) and the signing account (by CA and account id).
//!
//! Why: each POST read both from the database before its handler ran, two of the ten or so
//! statements a request cost, each a hand-off to SQLite's connection thread (the profile in
//! docs/benchmarks.md, "ACME server against OpenBao"). Both rows change rarely.
//!
//! Staleness is [`crate::ttl_cache`]'s: a write through this replica (`put_directory`,
//! `update_account`) drops the entry at once; another replica's (a directory disabled, an
//! account deactivated or its key rolled over through another instance) is seen here after at
//! most [`TTL_MS`].

use std::sync::Arc;

use async_trait::async_trait;

use super::{
    Account, AcmeStore, Authorization, AuthorizationStatus, Challenge, ChallengeStatus, DirectoryConfig, EabKey,
    Identifier, Order, OrderStatus,
};
use crate::clock::SharedClock;
use crate::store_error::StoreResult;
use crate::ttl_cache::TtlMap;
pub use crate::ttl_cache::TTL_MS;

/// Wraps the store; every call but the cached reads goes straight through.
pub struct CachedAcmeStore {
    inner: Arc<dyn AcmeStore>,
    clock: SharedClock,
    directories: TtlMap<i64, DirectoryConfig>,
    accounts: TtlMap<(i64, String), Account>,
}

impl CachedAcmeStore {
    pub fn new(inner: Arc<dyn AcmeStore>, clock: SharedClock) -> Self {
        CachedAcmeStore { inner, clock, directories: TtlMap::default(), accounts: TtlMap::default() }
    }

    fn now(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }
}

#[async_trait]
impl AcmeStore for CachedAcmeStore {
    async fn directory(&self, ca_id: i64) -> StoreResult<Option<DirectoryConfig>> {
        self.directories.get_or_load(ca_id, self.now(), || self.inner.directory(ca_id)).await
    }

    async fn put_directory(&self, config: &DirectoryConfig) -> StoreResult<()> {
        let written = self.inner.put_directory(config).await;
        self.directories.forget(&config.ca_id);
        written
    }

    async fn spend_nonce(&self, nonce: &str, expires_at: i64) -> StoreResult<bool> {
        self.inner.spend_nonce(nonce, expires_at).await
    }
    async fn sweep_nonces(&self, now: i64) -> StoreResult<u64> {
        self.inner.sweep_nonces(now).await
    }

    async fn insert_eab_key(&self, key: &EabKey) -> StoreResult<()> {
        self.inner.insert_eab_key(key).await
    }
    async fn eab_key_by_key_id(&self, key_id: &str) -> StoreResult<Option<EabKey>> {
        self.inner.eab_key_by_key_id(key_id).await
    }
    async fn eab_keys(&self, workspace_id: &str) -> StoreResult<Vec<EabKey>> {
        self.inner.eab_keys(workspace_id).await
    }
    async fn revoke_eab_key(&self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool> {
        self.inner.revoke_eab_key(workspace_id, id, at).await
    }
    async fn bind_eab_key(&self, id: &str, account_id: &str) -> StoreResult<bool> {
        self.inner.bind_eab_key(id, account_id).await
    }
    async fn unbind_eab_key(&self, id: &str, account_id: &str) -> StoreResult<()> {
        self.inner.unbind_eab_key(id, account_id).await
    }

    async fn insert_account(&self, account: &Account) -> StoreResult<()> {
        self.inner.insert_account(account).await
    }
    async fn account(&self, ca_id: i64, id: &str) -> StoreResult<Option<Account>> {
        self.accounts.get_or_load((ca_id, id.to_owned()), self.now(), || self.inner.account(ca_id, id)).await
    }
    async fn account_in_workspace(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Account>> {
        self.inner.account_in_workspace(workspace_id, id).await
    }
    async fn account_by_thumbprint(&self, ca_id: i64, thumbprint: &str) -> StoreResult<Option<Account>> {
        self.inner.account_by_thumbprint(ca_id, thumbprint).await
    }
    async fn accounts(&self, workspace_id: &str) -> StoreResult<Vec<Account>> {
        self.inner.accounts(workspace_id).await
    }
    async fn update_account(&self, account: &Account) -> StoreResult<()> {
        let written = self.inner.update_account(account).await;
        self.accounts.forget(&(account.ca_id, account.id.clone()));
        written
    }

    async fn insert_order(&self, order: &Order) -> StoreResult<()> {
        self.inner.insert_order(order).await
    }
    async fn insert_order_with_authorizations(
        &self,
        order: &Order,
        authorizations: &[(Authorization, Vec<Challenge>)],
    ) -> StoreResult<()> {
        self.inner.insert_order_with_authorizations(order, authorizations).await
    }
    async fn order(&self, ca_id: i64, id: &str) -> StoreResult<Option<Order>> {
        self.inner.order(ca_id, id).await
    }
    async fn order_by_fingerprint(&self, ca_id: i64, fingerprint: &str) -> StoreResult<Option<Order>> {
        self.inner.order_by_fingerprint(ca_id, fingerprint).await
    }
    async fn update_order(&self, order: &Order) -> StoreResult<()> {
        self.inner.update_order(order).await
    }
    async fn update_order_from(&self, order: &Order, from: OrderStatus) -> StoreResult<bool> {
        self.inner.update_order_from(order, from).await
    }
    async fn order_by_cert_id(&self, ca_id: i64, cert_id: &str) -> StoreResult<Option<Order>> {
        self.inner.order_by_cert_id(ca_id, cert_id).await
    }
    async fn replacing_order(&self, ca_id: i64, cert_id: &str) -> StoreResult<Option<Order>> {
        self.inner.replacing_order(ca_id, cert_id).await
    }
    async fn count_orders_since(&self, account_id: &str, since: i64) -> StoreResult<i64> {
        self.inner.count_orders_since(account_id, since).await
    }
    async fn order_ids(&self, account_id: &str) -> StoreResult<Vec<String>> {
        self.inner.order_ids(account_id).await
    }

    async fn insert_authorization(&self, authz: &Authorization) -> StoreResult<()> {
        self.inner.insert_authorization(authz).await
    }
    async fn authorization(&self, ca_id: i64, id: &str) -> StoreResult<Option<Authorization>> {
        self.inner.authorization(ca_id, id).await
    }
    async fn authorization_by_id(&self, id: &str) -> StoreResult<Option<Authorization>> {
        self.inner.authorization_by_id(id).await
    }
    async fn reusable_authorization(
        &self,
        account_id: &str,
        identifier: &Identifier,
        wildcard: bool,
        now: i64,
    ) -> StoreResult<Option<Authorization>> {
        self.inner.reusable_authorization(account_id, identifier, wildcard, now).await
    }
    async fn update_authorization_status(&self, id: &str, status: AuthorizationStatus) -> StoreResult<()> {
        self.inner.update_authorization_status(id, status).await
    }
    async fn count_pending_authorizations(&self, account_id: &str, now: i64) -> StoreResult<i64> {
        self.inner.count_pending_authorizations(account_id, now).await
    }

    async fn insert_challenge(&self, challenge: &Challenge) -> StoreResult<()> {
        self.inner.insert_challenge(challenge).await
    }
    async fn challenge(&self, id: &str) -> StoreResult<Option<Challenge>> {
        self.inner.challenge(id).await
    }
    async fn challenges(&self, authz_id: &str) -> StoreResult<Vec<Challenge>> {
        self.inner.challenges(authz_id).await
    }
    async fn update_challenge(&self, challenge: &Challenge, from: ChallengeStatus) -> StoreResult<bool> {
        self.inner.update_challenge(challenge, from).await
    }
    async fn record_validation(
        &self,
        challenge: &Challenge,
        from: ChallengeStatus,
        authz_status: AuthorizationStatus,
    ) -> StoreResult<bool> {
        self.inner.record_validation(challenge, from, authz_status).await
    }
    async fn stale_processing_challenges(&self, before: i64) -> StoreResult<Vec<Challenge>> {
        self.inner.stale_processing_challenges(before).await
    }
}
