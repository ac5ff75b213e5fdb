//! The webhooks area's storage port: endpoints, integrations, the delivery log and the delivery
//! worker's claims on the outbox and the deliveries.
//!
//! `WebhookReads`/`WebhookWrites` are the area's share of the `Store`/`Tx` composites
//! (`crate::ports` re-exports them). The use cases of the delivery worker see storage only
//! through [`WebhookStore`] and [`WebhookTx`]: those reads and writes, plus the audit rows and
//! events a change records, which a [`UnitOfWork`](crate::unit_of_work::UnitOfWork) over the
//! transaction builds and writes ([`ChangeTx`]). The full store is one implementation (`crate::ports`);
//! the in-memory fake of the area's tests is the other.

use async_trait::async_trait;

use crate::events::OutboxEvent;
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;
use crate::unit_of_work::ChangeTx;

use super::deliveries::{Completion, Delivery, DeliveryFilter, NewDelivery};
use super::worker::Subscriber;
use super::{DeliveryStats, ExternalIntegration, TargetKind, WebhookEndpoint};

#[async_trait]
pub trait WebhookReads: Send + Sync {
    async fn find_webhook(&self, workspace_id: &str, id: &str) -> StoreResult<Option<WebhookEndpoint>>;
    async fn list_webhooks(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<WebhookEndpoint>>;
    async fn find_integration(&self, workspace_id: &str, id: &str) -> StoreResult<Option<ExternalIntegration>>;
    async fn list_integrations(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<ExternalIntegration>>;
    /// Deliveries of each target finished at or after `since`, by outcome.
    async fn delivery_stats(
        &self,
        workspace_id: &str,
        target_ids: &[String],
        since: i64,
    ) -> StoreResult<Vec<(String, DeliveryStats)>>;
    async fn list_deliveries(
        &self,
        workspace_id: &str,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Delivery>>;
    async fn find_delivery(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Delivery>>;
    /// Whether some outbox event waits for fan-out (a read: no write lock taken).
    async fn has_undelivered_events(&self) -> StoreResult<bool>;
    /// Whether some delivery is due at `now` and not leased (a read).
    async fn has_due_deliveries(&self, now: i64) -> StoreResult<bool>;
    /// Pending deliveries of every workspace, and when the oldest of them was created.
    async fn delivery_backlog(&self) -> StoreResult<(i64, Option<i64>)>;
}

#[async_trait]
pub trait WebhookWrites: Send {
    async fn insert_webhook(&mut self, endpoint: &WebhookEndpoint) -> StoreResult<()>;
    /// Writes every field but id, workspace and creation time; false when absent.
    async fn update_webhook(&mut self, endpoint: &WebhookEndpoint) -> StoreResult<bool>;
    /// Deletes the endpoint; its pending deliveries end `failed`.
    async fn delete_webhook(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool>;
    async fn insert_integration(&mut self, integration: &ExternalIntegration) -> StoreResult<()>;
    async fn update_integration(&mut self, integration: &ExternalIntegration) -> StoreResult<bool>;
    async fn delete_integration(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool>;
    async fn insert_delivery(&mut self, delivery: &NewDelivery) -> StoreResult<Delivery>;

    // ---- the delivery worker ------------------------------------------------------------
    /// Up to `limit` undelivered outbox events, oldest first, locked for this transaction
    /// (on PostgreSQL rows another transaction holds are skipped: replicas share the work).
    async fn claim_outbox_events(&mut self, limit: i64) -> StoreResult<Vec<OutboxEvent>>;
    /// The enabled webhook endpoints and integrations of these workspaces.
    async fn subscribers(&mut self, workspace_ids: &[String]) -> StoreResult<Vec<Subscriber>>;
    /// Inserts fanned-out deliveries; one that exists already (same event and target) is
    /// skipped.
    async fn insert_deliveries(&mut self, deliveries: &[NewDelivery]) -> StoreResult<()>;
    async fn mark_events_processed(&mut self, ids: &[i64], at: i64) -> StoreResult<()>;
    /// Leases up to `limit` pending deliveries due at `now` whose lease is free or expired,
    /// skipping `exclude_targets`, soonest due first.
    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
        exclude_targets: &[String],
    ) -> StoreResult<Vec<Delivery>>;
    /// Extends every live lease of `lease_owner` to `lease_until`.
    async fn extend_leases(&mut self, lease_owner: &str, now: i64, lease_until: i64) -> StoreResult<u64>;
    /// Applies finished attempts; a completion whose lease another worker took over is
    /// dropped. Returns how many applied.
    async fn complete_deliveries(&mut self, completions: &[Completion]) -> StoreResult<u64>;
    /// Targets whose attempt succeeded stop failing; those whose attempt failed are failing
    /// since `at` unless they already were.
    async fn record_target_outcomes(
        &mut self,
        succeeded: &[(TargetKind, String)],
        failed: &[(TargetKind, String)],
        at: i64,
    ) -> StoreResult<()>;
    /// Switches a target off with a reason; false when it was already off or is gone.
    async fn disable_target(&mut self, kind: TargetKind, id: &str, reason: &str, at: i64) -> StoreResult<bool>;
}

/// What the delivery worker needs of storage: the area's reads, and transactions over the
/// area's writes plus the audit rows and events of a change.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    fn reads(&self) -> &dyn WebhookReads;
    async fn begin(&self) -> StoreResult<Box<dyn WebhookTx>>;
}

/// A transaction of [`WebhookStore`]: the area's writes, and (as a [`ChangeTx`]) the rows of a
/// unit of work and the commit. Dropping it without [`ChangeTx::commit`] rolls it back.
pub trait WebhookTx: ChangeTx {
    fn webhooks(&mut self) -> &mut dyn WebhookWrites;
}
