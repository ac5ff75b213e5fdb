//! Unit tests of the delivery rules over the in-memory fake of the area's port: fan-out (which
//! targets get which events), the §6 retry schedule, the signature headers, auto-disable and
//! the worker's leases. Time is a hand-moved clock; nothing sleeps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::clock::{Clock, OsEntropy};
use crate::crypto::MasterKey;
use crate::plugins::service::PluginService;
use crate::plugins::{Capabilities, PluginInfo, PluginKind};
use crate::testing::NoPlugins;

use super::deliveries::{DeliveryStatus, NewDelivery};
use super::fake::{MemoryWebhooks, WebhookTables};
use super::transport::{OutboundPost, OutboundResponse, TransportError, WebhookTransport};
use super::worker::{fan_out, run_due, WebhookDeps, WorkerSettings};
use super::{endpoints, signing, ExternalIntegration, TargetKind, WebhookEndpoint};

const T0: i64 = 1_800_000_000_000;
const SECRET: &str = "whsec_current";
const DAY_MS: i64 = 24 * 3600 * 1000;

/// A clock the test moves by hand.
struct ManualClock(Mutex<i64>);

impl ManualClock {
    fn set(&self, ms: i64) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = ms;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        crate::clock::from_millis(*self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Records every POST and answers with the status (or error) set last.
struct ScriptedTransport {
    answer: Mutex<Result<u16, TransportError>>,
    sent: Mutex<Vec<OutboundPost>>,
}

impl ScriptedTransport {
    fn answering(&self, answer: Result<u16, TransportError>) {
        *self.answer.lock().unwrap_or_else(|p| p.into_inner()) = answer;
    }

    fn sent(&self) -> Vec<OutboundPost> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl WebhookTransport for ScriptedTransport {
    async fn vet(&self, _url: &str) -> Result<(), TransportError> {
        Ok(())
    }

    async fn post(&self, request: OutboundPost) -> Result<OutboundResponse, TransportError> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).push(request);
        let answer = self.answer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        answer.map(|status| OutboundResponse { status, latency_ms: 7 })
    }
}

struct Harness {
    store: MemoryWebhooks,
    clock: Arc<ManualClock>,
    transport: Arc<ScriptedTransport>,
    deps: WebhookDeps,
    settings: WorkerSettings,
}

fn key() -> MasterKey {
    MasterKey::parse(&"cd".repeat(32)).unwrap_or_else(|_| unreachable!("a valid test key"))
}

fn harness() -> Harness {
    harness_with(NoPlugins::default())
}

/// An integration plugin serving `slack` whose `notify` fails as if the plugin had just gone
/// (a transient error: the delivery is retried).
fn slack_plugin() -> NoPlugins {
    NoPlugins {
        connector: Some(PluginInfo {
            id: "fixture.slack".into(),
            version: semver::Version::new(0, 2, 0),
            kind: PluginKind::Integration,
            name: "slack".into(),
            description: String::new(),
            serves: vec!["slack".into()],
            config_schema: json!({}),
            secret_fields: Vec::new(),
            capabilities: Capabilities::default(),
            default_issuer_patterns: Vec::new(),
            outbound_hosts: Vec::new(),
        }),
        ..NoPlugins::default()
    }
}

fn harness_with(plugins: NoPlugins) -> Harness {
    let store = MemoryWebhooks::default();
    let clock = Arc::new(ManualClock(Mutex::new(T0)));
    let transport = Arc::new(ScriptedTransport { answer: Mutex::new(Ok(204)), sent: Mutex::new(Vec::new()) });
    let deps = WebhookDeps {
        store: Arc::new(store.clone()),
        transport: transport.clone(),
        plugins: PluginService::new(Arc::new(plugins)),
        master_key: key(),
        clock: clock.clone(),
        entropy: Arc::new(OsEntropy),
    };
    Harness { store, clock, transport, deps, settings: WorkerSettings::default() }
}

impl Harness {
    /// An enabled endpoint of `workspace_id` subscribed to `events` since T0 - 1 s.
    fn webhook(&self, workspace_id: &str, id: &str, events: &[&str]) -> WebhookEndpoint {
        let context = endpoints::secret_context(workspace_id, id);
        let endpoint = WebhookEndpoint {
            id: id.into(),
            workspace_id: workspace_id.into(),
            url: format!("https://{id}.example.com/hook"),
            description: None,
            events: events.iter().map(|e| (*e).to_owned()).collect(),
            secret_sealed: key().seal_bound(SECRET.as_bytes(), &context, &OsEntropy),
            previous_secret_sealed: None,
            previous_secret_until: None,
            enabled: true,
            disabled_reason: None,
            failing_since: None,
            created_at: T0 - 1_000,
            updated_at: T0 - 1_000,
            subscribed_at: T0 - 1_000,
        };
        self.store.put_webhook(endpoint.clone());
        endpoint
    }

    fn integration(&self, workspace_id: &str, id: &str, events: &[&str]) -> ExternalIntegration {
        let integration = ExternalIntegration {
            id: id.into(),
            workspace_id: workspace_id.into(),
            name: format!("integration {id}"),
            integration_type: "slack".into(),
            events: events.iter().map(|e| (*e).to_owned()).collect(),
            config: json!({}),
            enabled: true,
            disabled_reason: None,
            failing_since: None,
            created_at: T0 - 1_000,
            updated_at: T0 - 1_000,
            subscribed_at: T0 - 1_000,
        };
        self.store.put_integration(integration.clone());
        integration
    }

    fn emit(&self, workspace_id: &str, event_type: &str) -> i64 {
        self.store.put_event(workspace_id, event_type, json!({ "certificateId": 1 }), T0)
    }

    async fn run_at(&self, at: i64) -> super::worker::RunSummary {
        self.clock.set(at);
        run_due(&self.deps, &self.settings, "wrk_test").await.unwrap_or_else(|err| panic!("run failed: {err}"))
    }

    fn tables(&self) -> WebhookTables {
        self.store.snapshot()
    }

    /// (target, event type) of every delivery, sorted.
    fn routed(&self) -> Vec<(String, String)> {
        let mut out: Vec<_> = self
            .tables()
            .deliveries
            .iter()
            .map(|r| (r.delivery.target_id.clone(), r.delivery.event_type.clone()))
            .collect();
        out.sort();
        out
    }
}

fn pair(target: &str, event: &str) -> (String, String) {
    (target.to_owned(), event.to_owned())
}

fn header<'a>(post: &'a OutboundPost, name: &str) -> &'a str {
    post.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()).unwrap_or("")
}

// ---- fan-out ---------------------------------------------------------------------------------

#[tokio::test]
async fn each_event_goes_to_the_targets_subscribed_to_its_type() {
    let h = harness();
    h.webhook("ws_a", "whk_created", &["certificate.created"]);
    h.webhook("ws_a", "whk_revoked", &["certificate.revoked"]);
    h.integration("ws_a", "int_both", &["certificate.created", "certificate.revoked"]);
    h.emit("ws_a", "certificate.created");
    h.emit("ws_a", "certificate.revoked");
    h.emit("ws_a", "ca.created");
    assert_eq!(fan_out(&h.deps, 100).await.ok(), Some(3));
    assert_eq!(
        h.routed(),
        [
            pair("int_both", "certificate.created"),
            pair("int_both", "certificate.revoked"),
            pair("whk_created", "certificate.created"),
            pair("whk_revoked", "certificate.revoked"),
        ]
    );
    let kinds: Vec<TargetKind> = h.tables().deliveries.iter().map(|r| r.delivery.target_kind).collect();
    assert!(kinds.contains(&TargetKind::Integration) && kinds.contains(&TargetKind::Webhook));
}

/// The composite in-memory store (`MemoryStore`, what a test over the whole `Context` gets)
/// serves the area's port with this fake's rules, not with "not faked" panics: an outbox event
/// fans out to the subscribed endpoint, and the delivery log lists it.
#[tokio::test]
async fn the_composite_fake_applies_the_same_fan_out_rules() {
    let h = harness();
    let store = crate::testing::MemoryStore::default();
    let ctx = crate::testing::context(store.clone(), "2027-01-15T08:00:00Z");
    let endpoint = h.webhook("ws_a", "whk_created", &["certificate.created"]);
    let other = h.webhook("ws_a", "whk_revoked", &["certificate.revoked"]);
    let event = crate::events::OutboxEvent {
        id: 41,
        workspace_id: "ws_a".into(),
        event_type: "certificate.created".into(),
        payload: crate::events::envelope(None, "ws_a", "certificate.created", &json!({ "certificateId": 1 }), T0),
        created_at: T0,
        processed_at: None,
    };
    store.edit(|t| {
        t.webhooks.extend([endpoint, other]);
        t.events.push(event);
    });
    let deps = ctx.webhook_deps();
    assert_eq!(fan_out(&deps, 100).await.ok(), Some(1));
    let page = crate::pagination::PageRequest::new(None, Some(100), None, 100).unwrap_or_else(|err| panic!("{err}"));
    let listed = super::deliveries::list(&deps, &crate::testing::owner("ws_a"), &Default::default(), page)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let routed: Vec<(&str, &str)> =
        listed.items.iter().map(|d| (d.target_id.as_str(), d.event_type.as_str())).collect();
    assert_eq!(routed, [("whk_created", "certificate.created")]);
    assert_eq!(listed.items[0].status, DeliveryStatus::Pending);
    assert!(store.snapshot().events.iter().all(|e| e.processed_at.is_some()), "the event is marked fanned out");
}

#[tokio::test]
async fn a_star_subscription_receives_every_event_type() {
    let h = harness();
    h.webhook("ws_a", "whk_all", &["*"]);
    for event in ["certificate.created", "ca.health_changed", "webhook.test", "integration.disabled"] {
        h.emit("ws_a", event);
    }
    fan_out(&h.deps, 100).await.ok();
    assert_eq!(h.routed().len(), 4);
}

#[tokio::test]
async fn disabled_targets_receive_nothing() {
    let h = harness();
    let mut off = h.webhook("ws_a", "whk_off", &["*"]);
    off.enabled = false;
    h.store.with_webhook(off);
    let mut off = h.integration("ws_a", "int_off", &["*"]);
    off.enabled = false;
    h.store.with_integration(off);
    h.webhook("ws_a", "whk_on", &["*"]);
    h.emit("ws_a", "certificate.created");
    assert_eq!(fan_out(&h.deps, 100).await.ok(), Some(1));
    assert_eq!(h.routed(), [pair("whk_on", "certificate.created")]);
}

#[tokio::test]
async fn events_stay_in_their_workspace() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.webhook("ws_b", "whk_b", &["*"]);
    h.integration("ws_b", "int_b", &["*"]);
    h.emit("ws_a", "certificate.created");
    fan_out(&h.deps, 100).await.ok();
    assert_eq!(h.routed(), [pair("whk_a", "certificate.created")]);
    assert!(h.tables().deliveries.iter().all(|r| r.delivery.workspace_id == "ws_a"));
}

#[tokio::test]
async fn events_from_before_a_subscription_are_not_delivered() {
    let h = harness();
    let mut late = h.webhook("ws_a", "whk_late", &["*"]);
    late.subscribed_at = T0 + 1;
    h.store.with_webhook(late);
    h.webhook("ws_a", "whk_early", &["*"]);
    h.emit("ws_a", "certificate.created");
    fan_out(&h.deps, 100).await.ok();
    assert_eq!(h.routed(), [pair("whk_early", "certificate.created")]);
}

#[tokio::test]
async fn an_event_is_fanned_out_once_and_marked_processed() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    assert_eq!(fan_out(&h.deps, 100).await.ok(), Some(1));
    assert_eq!(fan_out(&h.deps, 100).await.ok(), Some(0));
    let tables = h.tables();
    assert_eq!(tables.deliveries.len(), 1);
    assert!(tables.events.iter().all(|e| e.processed_at == Some(T0)));
    // An event with no subscriber is processed all the same.
    h.emit("ws_z", "certificate.created");
    assert_eq!(fan_out(&h.deps, 100).await.ok(), Some(1));
    assert_eq!(h.tables().deliveries.len(), 1);
}

#[tokio::test]
async fn fan_out_takes_at_most_its_batch_oldest_first() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    let first = h.emit("ws_a", "certificate.created");
    let second = h.emit("ws_a", "certificate.updated");
    h.emit("ws_a", "certificate.deleted");
    assert_eq!(fan_out(&h.deps, 2).await.ok(), Some(2));
    let events: Vec<String> = h.tables().deliveries.iter().map(|r| r.delivery.event_id.clone()).collect();
    assert_eq!(events, [format!("evt_{first}"), format!("evt_{second}")]);
    assert_eq!(fan_out(&h.deps, 2).await.ok(), Some(1));
}

#[tokio::test]
async fn every_target_gets_the_same_envelope_with_the_event_id() {
    let h = harness();
    h.webhook("ws_a", "whk_1", &["*"]);
    h.webhook("ws_a", "whk_2", &["*"]);
    let id = h.emit("ws_a", "certificate.expired");
    fan_out(&h.deps, 10).await.ok();
    let tables = h.tables();
    let payloads: Vec<&str> = tables.deliveries.iter().map(|r| r.delivery.payload.as_str()).collect();
    assert_eq!(payloads.len(), 2);
    assert_eq!(payloads[0], payloads[1]);
    let body: Value = serde_json::from_str(payloads[0]).unwrap_or_default();
    assert_eq!(body["id"], format!("evt_{id}"));
    assert_eq!(body["type"], "certificate.expired");
    assert_eq!(body["workspaceId"], "ws_a");
    assert_eq!(body["occurredAt"], crate::clock::rfc3339(T0));
    assert_eq!(body["data"]["certificateId"], 1);
}

// ---- attempts, the retry schedule --------------------------------------------------------

#[tokio::test]
async fn a_2xx_answer_delivers_at_the_first_attempt() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    let summary = h.run_at(T0).await;
    assert_eq!((summary.events, summary.delivered, summary.retrying, summary.failed), (1, 1, 0, 0));
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!(
        (d.status, d.attempts, d.http_status, d.completed_at),
        (DeliveryStatus::Success, 1, Some(204), Some(T0))
    );
    assert_eq!(d.latency_ms, Some(7));
}

#[tokio::test]
async fn failures_are_retried_at_30s_2min_10min_1h_then_failed_after_the_fifth_attempt() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    h.transport.answering(Ok(503));
    let mut attempted_at = Vec::new();
    let mut at = T0;
    for _ in 0..5 {
        let summary = h.run_at(at).await;
        assert_eq!(summary.delivered + summary.retrying + summary.failed, 1, "one attempt due at {at}");
        attempted_at.push(at - T0);
        let d = h.tables().deliveries[0].delivery.clone();
        if d.status != DeliveryStatus::Pending {
            break;
        }
        // Nothing is attempted a millisecond early.
        let early = h.run_at(d.next_attempt_at - 1).await;
        assert_eq!(early.delivered + early.retrying + early.failed, 0);
        at = d.next_attempt_at;
    }
    assert_eq!(attempted_at, [0, 30_000, 120_000, 600_000, 3_600_000]);
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!((d.status, d.attempts, d.http_status), (DeliveryStatus::Failed, 5, Some(503)));
    assert_eq!(d.completed_at, Some(T0 + 3_600_000));
    assert_eq!(h.transport.sent().len(), 5);
    // Failed is final: later runs attempt nothing.
    let after = h.run_at(T0 + 7 * 3_600_000).await;
    assert_eq!(after.delivered + after.retrying + after.failed, 0);
}

#[tokio::test]
async fn a_delivery_stays_pending_until_its_final_attempt() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    h.transport.answering(Ok(500));
    for (n, at) in [0, 30_000, 120_000, 600_000].into_iter().enumerate() {
        let summary = h.run_at(T0 + at).await;
        assert_eq!(summary.retrying, 1);
        let d = h.tables().deliveries[0].delivery.clone();
        assert_eq!((d.status, d.attempts, d.completed_at), (DeliveryStatus::Pending, n as i64 + 1, None));
    }
}

#[tokio::test]
async fn a_retry_that_succeeds_ends_the_delivery_with_its_whole_duration() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    h.transport.answering(Err(TransportError::Timeout(Duration::from_secs(30))));
    h.run_at(T0).await;
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!(d.http_status, None);
    assert!(d.error.as_deref().is_some_and(|e| e.contains("timed out")), "{:?}", d.error);
    h.transport.answering(Ok(200));
    let summary = h.run_at(T0 + 30_000).await;
    assert_eq!(summary.delivered, 1);
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!((d.status, d.attempts, d.duration_ms), (DeliveryStatus::Success, 2, Some(30_000)));
    assert_eq!(d.first_attempt_at, Some(T0));
}

#[tokio::test]
async fn a_non_2xx_answer_is_recorded_with_its_status() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    h.transport.answering(Ok(302));
    h.run_at(T0).await;
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!((d.status, d.http_status), (DeliveryStatus::Pending, Some(302)));
    assert_eq!(d.error.as_deref(), Some("the receiver answered HTTP 302; a 2xx status is required"));
}

#[tokio::test]
async fn an_egress_refusal_is_retried_like_any_failure() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    h.transport.answering(Err(TransportError::Denied { reason: "private_address", message: "10.0.0.1".into() }));
    h.run_at(T0).await;
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!((d.status, d.next_attempt_at), (DeliveryStatus::Pending, T0 + 30_000));
    assert!(d.error.as_deref().is_some_and(|e| e.contains("private_address")));
}

#[tokio::test]
async fn deliveries_to_a_disabled_or_deleted_target_fail_without_a_request() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.webhook("ws_a", "whk_b", &["*"]);
    h.emit("ws_a", "certificate.created");
    fan_out(&h.deps, 10).await.ok();
    let mut off = h.tables().webhooks[0].clone();
    off.enabled = false;
    off.disabled_reason = Some("switched off".into());
    h.store.with_webhook(off);
    h.store.without_webhook("whk_b");
    let summary = h.run_at(T0).await;
    assert_eq!(summary.failed, 2);
    assert!(h.transport.sent().is_empty());
    let mut errors: Vec<String> = h.tables().deliveries.iter().filter_map(|r| r.delivery.error.clone()).collect();
    errors.sort();
    assert_eq!(errors, ["the webhook endpoint is disabled (switched off)", "the webhook endpoint was deleted"]);
    assert!(h.tables().deliveries.iter().all(|r| r.delivery.attempts == 1));
}

// ---- signing -----------------------------------------------------------------------------

#[tokio::test]
async fn the_post_is_signed_and_names_the_event_and_the_delivery() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    let id = h.emit("ws_a", "certificate.created");
    h.run_at(T0 + 1_500).await;
    let sent = h.transport.sent();
    assert_eq!(sent.len(), 1);
    let post = &sent[0];
    let delivery = h.tables().deliveries[0].delivery.clone();
    assert_eq!(post.url, "https://whk_a.example.com/hook");
    assert_eq!(post.body, delivery.payload.as_bytes());
    assert_eq!(post.timeout, Duration::from_secs(30));
    assert_eq!(header(post, "content-type"), "application/json");
    assert_eq!(header(post, signing::HEADER_EVENT_ID), format!("evt_{id}"));
    assert_eq!(header(post, signing::HEADER_EVENT_TYPE), "certificate.created");
    assert_eq!(header(post, signing::HEADER_DELIVERY_ID), delivery.id);
    // Unix seconds of the attempt, and the signature over `<seconds>.<body>`.
    let timestamp = (T0 + 1_500) / 1000;
    assert_eq!(header(post, signing::HEADER_TIMESTAMP), timestamp.to_string());
    let signature = header(post, signing::HEADER_SIGNATURE);
    assert!(signing::verify(SECRET, timestamp, &post.body, signature));
    assert!(!signing::verify("whsec_other", timestamp, &post.body, signature));
    assert!(!signature.contains(','));
}

#[tokio::test]
async fn during_a_rotation_grace_both_secrets_sign_and_after_it_only_the_new_one() {
    let h = harness();
    let mut endpoint = h.webhook("ws_a", "whk_a", &["*"]);
    let context = endpoints::secret_context("ws_a", "whk_a");
    endpoint.previous_secret_sealed = Some(key().seal_bound(b"whsec_previous", &context, &OsEntropy));
    endpoint.previous_secret_until = Some(T0 + 60_000);
    h.store.with_webhook(endpoint);
    h.emit("ws_a", "certificate.created");
    h.run_at(T0).await;
    h.emit("ws_a", "certificate.updated");
    h.run_at(T0 + 60_000).await;
    let sent = h.transport.sent();
    assert_eq!(sent.len(), 2);
    let check = |post: &OutboundPost, secret: &str| {
        let timestamp: i64 = header(post, signing::HEADER_TIMESTAMP).parse().unwrap_or_default();
        signing::verify(secret, timestamp, &post.body, header(post, signing::HEADER_SIGNATURE))
    };
    assert!(check(&sent[0], SECRET) && check(&sent[0], "whsec_previous"));
    assert!(header(&sent[0], signing::HEADER_SIGNATURE).starts_with(&signing::sign(SECRET, T0 / 1000, &sent[0].body)));
    assert!(check(&sent[1], SECRET) && !check(&sent[1], "whsec_previous"));
}

// ---- auto-disable ------------------------------------------------------------------------

/// Walks one delivery through its five failing attempts.
async fn fail_five_times(h: &Harness) {
    h.transport.answering(Ok(500));
    for at in [0, 30_000, 120_000, 600_000, 3_600_000] {
        h.run_at(T0 + at).await;
    }
}

#[tokio::test]
async fn a_target_failing_longer_than_the_limit_is_disabled_at_its_next_final_failure() {
    let mut h = harness();
    h.settings.disable_after = Duration::from_secs(3 * 24 * 3600);
    let mut endpoint = h.webhook("ws_a", "whk_a", &["*"]);
    endpoint.failing_since = Some(T0 + 3_600_000 - 3 * DAY_MS);
    h.store.with_webhook(endpoint);
    h.emit("ws_a", "certificate.created");
    fail_five_times(&h).await;
    let tables = h.tables();
    let endpoint = &tables.webhooks[0];
    assert!(!endpoint.enabled);
    assert_eq!(endpoint.disabled_reason.as_deref(), Some("disabled automatically: every delivery failed for 3 days"));
    let audit = tables.audit.iter().find(|a| a.action == "webhook.disabled");
    assert!(audit.is_some_and(|a| a.target_id.as_deref() == Some("whk_a") && a.actor_type == "system"));
    let event = tables.events.iter().find(|e| e.event_type == "webhook.disabled");
    let event = event.unwrap_or_else(|| panic!("no webhook.disabled event"));
    assert_eq!(event.workspace_id, "ws_a");
    assert_eq!(event.payload["data"]["id"], "whk_a");
    assert_eq!(event.payload["data"]["lastError"], "the receiver answered HTTP 500; a 2xx status is required");
    // One unit of work recorded both: the audit row carries the event's data, at the same instant.
    let audit = audit.unwrap_or_else(|| panic!("no webhook.disabled audit row"));
    assert_eq!(audit.details, event.payload["data"]);
    assert_eq!(audit.created_at, event.created_at);
}

#[tokio::test]
async fn a_target_failing_for_less_than_the_limit_stays_enabled() {
    let h = harness();
    let mut endpoint = h.webhook("ws_a", "whk_a", &["*"]);
    endpoint.failing_since = Some(T0 - 2 * DAY_MS);
    h.store.with_webhook(endpoint);
    h.emit("ws_a", "certificate.created");
    fail_five_times(&h).await;
    let tables = h.tables();
    assert!(tables.webhooks[0].enabled);
    assert!(tables.audit.is_empty() && tables.events.iter().all(|e| e.event_type != "webhook.disabled"));
}

#[tokio::test]
async fn failures_start_the_failing_clock_and_a_success_stops_it() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    h.transport.answering(Ok(500));
    h.run_at(T0).await;
    assert_eq!(h.tables().webhooks[0].failing_since, Some(T0));
    h.run_at(T0 + 30_000).await;
    assert_eq!(h.tables().webhooks[0].failing_since, Some(T0), "the first failure is kept");
    h.transport.answering(Ok(200));
    h.run_at(T0 + 120_000).await;
    assert_eq!(h.tables().webhooks[0].failing_since, None);
}

#[tokio::test]
async fn an_integration_failing_too_long_is_disabled_too() {
    let mut h = harness_with(slack_plugin());
    h.settings.disable_after = Duration::from_secs(3600);
    let mut integration = h.integration("ws_a", "int_a", &["*"]);
    integration.failing_since = Some(T0 - DAY_MS);
    h.store.with_integration(integration);
    h.emit("ws_a", "certificate.created");
    fail_five_times(&h).await;
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Failed, 5));
    assert!(h.transport.sent().is_empty(), "integrations are notified through their plugin");
    let tables = h.tables();
    assert!(!tables.integrations[0].enabled);
    assert!(tables.events.iter().any(|e| e.event_type == "integration.disabled"));
    assert!(tables.audit.iter().any(|a| a.action == "integration.disabled"));
}

// ---- claims and leases -------------------------------------------------------------------

async fn claim(h: &Harness, owner: &str, now: i64, exclude: &[String]) -> Vec<String> {
    let mut tx = h.deps.store.begin().await.unwrap_or_else(|err| panic!("{err}"));
    let claimed = tx.webhooks().claim_deliveries(now, owner, now + 60_000, 10, exclude).await;
    let claimed = claimed.unwrap_or_else(|err| panic!("{err}"));
    tx.commit().await.unwrap_or_else(|err| panic!("{err}"));
    claimed.into_iter().map(|d| d.id).collect()
}

#[tokio::test]
async fn a_delivery_leased_by_another_worker_waits_for_its_lease_to_expire() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    fan_out(&h.deps, 10).await.ok();
    // A worker that died after claiming: its lease runs to T0 + 60 s.
    assert_eq!(claim(&h, "wrk_dead", T0, &[]).await.len(), 1);
    let summary = h.run_at(T0 + 59_999).await;
    assert_eq!(summary.delivered, 0);
    assert!(h.transport.sent().is_empty());
    let summary = h.run_at(T0 + 60_001).await;
    assert_eq!(summary.delivered, 1);
    assert_eq!(h.tables().deliveries[0].delivery.status, DeliveryStatus::Success);
}

#[tokio::test]
async fn a_completion_whose_lease_moved_on_is_dropped() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    fan_out(&h.deps, 10).await.ok();
    let id = claim(&h, "wrk_slow", T0, &[]).await.remove(0);
    // The lease expires and another worker takes the delivery over.
    assert_eq!(claim(&h, "wrk_other", T0 + 61_000, &[]).await, std::slice::from_ref(&id));
    let done = super::deliveries::complete(
        &id,
        "wrk_slow",
        0,
        None,
        T0,
        T0 + 62_000,
        super::deliveries::AttemptResult::Delivered { http_status: Some(200), latency_ms: None, reference: None },
    );
    let mut tx = h.deps.store.begin().await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(tx.webhooks().complete_deliveries(&[done]).await.ok(), Some(0));
    tx.commit().await.ok();
    assert_eq!(h.tables().deliveries[0].delivery.status, DeliveryStatus::Pending);
}

#[tokio::test]
async fn claims_pass_over_excluded_targets_and_take_the_soonest_due_first() {
    let h = harness();
    h.webhook("ws_a", "whk_busy", &["*"]);
    h.webhook("ws_a", "whk_free", &["*"]);
    h.emit("ws_a", "certificate.created");
    fan_out(&h.deps, 10).await.ok();
    let claimed = claim(&h, "wrk_a", T0, &["whk_busy".to_owned()]).await;
    let tables = h.tables();
    let target_of =
        |id: &str| tables.deliveries.iter().find(|r| r.delivery.id == id).map(|r| r.delivery.target_id.clone());
    assert_eq!(claimed.iter().map(|id| target_of(id)).collect::<Vec<_>>(), [Some("whk_free".to_owned())]);
    assert_eq!(tables.deliveries.iter().filter(|r| r.lease_owner.is_some()).count(), 1);
}

#[tokio::test]
async fn lease_renewal_extends_only_the_owners_live_leases() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.webhook("ws_a", "whk_b", &["*"]);
    h.emit("ws_a", "certificate.created");
    fan_out(&h.deps, 10).await.ok();
    claim(&h, "wrk_a", T0, &["whk_b".to_owned()]).await;
    claim(&h, "wrk_b", T0, &[]).await;
    let mut tx = h.deps.store.begin().await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(tx.webhooks().extend_leases("wrk_a", T0 + 30_000, T0 + 90_000).await.ok(), Some(1));
    // An expired lease is not revived.
    assert_eq!(tx.webhooks().extend_leases("wrk_b", T0 + 61_000, T0 + 120_000).await.ok(), Some(0));
    tx.commit().await.ok();
    let tables = h.tables();
    let lease = |owner: &str| {
        tables.deliveries.iter().find(|r| r.lease_owner.as_deref() == Some(owner)).and_then(|r| r.lease_until)
    };
    assert_eq!((lease("wrk_a"), lease("wrk_b")), (Some(T0 + 90_000), Some(T0 + 60_000)));
}

#[tokio::test]
async fn a_redelivery_is_a_second_delivery_of_the_same_event() {
    let h = harness();
    h.webhook("ws_a", "whk_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    h.run_at(T0).await;
    let original = h.tables().deliveries[0].delivery.clone();
    let again = NewDelivery {
        id: "dlv_again".into(),
        workspace_id: original.workspace_id.clone(),
        target_kind: original.target_kind,
        target_id: original.target_id.clone(),
        event_id: original.event_id.clone(),
        event_type: original.event_type.clone(),
        payload: original.payload.clone(),
        redelivery_of: Some(original.id.clone()),
        created_at: T0 + 5_000,
    };
    let mut tx = h.deps.store.begin().await.unwrap_or_else(|err| panic!("{err}"));
    // A second first delivery of the same (event, target) is skipped; a redelivery is not.
    let duplicate = NewDelivery { id: "dlv_dup".into(), redelivery_of: None, ..again.clone() };
    tx.webhooks().insert_deliveries(&[duplicate]).await.ok();
    tx.webhooks().insert_delivery(&again).await.ok();
    tx.commit().await.ok();
    let summary = h.run_at(T0 + 5_000).await;
    assert_eq!(summary.delivered, 1);
    let sent = h.transport.sent();
    assert_eq!(header(&sent[1], signing::HEADER_EVENT_ID), original.event_id);
    assert_eq!(header(&sent[1], signing::HEADER_DELIVERY_ID), "dlv_again");
    assert_eq!(h.tables().deliveries.len(), 2);
}

// ---- the status vocabulary ---------------------------------------------------------------

#[test]
fn delivery_statuses_keep_their_wire_names() {
    for (status, text) in
        [(DeliveryStatus::Pending, "pending"), (DeliveryStatus::Success, "success"), (DeliveryStatus::Failed, "failed")]
    {
        assert_eq!(status.as_str(), text);
        assert_eq!(DeliveryStatus::parse(text), Some(status));
        assert_eq!(serde_json::to_value(status).ok(), Some(Value::String(text.to_owned())));
    }
    assert_eq!(DeliveryStatus::parse("Pending"), None);
    assert_eq!(DeliveryStatus::parse("retrying"), None);
}

#[tokio::test]
async fn a_delivery_to_an_integration_no_plugin_serves_fails_at_once() {
    let h = harness();
    h.integration("ws_a", "int_a", &["*"]);
    h.emit("ws_a", "certificate.created");
    let summary = h.run_at(T0).await;
    assert_eq!(summary.failed, 1);
    let d = h.tables().deliveries[0].delivery.clone();
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Failed, 1));
    assert!(d.error.as_deref().is_some_and(|e| e.contains("No installed integration plugin serves type `slack`")));
}
