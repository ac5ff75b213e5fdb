//! Jira Cloud integration: one issue per certificate (or CA, or device) with a problem. The
//! first event opens an issue labelled `trellis-<id>`; later events for the same subject
//! comment on it while it is open (REST API v3, Atlassian Document Format bodies).

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// The integration record's configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The Jira Cloud site, e.g. `https://your-domain.atlassian.net`.
    #[schemars(extend("pattern" = "^https://", "format" = "uri"))]
    base_url: String,
    /// Email address of the Atlassian account the API token belongs to.
    email: String,
    /// API token of that account (id.atlassian.com → Security → API tokens). Kept encrypted
    /// and never shown again.
    #[schemars(extend("writeOnly" = true))]
    api_token: String,
    /// Key of the project issues are created in, e.g. `OPS`.
    project_key: String,
    /// Issue type of created issues.
    #[serde(default = "default_issue_type")]
    issue_type: String,
    /// Extra labels for created issues (besides `trellis` and `trellis-<id>`).
    #[serde(default)]
    labels: Vec<String>,
}

fn default_issue_type() -> String {
    "Task".into()
}

impl Config {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url.trim_end_matches('/'))
    }

    fn request(&self, method: &str, path: &str) -> http::Request {
        http::Request::new(method, &self.url(path))
            .basic_auth(&self.email, &self.api_token)
            .header("accept", "application/json")
            .timeout_ms(10_000)
    }
}

/// The plugin.
pub struct Jira;

impl Integration for Jira {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::integration("io.trellis.jira", env!("CARGO_PKG_VERSION"), "Jira", &["jira"])
            .with_description(
                "Opens a Jira Cloud issue for each certificate, CA or device with a problem and comments \
                 on it while it stays open.",
            )
            .with_outbound_hosts(&["*.atlassian.net"])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        if let Some(problem) = http::https_base_url_problem(&config.base_url) {
            issues.push(ConfigIssue::new("/baseUrl", problem));
        }
        let email = config.email.trim();
        if email.is_empty() || !email.contains('@') || email.chars().any(char::is_whitespace) {
            issues.push(ConfigIssue::new("/email", "must be the email address of the Atlassian account"));
        }
        if config.api_token.trim().is_empty() {
            issues.push(ConfigIssue::new("/apiToken", "must not be empty"));
        }
        let key = &config.project_key;
        let key_ok = key.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && key.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !key_ok {
            issues.push(ConfigIssue::new(
                "/projectKey",
                "must be a project key: an uppercase letter, then uppercase letters, digits or _",
            ));
        }
        if config.issue_type.trim().is_empty() {
            issues.push(ConfigIssue::new("/issueType", "must not be empty"));
        }
        for (i, label) in config.labels.iter().enumerate() {
            if label.is_empty() || label.chars().count() > 255 || label.chars().any(char::is_whitespace) {
                issues.push(ConfigIssue::new(&format!("/labels/{i}"), "a label is 1 to 255 characters without spaces"));
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
        match get_json(config, "/rest/api/3/myself") {
            Ok(me) => {
                let who =
                    util::text(&me, "displayName").or_else(|| util::text(&me, "emailAddress")).unwrap_or_default();
                checks.push(Check::pass("authentication", format!("authenticated as {who}")));
            }
            Err(err) => {
                checks.push(Check::fail("authentication", err.to_string()));
                checks.push(Check::skip("project", "not authenticated"));
                return Ok(TestReport::from_checks("Jira test", checks));
            }
        }
        match get_json(config, &format!("/rest/api/3/project/{}", config.project_key)) {
            Ok(project) => {
                let name = util::text(&project, "name").unwrap_or_default();
                checks.push(Check::pass("project", format!("project {} ({name}) is visible", config.project_key)));
                if let Some(types) = project.get("issueTypes").and_then(Value::as_array) {
                    let names: Vec<&str> = types.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).collect();
                    if names.iter().any(|n| n.eq_ignore_ascii_case(&config.issue_type)) {
                        checks.push(Check::pass("issue-type", format!("issue type {} exists", config.issue_type)));
                    } else {
                        checks.push(Check::fail(
                            "issue-type",
                            format!("project has no issue type {}; it has {}", config.issue_type, names.join(", ")),
                        ));
                    }
                }
            }
            Err(err) => checks.push(Check::fail("project", err.to_string())),
        }
        Ok(TestReport::from_checks("Jira test", checks))
    }

    fn notify(ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
        let Some(label) = subject_label(event) else {
            log::info("jira event skipped", &[("event", &event.id), ("type", &event.event_type)]);
            return Ok(Delivery::delivered(None));
        };
        let document = document(ctx, event);
        let jql = format!("project = {} AND labels = \"{label}\" AND statusCategory != Done", config.project_key);
        let found =
            post_json(config, "/rest/api/3/search/jql", &json!({"jql": jql, "fields": ["key"], "maxResults": 1}))?.1;
        let open =
            found.get("issues").and_then(Value::as_array).and_then(|i| i.first()).and_then(|i| util::text(i, "key"));
        if let Some(key) = open {
            let (status, _) =
                post_json(config, &format!("/rest/api/3/issue/{key}/comment"), &json!({"body": document}))?;
            log::info("jira issue commented", &[("event", &event.id), ("issue", &key)]);
            return Ok(Delivery::delivered(Some(status)).with_reference(key));
        }
        let mut labels = vec!["trellis".to_owned(), label];
        labels.extend(config.labels.iter().filter(|l| !labels.contains(l)).cloned().collect::<Vec<_>>());
        let summary = if event.summary.trim().is_empty() { event.event_type.clone() } else { event.summary.clone() };
        let body = json!({
            "fields": {
                "project": {"key": config.project_key},
                "issuetype": {"name": config.issue_type},
                "summary": util::truncate(&summary.replace(['\r', '\n'], " "), 255),
                "description": document,
                "labels": labels,
            }
        });
        let (status, created) = post_json(config, "/rest/api/3/issue", &body)?;
        let key = util::text(&created, "key")
            .ok_or_else(|| PluginError::upstream(Some(status), "Jira created an issue but returned no key", false))?;
        log::info("jira issue created", &[("event", &event.id), ("issue", &key)]);
        Ok(Delivery::delivered(Some(status)).with_reference(key))
    }
}

/// The label of the issue an event belongs to, or `None` for events that open no issue.
fn subject_label(event: &Event) -> Option<String> {
    let data = event.data();
    let subject = match event.event_type.as_str() {
        t if t.starts_with("certificate.") => util::text(data, "certificateId")
            .or_else(|| util::text(data, "oldCertificateId"))
            .unwrap_or_else(|| event.id.clone()),
        "ca.health_changed" => util::text(data, "caId").unwrap_or_else(|| event.id.clone()),
        "attestation.failed" => util::text(data, "deviceId").unwrap_or_else(|| "attestation-failed".into()),
        _ => return None,
    };
    // Labels hold no spaces, and JQL quoting stays trivial.
    let subject: String =
        subject.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '-' }).collect();
    Some(util::truncate(&format!("trellis-{subject}"), 255))
}

/// The issue description / comment: the summary, the details, then where it came from.
fn document(ctx: &CallContext, event: &Event) -> Value {
    let paragraph = |text: String, strong: bool| {
        let mut node = json!({"type": "text", "text": text});
        if strong {
            node["marks"] = json!([{"type": "strong"}]);
        }
        json!({"type": "paragraph", "content": [node]})
    };
    let summary = if event.summary.trim().is_empty() { event.event_type.clone() } else { event.summary.clone() };
    let mut content = vec![paragraph(summary, true)];
    let items: Vec<Value> = details(event)
        .into_iter()
        .map(|(label, value)| json!({"type": "listItem", "content": [paragraph(format!("{label}: {value}"), false)]}))
        .collect();
    if !items.is_empty() {
        content.push(json!({"type": "bulletList", "content": items}));
    }
    content.push(paragraph(
        format!(
            "Trellis event {} ({}) in workspace {} at {}.",
            event.event_type,
            event.id,
            event.workspace_id(ctx),
            event.occurred_at()
        ),
        false,
    ));
    json!({"type": "doc", "version": 1, "content": content})
}

fn get_json(config: &Config, path: &str) -> Result<Value, PluginError> {
    let res = config.request("GET", path).send()?;
    classify(&res)?;
    res.json()
}

fn post_json(config: &Config, path: &str, body: &Value) -> Result<(u16, Value), PluginError> {
    let res = config.request("POST", path).json(body)?.send()?;
    classify(&res)?;
    Ok((res.status, serde_json::from_slice(&res.body).unwrap_or(Value::Null)))
}

/// Maps Jira's answer; its errors are `{"errorMessages": [...], "errors": {field: message}}`.
fn classify(res: &http::Response) -> Result<(), PluginError> {
    let message = || {
        let answer: Value = serde_json::from_slice(&res.body).unwrap_or(Value::Null);
        let mut parts: Vec<String> = answer
            .get("errorMessages")
            .and_then(Value::as_array)
            .map(|m| m.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        if let Some(errors) = answer.get("errors").and_then(Value::as_object) {
            parts.extend(errors.iter().map(|(field, m)| format!("{field}: {}", m.as_str().unwrap_or_default())));
        }
        if parts.is_empty() {
            util::truncate(&res.text(), 200)
        } else {
            util::truncate(&parts.join("; "), 400)
        }
    };
    match res.status {
        200..=299 => Ok(()),
        429 => Err(PluginError::RateLimited(res.retry_after_secs())),
        401 => Err(PluginError::unauthorized(format!("Jira rejected the email and API token: {}", message()))),
        403 => Err(PluginError::unauthorized(format!("the Jira account lacks permission: {}", message()))),
        404 => Err(PluginError::not_found(format!("Jira answered 404: {}", message()))),
        status => Err(PluginError::upstream(
            Some(status),
            format!("Jira answered HTTP {status}: {}", message()),
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

trellis_plugin_sdk::export_integration!(Jira);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_plugin_sdk::testing;

    use super::*;

    const BASE: &str = "https://example.atlassian.net";
    const SEARCH: &str = "https://example.atlassian.net/rest/api/3/search/jql";
    const CREATE: &str = "https://example.atlassian.net/rest/api/3/issue";
    /// base64("ops@example.com:tok")
    const BASIC: &str = "Basic b3BzQGV4YW1wbGUuY29tOnRvaw==";

    fn config() -> Config {
        testing::config(json!({
            "baseUrl": BASE,
            "email": "ops@example.com",
            "apiToken": "tok",
            "projectKey": "OPS",
            "labels": ["pki"]
        }))
        .expect("config")
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
    fn the_api_token_is_a_secret_of_the_derived_schema() {
        assert_eq!(testing::secret_fields::<Config>(), [("/apiToken".to_owned(), false)]);
        let schema = testing::config_schema::<Config>();
        assert_eq!(schema["required"], json!(["baseUrl", "email", "apiToken", "projectKey"]));
        assert_eq!(schema["properties"]["issueType"]["default"], "Task");
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(Jira::describe().id(), "io.trellis.jira");
    }

    #[test]
    fn every_config_problem_is_listed() {
        let bad: Config = testing::config(json!({
            "baseUrl": "http://example.atlassian.net",
            "email": "nobody",
            "apiToken": " ",
            "projectKey": "ops",
            "issueType": "",
            "labels": ["ok", "has space"]
        }))
        .expect("parses");
        let Err(PluginError::InvalidConfig(issues)) = Jira::validate_config(&bad) else {
            panic!("invalid config expected");
        };
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(fields, ["/baseUrl", "/email", "/apiToken", "/projectKey", "/issueType", "/labels/1"]);
        assert_eq!(Jira::validate_config(&config()), Ok(()));
    }

    #[test]
    fn basic_auth_is_email_and_token() {
        assert_eq!(http::basic_auth("ops@example.com", "tok"), BASIC);
    }

    #[test]
    fn a_first_event_searches_then_creates_a_labelled_issue() {
        testing::http::respond("POST", SEARCH, 200, r#"{"issues":[],"isLast":true}"#);
        testing::http::respond(
            "POST",
            CREATE,
            201,
            r#"{"id":"10001","key":"OPS-7","self":"https://x/rest/api/3/issue/10001"}"#,
        );
        let delivery = Jira::notify(&testing::context("int_1"), &config(), &expiring()).expect("created");
        assert_eq!(delivery.status(), Some(201));
        assert_eq!(delivery.reference(), Some("OPS-7"));
        let sent = testing::http::requests();
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[0].method.as_str(), sent[0].url.as_str()), ("POST", SEARCH));
        assert_eq!(sent[0].header("authorization").as_deref(), Some(BASIC));
        assert_eq!(sent[0].header("accept").as_deref(), Some("application/json"));
        assert_eq!(
            sent[0].json(),
            json!({
                "jql": "project = OPS AND labels = \"trellis-crt_1\" AND statusCategory != Done",
                "fields": ["key"],
                "maxResults": 1
            })
        );
        assert_eq!((sent[1].method.as_str(), sent[1].url.as_str()), ("POST", CREATE));
        assert_eq!(sent[1].header("authorization").as_deref(), Some(BASIC));
        assert_eq!(sent[1].header("content-type").as_deref(), Some("application/json"));
        let fields = &sent[1].json()["fields"];
        assert_eq!(fields["project"], json!({"key": "OPS"}));
        assert_eq!(fields["issuetype"], json!({"name": "Task"}));
        assert_eq!(fields["summary"], "Certificate api.example.com expires in 7 days");
        assert_eq!(fields["labels"], json!(["trellis", "trellis-crt_1", "pki"]));
        let description = &fields["description"];
        assert_eq!((description["type"].as_str(), description["version"].as_i64()), (Some("doc"), Some(1)));
        let text = description.to_string();
        for expected in
            ["Common name: api.example.com", "Serial number: 0a1b", "Days until expiry: 7", "workspace ws_1"]
        {
            assert!(text.contains(expected), "{expected} in {text}");
        }
    }

    #[test]
    fn a_repeat_comments_on_the_open_issue_and_renewal_finds_it_too() {
        testing::http::respond("POST", SEARCH, 200, r#"{"issues":[{"id":"10001","key":"OPS-7","fields":{}}]}"#);
        let comment = "https://example.atlassian.net/rest/api/3/issue/OPS-7/comment";
        testing::http::respond("POST", comment, 201, r#"{"id":"100"}"#);
        let event = Event::for_test(
            "certificate.renewed",
            "Certificate api.example.com renewed",
            json!({"data": {"oldCertificateId": "crt_1", "newCertificateId": "crt_2", "commonName": "api.example.com", "caId": "ca_1"}}),
        );
        let delivery = Jira::notify(&testing::context("int_1"), &config(), &event).expect("commented");
        assert_eq!((delivery.status(), delivery.reference()), (Some(201), Some("OPS-7")));
        let sent = testing::http::requests();
        assert!(sent[0].json()["jql"].as_str().unwrap_or_default().contains("labels = \"trellis-crt_1\""));
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[1].url, comment);
        let body = sent[1].json();
        assert_eq!(body["body"]["type"], "doc");
        assert!(body["body"].to_string().contains("New certificate ID: crt_2"));
    }

    #[test]
    fn only_problem_events_open_issues() {
        for event_type in ["discovery.scan_completed", "webhook.test", "ca.created"] {
            testing::reset();
            let event = Event::for_test(event_type, "x", json!({"data": {"caId": "ca_1"}}));
            let delivery = Jira::notify(&testing::context("int_1"), &config(), &event).expect("skipped");
            assert_eq!(delivery, Delivery::delivered(None));
            assert!(testing::http::requests().is_empty());
            assert!(testing::logs().iter().any(|l| l.starts_with("INFO jira event skipped")));
        }
        testing::reset();
        testing::http::respond("POST", SEARCH, 200, r#"{"issues":[]}"#);
        testing::http::respond("POST", CREATE, 201, r#"{"key":"OPS-8"}"#);
        let event = Event::for_test("ca.health_changed", "CA Example is unhealthy", json!({"data": {"caId": "ca 1"}}));
        Jira::notify(&testing::context("int_1"), &config(), &event).expect("created");
        assert_eq!(testing::http::requests()[1].json()["fields"]["labels"][1], "trellis-ca-1");
    }

    #[test]
    fn errors_map_to_plugin_errors() {
        type Expect = fn(&PluginError) -> bool;
        let cases: [(u16, &str, Expect); 5] = [
            (401, "", |e| matches!(e, PluginError::Unauthorized(_))),
            (
                403,
                r#"{"errorMessages":["You do not have permission"]}"#,
                |e| matches!(e, PluginError::Unauthorized(m) if m.contains("permission")),
            ),
            (429, "", |e| *e == PluginError::RateLimited(None)),
            (
                400,
                r#"{"errorMessages":[],"errors":{"issuetype":"Specify a valid issue type"}}"#,
                |e| matches!(e, PluginError::Upstream { status: Some(400), retryable: false, message } if message.contains("issuetype: Specify")),
            ),
            (503, "", |e| matches!(e, PluginError::Upstream { status: Some(503), retryable: true, .. })),
        ];
        for (status, body, expected) in cases {
            testing::reset();
            testing::http::respond("POST", SEARCH, 200, r#"{"issues":[]}"#);
            testing::http::respond("POST", CREATE, status, body);
            let err = Jira::notify(&testing::context("int_1"), &config(), &expiring()).expect_err("fails");
            assert!(expected(&err), "{status}: {err:?}");
        }
        let res =
            http::Response { status: 429, headers: vec![("retry-after".into(), b"5".to_vec())], body: Vec::new() };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(Some(5))));
    }

    #[test]
    fn the_test_checks_the_account_the_project_and_the_issue_type() {
        let myself = "https://example.atlassian.net/rest/api/3/myself";
        let project = "https://example.atlassian.net/rest/api/3/project/OPS";
        testing::http::respond("GET", myself, 200, r#"{"accountId":"a1","displayName":"Ops Bot"}"#);
        testing::http::respond(
            "GET",
            project,
            200,
            r#"{"key":"OPS","name":"Operations","issueTypes":[{"name":"Bug"},{"name":"Task"}]}"#,
        );
        let report = Jira::test(&testing::context("int_1"), &config()).expect("report");
        assert!(report.success(), "{report:?}");
        let names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["config", "authentication", "project", "issue-type"]);
        let sent = testing::http::requests();
        assert_eq!(
            sent.iter().map(|r| (r.method.as_str(), r.url.as_str())).collect::<Vec<_>>(),
            [("GET", myself), ("GET", project)]
        );
        assert_eq!(sent[0].header("authorization").as_deref(), Some(BASIC));

        testing::reset();
        testing::http::respond("GET", myself, 401, "");
        let report = Jira::test(&testing::context("int_1"), &config()).expect("report");
        assert!(!report.success());
        assert_eq!(report.checks()[2].status, CheckStatus::Skip);
    }
}
