//! Issuance through a CA that answers "pending" (`plugins/fixtures/ca-pending`, a real wasm
//! connector whose `poll-issue` returns a certificate for the CSR's key): `POST
//! /api/certificates/issue` answers 202 with an `issuing` certificate request, and `trellis jobs
//! poll-issuance` (another process, as a replica would be) completes it once.

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

use crate::cas::{create_ca, install_plugin};
use crate::lifecycle::days_from_now;

/// A server whose own poller stays out of the way (the tests drive polling with the CLI).
fn server() -> Server {
    Server::start_with(&[("TRELLIS_ISSUANCE_POLL_INTERVAL_SECS", "3600")])
}

/// A `fixture-pending` CA with `config`; returns its id.
async fn pending_ca(admin: &Client, config: Value) -> i64 {
    install_plugin(admin, "fixture-ca-pending").await;
    let ca = create_ca(admin, json!({ "name": "Slow CA", "type": "fixture-pending", "config": config })).await;
    ca["id"].as_i64().expect("CA id")
}

/// Issues through `ca` and returns the `issuing` request (asserts the 202).
async fn issue_pending(admin: &Client, ca: i64, common_name: &str) -> Value {
    let res = admin.post("/api/certificates/issue", json!({ "caId": ca, "commonName": common_name })).await;
    assert_eq!(res.status, 202, "{}", res.body);
    let request = res.body["data"].clone();
    assert_eq!(request["status"], "issuing", "{request}");
    request
}

async fn request(client: &Client, id: &Value) -> Value {
    let res = client.get(&format!("/api/certificate-requests/{id}")).await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["data"].clone()
}

/// RFC 3339, `secs` from now.
fn from_now(secs: i64) -> String {
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(secs);
    at.format(&time::format_description::well_known::Rfc3339).expect("format")
}

fn poll(server: &Server, as_of: Option<&str>) -> Value {
    let mut args = vec!["jobs", "poll-issuance"];
    if let Some(at) = as_of {
        args.extend(["--as-of", at]);
    }
    server.cli(&args).expect("jobs poll-issuance")
}

#[tokio::test]
async fn a_pending_ca_answers_202_and_the_poller_completes_the_request() {
    let server = server();
    let admin = server.admin().await;
    let ca = pending_ca(&admin, json!({ "retryAfter": 600 })).await;

    let opened = issue_pending(&admin, ca, "slow.example.com").await;
    assert_eq!(opened["statusMessage"], "validating 1 name(s)", "{opened}");
    assert_eq!(opened["caId"], ca);
    assert!(opened["nextPollAt"].is_string(), "{opened}");
    assert!(opened["certificateId"].is_null());
    assert_eq!(opened["pollAttempts"], 0);
    let listed = admin.get("/api/certificate-requests?status=issuing").await;
    assert_eq!(listed.body["total"], 1, "{}", listed.body);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0);

    // Another workspace sees nothing of it.
    let (other, _) = server.new_user("other@example.com").await;
    assert_eq!(other.get(&format!("/api/certificate-requests/{}", opened["id"])).await.status, 404);
    assert_eq!(other.get("/api/certificate-requests").await.body["total"], 0);

    // The CA asked for 600 s: not due now.
    let early = poll(&server, None);
    assert_eq!(early, json!({ "issued": 0, "pending": 0, "retrying": 0, "failed": 0 }));
    let done = poll(&server, Some(&days_from_now(1)));
    assert_eq!(done["issued"], 1, "{done}");

    let issued = request(&admin, &opened["id"]).await;
    assert_eq!(issued["status"], "issued", "{issued}");
    assert_eq!(issued["pollAttempts"], 1);
    assert!(issued["nextPollAt"].is_null());
    let certificate_id = issued["certificateId"].as_i64().expect("certificateId");
    let certificate = admin.get(&format!("/api/certificates/{certificate_id}")).await;
    assert_eq!(certificate.status, 200, "{}", certificate.body);
    let certificate = &certificate.body["data"];
    assert_eq!(certificate["commonName"], "slow.example.com");
    assert_eq!(certificate["caId"], ca);
    assert_eq!(certificate["issuanceSource"], "external");
    // The chain the CA delivered in the background is kept: on the record and in the full chain.
    let chain: Vec<&str> = certificate["chain"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(chain.len(), 1, "the fixture's CA certificate: {certificate}");
    let full = admin.get(&format!("/api/certificates/{certificate_id}/download?format=fullchain")).await;
    assert_eq!(full.status, 200);
    assert!(full.header("content-disposition").unwrap_or_default().contains("slow.example.com-fullchain.pem"));
    let text = String::from_utf8_lossy(&full.bytes).into_owned();
    let leaf = certificate["certificate"].as_str().expect("PEM").trim();
    assert!(text.starts_with(leaf) && text.trim_end().ends_with(chain[0].trim()), "leaf then chain: {text}");
    let created = admin.get("/api/events?limit=100&type=certificate.created").await;
    let created: Vec<i64> = created.body["data"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["payload"]["data"]["certificateId"].as_i64())
        .collect();
    assert_eq!(created, [certificate_id], "one certificate.created");

    // Done once: polling again issues nothing.
    let again = poll(&server, Some(&days_from_now(2)));
    assert_eq!(again["issued"], 0, "{again}");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 1);
}

#[tokio::test]
async fn failing_polls_end_the_request_failed_with_the_error() {
    let server = server();
    let admin = server.admin().await;
    install_plugin(&admin, "fixture-ca-pending").await;
    let refusing = create_ca(
        &admin,
        json!({ "name": "Refusing", "type": "fixture-pending", "config": { "failPoll": "rejected" } }),
    )
    .await;
    let foreign =
        create_ca(&admin, json!({ "name": "Foreign", "type": "fixture-pending", "config": { "foreignKey": true } }))
            .await;
    let down = create_ca(
        &admin,
        json!({ "name": "Down", "type": "fixture-pending", "config": { "failPoll": "unavailable" } }),
    )
    .await;
    let refused = issue_pending(&admin, refusing["id"].as_i64().unwrap(), "refused.example.com").await;
    let mismatched = issue_pending(&admin, foreign["id"].as_i64().unwrap(), "foreign.example.com").await;
    let waiting = issue_pending(&admin, down["id"].as_i64().unwrap(), "down.example.com").await;

    let run = poll(&server, Some(&from_now(3600)));
    assert_eq!((run["failed"].as_i64(), run["retrying"].as_i64()), (Some(2), Some(1)), "{run}");

    let refused = request(&admin, &refused["id"]).await;
    assert_eq!(refused["status"], "failed", "{refused}");
    assert!(refused["error"].as_str().unwrap_or_default().contains("refused the order"), "{refused}");
    let mismatched = request(&admin, &mismatched["id"]).await;
    assert_eq!(mismatched["status"], "failed", "{mismatched}");
    assert!(
        mismatched["error"].as_str().unwrap_or_default().contains("public key is not the CSR's"),
        "a connector cannot slip in a certificate for another key: {mismatched}"
    );
    // A CA that is down is retried (the last failure shown) until the order is a day old.
    let waiting_now = request(&admin, &waiting["id"]).await;
    assert_eq!(waiting_now["status"], "issuing", "{waiting_now}");
    assert!(waiting_now["error"].as_str().unwrap_or_default().contains("maintenance"), "{waiting_now}");
    let late = poll(&server, Some(&days_from_now(3)));
    assert_eq!(late["failed"], 1, "{late}");
    assert_eq!(request(&admin, &waiting["id"]).await["status"], "failed");

    assert_eq!(admin.get("/api/certificates").await.body["total"], 0, "nothing was stored");
    let failed = admin.get("/api/certificate-requests?status=failed").await;
    assert_eq!(failed.body["total"], 3, "{}", failed.body);
}

#[tokio::test]
async fn two_concurrent_pollers_issue_each_order_once() {
    let server = server();
    let admin = server.admin().await;
    let ca = pending_ca(&admin, json!({})).await;
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(issue_pending(&admin, ca, &format!("race{n}.example.com")).await["id"].clone());
    }

    let at = days_from_now(1);
    let args = ["jobs", "poll-issuance", "--as-of", at.as_str()];
    let first = server.cli_command(&args).stdout(std::process::Stdio::piped()).spawn().expect("spawn");
    let second = server.cli_command(&args).stdout(std::process::Stdio::piped()).spawn().expect("spawn");
    let mut issued = 0;
    let mut logs = String::new();
    for child in [first, second] {
        let output = child.wait_with_output().expect("poller");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let run: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        issued += run["issued"].as_i64().unwrap_or(0);
        logs.push_str(&format!("{run}\n"));
        // What a poller warned about says why an order went uncounted.
        let stderr = String::from_utf8_lossy(&output.stderr);
        logs.extend(
            stderr
                .lines()
                .filter(|line| line.contains("\"WARN\"") || line.contains("\"ERROR\""))
                .map(|l| format!("{l}\n")),
        );
    }
    assert_eq!(issued, 6, "each order issued by exactly one poller:\n{logs}");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 6);
    let mut certificates = Vec::new();
    for id in &ids {
        let done = request(&admin, id).await;
        assert_eq!(done["status"], "issued", "{done}");
        certificates.push(done["certificateId"].as_i64().expect("certificateId"));
    }
    certificates.sort();
    certificates.dedup();
    assert_eq!(certificates.len(), 6);
    let created = admin.get("/api/events?limit=100&type=certificate.created").await;
    assert_eq!(created.body["data"].as_array().map(Vec::len), Some(6));
}

#[tokio::test]
async fn an_approved_request_whose_ca_is_pending_moves_to_issuing() {
    let server = server();
    let admin = server.admin().await;
    let ca = pending_ca(&admin, json!({})).await;
    let submitted =
        admin.post("/api/certificate-requests", json!({ "caId": ca, "commonName": "gated.example.com" })).await;
    assert_eq!(submitted.status, 201, "{}", submitted.body);
    let id = submitted.body["data"]["id"].clone();
    let ca_record = admin.get(&format!("/api/certificate-authorities/{ca}")).await;
    let workspace = ca_record.body["data"]["workspaceId"].as_str().expect("workspaceId").to_string();
    let approver = server.new_member("approver@example.com", &workspace, "owner").await;
    let approved = approver.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_eq!(approved.status, 202, "{}", approved.body);
    assert_eq!(approved.body["data"]["status"], "issuing", "{}", approved.body);

    let done = poll(&server, Some(&days_from_now(1)));
    assert_eq!(done["issued"], 1, "{done}");
    let issued = request(&admin, &id).await;
    assert_eq!(issued["status"], "issued", "{issued}");
    assert!(issued["decidedBy"].is_string());
}

/// Auto-renewal through a CA that answers "pending" parks the renewal as an `issuing` request;
/// the renewal worker leaves the certificate alone meanwhile, and the poller links the successor.
#[tokio::test]
async fn a_pending_renewal_is_completed_by_the_poller() {
    let server = server();
    let admin = server.admin().await;
    let ca = pending_ca(&admin, json!({})).await;
    let res = admin
        .post("/api/certificates/issue", json!({ "caId": ca, "commonName": "renew.example.com", "autoRenewal": true }))
        .await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(poll(&server, Some(&from_now(3600)))["issued"], 1);
    let first = request(&admin, &res.body["data"]["id"]).await;
    let old_id = first["certificateId"].as_i64().expect("certificateId");

    // 90-day certificate, 30-day window: due in 65 days.
    let due = days_from_now(65);
    let renew = server.cli(&["jobs", "renew", "--as-of", &due]).expect("jobs renew");
    assert_eq!(renew, json!({ "renewed": 0, "failed": 0, "pending": 1 }));
    let parked = admin.get("/api/certificate-requests?status=issuing").await;
    assert_eq!(parked.body["total"], 1, "{}", parked.body);
    let parked = parked.body["data"][0].clone();
    assert_eq!(parked["renewsCertificateId"], old_id, "{parked}");
    // The claim lease (an hour) has passed, but a renewal in flight is not started again.
    let again = server.cli(&["jobs", "renew", "--as-of", &days_from_now(66)]).expect("jobs renew");
    assert_eq!(again, json!({ "renewed": 0, "failed": 0, "pending": 0 }));

    let done = poll(&server, Some(&days_from_now(66)));
    assert_eq!(done["issued"], 1, "{done}");
    let finished = request(&admin, &parked["id"]).await;
    assert_eq!(finished["status"], "issued", "{finished}");
    let new_id = finished["certificateId"].as_i64().expect("certificateId");
    let old = admin.get(&format!("/api/certificates/{old_id}")).await.body["data"].clone();
    assert_eq!(old["renewedById"], new_id, "{old}");
    assert_eq!(old["autoRenewal"], false);
    let renewed = admin.get("/api/events?limit=100&type=certificate.renewed").await;
    let renewed = &renewed.body["data"][0]["payload"]["data"];
    assert_eq!(
        (renewed["oldCertificateId"].as_i64(), renewed["newCertificateId"].as_i64()),
        (Some(old_id), Some(new_id))
    );
}
