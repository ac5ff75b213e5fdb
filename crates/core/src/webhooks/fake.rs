//! An in-memory fake of the area's storage port ([`WebhookStore`]), for the unit tests of the
//! webhooks use cases. It implements all of the port with the store's semantics (workspace
//! scoping, leases, the once-per-(event, target) rule, completions dropped when the lease
//! moved on), on the fakes' kernel (`crate::testing::kernel`: transactions over a copy of the
//! tables, ids, audit rows and events).

use async_trait::async_trait;

use crate::audit::AuditEntry;
use crate::events::OutboxEvent;
use crate::pagination::{Page, PageRequest};
use crate::ports::{AuditWrites, EventWrites, NewRow};
use crate::store_error::{StoreError, StoreResult};
use crate::testing::kernel::{fake_tables, Committed, FakeTables, Working};
use crate::unit_of_work::ChangeTx;

use super::deliveries::{Completion, Delivery, DeliveryFilter, DeliveryStatus, NewDelivery};
use super::port::{WebhookReads, WebhookStore, WebhookTx, WebhookWrites};
use super::worker::Subscriber;
use super::{DeliveryStats, ExternalIntegration, TargetKind, WebhookEndpoint};

/// A delivery row with its lease.
#[derive(Debug, Clone)]
pub struct StoredDelivery {
    pub delivery: Delivery,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
}

#[derive(Debug, Clone, Default)]
pub struct WebhookTables {
    pub webhooks: Vec<WebhookEndpoint>,
    pub integrations: Vec<ExternalIntegration>,
    pub deliveries: Vec<StoredDelivery>,
    pub events: Vec<OutboxEvent>,
    pub audit: Vec<AuditEntry>,
    /// Transactions committed.
    pub commits: usize,
    next_id: i64,
}

fake_tables!(WebhookTables);

/// The rows the webhooks fake works on, borrowed from whichever tables hold them: its own
/// ([`WebhookTables`]) or `MemoryStore`'s, so the composite fake implements the area's port with
/// these same rules rather than leaving it out. The outbox is the kernel's.
pub struct WebhookRows<'a> {
    pub webhooks: &'a mut Vec<WebhookEndpoint>,
    pub integrations: &'a mut Vec<ExternalIntegration>,
    pub deliveries: &'a mut Vec<StoredDelivery>,
    pub events: &'a mut Vec<OutboxEvent>,
}

/// Tables that hold the webhooks area's rows.
pub trait HasWebhookRows: FakeTables {
    fn webhook_rows(&mut self) -> WebhookRows<'_>;
}

impl HasWebhookRows for WebhookTables {
    fn webhook_rows(&mut self) -> WebhookRows<'_> {
        WebhookRows {
            webhooks: &mut self.webhooks,
            integrations: &mut self.integrations,
            deliveries: &mut self.deliveries,
            events: &mut self.events,
        }
    }
}

impl WebhookRows<'_> {
    fn fail_pending(&mut self, workspace_id: &str, target_id: &str, error: &str, at: i64) {
        for row in self.deliveries.iter_mut().filter(|row| {
            row.delivery.workspace_id == workspace_id
                && row.delivery.target_id == target_id
                && row.delivery.status == DeliveryStatus::Pending
        }) {
            row.delivery.status = DeliveryStatus::Failed;
            row.delivery.error = Some(error.to_owned());
            row.delivery.completed_at = Some(at);
            row.lease_owner = None;
            row.lease_until = None;
        }
    }

    fn target_mut(&mut self, kind: TargetKind, id: &str) -> Option<Target<'_>> {
        match kind {
            TargetKind::Webhook => self.webhooks.iter_mut().find(|w| w.id == id).map(Target::Webhook),
            TargetKind::Integration => self.integrations.iter_mut().find(|i| i.id == id).map(Target::Integration),
        }
    }
}

enum Target<'a> {
    Webhook(&'a mut WebhookEndpoint),
    Integration(&'a mut ExternalIntegration),
}

impl Target<'_> {
    fn failing_since(&mut self) -> &mut Option<i64> {
        match self {
            Target::Webhook(w) => &mut w.failing_since,
            Target::Integration(i) => &mut i.failing_since,
        }
    }
}

fn page_of<T: Clone>(mut rows: Vec<T>, page: PageRequest) -> Page<T> {
    let total = rows.len() as i64;
    let start = usize::try_from(page.offset).unwrap_or(0).min(rows.len());
    let end = start.saturating_add(usize::try_from(page.limit).unwrap_or(0)).min(rows.len());
    let items = rows.drain(start..end).collect();
    Page { items, total, total_exact: true, request: page }
}

/// Newest first, as the store lists them (`created_at DESC, id DESC`).
fn newest_first<T: Clone>(rows: impl Iterator<Item = T>, key: impl Fn(&T) -> (i64, String)) -> Vec<T> {
    let mut rows: Vec<T> = rows.collect();
    rows.sort_by_key(|row| std::cmp::Reverse(key(row)));
    rows
}

#[derive(Clone, Default)]
pub struct MemoryWebhooks {
    tables: Committed<WebhookTables>,
}

impl MemoryWebhooks {
    fn with<T>(&self, f: impl FnOnce(&mut WebhookTables) -> T) -> T {
        self.tables.with(f)
    }

    pub fn put_webhook(&self, endpoint: WebhookEndpoint) {
        self.with(|t| t.webhooks.push(endpoint));
    }

    pub fn put_integration(&self, integration: ExternalIntegration) {
        self.with(|t| t.integrations.push(integration));
    }

    /// Replaces the endpoint with the same id.
    pub fn with_webhook(&self, endpoint: WebhookEndpoint) {
        self.with(|t| {
            if let Some(row) = t.webhooks.iter_mut().find(|w| w.id == endpoint.id) {
                *row = endpoint;
            }
        });
    }

    /// Replaces the integration with the same id.
    pub fn with_integration(&self, integration: ExternalIntegration) {
        self.with(|t| {
            if let Some(row) = t.integrations.iter_mut().find(|i| i.id == integration.id) {
                *row = integration;
            }
        });
    }

    /// Removes the endpoint as if deleted behind the worker's back (no deliveries touched).
    pub fn without_webhook(&self, id: &str) {
        self.with(|t| t.webhooks.retain(|w| w.id != id));
    }

    /// Appends an outbox event (as a committed unit of work would); returns its id.
    pub fn put_event(&self, workspace_id: &str, event_type: &str, data: serde_json::Value, at: i64) -> i64 {
        self.with(|t| {
            let id = t.next_id();
            let payload = crate::events::envelope(None, workspace_id, event_type, &data, at);
            t.events.push(OutboxEvent {
                id,
                workspace_id: workspace_id.into(),
                event_type: event_type.into(),
                payload,
                created_at: at,
                processed_at: None,
            });
            id
        })
    }

    /// A copy of the committed tables, for assertions.
    pub fn snapshot(&self) -> WebhookTables {
        self.tables.snapshot()
    }
}

impl<T: HasWebhookRows> Committed<T> {
    fn rows<R>(&self, f: impl FnOnce(WebhookRows<'_>) -> R) -> R {
        self.with(|t| f(t.webhook_rows()))
    }
}

#[async_trait]
impl<T: HasWebhookRows> WebhookReads for Committed<T> {
    async fn find_webhook(&self, workspace_id: &str, id: &str) -> StoreResult<Option<WebhookEndpoint>> {
        Ok(self.rows(|t| t.webhooks.iter().find(|w| w.workspace_id == workspace_id && w.id == id).cloned()))
    }

    async fn list_webhooks(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<WebhookEndpoint>> {
        let rows = self.rows(|t| {
            newest_first(t.webhooks.iter().filter(|w| w.workspace_id == workspace_id).cloned(), |w| {
                (w.created_at, w.id.clone())
            })
        });
        Ok(page_of(rows, page))
    }

    async fn find_integration(&self, workspace_id: &str, id: &str) -> StoreResult<Option<ExternalIntegration>> {
        Ok(self.rows(|t| t.integrations.iter().find(|i| i.workspace_id == workspace_id && i.id == id).cloned()))
    }

    async fn list_integrations(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<ExternalIntegration>> {
        let rows = self.rows(|t| {
            newest_first(t.integrations.iter().filter(|i| i.workspace_id == workspace_id).cloned(), |i| {
                (i.created_at, i.id.clone())
            })
        });
        Ok(page_of(rows, page))
    }

    async fn delivery_stats(
        &self,
        workspace_id: &str,
        target_ids: &[String],
        since: i64,
    ) -> StoreResult<Vec<(String, DeliveryStats)>> {
        Ok(self.rows(|t| {
            let mut out: Vec<(String, DeliveryStats)> = Vec::new();
            for d in t.deliveries.iter().map(|row| &row.delivery).filter(|d| {
                d.workspace_id == workspace_id
                    && d.completed_at.is_some_and(|at| at >= since)
                    && target_ids.contains(&d.target_id)
            }) {
                let index = match out.iter().position(|(id, _)| *id == d.target_id) {
                    Some(index) => index,
                    None => {
                        out.push((d.target_id.clone(), DeliveryStats::default()));
                        out.len() - 1
                    }
                };
                match d.status {
                    DeliveryStatus::Success => out[index].1.succeeded += 1,
                    DeliveryStatus::Failed => out[index].1.failed += 1,
                    DeliveryStatus::Pending => {}
                }
            }
            out
        }))
    }

    async fn list_deliveries(
        &self,
        workspace_id: &str,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Delivery>> {
        let rows = self.rows(|t| {
            let matching = t.deliveries.iter().map(|row| &row.delivery).filter(|d| {
                d.workspace_id == workspace_id
                    && filter.target_ids.iter().all(|id| *id == d.target_id)
                    && filter.status.as_deref().filter(|s| !s.is_empty()).is_none_or(|s| d.status.as_str() == s)
                    && filter.event_type.as_deref().filter(|e| !e.is_empty()).is_none_or(|e| d.event_type == e)
            });
            newest_first(matching.cloned(), |d| (d.created_at, d.id.clone()))
        });
        Ok(page_of(rows, page))
    }

    async fn find_delivery(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Delivery>> {
        Ok(self.rows(|t| {
            t.deliveries.iter().map(|row| &row.delivery).find(|d| d.workspace_id == workspace_id && d.id == id).cloned()
        }))
    }

    async fn has_undelivered_events(&self) -> StoreResult<bool> {
        Ok(self.rows(|t| t.events.iter().any(|e| e.processed_at.is_none())))
    }

    async fn has_due_deliveries(&self, now: i64) -> StoreResult<bool> {
        Ok(self.rows(|t| t.deliveries.iter().any(|row| due(row, now))))
    }

    async fn delivery_backlog(&self) -> StoreResult<(i64, Option<i64>)> {
        Ok(self.rows(|t| {
            let pending = t.deliveries.iter().map(|row| &row.delivery).filter(|d| d.status == DeliveryStatus::Pending);
            let (count, oldest) = pending.fold((0, None::<i64>), |(n, oldest), d| {
                (n + 1, Some(oldest.map_or(d.created_at, |o| o.min(d.created_at))))
            });
            (count, oldest)
        }))
    }
}

/// Pending, due at `now`, and not under a live lease.
fn due(row: &StoredDelivery, now: i64) -> bool {
    row.delivery.status == DeliveryStatus::Pending
        && row.delivery.next_attempt_at <= now
        && row.lease_until.is_none_or(|until| until < now)
}

#[async_trait]
impl WebhookStore for MemoryWebhooks {
    fn reads(&self) -> &dyn WebhookReads {
        &self.tables
    }

    async fn begin(&self) -> StoreResult<Box<dyn WebhookTx>> {
        Ok(Box::new(self.tables.begin()))
    }
}

pub type MemoryWebhooksTx = Working<WebhookTables>;

impl WebhookTx for MemoryWebhooksTx {
    fn webhooks(&mut self) -> &mut dyn WebhookWrites {
        self
    }
}

#[async_trait]
impl ChangeTx for MemoryWebhooksTx {
    /// A unit of work's audit rows and events; the area writes no ledger rows.
    async fn insert_rows(&mut self, rows: &[NewRow<'_>]) -> StoreResult<()> {
        for row in rows {
            match row {
                NewRow::Audit(entry) => self.insert_audit(entry).await?,
                NewRow::Event(event) => self.insert_event(event).await?,
                NewRow::Issued(_) => return Err(StoreError::Database("the webhooks fake keeps no ledger".into())),
            }
        }
        Ok(())
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.commit_tables();
        Ok(())
    }
}

#[async_trait]
impl<T: HasWebhookRows> WebhookWrites for Working<T> {
    async fn insert_webhook(&mut self, endpoint: &WebhookEndpoint) -> StoreResult<()> {
        let rows = self.working.webhook_rows();
        rows.webhooks.push(endpoint.clone());
        Ok(())
    }

    async fn update_webhook(&mut self, endpoint: &WebhookEndpoint) -> StoreResult<bool> {
        let rows = self.working.webhook_rows();
        let row = rows.webhooks.iter_mut().find(|w| w.workspace_id == endpoint.workspace_id && w.id == endpoint.id);
        Ok(row
            .map(|row| {
                *row = WebhookEndpoint { created_at: row.created_at, ..endpoint.clone() };
            })
            .is_some())
    }

    async fn delete_webhook(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool> {
        let mut rows = self.working.webhook_rows();
        let before = rows.webhooks.len();
        rows.webhooks.retain(|w| !(w.workspace_id == workspace_id && w.id == id));
        let deleted = rows.webhooks.len() < before;
        if deleted {
            rows.fail_pending(workspace_id, id, "the webhook endpoint was deleted", at);
        }
        Ok(deleted)
    }

    async fn insert_integration(&mut self, integration: &ExternalIntegration) -> StoreResult<()> {
        let rows = self.working.webhook_rows();
        rows.integrations.push(integration.clone());
        Ok(())
    }

    async fn update_integration(&mut self, integration: &ExternalIntegration) -> StoreResult<bool> {
        let rows = self.working.webhook_rows();
        let row =
            rows.integrations.iter_mut().find(|i| i.workspace_id == integration.workspace_id && i.id == integration.id);
        Ok(row
            .map(|row| {
                *row = ExternalIntegration { created_at: row.created_at, ..integration.clone() };
            })
            .is_some())
    }

    async fn delete_integration(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool> {
        let mut rows = self.working.webhook_rows();
        let before = rows.integrations.len();
        rows.integrations.retain(|i| !(i.workspace_id == workspace_id && i.id == id));
        let deleted = rows.integrations.len() < before;
        if deleted {
            rows.fail_pending(workspace_id, id, "the integration was deleted", at);
        }
        Ok(deleted)
    }

    async fn insert_delivery(&mut self, delivery: &NewDelivery) -> StoreResult<Delivery> {
        self.insert_deliveries(std::slice::from_ref(delivery)).await?;
        let rows = self.working.webhook_rows();
        let stored = rows.deliveries.iter().find(|row| row.delivery.id == delivery.id);
        stored
            .map(|row| row.delivery.clone())
            .ok_or_else(|| crate::store_error::StoreError::Unique(format!("delivery {}", delivery.id)))
    }

    async fn claim_outbox_events(&mut self, limit: i64) -> StoreResult<Vec<OutboxEvent>> {
        let rows = self.working.webhook_rows();
        let mut events: Vec<OutboxEvent> = rows.events.iter().filter(|e| e.processed_at.is_none()).cloned().collect();
        events.sort_by_key(|e| e.id);
        events.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(events)
    }

    async fn subscribers(&mut self, workspace_ids: &[String]) -> StoreResult<Vec<Subscriber>> {
        let rows = self.working.webhook_rows();
        let webhooks =
            rows.webhooks.iter().filter(|w| w.enabled && workspace_ids.contains(&w.workspace_id)).map(|w| Subscriber {
                kind: TargetKind::Webhook,
                id: w.id.clone(),
                workspace_id: w.workspace_id.clone(),
                events: w.events.clone(),
                subscribed_at: w.subscribed_at,
            });
        let integrations =
            rows.integrations.iter().filter(|i| i.enabled && workspace_ids.contains(&i.workspace_id)).map(|i| {
                Subscriber {
                    kind: TargetKind::Integration,
                    id: i.id.clone(),
                    workspace_id: i.workspace_id.clone(),
                    events: i.events.clone(),
                    subscribed_at: i.subscribed_at,
                }
            });
        Ok(webhooks.chain(integrations).collect())
    }

    async fn insert_deliveries(&mut self, deliveries: &[NewDelivery]) -> StoreResult<()> {
        let rows = self.working.webhook_rows();
        for new in deliveries {
            // The store's unique index: one first delivery per (event, target); redeliveries
            // are exempt. A repeated id is skipped too (`ON CONFLICT DO NOTHING`).
            let exists = rows.deliveries.iter().map(|row| &row.delivery).any(|d| {
                d.id == new.id
                    || (new.redelivery_of.is_none()
                        && d.redelivery_of.is_none()
                        && d.event_id == new.event_id
                        && d.target_kind == new.target_kind
                        && d.target_id == new.target_id)
            });
            if exists {
                continue;
            }
            rows.deliveries.push(StoredDelivery {
                delivery: Delivery {
                    id: new.id.clone(),
                    workspace_id: new.workspace_id.clone(),
                    target_kind: new.target_kind,
                    target_id: new.target_id.clone(),
                    event_id: new.event_id.clone(),
                    event_type: new.event_type.clone(),
                    payload: new.payload.clone(),
                    status: DeliveryStatus::Pending,
                    attempts: 0,
                    next_attempt_at: new.created_at,
                    http_status: None,
                    latency_ms: None,
                    error: None,
                    reference: None,
                    redelivery_of: new.redelivery_of.clone(),
                    created_at: new.created_at,
                    first_attempt_at: None,
                    last_attempt_at: None,
                    completed_at: None,
                    duration_ms: None,
                },
                lease_owner: None,
                lease_until: None,
            });
        }
        Ok(())
    }

    async fn mark_events_processed(&mut self, ids: &[i64], at: i64) -> StoreResult<()> {
        let rows = self.working.webhook_rows();
        for event in rows.events.iter_mut().filter(|e| ids.contains(&e.id)) {
            event.processed_at = Some(at);
        }
        Ok(())
    }

    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
        exclude_targets: &[String],
    ) -> StoreResult<Vec<Delivery>> {
        let rows = self.working.webhook_rows();
        let mut candidates: Vec<usize> = (0..rows.deliveries.len())
            .filter(|&i| {
                let row = &rows.deliveries[i];
                due(row, now) && !exclude_targets.contains(&row.delivery.target_id)
            })
            .collect();
        candidates.sort_by_key(|&i| rows.deliveries[i].delivery.next_attempt_at);
        candidates.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(candidates
            .into_iter()
            .map(|i| {
                let row = &mut rows.deliveries[i];
                row.lease_owner = Some(lease_owner.to_owned());
                row.lease_until = Some(lease_until);
                row.delivery.clone()
            })
            .collect())
    }

    async fn extend_leases(&mut self, lease_owner: &str, now: i64, lease_until: i64) -> StoreResult<u64> {
        let rows = self.working.webhook_rows();
        let mut extended = 0;
        for row in rows.deliveries.iter_mut().filter(|row| {
            row.lease_owner.as_deref() == Some(lease_owner)
                && row.delivery.status == DeliveryStatus::Pending
                && row.lease_until.is_some_and(|until| until >= now)
        }) {
            row.lease_until = Some(lease_until);
            extended += 1;
        }
        Ok(extended)
    }

    async fn complete_deliveries(&mut self, completions: &[Completion]) -> StoreResult<u64> {
        let rows = self.working.webhook_rows();
        let mut applied = 0;
        for c in completions {
            let Some(row) = rows.deliveries.iter_mut().find(|row| {
                row.delivery.id == c.id
                    && row.lease_owner.as_deref() == Some(c.lease_owner.as_str())
                    && row.delivery.status == DeliveryStatus::Pending
            }) else {
                continue;
            };
            let d = &mut row.delivery;
            d.status = c.status;
            d.attempts = c.attempts;
            d.next_attempt_at = c.next_attempt_at;
            d.http_status = c.http_status;
            d.latency_ms = c.latency_ms;
            d.error = c.error.clone();
            d.reference = c.reference.clone().or(d.reference.take());
            d.first_attempt_at = Some(c.first_attempt_at);
            d.last_attempt_at = Some(c.last_attempt_at);
            d.completed_at = c.completed_at;
            d.duration_ms = c.duration_ms;
            row.lease_owner = None;
            row.lease_until = None;
            applied += 1;
        }
        Ok(applied)
    }

    async fn record_target_outcomes(
        &mut self,
        succeeded: &[(TargetKind, String)],
        failed: &[(TargetKind, String)],
        at: i64,
    ) -> StoreResult<()> {
        let mut rows = self.working.webhook_rows();
        for (kind, id) in succeeded {
            if let Some(mut target) = rows.target_mut(*kind, id) {
                *target.failing_since() = None;
            }
        }
        for (kind, id) in failed {
            if let Some(mut target) = rows.target_mut(*kind, id) {
                target.failing_since().get_or_insert(at);
            }
        }
        Ok(())
    }

    async fn disable_target(&mut self, kind: TargetKind, id: &str, reason: &str, at: i64) -> StoreResult<bool> {
        let mut rows = self.working.webhook_rows();
        Ok(match rows.target_mut(kind, id) {
            Some(Target::Webhook(w)) if w.enabled => {
                w.enabled = false;
                w.disabled_reason = Some(reason.to_owned());
                w.updated_at = at;
                true
            }
            Some(Target::Integration(i)) if i.enabled => {
                i.enabled = false;
                i.disabled_reason = Some(reason.to_owned());
                i.updated_at = at;
                true
            }
            _ => false,
        })
    }
}
