//! The internal PKI's storage port, faked whole over the in-memory store's tables, with the
//! rules the SQL stores keep: one key per CA and one ledger row per (CA, serial); a revocation
//! keeps its first time and reason and bumps the CA's revocation marker once; a CRL lists the
//! revoked serials that have not expired; a kept CRL is never replaced by a lower number.

use async_trait::async_trait;

use super::port::{PkiReads, PkiWrites};
use super::{CrlState, IssuedRecord, StoredAuthority, StoredCrl};
use crate::clock::UnixMillis;
use crate::pagination::{Page, PageRequest};
use crate::store_error::{StoreError, StoreResult};
use crate::testing::kernel::FakeTables;
use crate::testing::memory_store::window;
use crate::testing::{MemoryStore, MemoryTx};

#[async_trait]
impl PkiReads for MemoryStore {
    async fn find_authority(&self, ca_id: i64) -> StoreResult<Option<StoredAuthority>> {
        Ok(self.snapshot().authorities.into_iter().find(|a| a.ca_id == ca_id))
    }
    async fn find_issued(&self, ca_id: i64, serial_number: &str) -> StoreResult<Option<IssuedRecord>> {
        Ok(self.snapshot().issued.into_iter().find(|r| r.ca_id == ca_id && r.serial_number == serial_number))
    }
    async fn list_issued(&self, ca_id: i64, after: i64, limit: i64) -> StoreResult<Vec<IssuedRecord>> {
        let mut rows: Vec<IssuedRecord> =
            self.snapshot().issued.into_iter().filter(|r| r.ca_id == ca_id && r.id > after).collect();
        rows.sort_by_key(|r| r.id);
        rows.truncate(limit.max(0) as usize);
        Ok(rows)
    }
    async fn list_revoked(&self, ca_id: i64, now: UnixMillis) -> StoreResult<Vec<IssuedRecord>> {
        let mut rows: Vec<IssuedRecord> = self
            .snapshot()
            .issued
            .into_iter()
            .filter(|r| r.ca_id == ca_id && r.revoked_at.is_some() && r.not_after > now)
            .collect();
        rows.sort_by_key(|r| r.id);
        Ok(rows)
    }
    async fn list_workspace_revoked(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<IssuedRecord>> {
        let mut rows: Vec<IssuedRecord> = self
            .snapshot()
            .issued
            .into_iter()
            .filter(|r| r.workspace_id == workspace_id && r.revoked_at.is_some())
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.id));
        Ok(window(rows, page))
    }
    async fn find_issued_by_serial(&self, workspace_id: &str, serial_number: &str) -> StoreResult<Vec<IssuedRecord>> {
        let mut rows: Vec<IssuedRecord> = self
            .snapshot()
            .issued
            .into_iter()
            .filter(|r| r.workspace_id == workspace_id && r.serial_number == serial_number)
            .collect();
        rows.sort_by_key(|r| r.id);
        Ok(rows)
    }
    async fn crl_state(&self, ca_id: i64, with_der: bool) -> StoreResult<CrlState> {
        let Some(mut state) = self.snapshot().crls.remove(&ca_id) else { return Ok(CrlState::default()) };
        if let (Some(cached), false) = (state.cached.as_mut(), with_der) {
            cached.der = Vec::new();
        }
        Ok(state)
    }
}

#[async_trait]
impl PkiWrites for MemoryTx {
    async fn insert_authority(&mut self, authority: &StoredAuthority) -> StoreResult<()> {
        if self.working.authorities.iter().any(|a| a.ca_id == authority.ca_id) {
            return Err(StoreError::Unique("internal_authorities".into()));
        }
        self.working.authorities.push(authority.clone());
        Ok(())
    }
    async fn insert_issued(&mut self, record: &IssuedRecord) -> StoreResult<()> {
        if self.working.issued.iter().any(|r| r.ca_id == record.ca_id && r.serial_number == record.serial_number) {
            return Err(StoreError::Unique("internal_issued_serial".into()));
        }
        let id = self.working.next_id();
        self.working.issued.push(IssuedRecord { id, ..record.clone() });
        Ok(())
    }
    async fn revoke_issued(
        &mut self,
        ca_id: i64,
        serial_number: &str,
        at: UnixMillis,
        reason: &str,
    ) -> StoreResult<bool> {
        let Some(row) = self.working.issued.iter_mut().find(|r| r.ca_id == ca_id && r.serial_number == serial_number)
        else {
            return Ok(false);
        };
        if row.revoked_at.is_none() {
            row.revoked_at = Some(at);
            row.revocation_reason = Some(reason.to_owned());
            self.working.crls.entry(ca_id).or_default().revocations += 1;
        }
        Ok(true)
    }
    async fn store_crl(&mut self, ca_id: i64, crl: &StoredCrl) -> StoreResult<bool> {
        let state = self.working.crls.entry(ca_id).or_default();
        if state.cached.as_ref().is_some_and(|kept| kept.number >= crl.number) {
            return Ok(false);
        }
        state.cached = Some(crl.clone());
        Ok(true)
    }
}
