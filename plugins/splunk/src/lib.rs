//! Splunk integration: each certificate lifecycle event becomes one Splunk event, sent to an
//! HTTP Event Collector (`POST /services/collector/event`) with the webhook payload as its body.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// The integration record's configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The HTTP Event Collector, e.g. `https://splunk.example.com:8088` or
    /// `https://http-inputs-<stack>.splunkcloud.com` (a pasted `…/services/collector/event` is
    /// accepted too).
    #[schemars(extend("pattern" = "^https://", "format" = "uri"))]
    hec_url: String,
    /// The HEC token. Kept encrypted and never shown again.
    #[schemars(extend("writeOnly" = true))]
    hec_token: String,
    /// Index to write to (the token's default index when unset; the token must allow it).
    #[serde(default)]
    index: Option<String>,
    /// Source type of the events.
    #[serde(default = "default_sourcetype")]
    sourcetype: String,
    /// Source of the events.
    #[serde(default = "default_source")]
    source: String,
}

fn default_sourcetype() -> String {
    "trellis:event".into()
}

fn default_source() -> String {
    "trellis".into()
}

impl Config {
    /// The collector's base URL, without a trailing `/services/collector…` someone pasted.
    fn base(&self) -> &str {
        let mut base = self.hec_url.trim_end_matches('/');
        for suffix in ["/services/collector/event/1.0", "/services/collector/event", "/services/collector"] {
            if let Some(stripped) = base.strip_suffix(suffix) {
                base = stripped;
                break;
            }
        }
        base
    }

    fn post_event(&self, body: &Value) -> Result<u16, PluginError> {
        let res = http::Request::post(&format!("{}/services/collector/event", self.base()))
            .header("authorization", &format!("Splunk {}", self.hec_token))
            .header("accept", "application/json")
            .json(body)?
            .timeout_ms(10_000)
            .send()?;
        classify(&res)?;
        Ok(res.status)
    }
}

/// The plugin.
pub struct Splunk;

impl Integration for Splunk {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::integration("io.trellis.splunk", env!("CARGO_PKG_VERSION"), "Splunk", &["splunk"])
            .with_description("Sends certificate lifecycle events to a Splunk HTTP Event Collector.")
            .with_outbound_hosts(&["*.splunkcloud.com"])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        if let Some(problem) = http::https_base_url_problem(&config.hec_url) {
            issues.push(ConfigIssue::new("/hecUrl", problem));
        }
        let token = &config.hec_token;
        if token.trim().is_empty() || token.chars().any(char::is_whitespace) {
            issues.push(ConfigIssue::new("/hecToken", "must be an HEC token (no spaces)"));
        }
        if config.index.as_deref().is_some_and(|i| i.trim().is_empty() || i.chars().any(char::is_whitespace)) {
            issues.push(ConfigIssue::new("/index", "must be an index name without spaces when set"));
        }
        for (field, value) in [("/sourcetype", &config.sourcetype), ("/source", &config.source)] {
            if value.trim().is_empty() {
                issues.push(ConfigIssue::new(field, "must not be empty"));
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
        let health = http::Request::get(&format!("{}/services/collector/health", config.base()))
            .header("accept", "application/json")
            .timeout_ms(10_000)
            .send()
            .map_err(PluginError::from)
            .and_then(|res| classify(&res).map(|()| hec_text(&res)));
        match health {
            Ok(text) => {
                checks.push(Check::pass("hec-health", if text.is_empty() { "HEC is healthy".into() } else { text }))
            }
            Err(err) => checks.push(Check::fail("hec-health", err.to_string())),
        }
        // No `time`: the collector stamps the test event on receipt.
        let mut body = json!({
            "host": "trellis",
            "source": config.source,
            "sourcetype": config.sourcetype,
            "event": {"type": "webhook.test", "message": "Trellis connection test"}
        });
        if let Some(index) = &config.index {
            body["index"] = Value::String(index.clone());
        }
        match config.post_event(&body) {
            Ok(status) => checks.push(Check::pass("test-event", format!("HEC accepted a test event (HTTP {status})"))),
            Err(err) => checks.push(Check::fail("test-event", err.to_string())),
        }
        Ok(TestReport::from_checks("Splunk HTTP Event Collector test", checks))
    }

    fn notify(_ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
        let payload = match &event.payload {
            Value::Object(map) if !map.is_empty() => event.payload.clone(),
            _ => json!({"id": event.id, "type": event.event_type, "summary": event.summary}),
        };
        // Seconds with millisecond decimals, as HEC's `time` wants them.
        let time = event.occurred_at_ms as f64 / 1000.0;
        let mut body = json!({
            "time": time,
            "host": "trellis",
            "source": config.source,
            "sourcetype": config.sourcetype,
            "event": payload,
        });
        if let Some(index) = &config.index {
            body["index"] = Value::String(index.clone());
        }
        let status = config.post_event(&body)?;
        log::info("splunk event sent", &[("event", &event.id), ("status", &status.to_string())]);
        Ok(Delivery::delivered(Some(status)))
    }
}

/// HEC's `{"text", "code"}` answer.
fn hec_answer(res: &http::Response) -> (Option<i64>, String) {
    let answer: Value = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
    let code = answer.get("code").and_then(Value::as_i64);
    let text =
        answer.get("text").and_then(Value::as_str).map_or_else(|| util::truncate(&res.text(), 200), str::to_owned);
    (code, text)
}

fn hec_text(res: &http::Response) -> String {
    hec_answer(res).1
}

/// Maps HEC's answer. Codes 1-4 (token disabled, required, invalid authorization, invalid
/// token) are the credential; 7 is an index the token may not write; 8, 9 and 18-20 are the
/// collector being busy or unhealthy (retry).
fn classify(res: &http::Response) -> Result<(), PluginError> {
    if res.is_success() {
        return Ok(());
    }
    let (code, text) = hec_answer(res);
    let described = match code {
        Some(code) => format!("{text} (HEC code {code})"),
        None => text,
    };
    match (res.status, code) {
        (_, Some(1..=4)) | (401 | 403, _) => {
            Err(PluginError::unauthorized(format!("Splunk refused the HEC token: {described}")))
        }
        (429, _) => Err(PluginError::RateLimited(res.retry_after_secs())),
        (status, Some(8 | 9 | 18..=20)) => {
            Err(PluginError::upstream(Some(status), format!("the collector is unavailable: {described}"), true))
        }
        (status, _) => Err(PluginError::upstream(
            Some(status),
            format!("Splunk answered HTTP {status}: {described}"),
            status >= 500 || status == 408,
        )),
    }
}

trellis_plugin_sdk::export_integration!(Splunk);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_plugin_sdk::testing;

    use super::*;

    const COLLECTOR: &str = "https://splunk.example.com:8088/services/collector/event";
    const HEALTH: &str = "https://splunk.example.com:8088/services/collector/health";
    const TOKEN: &str = "11111111-2222-3333-4444-555555555555";

    fn config(extra: Value) -> Config {
        let mut config = json!({"hecUrl": "https://splunk.example.com:8088", "hecToken": TOKEN});
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        testing::config(config).expect("config")
    }

    fn expiring() -> Event {
        Event::for_test(
            "certificate.expiring",
            "Certificate api.example.com expires in 7 days",
            json!({
                "id": "evt_123",
                "type": "certificate.expiring",
                "workspaceId": "ws_1",
                "occurredAt": "2026-11-25T10:00:00.000Z",
                "data": {"certificateId": "crt_1", "commonName": "api.example.com", "daysUntilExpiry": 7}
            }),
        )
    }

    #[test]
    fn the_token_is_a_secret_of_the_derived_schema() {
        assert_eq!(testing::secret_fields::<Config>(), [("/hecToken".to_owned(), false)]);
        let schema = testing::config_schema::<Config>();
        assert_eq!(schema["required"], json!(["hecUrl", "hecToken"]));
        assert_eq!(schema["properties"]["sourcetype"]["default"], "trellis:event");
        assert_eq!(schema["properties"]["source"]["default"], "trellis");
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(Splunk::describe().id(), "io.trellis.splunk");
    }

    #[test]
    fn every_config_problem_is_listed() {
        let bad: Config = testing::config(json!({
            "hecUrl": "http://splunk:8088",
            "hecToken": "has space",
            "index": "",
            "sourcetype": " ",
            "source": ""
        }))
        .expect("parses");
        let Err(PluginError::InvalidConfig(issues)) = Splunk::validate_config(&bad) else {
            panic!("invalid config expected");
        };
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(fields, ["/hecUrl", "/hecToken", "/index", "/sourcetype", "/source"]);
        assert_eq!(Splunk::validate_config(&config(json!({"hecUrl": "https://localhost:8088"}))), Ok(()));
    }

    #[test]
    fn an_event_is_posted_to_the_collector_with_the_payload() {
        testing::http::respond("POST", COLLECTOR, 200, r#"{"text":"Success","code":0}"#);
        let delivery =
            Splunk::notify(&testing::context("int_1"), &config(json!({"index": "pki"})), &expiring()).expect("sent");
        assert_eq!(delivery.status(), Some(200));
        let sent = testing::http::requests();
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].method.as_str(), sent[0].url.as_str()), ("POST", COLLECTOR));
        assert_eq!(sent[0].header("authorization").as_deref(), Some(format!("Splunk {TOKEN}").as_str()));
        assert_eq!(sent[0].header("content-type").as_deref(), Some("application/json"));
        let body = sent[0].json();
        assert_eq!(body["time"], json!(1_767_225_600.0));
        assert_eq!(body["host"], "trellis");
        assert_eq!(body["source"], "trellis");
        assert_eq!(body["sourcetype"], "trellis:event");
        assert_eq!(body["index"], "pki");
        assert_eq!(body["event"], expiring().payload);
    }

    #[test]
    fn a_pasted_collector_url_and_no_index_work_too() {
        let url = "https://localhost:8088/services/collector/event";
        testing::http::respond("POST", url, 200, r#"{"text":"Success","code":0}"#);
        let config = config(json!({"hecUrl": "https://localhost:8088/services/collector/event/", "sourcetype": "pki"}));
        Splunk::notify(&testing::context("int_1"), &config, &Event::for_test("webhook.test", "t", json!(null)))
            .expect("sent");
        let body = testing::http::requests()[0].json();
        assert!(body.get("index").is_none());
        assert_eq!(body["sourcetype"], "pki");
        assert_eq!(body["event"], json!({"id": "evt_test", "type": "webhook.test", "summary": "t"}));
    }

    #[test]
    fn errors_map_to_plugin_errors() {
        type Expect = fn(&PluginError) -> bool;
        let cases: [(u16, &str, Expect); 6] = [
            (
                403,
                r#"{"text":"Invalid token","code":4}"#,
                |e| matches!(e, PluginError::Unauthorized(m) if m.contains("code 4")),
            ),
            (401, r#"{"text":"Token is required","code":2}"#, |e| matches!(e, PluginError::Unauthorized(_))),
            (
                400,
                r#"{"text":"Incorrect index","code":7,"invalid-event-number":0}"#,
                |e| matches!(e, PluginError::Upstream { status: Some(400), retryable: false, message } if message.contains("Incorrect index")),
            ),
            (503, r#"{"text":"Server is busy","code":9}"#, |e| {
                matches!(e, PluginError::Upstream { retryable: true, .. })
            }),
            (429, "", |e| *e == PluginError::RateLimited(None)),
            (500, "oops", |e| matches!(e, PluginError::Upstream { status: Some(500), retryable: true, .. })),
        ];
        for (status, body, expected) in cases {
            testing::reset();
            testing::http::respond("POST", COLLECTOR, status, body);
            let err = Splunk::notify(&testing::context("int_1"), &config(json!({})), &expiring()).expect_err("fails");
            assert!(expected(&err), "{status}: {err:?}");
        }
        let res =
            http::Response { status: 429, headers: vec![("retry-after".into(), b"7".to_vec())], body: Vec::new() };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(Some(7))));
    }

    #[test]
    fn the_test_checks_health_then_sends_a_test_event() {
        testing::http::respond("GET", HEALTH, 200, r#"{"text":"HEC is healthy","code":17}"#);
        testing::http::respond("POST", COLLECTOR, 200, r#"{"text":"Success","code":0}"#);
        let report = Splunk::test(&testing::context("int_1"), &config(json!({}))).expect("report");
        assert!(report.success(), "{report:?}");
        let names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["config", "hec-health", "test-event"]);
        let sent = testing::http::requests();
        assert_eq!((sent[0].method.as_str(), sent[0].url.as_str()), ("GET", HEALTH));
        assert_eq!((sent[1].method.as_str(), sent[1].url.as_str()), ("POST", COLLECTOR));
        assert_eq!(sent[1].json()["event"]["type"], "webhook.test");
        testing::reset();
        testing::http::respond("GET", HEALTH, 503, r#"{"text":"HEC is unhealthy, queues are full","code":18}"#);
        testing::http::respond("POST", COLLECTOR, 403, r#"{"text":"Invalid token","code":4}"#);
        let report = Splunk::test(&testing::context("int_1"), &config(json!({}))).expect("report");
        assert!(!report.success());
        assert!(report.checks()[1].message.contains("queues are full"), "{:?}", report.checks());
    }
}
