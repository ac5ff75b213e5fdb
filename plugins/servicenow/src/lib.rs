//! ServiceNow integration: one incident per certificate lifecycle event, created through the
//! Table API (`POST /api/now/table/incident`) with a correlation id per certificate.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// The integration record's configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The instance, e.g. `https://your-instance.service-now.com`.
    #[schemars(extend("pattern" = "^https://", "format" = "uri"))]
    instance_url: String,
    /// User the incidents are created as (needs the `itil` role or create rights on `incident`).
    username: String,
    /// That user's password. Kept encrypted and never shown again.
    #[schemars(extend("writeOnly" = true))]
    password: String,
    /// Assignment group of created incidents (sys_id or name).
    #[serde(default)]
    assignment_group: Option<String>,
    /// Caller of created incidents (sys_id or user name).
    #[serde(default)]
    caller_id: Option<String>,
    /// Urgency of every incident, 1 (high) to 3 (low); by default it follows the event.
    #[serde(default)]
    #[schemars(range(min = 1, max = 3))]
    urgency: Option<u8>,
    /// Impact of every incident, 1 (high) to 3 (low); by default it follows the event.
    #[serde(default)]
    #[schemars(range(min = 1, max = 3))]
    impact: Option<u8>,
}

impl Config {
    fn request(&self, method: &str, path: &str) -> http::Request {
        let credentials = base64(format!("{}:{}", self.username, self.password).as_bytes());
        http::Request::new(method, &format!("{}{path}", self.instance_url.trim_end_matches('/')))
            .header("authorization", &format!("Basic {credentials}"))
            .header("accept", "application/json")
            .timeout_ms(15_000)
    }
}

/// The plugin.
pub struct ServiceNow;

impl Integration for ServiceNow {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::integration("io.trellis.servicenow", env!("CARGO_PKG_VERSION"), "ServiceNow", &["servicenow"])
            .with_description("Opens a ServiceNow incident (Table API) for each certificate lifecycle event.")
            .with_outbound_hosts(&["*.service-now.com"])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        if let Some(problem) = https_problem(&config.instance_url) {
            issues.push(issue("/instanceUrl", problem));
        }
        if config.username.trim().is_empty() {
            issues.push(issue("/username", "must not be empty"));
        }
        if config.password.is_empty() {
            issues.push(issue("/password", "must not be empty"));
        }
        for (field, value) in [("/urgency", config.urgency), ("/impact", config.impact)] {
            if value.is_some_and(|v| !(1..=3).contains(&v)) {
                issues.push(issue(field, "must be 1 (high), 2 (medium) or 3 (low)"));
            }
        }
        for (field, value) in [("/assignmentGroup", &config.assignment_group), ("/callerId", &config.caller_id)] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                issues.push(issue(field, "must not be empty when set"));
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
            .request("GET", "/api/now/table/incident?sysparm_limit=1")
            .send()
            .map_err(PluginError::from)
            .and_then(|res| classify(&res).and_then(|()| table_answer(&res)));
        match outcome {
            Ok(_) => checks.push(Check::pass("table-api", "signed in and read the incident table")),
            Err(err) => checks.push(Check::fail("table-api", err.to_string())),
        }
        Ok(TestReport::from_checks("ServiceNow Table API test", checks))
    }

    fn notify(ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
        let level = level(event).to_string();
        let workspace = workspace_id(ctx, event);
        let subject = subject_id(event).unwrap_or_else(|| event.id.clone());
        let summary = if event.summary.trim().is_empty() { event.event_type.clone() } else { event.summary.clone() };
        let mut description = format!("{summary}\n\n");
        for (label, value) in details(event) {
            description.push_str(&format!("{label}: {value}\n"));
        }
        description.push_str(&format!(
            "\nTrellis event {} ({}) in workspace {workspace} at {}.",
            event.event_type,
            event.id,
            occurred_at(event)
        ));
        let mut body = json!({
            "short_description": truncate(&summary.replace(['\r', '\n'], " "), 160),
            "description": description,
            "urgency": config.urgency.map_or(level.clone(), |u| u.to_string()),
            "impact": config.impact.map_or(level, |i| i.to_string()),
            "category": "software",
            "correlation_id": truncate(&format!("trellis-{workspace}-{subject}"), 100),
            "correlation_display": "Trellis",
        });
        if let Some(group) = &config.assignment_group {
            body["assignment_group"] = Value::String(group.clone());
        }
        if let Some(caller) = &config.caller_id {
            body["caller_id"] = Value::String(caller.clone());
        }
        let res = config.request("POST", "/api/now/table/incident").json(&body)?.send()?;
        classify(&res)?;
        let result = table_answer(&res)?;
        let reference = text(&result, "number").or_else(|| text(&result, "sys_id")).ok_or_else(|| {
            PluginError::upstream(Some(res.status), "ServiceNow created no incident number or sys_id", false)
        })?;
        log::info("servicenow incident created", &[("event", &event.id), ("incident", &reference)]);
        Ok(Delivery::delivered(Some(res.status)).with_reference(reference))
    }
}

/// 1 (high) for certificates that stopped working, 2 for those about to and unhealthy CAs
/// or failed attestations, 3 for the rest.
fn level(event: &Event) -> u8 {
    match event.event_type.as_str() {
        "certificate.expired" | "certificate.revoked" | "certificate.renewal_failed" => 1,
        "certificate.expiring" | "attestation.failed" => 2,
        "ca.health_changed" => match health(event).as_deref() {
            Some("unhealthy" | "degraded") => 2,
            _ => 3,
        },
        _ => 3,
    }
}

/// The `result` member of a Table API answer. A 2xx without it (a hibernating developer
/// instance answers its wake-up page) is not the Table API.
fn table_answer(res: &http::Response) -> Result<Value, PluginError> {
    serde_json::from_slice::<Value>(&res.body).ok().and_then(|v| v.get("result").cloned()).ok_or_else(|| {
        PluginError::upstream(
            Some(res.status),
            "the instance did not answer with the Table API (is it a hibernating developer instance?)",
            false,
        )
    })
}

/// Maps the Table API's answer; its errors are `{"error": {"message", "detail"}, "status": "failure"}`.
fn classify(res: &http::Response) -> Result<(), PluginError> {
    let message = || {
        let answer: Value = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        let error = &answer["error"];
        let parts: Vec<String> = ["message", "detail"].iter().filter_map(|k| text(error, k)).collect();
        if parts.is_empty() {
            truncate(&res.text(), 200)
        } else {
            truncate(&parts.join(": "), 400)
        }
    };
    match res.status {
        200..=299 => Ok(()),
        429 => Err(PluginError::RateLimited(retry_after(res))),
        401 => Err(PluginError::unauthorized(format!("ServiceNow rejected the user name and password: {}", message()))),
        403 => Err(PluginError::unauthorized(format!("the ServiceNow user lacks the rights: {}", message()))),
        404 => Err(PluginError::not_found(format!("ServiceNow answered 404: {}", message()))),
        status => Err(PluginError::upstream(
            Some(status),
            format!("ServiceNow answered HTTP {status}: {}", message()),
            status >= 500 || status == 408,
        )),
    }
}

fn retry_after(res: &http::Response) -> Option<u32> {
    res.header("retry-after").and_then(|v| v.trim().parse().ok())
}

fn issue(field: &str, message: impl Into<String>) -> ConfigIssue {
    ConfigIssue { field: field.to_owned(), message: message.into() }
}

/// Checks that `url` is an absolute https:// URL with a host and no credentials.
fn https_problem(url: &str) -> Option<&'static str> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Some("must be an https:// URL");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') || url.chars().any(char::is_whitespace) {
        return Some("must be an https:// URL with a host and no embedded credentials or spaces");
    }
    if url.contains(['?', '#']) {
        return Some("must be a base URL without query or fragment");
    }
    None
}

/// Standard base64 with padding (RFC 4648), for the basic-auth header.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The event's `data` object, or the payload itself when it has none (flat payloads).
fn data(event: &Event) -> &Value {
    match event.payload.get("data") {
        Some(data) if data.is_object() => data,
        _ => &event.payload,
    }
}

/// A member of `value` as text (strings, numbers, booleans).
fn text(value: &Value, key: &str) -> Option<String> {
    match value.get(key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The CA health an event reports (`healthStatus`, or `current` of a health change).
fn health(event: &Event) -> Option<String> {
    text(data(event), "healthStatus").or_else(|| text(data(event), "current"))
}

/// What the event is about: the certificate (the renewed one for `certificate.renewed`) or
/// the CA.
fn subject_id(event: &Event) -> Option<String> {
    let data = data(event);
    if event.event_type.starts_with("certificate.") {
        text(data, "certificateId").or_else(|| text(data, "oldCertificateId"))
    } else if event.event_type.starts_with("ca.") {
        text(data, "caId")
    } else {
        None
    }
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
    let data = data(event);
    DETAILS.iter().filter_map(|(key, label)| text(data, key).map(|value| (*label, value))).collect()
}

fn workspace_id<'a>(ctx: &'a CallContext, event: &'a Event) -> &'a str {
    event.payload.get("workspaceId").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(&ctx.workspace_id)
}

/// `occurredAt` of the payload, else the event's time as RFC 3339.
fn occurred_at(event: &Event) -> String {
    text(&event.payload, "occurredAt").unwrap_or_else(|| rfc3339(event.occurred_at_ms))
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn rfc3339(ms: i64) -> String {
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

trellis_plugin_sdk::export_integration!(ServiceNow);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_plugin_sdk::testing;

    use super::*;

    const INCIDENT: &str = "https://dev1.service-now.com/api/now/table/incident";
    /// base64("trellis:pw")
    const BASIC: &str = "Basic dHJlbGxpczpwdw==";
    const CREATED: &str = r#"{"result":{"sys_id":"9d385017c611228701d22104cc95c371","number":"INC0010001"}}"#;

    fn config(extra: Value) -> Config {
        let mut config =
            json!({"instanceUrl": "https://dev1.service-now.com/", "username": "trellis", "password": "pw"});
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
                    "issuer": "CN=Example CA",
                    "serialNumber": "0a1b",
                    "fingerprintSha256": "ab:cd",
                    "expiresAt": "2026-12-02T10:00:00.000Z",
                    "status": "active",
                    "daysUntilExpiry": 7
                }
            }),
        )
    }

    #[test]
    fn the_password_is_a_secret_of_the_derived_schema() {
        assert_eq!(testing::secret_fields::<Config>(), [("/password".to_owned(), false)]);
        let schema = testing::config_schema::<Config>();
        assert_eq!(schema["required"], json!(["instanceUrl", "username", "password"]));
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(ServiceNow::describe().id(), "io.trellis.servicenow");
    }

    #[test]
    fn every_config_problem_is_listed() {
        let bad: Config = testing::config(json!({
            "instanceUrl": "dev1.service-now.com",
            "username": "",
            "password": "",
            "urgency": 4,
            "impact": 0,
            "callerId": " "
        }))
        .expect("parses");
        let Err(PluginError::InvalidConfig(issues)) = ServiceNow::validate_config(&bad) else {
            panic!("invalid config expected");
        };
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(fields, ["/instanceUrl", "/username", "/password", "/urgency", "/impact", "/callerId"]);
        assert_eq!(ServiceNow::validate_config(&config(json!({"instanceUrl": "https://localhost:9443"}))), Ok(()));
    }

    #[test]
    fn an_expiring_certificate_opens_an_incident() {
        testing::http::respond("POST", INCIDENT, 201, CREATED);
        let config = config(json!({"assignmentGroup": "PKI", "callerId": "trellis.bot"}));
        let delivery = ServiceNow::notify(&testing::context("int_1"), &config, &expiring()).expect("created");
        assert_eq!((delivery.status(), delivery.reference()), (Some(201), Some("INC0010001")));
        let sent = testing::http::requests();
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].method.as_str(), sent[0].url.as_str()), ("POST", INCIDENT));
        assert_eq!(sent[0].header("authorization").as_deref(), Some(BASIC));
        assert_eq!(sent[0].header("accept").as_deref(), Some("application/json"));
        assert_eq!(sent[0].header("content-type").as_deref(), Some("application/json"));
        let body = sent[0].json();
        assert_eq!(body["short_description"], "Certificate api.example.com expires in 7 days");
        assert_eq!((body["urgency"].as_str(), body["impact"].as_str()), (Some("2"), Some("2")));
        assert_eq!(body["category"], "software");
        assert_eq!(body["correlation_id"], "trellis-ws_1-crt_1");
        assert_eq!(body["correlation_display"], "Trellis");
        assert_eq!((body["assignment_group"].as_str(), body["caller_id"].as_str()), (Some("PKI"), Some("trellis.bot")));
        let description = body["description"].as_str().unwrap_or_default();
        for expected in ["Common name: api.example.com", "Expires: 2026-12-02T10:00:00.000Z", "workspace ws_1"] {
            assert!(description.contains(expected), "{expected} in {description}");
        }
    }

    #[test]
    fn urgency_follows_the_event_unless_configured() {
        testing::http::respond("POST", INCIDENT, 201, CREATED);
        let event = Event::for_test("certificate.expired", "expired", json!({"certificateId": "crt_2"}));
        ServiceNow::notify(&testing::context("int_1"), &config(json!({"impact": 3})), &event).expect("created");
        let body = testing::http::requests()[0].json();
        assert_eq!((body["urgency"].as_str(), body["impact"].as_str()), (Some("1"), Some("3")));
        assert_eq!(body["correlation_id"], "trellis-ws_test-crt_2", "flat payload, workspace of the call");
        assert!(body.get("assignment_group").is_none());
        testing::reset();
        testing::http::respond("POST", INCIDENT, 201, CREATED);
        let event = Event::for_test("discovery.scan_completed", "scan done", json!({"data": {"scanId": "scn_1"}}));
        ServiceNow::notify(&testing::context("int_1"), &config(json!({})), &event).expect("created");
        let body = testing::http::requests()[0].json();
        assert_eq!(
            (body["urgency"].as_str(), body["correlation_id"].as_str()),
            (Some("3"), Some("trellis-ws_test-evt_test"))
        );
    }

    #[test]
    fn errors_map_to_plugin_errors() {
        type Expect = fn(&PluginError) -> bool;
        let cases: [(u16, &str, Expect); 6] = [
            (
                401,
                r#"{"error":{"message":"User Not Authenticated","detail":"Required to provide Auth information"},"status":"failure"}"#,
                |e| matches!(e, PluginError::Unauthorized(m) if m.contains("User Not Authenticated")),
            ),
            (403, "", |e| matches!(e, PluginError::Unauthorized(_))),
            (429, "", |e| *e == PluginError::RateLimited(None)),
            (400, r#"{"error":{"message":"Invalid"}}"#, |e| {
                matches!(e, PluginError::Upstream { status: Some(400), retryable: false, .. })
            }),
            (500, "", |e| matches!(e, PluginError::Upstream { status: Some(500), retryable: true, .. })),
            (
                200,
                "<html>Your instance is hibernating</html>",
                |e| matches!(e, PluginError::Upstream { message, .. } if message.contains("hibernating")),
            ),
        ];
        for (status, body, expected) in cases {
            testing::reset();
            testing::http::respond("POST", INCIDENT, status, body);
            let err =
                ServiceNow::notify(&testing::context("int_1"), &config(json!({})), &expiring()).expect_err("fails");
            assert!(expected(&err), "{status}: {err:?}");
        }
        let res =
            http::Response { status: 429, headers: vec![("retry-after".into(), b"60".to_vec())], body: Vec::new() };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(Some(60))));
    }

    #[test]
    fn the_test_reads_one_incident() {
        let url = "https://dev1.service-now.com/api/now/table/incident?sysparm_limit=1";
        testing::http::respond("GET", url, 200, r#"{"result":[]}"#);
        let report = ServiceNow::test(&testing::context("int_1"), &config(json!({}))).expect("report");
        assert!(report.success(), "{report:?}");
        let names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["config", "table-api"]);
        let sent = testing::http::requests();
        assert_eq!((sent[0].method.as_str(), sent[0].url.as_str()), ("GET", url));
        assert_eq!(sent[0].header("authorization").as_deref(), Some(BASIC));
        testing::reset();
        testing::http::respond("GET", url, 401, "");
        let report = ServiceNow::test(&testing::context("int_1"), &config(json!({}))).expect("report");
        assert!(!report.success());
    }
}
