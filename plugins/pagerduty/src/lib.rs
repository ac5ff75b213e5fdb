//! PagerDuty integration: certificate problems trigger alerts through the Events API v2,
//! and renewal (or deletion) resolves them. One alert per certificate: the dedup key is
//! `trellis-<workspaceId>-<certificateId>`, so `certificate.renewed` resolves the incident
//! `certificate.expiring` opened.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use trellis_plugin_sdk::prelude::*;

/// Where the Events API lives unless `baseUrl` says otherwise.
const DEFAULT_BASE_URL: &str = "https://events.pagerduty.com";

/// Event types that trigger an alert, hence the keys `severityOverrides` may name.
const TRIGGERING: &[&str] = &[
    "certificate.expiring",
    "certificate.expired",
    "certificate.revoked",
    "certificate.renewal_failed",
    "ca.health_changed",
];

/// The integration record's configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Integration key (32 characters) of an "Events API v2" integration on a PagerDuty
    /// service. Kept encrypted and never shown again.
    #[schemars(extend("writeOnly" = true, "minLength" = 32, "maxLength" = 32))]
    routing_key: String,
    /// Events API base URL: `https://events.pagerduty.com` (default) or
    /// `https://events.eu.pagerduty.com` for EU accounts.
    #[serde(default)]
    #[schemars(extend("pattern" = "^https://", "format" = "uri", "default" = DEFAULT_BASE_URL))]
    base_url: Option<String>,
    /// Alert severity per triggering event type, replacing the default (for example
    /// `{"certificate.expiring": "error"}`).
    #[serde(default)]
    severity_overrides: BTreeMap<String, Severity>,
}

impl Config {
    fn base_url(&self) -> &str {
        self.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL).trim_end_matches('/')
    }
}

/// A PagerDuty alert severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// `critical`.
    Critical,
    /// `error`.
    Error,
    /// `warning`.
    Warning,
    /// `info`.
    Info,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// What an event does in PagerDuty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Trigger(Severity),
    Resolve,
}

fn action(config: &Config, event: &Event) -> Option<Action> {
    let default = match event.event_type.as_str() {
        "certificate.expiring" => Action::Trigger(Severity::Warning),
        "certificate.expired" | "certificate.revoked" | "certificate.renewal_failed" => {
            Action::Trigger(Severity::Critical)
        }
        "certificate.renewed" | "certificate.deleted" => Action::Resolve,
        "ca.health_changed" => match event.health().as_deref() {
            Some("unhealthy") => Action::Trigger(Severity::Error),
            Some("healthy") => Action::Resolve,
            _ => return None,
        },
        _ => return None,
    };
    Some(match (default, config.severity_overrides.get(&event.event_type)) {
        (Action::Trigger(_), Some(severity)) => Action::Trigger(*severity),
        (action, _) => action,
    })
}

/// The plugin.
pub struct PagerDuty;

impl Integration for PagerDuty {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::integration("io.trellis.pagerduty", env!("CARGO_PKG_VERSION"), "PagerDuty", &["pagerduty"])
            .with_description(
                "Triggers PagerDuty alerts (Events API v2) for expiring, expired, revoked and unrenewable \
                 certificates and unhealthy CAs, and resolves them on renewal, deletion or recovery.",
            )
            .with_outbound_hosts(&["events.pagerduty.com", "events.eu.pagerduty.com"])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        let key = &config.routing_key;
        if key.chars().count() != 32 || !key.chars().all(|c| c.is_ascii_alphanumeric()) {
            issues.push(ConfigIssue::new(
                "/routingKey",
                "must be the 32-character integration key of an Events API v2 integration",
            ));
        }
        if let Some(problem) = config.base_url.as_deref().and_then(http::https_base_url_problem) {
            issues.push(ConfigIssue::new("/baseUrl", problem));
        }
        for event_type in config.severity_overrides.keys() {
            if !TRIGGERING.contains(&event_type.as_str()) {
                issues.push(ConfigIssue::new(
                    &format!("/severityOverrides/{}", event_type.replace('~', "~0").replace('/', "~1")),
                    format!("{event_type} does not trigger an alert; overrides apply to {}", TRIGGERING.join(", ")),
                ));
            }
        }
        if issues.is_empty() {
            Ok(())
        } else {
            Err(PluginError::InvalidConfig(issues))
        }
    }

    fn test(_ctx: &CallContext, config: &Config) -> Result<TestReport, PluginError> {
        let mut checks = vec![Check::pass("config", "configuration is valid")];
        // A change event: it shows on the service's timeline but never opens an incident or
        // notifies anyone, so it is the harmless way to prove the routing key.
        let body = json!({
            "routing_key": config.routing_key,
            "payload": {
                "summary": "Trellis connection test",
                "source": "trellis",
                "custom_details": {"message": "This is a test change event from Trellis; it opens no incident."}
            }
        });
        let url = format!("{}/v2/change/enqueue", config.base_url());
        match send(&url, &body) {
            Ok((status, _)) => checks.push(Check::pass(
                "change-event",
                format!("PagerDuty accepted a test change event for the routing key (HTTP {status})"),
            )),
            Err(err) => checks.push(Check::fail("change-event", err.to_string())),
        }
        Ok(TestReport::from_checks("PagerDuty Events API test", checks))
    }

    fn notify(ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
        let Some(action) = action(config, event) else {
            log::info("pagerduty event skipped", &[("event", &event.id), ("type", &event.event_type)]);
            return Ok(Delivery::delivered(None));
        };
        let workspace = event.workspace_id(ctx);
        let subject = event.subject_id();
        let dedup_key = match (&subject, action) {
            (Some(subject), _) => dedup_key(workspace, subject),
            // An alert nobody can resolve by id still deduplicates redeliveries of the event.
            (None, Action::Trigger(_)) => dedup_key(workspace, &event.id),
            (None, Action::Resolve) => {
                log::info(
                    "pagerduty event skipped",
                    &[("event", &event.id), ("type", &event.event_type), ("reason", "no subject id to resolve")],
                );
                return Ok(Delivery::delivered(None));
            }
        };
        let body = match action {
            Action::Resolve => json!({
                "routing_key": config.routing_key,
                "event_action": "resolve",
                "dedup_key": dedup_key,
            }),
            Action::Trigger(severity) => trigger_body(config, event, workspace, &dedup_key, severity),
        };
        let url = format!("{}/v2/enqueue", config.base_url());
        let (status, answer) = send(&url, &body)?;
        let reference = answer.get("dedup_key").and_then(Value::as_str).unwrap_or(&dedup_key).to_owned();
        let event_action = if action == Action::Resolve { "resolve" } else { "trigger" };
        log::info(
            "pagerduty event sent",
            &[("event", &event.id), ("action", event_action), ("status", &status.to_string())],
        );
        Ok(Delivery::delivered(Some(status)).with_reference(reference))
    }
}

fn trigger_body(config: &Config, event: &Event, workspace: &str, dedup_key: &str, severity: Severity) -> Value {
    let data = event.data();
    let is_ca = event.event_type.starts_with("ca.");
    let source = if is_ca { util::text(data, "name") } else { util::text(data, "commonName") }
        .unwrap_or_else(|| "trellis".into());
    let summary =
        if event.summary.trim().is_empty() { format!("{} {source}", event.event_type) } else { event.summary.clone() };
    let mut details = data.as_object().cloned().unwrap_or_default();
    details.insert("eventType".into(), Value::String(event.event_type.clone()));
    details.insert("eventId".into(), Value::String(event.id.clone()));
    details.insert("workspaceId".into(), Value::String(workspace.to_owned()));
    json!({
        "routing_key": config.routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "client": "Trellis",
        "payload": {
            "summary": util::truncate(&summary, 1024),
            "source": source,
            "severity": severity.as_str(),
            "timestamp": event.occurred_at(),
            "component": if is_ca { "certificate-authority" } else { "certificate" },
            "group": workspace,
            "class": event.event_type,
            "custom_details": Value::Object(details),
        }
    })
}

fn dedup_key(workspace: &str, subject: &str) -> String {
    util::truncate(&format!("trellis-{workspace}-{subject}"), 255)
}

/// Posts to the Events API; the status and the JSON answer (`{}` when there is none).
fn send(url: &str, body: &Value) -> Result<(u16, Map<String, Value>), PluginError> {
    let res = http::Request::post(url).header("accept", "application/json").json(body)?.timeout_ms(10_000).send()?;
    classify(&res)?;
    let answer =
        serde_json::from_slice::<Value>(&res.body).ok().and_then(|v| v.as_object().cloned()).unwrap_or_default();
    Ok((res.status, answer))
}

/// Maps the Events API's answer: 202 accepted, 400 invalid event (an unknown routing key is
/// the credential being wrong), 429 throttled, 5xx retry.
fn classify(res: &http::Response) -> Result<(), PluginError> {
    let text = res.text();
    let message = || {
        let answer: Value = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        let mut parts: Vec<String> =
            answer.get("message").and_then(Value::as_str).map(str::to_owned).into_iter().collect();
        if let Some(errors) = answer.get("errors").and_then(Value::as_array) {
            parts.extend(errors.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        if parts.is_empty() {
            util::truncate(&text, 200)
        } else {
            util::truncate(&parts.join(": "), 300)
        }
    };
    match res.status {
        200..=299 => Ok(()),
        429 => Err(PluginError::RateLimited(res.retry_after_secs())),
        401 | 403 => Err(PluginError::unauthorized(format!("PagerDuty refused the routing key: {}", message()))),
        400 if text.to_ascii_lowercase().contains("routing") => {
            Err(PluginError::unauthorized(format!("PagerDuty refused the routing key: {}", message())))
        }
        status => Err(PluginError::upstream(
            Some(status),
            format!("PagerDuty answered HTTP {status}: {}", message()),
            status >= 500 || status == 408,
        )),
    }
}

trellis_plugin_sdk::export_integration!(PagerDuty);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_plugin_sdk::testing;

    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";
    const ENQUEUE: &str = "https://events.pagerduty.com/v2/enqueue";
    const ACCEPTED: &str = r#"{"status":"success","message":"Event processed","dedup_key":"trellis-ws_1-crt_1"}"#;

    fn config(extra: Value) -> Config {
        let mut config = json!({"routingKey": KEY});
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        testing::config(config).expect("config")
    }

    fn certificate_event(event_type: &str, data: Value) -> Event {
        Event::for_test(
            event_type,
            "Certificate api.example.com expires in 7 days",
            json!({
                "id": "evt_123",
                "type": event_type,
                "workspaceId": "ws_1",
                "occurredAt": "2026-11-25T10:00:00.000Z",
                "data": data
            }),
        )
    }

    fn expiring() -> Event {
        certificate_event(
            "certificate.expiring",
            json!({
                "certificateId": "crt_1",
                "commonName": "api.example.com",
                "issuer": "CN=Example CA",
                "serialNumber": "0a1b",
                "fingerprintSha256": "ab:cd",
                "expiresAt": "2026-12-02T10:00:00.000Z",
                "status": "active",
                "daysUntilExpiry": 7
            }),
        )
    }

    #[test]
    fn the_routing_key_is_a_secret_of_the_derived_schema() {
        assert_eq!(testing::secret_fields::<Config>(), [("/routingKey".to_owned(), false)]);
        let schema = testing::config_schema::<Config>();
        assert_eq!(schema["required"], json!(["routingKey"]));
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(PagerDuty::describe().id(), "io.trellis.pagerduty");
    }

    #[test]
    fn every_config_problem_is_listed() {
        let bad: Config = testing::config(json!({
            "routingKey": "short",
            "baseUrl": "http://events.pagerduty.com",
            "severityOverrides": {"certificate.created": "info", "certificate.expiring": "error"}
        }))
        .expect("parses");
        let Err(PluginError::InvalidConfig(issues)) = PagerDuty::validate_config(&bad) else {
            panic!("invalid config expected");
        };
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(fields, ["/routingKey", "/baseUrl", "/severityOverrides/certificate.created"]);
        assert_eq!(PagerDuty::validate_config(&config(json!({"baseUrl": "https://localhost:8443"}))), Ok(()));
        assert!(testing::config::<Config>(json!({"routingKey": KEY, "severityOverrides": {"a": "loud"}})).is_err());
    }

    #[test]
    fn an_expiring_certificate_triggers_a_warning_per_certificate() {
        testing::http::respond("POST", ENQUEUE, 202, ACCEPTED);
        let delivery = PagerDuty::notify(&testing::context("int_1"), &config(json!({})), &expiring()).expect("sent");
        assert_eq!(delivery.status(), Some(202));
        assert_eq!(delivery.reference(), Some("trellis-ws_1-crt_1"));
        let sent = testing::http::requests();
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].method.as_str(), sent[0].url.as_str()), ("POST", ENQUEUE));
        assert_eq!(sent[0].header("content-type").as_deref(), Some("application/json"));
        let body = sent[0].json();
        assert_eq!(body["routing_key"], KEY);
        assert_eq!(body["event_action"], "trigger");
        assert_eq!(body["dedup_key"], "trellis-ws_1-crt_1");
        let payload = &body["payload"];
        assert_eq!(payload["summary"], "Certificate api.example.com expires in 7 days");
        assert_eq!(payload["source"], "api.example.com");
        assert_eq!(payload["severity"], "warning");
        assert_eq!(payload["timestamp"], "2026-11-25T10:00:00.000Z");
        assert_eq!(payload["component"], "certificate");
        assert_eq!(payload["group"], "ws_1");
        assert_eq!(payload["class"], "certificate.expiring");
        assert_eq!(payload["custom_details"]["serialNumber"], "0a1b");
        assert_eq!(payload["custom_details"]["daysUntilExpiry"], 7);
        assert_eq!(payload["custom_details"]["eventId"], "evt_test");
    }

    #[test]
    fn severities_follow_the_event_and_the_overrides() {
        for (event_type, severity) in [
            ("certificate.expired", "critical"),
            ("certificate.revoked", "critical"),
            ("certificate.renewal_failed", "critical"),
            ("certificate.expiring", "info"),
        ] {
            testing::reset();
            testing::http::respond("POST", ENQUEUE, 202, ACCEPTED);
            let config = config(json!({"severityOverrides": {"certificate.expiring": "info"}}));
            let event = certificate_event(event_type, json!({"certificateId": "crt_1"}));
            PagerDuty::notify(&testing::context("int_1"), &config, &event).expect("sent");
            assert_eq!(testing::http::requests()[0].json()["payload"]["severity"], severity, "{event_type}");
        }
        testing::reset();
        testing::http::respond("POST", ENQUEUE, 202, "{}");
        let event = Event::for_test(
            "ca.health_changed",
            "CA Example moved to unhealthy",
            json!({"workspaceId": "ws_1", "data": {"caId": "ca_1", "name": "Example", "previous": "healthy", "current": "unhealthy"}}),
        );
        let delivery = PagerDuty::notify(&testing::context("int_1"), &config(json!({})), &event).expect("sent");
        assert_eq!(delivery.reference(), Some("trellis-ws_1-ca_1"));
        let body = testing::http::requests()[0].json();
        assert_eq!(
            (body["payload"]["severity"].as_str(), body["payload"]["source"].as_str()),
            (Some("error"), Some("Example"))
        );
        assert_eq!(body["payload"]["component"], "certificate-authority");
    }

    #[test]
    fn renewal_resolves_the_incident_of_the_renewed_certificate() {
        testing::http::respond("POST", ENQUEUE, 202, ACCEPTED);
        let event = certificate_event(
            "certificate.renewed",
            json!({"oldCertificateId": "crt_1", "newCertificateId": "crt_2", "commonName": "api.example.com", "caId": "ca_1"}),
        );
        let delivery = PagerDuty::notify(&testing::context("int_1"), &config(json!({})), &event).expect("sent");
        assert_eq!(delivery.reference(), Some("trellis-ws_1-crt_1"));
        let body = testing::http::requests()[0].json();
        assert_eq!(body, json!({"routing_key": KEY, "event_action": "resolve", "dedup_key": "trellis-ws_1-crt_1"}));
        testing::reset();
        testing::http::respond("POST", ENQUEUE, 202, "{}");
        let event = certificate_event("certificate.deleted", json!({"certificateId": "crt_9"}));
        let delivery = PagerDuty::notify(&testing::context("int_1"), &config(json!({})), &event).expect("sent");
        assert_eq!(delivery.reference(), Some("trellis-ws_1-crt_9"), "falls back to its own key");
        assert_eq!(testing::http::requests()[0].json()["event_action"], "resolve");
    }

    #[test]
    fn other_events_are_skipped_without_a_request() {
        for (event_type, data) in [
            ("certificate.created", json!({"certificateId": "crt_1"})),
            ("discovery.scan_completed", json!({})),
            ("webhook.test", json!({})),
            ("ca.health_changed", json!({"caId": "ca_1", "current": "degraded"})),
        ] {
            testing::reset();
            let event = certificate_event(event_type, data);
            let delivery = PagerDuty::notify(&testing::context("int_1"), &config(json!({})), &event).expect("skipped");
            assert_eq!(delivery, Delivery::delivered(None), "{event_type}");
            assert!(testing::http::requests().is_empty(), "{event_type}");
            assert!(testing::logs().iter().any(|l| l.starts_with("INFO pagerduty event skipped")), "{event_type}");
        }
    }

    #[test]
    fn errors_map_to_plugin_errors() {
        type Expect = fn(&PluginError) -> bool;
        let cases: [(u16, &str, Expect); 5] = [
            (
                400,
                r#"{"status":"invalid event","message":"Event object is invalid","errors":["Invalid routing key"]}"#,
                |e| matches!(e, PluginError::Unauthorized(_)),
            ),
            (
                400,
                r#"{"status":"invalid event","message":"Event object is invalid","errors":["'payload.severity' is missing"]}"#,
                |e| matches!(e, PluginError::Upstream { status: Some(400), retryable: false, message } if message.contains("severity")),
            ),
            (403, "", |e| matches!(e, PluginError::Unauthorized(_))),
            (429, "", |e| *e == PluginError::RateLimited(None)),
            (502, "bad gateway", |e| matches!(e, PluginError::Upstream { status: Some(502), retryable: true, .. })),
        ];
        for (status, body, expected) in cases {
            testing::reset();
            testing::http::respond("POST", ENQUEUE, status, body);
            let err =
                PagerDuty::notify(&testing::context("int_1"), &config(json!({})), &expiring()).expect_err("fails");
            assert!(expected(&err), "{status}: {err:?}");
        }
        let res =
            http::Response { status: 429, headers: vec![("retry-after".into(), b"12".to_vec())], body: Vec::new() };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(Some(12))));
    }

    #[test]
    fn the_test_sends_a_change_event_to_the_configured_base_url() {
        let config = config(json!({"baseUrl": "https://localhost:8443/"}));
        testing::http::respond(
            "POST",
            "https://localhost:8443/v2/change/enqueue",
            202,
            r#"{"message":"Change event processed","status":"success"}"#,
        );
        let report = PagerDuty::test(&testing::context("int_1"), &config).expect("report");
        assert!(report.success(), "{report:?}");
        let names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["config", "change-event"]);
        let body = testing::http::requests()[0].json();
        assert_eq!(body["routing_key"], KEY);
        assert_eq!(body["payload"]["summary"], "Trellis connection test");
        assert!(body.get("event_action").is_none(), "a change event, never an alert");
        testing::reset();
        testing::http::respond(
            "POST",
            "https://localhost:8443/v2/change/enqueue",
            400,
            r#"{"errors":["Invalid routing key"]}"#,
        );
        let report = PagerDuty::test(&testing::context("int_1"), &config).expect("report");
        assert!(!report.success());
    }
}
