//! Datadog integration: each certificate lifecycle event becomes a Datadog event
//! (`POST /api/v1/events`, the default) or a log (`POST /api/v2/logs`) on the configured site.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// The Datadog sites (`site` values).
const SITES: &[&str] = &[
    "datadoghq.com",
    "us3.datadoghq.com",
    "us5.datadoghq.com",
    "datadoghq.eu",
    "ap1.datadoghq.com",
    "ap2.datadoghq.com",
    "ddog-gov.com",
];

/// `api.<site>` and `http-intake.logs.<site>` of every site in [`SITES`].
const HOSTS: &[&str] = &[
    "api.datadoghq.com",
    "http-intake.logs.datadoghq.com",
    "api.us3.datadoghq.com",
    "http-intake.logs.us3.datadoghq.com",
    "api.us5.datadoghq.com",
    "http-intake.logs.us5.datadoghq.com",
    "api.datadoghq.eu",
    "http-intake.logs.datadoghq.eu",
    "api.ap1.datadoghq.com",
    "http-intake.logs.ap1.datadoghq.com",
    "api.ap2.datadoghq.com",
    "http-intake.logs.ap2.datadoghq.com",
    "api.ddog-gov.com",
    "http-intake.logs.ddog-gov.com",
];

/// The integration record's configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// A Datadog API key (Organization settings → API keys). Kept encrypted and never shown again.
    #[schemars(extend("writeOnly" = true))]
    api_key: String,
    /// The Datadog site of the organization.
    #[serde(default = "default_site")]
    #[schemars(extend("enum" = [
        "datadoghq.com", "us3.datadoghq.com", "us5.datadoghq.com", "datadoghq.eu",
        "ap1.datadoghq.com", "ap2.datadoghq.com", "ddog-gov.com"
    ]))]
    site: String,
    /// Replaces both `https://api.<site>` and `https://http-intake.logs.<site>` (a proxy, or a
    /// test receiver).
    #[serde(default)]
    #[schemars(extend("pattern" = "^https://", "format" = "uri"))]
    api_url: Option<String>,
    /// `events` (default): Datadog events; `logs`: one log per event.
    #[serde(default)]
    mode: Mode,
    /// Extra tags (`key:value`) on every event or log.
    #[serde(default)]
    tags: Vec<String>,
}

fn default_site() -> String {
    "datadoghq.com".into()
}

/// What each Trellis event becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A Datadog event.
    #[default]
    Events,
    /// A log.
    Logs,
}

impl Config {
    fn api_base(&self) -> String {
        match &self.api_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("https://api.{}", self.site),
        }
    }

    fn logs_base(&self) -> String {
        match &self.api_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("https://http-intake.logs.{}", self.site),
        }
    }

    fn request(&self, method: &str, url: &str) -> http::Request {
        http::Request::new(method, url)
            .header("dd-api-key", &self.api_key)
            .header("accept", "application/json")
            .timeout_ms(10_000)
    }
}

/// The plugin.
pub struct Datadog;

impl Integration for Datadog {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::integration("io.trellis.datadog", env!("CARGO_PKG_VERSION"), "Datadog", &["datadog"])
            .with_description("Sends certificate lifecycle events to Datadog as events or logs.")
            .with_outbound_hosts(HOSTS)
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        if config.api_key.is_empty() || !config.api_key.chars().all(|c| c.is_ascii_alphanumeric()) {
            issues.push(ConfigIssue::new("/apiKey", "must be a Datadog API key (letters and digits)"));
        }
        if !SITES.contains(&config.site.as_str()) {
            issues.push(ConfigIssue::new("/site", format!("must be one of {}", SITES.join(", "))));
        }
        if let Some(problem) = config.api_url.as_deref().and_then(http::https_base_url_problem) {
            issues.push(ConfigIssue::new("/apiUrl", problem));
        }
        for (i, tag) in config.tags.iter().enumerate() {
            if tag.is_empty() || tag.chars().count() > 200 || tag.chars().any(|c| c.is_whitespace() || c == ',') {
                issues.push(ConfigIssue::new(
                    &format!("/tags/{i}"),
                    "a tag is 1 to 200 characters without spaces or commas",
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
        let outcome = config
            .request("GET", &format!("{}/api/v1/validate", config.api_base()))
            .send()
            .map_err(PluginError::from)
            .and_then(|res| classify(&res).and_then(|()| res.json::<Value>()));
        match outcome {
            Ok(answer) if answer.get("valid").and_then(Value::as_bool) == Some(true) => {
                checks.push(Check::pass("api-key", format!("the API key is valid on {}", config.site)))
            }
            Ok(answer) => checks.push(Check::fail("api-key", format!("Datadog did not confirm the key: {answer}"))),
            Err(err) => checks.push(Check::fail("api-key", err.to_string())),
        }
        Ok(TestReport::from_checks("Datadog API key test", checks))
    }

    fn notify(ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
        let level = level(event);
        let workspace = event.workspace_id(ctx);
        let mut tags = vec![
            "source:trellis".to_owned(),
            format!("event_type:{}", event.event_type),
            format!("workspace_id:{workspace}"),
        ];
        if let Some(common_name) = util::text(event.data(), "commonName") {
            tags.push(format!("common_name:{common_name}"));
        }
        tags.extend(config.tags.iter().cloned());
        let summary = if event.summary.trim().is_empty() { event.event_type.clone() } else { event.summary.clone() };
        match config.mode {
            Mode::Events => {
                let mut text = format!("{summary}\n");
                for (label, value) in details(event) {
                    text.push_str(&format!("\n{label}: {value}"));
                }
                text.push_str(&format!(
                    "\n\nTrellis event {} ({}) at {}.",
                    event.event_type,
                    event.id,
                    event.occurred_at()
                ));
                let body = json!({
                    "title": util::truncate(&summary, 100),
                    "text": util::truncate(&text, 4000),
                    "alert_type": level,
                    "source_type_name": "trellis",
                    "aggregation_key": util::truncate(&event.subject_id().unwrap_or_else(|| event.id.clone()), 100),
                    "tags": tags,
                });
                let url = format!("{}/api/v1/events", config.api_base());
                let res = config.request("POST", &url).json(&body)?.send()?;
                classify(&res)?;
                let answer: Value = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
                let id = answer
                    .pointer("/event/id_str")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| answer.pointer("/event/id").filter(|id| !id.is_null()).map(|id| id.to_string()));
                log::info("datadog event posted", &[("event", &event.id), ("status", &res.status.to_string())]);
                let delivery = Delivery::delivered(Some(res.status));
                Ok(match id {
                    Some(id) => delivery.with_reference(id),
                    None => delivery,
                })
            }
            Mode::Logs => {
                let status = match level {
                    "error" => "error",
                    "warning" => "warning",
                    _ => "info",
                };
                let body = json!([{
                    "ddsource": "trellis",
                    "service": "trellis",
                    "hostname": "trellis",
                    "message": summary,
                    "status": status,
                    "ddtags": tags.join(","),
                    "event": event.payload,
                }]);
                let url = format!("{}/api/v2/logs", config.logs_base());
                let res = config.request("POST", &url).json(&body)?.send()?;
                classify(&res)?;
                log::info("datadog log sent", &[("event", &event.id), ("status", &res.status.to_string())]);
                Ok(Delivery::delivered(Some(res.status)))
            }
        }
    }
}

/// The event's `alert_type`: error, warning, success or info.
fn level(event: &Event) -> &'static str {
    match event.event_type.as_str() {
        "certificate.expired" | "certificate.revoked" | "certificate.renewal_failed" | "attestation.failed" => "error",
        "certificate.expiring" => "warning",
        "certificate.renewed" => "success",
        "ca.health_changed" => match event.health().as_deref() {
            Some("unhealthy") => "error",
            Some("degraded") => "warning",
            Some("healthy") => "success",
            _ => "info",
        },
        _ => "info",
    }
}

/// Maps Datadog's answer; its errors are `{"errors": [...]}`.
fn classify(res: &http::Response) -> Result<(), PluginError> {
    let message = || {
        let answer: Value = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        let errors: Vec<String> = answer
            .get("errors")
            .and_then(Value::as_array)
            .map(|e| e.iter().map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned)).collect())
            .unwrap_or_default();
        if errors.is_empty() {
            util::truncate(&res.text(), 200)
        } else {
            util::truncate(&errors.join("; "), 400)
        }
    };
    match res.status {
        200..=299 => Ok(()),
        429 => Err(PluginError::RateLimited(retry_after(res))),
        401 | 403 => Err(PluginError::unauthorized(format!("Datadog refused the API key: {}", message()))),
        status => Err(PluginError::upstream(
            Some(status),
            format!("Datadog answered HTTP {status}: {}", message()),
            status >= 500 || status == 408,
        )),
    }
}

/// `Retry-After`, else Datadog's own `X-RateLimit-Reset` (seconds until the window resets).
fn retry_after(res: &http::Response) -> Option<u32> {
    res.retry_after_secs().or_else(|| res.header("x-ratelimit-reset").and_then(|v| v.trim().parse().ok()))
}

/// Labelled details of the event's subject, in display order.
const DETAILS: &[(&str, &str)] = &[
    ("commonName", "Common name"),
    ("name", "Name"),
    ("issuer", "Issuer"),
    ("serialNumber", "Serial number"),
    ("expiresAt", "Expires"),
    ("notAfter", "Expires"),
    ("daysUntilExpiry", "Days until expiry"),
    ("status", "Status"),
    ("reason", "Reason"),
    ("error", "Error"),
    ("healthStatus", "Health"),
    ("previous", "Previous health"),
    ("current", "Health"),
    ("fingerprintSha256", "SHA-256 fingerprint"),
    ("certificateId", "Certificate ID"),
    ("oldCertificateId", "Renewed certificate ID"),
    ("newCertificateId", "New certificate ID"),
    ("caId", "CA ID"),
    ("deviceId", "Device ID"),
];

fn details(event: &Event) -> Vec<(&'static str, String)> {
    let data = event.data();
    DETAILS.iter().filter_map(|(key, label)| util::text(data, key).map(|value| (*label, value))).collect()
}

trellis_plugin_sdk::export_integration!(Datadog);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_plugin_sdk::testing;

    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";
    const EVENTS: &str = "https://api.datadoghq.com/api/v1/events";

    fn config(extra: Value) -> Config {
        let mut config = json!({"apiKey": KEY});
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
                "data": {
                    "certificateId": "crt_1",
                    "commonName": "api.example.com",
                    "serialNumber": "0a1b",
                    "expiresAt": "2026-12-02T10:00:00.000Z",
                    "daysUntilExpiry": 7
                }
            }),
        )
    }

    #[test]
    fn the_api_key_is_a_secret_of_the_derived_schema() {
        assert_eq!(testing::secret_fields::<Config>(), [("/apiKey".to_owned(), false)]);
        let schema = testing::config_schema::<Config>();
        assert_eq!(schema["required"], json!(["apiKey"]));
        assert_eq!(schema["properties"]["site"]["default"], "datadoghq.com");
        assert_eq!(schema["properties"]["site"]["enum"].as_array().map(Vec::len), Some(SITES.len()));
        assert_eq!(schema["additionalProperties"], json!(false));
        let info = Datadog::describe();
        assert_eq!(info.id(), "io.trellis.datadog");
        for site in SITES {
            assert!(
                HOSTS.contains(&format!("api.{site}").as_str())
                    && HOSTS.contains(&format!("http-intake.logs.{site}").as_str())
            );
        }
    }

    #[test]
    fn every_config_problem_is_listed() {
        let bad: Config = testing::config(json!({
            "apiKey": "not a key",
            "site": "datadoghq.org",
            "apiUrl": "http://localhost:8080",
            "tags": ["team:pki", "bad tag", "a,b"]
        }))
        .expect("parses");
        let Err(PluginError::InvalidConfig(issues)) = Datadog::validate_config(&bad) else {
            panic!("invalid config expected");
        };
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(fields, ["/apiKey", "/site", "/apiUrl", "/tags/1", "/tags/2"]);
        assert_eq!(Datadog::validate_config(&config(json!({"site": "datadoghq.eu", "mode": "logs"}))), Ok(()));
        assert!(testing::config::<Config>(json!({"apiKey": KEY, "mode": "metrics"})).is_err());
    }

    #[test]
    fn an_expiring_certificate_is_a_warning_event() {
        testing::http::respond(
            "POST",
            EVENTS,
            202,
            r#"{"status":"ok","event":{"id":1377281704830403917,"id_str":"1377281704830403917","title":"x"}}"#,
        );
        let config = config(json!({"tags": ["team:pki"]}));
        let delivery = Datadog::notify(&testing::context("int_1"), &config, &expiring()).expect("posted");
        assert_eq!((delivery.status(), delivery.reference()), (Some(202), Some("1377281704830403917")));
        let sent = testing::http::requests();
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].method.as_str(), sent[0].url.as_str()), ("POST", EVENTS));
        assert_eq!(sent[0].header("content-type").as_deref(), Some("application/json"));
        let body = sent[0].json();
        assert_eq!(body["title"], "Certificate api.example.com expires in 7 days");
        assert_eq!(body["alert_type"], "warning");
        assert_eq!(body["source_type_name"], "trellis");
        assert_eq!(body["aggregation_key"], "crt_1");
        assert_eq!(
            body["tags"],
            json!([
                "source:trellis",
                "event_type:certificate.expiring",
                "workspace_id:ws_1",
                "common_name:api.example.com",
                "team:pki"
            ])
        );
        let text = body["text"].as_str().unwrap_or_default();
        assert!(text.contains("Days until expiry: 7") && text.contains("Expires: 2026-12-02T10:00:00.000Z"), "{text}");
        // The fake records only some headers: check the key on the request itself.
        let request = config.request("POST", EVENTS);
        assert_eq!(request.header_value("DD-API-KEY").as_deref(), Some(KEY));
    }

    #[test]
    fn logs_mode_sends_one_log_to_the_intake_and_api_url_overrides_both() {
        let intake = "https://http-intake.logs.datadoghq.eu/api/v2/logs";
        testing::http::respond("POST", intake, 202, "{}");
        let config_eu = config(json!({"site": "datadoghq.eu", "mode": "logs"}));
        let delivery = Datadog::notify(&testing::context("int_1"), &config_eu, &expiring()).expect("sent");
        assert_eq!((delivery.status(), delivery.reference()), (Some(202), None));
        let body = testing::http::requests()[0].json();
        let log = &body[0];
        assert_eq!(body.as_array().map(Vec::len), Some(1));
        assert_eq!(
            (log["ddsource"].as_str(), log["service"].as_str(), log["hostname"].as_str()),
            (Some("trellis"), Some("trellis"), Some("trellis"))
        );
        assert_eq!(log["message"], "Certificate api.example.com expires in 7 days");
        assert_eq!(log["status"], "warning");
        assert_eq!(
            log["ddtags"],
            "source:trellis,event_type:certificate.expiring,workspace_id:ws_1,common_name:api.example.com"
        );
        assert_eq!(log["event"], expiring().payload);

        testing::reset();
        testing::http::respond("POST", "https://localhost:9443/api/v2/logs", 202, "{}");
        testing::http::respond(
            "POST",
            "https://localhost:9443/api/v1/events",
            202,
            r#"{"status":"ok","event":{"id":5}}"#,
        );
        let local_logs = config(json!({"apiUrl": "https://localhost:9443/", "mode": "logs"}));
        Datadog::notify(&testing::context("int_1"), &local_logs, &expiring()).expect("sent");
        let local_events = config(json!({"apiUrl": "https://localhost:9443"}));
        let delivery = Datadog::notify(&testing::context("int_1"), &local_events, &expiring()).expect("sent");
        assert_eq!(delivery.reference(), Some("5"));
        let urls: Vec<String> = testing::http::requests().into_iter().map(|r| r.url).collect();
        assert_eq!(urls, ["https://localhost:9443/api/v2/logs", "https://localhost:9443/api/v1/events"]);
    }

    #[test]
    fn errors_map_to_plugin_errors() {
        type Expect = fn(&PluginError) -> bool;
        let cases: [(u16, &str, Expect); 5] = [
            (
                403,
                r#"{"errors":["Forbidden"]}"#,
                |e| matches!(e, PluginError::Unauthorized(m) if m.contains("Forbidden")),
            ),
            (401, "", |e| matches!(e, PluginError::Unauthorized(_))),
            (429, "", |e| *e == PluginError::RateLimited(None)),
            (400, r#"{"errors":["Event too big"]}"#, |e| {
                matches!(e, PluginError::Upstream { status: Some(400), retryable: false, .. })
            }),
            (503, "", |e| matches!(e, PluginError::Upstream { status: Some(503), retryable: true, .. })),
        ];
        for (status, body, expected) in cases {
            testing::reset();
            testing::http::respond("POST", EVENTS, status, body);
            let err = Datadog::notify(&testing::context("int_1"), &config(json!({})), &expiring()).expect_err("fails");
            assert!(expected(&err), "{status}: {err:?}");
        }
        let res =
            http::Response { status: 429, headers: vec![("retry-after".into(), b"3".to_vec())], body: Vec::new() };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(Some(3))));
        let res = http::Response {
            status: 429,
            headers: vec![("x-ratelimit-reset".into(), b"9".to_vec())],
            body: Vec::new(),
        };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(Some(9))));
    }

    #[test]
    fn the_test_validates_the_key() {
        let url = "https://api.us5.datadoghq.com/api/v1/validate";
        testing::http::respond("GET", url, 200, r#"{"valid":true}"#);
        let config = config(json!({"site": "us5.datadoghq.com"}));
        let report = Datadog::test(&testing::context("int_1"), &config).expect("report");
        assert!(report.success(), "{report:?}");
        let names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["config", "api-key"]);
        assert_eq!(testing::http::requests()[0].method, "GET");
        testing::reset();
        testing::http::respond("GET", url, 403, r#"{"errors":["Forbidden"]}"#);
        let report = Datadog::test(&testing::context("int_1"), &config).expect("report");
        assert!(!report.success());
    }

    #[test]
    fn levels_follow_the_event() {
        let level_of = |event_type: &str, data: Value| level(&Event::for_test(event_type, "", json!({"data": data})));
        assert_eq!(level_of("certificate.expired", json!({})), "error");
        assert_eq!(level_of("certificate.renewed", json!({})), "success");
        assert_eq!(level_of("ca.health_changed", json!({"current": "unhealthy"})), "error");
        assert_eq!(level_of("ca.health_changed", json!({"healthStatus": "healthy"})), "success");
        assert_eq!(level_of("discovery.scan_completed", json!({})), "info");
    }
}
