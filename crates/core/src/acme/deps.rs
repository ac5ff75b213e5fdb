//! What the ACME server uses, and nothing else of the service.

use std::sync::Arc;

use super::{AcmeSettings, AcmeStore, ChallengeValidator};
use crate::audit::Audit;
use crate::clock::{SharedClock, SharedEntropy};
use crate::crypto::MasterKey;
use crate::error::Result;
use crate::issuance::port::{IssuanceStore, IssuanceTx};
use crate::issuance::IssuanceDeps;
use crate::lifecycle::LifecycleDeps;
use crate::plugins::service::PluginService;
use crate::unit_of_work::UnitOfWork;

/// The ACME server's share of the service: its own storage (none: `/acme` answers 404), the
/// challenge validator, its settings, issuance's share (finalize is an issuance run) and
/// lifecycle's (revokeCert), the store's issuance view (orders wait on certificate requests;
/// ARI links renewals), the plugin runtime, the master key, the clock and entropy. Cheap to clone:
/// a challenge is validated on a clone. `Context::acme_deps` hands it out.
#[derive(Clone)]
pub struct AcmeDeps {
    pub acme: Option<Arc<dyn AcmeStore>>,
    pub acme_validator: Arc<dyn ChallengeValidator>,
    pub settings: Arc<AcmeSettings>,
    pub store: Arc<dyn IssuanceStore>,
    pub issuance: IssuanceDeps,
    pub lifecycle: LifecycleDeps,
    pub plugins: PluginService,
    pub master_key: MasterKey,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

impl AcmeDeps {
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
