//! The storage port of the CA registry: the workspace's CA records, their statistics, and the
//! health checks replicas claim. An internal CA's keys and ledger are the PKI's (`pki::port`).

use async_trait::async_trait;

use crate::pki::port::PkiReads;
use crate::unit_of_work::ChangeTx;

use super::{CaFields, CaStats, CaStatus, CertificateAuthority, HealthStatus};
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;

#[async_trait]
pub trait CaReads: Send + Sync {
    async fn find_ca(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>>;
    async fn list_cas(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<CertificateAuthority>>;
    async fn ca_stats(&self, workspace_id: &str) -> StoreResult<CaStats>;
}

#[async_trait]
pub trait CaWrites: Send {
    async fn insert_ca(&mut self, workspace_id: &str, fields: &CaFields, at: i64) -> StoreResult<CertificateAuthority>;
    async fn find_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>>;
    async fn update_ca(
        &mut self,
        workspace_id: &str,
        id: i64,
        fields: &CaFields,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>>;
    async fn set_ca_health(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: CaStatus,
        health: HealthStatus,
        at: i64,
    ) -> StoreResult<()>;
    async fn touch_ca_sync(
        &mut self,
        workspace_id: &str,
        id: i64,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>>;
    /// Deletes the CA; its certificates stay and lose their link.
    async fn delete_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Claims up to `limit` CAs (of every workspace, `disconnected` ones excepted) not health-
    /// checked since `due_before`, stamping them checked at `now`: a claimed CA is not returned
    /// again within the interval, so replicas never probe one CA twice in it.
    async fn claim_ca_health_checks(
        &mut self,
        now: i64,
        due_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateAuthority>>;
}

/// A transaction the registry's use cases write through: the area's writes, and (as a
/// [`ChangeTx`]) a unit of work's rows and the commit. The full transaction is one.
pub trait CaTx: ChangeTx + CaWrites {}

impl<T: ?Sized + ChangeTx + CaWrites> CaTx for T {}

/// What the registry's use cases need of storage: its reads, the internal PKI's revocation list
/// (`GET /api/cas/revoked`), and transactions over its writes. The full store is one
/// (`crate::ports`).
#[async_trait]
pub trait CaStore: CaReads + PkiReads + Send + Sync {
    async fn begin_cas(&self) -> StoreResult<Box<dyn CaTx>>;
}
