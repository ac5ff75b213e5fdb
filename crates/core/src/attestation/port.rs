//! The storage port of device attestation: devices, attestation policies, nonces, pending
//! enrollments, trust roots and attestation records.

use async_trait::async_trait;

use super::devices::Device;
use super::enrollment::PendingEnrollment;
use super::nonces::Nonce;
use super::policies::Policy as AttestationPolicy;
use super::provision::AttestationRecord;
use super::trust::TrustRoot;
use crate::pagination::{Page, PageRequest};
use crate::plugins::TpmClock;
use crate::store_error::StoreResult;
use crate::unit_of_work::ChangeTx;

#[async_trait]
pub trait AttestationReads: Send + Sync {
    async fn find_device(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Device>>;
    async fn list_devices(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<Device>>;
    async fn find_attestation_policy(&self, workspace_id: &str, id: i64) -> StoreResult<Option<AttestationPolicy>>;
    /// Oldest first (policy choice takes the first match).
    async fn list_attestation_policies(&self, workspace_id: &str) -> StoreResult<Vec<AttestationPolicy>>;
    async fn list_trust_roots(&self, workspace_id: &str) -> StoreResult<Vec<TrustRoot>>;
    /// Newest first.
    async fn list_attestation_records(
        &self,
        workspace_id: &str,
        device_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<AttestationRecord>>;
}

#[async_trait]
pub trait AttestationWrites: Send {
    async fn insert_device(&mut self, device: &Device) -> StoreResult<Device>;
    /// Writes every field but id, workspace and creation time; false when absent.
    async fn update_device(&mut self, device: &Device) -> StoreResult<bool>;
    async fn delete_device(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Status and last attestation time (and, for a passing quote, its clock).
    async fn set_device_attestation(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: crate::attestation::devices::DeviceStatus,
        at: i64,
        clock: Option<TpmClock>,
    ) -> StoreResult<()>;
    async fn insert_attestation_policy(&mut self, policy: &AttestationPolicy) -> StoreResult<AttestationPolicy>;
    async fn update_attestation_policy(&mut self, policy: &AttestationPolicy) -> StoreResult<bool>;
    async fn delete_attestation_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    async fn insert_nonce(&mut self, nonce: &Nonce) -> StoreResult<()>;
    async fn find_nonce(&mut self, workspace_id: &str, nonce: &str) -> StoreResult<Option<Nonce>>;
    /// Marks the nonce consumed at `at` if nobody has; false when another consumption won.
    async fn consume_nonce(&mut self, workspace_id: &str, nonce: &str, at: i64) -> StoreResult<bool>;
    /// Stores the device's pending enrollment, replacing an earlier one.
    async fn put_enrollment(&mut self, enrollment: &PendingEnrollment) -> StoreResult<()>;
    /// Removes and returns the device's pending enrollment.
    async fn take_enrollment(&mut self, workspace_id: &str, device_id: i64) -> StoreResult<Option<PendingEnrollment>>;
    async fn insert_trust_root(&mut self, root: &TrustRoot) -> StoreResult<TrustRoot>;
    async fn delete_trust_root(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    async fn insert_attestation_record(&mut self, record: &AttestationRecord) -> StoreResult<AttestationRecord>;
}

/// A transaction attestation writes through: its records, and (as a [`ChangeTx`]) a unit of
/// work's rows and the commit. The full transaction is one.
pub trait AttestationTx: ChangeTx + AttestationWrites {}

impl<T: ?Sized + ChangeTx + AttestationWrites> AttestationTx for T {}

/// What attestation needs of storage. The full store is one (`crate::ports`).
#[async_trait]
pub trait AttestationStore: AttestationReads + Send + Sync {
    async fn begin_attestation(&self) -> StoreResult<Box<dyn AttestationTx>>;
}
