//! The storage port of the event outbox: the workspace's feed, the append `unit_of_work`
//! makes with every change, and retention. (The delivery worker's claims on the outbox are
//! the webhooks area's port.)

use async_trait::async_trait;

use super::{NewEvent, OutboxEvent};
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;

#[async_trait]
pub trait EventReads: Send + Sync {
    async fn list_events(
        &self,
        workspace_id: &str,
        event_type: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<OutboxEvent>>;
}

#[async_trait]
pub trait EventWrites: Send {
    async fn insert_event(&mut self, event: &NewEvent<'_>) -> StoreResult<()>;
    /// Deletes up to `limit` events delivered (processed) before `before`; never an
    /// undelivered one. Returns how many went.
    async fn purge_delivered_events(&mut self, before: i64, limit: i64) -> StoreResult<u64>;
}

/// The outbox's retention: one batch of delivered events deleted and committed on its own, so
/// a long purge never holds the write slot.
#[async_trait]
pub trait OutboxRetention: Send + Sync {
    async fn purge_delivered_batch(&self, before: i64, limit: i64) -> StoreResult<u64>;
}
