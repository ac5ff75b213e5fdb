//! The services' shared dependencies, built once at start and passed to every domain call.

use std::sync::Arc;

use crate::auth::LoginLimiter;
use crate::clock::{SharedClock, SharedEntropy};
use crate::config::Config;
use crate::crypto::MasterKey;
use crate::plugins::service::PluginService;
use crate::store::Store;

pub struct Context {
    pub config: Config,
    pub store: Store,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
    pub master_key: MasterKey,
    pub login_limiter: LoginLimiter,
    /// The plugin runtime (one engine per process).
    pub plugins: PluginService,
}

pub type SharedContext = Arc<Context>;

impl Context {
    pub fn new(
        config: Config,
        store: Store,
        clock: SharedClock,
        entropy: SharedEntropy,
        master_key: MasterKey,
        plugins: PluginService,
    ) -> Self {
        let login_limiter = LoginLimiter::new(config.login_max_failures, config.login_window);
        Context { config, store, clock, entropy, master_key, login_limiter, plugins }
    }

    pub fn now_millis(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    /// A fresh random identifier with a readable prefix, e.g. `ws_3f9c…`.
    pub fn new_id(&self, prefix: &str) -> String {
        format!("{prefix}{}", crate::clock::random_hex(self.entropy.as_ref(), 12))
    }
}
