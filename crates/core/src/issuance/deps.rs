//! What issuance uses, and nothing else of the service.

use std::sync::Arc;

use super::policies::IssuancePolicy;
use super::port::{IssuanceStore, IssuanceTx};
use crate::audit::Audit;
use crate::cas::service::CaDeps;
use crate::clock::{SharedClock, SharedEntropy};
use crate::crypto::MasterKey;
use crate::error::Result;
use crate::plugins::service::PluginService;
use crate::ttl_cache::TtlMap;
use crate::unit_of_work::UnitOfWork;

/// Issuance's share of the service: the area's storage port, the CA registry it issues through
/// (records, connectors, the CA cache), the plugin runtime (connectors and policies), the cache
/// of each workspace's policies, the master key (sealed keys and orders), the clock and entropy.
/// `Context::issuance_deps` hands it out.
#[derive(Clone)]
pub struct IssuanceDeps {
    pub store: Arc<dyn IssuanceStore>,
    pub cas: CaDeps,
    pub plugins: PluginService,
    /// Each workspace's issuance policies, in order, as issuance reads them: kept briefly (see
    /// [`crate::ttl_cache`]), forgotten when one is created or deleted.
    pub policies_cache: Arc<TtlMap<String, Vec<IssuancePolicy>>>,
    pub master_key: MasterKey,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

impl IssuanceDeps {
    pub fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    pub fn new_id(&self, prefix: &str) -> String {
        crate::clock::new_id(self.entropy.as_ref(), prefix)
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub async fn change(
        &self,
        actor: Audit,
        workspace_id: Option<&str>,
    ) -> Result<UnitOfWork<'static, dyn IssuanceTx>> {
        let tx = self.store.begin_issuance().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}
