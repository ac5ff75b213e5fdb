//! The life of a certificate after its first issuance, through the real binary: approval-gated
//! requests (`/api/certificate-requests`) decided by someone other than the requester,
//! workspace templates (`/api/certificate-templates`), revocations that wait for approval,
//! auto-renewal driven by `trellis jobs renew --as-of`, and `ca_certs` discovery scans that
//! bring what an internal CA issued back into the inventory.

use std::time::Duration;

use serde_json::{json, Value};
use trellis_tests::{Client, Response, Server};

use crate::cas::{create_ca, install_plugin, internal_root, Openssl};

/// Issues through `/api/certificates/issue` and returns the certificate (asserts 201).
pub(crate) async fn issue(client: &Client, body: Value) -> Value {
    let res = client.post("/api/certificates/issue", body.clone()).await;
    assert_eq!(res.status, 201, "issuing {body}: {}", res.body);
    res.body["data"].clone()
}

/// A P-256 key and a CSR for `common_name` made by openssl (`<name>.key`, `<name>.csr`).
fn openssl_csr(openssl: &Openssl, name: &str, common_name: &str) -> String {
    let (key, csr) = (format!("{name}.key"), format!("{name}.csr"));
    let subject = format!("/CN={common_name}");
    let san = format!("subjectAltName=DNS:{common_name}");
    openssl.ok(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &csr,
        "-subj",
        &subject,
        "-addext",
        &san,
    ]);
    openssl.read(&csr)
}

/// The public key (SPKI PEM) of a PEM certificate.
fn public_key(openssl: &Openssl, pem: &str) -> String {
    openssl.write("spki.pem", pem);
    openssl.ok(&["x509", "-in", "spki.pem", "-noout", "-pubkey"])
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`2026-11-25T12:03:02.000Z`).
fn epoch_secs(text: &str) -> i64 {
    let field = |range: std::ops::Range<usize>| -> i64 {
        text.get(range).and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("not RFC 3339: {text}"))
    };
    let (year, month, day) = (field(0..4), field(5..7), field(8..10));
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    days * 86_400 + field(11..13) * 3600 + field(14..16) * 60 + field(17..19)
}

fn validity_days(cert: &Value) -> i64 {
    let at = |name: &str| epoch_secs(cert[name].as_str().unwrap_or_else(|| panic!("{name} missing: {cert}")));
    (at("expiresAt") - at("notBefore")) / 86_400
}

/// RFC 3339 of now plus `days`.
pub(crate) fn days_from_now(days: i64) -> String {
    let at = time::OffsetDateTime::now_utc() + time::Duration::days(days);
    at.format(&time::format_description::well_known::Rfc3339).expect("format")
}

fn reason_codes(reasons: &Value) -> Vec<String> {
    reasons
        .as_array()
        .map(|r| r.iter().filter_map(|r| r["code"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The data of the workspace's events of one type, newest first.
async fn event_data(client: &Client, event_type: &str) -> Vec<Value> {
    let res = client.get(&format!("/api/events?limit=100&type={event_type}")).await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["data"].as_array().unwrap().iter().map(|e| e["payload"]["data"].clone()).collect()
}

/// The serials an internal CA's public CRL lists (uppercase hex, as `openssl crl -text` prints them).
async fn crl_text(server: &Server, openssl: &Openssl, ca: i64) -> String {
    let res = Client::new(server, None).get(&format!("/pki/{ca}/crl")).await;
    assert_eq!(res.status, 200, "/pki/{ca}/crl");
    openssl.write("crl.der", &res.bytes);
    openssl.ok(&["crl", "-inform", "DER", "-in", "crl.der", "-noout", "-text"])
}

fn serial(cert: &Value) -> String {
    cert["serialNumber"].as_str().expect("serialNumber").to_ascii_uppercase()
}

fn assert_error(res: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(res.status, status, "{what}: {}", res.body);
    assert_eq!(res.error_code(), code, "{what}: {}", res.body);
}

/// The workspace of a session or key (read from a certificate authority it created).
fn workspace_of(ca: &Value) -> String {
    ca["workspaceId"].as_str().expect("workspaceId").to_string()
}

/// Polls a scan until it reaches a terminal state. Bounded by progress rather than by size: it
/// fails when the scan's counters stand still for 20 s (a thousand certificates imported on a
/// CI machine that runs other suites beside this one can take longer than that in all, but
/// never stall that long), and after 5 minutes whatever the progress.
pub(crate) async fn finished_scan(client: &Client, id: i64) -> Value {
    const STEP: Duration = Duration::from_millis(50);
    const STILL_STEPS: usize = 400;
    const ALL_STEPS: usize = 6_000;
    let mut last_progress = Value::Null;
    let mut still = 0;
    for _ in 0..ALL_STEPS {
        let res = client.get(&format!("/api/discovery/scans/{id}")).await;
        assert_eq!(res.status, 200, "{}", res.body);
        let scan = res.body["data"].clone();
        if matches!(scan["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
            return scan;
        }
        let progress =
            json!([scan["status"], scan["found"], scan["new"], scan["updated"], scan["failed"], scan["doneTargets"]]);
        if progress == last_progress {
            still += 1;
            assert!(still < STILL_STEPS, "scan {id} made no progress for 20 s: {scan}");
        } else {
            (last_progress, still) = (progress, 0);
        }
        tokio::time::sleep(STEP).await;
    }
    panic!("scan {id} did not finish within 5 minutes");
}

#[tokio::test]
async fn approval_requests_are_decided_by_someone_other_than_the_requester() {
    let server = Server::start();
    let admin = server.admin().await;
    let root_ca = create_ca(
        &admin,
        json!({ "name": "Approvals Root", "type": "internal", "config": { "subject": { "commonName": "Approvals Root" } } }),
    )
    .await;
    let root = root_ca["id"].as_i64().unwrap();
    let workspace = workspace_of(&root_ca);
    let me = admin.get("/api/auth/user").await.body["data"]["id"].as_str().unwrap().to_string();
    // Another principal of the same workspace: an API key the operator made (one the admin made
    // would act for the admin).
    let key = server.operator_key_client(&["certificates:read", "certificates:write"]).await;
    let reader = server.key_client(&["certificates:read"]).await;

    let submitted = admin
        .post(
            "/api/certificate-requests",
            json!({ "caId": root, "commonName": "app.example.com", "subjectAltNames": ["app.example.com"], "validityDays": 30, "autoRenewal": true }),
        )
        .await;
    assert_eq!(submitted.status, 201, "{}", submitted.body);
    let request = submitted.body["data"].clone();
    let id = request["id"].as_i64().expect("integer id");
    assert_eq!(request["status"], "pending", "{request}");
    assert_eq!(request["caId"], root);
    assert_eq!(request["commonName"], "app.example.com");
    assert_eq!(request["requestedBy"], format!("user:{me}"), "{request}");
    assert_eq!(request["certificateId"], Value::Null);
    assert_eq!(request["decidedBy"], Value::Null);
    assert_eq!(reason_codes(&request["reasons"]), ["requested"], "{request}");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0, "nothing is issued before the approval");
    // What could never be issued is refused at submission.
    let unknown_ca =
        admin.post("/api/certificate-requests", json!({ "caId": 424242, "commonName": "x.example.com" })).await;
    assert_error(&unknown_ca, 404, "NOT_FOUND", "unknown CA");
    let too_long = admin
        .post("/api/certificate-requests", json!({ "caId": root, "commonName": "x.example.com", "validityDays": 399 }))
        .await;
    assert_error(&too_long, 400, "VALIDATION_ERROR", "over web_server's 398 days");
    let forbidden =
        reader.post("/api/certificate-requests", json!({ "caId": root, "commonName": "x.example.com" })).await;
    assert_error(&forbidden, 403, "INSUFFICIENT_SCOPE", "certificates:read submitting");

    // Listed (with the status filter) and readable one by one.
    let pending = admin.get("/api/certificate-requests?status=pending").await;
    assert_eq!(pending.status, 200, "{}", pending.body);
    assert_eq!(pending.body["total"], 1, "{}", pending.body);
    assert_eq!(pending.body["data"][0], request);
    assert_eq!(admin.get("/api/certificate-requests?status=issued").await.body["total"], 0);
    assert_eq!(admin.get("/api/certificate-requests?status=").await.body["total"], 1, "empty means no filter");
    let bogus = admin.get("/api/certificate-requests?status=bogus").await;
    assert_eq!(bogus.status, 400, "{}", bogus.body);
    let one = admin.get(&format!("/api/certificate-requests/{id}")).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.body["data"], request);
    assert_eq!(reader.get(&format!("/api/certificate-requests/{id}")).await.status, 200);
    assert_eq!(admin.get("/api/certificate-requests/abc").await.status, 400);
    assert_error(&admin.get("/api/certificate-requests/999999").await, 404, "NOT_FOUND", "unknown request");
    assert_error(
        &key.post("/api/certificate-requests/999999/approve", json!({})).await,
        404,
        "NOT_FOUND",
        "approving an unknown request",
    );

    // The requester cannot decide their own request; a key without certificates:write cannot decide.
    let own = admin.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_error(&own, 403, "FORBIDDEN", "approving one's own request");
    let own_reject = admin.post(&format!("/api/certificate-requests/{id}/reject"), json!({ "reason": "no" })).await;
    assert_error(&own_reject, 403, "FORBIDDEN", "rejecting one's own request");
    let read_only = reader.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_error(&read_only, 403, "INSUFFICIENT_SCOPE", "approving with certificates:read");
    assert_eq!(admin.get(&format!("/api/certificate-requests/{id}")).await.body["data"]["status"], "pending");

    // Someone else approves: the certificate is issued through the same path.
    let approved = key.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let (decided, certificate) = (&approved.body["data"]["request"], &approved.body["data"]["certificate"]);
    assert_eq!(decided["status"], "issued", "{decided}");
    assert!(decided["decidedBy"].as_str().is_some_and(|d| d.starts_with("api_key:key_")), "{decided}");
    assert!(decided["decidedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{decided}");
    let cert_id = certificate["id"].as_i64().expect("certificate id");
    assert_eq!(decided["certificateId"], cert_id);
    assert!(certificate["certificate"].as_str().is_some_and(|p| p.starts_with("-----BEGIN CERTIFICATE-----")));
    assert!(certificate["chain"].is_array(), "{certificate}");
    assert_eq!(certificate["commonName"], "app.example.com");
    assert_eq!(certificate["caId"], root);
    assert_eq!(validity_days(certificate), 30, "the request's validityDays: {certificate}");
    assert_eq!(certificate["autoRenewal"], true, "the request's autoRenewal: {certificate}");
    let stored = admin.get(&format!("/api/certificates/{cert_id}")).await;
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert_eq!(stored.body["data"]["certificate"], certificate["certificate"]);
    assert_eq!(stored.body["data"]["issuanceSource"], "internal");
    let after = admin.get(&format!("/api/certificate-requests/{id}")).await.body["data"].clone();
    assert_eq!((after["status"].clone(), after["certificateId"].clone()), (json!("issued"), json!(cert_id)));
    // Deciding a request that is not pending is a conflict, whoever asks.
    assert_error(
        &key.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await,
        409,
        "CONFLICT",
        "twice",
    );
    assert_error(
        &key.post(&format!("/api/certificate-requests/{id}/reject"), json!({})).await,
        409,
        "CONFLICT",
        "rejecting an issued request",
    );
    assert_eq!(admin.get("/api/certificates").await.body["total"], 1, "approved once, issued once");

    // A request of the key, rejected with a reason by a second user of the workspace.
    let member = server.new_member("approver@example.com", &workspace, "member").await;
    let second = key.post("/api/certificate-requests", json!({ "caId": root, "commonName": "db.example.com" })).await;
    assert_eq!(second.status, 201, "{}", second.body);
    let second_id = second.body["data"]["id"].as_i64().unwrap();
    assert!(second.body["data"]["requestedBy"].as_str().is_some_and(|r| r.starts_with("api_key:")), "{}", second.body);
    let rejected = member
        .post(&format!("/api/certificate-requests/{second_id}/reject"), json!({ "reason": "  not our domain  " }))
        .await;
    assert_eq!(rejected.status, 200, "{}", rejected.body);
    let r = &rejected.body["data"];
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(r["decisionReason"], "not our domain", "{r}");
    assert!(r["decidedBy"].as_str().is_some_and(|d| d.starts_with("user:") && !d.ends_with(&me)), "{r}");
    assert_eq!(r["certificateId"], Value::Null);
    for (client, action) in [(&admin, "approve"), (&member, "reject"), (&admin, "reject")] {
        let res = client.post(&format!("/api/certificate-requests/{second_id}/{action}"), json!({})).await;
        assert_error(&res, 409, "CONFLICT", &format!("{action} a rejected request"));
    }
    assert_eq!(admin.get("/api/certificate-requests?status=rejected").await.body["data"][0]["id"], second_id);
    assert_eq!(admin.get("/api/certificate-requests?status=pending").await.body["total"], 0);
    // The member can approve the admin's request, and a user can approve a key's request.
    let third = admin.post("/api/certificate-requests", json!({ "caId": root, "commonName": "mq.example.com" })).await;
    let third_id = third.body["data"]["id"].as_i64().unwrap();
    let by_member = member.post(&format!("/api/certificate-requests/{third_id}/approve"), json!({})).await;
    assert_eq!(by_member.status, 200, "{}", by_member.body);
    assert_eq!(by_member.body["data"]["request"]["status"], "issued");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 2);
    let audit = admin.get("/api/audit-logs?action=certificate_request.rejected").await;
    assert_eq!(audit.body["total"], 1, "{}", audit.body);

    // Another workspace sees none of it.
    let (other, _) = server.new_user("other@example.com").await;
    assert_eq!(other.get("/api/certificate-requests").await.body["total"], 0);
    for res in [
        other.get(&format!("/api/certificate-requests/{id}")).await,
        other.post(&format!("/api/certificate-requests/{third_id}/approve"), json!({})).await,
        other.post(&format!("/api/certificate-requests/{second_id}/reject"), json!({})).await,
        other.post("/api/certificate-requests", json!({ "caId": root, "commonName": "x.example.com" })).await,
    ] {
        assert_error(&res, 404, "NOT_FOUND", "another workspace");
    }
}

#[tokio::test]
async fn a_policy_that_requires_approval_parks_the_issue_until_someone_else_approves() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Gate Root").await;
    let key = server.operator_key_client(&["certificates:read", "certificates:write"]).await;
    let gate = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "gate", "type": "domain-policy", "config": { "requireApprovalFor": ["*.prod.example.com"] } }),
        )
        .await;
    assert_eq!(gate.status, 201, "{}", gate.body);

    let parked =
        admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "api.prod.example.com" })).await;
    assert_eq!(parked.status, 202, "{}", parked.body);
    let request = parked.body["data"].clone();
    assert_eq!(request["status"], "pending", "{request}");
    assert!(reason_codes(&request["reasons"]).contains(&"approval_required".to_string()), "{request}");
    let id = request["id"].as_i64().unwrap();
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0);
    assert_error(
        &admin.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await,
        403,
        "FORBIDDEN",
        "own approval",
    );
    // Approval issues: the policy runs again, but its require-approval no longer holds.
    let approved = key.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.body["data"]["request"]["status"], "issued", "{}", approved.body);
    assert_eq!(approved.body["data"]["certificate"]["commonName"], "api.prod.example.com");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 1);
    // Names the policy does not gate are issued at once.
    issue(&admin, json!({ "caId": root, "commonName": "dev.example.com" })).await;

    // A policy that denies at approval time fails the approval; the request records the error.
    let parked =
        admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "db.prod.example.com" })).await;
    assert_eq!(parked.status, 202, "{}", parked.body);
    let id = parked.body["data"]["id"].as_i64().unwrap();
    let deny = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "org only", "type": "domain-policy", "config": { "allowedDnsSuffixes": [".example.org"] } }),
        )
        .await;
    assert_eq!(deny.status, 201, "{}", deny.body);
    let denied = key.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_error(&denied, 403, "POLICY_DENIED", "a deny policy at approval time");
    assert!(
        reason_codes(&denied.body["error"]["details"]["reasons"]).contains(&"dns_suffix_not_allowed".to_string()),
        "{}",
        denied.body
    );
    let failed = admin.get(&format!("/api/certificate-requests/{id}")).await.body["data"].clone();
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["error"].as_str().is_some_and(|e| !e.is_empty()), "{failed}");
    assert_eq!(failed["certificateId"], Value::Null);
    assert!(failed["decidedBy"].as_str().is_some_and(|d| d.starts_with("api_key:")), "{failed}");
    assert_eq!(admin.get("/api/certificates?search=db.prod").await.body["total"], 0, "nothing issued");
    assert_error(
        &key.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await,
        409,
        "CONFLICT",
        "approving a failed request",
    );
    assert_eq!(admin.get("/api/certificate-requests?status=failed").await.body["total"], 1);
}

#[tokio::test]
async fn workspace_templates_are_created_used_changed_and_deleted() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Template Root").await;

    let created = admin
        .post(
            "/api/certificate-templates",
            json!({ "name": "short-client", "basedOn": "client_auth", "maxValidityDays": 30, "revocationRequiresApproval": true }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let template = created.body["data"].clone();
    let id = template["id"].as_str().expect("a string id").to_string();
    assert!(id.parse::<i64>().is_ok(), "a workspace template's id is its number: {template}");
    assert_eq!(template["name"], "short-client");
    assert_eq!(template["builtIn"], false);
    assert_eq!(template["maxValidityDays"], 30);
    assert_eq!(template["revocationRequiresApproval"], true);
    assert_eq!(template["extendedKeyUsages"], json!(["1.3.6.1.5.5.7.3.2"]), "client_auth's: {template}");
    assert!(template["defaultValidityDays"].as_u64().is_some_and(|d| (1..=30).contains(&d)), "{template}");
    let got = admin.get(&format!("/api/certificate-templates/{id}")).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["data"], template);
    let listed = admin.get("/api/certificate-templates").await.body["data"].clone();
    assert_eq!(listed.as_array().unwrap().last(), Some(&template), "built-ins first, then the workspace's");

    // Usable by id and by name; its maximum holds.
    let by_id =
        issue(&admin, json!({ "caId": root, "commonName": "alice", "templateId": id, "validityDays": 30 })).await;
    assert_eq!(by_id["usageCategory"], "Client Auth", "{by_id}");
    assert_eq!(validity_days(&by_id), 30);
    let by_name = issue(&admin, json!({ "caId": root, "commonName": "bob", "template": "short-client" })).await;
    assert_eq!(by_name["usageCategory"], "Client Auth", "{by_name}");
    assert!(validity_days(&by_name) <= 30, "{by_name}");
    let too_long = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": root, "commonName": "carol", "templateId": id, "validityDays": 31 }),
        )
        .await;
    assert_error(&too_long, 400, "VALIDATION_ERROR", "over the template's maximum");
    assert_eq!(too_long.body["error"]["details"]["field"], "validityDays", "{}", too_long.body);

    // PUT replaces the settings.
    let put = admin
        .put(
            &format!("/api/certificate-templates/{id}"),
            json!({ "name": "short-client", "basedOn": "client_auth", "maxValidityDays": 60, "description": "two months" }),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.body["data"]["id"], json!(id));
    assert_eq!(put.body["data"]["maxValidityDays"], 60);
    assert_eq!(put.body["data"]["description"], "two months");
    assert_eq!(put.body["data"]["revocationRequiresApproval"], false, "absent members take the base's values");
    let longer =
        issue(&admin, json!({ "caId": root, "commonName": "carol", "templateId": id, "validityDays": 45 })).await;
    assert_eq!(validity_days(&longer), 45);
    let missing = admin.put("/api/certificate-templates/999999", json!({ "name": "ghost" })).await;
    assert_error(&missing, 404, "NOT_FOUND", "PUT of an unknown template");

    // The built-ins are read-only.
    for res in [
        admin.put("/api/certificate-templates/web_server", json!({ "name": "web", "maxValidityDays": 10 })).await,
        admin.delete("/api/certificate-templates/web_server").await,
        admin.delete("/api/certificate-templates/client_auth").await,
    ] {
        assert_error(&res, 403, "FORBIDDEN", "a built-in");
    }
    assert_eq!(admin.get("/api/certificate-templates/web_server").await.body["data"]["maxValidityDays"], 398);

    // Names are unique in the workspace.
    let duplicate = admin.post("/api/certificate-templates", json!({ "name": "short-client" })).await;
    assert_error(&duplicate, 409, "CONFLICT", "a duplicate name");
    let other = admin.post("/api/certificate-templates", json!({ "name": "other" })).await;
    assert_eq!(other.status, 201, "{}", other.body);
    let other_id = other.body["data"]["id"].as_str().unwrap().to_string();
    let rename = admin.put(&format!("/api/certificate-templates/{other_id}"), json!({ "name": "short-client" })).await;
    assert_error(&rename, 409, "CONFLICT", "renaming onto another template's name");

    // Settings are checked, and nothing is stored when they are wrong.
    for (body, field) in [
        (json!({ "name": "t", "maxValidityDays": 0 }), "maxValidityDays"),
        (json!({ "name": "t", "maxValidityDays": 3651 }), "maxValidityDays"),
        (json!({ "name": "t", "keyUsages": ["digitalSignature", "teleportation"] }), "keyUsages"),
        (json!({ "name": "t", "keyUsages": ["keyCertSign"] }), "keyUsages"),
        (json!({ "name": "t", "extendedKeyUsages": ["1.3.6.1.5.5.7.3.1", "serverAuth"] }), "extendedKeyUsages"),
        (json!({ "name": "t", "extendedKeyUsages": ["1..2"] }), "extendedKeyUsages"),
        (json!({ "name": "t", "subjectDefaults": { "country": "USA" } }), "subjectDefaults.country"),
        (json!({ "name": "t", "basedOn": "nope" }), "basedOn"),
        (json!({ "name": "t", "allowedKeyAlgorithms": ["dsa"] }), "allowedKeyAlgorithms"),
        (json!({ "name": "t", "minRsaBits": 1024 }), "minRsaBits"),
        (json!({ "name": "t", "maxValidityDays": 10, "defaultValidityDays": 20 }), "defaultValidityDays"),
        (json!({ "name": "web_server" }), "name"),
        (json!({ "name": "42" }), "name"),
        (json!({ "name": "bad/name" }), "name"),
    ] {
        let res = admin.post("/api/certificate-templates", body.clone()).await;
        assert_error(&res, 400, "VALIDATION_ERROR", &body.to_string());
        assert_eq!(res.body["error"]["details"]["field"], field, "{body}: {}", res.body);
    }
    let bad_put = admin
        .put(&format!("/api/certificate-templates/{id}"), json!({ "name": "short-client", "maxValidityDays": 0 }))
        .await;
    assert_error(&bad_put, 400, "VALIDATION_ERROR", "PUT with bad settings");
    assert_eq!(admin.get(&format!("/api/certificate-templates/{id}")).await.body["data"]["maxValidityDays"], 60);
    let count = |body: &Value| body["data"].as_array().map(Vec::len).unwrap_or_default();
    assert_eq!(count(&admin.get("/api/certificate-templates").await.body), 7, "5 built-ins and 2 of the workspace");

    // Another workspace neither sees nor uses nor changes them.
    let (stranger, _) = server.new_user("stranger@example.com").await;
    assert_eq!(count(&stranger.get("/api/certificate-templates").await.body), 5);
    for res in [
        stranger.get(&format!("/api/certificate-templates/{id}")).await,
        stranger.put(&format!("/api/certificate-templates/{id}"), json!({ "name": "mine" })).await,
        stranger.delete(&format!("/api/certificate-templates/{id}")).await,
    ] {
        assert_error(&res, 404, "NOT_FOUND", "another workspace's template");
    }
    let stranger_root = internal_root(&stranger, "Stranger Root").await;
    let foreign = stranger
        .post(
            "/api/certificates/issue",
            json!({ "caId": stranger_root, "commonName": "x", "templateId": "short-client" }),
        )
        .await;
    assert_error(&foreign, 400, "VALIDATION_ERROR", "another workspace's template by name");
    let foreign = stranger
        .post("/api/certificates/issue", json!({ "caId": stranger_root, "commonName": "x", "templateId": id }))
        .await;
    assert_error(&foreign, 400, "VALIDATION_ERROR", "another workspace's template by id");
    // The stranger may use the same name in their own workspace.
    let same_name = stranger.post("/api/certificate-templates", json!({ "name": "short-client" })).await;
    assert_eq!(same_name.status, 201, "{}", same_name.body);

    // DELETE: 204, then it is gone.
    let deleted = admin.delete(&format!("/api/certificate-templates/{id}")).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert!(deleted.bytes.is_empty());
    assert_error(&admin.get(&format!("/api/certificate-templates/{id}")).await, 404, "NOT_FOUND", "deleted");
    assert_error(&admin.delete(&format!("/api/certificate-templates/{id}")).await, 404, "NOT_FOUND", "deleted twice");
    let gone =
        admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "dave", "templateId": id })).await;
    assert_error(&gone, 400, "VALIDATION_ERROR", "issuing under a deleted template");
    assert_eq!(admin.get(&format!("/api/certificates/{}", by_id["id"])).await.status, 200, "its certificates stay");
}

#[tokio::test]
async fn revocations_under_a_guarded_template_wait_for_someone_elses_approval() {
    let server = Server::start();
    let admin = server.admin().await;
    let root_ca = create_ca(
        &admin,
        json!({ "name": "Guarded Root", "type": "internal", "config": { "subject": { "commonName": "Guarded Root" } } }),
    )
    .await;
    let root = root_ca["id"].as_i64().unwrap();
    let key = server.operator_key_client(&["certificates:read", "certificates:write"]).await;
    let member = server.new_member("second@example.com", &workspace_of(&root_ca), "member").await;
    let openssl = Openssl::new();
    let guarded = admin
        .post("/api/certificate-templates", json!({ "name": "guarded", "revocationRequiresApproval": true }))
        .await;
    assert_eq!(guarded.status, 201, "{}", guarded.body);
    let doomed =
        issue(&admin, json!({ "caId": root, "commonName": "doomed.example.com", "templateId": "guarded" })).await;
    let spared =
        issue(&admin, json!({ "caId": root, "commonName": "spared.example.com", "templateId": "guarded" })).await;
    let plain = issue(&admin, json!({ "caId": root, "commonName": "plain.example.com" })).await;
    let (doomed_id, spared_id) = (doomed["id"].as_i64().unwrap(), spared["id"].as_i64().unwrap());

    // The revoke waits: 202 with a pending request; the certificate is untouched.
    let parked =
        admin.post(&format!("/api/certificates/{doomed_id}/revoke"), json!({ "reason": "keyCompromise" })).await;
    assert_eq!(parked.status, 202, "{}", parked.body);
    let request = parked.body["data"].clone();
    let request_id = request["id"].as_i64().expect("request id");
    assert_eq!(request["status"], "pending", "{request}");
    assert_eq!(request["certificateId"], doomed_id);
    assert_eq!(request["reason"], "keyCompromise");
    assert!(request["requestedBy"].as_str().is_some_and(|r| r.starts_with("user:")), "{request}");
    let still = admin.get(&format!("/api/certificates/{doomed_id}")).await.body["data"].clone();
    assert_eq!((still["status"].as_str(), still["revokedAt"].clone()), (Some("active"), Value::Null), "{still}");
    assert!(!crl_text(&server, &openssl, root).await.contains(&serial(&doomed)), "not on the CRL yet");
    assert_eq!(admin.get("/api/certificates/crl").await.body["total"], 0);
    // One pending request per certificate, whoever asks.
    let again = key.post(&format!("/api/certificates/{doomed_id}/revoke"), json!({})).await;
    assert_error(&again, 409, "CONFLICT", "a second revocation request");

    let pending = admin.get("/api/certificates/revocation-requests?status=pending").await;
    assert_eq!(pending.status, 200, "{}", pending.body);
    assert_eq!(pending.body["total"], 1, "{}", pending.body);
    assert_eq!(pending.body["data"][0], request);
    assert_eq!(admin.get("/api/certificates/revocation-requests?status=approved").await.body["total"], 0);
    assert_eq!(admin.get("/api/certificates/revocation-requests?status=bogus").await.status, 400);

    // Not one's own; another principal's approval revokes at the CA and in the inventory.
    let own = admin.post(&format!("/api/certificates/revocation-requests/{request_id}/approve"), json!({})).await;
    assert_error(&own, 403, "FORBIDDEN", "approving one's own revocation");
    let own = admin.post(&format!("/api/certificates/revocation-requests/{request_id}/reject"), json!({})).await;
    assert_error(&own, 403, "FORBIDDEN", "rejecting one's own revocation");
    let approved = key.post(&format!("/api/certificates/revocation-requests/{request_id}/approve"), json!({})).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    assert_eq!(approved.body["data"]["request"]["status"], "approved", "{}", approved.body);
    assert!(
        approved.body["data"]["request"]["decidedBy"].as_str().is_some_and(|d| d.starts_with("api_key:")),
        "{}",
        approved.body
    );
    assert_eq!(approved.body["data"]["certificate"]["status"], "revoked", "{}", approved.body);
    let revoked = admin.get(&format!("/api/certificates/{doomed_id}")).await.body["data"].clone();
    assert_eq!(revoked["status"], "revoked", "{revoked}");
    assert!(revoked["revokedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{revoked}");
    let listing = crl_text(&server, &openssl, root).await;
    assert!(listing.contains(&serial(&doomed)), "{} not on the CRL: {listing}", serial(&doomed));
    assert!(listing.contains("Key Compromise"), "{listing}");
    assert!(!listing.contains(&serial(&spared)), "{listing}");
    let again = member.post(&format!("/api/certificates/revocation-requests/{request_id}/approve"), json!({})).await;
    assert_error(&again, 409, "CONFLICT", "approving twice");
    let done = key.post(&format!("/api/certificates/{doomed_id}/revoke"), json!({})).await;
    assert_error(&done, 400, "VALIDATION_ERROR", "revoking a revoked certificate");

    // The reject path: a second user of the workspace says no; the certificate stays good.
    let parked = admin.post(&format!("/api/certificates/{spared_id}/revoke"), json!({ "reason": "superseded" })).await;
    assert_eq!(parked.status, 202, "{}", parked.body);
    let spared_request = parked.body["data"]["id"].as_i64().unwrap();
    let rejected = member
        .post(
            &format!("/api/certificates/revocation-requests/{spared_request}/reject"),
            json!({ "reason": "still in use" }),
        )
        .await;
    assert_eq!(rejected.status, 200, "{}", rejected.body);
    assert_eq!(rejected.body["data"]["status"], "rejected", "{}", rejected.body);
    assert_eq!(rejected.body["data"]["decisionReason"], "still in use", "{}", rejected.body);
    assert_eq!(admin.get(&format!("/api/certificates/{spared_id}")).await.body["data"]["status"], "active");
    assert!(!crl_text(&server, &openssl, root).await.contains(&serial(&spared)));
    let late = key.post(&format!("/api/certificates/revocation-requests/{spared_request}/approve"), json!({})).await;
    assert_error(&late, 409, "CONFLICT", "approving a rejected revocation");
    assert_eq!(admin.get(&format!("/api/certificates/{spared_id}")).await.body["data"]["status"], "active");
    let rejected_list = admin.get("/api/certificates/revocation-requests?status=rejected").await;
    assert_eq!(rejected_list.body["total"], 1, "{}", rejected_list.body);
    // Once decided, a new request may be made.
    let anew = key.post(&format!("/api/certificates/{spared_id}/revoke"), json!({})).await;
    assert_eq!(anew.status, 202, "{}", anew.body);
    assert_eq!(admin.get("/api/certificates/revocation-requests").await.body["total"], 3);

    // Certificates of other templates are revoked at once.
    let direct = admin.post(&format!("/api/certificates/{}/revoke", plain["id"]), json!({})).await;
    assert_eq!(direct.status, 200, "{}", direct.body);
    assert_eq!(direct.body["data"]["status"], "revoked");

    // Another workspace sees none of it.
    let (other, _) = server.new_user("elsewhere@example.com").await;
    assert_eq!(other.get("/api/certificates/revocation-requests").await.body["total"], 0);
    let anew_id = anew.body["data"]["id"].as_i64().unwrap();
    for action in ["approve", "reject"] {
        let res = other.post(&format!("/api/certificates/revocation-requests/{anew_id}/{action}"), json!({})).await;
        assert_error(&res, 404, "NOT_FOUND", "another workspace's revocation request");
    }
    assert_eq!(admin.get(&format!("/api/certificates/{spared_id}")).await.body["data"]["status"], "active");
}

#[tokio::test]
async fn due_certificates_are_renewed_once_with_a_new_or_the_same_key() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Renewal Root").await;
    let openssl = Openssl::new();

    let generated = issue(
        &admin,
        json!({ "caId": root, "commonName": "gen.example.com", "autoRenewal": true, "validityDays": 40, "keyAlgorithm": "ecdsa-p384" }),
    )
    .await;
    let csr = openssl_csr(&openssl, "held", "held.example.com");
    let held = issue(&admin, json!({ "caId": root, "csr": csr, "autoRenewal": true, "validityDays": 40 })).await;
    // Neither due (no auto-renewal, or far from expiry) nor renewable (no CA) certificates stay out.
    issue(&admin, json!({ "caId": root, "commonName": "manual.example.com", "validityDays": 40 })).await;
    issue(&admin, json!({ "caId": root, "commonName": "long.example.com", "autoRenewal": true, "validityDays": 90 }))
        .await;
    let (gen_id, held_id) = (generated["id"].as_i64().unwrap(), held["id"].as_i64().unwrap());
    assert_eq!((generated["autoRenewal"].clone(), held["autoRenewal"].clone()), (json!(true), json!(true)));

    // Now: 40 days left is outside the 30-day window.
    let now = server.cli(&["jobs", "renew"]).expect("jobs renew");
    assert_eq!(now, json!({ "renewed": 0, "failed": 0, "pending": 0 }));
    let bad = server.cli_raw(&["jobs", "renew", "--as-of", "next tuesday"]).expect("run");
    assert!(!bad.status.success(), "a malformed --as-of is refused");

    // Fifteen days on, both are 25 days from expiry: due.
    let later = days_from_now(15);
    let run = server.cli(&["jobs", "renew", "--as-of", &later]).expect("jobs renew --as-of");
    assert_eq!(run, json!({ "renewed": 2, "failed": 0, "pending": 0 }), "as of {later}");

    let renewed = event_data(&admin, "certificate.renewed").await;
    assert_eq!(renewed.len(), 2, "{renewed:?}");
    let new_id_of = |old: i64| {
        let event =
            renewed.iter().find(|e| e["oldCertificateId"] == old).unwrap_or_else(|| panic!("{old}: {renewed:?}"));
        event["newCertificateId"].as_i64().expect("newCertificateId")
    };
    let (gen_new, held_new) = (new_id_of(gen_id), new_id_of(held_id));
    assert!(gen_new != gen_id && held_new != held_id && gen_new != held_new);
    for (old, new, name) in [(gen_id, gen_new, "gen.example.com"), (held_id, held_new, "held.example.com")] {
        let old_cert = admin.get(&format!("/api/certificates/{old}")).await.body["data"].clone();
        let new_cert = admin.get(&format!("/api/certificates/{new}")).await.body["data"].clone();
        assert_eq!(new_cert["commonName"], name, "{new_cert}");
        assert_eq!(new_cert["subjectAlternativeNames"], old_cert["subjectAlternativeNames"], "{new_cert}");
        assert_eq!(new_cert["caId"], root);
        assert_eq!(new_cert["autoRenewal"], true, "auto-renewal moves to the new certificate: {new_cert}");
        assert_eq!(old_cert["autoRenewal"], false, "{old_cert}");
        assert_eq!(old_cert["status"], "active", "the old certificate is not revoked: {old_cert}");
        assert_ne!(new_cert["serialNumber"], old_cert["serialNumber"]);
        assert!(
            epoch_secs(new_cert["expiresAt"].as_str().unwrap()) > epoch_secs(old_cert["expiresAt"].as_str().unwrap()),
            "the renewal outlives the old one: {new_cert}"
        );
        if let Some(renewed_by) = old_cert.get("renewedById") {
            assert_eq!(renewed_by, &json!(new), "{old_cert}");
        }
    }
    let gen_cert = admin.get(&format!("/api/certificates/{gen_new}")).await.body["data"].clone();
    let held_cert = admin.get(&format!("/api/certificates/{held_new}")).await.body["data"].clone();
    // A key generated here is replaced by a new one of the same algorithm, downloadable.
    assert_eq!((gen_cert["keyAlgorithm"].as_str(), gen_cert["keySize"].as_i64()), (Some("ECDSA"), Some(384)));
    let gen_old_key = public_key(&openssl, generated["certificate"].as_str().unwrap());
    let gen_new_key = public_key(&openssl, gen_cert["certificate"].as_str().unwrap());
    assert_ne!(gen_old_key, gen_new_key, "a renewal of a generated key gets a new key");
    let private = admin.get(&format!("/api/certificates/{gen_new}/private-key")).await;
    assert_eq!(private.status, 200, "{}", private.body);
    openssl.write("new.key", private.body["data"]["privateKey"].as_str().unwrap());
    assert_eq!(openssl.ok(&["pkey", "-in", "new.key", "-pubout"]), gen_new_key, "the new key is the new certificate's");
    // A caller-held key is renewed with its CSR: the same key, nothing to download.
    let held_key = openssl.ok(&["pkey", "-in", "held.key", "-pubout"]);
    assert_eq!(public_key(&openssl, held_cert["certificate"].as_str().unwrap()), held_key);
    assert_eq!(public_key(&openssl, held["certificate"].as_str().unwrap()), held_key);
    let no_key = admin.get(&format!("/api/certificates/{held_new}/private-key")).await;
    assert!(no_key.status == 403 || no_key.status == 404, "{} {}", no_key.status, no_key.body);
    let audit = admin.get("/api/audit-logs?action=certificate.renewed").await;
    assert_eq!(audit.body["total"], 2, "{}", audit.body);
    assert_eq!(event_data(&admin, "certificate.renewal_failed").await, Vec::<Value>::new());

    // No double renewal: the old ones are renewed, the new ones not due.
    let again = server.cli(&["jobs", "renew", "--as-of", &later]).expect("jobs renew again");
    assert_eq!(again, json!({ "renewed": 0, "failed": 0, "pending": 0 }));
    assert_eq!(event_data(&admin, "certificate.renewed").await.len(), 2);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 6);
}

#[tokio::test]
async fn auto_renewal_can_be_set_on_certificates_whose_ca_can_issue_or_that_have_none() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Flag Root").await;
    let issued = issue(&admin, json!({ "caId": root, "commonName": "flag.example.com" })).await;
    let id = issued["id"].as_i64().unwrap();
    assert_eq!(issued["autoRenewal"], false);
    let on = admin.put(&format!("/api/certificates/{id}/auto-renew"), json!({ "enabled": true })).await;
    assert_eq!(on.status, 200, "{}", on.body);
    assert_eq!(on.body["data"]["autoRenewal"], true);
    let flipped = admin.send(admin.request(reqwest::Method::PUT, &format!("/api/certificates/{id}/auto-renew"))).await;
    assert_eq!(flipped.status, 200, "{}", flipped.body);
    assert_eq!(flipped.body["data"]["autoRenewal"], false, "no body flips");
    // An import (no CA) may keep the flag as a reminder.
    let imported = admin.register(&trellis_tests::certs::Spec::tls("import.example.com").pem()).await;
    let imported_on =
        admin.put(&format!("/api/certificates/{}/auto-renew", imported["id"]), json!({ "autoRenewal": true })).await;
    assert_eq!(imported_on.status, 200, "{}", imported_on.body);
    assert_eq!(imported_on.body["data"]["autoRenewal"], true);
    // The renewal job leaves an import alone.
    let later = days_from_now(3650);
    let run = server.cli(&["jobs", "renew", "--as-of", &later]).expect("jobs renew");
    assert_eq!(run["renewed"], 0, "{run}");
}

#[tokio::test]
async fn a_ca_that_cannot_issue_refuses_issuance_and_auto_renewal() {
    let server = Server::start();
    let admin = server.admin().await;
    install_plugin(&admin, "fixture-ca-readonly").await;
    let readonly = create_ca(&admin, json!({ "name": "Inventory only", "type": "fixture-readonly" })).await;
    let issued =
        admin.post("/api/certificates/issue", json!({ "caId": readonly["id"], "commonName": "x.example.com" })).await;
    assert_error(&issued, 400, "UNSUPPORTED_CA", "issuing through a CA that cannot issue");
    // Its certificate comes in through a scan, linked to it.
    let fetch =
        admin.post(&format!("/api/certificate-authorities/{}/fetch-certificates", readonly["id"]), json!({})).await;
    assert_eq!(fetch.status, 200, "{}", fetch.body);
    let scan = finished_scan(&admin, fetch.body["data"]["scanId"].as_i64().unwrap()).await;
    assert_eq!(scan["new"], 1, "{scan}");
    let listed = admin.get("/api/certificates").await;
    let certificate = &listed.body["data"][0];
    assert_eq!(certificate["caId"], readonly["id"]);
    let on =
        admin.put(&format!("/api/certificates/{}/auto-renew", certificate["id"]), json!({ "enabled": true })).await;
    assert_error(&on, 400, "UNSUPPORTED_CA", "auto-renewal on a certificate whose CA cannot renew");
    let off =
        admin.put(&format!("/api/certificates/{}/auto-renew", certificate["id"]), json!({ "enabled": false })).await;
    assert_eq!(off.status, 200, "turning it off is always allowed: {}", off.body);
}

#[tokio::test]
async fn a_ca_scan_brings_what_the_ca_issued_back_into_the_inventory() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Scanned Root").await;
    let kept = issue(&admin, json!({ "caId": root, "commonName": "kept.example.com" })).await;
    let lost =
        issue(&admin, json!({ "caId": root, "commonName": "lost.example.com", "metadata": { "team": "a" } })).await;
    let revoked = issue(&admin, json!({ "caId": root, "commonName": "revoked.example.com" })).await;
    // Revoked through the API: at the CA and in the inventory.
    let res =
        admin.post(&format!("/api/certificates/{}/revoke", revoked["id"]), json!({ "reason": "superseded" })).await;
    assert_eq!(res.status, 200, "{}", res.body);
    // Deleted from the inventory only: the CA still knows it.
    assert_eq!(admin.delete(&format!("/api/certificates/{}", lost["id"])).await.status, 204);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 2);

    let fetched = admin.post(&format!("/api/certificate-authorities/{root}/fetch-certificates"), json!({})).await;
    assert_eq!(fetched.status, 200, "{}", fetched.body);
    assert_eq!(fetched.body["data"]["success"], true, "{}", fetched.body);
    assert!(fetched.body["data"]["message"].is_string());
    let scan_id = fetched.body["data"]["scanId"].as_i64().expect("scanId");
    let scan = finished_scan(&admin, scan_id).await;
    assert_eq!(scan["status"], "completed", "{scan}");
    assert_eq!(scan["type"], "ca_certs");
    assert_eq!(scan["caId"], root);
    assert_eq!((scan["found"].as_i64(), scan["new"].as_i64()), (Some(3), Some(1)), "{scan}");
    assert_eq!((scan["updated"].as_i64(), scan["failed"].as_i64()), (Some(0), Some(0)), "{scan}");
    assert_eq!(scan["error"], Value::Null);
    assert!(scan["requestedBy"].as_str().is_some_and(|r| r.starts_with("user:")), "{scan}");
    for field in ["createdAt", "startedAt", "finishedAt"] {
        assert!(scan[field].as_str().is_some_and(|t| t.ends_with('Z')), "{field}: {scan}");
    }

    // The deleted certificate is back, linked to its CA; the others are not duplicated.
    let all = admin.get("/api/certificates?limit=100").await.body.clone();
    assert_eq!(all["total"], 3, "{all}");
    let back = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["fingerprintSha256"] == lost["fingerprintSha256"])
        .unwrap_or_else(|| panic!("the deleted certificate is not back: {all}"))
        .clone();
    assert_ne!(back["id"], lost["id"], "a new inventory record");
    assert_eq!(back["caId"], root, "{back}");
    assert_eq!(back["commonName"], "lost.example.com");
    assert_eq!(back["issuanceSource"], "internal", "{back}");
    assert_eq!(back["status"], "active");
    let by_id = |id: &Value| all["data"].as_array().unwrap().iter().find(|c| &c["id"] == id).cloned();
    assert_eq!(by_id(&revoked["id"]).map(|c| c["status"].clone()), Some(json!("revoked")));
    assert_eq!(by_id(&kept["id"]).map(|c| c["status"].clone()), Some(json!("active")));

    // Listed; the type filter is checked.
    let listed = admin.get("/api/discovery/scans?type=ca_certs").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["total"], 1, "{}", listed.body);
    assert_eq!(listed.body["data"][0], scan);
    assert_eq!(admin.get("/api/discovery/scans?type=tls_endpoints").await.body["total"], 0);
    let bogus = admin.get("/api/discovery/scans?type=bogus").await;
    assert_error(&bogus, 400, "VALIDATION_ERROR", "an unknown scan type");

    // Events.
    let completed = event_data(&admin, "discovery.scan_completed").await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!(completed[0]["scanId"], scan_id);
    assert_eq!(completed[0]["status"], "completed");
    assert_eq!((completed[0]["found"].clone(), completed[0]["new"].clone()), (json!(3), json!(1)));
    let found = event_data(&admin, "discovery.new_certificates_found").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0]["scanId"].clone(), found[0]["count"].clone()), (json!(scan_id), json!(1)));

    // A second scan is idempotent: nothing new, nothing to update.
    let second = admin.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": root })).await;
    assert_eq!(second.status, 201, "{}", second.body);
    assert_eq!(second.body["data"]["type"], "ca_certs");
    let second = finished_scan(&admin, second.body["data"]["id"].as_i64().unwrap()).await;
    assert_eq!((second["found"].as_i64(), second["new"].as_i64()), (Some(3), Some(0)), "{second}");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 3);
    assert_eq!(event_data(&admin, "discovery.new_certificates_found").await.len(), 1, "no new certificates: no event");
    assert_eq!(event_data(&admin, "discovery.scan_completed").await.len(), 2);

    // A finished scan cannot be cancelled.
    let cancel = admin.post(&format!("/api/discovery/scans/{scan_id}/cancel"), json!({})).await;
    assert_error(&cancel, 409, "CONFLICT", "cancelling a completed scan");
    assert_eq!(admin.get(&format!("/api/discovery/scans/{scan_id}")).await.body["data"]["status"], "completed");
}

#[tokio::test]
async fn discovery_scans_are_started_checked_and_kept_per_workspace() {
    let server = Server::start();
    let admin = server.admin().await;

    // A CA created with scanCertificates answers the scan it started.
    let ca = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "Scan At Create", "type": "internal", "scanCertificates": true,
                    "config": { "subject": { "commonName": "Scan At Create" } } }),
        )
        .await;
    assert_eq!(ca.status, 201, "{}", ca.body);
    let ca_id = ca.body["data"]["id"].as_i64().unwrap();
    let scan_id = ca.body["data"]["scanId"].as_i64().expect("scanId on create with scanCertificates");
    let scan = finished_scan(&admin, scan_id).await;
    assert_eq!(scan["status"], "completed", "{scan}");
    assert_eq!((scan["caId"].as_i64(), scan["found"].as_i64(), scan["new"].as_i64()), (Some(ca_id), Some(0), Some(0)));
    assert_eq!(event_data(&admin, "discovery.new_certificates_found").await, Vec::<Value>::new());
    let plain = create_ca(
        &admin,
        json!({ "name": "No Scan", "type": "internal", "config": { "subject": { "commonName": "No Scan" } } }),
    )
    .await;
    assert_eq!(plain.get("scanId"), None, "{plain}");

    // Refusals of a start.
    for (body, what) in [
        (json!({ "type": "tls_endpoints" }), "tls_endpoints"),
        (json!({ "type": "tls_endpoints", "caId": ca_id }), "tls_endpoints with a CA"),
        (json!({ "type": "ca_certs" }), "no caId"),
        (json!({ "type": "bogus", "caId": ca_id }), "unknown type"),
    ] {
        let res = admin.post("/api/discovery/scans", body).await;
        assert_error(&res, 400, "VALIDATION_ERROR", what);
    }
    let missing = admin.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": 999999 })).await;
    assert_error(&missing, 404, "NOT_FOUND", "an unknown CA");
    assert_error(
        &admin.post("/api/certificate-authorities/999999/fetch-certificates", json!({})).await,
        404,
        "NOT_FOUND",
        "fetch from an unknown CA",
    );
    assert_error(&admin.get("/api/discovery/scans/999999").await, 404, "NOT_FOUND", "an unknown scan");
    assert_eq!(admin.get("/api/discovery/scans/abc").await.status, 400);
    assert_error(
        &admin.post("/api/discovery/scans/999999/cancel", json!({})).await,
        404,
        "NOT_FOUND",
        "cancelling an unknown scan",
    );
    // Scopes: reading needs cas:read, starting cas:write.
    let certs_only = server.key_client(&["certificates:read", "certificates:write"]).await;
    assert_eq!(certs_only.get("/api/discovery/scans").await.status, 403);
    let cas_read = server.key_client(&["cas:read"]).await;
    assert_eq!(cas_read.get(&format!("/api/discovery/scans/{scan_id}")).await.status, 200);
    let res = cas_read.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": ca_id })).await;
    assert_error(&res, 403, "INSUFFICIENT_SCOPE", "starting with cas:read");

    // Another workspace neither sees nor starts nor cancels them.
    let (other, _) = server.new_user("scanner@example.com").await;
    assert_eq!(other.get("/api/discovery/scans").await.body["total"], 0);
    for res in [
        other.get(&format!("/api/discovery/scans/{scan_id}")).await,
        other.post(&format!("/api/discovery/scans/{scan_id}/cancel"), json!({})).await,
        other.post(&format!("/api/certificate-authorities/{ca_id}/fetch-certificates"), json!({})).await,
        other.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": ca_id })).await,
    ] {
        assert_error(&res, 404, "NOT_FOUND", "another workspace's scan or CA");
    }
    assert_eq!(admin.get("/api/discovery/scans").await.body["total"], 1);
}

#[tokio::test]
async fn a_failed_renewal_is_reported_and_retried_after_the_claim_lease() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Retry Root").await;
    let cert = issue(
        &admin,
        json!({ "caId": root, "commonName": "retry.example.com", "autoRenewal": true, "validityDays": 40 }),
    )
    .await;
    let id = cert["id"].as_i64().unwrap();
    // Renewal goes through the policies: one that denies the name fails it.
    let deny = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "org only", "type": "domain-policy", "config": { "allowedDnsSuffixes": [".example.org"] } }),
        )
        .await;
    assert_eq!(deny.status, 201, "{}", deny.body);
    let start = time::OffsetDateTime::now_utc() + time::Duration::days(15);
    let at = |minutes: i64| {
        (start + time::Duration::minutes(minutes))
            .format(&time::format_description::well_known::Rfc3339)
            .expect("format")
    };
    assert_eq!(
        server.cli(&["jobs", "renew", "--as-of", &at(0)]).unwrap(),
        json!({ "renewed": 0, "failed": 1, "pending": 0 })
    );
    let failures = event_data(&admin, "certificate.renewal_failed").await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["certificateId"], id);
    assert_eq!(failures[0]["code"], "POLICY_DENIED", "{failures:?}");
    assert!(failures[0]["error"].as_str().is_some_and(|e| !e.is_empty()), "{failures:?}");
    let audit = admin.get("/api/audit-logs?action=certificate.renewal_failed").await;
    assert_eq!(audit.body["total"], 1, "{}", audit.body);
    let kept = admin.get(&format!("/api/certificates/{id}")).await.body["data"].clone();
    assert_eq!(kept["autoRenewal"], true, "a failed renewal keeps the flag: {kept}");
    assert_eq!(event_data(&admin, "certificate.renewed").await, Vec::<Value>::new());

    // Within the hour the failed certificate is not tried again, even with the policy gone.
    let deleted = admin.delete(&format!("/api/issuance-policies/{}", deny.body["data"]["id"])).await;
    assert_eq!(deleted.status, 204);
    assert_eq!(
        server.cli(&["jobs", "renew", "--as-of", &at(30)]).unwrap(),
        json!({ "renewed": 0, "failed": 0, "pending": 0 })
    );
    // After it, it is.
    assert_eq!(
        server.cli(&["jobs", "renew", "--as-of", &at(61)]).unwrap(),
        json!({ "renewed": 1, "failed": 0, "pending": 0 })
    );
    let renewed = event_data(&admin, "certificate.renewed").await;
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert_eq!(renewed[0]["oldCertificateId"], id);
    assert_eq!(admin.get(&format!("/api/certificates/{id}")).await.body["data"]["autoRenewal"], false);
    assert_eq!(event_data(&admin, "certificate.renewal_failed").await.len(), 1);
}

#[tokio::test]
async fn a_connector_scan_pages_imports_once_and_takes_the_cas_revocations() {
    let server = Server::start();
    let admin = server.admin().await;
    // fixture-ca-static lists three entries two at a time: the same certificate thrice, the
    // third revoked at the CA (2026-01-01).
    install_plugin(&admin, "fixture-ca-static").await;
    let ca = create_ca(&admin, json!({ "name": "Static CA", "type": "fixture-static", "config": {} })).await;
    let ca_id = ca["id"].as_i64().unwrap();
    let fetched = admin.post(&format!("/api/certificate-authorities/{ca_id}/fetch-certificates"), json!({})).await;
    assert_eq!(fetched.status, 200, "{}", fetched.body);
    let scan = finished_scan(&admin, fetched.body["data"]["scanId"].as_i64().unwrap()).await;
    assert_eq!(scan["status"], "completed", "{scan}");
    let counts = ["found", "new", "updated", "failed"].map(|f| scan[f].as_i64().unwrap_or(-1));
    assert_eq!(counts, [3, 1, 1, 0], "one import, then the CA's revocation: {scan}");
    let listed = admin.get("/api/certificates").await;
    assert_eq!(listed.body["total"], 1, "imported once: {}", listed.body);
    let cert = &listed.body["data"][0];
    assert_eq!(cert["caId"], ca_id, "{cert}");
    assert_eq!(cert["issuanceSource"], "external", "{cert}");
    assert_eq!(cert["status"], "revoked", "{cert}");
    assert_eq!(cert["revokedAt"], "2026-01-01T00:00:00.000Z", "{cert}");
    let revoked = event_data(&admin, "certificate.revoked").await;
    assert_eq!(revoked.len(), 1, "{revoked:?}");

    // Rerun: everything known, nothing to change.
    let again = admin.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": ca_id })).await;
    assert_eq!(again.status, 201, "{}", again.body);
    let again = finished_scan(&admin, again.body["data"]["id"].as_i64().unwrap()).await;
    let counts = ["found", "new", "updated", "failed"].map(|f| again[f].as_i64().unwrap_or(-1));
    assert_eq!(counts, [3, 0, 0, 0], "{again}");
    assert_eq!(event_data(&admin, "certificate.revoked").await.len(), 1);

    // A connector that cannot list its certificates cannot be scanned.
    install_plugin(&admin, "fixture-connector-v02").await;
    let v02 = create_ca(&admin, json!({ "name": "v02 CA", "type": "fixture-v02", "config": {} })).await;
    let refused =
        admin.post(&format!("/api/certificate-authorities/{}/fetch-certificates", v02["id"]), json!({})).await;
    assert_error(&refused, 400, "UNSUPPORTED_CA", "fetch from a connector without discover");
    let refused = admin.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": v02["id"] })).await;
    assert_error(&refused, 400, "UNSUPPORTED_CA", "a scan of a connector without discover");
    assert_eq!(admin.get("/api/discovery/scans").await.body["total"], 2);
}

#[tokio::test]
async fn renewal_follows_the_template_window_and_keeps_the_lifetime() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Window Root").await;
    let template =
        admin.post("/api/certificate-templates", json!({ "name": "short-window", "renewalWindowDays": 5 })).await;
    assert_eq!(template.status, 201, "{}", template.body);
    let cert = issue(
        &admin,
        json!({ "caId": root, "commonName": "window.example.com", "templateId": "short-window", "validityDays": 40, "autoRenewal": true }),
    )
    .await;
    assert_eq!(cert["issuanceTemplate"], template.body["data"]["id"], "recorded by id: a rename keeps it");
    // 25 days left is outside a 5-day window; 4 days left is inside.
    let early = server.cli(&["jobs", "renew", "--as-of", &days_from_now(15)]).expect("jobs renew");
    assert_eq!(early["renewed"], 0, "{early}");
    let due = server.cli(&["jobs", "renew", "--as-of", &days_from_now(36)]).expect("jobs renew");
    assert_eq!(due["renewed"], 1, "{due}");
    let old = admin.get(&format!("/api/certificates/{}", cert["id"])).await.body["data"].clone();
    let new_id = old["renewedById"].as_i64().expect("the old certificate names its successor");
    let renewed = admin.get(&format!("/api/certificates/{new_id}")).await.body["data"].clone();
    assert_eq!(validity_days(&renewed), 40, "the renewal keeps the lifetime: {renewed}");
    assert_eq!(renewed["autoRenewal"], true);
    assert_eq!(old["autoRenewal"], false);
}

/// Certificates issued on approval and by auto-renewal (`trellis jobs renew`, another process)
/// are in their internal CA's ledger like those of `POST /api/certificates/issue`: the ledger row
/// is written in the issuance's own transaction on every path, and revoking them puts them on
/// the CA's public CRL, which is built from the ledger.
#[tokio::test]
async fn certificates_issued_on_approval_and_by_renewal_are_in_the_cas_ledger() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Ledger Root").await;
    let openssl = Openssl::new();
    let key = server.operator_key_client(&["certificates:read", "certificates:write"]).await;
    let gate = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "gate", "type": "domain-policy", "config": { "requireApprovalFor": ["*.prod.example.com"] } }),
        )
        .await;
    assert_eq!(gate.status, 201, "{}", gate.body);

    let parked =
        admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "api.prod.example.com" })).await;
    assert_eq!(parked.status, 202, "{}", parked.body);
    let request = parked.body["data"]["id"].as_i64().unwrap();
    let approved = key.post(&format!("/api/certificate-requests/{request}/approve"), json!({})).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let on_approval = approved.body["data"]["certificate"].clone();

    let due = issue(
        &admin,
        json!({ "caId": root, "commonName": "renew.example.com", "autoRenewal": true, "validityDays": 40 }),
    )
    .await;
    let run = server.cli(&["jobs", "renew", "--as-of", &days_from_now(15)]).expect("jobs renew --as-of");
    assert_eq!(run, json!({ "renewed": 1, "failed": 0, "pending": 0 }));
    let renewed_id = event_data(&admin, "certificate.renewed").await[0]["newCertificateId"].as_i64().expect("renewed");
    let by_renewal = admin.get(&format!("/api/certificates/{renewed_id}")).await.body["data"].clone();
    assert_ne!(serial(&by_renewal), serial(&due));

    let listing = crl_text(&server, &openssl, root).await;
    for cert in [&on_approval, &by_renewal] {
        assert!(!listing.contains(&serial(cert)), "not revoked yet: {listing}");
        let revoked = admin.post(&format!("/api/certificates/{}/revoke", cert["id"]), json!({})).await;
        assert_eq!(revoked.status, 200, "{}", revoked.body);
    }
    let listing = crl_text(&server, &openssl, root).await;
    for cert in [&on_approval, &by_renewal] {
        assert!(listing.contains(&serial(cert)), "{} not on the CRL: {listing}", serial(cert));
    }
    assert!(!listing.contains(&serial(&due)), "the renewed certificate is not revoked: {listing}");
}
