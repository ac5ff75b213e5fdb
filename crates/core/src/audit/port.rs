//! The storage port of the audit log: the paged, filtered list, and the one way a row is
//! written. Rows are appended by `unit_of_work` in the change's own transaction.

use async_trait::async_trait;

use super::{AuditEntry, AuditFilter, NewAuditEntry};
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;

#[async_trait]
pub trait AuditReads: Send + Sync {
    async fn list_audit(
        &self,
        workspace_id: &str,
        filter: &AuditFilter,
        page: PageRequest,
    ) -> StoreResult<Page<AuditEntry>>;
}

/// The audit table is append-only: this port has no update or delete.
#[async_trait]
pub trait AuditWrites: Send {
    async fn insert_audit(&mut self, entry: &NewAuditEntry<'_>) -> StoreResult<()>;
}
