//! CA test probes of the types without an issuing connector (`plugins/ca-probe`) through the
//! real binary (and a Vault record of the probe's days, now served by `plugins/vault`: a
//! Vault-like `/v1/sys/health`, sealed → 503 → unhealthy, `error`), an AD CS
//! `/certsrv/` asking for Windows authentication, an unreachable CA, bundled root certificates
//! (refused at create when unusable, a failed check when expired), the periodic health check
//! (`trellis jobs ca-health`, one probe per CA and interval) and the refusal to issue.

use serde_json::{json, Value};
use trellis_tests::certs::Spec;
use trellis_tests::receiver::{Receiver, Reply};
use trellis_tests::{Client, Server};

use crate::cas::create_ca;
use crate::lifecycle::days_from_now;

/// A server whose plugins may reach the receiver (loopback, its self-signed certificate).
fn server_for(receiver: &Receiver) -> Server {
    Server::start_with(&[
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
        ("TRELLIS_PLUGIN_CA_BUNDLE", &receiver.bundle_path()),
    ])
}

async fn test_ca(client: &Client, id: &Value) -> Value {
    let res = client.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["data"].clone()
}

async fn ca(client: &Client, id: &Value) -> Value {
    client.get(&format!("/api/certificate-authorities/{id}")).await.body["data"].clone()
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

async fn health_events(client: &Client) -> Vec<Value> {
    let res = client.get("/api/events?limit=100&type=ca.health_changed").await;
    res.body["data"].as_array().unwrap().iter().map(|e| e["payload"]["data"].clone()).collect()
}

/// A CA certificate (PEM) valid from `from_days` to `to_days` from now; a leaf when not `is_ca`.
fn root_pem(from_days: i64, to_days: i64, is_ca: bool) -> String {
    if is_ca {
        return trellis_tests::certs::ca_pem("Probe Root CA", from_days, to_days);
    }
    Spec { not_before_days: from_days, not_after_days: to_days, ..Spec::tls("leaf.example") }.pem()
}

/// A `hashicorp_vault` record as the probe took it (no credentials, no role) keeps working now
/// that `plugins/vault` serves the type: tested, health-checked, its status and health moved.
#[tokio::test]
async fn a_probe_era_vault_record_is_served_by_the_vault_connector() {
    let receiver = Receiver::start().await;
    let issuer = trellis_tests::certs::ca_pem("Vault Probe Root", -1, 3650);
    let issuer_json = json!({ "data": { "certificate": issuer, "ca_chain": [issuer] } }).to_string();
    receiver.respond_with(move |r| match r.path.as_str() {
        "/v1/sys/health" => {
            Reply::Status(200, r#"{"initialized":true,"sealed":false,"standby":false,"version":"1.17.2"}"#.into())
        }
        "/v1/pki_int/issuer/default/json" => Reply::Status(200, issuer_json.clone()),
        _ => Reply::Status(404, "{}".into()),
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let vault = create_ca(
        &admin,
        json!({ "name": "Vault", "type": "hashicorp_vault", "url": receiver.url(""),
                "config": { "namespace": "team-a", "pkiPath": "pki_int" } }),
    )
    .await;
    let report = test_ca(&admin, &vault["id"]).await;
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(check(&report, "health")["status"], "pass");
    assert_eq!(check(&report, "auth")["status"], "skip", "no credentials: {report}");
    assert_eq!(check(&report, "issuer-validity")["status"], "pass", "{report}");
    assert_eq!(report["details"]["version"], "1.17.2", "{report}");
    assert_eq!(report["details"]["issuer"]["subject"], "CN=Vault Probe Root", "{report}");
    // sys/health belongs to the root namespace; the PKI mount's calls carry the namespace.
    let requests = receiver.requests();
    let issuer = requests.iter().find(|r| r.path.contains("/issuer/")).expect("the issuer was read");
    assert_eq!(issuer.header("x-vault-namespace"), Some("team-a"));
    let after = ca(&admin, &vault["id"]).await;
    assert_eq!((after["status"].clone(), after["healthStatus"].clone()), (json!("active"), json!("healthy")));

    // Sealed: 503, a failed check, status error, health unhealthy, ca.health_changed.
    receiver.respond_with(|_| Reply::Status(503, r#"{"initialized":true,"sealed":true}"#.into()));
    let report = test_ca(&admin, &vault["id"]).await;
    assert_eq!(report["success"], false, "{report}");
    assert!(check(&report, "health")["message"].as_str().unwrap().contains("sealed"), "{report}");
    let after = ca(&admin, &vault["id"]).await;
    assert_eq!((after["status"].clone(), after["healthStatus"].clone()), (json!("error"), json!("unhealthy")));
    let events = health_events(&admin).await;
    assert_eq!(events[0]["previous"], "healthy", "{events:?}");
    assert_eq!(events[0]["current"], "unhealthy", "{events:?}");

    // A standby answers 429: reachable, degraded.
    let issuer = trellis_tests::certs::ca_pem("Vault Probe Root", -1, 3650);
    let issuer_json = json!({ "data": { "certificate": issuer } }).to_string();
    receiver.respond_with(move |r| match r.path.as_str() {
        "/v1/sys/health" => Reply::Status(429, r#"{"standby":true}"#.into()),
        _ => Reply::Status(200, issuer_json.clone()),
    });
    let report = test_ca(&admin, &vault["id"]).await;
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(ca(&admin, &vault["id"]).await["healthStatus"], "degraded");

    // Issuing needs credentials and a role: a 400 naming them, nothing stored.
    let issued =
        admin.post("/api/certificates/issue", json!({ "caId": vault["id"], "commonName": "a.example.com" })).await;
    assert_eq!(issued.status, 400, "{}", issued.body);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0);
}

#[tokio::test]
async fn certsrv_and_https_reachability() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|r| match r.path.as_str() {
        "/certsrv/" => Reply::WithHeaders(401, vec![("WWW-Authenticate".into(), "Negotiate".into())], String::new()),
        _ => Reply::Status(200, "{}".into()),
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let adcs =
        create_ca(&admin, json!({ "name": "AD CS", "type": "microsoft_adcs", "url": receiver.url("/certsrv") })).await;
    let report = test_ca(&admin, &adcs["id"]).await;
    assert_eq!(report["success"], true, "{report}");
    assert!(check(&report, "web-enrolment")["message"].as_str().unwrap().contains("Negotiate"), "{report}");
    assert_eq!(report["details"]["webEnrolmentUrl"], receiver.url("/certsrv/"));

    let acm = create_ca(&admin, json!({ "name": "ACM", "type": "aws_acm", "url": receiver.url("/services/v2") })).await;
    assert_eq!(acm["issuerPatterns"], json!(["Amazon"]), "{acm}");
    let report = test_ca(&admin, &acm["id"]).await;
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(report["details"]["probe"], "https-reachability");

    // Registrable and testable, not issuing: a clear 400.
    let issue =
        admin.post("/api/certificates/issue", json!({ "caId": acm["id"], "commonName": "x.example.com" })).await;
    assert_eq!(issue.status, 400, "{}", issue.body);
    assert_eq!(issue.error_code(), "UNSUPPORTED_CA", "{}", issue.body);
    assert!(issue.body["error"]["message"].as_str().unwrap().contains("registered and tested"), "{}", issue.body);
}

// Multi-threaded: the receiver keeps answering while the test waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_cas_and_the_periodic_check() {
    let receiver = Receiver::start().await;
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gone = create_ca(
        &admin,
        json!({ "name": "Gone", "type": "google_cas", "url": format!("https://127.0.0.1:{closed}") }),
    )
    .await;
    let up = create_ca(&admin, json!({ "name": "Up", "type": "azure_key_vault", "url": receiver.url("/") })).await;
    let paused = create_ca(
        &admin,
        json!({ "name": "Paused", "type": "azure_key_vault", "url": receiver.url("/"), "status": "disconnected" }),
    )
    .await;

    // The job probes every due CA once (disconnected ones are left alone)...
    let run = server.cli(&["jobs", "ca-health"]).expect("jobs ca-health");
    assert_eq!((run["checked"].clone(), run["changed"].clone()), (json!(2), json!(2)), "{run}");
    let after = ca(&admin, &gone["id"]).await;
    assert_eq!((after["status"].clone(), after["healthStatus"].clone()), (json!("error"), json!("unhealthy")));
    assert_eq!(ca(&admin, &up["id"]).await["healthStatus"], "healthy");
    assert_eq!(ca(&admin, &paused["id"]).await["status"], "disconnected");
    let events = health_events(&admin).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events.iter().any(|e| e["caId"] == gone["id"] && e["current"] == "unhealthy"), "{events:?}");
    // ...and not again within the interval (a second replica's run finds nothing due)...
    let run = server.cli(&["jobs", "ca-health"]).expect("jobs ca-health");
    assert_eq!(run["checked"], 0, "{run}");
    // ...but after it; unchanged health emits nothing new.
    let run = server.cli(&["jobs", "ca-health", "--as-of", &days_from_now(1)]).expect("jobs ca-health");
    assert_eq!((run["checked"].clone(), run["changed"].clone()), (json!(2), json!(0)), "{run}");
    assert_eq!(health_events(&admin).await.len(), 2);

    // The manual test of the unreachable CA reports the failed reachability check.
    let report = test_ca(&admin, &gone["id"]).await;
    assert_eq!(report["success"], false);
    assert_eq!(check(&report, "reachable")["status"], "fail", "{report}");
}

#[tokio::test]
async fn root_certificates_are_checked() {
    let receiver = Receiver::start().await;
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let create = |config: Value| {
        let admin = admin.clone();
        let url = receiver.url("/");
        async move {
            admin
                .post(
                    "/api/certificate-authorities",
                    json!({ "name": "Rooted", "type": "aws_acm", "url": url, "config": config }),
                )
                .await
        }
    };
    // Unusable roots are refused at create, naming the member.
    for (root, what) in [(json!("not a certificate"), "garbage"), (json!(root_pem(-1, 365, false)), "a leaf, not a CA")]
    {
        let res = create(json!({ "rootCertificate": root })).await;
        assert_eq!(res.status, 400, "{what}: {}", res.body);
        assert_eq!(res.body["error"]["details"]["config"][0]["field"], "/rootCertificate", "{what}: {}", res.body);
    }
    assert_eq!(admin.get("/api/certificate-authorities").await.body["total"], 0);

    // A valid root passes its three checks.
    let res = create(json!({ "rootCertificate": root_pem(-1, 3650, true) })).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let report = test_ca(&admin, &res.body["data"]["id"]).await;
    assert_eq!(report["success"], true, "{report}");
    for name in ["root-certificate", "root-is-ca", "root-validity"] {
        assert_eq!(check(&report, name)["status"], "pass", "{name}: {report}");
    }
    // An expired one is registrable, but its test fails on the validity check.
    let res = create(json!({ "rootCertificate": root_pem(-400, -2, true) })).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let report = test_ca(&admin, &res.body["data"]["id"]).await;
    assert_eq!(report["success"], false, "{report}");
    assert_eq!(check(&report, "root-validity")["status"], "fail", "{report}");
    assert_eq!(check(&report, "reachable")["status"], "pass", "{report}");
    assert_eq!(ca(&admin, &res.body["data"]["id"]).await["status"], "error");
}
