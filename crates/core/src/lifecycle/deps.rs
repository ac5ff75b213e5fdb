//! What the work that spans areas uses: the areas' own shares, and nothing else of the service.

use std::sync::Arc;

use super::port::{LifecycleStore, LifecycleTx};
use crate::audit::Audit;
use crate::cas::service::CaDeps;
use crate::certificates::CertificateDeps;
use crate::clock::SharedClock;
use crate::crypto::MasterKey;
use crate::discovery::DiscoveryDeps;
use crate::error::Result;
use crate::issuance::IssuanceDeps;
use crate::plugins::service::PluginService;
use crate::unit_of_work::UnitOfWork;

/// The shares of the areas lifecycle combines (the CA registry, the inventory, discovery,
/// issuance), its own storage port, the plugin runtime and the master key (a revocation calls
/// the CA's connector), and the clock. `Context::lifecycle_deps` hands it out.
#[derive(Clone)]
pub struct LifecycleDeps {
    pub store: Arc<dyn LifecycleStore>,
    pub cas: CaDeps,
    pub certificates: CertificateDeps,
    pub discovery: DiscoveryDeps,
    pub issuance: IssuanceDeps,
    pub plugins: PluginService,
    pub master_key: MasterKey,
    pub clock: SharedClock,
}

impl LifecycleDeps {
    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub async fn change(
        &self,
        actor: Audit,
        workspace_id: Option<&str>,
    ) -> Result<UnitOfWork<'static, dyn LifecycleTx>> {
        let tx = self.store.begin_lifecycle().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, crate::clock::now_millis(self.clock.as_ref())))
    }
}
