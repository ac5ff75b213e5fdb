//! The storage port of the certificate inventory: certificates, their usage records, machine
//! identities and revocation requests. Every method takes the workspace id and stays inside
//! it, except the expiry claims, which serve every workspace's announcements.

use async_trait::async_trait;

use super::revocation_requests::{RevocationRequest, RevocationStatus};
use super::{
    Certificate, CertificateFilter, CertificateUpdate, MachineIdentity, NewCertificate, Statistics, UsageRecord,
};
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;
use crate::unit_of_work::{ChangeTx, GroupCommit};

#[async_trait]
pub trait CertificateReads: Send + Sync {
    async fn find_certificate(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>>;
    async fn list_certificates(
        &self,
        workspace_id: &str,
        filter: &CertificateFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Certificate>>;
    async fn certificate_statistics(&self, workspace_id: &str, now: i64) -> StoreResult<Statistics>;
    /// Unrevoked certificates expiring in `(now, now + buckets × bucket_ms]`, counted per bucket
    /// of `bucket_ms` (bucket 0 ends at `now + bucket_ms`): `(bucket, count)` for non-empty ones.
    async fn expiry_histogram(
        &self,
        workspace_id: &str,
        now: i64,
        bucket_ms: i64,
        buckets: i64,
    ) -> StoreResult<Vec<(i64, i64)>>;
    async fn list_usage(
        &self,
        workspace_id: &str,
        certificate_id: Option<i64>,
        page: PageRequest,
    ) -> StoreResult<Page<UsageRecord>>;
    async fn list_identities(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<MachineIdentity>>;
    async fn list_revocation_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<RevocationRequest>>;
    async fn find_identity(&self, workspace_id: &str, id: i64) -> StoreResult<Option<MachineIdentity>>;
}

#[async_trait]
pub trait CertificateWrites: Send {
    async fn insert_certificate(&mut self, new: &NewCertificate<'_>) -> StoreResult<Certificate>;
    /// As [`CertificateWrites::insert_certificate`], for a certificate new by construction (just
    /// issued): the store may send the insert with the transaction's next statement (SQLite's
    /// group commit, one round trip fewer), so a failure of the insert, a duplicate
    /// fingerprint (`Unique`) included, may fail that next statement instead.
    async fn insert_new_certificate(&mut self, new: &NewCertificate<'_>) -> StoreResult<Certificate> {
        self.insert_certificate(new).await
    }
    async fn find_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>>;
    /// The sealed private key of a certificate, if the service holds one.
    async fn find_private_key(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<String>>;
    async fn update_certificate(
        &mut self,
        workspace_id: &str,
        id: i64,
        update: &CertificateUpdate<'_>,
        now: i64,
    ) -> StoreResult<Option<Certificate>>;
    async fn delete_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    async fn insert_usage(&mut self, record: &UsageRecord) -> StoreResult<UsageRecord>;
    async fn insert_identity(&mut self, identity: &MachineIdentity) -> StoreResult<MachineIdentity>;
    async fn delete_identity(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Claims up to `limit` certificates (of every workspace) that passed expiry and were not
    /// announced yet; a claimed row is never returned again, so replicas never announce twice.
    async fn claim_expired(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>>;
    /// As [`CertificateWrites::claim_expired`], for certificates entering the expiring window.
    async fn claim_expiring(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>>;
    async fn insert_revocation_request(&mut self, request: &RevocationRequest) -> StoreResult<RevocationRequest>;
    async fn find_revocation_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<RevocationRequest>>;
    /// Moves a request from state `from`; `None` when it was not in `from`.
    async fn update_revocation_request(
        &mut self,
        request: &RevocationRequest,
        from: RevocationStatus,
    ) -> StoreResult<Option<RevocationRequest>>;
}

/// A transaction the inventory's use cases write through: the area's writes, and (as a
/// [`ChangeTx`]) a unit of work's rows and the commit. The full transaction is one.
pub trait CertificateTx: ChangeTx + CertificateWrites {}

impl<T: ?Sized + ChangeTx + CertificateWrites> CertificateTx for T {}

/// What the inventory's use cases need of storage: its reads, transactions over its writes, and
/// group commit (registrations are the inventory's bulk write). The full store is one
/// (`crate::ports`).
#[async_trait]
pub trait CertificateStore: CertificateReads + GroupCommit<dyn CertificateTx> + Send + Sync {
    async fn begin_certificates(&self) -> StoreResult<Box<dyn CertificateTx>>;
}
