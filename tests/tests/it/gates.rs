//! Issue 21's findings against the gates of issuance, each tried the way the reviewer did:
//! over HTTP against the real binary. Each test failed before its fix.

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

use crate::cas::{create_ca, install_plugin, internal_root, Openssl};

/// A P-256 key pair and a PEM CSR for `names` (the first also the common name).
fn csr_for(key: &rcgen::KeyPair, names: &[&str]) -> String {
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, names[0]);
    params.serialize_request(key).expect("csr").pem().expect("pem")
}

fn new_key() -> rcgen::KeyPair {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key")
}

fn workspace_of(client_ca: &Value) -> String {
    client_ca["workspaceId"].as_str().expect("workspaceId").to_string()
}

/// Finding 2: a text of two CSRs was signed as its first `CERTIFICATE REQUEST` block while the
/// attestation check read its first block of any label. One reader now refuses anything but
/// exactly one request block, on every path.
#[tokio::test]
async fn a_csr_text_of_two_requests_is_refused_everywhere() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Two Blocks Root").await;
    let bound = csr_for(&new_key(), &["device.example"]);
    let software = csr_for(&new_key(), &["device.example"]);
    let relabelled = bound.replace("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST");
    for (what, csr) in [
        ("a NEW CERTIFICATE REQUEST block then a CERTIFICATE REQUEST block", format!("{relabelled}{software}")),
        ("two CERTIFICATE REQUEST blocks", format!("{bound}{software}")),
        ("explanatory text before the block", format!("Subject: CN=device.example\n{bound}")),
    ] {
        let res = admin.post("/api/certificates/issue", json!({ "caId": root, "csr": csr })).await;
        assert_eq!(res.status, 400, "{what}: {}", res.body);
        assert_eq!(res.body["error"]["details"]["field"], "csr", "{what}: {}", res.body);
        let res = admin.post("/api/certificate-requests", json!({ "caId": root, "csr": csr })).await;
        assert_eq!(res.status, 400, "{what} (approval request): {}", res.body);
    }
    // Attest-and-provision reads the CSR before anything else of the evidence is judged.
    let device = admin.post("/api/iot/devices", json!({ "name": "gw-1", "deviceType": "gateway" })).await;
    assert_eq!(device.status, 201, "{}", device.body);
    let id = device.body["data"]["id"].as_i64().expect("device id");
    let nonce = admin.post(&format!("/api/iot/devices/{id}/attestation/challenge"), json!({})).await;
    assert_eq!(nonce.status, 201, "{}", nonce.body);
    let res = admin
        .post(
            &format!("/api/iot/devices/{id}/attest-and-provision"),
            json!({ "caId": root, "templateId": "device", "csr": format!("{relabelled}{software}"),
                    "evidence": { "nonce": nonce.body["data"]["nonce"], "quoteBlob": "AA==" } }),
        )
        .await;
    assert_eq!(res.status / 100, 4, "{}", res.body);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0, "nothing was issued");
    // One block is issued, under either label.
    let one = admin.post("/api/certificates/issue", json!({ "caId": root, "csr": relabelled })).await;
    assert_eq!(one.status, 201, "{}", one.body);
}

/// Finding 3: policies and templates judged the body's names while a connector that sends the
/// CSR as it is got the CSR's names signed. A CSR may now ask only for the request's names, and
/// a certificate naming anything else is refused after the CA answers (502 CA_NAME_MISMATCH,
/// nothing stored, revoked at the CA).
#[tokio::test]
async fn names_judged_are_the_names_signed() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Names Root").await;
    let key = new_key();
    let evil = csr_for(&key, &["evil.example"]);
    let body = json!({ "caId": root, "csr": evil, "commonName": "ok.corp.example", "subjectAltNames": ["ok.corp.example"] });
    let res = admin.post("/api/certificates/issue", body.clone()).await;
    assert_eq!(res.status, 400, "{}", res.body);
    assert_eq!(res.body["error"]["details"]["field"], "csr", "{}", res.body);
    assert!(res.body["error"]["message"].as_str().is_some_and(|m| m.contains("evil.example")), "{}", res.body);
    let res = admin.post("/api/certificate-requests", body).await;
    assert_eq!(res.status, 400, "approval requests judge the same names: {}", res.body);
    // A CSR for a subset of the request's names, or no body names at all, is issued.
    let fine = csr_for(&key, &["ok.corp.example"]);
    let res = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": root, "csr": fine, "subjectAltNames": ["ok.corp.example", "www.corp.example"] }),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let res = admin.post("/api/certificates/issue", json!({ "caId": root, "csr": csr_for(&key, &["x.corp.example"]) })).await;
    assert_eq!(res.status, 201, "{}", res.body);

    // A CA that signs a name nobody asked for: the fixture returns a certificate made for the
    // CSR's key but naming evil.example.
    install_plugin(&admin, "fixture-ca-static").await;
    let mut params = rcgen::CertificateParams::new(vec!["evil.example".to_string()]).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, "ok.corp.example");
    let rogue = params.self_signed(&key).expect("certificate").pem();
    let ca = create_ca(
        &admin,
        json!({ "name": "Rogue CA", "type": "fixture-static", "config": { "certificatePem": rogue } }),
    )
    .await;
    let before = admin.get("/api/certificates").await.body["total"].clone();
    let res = admin
        .post("/api/certificates/issue", json!({ "caId": ca["id"], "csr": fine, "commonName": "ok.corp.example" }))
        .await;
    assert_eq!(res.status, 502, "{}", res.body);
    assert_eq!(res.error_code(), "CA_NAME_MISMATCH", "{}", res.body);
    assert!(res.body["error"]["message"].as_str().is_some_and(|m| m.contains("evil.example")), "{}", res.body);
    assert_eq!(admin.get("/api/certificates").await.body["total"], before, "nothing was stored");
    assert!(
        server.wait_for_log("refused and revoked at the CA", std::time::Duration::from_secs(5)),
        "the certificate is revoked at the CA: {}",
        server.log()
    );
}

/// Finding 1: a device's agent key could manage trust (roots, policies, devices). Management is
/// now its own scope, which owners hold and agent keys can never carry.
#[tokio::test]
async fn device_keys_cannot_manage_what_devices_are_trusted() {
    let server = Server::start();
    let admin = server.admin().await;
    let refused = admin
        .post(
            "/api/api-keys",
            json!({ "name": "gw", "kind": "agent", "scopes": ["attestation:write", "attestation:manage"] }),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body["error"]["message"].as_str().is_some_and(|m| m.contains("attestation:manage")));
    let created = admin
        .post("/api/api-keys", json!({ "name": "gw", "kind": "agent", "scopes": ["attestation:read", "attestation:write"] }))
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let agent = Client::new(&server, created.body["data"]["key"].as_str().map(str::to_string));
    let root = trellis_tests::certs::ca_pem("Homemade TPM Vendor", -1, 365);
    let device = admin.post("/api/iot/devices", json!({ "name": "gw-7", "deviceType": "gateway" })).await;
    let device_id = device.body["data"]["id"].as_i64().expect("device id");
    let policy = json!({ "name": "mine", "deviceType": "gateway", "requiredPcrs": { "sha256": [0] } });
    for (what, res) in [
        ("add a trust root", agent.post("/api/attestation/trust-roots", json!({ "certificate": root })).await),
        ("create a policy", agent.post("/api/attestation/policies", policy.clone()).await),
        ("register a device", agent.post("/api/iot/devices", json!({ "name": "rogue" })).await),
        ("re-enable or retype a device", agent.patch(&format!("/api/iot/devices/{device_id}"), json!({ "status": "enabled", "deviceType": "any" })).await),
        ("reset an enrollment", agent.post(&format!("/api/iot/devices/{device_id}/reset-enrollment"), json!({})).await),
        ("delete a device", agent.delete(&format!("/api/iot/devices/{device_id}")).await),
    ] {
        assert_eq!(res.status, 403, "an agent key must not {what}: {}", res.body);
        assert_eq!(res.error_code(), "INSUFFICIENT_SCOPE", "{what}: {}", res.body);
    }
    // Device work stays open to it.
    let nonce = agent.post(&format!("/api/iot/devices/{device_id}/attestation/challenge"), json!({})).await;
    assert_eq!(nonce.status, 201, "{}", nonce.body);
    // A member does device work; an owner manages.
    let ca = create_ca(
        &admin,
        json!({ "name": "Scope Root", "type": "internal", "config": { "subject": { "commonName": "Scope Root" } } }),
    )
    .await;
    let member = server.new_member("member@example.com", &workspace_of(&ca), "member").await;
    let res = member.post("/api/attestation/trust-roots", json!({ "certificate": root })).await;
    assert_eq!(res.status, 403, "{}", res.body);
    let res = admin.post("/api/attestation/trust-roots", json!({ "certificate": root })).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let reset = admin.post(&format!("/api/iot/devices/{device_id}/reset-enrollment"), json!({})).await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(reset.body["data"]["status"], "registered", "{}", reset.body);
    let audit = admin.get("/api/audit-logs?action=device.enrollment_reset").await;
    assert_eq!(audit.body["total"], 1, "the reset is audited: {}", audit.body);
}

/// Finding 6: a user approved their own request through an API key they made, and the template
/// re-read at approval could be edited while the request waited.
#[tokio::test]
async fn four_eyes_are_two_people_and_approval_issues_what_was_judged() {
    let server = Server::start();
    let admin = server.admin().await;
    let ca = create_ca(
        &admin,
        json!({ "name": "Eyes Root", "type": "internal", "config": { "subject": { "commonName": "Eyes Root" } } }),
    )
    .await;
    let root = ca["id"].as_i64().expect("CA id");
    let own_key = server.key_client(&["certificates:read", "certificates:write"]).await;
    let template = admin
        .post("/api/certificate-templates", json!({ "name": "short", "basedOn": "web_server", "maxValidityDays": 30, "defaultValidityDays": 10 }))
        .await;
    assert_eq!(template.status, 201, "{}", template.body);
    let template_id = template.body["data"]["id"].clone();
    let submitted = admin
        .post("/api/certificate-requests", json!({ "caId": root, "commonName": "eyes.example.com", "templateId": template_id }))
        .await;
    assert_eq!(submitted.status, 201, "{}", submitted.body);
    let id = submitted.body["data"]["id"].as_i64().expect("request id");
    let own = own_key.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_eq!(own.status, 403, "approving one's own request through one's own key: {}", own.body);
    assert_eq!(own.error_code(), "FORBIDDEN");

    // The requester widens the template while the request waits; approval issues what was judged.
    let widened = admin
        .put(&format!("/api/certificate-templates/{template_id}"), json!({ "basedOn": "web_server", "maxValidityDays": 398, "defaultValidityDays": 398 }))
        .await;
    assert_eq!(widened.status, 200, "{}", widened.body);
    let member = server.new_member("approver@example.com", &workspace_of(&ca), "member").await;
    let approved = member.post(&format!("/api/certificate-requests/{id}/approve"), json!({})).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let certificate = &approved.body["data"]["certificate"];
    let days = crate::issuance::validity_secs(certificate) / 86_400;
    assert_eq!(days, 10, "the snapshot's 10-day default, not the edited 398: {certificate}");
}

/// Finding 8: an extended key usage DER cannot encode was stored and then panicked the signer.
#[tokio::test]
async fn template_members_are_checked_when_written() {
    let server = Server::start();
    let admin = server.admin().await;
    for (body, field) in [
        (json!({ "name": "bad-eku", "extendedKeyUsages": ["5.1"] }), "extendedKeyUsages"),
        (json!({ "name": "bad-eku2", "extendedKeyUsages": ["1.40.1"] }), "extendedKeyUsages"),
        (json!({ "name": "bad-eku3", "extendedKeyUsages": ["1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.1"] }), "extendedKeyUsages"),
        (json!({ "name": "bad-org", "subjectDefaults": { "organization": "x".repeat(65) } }), "subjectDefaults.organization"),
        (json!({ "name": "bad-desc", "description": "a\u{7}b" }), "description"),
    ] {
        let res = admin.post("/api/certificate-templates", body.clone()).await;
        assert_eq!(res.status, 400, "{body}: {}", res.body);
        assert_eq!(res.body["error"]["details"]["field"], field, "{body}: {}", res.body);
    }
    // The service still issues (nothing panicked).
    let root = internal_root(&admin, "After Templates").await;
    let res = admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "fine.example.com" })).await;
    assert_eq!(res.status, 201, "{}", res.body);
}

/// Finding 11: a certificate issued by a root came back with an empty chain, and a CA's own
/// certificate was readable only at /pki.
#[tokio::test]
async fn the_chain_always_carries_the_issuing_ca() {
    let server = Server::start();
    let admin = server.admin().await;
    let openssl = Openssl::new();
    let root = internal_root(&admin, "Chain Root").await;
    let issued = admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "leaf.example.com" })).await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let chain = issued.body["data"]["chain"].as_array().expect("chain").clone();
    assert_eq!(chain.len(), 1, "the issuing root itself: {}", issued.body);
    let ca = admin.get(&format!("/api/certificate-authorities/{root}")).await;
    assert_eq!(ca.status, 200, "{}", ca.body);
    assert_eq!(ca.body["data"]["certificate"], chain[0], "{}", ca.body);
    assert_eq!(ca.body["data"]["chain"], json!([chain[0]]), "{}", ca.body);
    let public = Client::new(&server, None).get(&format!("/pki/{root}/ca")).await;
    assert_eq!(String::from_utf8_lossy(&public.bytes).trim(), chain[0].as_str().unwrap_or_default().trim());
    openssl.write("root.pem", chain[0].as_str().unwrap_or_default().as_bytes());
    openssl.write("leaf.pem", issued.body["data"]["certificate"].as_str().unwrap_or_default().as_bytes());
    openssl.ok(&["verify", "-CAfile", "root.pem", "leaf.pem"]);
}
