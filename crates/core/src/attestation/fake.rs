//! Attestation's port, faked whole over the in-memory store's tables, with the rules the SQL
//! stores keep: a nonce is consumed once, a disabled device keeps its status through an
//! attestation, one pending enrollment per device, policies oldest first, records newest first.

use async_trait::async_trait;

use super::devices::{Device, DISABLED};
use super::enrollment::PendingEnrollment;
use super::nonces::Nonce;
use super::policies::Policy;
use super::port::{AttestationReads, AttestationWrites};
use super::provision::AttestationRecord;
use super::trust::TrustRoot;
use crate::pagination::{Page, PageRequest};
use crate::plugins::TpmClock;
use crate::store_error::{StoreError, StoreResult};
use crate::testing::kernel::FakeTables;
use crate::testing::{MemoryStore, MemoryTx};

impl MemoryStore {
    /// Adds a device as it stands (its id is the caller's).
    pub fn put_device(&self, device: Device) {
        self.edit(|tables| tables.devices.push(device));
    }
    /// Adds an attestation policy as it stands.
    pub fn put_attestation_policy(&self, policy: Policy) {
        self.edit(|tables| tables.attestation_policies.push(policy));
    }
    /// Adds a nonce as it stands.
    pub fn put_nonce(&self, nonce: Nonce) {
        self.edit(|tables| tables.nonces.push(nonce));
    }
}

fn in_workspace<'a, T>(
    rows: &'a [T],
    workspace_id: &'a str,
    of: impl Fn(&T) -> &str + 'a,
) -> impl Iterator<Item = &'a T> {
    rows.iter().filter(move |row| of(row) == workspace_id)
}

#[async_trait]
impl AttestationReads for MemoryStore {
    async fn find_device(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Device>> {
        let tables = self.snapshot();
        let found = in_workspace(&tables.devices, workspace_id, |d| &d.workspace_id).find(|d| d.id == id).cloned();
        Ok(found)
    }
    async fn list_devices(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<Device>> {
        let tables = self.snapshot();
        let mine: Vec<Device> = in_workspace(&tables.devices, workspace_id, |d| &d.workspace_id).cloned().collect();
        let total = mine.len() as i64;
        let items = mine.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
        Ok(Page { items, total, total_exact: true, request: page })
    }
    async fn find_attestation_policy(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Policy>> {
        let tables = self.snapshot();
        let found =
            in_workspace(&tables.attestation_policies, workspace_id, |p| &p.workspace_id).find(|p| p.id == id).cloned();
        Ok(found)
    }
    async fn list_attestation_policies(&self, workspace_id: &str) -> StoreResult<Vec<Policy>> {
        let tables = self.snapshot();
        let mut mine: Vec<Policy> =
            in_workspace(&tables.attestation_policies, workspace_id, |p| &p.workspace_id).cloned().collect();
        mine.sort_by_key(|p| p.id);
        Ok(mine)
    }
    async fn list_trust_roots(&self, workspace_id: &str) -> StoreResult<Vec<TrustRoot>> {
        let tables = self.snapshot();
        let mut mine: Vec<TrustRoot> =
            in_workspace(&tables.trust_roots, workspace_id, |r| &r.workspace_id).cloned().collect();
        mine.sort_by_key(|r| r.id);
        Ok(mine)
    }
    async fn list_attestation_records(
        &self,
        workspace_id: &str,
        device_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<AttestationRecord>> {
        let tables = self.snapshot();
        let mut mine: Vec<AttestationRecord> =
            in_workspace(&tables.attestation_records, workspace_id, |r| &r.workspace_id)
                .filter(|r| r.device_id == device_id)
                .cloned()
                .collect();
        mine.sort_by_key(|row| std::cmp::Reverse(row.id));
        mine.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(mine)
    }
}

impl MemoryTx {
    fn device_mut(&mut self, workspace_id: &str, id: i64) -> Option<&mut Device> {
        self.working.devices.iter_mut().find(|d| d.workspace_id == workspace_id && d.id == id)
    }
}

#[async_trait]
impl AttestationWrites for MemoryTx {
    async fn insert_device(&mut self, device: &Device) -> StoreResult<Device> {
        let device = Device { id: self.working.next_id(), ..device.clone() };
        self.working.devices.push(device.clone());
        Ok(device)
    }
    async fn update_device(&mut self, device: &Device) -> StoreResult<bool> {
        let Some(stored) = self.device_mut(&device.workspace_id, device.id) else { return Ok(false) };
        *stored = Device { created_at: stored.created_at, ..device.clone() };
        Ok(true)
    }
    async fn delete_device(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let before = self.working.devices.len();
        self.working.devices.retain(|d| !(d.workspace_id == workspace_id && d.id == id));
        Ok(self.working.devices.len() < before)
    }
    async fn set_device_attestation(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: crate::attestation::devices::DeviceStatus,
        at: i64,
        clock: Option<TpmClock>,
    ) -> StoreResult<()> {
        if let Some(device) = self.device_mut(workspace_id, id) {
            if device.status != DISABLED {
                device.status = status;
            }
            device.last_attested_at = Some(at);
            if clock.is_some() {
                device.last_clock = clock;
            }
            device.updated_at = at;
        }
        Ok(())
    }
    async fn insert_attestation_policy(&mut self, policy: &Policy) -> StoreResult<Policy> {
        let policy = Policy { id: self.working.next_id(), ..policy.clone() };
        self.working.attestation_policies.push(policy.clone());
        Ok(policy)
    }
    async fn update_attestation_policy(&mut self, policy: &Policy) -> StoreResult<bool> {
        let stored = self
            .working
            .attestation_policies
            .iter_mut()
            .find(|p| p.workspace_id == policy.workspace_id && p.id == policy.id);
        let Some(stored) = stored else { return Ok(false) };
        *stored = Policy { created_at: stored.created_at, ..policy.clone() };
        Ok(true)
    }
    async fn delete_attestation_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let before = self.working.attestation_policies.len();
        self.working.attestation_policies.retain(|p| !(p.workspace_id == workspace_id && p.id == id));
        Ok(self.working.attestation_policies.len() < before)
    }
    async fn insert_nonce(&mut self, nonce: &Nonce) -> StoreResult<()> {
        if self.working.nonces.iter().any(|n| n.nonce == nonce.nonce) {
            return Err(StoreError::Unique("attestation_nonces.nonce".into()));
        }
        self.working.nonces.push(nonce.clone());
        Ok(())
    }
    async fn find_nonce(&mut self, workspace_id: &str, nonce: &str) -> StoreResult<Option<Nonce>> {
        Ok(self.working.nonces.iter().find(|n| n.workspace_id == workspace_id && n.nonce == nonce).cloned())
    }
    async fn consume_nonce(&mut self, workspace_id: &str, nonce: &str, at: i64) -> StoreResult<bool> {
        let unconsumed = self
            .working
            .nonces
            .iter_mut()
            .find(|n| n.workspace_id == workspace_id && n.nonce == nonce && n.consumed_at.is_none());
        let Some(unconsumed) = unconsumed else { return Ok(false) };
        unconsumed.consumed_at = Some(at);
        Ok(true)
    }
    async fn put_enrollment(&mut self, enrollment: &PendingEnrollment) -> StoreResult<()> {
        let enrollments = &mut self.working.enrollments;
        enrollments.retain(|e| !(e.workspace_id == enrollment.workspace_id && e.device_id == enrollment.device_id));
        enrollments.push(enrollment.clone());
        Ok(())
    }
    async fn take_enrollment(&mut self, workspace_id: &str, device_id: i64) -> StoreResult<Option<PendingEnrollment>> {
        let enrollments = &mut self.working.enrollments;
        let Some(at) = enrollments.iter().position(|e| e.workspace_id == workspace_id && e.device_id == device_id)
        else {
            return Ok(None);
        };
        Ok(Some(enrollments.remove(at)))
    }
    async fn insert_trust_root(&mut self, root: &TrustRoot) -> StoreResult<TrustRoot> {
        let root = TrustRoot { id: self.working.next_id(), ..root.clone() };
        self.working.trust_roots.push(root.clone());
        Ok(root)
    }
    async fn delete_trust_root(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let before = self.working.trust_roots.len();
        self.working.trust_roots.retain(|r| !(r.workspace_id == workspace_id && r.id == id));
        Ok(self.working.trust_roots.len() < before)
    }
    async fn insert_attestation_record(&mut self, record: &AttestationRecord) -> StoreResult<AttestationRecord> {
        let record = AttestationRecord { id: self.working.next_id(), ..record.clone() };
        self.working.attestation_records.push(record.clone());
        Ok(record)
    }
}
