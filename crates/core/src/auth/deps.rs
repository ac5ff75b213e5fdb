//! What the area's use cases use, and nothing else of the service.

use std::sync::Arc;

use super::oidc::Provider;
use super::port::{AuthStore, AuthTx};
use super::{KeyGrant, LoginLimiter};
use crate::audit::Audit;
use crate::clock::{SharedClock, SharedEntropy};
use crate::crypto::MasterKey;
use crate::error::Result;
use crate::ttl_cache::TtlMap;
use crate::unit_of_work::UnitOfWork;

/// The operator's settings authentication reads.
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// Bootstrap administrator, created on start when no user exists.
    pub admin_email: Option<String>,
    pub admin_password: Option<String>,
    /// Only instance administrators (the break-glass accounts) may sign in with a password;
    /// everyone else signs in through the IdP.
    pub password_login_disabled: bool,
}

/// Authentication's share of the service: the area's storage port, its settings, the login
/// limiter, the identity provider when one is configured, the cache of API-key grants, the
/// master key, the clock and entropy. Cheap to clone (shared parts). `Context::auth_deps` hands
/// it out.
#[derive(Clone)]
pub struct AuthDeps {
    pub store: Arc<dyn AuthStore>,
    pub settings: Arc<AuthSettings>,
    pub login_limiter: Arc<LoginLimiter>,
    pub oidc: Option<Arc<Provider>>,
    /// API keys as authentication reads them, by digest: kept briefly (see
    /// [`crate::ttl_cache`]), forgotten by the use cases that change them.
    pub api_keys: Arc<TtlMap<String, KeyGrant>>,
    pub master_key: MasterKey,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

impl AuthDeps {
    pub fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    pub fn new_id(&self, prefix: &str) -> String {
        crate::clock::new_id(self.entropy.as_ref(), prefix)
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub async fn change(&self, actor: Audit, workspace_id: Option<&str>) -> Result<UnitOfWork<'static, dyn AuthTx>> {
        let tx = self.store.begin_auth().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}
