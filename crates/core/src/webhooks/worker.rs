//! The delivery worker: drains the event outbox into deliveries (fan-out) and makes the
//! attempts, on every replica at once.
//!
//! - **Fan-out** locks a batch of undelivered outbox events (on PostgreSQL skipping rows
//!   another replica holds), inserts one delivery per (event, subscribed target) and marks the
//!   events processed, in one transaction: an event is fanned out exactly once, or not at all
//!   if the process dies first.
//! - **Attempts** run under a lease: a claim stamps due deliveries with this worker's id and a
//!   lease end, which a renewer pushes forward while attempts run. A process that dies leaves
//!   its leases to expire; any replica then takes the deliveries over. Delivery is therefore at
//!   least once; receivers deduplicate on the event id (`Trellis-Event-Id`).
//! - **Isolation**: each target has at most `per_target_in_flight` attempts running per
//!   process, and a claim passes over targets at that limit, so one slow or dead endpoint holds
//!   a bounded share of the worker, never all of it. Every attempt has the receiver timeout.
//! - **Completions** are written in batches (one transaction for many finished attempts),
//!   which is what lets SQLite keep up with thousands of deliveries a second.
//! - An endpoint or integration that has failed without a success for `disable_after` is
//!   switched off at its next final failure, with an audit row and a `webhook.disabled` /
//!   `integration.disabled` event; re-enabling it (PATCH `enabled: true`) clears the record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, Notify, Semaphore};

use crate::audit::Audit;
use crate::clock::{SharedClock, SharedEntropy};
use crate::crypto::MasterKey;
use crate::error::Result;
use crate::events::{self, EventType, OutboxEvent, TargetDisabled};
use crate::plugins::service::PluginService;
use crate::plugins::{CallTarget, Event};

use crate::unit_of_work::{Target, UnitOfWork};

use super::deliveries::{self, AttemptResult, Completion, Delivery, DeliveryStatus, NewDelivery, RECEIVER_TIMEOUT};
use super::port::{WebhookStore, WebhookTx};
use super::signing;
use super::transport::{OutboundPost, WebhookTransport};
use super::{endpoints, integrations, subscribes, ExternalIntegration, TargetKind, WebhookEndpoint};

/// A webhook endpoint or integration that may receive an event.
#[derive(Debug, Clone)]
pub struct Subscriber {
    pub kind: TargetKind,
    pub id: String,
    pub workspace_id: String,
    pub events: Vec<String>,
    /// When it last started receiving its current events: created, switched back on, or given
    /// another event list. Earlier events are not delivered to it.
    pub subscribed_at: i64,
}

/// How the worker runs (operator settings, `TRELLIS_DELIVERY_*`).
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// How long a claim holds a delivery without renewal; renewed every third of it.
    pub lease: Duration,
    /// Attempts running at once in this process.
    pub max_in_flight: usize,
    /// Attempts running at once per target in this process.
    pub per_target_in_flight: usize,
    /// How often an idle worker looks for work.
    pub poll_interval: Duration,
    /// Outbox events fanned out per transaction.
    pub fan_out_batch: i64,
    /// A target failing without a success for this long is switched off at its next final failure.
    pub disable_after: Duration,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            lease: Duration::from_secs(60),
            max_in_flight: 512,
            per_target_in_flight: 64,
            poll_interval: Duration::from_millis(25),
            fan_out_batch: 500,
            disable_after: Duration::from_secs(3 * 24 * 3600),
        }
    }
}

/// What the area's use cases and its delivery worker use, and nothing else of the service: the
/// area's storage port, the outbound transport, the plugin runtime (integrations' `notify` and
/// `test`), the master key (signing secrets and integration configurations are sealed under it),
/// the clock and entropy. `Context::webhooks` hands it out.
#[derive(Clone)]
pub struct WebhookDeps {
    pub store: Arc<dyn WebhookStore>,
    pub transport: Arc<dyn WebhookTransport>,
    pub plugins: PluginService,
    pub master_key: MasterKey,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

impl WebhookDeps {
    pub(crate) fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    pub(crate) fn new_id(&self, prefix: &str) -> String {
        crate::clock::new_id(self.entropy.as_ref(), prefix)
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub(crate) async fn change(
        &self,
        actor: Audit,
        workspace_id: Option<&str>,
    ) -> Result<UnitOfWork<'static, dyn WebhookTx>> {
        let tx = self.store.begin().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}

/// The id receivers deduplicate on.
pub fn event_id(outbox_id: i64) -> String {
    format!("evt_{outbox_id}")
}

/// The exact body of a delivery: `{id, type, workspaceId, occurredAt, data}`.
pub fn body(event_id: &str, workspace_id: &str, event_type: &str, data: &Value, at: i64) -> String {
    events::envelope(Some(event_id), workspace_id, event_type, data, at).to_string()
}

fn body_of(event: &OutboxEvent) -> String {
    let data = event.payload.get("data").cloned().unwrap_or(Value::Null);
    body(&event_id(event.id), &event.workspace_id, &event.event_type, &data, event.created_at)
}

/// Fans out up to `limit` outbox events; returns how many were processed. Targets receive the
/// events emitted since they subscribed (created, switched back on, or given another event
/// list), so an event emitted while a target was off is not delivered once it is back on.
pub async fn fan_out(deps: &WebhookDeps, limit: i64) -> Result<usize> {
    let mut tx = deps.store.begin().await?;
    let events = tx.webhooks().claim_outbox_events(limit).await?;
    if events.is_empty() {
        return Ok(0);
    }
    let now = deps.now_millis();
    let mut workspaces: Vec<String> = events.iter().map(|e| e.workspace_id.clone()).collect();
    workspaces.sort();
    workspaces.dedup();
    let subscribers = tx.webhooks().subscribers(&workspaces).await?;
    let mut planned = Vec::new();
    for event in &events {
        let mut body = None;
        for subscriber in subscribers.iter().filter(|s| {
            s.workspace_id == event.workspace_id
                && s.subscribed_at <= event.created_at
                && subscribes(&s.events, &event.event_type)
        }) {
            let payload = body.get_or_insert_with(|| body_of(event)).clone();
            planned.push(NewDelivery {
                id: deps.new_id("dlv_"),
                workspace_id: event.workspace_id.clone(),
                target_kind: subscriber.kind,
                target_id: subscriber.id.clone(),
                event_id: event_id(event.id),
                event_type: event.event_type.clone(),
                payload,
                redelivery_of: None,
                created_at: now,
            });
        }
    }
    if !planned.is_empty() {
        tx.webhooks().insert_deliveries(&planned).await?;
    }
    let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    tx.webhooks().mark_events_processed(&ids, now).await?;
    tx.commit().await?;
    metrics::counter!("trellis_events_fanned_out_total").increment(ids.len() as u64);
    metrics::counter!("trellis_webhook_deliveries_enqueued_total").increment(planned.len() as u64);
    Ok(events.len())
}

/// What an attempt needs of its target, loaded once per claim batch.
enum Recipient {
    Webhook {
        endpoint: WebhookEndpoint,
        secrets: Vec<String>,
    },
    Integration {
        integration: ExternalIntegration,
        target: Box<CallTarget>,
    },
    /// Deleted, switched off, or unusable (its plugin is gone): the delivery fails for good.
    Unavailable(String),
}

impl Recipient {
    fn failing_since(&self) -> Option<i64> {
        match self {
            Recipient::Webhook { endpoint, .. } => endpoint.failing_since,
            Recipient::Integration { integration, .. } => integration.failing_since,
            Recipient::Unavailable(_) => None,
        }
    }
}

async fn load_recipient(deps: &WebhookDeps, delivery: &Delivery) -> Recipient {
    let loaded: Result<Recipient> = async {
        Ok(match delivery.target_kind {
            TargetKind::Webhook => {
                match deps.store.reads().find_webhook(&delivery.workspace_id, &delivery.target_id).await? {
                    None => Recipient::Unavailable("the webhook endpoint was deleted".into()),
                    Some(endpoint) if !endpoint.enabled => Recipient::Unavailable(format!(
                        "the webhook endpoint is disabled ({})",
                        endpoint.disabled_reason.as_deref().unwrap_or("disabled")
                    )),
                    Some(endpoint) => {
                        let secrets = endpoints::secrets(&deps.master_key, &endpoint, deps.now_millis())?;
                        Recipient::Webhook { endpoint, secrets }
                    }
                }
            }
            TargetKind::Integration => {
                match deps.store.reads().find_integration(&delivery.workspace_id, &delivery.target_id).await? {
                    None => Recipient::Unavailable("the integration was deleted".into()),
                    Some(integration) if !integration.enabled => Recipient::Unavailable(format!(
                        "the integration is disabled ({})",
                        integration.disabled_reason.as_deref().unwrap_or("disabled")
                    )),
                    Some(integration) => {
                        let host = deps.plugins.host();
                        match integrations::plugin_for(host, &integration.workspace_id, &integration.integration_type) {
                            Err(err) => Recipient::Unavailable(err.to_string()),
                            Ok(info) => {
                                let target = integrations::call_target(&deps.master_key, &integration, &info)?;
                                Recipient::Integration { integration, target: Box::new(target) }
                            }
                        }
                    }
                }
            }
        })
    }
    .await;
    loaded.unwrap_or_else(|err| Recipient::Unavailable(format!("cannot load the target: {err}")))
}

/// One-line summary of an event for chat, paging and ticketing tools.
pub fn summary(event_type: &str, data: &Value) -> String {
    let text = |key: &str| data.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let certificate = || {
        let cn = text("commonName");
        if cn.is_empty() {
            format!("#{}", data.get("certificateId").unwrap_or(&Value::Null))
        } else {
            cn
        }
    };
    let ca = || text("name");
    let Ok(known) = event_type.parse::<EventType>() else { return format!("Trellis event {event_type}") };
    match known {
        EventType::CertificateCreated => format!("Certificate {} added to the inventory", certificate()),
        EventType::CertificateUpdated => format!("Certificate {} updated", certificate()),
        EventType::CertificateExpiring => match data.get("daysUntilExpiry").and_then(Value::as_i64) {
            Some(days) => format!("Certificate {} expires in {days} days ({})", certificate(), text("expiresAt")),
            None => format!("Certificate {} expires on {}", certificate(), text("expiresAt")),
        },
        EventType::CertificateExpired => format!("Certificate {} expired on {}", certificate(), text("expiresAt")),
        EventType::CertificateRevoked => format!("Certificate {} was revoked", certificate()),
        EventType::CertificateRenewed => format!("Certificate {} was renewed", certificate()),
        EventType::CertificateRenewalFailed => format!("Renewal of certificate {} failed", certificate()),
        EventType::CertificateDeleted => format!("Certificate {} was deleted from the inventory", certificate()),
        EventType::CaCreated => format!("Certificate authority {} registered", ca()),
        EventType::CaUpdated => format!("Certificate authority {} updated", ca()),
        EventType::CaHealthChanged => format!("Certificate authority {} is {}", ca(), text("current")),
        EventType::DiscoveryScanCompleted => {
            format!("Discovery scan {} {}", data.get("scanId").unwrap_or(&Value::Null), text("status"))
        }
        EventType::DiscoveryNewCertificatesFound => format!(
            "Discovery found {} new certificates",
            data.get("count").or(data.get("new")).unwrap_or(&Value::Null)
        ),
        EventType::AttestationFailed => "A device attestation failed".to_owned(),
        EventType::WebhookTest => "Trellis test event".to_owned(),
        EventType::WebhookDisabled => format!("Webhook endpoint {} was disabled: {}", text("id"), text("reason")),
        EventType::IntegrationDisabled => format!("Integration {} was disabled: {}", text("id"), text("reason")),
        EventType::PluginVersionDeactivated => format!(
            "Plugin {} version {} was deactivated: its signing key {} was revoked",
            text("pluginId"),
            text("version"),
            text("keyId")
        ),
        EventType::WorkflowExecutionCompleted => format!("Trellis event {event_type}"),
    }
}

fn http_error_text(status: u16) -> String {
    format!("the receiver answered HTTP {status}; a 2xx status is required")
}

/// Makes one attempt: the signed POST, or the plugin's `notify`.
async fn attempt(deps: &WebhookDeps, delivery: &Delivery, recipient: &Recipient) -> AttemptResult {
    match recipient {
        Recipient::Unavailable(reason) => {
            AttemptResult::Refused { http_status: None, latency_ms: None, error: reason.clone() }
        }
        Recipient::Webhook { endpoint, secrets } => {
            let timestamp = deps.now_millis().div_euclid(1000);
            let keys: Vec<&str> = secrets.iter().map(String::as_str).collect();
            let signature = signing::signature_header(&keys, timestamp, delivery.payload.as_bytes());
            let request = OutboundPost {
                url: endpoint.url.clone(),
                headers: vec![
                    ("content-type", "application/json".to_owned()),
                    ("user-agent", concat!("Trellis-Webhooks/", env!("CARGO_PKG_VERSION")).to_owned()),
                    (signing::HEADER_EVENT_ID, delivery.event_id.clone()),
                    (signing::HEADER_EVENT_TYPE, delivery.event_type.clone()),
                    (signing::HEADER_DELIVERY_ID, delivery.id.clone()),
                    (signing::HEADER_TIMESTAMP, timestamp.to_string()),
                    (signing::HEADER_SIGNATURE, signature),
                ],
                body: delivery.payload.as_bytes().to_vec(),
                timeout: RECEIVER_TIMEOUT,
            };
            match deps.transport.post(request).await {
                Ok(response) if (200..300).contains(&response.status) => AttemptResult::Delivered {
                    http_status: Some(response.status),
                    latency_ms: Some(response.latency_ms),
                    reference: None,
                },
                Ok(response) => AttemptResult::Failed {
                    http_status: Some(response.status),
                    latency_ms: Some(response.latency_ms),
                    error: http_error_text(response.status),
                    retry_after_ms: None,
                },
                Err(err) => AttemptResult::Failed {
                    http_status: None,
                    latency_ms: None,
                    error: err.to_string(),
                    retry_after_ms: None,
                },
            }
        }
        Recipient::Integration { integration, target } => {
            let payload: Value = serde_json::from_str(&delivery.payload).unwrap_or(Value::Null);
            let data = payload.get("data").cloned().unwrap_or(Value::Null);
            let occurred_at_ms = payload
                .get("occurredAt")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map_or(delivery.created_at, |t| t.timestamp_millis());
            let event = Event {
                id: delivery.event_id.clone(),
                event_type: delivery.event_type.clone(),
                occurred_at_ms,
                workspace_id: integration.workspace_id.clone(),
                summary: summary(&delivery.event_type, &data),
                payload,
            };
            let started = std::time::Instant::now();
            let mut target = (**target).clone();
            target.context.request_id = delivery.id.clone();
            match deps.plugins.host().notify(&target, &event).await {
                Ok(outcome) => AttemptResult::Delivered {
                    http_status: outcome.status,
                    latency_ms: Some(i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX)),
                    reference: outcome.reference,
                },
                Err(err) => {
                    let latency_ms = Some(i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX));
                    let error = format!("{}: {err}", err.code());
                    if err.is_transient() {
                        AttemptResult::Failed {
                            http_status: err.upstream_status(),
                            latency_ms,
                            error,
                            retry_after_ms: err.retry_after_secs().map(|s| i64::try_from(s).unwrap_or(0) * 1000),
                        }
                    } else {
                        AttemptResult::Refused { http_status: err.upstream_status(), latency_ms, error }
                    }
                }
            }
        }
    }
}

/// A finished attempt, on its way to the batch writer.
struct Finished {
    completion: Completion,
    kind: TargetKind,
    target_id: String,
    workspace_id: String,
    failing_since: Option<i64>,
    event_created_at: i64,
}

/// What one [`run_due`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    pub events: usize,
    pub delivered: usize,
    pub retrying: usize,
    pub failed: usize,
}

/// Writes finished attempts in one transaction, then switches off targets failing too long.
async fn write_batch(deps: &WebhookDeps, settings: &WorkerSettings, batch: &[Finished]) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let now = deps.now_millis();
    let completions: Vec<Completion> = batch.iter().map(|f| f.completion.clone()).collect();
    let mut succeeded: Vec<(TargetKind, String)> = Vec::new();
    let mut failed: Vec<(TargetKind, String)> = Vec::new();
    for f in batch {
        let list = if f.completion.status == DeliveryStatus::Success { &mut succeeded } else { &mut failed };
        if !list.iter().any(|(k, id)| *k == f.kind && *id == f.target_id) {
            list.push((f.kind, f.target_id.clone()));
        }
    }
    // A target that succeeded in this batch is not failing, whatever else failed.
    failed.retain(|t| !succeeded.contains(t));
    let mut tx = deps.store.begin().await?;
    tx.webhooks().complete_deliveries(&completions).await?;
    tx.webhooks().record_target_outcomes(&succeeded, &failed, now).await?;
    tx.commit().await?;
    for f in batch {
        let outcome = match f.completion.status {
            DeliveryStatus::Success => "success",
            DeliveryStatus::Failed => "failed",
            _ => "retry",
        };
        metrics::counter!("trellis_webhook_deliveries_total", "kind" => f.kind.as_str(), "outcome" => outcome)
            .increment(1);
        if f.completion.status == DeliveryStatus::Success {
            let seconds = (f.completion.last_attempt_at - f.event_created_at).max(0) as f64 / 1000.0;
            metrics::histogram!("trellis_webhook_enqueue_to_attempt_seconds").record(seconds);
        }
    }
    let disable_after = i64::try_from(settings.disable_after.as_millis()).unwrap_or(i64::MAX);
    let mut disabled: Vec<&str> = Vec::new();
    for f in batch.iter().filter(|f| f.completion.status == DeliveryStatus::Failed) {
        let long_failing = f.failing_since.is_some_and(|since| now - since >= disable_after);
        if long_failing
            && !disabled.contains(&f.target_id.as_str())
            && !succeeded.iter().any(|(_, id)| *id == f.target_id)
        {
            disabled.push(&f.target_id);
            if let Err(err) = disable(deps, f, now).await {
                tracing::warn!(target_id = %f.target_id, error = %err, "cannot disable a failing delivery target");
            }
        }
    }
    Ok(())
}

/// Switches a target off with its audit row and `webhook.disabled` / `integration.disabled`
/// event, one unit of work over the area's transaction.
async fn disable(deps: &WebhookDeps, f: &Finished, now: i64) -> Result<()> {
    let days = (now - f.failing_since.unwrap_or(now)) / (24 * 3600 * 1000);
    let reason = format!("disabled automatically: every delivery failed for {days} days");
    let tx = deps.store.begin().await?;
    let mut change = UnitOfWork::owning(tx, Audit::system("delivery-worker"), Some(&f.workspace_id), deps.now_millis());
    if !change.tx().webhooks().disable_target(f.kind, &f.target_id, &reason, now).await? {
        return Ok(());
    }
    let (action, event, target_type): (_, fn(TargetDisabled) -> events::Event, _) = match f.kind {
        TargetKind::Webhook => ("webhook.disabled", events::Event::WebhookDisabled, "webhook"),
        TargetKind::Integration => ("integration.disabled", events::Event::IntegrationDisabled, "integration"),
    };
    let event = event(TargetDisabled { id: f.target_id.clone(), reason, last_error: f.completion.error.clone() });
    // The audit row says what the event says: which target, why, and its last error.
    let details = event.data()?;
    change.audit(action, Target::new(target_type, &f.target_id), details).emit(event);
    change.commit().await?;
    tracing::warn!(target_kind = f.kind.as_str(), target_id = %f.target_id, "delivery target disabled after failing for days");
    Ok(())
}

async fn finish(deps: &WebhookDeps, owner: &str, delivery: &Delivery, recipient: &Recipient) -> Finished {
    let started = deps.now_millis();
    let result = attempt(deps, delivery, recipient).await;
    let ended = deps.now_millis();
    let completion =
        deliveries::complete(&delivery.id, owner, delivery.attempts, delivery.first_attempt_at, started, ended, result);
    Finished {
        completion,
        kind: delivery.target_kind,
        target_id: delivery.target_id.clone(),
        workspace_id: delivery.workspace_id.clone(),
        failing_since: recipient.failing_since(),
        event_created_at: delivery.created_at,
    }
}

async fn load_recipients(deps: &WebhookDeps, claimed: &[Delivery]) -> HashMap<String, Arc<Recipient>> {
    let mut recipients: HashMap<String, Arc<Recipient>> = HashMap::new();
    for delivery in claimed {
        if !recipients.contains_key(&delivery.target_id) {
            let recipient = load_recipient(deps, delivery).await;
            recipients.insert(delivery.target_id.clone(), Arc::new(recipient));
        }
    }
    recipients
}

/// Fans out everything and makes every attempt due now, in this process, then returns (the
/// `trellis jobs deliver` command; tests use it with a clock set to a later instant to walk
/// the retry schedule).
pub async fn run_due(deps: &WebhookDeps, settings: &WorkerSettings, owner: &str) -> Result<RunSummary> {
    let mut summary = RunSummary::default();
    loop {
        let n = fan_out(deps, settings.fan_out_batch).await?;
        summary.events += n;
        if n == 0 {
            break;
        }
    }
    let lease = i64::try_from(settings.lease.as_millis()).unwrap_or(60_000);
    loop {
        let now = deps.now_millis();
        let mut tx = deps.store.begin().await?;
        let claimed = tx.webhooks().claim_deliveries(now, owner, now + lease, 500, &[]).await?;
        tx.commit().await?;
        if claimed.is_empty() {
            return Ok(summary);
        }
        let recipients = load_recipients(deps, &claimed).await;
        let attempts = claimed.iter().map(|delivery| {
            let recipient = recipients.get(&delivery.target_id).cloned();
            async move {
                let recipient = recipient.unwrap_or_else(|| Arc::new(Recipient::Unavailable("no target".into())));
                finish(deps, owner, delivery, &recipient).await
            }
        });
        let finished = futures_util::future::join_all(attempts).await;
        for f in &finished {
            match f.completion.status {
                DeliveryStatus::Success => summary.delivered += 1,
                DeliveryStatus::Failed => summary.failed += 1,
                _ => summary.retrying += 1,
            }
        }
        write_batch(deps, settings, &finished).await?;
        // Retries are scheduled later than `now`, so the loop ends once nothing is due.
        if finished.iter().all(|f| f.completion.status == DeliveryStatus::Pending && f.completion.next_attempt_at > now)
        {
            return Ok(summary);
        }
    }
}

/// The background worker of one process.
pub struct DeliveryWorker {
    deps: WebhookDeps,
    settings: WorkerSettings,
    owner: String,
    in_flight: AtomicUsize,
    per_target: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
    wake: Notify,
}

impl DeliveryWorker {
    pub fn new(deps: WebhookDeps, settings: WorkerSettings) -> Arc<DeliveryWorker> {
        let owner = deps.new_id("wrk_");
        Arc::new(DeliveryWorker {
            deps,
            settings,
            owner,
            in_flight: AtomicUsize::new(0),
            per_target: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        })
    }

    /// Runs until the task is aborted: fan-out, claims, attempts, batched completions, lease
    /// renewal and the backlog gauges.
    pub fn spawn(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let (done_tx, done_rx) = mpsc::unbounded_channel::<Finished>();
        let writer = tokio::spawn(self.clone().write_completions(done_rx));
        let renewer = tokio::spawn(self.clone().renew_leases());
        let gauges = tokio::spawn(self.clone().export_backlog());
        let worker = self.clone();
        tokio::spawn(async move {
            let _guards = (AbortOnDrop(writer), AbortOnDrop(renewer), AbortOnDrop(gauges));
            worker.claim_loop(done_tx).await;
        })
    }

    fn saturated_targets(&self) -> Vec<String> {
        let per_target = self.per_target.lock().unwrap_or_else(|p| p.into_inner());
        per_target
            .iter()
            .filter(|(_, (n, _))| *n >= self.settings.per_target_in_flight)
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn acquire_target(&self, target_id: &str) -> Arc<Semaphore> {
        let mut per_target = self.per_target.lock().unwrap_or_else(|p| p.into_inner());
        let entry = per_target
            .entry(target_id.to_owned())
            .or_insert_with(|| (0, Arc::new(Semaphore::new(self.settings.per_target_in_flight))));
        entry.0 += 1;
        entry.1.clone()
    }

    fn release_target(&self, target_id: &str) {
        let mut per_target = self.per_target.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = per_target.get_mut(target_id) {
            entry.0 = entry.0.saturating_sub(1);
            if entry.0 == 0 {
                per_target.remove(target_id);
            }
        }
    }

    async fn claim_loop(self: Arc<Self>, done: mpsc::UnboundedSender<Finished>) {
        let deps = &self.deps;
        let lease = i64::try_from(self.settings.lease.as_millis()).unwrap_or(60_000);
        loop {
            // Cheap reads first, so that an idle worker never takes SQLite's write lock.
            let waiting = deps.store.reads().has_undelivered_events().await.unwrap_or(true);
            let fanned = if !waiting {
                0
            } else {
                match fan_out(deps, self.settings.fan_out_batch).await {
                    Ok(n) => n,
                    Err(err) => {
                        tracing::warn!(error = %err, "webhook fan-out failed; retrying");
                        0
                    }
                }
            };
            let free = self.settings.max_in_flight.saturating_sub(self.in_flight.load(Ordering::Acquire));
            let mut claimed = Vec::new();
            let due = free > 0 && deps.store.reads().has_due_deliveries(deps.now_millis()).await.unwrap_or(true);
            if due {
                let exclude = self.saturated_targets();
                let now = deps.now_millis();
                let claim = async {
                    let mut tx = deps.store.begin().await?;
                    // No bigger than one target's share: a claim that all went to one slow target
                    // leaves the other slots to the rest.
                    let limit = i64::try_from(free.min(self.settings.per_target_in_flight).min(500)).unwrap_or(64);
                    let rows = tx.webhooks().claim_deliveries(now, &self.owner, now + lease, limit, &exclude).await?;
                    tx.commit().await?;
                    Ok::<_, crate::error::Error>(rows)
                };
                match claim.await {
                    Ok(rows) => claimed = rows,
                    Err(err) => tracing::warn!(error = %err, "claiming webhook deliveries failed; retrying"),
                }
            }
            if !claimed.is_empty() {
                let recipients = load_recipients(deps, &claimed).await;
                for delivery in claimed.iter() {
                    self.in_flight.fetch_add(1, Ordering::AcqRel);
                    let gate = self.acquire_target(&delivery.target_id);
                    let recipient = recipients
                        .get(&delivery.target_id)
                        .cloned()
                        .unwrap_or_else(|| Arc::new(Recipient::Unavailable("no target".into())));
                    let (worker, done, delivery) = (self.clone(), done.clone(), delivery.clone());
                    tokio::spawn(async move {
                        let permit = gate.acquire_owned().await;
                        let finished = finish(&worker.deps, &worker.owner, &delivery, &recipient).await;
                        drop(permit);
                        if done.send(finished).is_err() {
                            worker.finished_one(&delivery.target_id);
                        }
                    });
                }
            }
            if fanned == 0 && claimed.is_empty() {
                let _ = tokio::time::timeout(self.settings.poll_interval, self.wake.notified()).await;
            }
        }
    }

    fn finished_one(&self, target_id: &str) {
        self.release_target(target_id);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.wake.notify_one();
    }

    async fn write_completions(self: Arc<Self>, mut done: mpsc::UnboundedReceiver<Finished>) {
        const BATCH: usize = 512;
        let mut batch = Vec::with_capacity(BATCH);
        while let Some(first) = done.recv().await {
            batch.push(first);
            while batch.len() < BATCH {
                match done.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            // A failed write leaves the leases to expire: the deliveries are attempted again.
            if let Err(err) = write_batch(&self.deps, &self.settings, &batch).await {
                tracing::warn!(error = %err, deliveries = batch.len(), "cannot record delivery attempts; they will be retried");
            }
            for f in batch.drain(..) {
                self.finished_one(&f.target_id);
            }
        }
    }

    async fn renew_leases(self: Arc<Self>) {
        let lease = i64::try_from(self.settings.lease.as_millis()).unwrap_or(60_000);
        let mut ticker = tokio::time::interval(self.settings.lease / 3);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if self.in_flight.load(Ordering::Acquire) == 0 {
                continue;
            }
            let now = self.deps.now_millis();
            let renewed = async {
                let mut tx = self.deps.store.begin().await?;
                tx.webhooks().extend_leases(&self.owner, now, now + lease).await?;
                tx.commit().await?;
                Ok::<_, crate::error::Error>(())
            };
            if let Err(err) = renewed.await {
                tracing::warn!(error = %err, "cannot renew delivery leases");
            }
        }
    }

    async fn export_backlog(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(Duration::from_secs(5));
        loop {
            ticker.tick().await;
            if let Ok((pending, oldest)) = self.deps.store.reads().delivery_backlog().await {
                metrics::gauge!("trellis_webhook_queue_depth").set(pending as f64);
                let age = oldest.map_or(0.0, |at| (self.deps.now_millis() - at).max(0) as f64 / 1000.0);
                metrics::gauge!("trellis_webhook_oldest_pending_seconds").set(age);
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The summaries read the members the typed payloads carry (`events::CaHealthChanged`,
    /// `events::TargetDisabled`), not names they never had.
    #[test]
    fn summaries_of_health_and_disabled_targets_read_their_payloads() {
        let health = events::Event::CaHealthChanged(events::CaHealthChanged {
            ca_id: 7,
            name: "Corp CA".into(),
            previous: "healthy",
            current: "unhealthy",
            status: "error",
        });
        let data = health.data().unwrap_or_default();
        assert_eq!(summary("ca.health_changed", &data), "Certificate authority Corp CA is unhealthy");
        let disabled = events::Event::WebhookDisabled(events::TargetDisabled {
            id: "wh_1".into(),
            reason: "failing for 3 days".into(),
            last_error: None,
        });
        let data = disabled.data().unwrap_or_default();
        assert_eq!(summary("webhook.disabled", &data), "Webhook endpoint wh_1 was disabled: failing for 3 days");
    }

    #[test]
    fn summaries_name_the_certificate_and_when() {
        let data =
            json!({ "commonName": "api.example.com", "expiresAt": "2026-12-01T00:00:00.000Z", "daysUntilExpiry": 6 });
        assert_eq!(
            summary("certificate.expiring", &data),
            "Certificate api.example.com expires in 6 days (2026-12-01T00:00:00.000Z)"
        );
        assert_eq!(
            summary("ca.health_changed", &json!({ "name": "Root", "current": "unhealthy" })),
            "Certificate authority Root is unhealthy"
        );
        assert_eq!(summary("certificate.revoked", &json!({ "certificateId": 7 })), "Certificate #7 was revoked");
    }

    #[test]
    fn the_body_carries_the_event_id() {
        let body: Value = serde_json::from_str(&body("evt_9", "ws_1", "webhook.test", &json!({"a": 1}), 0)).unwrap();
        assert_eq!(body["id"], "evt_9");
        assert_eq!(body["type"], "webhook.test");
        assert_eq!(body["occurredAt"], "1970-01-01T00:00:00.000Z");
        assert_eq!(body["data"]["a"], 1);
    }
}
