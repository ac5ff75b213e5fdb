//! The storage port of discovery scans: the scans themselves and what a scan needs to know of
//! the inventory (certificates by fingerprint, their CA link, their usage records). The
//! certificates a scan adds go through `certificates::inventory` and its port.

use async_trait::async_trait;

use super::{KnownCertificate, Scan, ScanFinding};
use crate::cas::port::CaReads;
use crate::certificates::port::CertificateWrites;
use crate::certificates::Certificate;
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;
use crate::unit_of_work::ChangeTx;

#[async_trait]
pub trait DiscoveryReads: Send + Sync {
    async fn find_scan(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Scan>>;
    async fn list_scans(
        &self,
        workspace_id: &str,
        scan_type: Option<&str>,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<Scan>>;
    /// The workspace's certificates among `fingerprints` (lowercase hex SHA-256): what a scan
    /// already knows, read for a whole page at once.
    async fn known_certificates(
        &self,
        workspace_id: &str,
        fingerprints: &[String],
    ) -> StoreResult<Vec<KnownCertificate>>;
    /// The certificates still in the inventory that scan `scan_id` recorded, by id, with what
    /// it did to each. A scan with no record (run before migration 0580) is read from the
    /// traces it left instead: the ones it added (`new`), and the known ones it updated or
    /// first saw at an endpoint (`updated`; their audit rows and usage records carry the
    /// scan's id), reading only rows written at or after `since` (the scan's creation) so the
    /// audit index bounds the search.
    async fn scan_findings(
        &self,
        workspace_id: &str,
        scan_id: i64,
        since: i64,
        page: PageRequest,
    ) -> StoreResult<Page<ScanFinding>>;
}

#[async_trait]
pub trait DiscoveryWrites: Send {
    async fn insert_scan(&mut self, scan: &Scan) -> StoreResult<Scan>;
    /// The workspace's `tls_endpoints` scans that count against its caps: pending or running
    /// ones, and those created after `since`. Locks the workspace's scans against another
    /// such read until this transaction ends (PostgreSQL: the workspace row; SQLite's writer is
    /// one at a time already), so two starts are judged one after the other.
    async fn tls_scans_counted(&mut self, workspace_id: &str, since: i64) -> StoreResult<Vec<Scan>>;
    /// Moves one scan to `running` (of any workspace): `only` if it is pending, else the oldest
    /// pending scan or one whose heartbeat is older than `stale_before`.
    async fn claim_scan(&mut self, only: Option<i64>, now: i64, stale_before: i64) -> StoreResult<Option<Scan>>;
    /// Writes counts and heartbeat; false when the scan is no longer running (cancelled).
    async fn update_scan_progress(&mut self, scan: &Scan) -> StoreResult<bool>;
    /// Writes the terminal state; false when the scan had already ended (cancelled).
    async fn finish_scan(&mut self, scan: &Scan) -> StoreResult<bool>;
    async fn cancel_scan(&mut self, workspace_id: &str, id: i64, at: i64) -> StoreResult<Option<Scan>>;
    async fn find_certificate_by_fingerprint(
        &mut self,
        workspace_id: &str,
        fingerprint_sha256: &str,
    ) -> StoreResult<Option<Certificate>>;
    /// Links a certificate without a CA to `ca_id`; false when it already had one.
    async fn link_certificate_ca(&mut self, workspace_id: &str, id: i64, ca_id: i64, at: i64) -> StoreResult<bool>;
    /// Records that scan `scan_id` came upon each certificate of `found` (by id, each at most
    /// once in the slice), with its outcome; a second record of a pair keeps the stronger
    /// outcome (`new` > `updated` > `unchanged`).
    async fn record_scan_certificates(
        &mut self,
        workspace_id: &str,
        scan_id: i64,
        found: &[(i64, super::FindingOutcome)],
        at: i64,
    ) -> StoreResult<()>;
    /// Whether the certificate has a usage record for `host` and `port`.
    async fn has_usage(
        &mut self,
        workspace_id: &str,
        certificate_id: i64,
        host: &str,
        port: Option<i64>,
    ) -> StoreResult<bool>;
}

/// A transaction a scan writes through: the area's writes, the inventory's (a scan adds the
/// certificates it finds through `certificates::inventory`), and (as a [`ChangeTx`]) a unit of
/// work's rows and the commit. The full transaction is one.
pub trait DiscoveryTx: ChangeTx + DiscoveryWrites + CertificateWrites {}

impl<T: ?Sized + ChangeTx + DiscoveryWrites + CertificateWrites> DiscoveryTx for T {}

/// What scans need of storage: the area's reads, the workspace's CAs (a found certificate is
/// linked to the CA that issued it), and transactions. The full store is one (`crate::ports`).
#[async_trait]
pub trait DiscoveryStore: DiscoveryReads + CaReads + Send + Sync {
    async fn begin_discovery(&self) -> StoreResult<Box<dyn DiscoveryTx>>;
}
