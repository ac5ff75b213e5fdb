//! What attestation uses, and nothing else of the service.

use std::sync::Arc;

use super::port::{AttestationStore, AttestationTx};
use crate::audit::Audit;
use crate::clock::{SharedClock, SharedEntropy};
use crate::error::Result;
use crate::issuance::IssuanceDeps;
use crate::plugins::service::PluginService;
use crate::unit_of_work::UnitOfWork;

/// Attestation's share of the service: the area's storage port, issuance's share (a device that
/// passes is issued its certificate), the plugin runtime (the verifier), the clock and entropy
/// (nonces). `Context::attestation_deps` hands it out.
#[derive(Clone)]
pub struct AttestationDeps {
    pub store: Arc<dyn AttestationStore>,
    pub issuance: IssuanceDeps,
    pub plugins: PluginService,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

impl AttestationDeps {
    pub fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub async fn change(
        &self,
        actor: Audit,
        workspace_id: Option<&str>,
    ) -> Result<UnitOfWork<'static, dyn AttestationTx>> {
        let tx = self.store.begin_attestation().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}
