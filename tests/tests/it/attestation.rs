//! TPM attestation API (spec §2.3–2.6, §3.4, §4.3) through the real binary: devices, policies
//! exactly as §2.3 defines them (defaults, validation, `Invalid policy` / `Policy not found`),
//! nonces with the four §3.4 refusals and exactly-once consumption under concurrency, trust
//! roots, the record endpoints and attest-and-provision's gate up to the verifier (required
//! members, policy choice, enrollment), with `attestation.failed` events and trust-0 records.

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

const DIGEST: &str = "3d458cfe55cc03ea1f443f1562beec8df51c75e14a9fcf9a7234a13f198e7969";

pub(crate) async fn device(client: &Client, name: &str, device_type: &str) -> i64 {
    let res = client.post("/api/iot/devices", json!({ "name": name, "deviceType": device_type, "serial": name })).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.body["data"]["status"], "registered");
    res.body["data"]["id"].as_i64().unwrap_or_default()
}

pub(crate) async fn nonce(client: &Client, device: i64, purpose: &str, ttl: i64) -> String {
    let res = client
        .post(
            &format!("/api/iot/devices/{device}/attestation/challenge"),
            json!({ "purpose": purpose, "ttlSeconds": ttl }),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["nonce"].as_str().unwrap_or_default().to_owned()
}

pub(crate) fn provision_body(nonce: &str) -> Value {
    json!({
        "caId": 1,
        "templateId": "tls-server",
        "csr": "-----BEGIN CERTIFICATE REQUEST-----\nMA==\n-----END CERTIFICATE REQUEST-----\n",
        "evidence": { "nonce": nonce, "quoteBlob": "AAAA", "quoteSignature": "AAAA", "pcrs": { "SHA256": { "0": DIGEST } } }
    })
}

#[tokio::test]
async fn policies_follow_the_spec_shape_defaults_and_errors() {
    let server = Server::start();
    let admin = server.admin().await;
    let created = admin
        .post(
            "/api/attestation/policies",
            json!({ "name": "edge", "deviceType": "gateway", "expectedPcrs": { "SHA256": { "7": DIGEST } } }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let policy = &created.body;
    assert!(policy.get("data").is_none(), "raw JSON without the envelope: {policy}");
    assert_eq!(policy["requiredPcrBanks"], json!(["SHA256"]));
    assert_eq!(policy["requiredPcrs"], json!([0, 1, 2, 3, 4, 7]));
    assert_eq!(policy["allowedEkManufacturers"], json!([]));
    assert_eq!(policy["maxAttestationAgeSeconds"], 300);
    assert_eq!(
        (policy["requireBoundCsrKey"].as_bool(), policy["requireSecureBoot"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(policy["enabled"], true);
    assert_eq!(policy["expectedPcrs"]["SHA256"]["7"], DIGEST);
    let id = policy["id"].as_i64().unwrap_or_default();
    assert!(id > 0);
    let any = admin.post("/api/attestation/policies", json!({ "name": "any", "expectedPcrs": {} })).await;
    assert_eq!(any.status, 201, "{}", any.body);
    assert!(any.body["deviceType"].is_null());

    // Listing: raw arrays, ?deviceType= filters.
    let all = admin.get("/api/attestation/policies").await;
    assert_eq!(all.body.as_array().map(Vec::len), Some(2), "{}", all.body);
    let gateways = admin.get("/api/attestation/policies?deviceType=gateway").await;
    assert_eq!(gateways.body.as_array().map(Vec::len), Some(1));
    assert_eq!(gateways.body[0]["id"], id);

    // Invalid policies: 400 {"error": "Invalid policy", "details": …}, every problem listed.
    for body in [
        json!({ "expectedPcrs": {} }),
        json!({ "name": "x" }),
        json!({ "name": "x", "expectedPcrs": { "SHA256": { "7": "abcd" } } }),
        json!({ "name": "x", "expectedPcrs": { "SHA1": { "0": DIGEST } } }),
        json!({ "name": "x", "expectedPcrs": { "SHA512": { "99": DIGEST } } }),
        json!({ "name": "x", "expectedPcrs": {}, "requiredPcrBanks": ["MD5"] }),
        json!({ "name": "x", "expectedPcrs": {}, "maxAttestationAgeSeconds": -5 }),
        json!({ "name": "x", "expectedPcrs": {}, "requireSecureBoot": "yes" }),
        json!([1, 2]),
    ] {
        let res = admin.post("/api/attestation/policies", body.clone()).await;
        assert_eq!(res.status, 400, "{body}: {}", res.body);
        assert_eq!(res.body["error"], "Invalid policy", "{}", res.body);
        assert!(res.body["details"]["problems"].as_array().is_some_and(|p| !p.is_empty()), "{}", res.body);
    }
    let bad_json = admin.post_raw("/api/attestation/policies", "application/json", b"{nope".to_vec()).await;
    assert_eq!((bad_json.status, bad_json.body["error"].as_str()), (400, Some("Invalid policy")));

    // PATCH merges then validates; an invalid patch changes nothing.
    let patched =
        admin.patch(&format!("/api/attestation/policies/{id}"), json!({ "enabled": false, "requiredPcrs": [7] })).await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!((patched.body["enabled"].as_bool(), patched.body["requiredPcrs"].clone()), (Some(false), json!([7])));
    assert_eq!(patched.body["name"], "edge");
    let invalid = admin
        .patch(&format!("/api/attestation/policies/{id}"), json!({ "expectedPcrs": { "SHA256": { "7": "00" } } }))
        .await;
    assert_eq!(invalid.body["error"], "Invalid policy");
    assert_eq!(admin.get(&format!("/api/attestation/policies/{id}")).await.body["expectedPcrs"]["SHA256"]["7"], DIGEST);

    // Not found: 404 {"error": "Policy not found"}; another workspace's is absent too.
    for path in ["/api/attestation/policies/999999", "/api/attestation/policies/abc"] {
        let res = admin.get(path).await;
        assert_eq!((res.status, res.body.clone()), (404, json!({ "error": "Policy not found" })), "{path}");
    }
    let (stranger, _) = server.new_user("other@example.com").await;
    assert_eq!(stranger.get(&format!("/api/attestation/policies/{id}")).await.status, 404);
    assert_eq!(stranger.get("/api/attestation/policies").await.body, json!([]));
    assert_eq!(stranger.delete(&format!("/api/attestation/policies/{id}")).await.status, 404);
    assert_eq!(admin.delete(&format!("/api/attestation/policies/{id}")).await.status, 204);
    assert_eq!(admin.delete(&format!("/api/attestation/policies/{id}")).await.body["error"], "Policy not found");
    let reader = server.key_client(&["certificates:read"]).await;
    assert_eq!(reader.get("/api/attestation/policies").await.status, 403);
}

#[tokio::test]
async fn devices_are_workspace_records_with_the_usual_envelopes() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = device(&admin, "sensor-1", "sensor").await;
    let listed = admin.get("/api/iot/devices?limit=10").await;
    assert_eq!(listed.body["data"][0]["id"], id, "{}", listed.body);
    assert_eq!(listed.body["total"], 1);
    let duplicate = admin.post("/api/iot/devices", json!({ "name": "again", "serial": "sensor-1" })).await;
    assert_eq!(duplicate.status, 409, "{}", duplicate.body);
    let missing = admin.post("/api/iot/devices", json!({ "deviceType": "x" })).await;
    assert_eq!(missing.status, 400);
    let patched =
        admin.patch(&format!("/api/iot/devices/{id}"), json!({ "description": "roof", "status": "disabled" })).await;
    assert_eq!(
        (patched.body["data"]["description"].as_str(), patched.body["data"]["status"].as_str()),
        (Some("roof"), Some("disabled"))
    );
    let (stranger, _) = server.new_user("other@example.com").await;
    assert_eq!(stranger.get(&format!("/api/iot/devices/{id}")).await.status, 404);
    assert_eq!(
        stranger.post(&format!("/api/iot/devices/{id}/attestation/challenge"), json!({})).await.body["error"],
        "Device not found"
    );
    assert_eq!(admin.get("/api/iot/devices/zero").await.status, 400);
    assert_eq!(admin.delete(&format!("/api/iot/devices/{id}")).await.status, 204);
    assert_eq!(admin.get(&format!("/api/iot/devices/{id}")).await.status, 404);
}

#[tokio::test]
async fn nonces_are_single_use_bound_to_their_device_and_purpose() {
    let server = Server::start();
    let admin = server.admin().await;
    let first = device(&admin, "d1", "gateway").await;
    let second = device(&admin, "d2", "gateway").await;

    // The challenge: 32 random bytes in hex, an expiry, the purpose; bounds on ttl and purpose.
    let res = admin.post(&format!("/api/iot/devices/{first}/attestation/challenge"), json!({})).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let n = res.body["nonce"].as_str().unwrap_or_default().to_owned();
    assert!(n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()), "{n}");
    assert_eq!(res.body["purpose"], "attestation");
    assert!(res.body["expiresAt"].as_str().is_some_and(|t| t.ends_with('Z')));
    for body in [
        json!({ "ttlSeconds": 0 }),
        json!({ "ttlSeconds": 100000 }),
        json!({ "purpose": "boot" }),
        json!({ "ttlSeconds": "ten" }),
    ] {
        let bad = admin.post(&format!("/api/iot/devices/{first}/attestation/challenge"), body.clone()).await;
        assert_eq!((bad.status, bad.body["error"].as_str()), (400, Some("invalid_request")), "{body}: {}", bad.body);
    }

    let path = |d: i64| format!("/api/iot/devices/{d}/attest-and-provision");
    // Unknown, foreign device, wrong purpose.
    let unknown = admin.post(&path(first), provision_body(&"ab".repeat(32))).await;
    assert_eq!((unknown.status, unknown.body["error"].as_str()), (400, Some("nonce_not_found")), "{}", unknown.body);
    let foreign = admin.post(&path(second), provision_body(&n)).await;
    assert_eq!(
        (foreign.status, foreign.body["error"].as_str()),
        (400, Some("nonce_device_mismatch")),
        "{}",
        foreign.body
    );
    let enrollment_nonce = nonce(&admin, first, "ak_enrollment", 300).await;
    let purpose = admin.post(&path(first), provision_body(&enrollment_nonce)).await;
    assert_eq!(purpose.body["error"], "nonce_purpose_mismatch", "{}", purpose.body);

    // Concurrent submissions of one nonce: exactly one consumes it (the device is not enrolled,
    // so that one is refused by the gate, 403), the others get nonce_already_used.
    let mut racing = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (admin, p, body) = (admin.clone(), path(first), provision_body(&n));
        racing.spawn(async move { admin.post(&p, body).await });
    }
    let mut codes = Vec::new();
    while let Some(done) = racing.join_next().await {
        let res = done.expect("join");
        codes.push((res.status, res.body["error"].as_str().unwrap_or_default().to_owned()));
    }
    let winners: Vec<_> = codes.iter().filter(|(s, _)| *s == 403).collect();
    assert_eq!(winners.len(), 1, "{codes:?}");
    assert_eq!(winners[0].1, "attestation_failed");
    assert_eq!(codes.iter().filter(|(s, c)| *s == 400 && c == "nonce_already_used").count(), 7, "{codes:?}");

    // Expired: the nonce's expiry moved into the past in the database (no waiting).
    let short = nonce(&admin, first, "attestation", 60).await;
    server.sql(&format!("UPDATE attestation_nonces SET expires_at = expires_at - 120000 WHERE nonce = '{short}'"));
    let expired = admin.post(&path(first), provision_body(&short)).await;
    assert_eq!((expired.status, expired.body["error"].as_str()), (400, Some("nonce_expired")), "{}", expired.body);
    // Another workspace cannot use (or see) it.
    let (stranger, _) = server.new_user("stranger@example.com").await;
    let theirs = device(&stranger, "theirs", "gateway").await;
    let mine = nonce(&admin, first, "attestation", 300).await;
    let cross = stranger.post(&path(theirs), provision_body(&mine)).await;
    assert_eq!(cross.body["error"], "nonce_not_found", "{}", cross.body);
}

#[tokio::test]
async fn attest_and_provision_gates_before_the_verifier_and_records_failures() {
    let server = Server::start();
    let admin = server.admin().await;
    let dev = device(&admin, "gw-1", "gateway").await;
    let path = format!("/api/iot/devices/{dev}/attest-and-provision");

    // Required members, each named, before the nonce is touched.
    let n = nonce(&admin, dev, "attestation", 300).await;
    let full = provision_body(&n);
    for (member, pointer) in [
        ("caId", "/caId"),
        ("templateId", "/templateId"),
        ("csr", "/csr"),
        ("evidence", "/evidence"),
        ("evidence.nonce", "/evidence/nonce"),
        ("evidence.quoteBlob", "/evidence/quoteBlob"),
    ] {
        let mut body = full.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
        if let Some(Value::Object(map)) = if parent.is_empty() { Some(&mut body) } else { body.pointer_mut(parent) } {
            map.remove(key);
        }
        let res = admin.post(&path, body).await;
        assert_eq!((res.status, res.body["error"].as_str()), (400, Some("missing_field")), "{member}: {}", res.body);
        assert_eq!(res.body["details"]["field"], member);
    }

    // No policy applies → 403 with a failure saying so; recorded with trust 0, event emitted.
    let res = admin.post(&path, full.clone()).await;
    assert_eq!(res.status, 403, "{}", res.body);
    assert_eq!(res.body["error"], "attestation_failed");
    let failures = res.body["failures"].as_array().cloned().unwrap_or_default();
    assert!(failures[0].as_str().is_some_and(|f| f.starts_with("no_policy:")), "{failures:?}");
    let history = admin.get(&format!("/api/iot/devices/{dev}/attestations")).await;
    assert_eq!(history.body[0]["passed"], false, "{}", history.body);
    assert_eq!(history.body[0]["trustScore"], 0);
    assert_eq!(history.body[0]["kind"], "provision");
    let events = admin.get("/api/events?type=attestation.failed").await;
    assert_eq!(events.body["data"][0]["payload"]["data"]["deviceId"], dev, "{}", events.body);

    // A policy applies, but the device has no enrolled AK.
    let policy = admin
        .post("/api/attestation/policies", json!({ "name": "gw", "deviceType": "gateway", "expectedPcrs": {} }))
        .await;
    let policy_id = policy.body["id"].as_i64().unwrap_or_default();
    let res = admin.post(&path, provision_body(&nonce(&admin, dev, "attestation", 300).await)).await;
    assert_eq!(res.status, 403, "{}", res.body);
    assert!(res.body["failures"][0].as_str().is_some_and(|f| f.starts_with("device_not_enrolled:")), "{}", res.body);
    let history = admin.get(&format!("/api/iot/devices/{dev}/attestations")).await;
    assert_eq!(history.body[0]["policyId"], policy_id, "{}", history.body);

    // An explicit policyId wins: unknown → 404 Policy not found; disabled → policy_disabled.
    let mut body = provision_body(&nonce(&admin, dev, "attestation", 300).await);
    body["policyId"] = json!(987654);
    let res = admin.post(&path, body).await;
    assert_eq!((res.status, res.body["error"].as_str()), (404, Some("Policy not found")), "{}", res.body);
    admin.patch(&format!("/api/attestation/policies/{policy_id}"), json!({ "enabled": false })).await;
    let mut body = provision_body(&nonce(&admin, dev, "attestation", 300).await);
    body["policyId"] = json!(policy_id);
    let res = admin.post(&path, body).await;
    assert!(res.body["failures"][0].as_str().is_some_and(|f| f.starts_with("policy_disabled:")), "{}", res.body);

    // The record endpoints: attest records without gating; attest-tpm runs the nonce rules.
    let recorded = admin
        .post(
            &format!("/api/iot/devices/{dev}/attest"),
            json!({ "passed": true, "trustScore": 80, "claims": { "by": "inspection" } }),
        )
        .await;
    assert_eq!(recorded.status, 201, "{}", recorded.body);
    assert_eq!((recorded.body["kind"].as_str(), recorded.body["trustScore"].as_i64()), (Some("recorded"), Some(80)));
    let failed =
        admin.post(&format!("/api/iot/devices/{dev}/attest"), json!({ "passed": false, "trustScore": 90 })).await;
    assert_eq!(failed.body["trustScore"], 0, "a failed attestation carries no trust");
    assert_eq!(admin.post(&format!("/api/iot/devices/{dev}/attest"), json!({})).await.body["error"], "missing_field");
    let tpm = admin
        .post(
            &format!("/api/iot/devices/{dev}/attest-tpm"),
            json!({ "evidence": provision_body(&nonce(&admin, dev, "attestation", 300).await)["evidence"] }),
        )
        .await;
    assert_eq!(tpm.status, 201, "{}", tpm.body);
    assert_eq!(tpm.body["passed"], false);
    let reused = admin.post(&format!("/api/iot/devices/{dev}/attest-tpm"), json!({ "evidence": { "nonce": tpm.body["nonce"], "quoteBlob": "AA==", "quoteSignature": "AA==", "pcrs": {} } })).await;
    assert_eq!(reused.body["error"], "nonce_already_used", "{}", reused.body);
    let history = admin.get(&format!("/api/iot/devices/{dev}/attestations?limit=2")).await;
    assert_eq!(history.body.as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn trust_roots_take_ca_certificates_only() {
    let server = Server::start();
    let admin = server.admin().await;
    let ca = rcgen::CertificateParams::new(Vec::<String>::new()).map(|mut p| {
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, "TPM Vendor Root");
        p
    });
    let key = rcgen::KeyPair::generate().expect("key");
    let root = ca.expect("params").self_signed(&key).expect("root");
    let res = admin
        .post("/api/attestation/trust-roots", json!({ "certificate": root.pem(), "manufacturer": "id:49424d00" }))
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.body["manufacturer"], "id:49424D00");
    assert!(res.body["subject"].as_str().is_some_and(|s| s.contains("TPM Vendor Root")));
    let again = admin.post("/api/attestation/trust-roots", json!({ "certificate": root.pem() })).await;
    assert_eq!((again.status, again.body["error"].as_str()), (409, Some("duplicate_trust_root")));
    let leaf = rcgen::generate_simple_self_signed(vec!["leaf.example.com".into()]).expect("leaf");
    let not_ca = admin.post("/api/attestation/trust-roots", json!({ "certificate": leaf.cert.pem() })).await;
    assert_eq!((not_ca.status, not_ca.body["error"].as_str()), (400, Some("invalid_request")), "{}", not_ca.body);
    let bad_vendor =
        admin.post("/api/attestation/trust-roots", json!({ "certificate": root.pem(), "manufacturer": "IBM" })).await;
    assert_eq!(bad_vendor.status, 400);
    let listed = admin.get("/api/attestation/trust-roots").await;
    assert_eq!(listed.body.as_array().map(Vec::len), Some(1));
    let id = listed.body[0]["id"].as_i64().unwrap_or_default();
    assert_eq!(admin.delete(&format!("/api/attestation/trust-roots/{id}")).await.status, 204);
    let gone = admin.delete(&format!("/api/attestation/trust-roots/{id}")).await;
    assert_eq!((gone.status, gone.body["error"].as_str()), (404, Some("Trust root not found")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_consume_a_nonce_exactly_once() {
    if !trellis_tests::on_postgres() {
        return; // Several processes on one database is the PostgreSQL deployment.
    }
    let master_key = "6b".repeat(32);
    let first = Server::start_with(&[("TRELLIS_MASTER_KEY", master_key.as_str())]);
    let database_url = first.database_url();
    let second = Server::start_with(&[
        ("TRELLIS_MASTER_KEY", master_key.as_str()),
        ("TRELLIS_DATABASE_URL", database_url.as_str()),
    ]);
    let admin = first.admin().await;
    let replicas = [admin.clone(), second.admin().await];
    let dev = device(&admin, "replicated", "gateway").await;
    let path = format!("/api/iot/devices/{dev}/attest-and-provision");

    // Ten nonces, each submitted eight times at once, alternately through the two replicas.
    for _ in 0..10 {
        let n = nonce(&admin, dev, "attestation", 300).await;
        let mut racing = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (client, p, body) = (replicas[i % 2].clone(), path.clone(), provision_body(&n));
            racing.spawn(async move { client.post(&p, body).await });
        }
        let mut codes = Vec::new();
        while let Some(done) = racing.join_next().await {
            let res = done.expect("join");
            codes.push((res.status, res.body["error"].as_str().unwrap_or_default().to_owned()));
        }
        // The one that consumed it reaches the gate (no enrolled AK: 403); the rest are refused.
        assert_eq!(codes.iter().filter(|(s, _)| *s == 403).count(), 1, "{codes:?}");
        assert_eq!(codes.iter().filter(|(s, c)| *s == 400 && c == "nonce_already_used").count(), 7, "{codes:?}");
    }
}
