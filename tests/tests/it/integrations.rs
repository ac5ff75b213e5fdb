//! External integrations (spec §2.9, §4.4) through the real binary: each first-party
//! integration plugin (slack, msteams, pagerduty, jira, servicenow, splunk, datadog) is pointed at
//! a local HTTPS receiver that answers as the vendor's API does; a real event (a registered or
//! revoked certificate) must reach it as the vendor documents the request (method, path,
//! authentication, body), the delivery log must show the outcome and the external reference,
//! and `/test` must pass with the checks the plugin's README names. Then CRUD, secret masking,
//! validation, scopes, workspace isolation, event subscriptions and the failure path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trellis_tests::certs::Spec;
use trellis_tests::receiver::{Received, Receiver, Reply};
use trellis_tests::{Client, Server};

const WAIT: Duration = Duration::from_secs(20);
const MASK: &str = "********";

/// A server whose plugins may reach the local receiver (private networks allowed, its
/// certificate trusted).
fn server_for(receiver: &Receiver) -> Server {
    let bundle = receiver.bundle_path();
    Server::start_with(&[
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
        ("TRELLIS_PLUGIN_CA_BUNDLE", bundle.as_str()),
    ])
}

fn reply(status: u16, body: Value) -> Reply {
    Reply::Status(status, body.to_string())
}

/// Creates an integration; returns its `data`.
async fn create(client: &Client, body: Value) -> Value {
    let res = client.post("/api/integrations/external", body.clone()).await;
    assert_eq!(res.status, 201, "{body} → {}", res.body);
    let data = res.body["data"].clone();
    assert!(data["id"].as_str().is_some_and(|id| id.starts_with("int_")), "{data}");
    data
}

fn id_of(value: &Value) -> String {
    value["id"].as_str().unwrap_or_default().to_owned()
}

async fn deliveries(client: &Client, query: &str) -> Vec<Value> {
    let res = client.get(&format!("/api/integrations/webhooks/deliveries?{query}")).await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["data"].as_array().cloned().unwrap_or_default()
}

/// The delivery of `event_type` to the integration once `done` holds (polls the log).
async fn delivery_when(client: &Client, integration: &str, event_type: &str, done: impl Fn(&Value) -> bool) -> Value {
    let query = format!("integrationId={integration}&eventType={event_type}");
    let mut last = Value::Null;
    for _ in 0..200 {
        if let Some(delivery) = deliveries(client, &query).await.into_iter().next() {
            if done(&delivery) {
                return delivery;
            }
            last = delivery;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the {event_type} delivery to {integration} never settled; last seen: {last}");
}

/// The delivery of `event_type`, asserted successful after one attempt.
async fn delivered(client: &Client, integration: &str, event_type: &str) -> Value {
    let delivery = delivery_when(client, integration, event_type, |d| d["status"] != "pending").await;
    assert_eq!(delivery["status"], "success", "{delivery}");
    assert_eq!(delivery["targetType"], "integration", "{delivery}");
    assert_eq!(delivery["targetId"], integration, "{delivery}");
    assert_eq!(delivery["eventType"], event_type, "{delivery}");
    assert_eq!(delivery["attempts"], 1, "{delivery}");
    assert!(delivery["error"].is_null(), "{delivery}");
    assert!(delivery["eventId"].as_str().is_some_and(|e| e.starts_with("evt_")), "{delivery}");
    assert!(delivery["deliveryId"].as_str().is_some_and(|e| e.starts_with("dlv_")), "{delivery}");
    assert!(delivery["durationMs"].as_i64().is_some(), "{delivery}");
    assert!(delivery["completedAt"].is_string(), "{delivery}");
    delivery
}

/// Runs `/test`; asserts success and exactly `checks`, all passed.
async fn passes_test(client: &Client, integration: &str, checks: &[&str]) -> Value {
    let res = client.post(&format!("/api/integrations/external/{integration}/test"), json!({})).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let report = res.body["data"].clone();
    assert_eq!(report["success"], true, "{report}");
    assert!(report["message"].is_string(), "{report}");
    let listed = report["checks"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = listed.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, checks, "{report}");
    assert!(listed.iter().all(|c| c["status"] == "pass" && c["message"].is_string()), "{report}");
    report
}

/// Registers a new certificate for `common_name` (emits `certificate.created`).
async fn register(client: &Client, common_name: &str) -> Value {
    let (pem, _) = Spec::tls(common_name).build();
    client.register(&pem).await
}

fn is_json(request: &Received) -> bool {
    request.header("content-type").is_some_and(|v| v.starts_with("application/json"))
}

fn accepts_json(request: &Received) -> bool {
    request.header("accept").is_some_and(|v| v.contains("application/json"))
}

/// Asserts the request is `method path`.
fn assert_request(request: &Received, method: &str, path: &str) {
    assert_eq!((request.method.as_str(), request.path.as_str()), (method, path), "{request:?}");
}

#[tokio::test]
async fn slack_posts_the_event_to_the_incoming_webhook() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|_| Reply::Status(200, "ok".into()));
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let hook_path = "/services/T0001/B0001/slackHookSecret7d1";
    let integration = create(
        &admin,
        json!({
            "name": "PKI channel",
            "type": "slack",
            "configuration": { "webhookUrl": receiver.url(hook_path), "username": "Trellis" }
        }),
    )
    .await;
    // The webhook URL is the credential: masked like any secret.
    assert_eq!(integration["type"], "slack");
    assert_eq!(integration["configuration"], json!({ "webhookUrl": MASK, "username": "Trellis" }));
    let id = id_of(&integration);

    let certificate = register(&admin, "slack.example.com").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1, "one message for one event");
    let request = &got[0];
    assert_request(request, "POST", hook_path);
    assert!(is_json(request), "{request:?}");
    let body = request.json();
    assert_eq!(body["text"], ":information_source: Certificate slack.example.com added to the inventory", "{body}");
    assert_eq!(body["username"], "Trellis");
    assert_eq!(body["blocks"][0]["type"], "section", "{body}");
    assert_eq!(body["blocks"][0]["text"]["type"], "mrkdwn", "{body}");
    let context = body["blocks"][1]["elements"][0]["text"].as_str().unwrap_or_default();
    assert!(context.contains("Event `certificate.created`"), "{context}");
    assert!(context.contains("Common name: `slack.example.com`"), "{context}");

    let delivery = delivered(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["httpStatus"], 200, "{delivery}");
    assert!(delivery["reference"].is_null(), "Slack returns no id: {delivery}");
    assert_eq!(delivery["payload"]["data"]["certificateId"], certificate["id"], "{delivery}");
    assert_eq!(delivery["payload"]["data"]["commonName"], "slack.example.com", "{delivery}");

    passes_test(&admin, &id, &["config", "webhook-delivery"]).await;
    let got = receiver.wait_for(2, WAIT).await;
    assert_request(&got[1], "POST", hook_path);
    assert_eq!(got[1].json()["text"], ":white_check_mark: Trellis connection test");

    let log = server.flushed_log().await;
    assert!(!log.contains("slackHookSecret7d1"), "the webhook URL (a secret) is in the log");
}

#[tokio::test]
async fn msteams_posts_an_adaptive_card() {
    let receiver = Receiver::start().await;
    // Incoming webhooks answer 200 with the text `1`.
    receiver.respond_with(|_| Reply::Status(200, "1".into()));
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let hook_path = "/webhookb2/a1b2@c3d4/IncomingWebhook/teamsSecret9e2/e5f6";
    let integration = create(
        &admin,
        json!({ "name": "Teams", "type": "msteams", "configuration": { "webhookUrl": receiver.url(hook_path) } }),
    )
    .await;
    assert_eq!(integration["configuration"]["webhookUrl"], MASK, "{integration}");
    let id = id_of(&integration);

    let certificate = register(&admin, "teams.example.com").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1);
    let request = &got[0];
    assert_request(request, "POST", hook_path);
    assert!(is_json(request), "{request:?}");
    let body = request.json();
    assert_eq!(body["type"], "message", "{body}");
    let attachment = &body["attachments"][0];
    assert_eq!(attachment["contentType"], "application/vnd.microsoft.card.adaptive", "{body}");
    assert!(attachment.get("contentUrl").is_some_and(Value::is_null), "{body}");
    let card = &attachment["content"];
    assert_eq!(card["type"], "AdaptiveCard", "{body}");
    assert_eq!(card["version"], "1.4", "{body}");
    assert_eq!(card["$schema"], "http://adaptivecards.io/schemas/adaptive-card.json", "{body}");
    assert_eq!(card["body"][0]["type"], "TextBlock", "{body}");
    assert_eq!(card["body"][0]["text"], "Certificate teams.example.com added to the inventory", "{body}");
    assert_eq!(card["body"][0]["color"], "Good", "{body}");
    let facts = card["body"].as_array().and_then(|b| b.iter().find(|e| e["type"] == "FactSet")).cloned();
    let facts = facts.map(|f| f["facts"].clone()).unwrap_or_default();
    let fact =
        |title: &str| facts.as_array().and_then(|f| f.iter().find(|f| f["title"] == title)).map(|f| f["value"].clone());
    assert_eq!(fact("Event"), Some(json!("certificate.created")), "{facts}");
    assert_eq!(fact("Common name"), Some(json!("teams.example.com")), "{facts}");
    assert_eq!(fact("Certificate ID"), Some(json!(certificate["id"].to_string())), "{facts}");
    assert_eq!(fact("Workspace"), Some(certificate["workspaceId"].clone()), "{facts}");

    let delivery = delivered(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["httpStatus"], 200, "{delivery}");
    assert!(delivery["reference"].is_null(), "{delivery}");

    passes_test(&admin, &id, &["config", "webhook-delivery"]).await;
    let got = receiver.wait_for(2, WAIT).await;
    assert_request(&got[1], "POST", hook_path);
    assert_eq!(got[1].json()["attachments"][0]["content"]["body"][0]["text"], "Trellis connection test");
}

#[tokio::test]
async fn pagerduty_triggers_an_alert_per_certificate_on_revocation() {
    let receiver = Receiver::start().await;
    // Events API v2: 202 with the dedup key (trigger) or without it (change events).
    receiver.respond_with(|request| {
        let mut answer = json!({ "status": "success", "message": "Event processed" });
        if let Some(key) = request.json().get("dedup_key") {
            answer["dedup_key"] = key.clone();
        }
        reply(202, answer)
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let routing_key = "R0ut1ngKeyR0ut1ngKeyR0ut1ngKey42";
    assert_eq!(routing_key.len(), 32);
    let integration = create(
        &admin,
        json!({
            "name": "On call",
            "type": "pagerduty",
            "configuration": { "routingKey": routing_key, "baseUrl": receiver.url("") }
        }),
    )
    .await;
    assert_eq!(integration["configuration"]["routingKey"], MASK, "{integration}");
    assert_eq!(integration["configuration"]["baseUrl"], receiver.url(""), "{integration}");
    let id = id_of(&integration);

    // certificate.created pages nobody: delivered without a request.
    let certificate = register(&admin, "pd.example.com").await;
    let skipped = delivered(&admin, &id, "certificate.created").await;
    assert!(skipped["httpStatus"].is_null() && skipped["reference"].is_null(), "{skipped}");
    assert!(receiver.requests().is_empty(), "nothing sent for certificate.created");

    let revoked = admin
        .post(&format!("/api/certificates/{}/revoke", certificate["id"]), json!({ "reason": "keyCompromise" }))
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1);
    let request = &got[0];
    assert_request(request, "POST", "/v2/enqueue");
    assert!(is_json(request), "{request:?}");
    let body = request.json();
    let workspace = certificate["workspaceId"].as_str().unwrap_or_default();
    let dedup_key = format!("trellis-{workspace}-{}", certificate["id"]);
    assert_eq!(body["routing_key"], routing_key, "{body}");
    assert_eq!(body["event_action"], "trigger", "{body}");
    assert_eq!(body["dedup_key"], dedup_key.as_str(), "{body}");
    assert_eq!(body["client"], "Trellis", "{body}");
    let payload = &body["payload"];
    assert_eq!(payload["summary"], "Certificate pd.example.com was revoked", "{body}");
    assert_eq!(payload["source"], "pd.example.com", "{body}");
    assert_eq!(payload["severity"], "critical", "{body}");
    assert_eq!(payload["component"], "certificate", "{body}");
    assert_eq!(payload["group"], workspace, "{body}");
    assert_eq!(payload["class"], "certificate.revoked", "{body}");
    assert!(payload["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
    assert_eq!(payload["custom_details"]["certificateId"], certificate["id"], "{body}");
    assert_eq!(payload["custom_details"]["reason"], "keyCompromise", "{body}");
    assert_eq!(payload["custom_details"]["eventType"], "certificate.revoked", "{body}");

    let delivery = delivered(&admin, &id, "certificate.revoked").await;
    assert_eq!(delivery["httpStatus"], 202, "{delivery}");
    assert_eq!(delivery["reference"], dedup_key.as_str(), "the reference is the dedup key: {delivery}");

    // The test is a change event: it proves the key and opens no incident.
    passes_test(&admin, &id, &["config", "change-event"]).await;
    let got = receiver.wait_for(2, WAIT).await;
    assert_request(&got[1], "POST", "/v2/change/enqueue");
    let change = got[1].json();
    assert_eq!(change["routing_key"], routing_key, "{change}");
    assert_eq!(change["payload"]["summary"], "Trellis connection test", "{change}");
    assert!(change.get("event_action").is_none(), "{change}");
}

#[tokio::test]
async fn jira_opens_one_issue_per_certificate_then_comments_on_it() {
    let receiver = Receiver::start().await;
    let opened = Arc::new(AtomicBool::new(false));
    let state = opened.clone();
    receiver.respond_with(move |request| match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/rest/api/3/search/jql") if state.load(Ordering::SeqCst) => {
            reply(200, json!({ "issues": [{ "id": "10000", "key": "OPS-1" }] }))
        }
        ("POST", "/rest/api/3/search/jql") => reply(200, json!({ "issues": [] })),
        ("POST", "/rest/api/3/issue") => {
            state.store(true, Ordering::SeqCst);
            reply(201, json!({ "id": "10000", "key": "OPS-1", "self": "https://example.atlassian.net/rest/api/3/issue/10000" }))
        }
        ("POST", "/rest/api/3/issue/OPS-1/comment") => reply(201, json!({ "id": "10100" })),
        ("GET", "/rest/api/3/myself") => {
            reply(200, json!({ "accountId": "5b10a2844c20165700ede21g", "displayName": "Trellis Bot" }))
        }
        ("GET", "/rest/api/3/project/OPS") => reply(
            200,
            json!({ "id": "10001", "key": "OPS", "name": "Operations", "issueTypes": [{ "name": "Bug" }, { "name": "Task" }] }),
        ),
        _ => reply(404, json!({ "errorMessages": ["no such resource"] })),
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let integration = create(
        &admin,
        json!({
            "name": "Jira OPS",
            "type": "jira",
            "configuration": {
                "baseUrl": receiver.url(""),
                "email": "ops@example.com",
                "apiToken": "jira-SECRET-token-4f7a",
                "projectKey": "OPS",
                "labels": ["pki"]
            }
        }),
    )
    .await;
    assert_eq!(integration["configuration"]["apiToken"], MASK, "{integration}");
    assert_eq!(integration["configuration"]["email"], "ops@example.com", "{integration}");
    let id = id_of(&integration);
    // base64("ops@example.com:jira-SECRET-token-4f7a")
    let basic = "Basic b3BzQGV4YW1wbGUuY29tOmppcmEtU0VDUkVULXRva2VuLTRmN2E=";

    let certificate = register(&admin, "jira.example.com").await;
    let label = format!("trellis-{}", certificate["id"]);
    let got = receiver.wait_for(2, WAIT).await;
    assert_eq!(got.len(), 2, "a search, then the create");
    for request in &got {
        assert_eq!(request.header("authorization"), Some(basic), "{request:?}");
        assert!(accepts_json(request) && is_json(request), "{request:?}");
    }
    assert_request(&got[0], "POST", "/rest/api/3/search/jql");
    let search = got[0].json();
    assert_eq!(
        search["jql"],
        format!("project = OPS AND labels = \"{label}\" AND statusCategory != Done").as_str(),
        "{search}"
    );
    assert_eq!(search["maxResults"], 1, "{search}");
    assert_request(&got[1], "POST", "/rest/api/3/issue");
    let fields = got[1].json()["fields"].clone();
    assert_eq!(fields["project"], json!({ "key": "OPS" }), "{fields}");
    assert_eq!(fields["issuetype"], json!({ "name": "Task" }), "{fields}");
    assert_eq!(fields["summary"], "Certificate jira.example.com added to the inventory", "{fields}");
    assert_eq!(fields["labels"], json!(["trellis", label, "pki"]), "{fields}");
    let description = &fields["description"];
    assert_eq!((description["type"].as_str(), description["version"].as_i64()), (Some("doc"), Some(1)), "{fields}");
    assert_eq!(description["content"][0]["type"], "paragraph", "{fields}");
    assert_eq!(description["content"][0]["content"][0]["marks"][0]["type"], "strong", "{fields}");
    assert_eq!(description["content"][1]["type"], "bulletList", "{fields}");
    assert!(description.to_string().contains("Common name: jira.example.com"), "{fields}");

    let delivery = delivered(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["httpStatus"], 201, "{delivery}");
    assert_eq!(delivery["reference"], "OPS-1", "the reference is the issue key: {delivery}");

    // The next event for the same certificate comments on the open issue.
    let revoked = admin.post(&format!("/api/certificates/{}/revoke", certificate["id"]), json!({})).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let got = receiver.wait_for(4, WAIT).await;
    assert_eq!(got.len(), 4, "a search, then the comment");
    assert_request(&got[2], "POST", "/rest/api/3/search/jql");
    assert_request(&got[3], "POST", "/rest/api/3/issue/OPS-1/comment");
    assert_eq!(got[3].header("authorization"), Some(basic));
    let comment = got[3].json();
    assert_eq!(comment["body"]["type"], "doc", "{comment}");
    assert!(comment["body"].to_string().contains("was revoked"), "{comment}");
    let delivery = delivered(&admin, &id, "certificate.revoked").await;
    assert_eq!((delivery["httpStatus"].as_i64(), delivery["reference"].as_str()), (Some(201), Some("OPS-1")));

    passes_test(&admin, &id, &["config", "authentication", "project", "issue-type"]).await;
    let got = receiver.wait_for(6, WAIT).await;
    assert_request(&got[4], "GET", "/rest/api/3/myself");
    assert_request(&got[5], "GET", "/rest/api/3/project/OPS");
    assert!(got[4..].iter().all(|r| r.header("authorization") == Some(basic)), "{got:?}");
}

#[tokio::test]
async fn servicenow_opens_an_incident_through_the_table_api() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|request| match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/api/now/table/incident") => reply(
            201,
            json!({ "result": { "sys_id": "9d385017c611228701d22104cc95c371", "number": "INC0010001", "state": "1" } }),
        ),
        ("GET", "/api/now/table/incident?sysparm_limit=1") => {
            reply(200, json!({ "result": [{ "sys_id": "1c741bd70b2322007518478d83673af3", "number": "INC0000001" }] }))
        }
        _ => reply(400, json!({ "error": { "message": "Invalid path", "detail": "" }, "status": "failure" })),
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let integration = create(
        &admin,
        json!({
            "name": "ServiceNow",
            "type": "servicenow",
            "configuration": {
                "instanceUrl": receiver.url(""),
                "username": "trellis.bot",
                "password": "snow-SECRET-pass-9c1e",
                "assignmentGroup": "PKI Operations"
            }
        }),
    )
    .await;
    assert_eq!(integration["configuration"]["password"], MASK, "{integration}");
    assert_eq!(integration["configuration"]["username"], "trellis.bot", "{integration}");
    let id = id_of(&integration);
    // base64("trellis.bot:snow-SECRET-pass-9c1e")
    let basic = "Basic dHJlbGxpcy5ib3Q6c25vdy1TRUNSRVQtcGFzcy05YzFl";

    let certificate = register(&admin, "snow.example.com").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1);
    let request = &got[0];
    assert_request(request, "POST", "/api/now/table/incident");
    assert_eq!(request.header("authorization"), Some(basic), "{request:?}");
    assert!(accepts_json(request) && is_json(request), "{request:?}");
    let body = request.json();
    let workspace = certificate["workspaceId"].as_str().unwrap_or_default();
    assert_eq!(body["short_description"], "Certificate snow.example.com added to the inventory", "{body}");
    assert_eq!(body["correlation_id"], format!("trellis-{workspace}-{}", certificate["id"]).as_str(), "{body}");
    assert_eq!(body["correlation_display"], "Trellis", "{body}");
    assert_eq!((body["urgency"].as_str(), body["impact"].as_str()), (Some("3"), Some("3")), "{body}");
    assert_eq!(body["category"], "software", "{body}");
    assert_eq!(body["assignment_group"], "PKI Operations", "{body}");
    assert!(body.get("caller_id").is_none(), "{body}");
    let description = body["description"].as_str().unwrap_or_default();
    assert!(description.contains("Common name: snow.example.com"), "{description}");
    assert!(description.contains("certificate.created"), "{description}");

    let delivery = delivered(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["httpStatus"], 201, "{delivery}");
    assert_eq!(delivery["reference"], "INC0010001", "the reference is the incident number: {delivery}");

    passes_test(&admin, &id, &["config", "table-api"]).await;
    let got = receiver.wait_for(2, WAIT).await;
    assert_request(&got[1], "GET", "/api/now/table/incident?sysparm_limit=1");
    assert_eq!(got[1].header("authorization"), Some(basic));
}

#[tokio::test]
async fn splunk_sends_the_payload_to_the_http_event_collector() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|request| match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/services/collector/event") => reply(200, json!({ "text": "Success", "code": 0 })),
        ("GET", "/services/collector/health") => reply(200, json!({ "text": "HEC is healthy", "code": 17 })),
        _ => reply(404, json!({ "text": "The requested URL was not found on this server.", "code": 404 })),
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let token = "5b3c7e1a-SECRET-4d2f-9a61-0c8e2f7b4d19";
    let integration = create(
        &admin,
        json!({
            "name": "Splunk",
            "type": "splunk",
            "configuration": { "hecUrl": receiver.url(""), "hecToken": token, "index": "pki" }
        }),
    )
    .await;
    assert_eq!(integration["configuration"]["hecToken"], MASK, "{integration}");
    let id = id_of(&integration);

    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let certificate = register(&admin, "splunk.example.com").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1);
    let request = &got[0];
    assert_request(request, "POST", "/services/collector/event");
    assert_eq!(request.header("authorization"), Some(format!("Splunk {token}").as_str()), "{request:?}");
    assert!(is_json(request), "{request:?}");
    let body = request.json();
    assert_eq!(body["sourcetype"], "trellis:event", "{body}");
    assert_eq!(body["source"], "trellis", "{body}");
    assert_eq!(body["host"], "trellis", "{body}");
    assert_eq!(body["index"], "pki", "{body}");
    let time = body["time"].as_f64().unwrap_or_default();
    assert!((before - 60.0..before + 60.0).contains(&time), "time in epoch seconds: {body}");
    let event = &body["event"];
    assert_eq!(event["type"], "certificate.created", "{body}");
    assert!(event["id"].as_str().is_some_and(|e| e.starts_with("evt_")), "{body}");
    assert_eq!(event["workspaceId"], certificate["workspaceId"], "{body}");
    assert_eq!(event["data"]["certificateId"], certificate["id"], "{body}");
    assert_eq!(event["data"]["commonName"], "splunk.example.com", "{body}");

    let delivery = delivered(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["httpStatus"], 200, "{delivery}");
    assert!(delivery["reference"].is_null(), "HEC returns no id: {delivery}");
    assert_eq!(delivery["payload"], *event, "the collector got the webhook payload");

    passes_test(&admin, &id, &["config", "hec-health", "test-event"]).await;
    let got = receiver.wait_for(3, WAIT).await;
    assert_request(&got[1], "GET", "/services/collector/health");
    assert_request(&got[2], "POST", "/services/collector/event");
    assert_eq!(got[2].header("authorization"), Some(format!("Splunk {token}").as_str()));
    assert_eq!(got[2].json()["event"]["type"], "webhook.test");
}

#[tokio::test]
async fn datadog_posts_an_event_with_tags() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|request| match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/api/v1/events") => reply(
            202,
            json!({ "status": "ok", "event": { "id": 7654321098765_i64, "id_str": "7654321098765", "title": "x" } }),
        ),
        ("GET", "/api/v1/validate") => reply(200, json!({ "valid": true })),
        _ => reply(404, json!({ "errors": ["Not found"] })),
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let api_key = "0123456789abcdefSECRET0123456789";
    let integration = create(
        &admin,
        json!({
            "name": "Datadog",
            "type": "datadog",
            "configuration": { "apiKey": api_key, "apiUrl": receiver.url(""), "tags": ["team:pki"] }
        }),
    )
    .await;
    assert_eq!(integration["configuration"]["apiKey"], MASK, "{integration}");
    let id = id_of(&integration);

    let certificate = register(&admin, "dd.example.com").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1);
    let request = &got[0];
    assert_request(request, "POST", "/api/v1/events");
    assert_eq!(request.header("dd-api-key"), Some(api_key), "{request:?}");
    assert!(accepts_json(request) && is_json(request), "{request:?}");
    let body = request.json();
    let workspace = certificate["workspaceId"].as_str().unwrap_or_default();
    assert_eq!(body["title"], "Certificate dd.example.com added to the inventory", "{body}");
    assert_eq!(body["alert_type"], "info", "{body}");
    assert_eq!(body["source_type_name"], "trellis", "{body}");
    assert_eq!(body["aggregation_key"], certificate["id"].to_string().as_str(), "{body}");
    assert!(body["text"].as_str().is_some_and(|t| t.contains("Common name: dd.example.com")), "{body}");
    assert!(body.get("date_happened").is_none(), "{body}");
    assert_eq!(
        body["tags"],
        json!([
            "source:trellis",
            "event_type:certificate.created",
            format!("workspace_id:{workspace}"),
            "common_name:dd.example.com",
            "team:pki"
        ]),
        "{body}"
    );

    let delivery = delivered(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["httpStatus"], 202, "{delivery}");
    assert_eq!(delivery["reference"], "7654321098765", "the reference is the event id: {delivery}");

    passes_test(&admin, &id, &["config", "api-key"]).await;
    let got = receiver.wait_for(2, WAIT).await;
    assert_request(&got[1], "GET", "/api/v1/validate");
    assert_eq!(got[1].header("dd-api-key"), Some(api_key));
}

#[tokio::test]
async fn integrations_crud_masks_secrets_validates_and_isolates() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|request| match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/rest/api/3/search/jql") => reply(200, json!({ "issues": [] })),
        ("POST", "/rest/api/3/issue") => reply(201, json!({ "id": "10000", "key": "SEC-1" })),
        _ => reply(200, json!({ "status": "ok", "event": { "id": 1, "id_str": "1" } })),
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let secret = "jira-SECRET-token-4f7a";
    let listed = admin.get("/api/integrations/external").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["data"], json!([]), "{}", listed.body);

    // Create: 201, secret masked, defaults filled in.
    let created = admin
        .post(
            "/api/integrations/external",
            json!({
                "name": "Jira",
                "type": "jira",
                "configuration": {
                    "baseUrl": receiver.url(""),
                    "email": "ops@example.com",
                    "apiToken": secret,
                    "projectKey": "OPS"
                }
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert!(!String::from_utf8_lossy(&created.bytes).contains(secret), "{}", created.body);
    let integration = created.body["data"].clone();
    let id = id_of(&integration);
    assert!(id.starts_with("int_"), "{integration}");
    assert_eq!(integration["name"], "Jira");
    assert_eq!(integration["type"], "jira");
    assert_eq!(
        integration["configuration"],
        json!({ "baseUrl": receiver.url(""), "email": "ops@example.com", "apiToken": MASK, "projectKey": "OPS" })
    );
    assert_eq!(integration["events"], json!(["*"]));
    assert_eq!(integration["enabled"], true);
    assert!(integration["disabledReason"].is_null() && integration["failingSince"].is_null(), "{integration}");
    assert_eq!(integration["successRate"], 100.0);
    assert_eq!(
        (integration["deliveriesSucceeded24h"].as_i64(), integration["deliveriesFailed24h"].as_i64()),
        (Some(0), Some(0))
    );
    assert!(integration["createdAt"].is_string() && integration["updatedAt"].is_string(), "{integration}");
    // Sealed at rest too.
    let stored = server.sql(&format!("SELECT config FROM external_integrations WHERE id = '{id}'"));
    assert!(stored.contains("apiToken") && !stored.contains(secret), "{stored}");

    // Read back: the record and the list, never the secret.
    let one = admin.get(&format!("/api/integrations/external/{id}")).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.body["data"]["configuration"], integration["configuration"]);
    assert!(!String::from_utf8_lossy(&one.bytes).contains(secret));
    let listed = admin.get("/api/integrations/external").await;
    assert_eq!(listed.body["data"][0]["id"], id.as_str(), "{}", listed.body);
    assert_eq!(listed.body["data"][0]["configuration"]["apiToken"], MASK);
    assert!(!String::from_utf8_lossy(&listed.bytes).contains(secret));

    // PATCH echoing the mask keeps the secret; other members merge.
    let patched = admin
        .patch(
            &format!("/api/integrations/external/{id}"),
            json!({ "name": "Jira SEC", "configuration": { "apiToken": MASK, "projectKey": "SEC" } }),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let data = &patched.body["data"];
    assert_eq!(data["name"], "Jira SEC");
    assert_eq!(data["configuration"]["apiToken"], MASK);
    assert_eq!(data["configuration"]["projectKey"], "SEC");
    assert_eq!(data["configuration"]["email"], "ops@example.com", "untouched members stay: {data}");
    assert_eq!(data["events"], json!(["*"]));
    let off = admin.patch(&format!("/api/integrations/external/{id}"), json!({ "enabled": false })).await;
    assert_eq!(
        (off.body["data"]["enabled"].as_bool(), off.body["data"]["disabledReason"].is_string()),
        (Some(false), true)
    );
    let on = admin.patch(&format!("/api/integrations/external/{id}"), json!({ "enabled": true })).await;
    assert_eq!((on.body["data"]["enabled"].as_bool(), on.body["data"]["disabledReason"].is_null()), (Some(true), true));

    // An integration subscribed to ca.created only.
    let ca_only = create(
        &admin,
        json!({
            "name": "CA events",
            "type": "datadog",
            "configuration": { "apiKey": "0123456789abcdef0123456789abcdef", "apiUrl": receiver.url("/ca-only") },
            "events": ["ca.created"]
        }),
    )
    .await;
    assert_eq!(ca_only["events"], json!(["ca.created"]));
    let ca_only_id = id_of(&ca_only);

    // A real delivery still carries the original token, to the patched project.
    let certificate = register(&admin, "crud.example.com").await;
    let got = receiver.wait_for(2, WAIT).await;
    assert_eq!(got.len(), 2, "{got:?}");
    // base64("ops@example.com:jira-SECRET-token-4f7a")
    let basic = "Basic b3BzQGV4YW1wbGUuY29tOmppcmEtU0VDUkVULXRva2VuLTRmN2E=";
    assert!(got.iter().all(|r| r.header("authorization") == Some(basic)), "{got:?}");
    let jql = got[0].json()["jql"].as_str().unwrap_or_default().to_owned();
    assert!(jql.starts_with("project = SEC AND"), "{jql}");
    assert_eq!(got[1].json()["fields"]["project"]["key"], "SEC");
    let delivery = delivered(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["reference"], "SEC-1", "{delivery}");
    assert_eq!(delivery["payload"]["data"]["certificateId"], certificate["id"]);
    // The ca.created subscriber got nothing (fan-out wrote every delivery of the event at once).
    assert!(deliveries(&admin, &format!("integrationId={ca_only_id}")).await.is_empty());
    assert!(receiver.requests().iter().all(|r| !r.path.starts_with("/ca-only")), "{:?}", receiver.requests());
    let stats = admin.get(&format!("/api/integrations/external/{id}")).await;
    assert_eq!(stats.body["data"]["deliveriesSucceeded24h"], 1, "{}", stats.body);

    // PUT replaces the record (name and type required; the mask still keeps the secret).
    let put = admin
        .put(
            &format!("/api/integrations/external/{id}"),
            json!({
                "name": "Jira replaced",
                "type": "jira",
                "configuration": {
                    "baseUrl": receiver.url(""),
                    "email": "ops@example.com",
                    "apiToken": MASK,
                    "projectKey": "SEC"
                },
                "events": ["certificate.created", "certificate.revoked"]
            }),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.body["data"]["events"], json!(["certificate.created", "certificate.revoked"]));
    assert_eq!(put.body["data"]["configuration"]["apiToken"], MASK);
    let no_type = admin.put(&format!("/api/integrations/external/{id}"), json!({ "name": "x" })).await;
    assert_eq!(no_type.status, 400, "{}", no_type.body);
    // A mask with no stored secret behind it is refused.
    let no_secret = admin
        .post(
            "/api/integrations/external",
            json!({ "name": "x", "type": "pagerduty", "configuration": { "routingKey": MASK } }),
        )
        .await;
    assert_eq!(no_secret.status, 400, "{}", no_secret.body);

    // Unknown type: 400 listing the served types.
    let unknown = admin
        .post("/api/integrations/external", json!({ "name": "x", "type": "carrier-pigeon", "configuration": {} }))
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert_eq!(unknown.error_code(), "VALIDATION_ERROR");
    let available = unknown.body["error"]["details"]["availableTypes"].as_array().cloned().unwrap_or_default();
    for kind in ["slack", "msteams", "pagerduty", "jira", "servicenow", "splunk", "datadog"] {
        assert!(available.contains(&json!(kind)), "{kind} in {}", unknown.body);
    }
    let missing_type = admin.post("/api/integrations/external", json!({ "name": "x", "configuration": {} })).await;
    assert_eq!(missing_type.status, 400, "{}", missing_type.body);

    // Invalid configurations: the plugin's validation, per field.
    let invalid = [
        (
            json!({ "type": "slack", "configuration": { "webhookUrl": "http://hooks.example.com/services/x" } }),
            "webhookUrl",
        ),
        (json!({ "type": "pagerduty", "configuration": { "routingKey": "tooShort" } }), "routingKey"),
        (
            json!({ "type": "jira", "configuration": {
                "baseUrl": "https://example.atlassian.net", "email": "ops@example.com", "apiToken": "t", "projectKey": "ops"
            } }),
            "projectKey",
        ),
        (
            json!({ "type": "splunk", "configuration": { "hecUrl": "https://splunk.example.com:8088", "hecToken": "a b" } }),
            "hecToken",
        ),
    ];
    for (mut body, field) in invalid {
        body["name"] = json!("invalid");
        let res = admin.post("/api/integrations/external", body.clone()).await;
        assert_eq!(res.status, 400, "{body} → {}", res.body);
        assert_eq!(res.error_code(), "VALIDATION_ERROR", "{}", res.body);
        let problems = res.body["error"]["details"]["configuration"].as_array().cloned().unwrap_or_default();
        assert!(
            problems.iter().any(|p| p["field"].as_str().is_some_and(|f| f.contains(field)) && p["message"].is_string()),
            "{field} in {}",
            res.body
        );
        assert!(!res.body.to_string().contains("tooShort"), "the secret is not echoed: {}", res.body);
    }

    // Event subscriptions: known types, not empty.
    let valid = json!({ "apiKey": "0123456789abcdef0123456789abcdef", "apiUrl": receiver.url("") });
    for (events, why) in
        [(json!(["certificate.exploded"]), "unknown"), (json!([]), "empty"), (json!(["*", "ca.created"]), "star alone")]
    {
        let res = admin
            .post(
                "/api/integrations/external",
                json!({ "name": "e", "type": "datadog", "configuration": valid.clone(), "events": events }),
            )
            .await;
        assert_eq!(res.status, 400, "{why}: {}", res.body);
        assert_eq!(res.body["error"]["details"]["field"], "events", "{why}: {}", res.body);
    }
    let patch_empty = admin.patch(&format!("/api/integrations/external/{id}"), json!({ "events": [] })).await;
    assert_eq!(patch_empty.status, 400, "{}", patch_empty.body);

    // Ids: malformed 400, absent 404.
    assert_eq!(admin.get("/api/integrations/external/1").await.status, 400);
    assert_eq!(admin.get("/api/integrations/external/int_xyz").await.status, 400);
    assert_eq!(admin.get("/api/integrations/external/int_00").await.status, 404);
    assert_eq!(admin.post("/api/integrations/external/int_00/test", json!({})).await.status, 404);
    assert_eq!(admin.get("/api/integrations/webhooks/deliveries?integrationId=nope").await.status, 400);

    // Another workspace sees none of it.
    let (stranger, _) = server.new_user("x@example.com").await;
    let path = format!("/api/integrations/external/{id}");
    assert_eq!(stranger.get(&path).await.status, 404);
    assert_eq!(stranger.patch(&path, json!({ "name": "mine" })).await.status, 404);
    assert_eq!(stranger.put(&path, json!({ "name": "mine", "type": "jira" })).await.status, 404);
    assert_eq!(stranger.post(&format!("{path}/test"), json!({})).await.status, 404);
    assert_eq!(stranger.delete(&path).await.status, 404);
    assert_eq!(stranger.get("/api/integrations/external").await.body["data"], json!([]));
    assert!(deliveries(&stranger, &format!("integrationId={id}")).await.is_empty());

    // Scopes.
    assert_eq!(Client::new(&server, None).get("/api/integrations/external").await.status, 401);
    let reader = server.key_client(&["certificates:read"]).await;
    assert_eq!(reader.get("/api/integrations/external").await.status, 403);
    assert_eq!(reader.get(&path).await.status, 403);
    let attempt = json!({ "name": "x", "type": "datadog", "configuration": valid.clone() });
    assert_eq!(reader.post("/api/integrations/external", attempt.clone()).await.status, 403);
    assert_eq!(reader.delete(&path).await.status, 403);
    let integrations_reader = server.key_client(&["integrations:read"]).await;
    let read = integrations_reader.get(&path).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["data"]["configuration"]["apiToken"], MASK);
    assert_eq!(integrations_reader.post("/api/integrations/external", attempt).await.status, 403);
    assert_eq!(integrations_reader.patch(&path, json!({ "name": "y" })).await.status, 403);
    assert_eq!(integrations_reader.post(&format!("{path}/test"), json!({})).await.status, 403);

    // Delete: 204, then gone.
    assert_eq!(admin.delete(&path).await.status, 204);
    assert_eq!(admin.get(&path).await.status, 404);
    assert_eq!(admin.delete(&path).await.status, 404);
    let listed = admin.get("/api/integrations/external").await;
    let ids: Vec<&str> =
        listed.body["data"].as_array().map(|a| a.iter().filter_map(|i| i["id"].as_str()).collect()).unwrap_or_default();
    assert_eq!(ids, [ca_only_id.as_str()], "{}", listed.body);

    // The secret never reached the log nor the audit trail.
    let audit = admin.get("/api/audit-logs").await;
    assert_eq!(audit.status, 200, "{}", audit.body);
    assert!(!String::from_utf8_lossy(&audit.bytes).contains(secret), "the token is in the audit log");
    let log = server.flushed_log().await;
    assert!(!log.contains(secret), "the token is in the server log");
    assert!(!log.contains("0123456789abcdef0123456789abcdef"), "the Datadog key is in the server log");
}

/// A refusal no retry can change (the plugin reports the credentials rejected) ends the delivery
/// `failed` after its one attempt, with the plugin's reason; the schedule is for transient failures.
#[tokio::test]
async fn a_refusal_fails_the_delivery_at_once() {
    let receiver = Receiver::start().await;
    receiver
        .respond_with(|_| reply(401, json!({ "error": { "message": "User Not Authenticated" }, "status": "failure" })));
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let integration = create(
        &admin,
        json!({
            "name": "ServiceNow, wrong password",
            "type": "servicenow",
            "configuration": { "instanceUrl": receiver.url(""), "username": "trellis.bot", "password": "wrong" }
        }),
    )
    .await;
    let id = id_of(&integration);

    register(&admin, "refused.example.com").await;
    let delivery = delivery_when(&admin, &id, "certificate.created", |d| d["status"] != "pending").await;
    assert_eq!((delivery["status"].as_str(), delivery["attempts"].as_i64()), (Some("failed"), Some(1)), "{delivery}");
    assert!(delivery["completedAt"].is_string() && delivery["nextAttemptAt"].is_null(), "{delivery}");
    let error = delivery["error"].as_str().unwrap_or_default();
    assert!(error.contains("user name and password"), "the plugin's reason: {error}");
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn an_upstream_500_leaves_the_delivery_pending_with_the_error() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|_| {
        reply(
            500,
            json!({ "error": { "message": "Internal error", "detail": "database unavailable" }, "status": "failure" }),
        )
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let integration = create(
        &admin,
        json!({
            "name": "ServiceNow down",
            "type": "servicenow",
            "configuration": { "instanceUrl": receiver.url(""), "username": "trellis.bot", "password": "pw-5e8a" }
        }),
    )
    .await;
    let id = id_of(&integration);

    register(&admin, "down.example.com").await;
    assert_eq!(receiver.wait_for(1, WAIT).await.len(), 1);
    let delivery = delivery_when(&admin, &id, "certificate.created", |d| d["attempts"].as_i64() >= Some(1)).await;
    assert_eq!(delivery["status"], "pending", "retried later: {delivery}");
    assert_eq!(delivery["attempts"], 1, "{delivery}");
    assert!(delivery["nextAttemptAt"].is_string(), "{delivery}");
    assert!(delivery["completedAt"].is_null() && delivery["reference"].is_null(), "{delivery}");
    let error = delivery["error"].as_str().unwrap_or_default();
    assert!(error.contains("upstream") && error.contains("500"), "the error names the upstream failure: {error}");
    assert!(error.contains("database unavailable"), "ServiceNow's own message is kept: {error}");
    assert_eq!(receiver.requests().len(), 1, "no immediate retry");

    let record = admin.get(&format!("/api/integrations/external/{id}")).await;
    assert!(record.body["data"]["failingSince"].is_string(), "{}", record.body);
    assert_eq!(record.body["data"]["enabled"], true, "{}", record.body);

    // The test reports the failure as a failed check, not an error status.
    let test = admin.post(&format!("/api/integrations/external/{id}/test"), json!({})).await;
    assert_eq!(test.status, 200, "{}", test.body);
    assert_eq!(test.body["data"]["success"], false, "{}", test.body);
    let checks = test.body["data"]["checks"].as_array().cloned().unwrap_or_default();
    assert!(
        checks.iter().any(|c| c["name"] == "table-api"
            && c["status"] == "fail"
            && c["message"].as_str().is_some_and(|m| m.contains("500"))),
        "{}",
        test.body
    );
}

/// A kept secret never goes to a new host: moving an integration to another URL while sending
/// the mask is refused; sending the secret again is accepted.
#[tokio::test]
async fn a_stored_secret_is_not_sent_to_a_new_host() {
    let receiver = Receiver::start().await;
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let created = create(
        &admin,
        json!({ "name": "ops", "type": "splunk", "configuration": { "hecUrl": receiver.url(""), "hecToken": "tok-123" } }),
    )
    .await;
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    let path = format!("/api/integrations/external/{id}");
    let moved = admin.patch(&path, json!({ "configuration": { "hecUrl": "https://attacker.example.net:8088" } })).await;
    assert_eq!(moved.status, 400, "{}", moved.body);
    assert!(moved.body["error"]["message"].as_str().is_some_and(|m| m.contains("sent again")), "{}", moved.body);
    let resent = admin
        .patch(
            &path,
            json!({ "configuration": { "hecUrl": "https://attacker.example.net:8088", "hecToken": "new-token" } }),
        )
        .await;
    assert_eq!(resent.status, 200, "{}", resent.body);
    // The same host with the mask is fine (a rename, a different index).
    let renamed = admin.patch(&path, json!({ "name": "ops-2" })).await;
    assert_eq!(renamed.status, 200, "{}", renamed.body);
}

/// Issue 21, finding 5, for integrations: a PUT echoing the mask while the record's URL moves
/// (to another host, or to plain http on the same one) is a 400 naming the secret to send again,
/// and nothing changes; a client-sent `$sealed` value is refused too.
#[tokio::test]
async fn an_integration_moved_elsewhere_names_the_secrets_to_send_again() {
    let receiver = Receiver::start().await;
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let hec_url = receiver.url("");
    let created = create(
        &admin,
        json!({ "name": "ops", "type": "splunk", "configuration": { "hecUrl": hec_url, "hecToken": "tok-123" } }),
    )
    .await;
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    let path = format!("/api/integrations/external/{id}");
    let before = server.sql(&format!("SELECT config FROM external_integrations WHERE id = '{id}'"));
    for moved_to in ["https://attacker.example.net:8088", "http://attacker.example.net:8088"] {
        let put = admin
            .put(
                &path,
                json!({ "name": "ops", "type": "splunk", "configuration": { "hecUrl": moved_to, "hecToken": MASK } }),
            )
            .await;
        assert_eq!(put.status, 400, "{moved_to}: {}", put.body);
        assert_eq!(put.error_code(), "VALIDATION_ERROR");
        assert_eq!(put.body["error"]["details"]["secrets"], json!(["hecToken"]), "{}", put.body);
        assert_eq!(put.body["error"]["details"]["configuration"][0]["field"], "hecToken", "{}", put.body);
    }
    let sealed: Value = serde_json::from_str(&before).expect("stored JSON");
    let copied = admin.patch(&path, json!({ "configuration": { "hecToken": sealed["hecToken"].clone() } })).await;
    assert_eq!(copied.status, 400, "{}", copied.body);
    assert_eq!(server.sql(&format!("SELECT config FROM external_integrations WHERE id = '{id}'")), before);
}
