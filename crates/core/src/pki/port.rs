//! The storage port of the internal PKI: CA key material (sealed), the ledger of what each
//! internal CA signed, and the CRL cached per CA. The unauthenticated CRL and OCSP endpoints
//! know only a CA's id, so some reads are by id alone.

use async_trait::async_trait;

use super::{CrlState, IssuedRecord, StoredAuthority, StoredCrl};
use crate::clock::UnixMillis;
use crate::error::Error;
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;

#[async_trait]
pub trait PkiReads: Send + Sync {
    /// An internal CA's key material, by CA id alone (the unauthenticated CRL and OCSP
    /// endpoints know only the id).
    async fn find_authority(&self, ca_id: i64) -> StoreResult<Option<StoredAuthority>>;
    async fn find_issued(&self, ca_id: i64, serial_number: &str) -> StoreResult<Option<IssuedRecord>>;
    /// Issued certificates of a CA after ledger id `after`, oldest first.
    async fn list_issued(&self, ca_id: i64, after: i64, limit: i64) -> StoreResult<Vec<IssuedRecord>>;
    /// Every revoked certificate of a CA that has not expired (what its CRL lists).
    async fn list_revoked(&self, ca_id: i64, now: UnixMillis) -> StoreResult<Vec<IssuedRecord>>;
    /// Revoked certificates of every internal CA of a workspace, newest first.
    async fn list_workspace_revoked(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<IssuedRecord>>;
    /// Ledger rows of the workspace's internal CAs with this serial (lowercase hex), whatever
    /// became of their CA records.
    async fn find_issued_by_serial(&self, workspace_id: &str, serial_number: &str) -> StoreResult<Vec<IssuedRecord>>;
    /// The CA's revocation marker and cached CRL (its DER only when `with_der`).
    async fn crl_state(&self, ca_id: i64, with_der: bool) -> StoreResult<CrlState>;
}

#[async_trait]
pub trait PkiWrites: Send {
    async fn insert_authority(&mut self, authority: &StoredAuthority) -> StoreResult<()>;
    async fn insert_issued(&mut self, record: &IssuedRecord) -> StoreResult<()>;
    /// Marks a serial revoked; false when the CA never issued it. Revoking twice keeps the
    /// first time and reason. A revocation that changed the row bumps the CA's revocation
    /// marker in the same transaction ([`CrlState::revocations`]).
    async fn revoke_issued(
        &mut self,
        ca_id: i64,
        serial_number: &str,
        at: UnixMillis,
        reason: &str,
    ) -> StoreResult<bool>;
    /// Keeps `crl` as the CA's cached CRL unless one with an equal or higher number is kept
    /// already (another replica's): CRL numbers never go back. True when stored.
    async fn store_crl(&mut self, ca_id: i64, crl: &StoredCrl) -> StoreResult<bool>;
}

/// What the internal PKI service needs of storage: the reads, and each of its writes as a
/// transaction of its own (group-committed with other jobs on SQLite). The full store is one
/// (`ports.rs`). A ledger row written inside a larger change (an issuance) goes through that
/// change's transaction instead (`pki::ledger`).
#[async_trait]
pub trait PkiStore: Send + Sync {
    fn reads(&self) -> &dyn PkiReads;
    async fn write_authority(&self, authority: StoredAuthority) -> Result<(), Error>;
    /// Inserts the ledger rows in one transaction; a row already there (the same CA and serial)
    /// counts as written.
    async fn write_issued(&self, records: Vec<IssuedRecord>) -> Result<(), Error>;
    /// [`PkiWrites::revoke_issued`] in a transaction of its own.
    async fn write_revocation(
        &self,
        ca_id: i64,
        serial_number: String,
        at: UnixMillis,
        reason: &'static str,
    ) -> Result<bool, Error>;
    /// [`PkiWrites::store_crl`] in a transaction of its own.
    async fn write_crl(&self, ca_id: i64, crl: StoredCrl) -> Result<bool, Error>;
}
