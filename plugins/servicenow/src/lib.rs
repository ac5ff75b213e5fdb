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
        http::Request::new(method, &format!("{}{path}", self.instance_url.trim_end_matches('/')))
            .basic_auth(&self.username, &self.password)
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
        if let Some(problem) = http::https_base_url_problem(&config.instance_url) {
            issues.push(ConfigIssue::new("/instanceUrl", problem));
        }
        if config.username.trim().is_empty() {
            issues.push(ConfigIssue::new("/username", "must not be empty"));
        }
        if config.password.is_empty() {
            issues.push(ConfigIssue::new("/password", "must not be empty"));
        }
        for (field, value) in [("/urgency", config.urgency), ("/impact", config.impact)] {
            if value.is_some_and(|v| !(1..=3).contains(&v)) {
                issues.push(ConfigIssue::new(field, "must be 1 (high), 2 (medium) or 3 (low)"));
            }
        }
        for (field, value) in [("/assignmentGroup", &config.assignment_group), ("/callerId", &config.caller_id)] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                issues.push(ConfigIssue::new(field, "must not be empty when set"));
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
        let workspace = event.workspace_id(ctx);
        let subject = event.subject_id().unwrap_or_else(|| event.id.clone());
        let summary = if event.summary.trim().is_empty() { event.event_type.clone() } else { event.summary.clone() };
        let mut description = format!("{summary}\n\n");
        for (label, value) in details(event) {
            description.push_str(&format!("{label}: {value}\n"));
        }
        description.push_str(&format!(
            "\nTrellis event {} ({}) in workspace {workspace} at {}.",
            event.event_type,
            event.id,
            event.occurred_at()
        ));
        let mut body = json!({
            "short_description": util::truncate(&summary.replace(['\r', '\n'], " "), 160),
            "description": description,
            "urgency": config.urgency.map_or(level.clone(), |u| u.to_string()),
            "impact": config.impact.map_or(level, |i| i.to_string()),
            "category": "software",
            "correlation_id": util::truncate(&format!("trellis-{workspace}-{subject}"), 100),
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
        let reference = util::text(&result, "number").or_else(|| util::text(&result, "sys_id")).ok_or_else(|| {
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
        "ca.health_changed" => match event.health().as_deref() {
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
        let parts: Vec<String> = ["message", "detail"].iter().filter_map(|k| util::text(error, k)).collect();
        if parts.is_empty() {
            util::truncate(&res.text(), 200)
        } else {
            util::truncate(&parts.join(": "), 400)
        }
    };
    match res.status {
        200..=299 => Ok(()),
        429 => Err(PluginError::RateLimited(res.retry_after_secs())),
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
