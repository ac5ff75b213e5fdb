//! The `acme` connector against a real Pebble (Debian's `pebble` and `pebble-challtestsrv`):
//! HTTP-01 validated on Trellis's own challenge listener, DNS-01 through the host's
//! challtestsrv DNS provider, revocation, account reuse, External Account Binding, an
//! unreachable directory (the CA is created all the same and registers later), terms of service
//! not agreed, and injected badNonce errors. Each test runs its own Pebble on free
//! ports, so they run in parallel.

use serde_json::{json, Value};
use trellis_tests::pebble::{free_port, Pebble, PebbleOptions};
use trellis_tests::{Client, Response, Server};

use crate::cas::Openssl;

/// Pebble's example EAB key (`/usr/share/doc/pebble/examples`).
pub(crate) const EAB_KID: &str = "kid-1";
pub(crate) const EAB_KEY: &str = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";

pub(crate) struct Setup {
    pub(crate) pebble: Pebble,
    pub(crate) server: Server,
    pub(crate) admin: Client,
}

pub(crate) async fn setup(options: PebbleOptions) -> Setup {
    setup_with(options, &[]).await
}

pub(crate) async fn setup_with(options: PebbleOptions, extra_env: &[(&str, &str)]) -> Setup {
    let http_port = free_port();
    let pebble = Pebble::start(PebbleOptions { http_port, ..options });
    let listen = format!("127.0.0.1:{http_port}");
    let bundle = pebble.tls_bundle_path();
    let mut env = vec![
        ("TRELLIS_ACME_HTTP01_LISTEN", listen.as_str()),
        ("TRELLIS_PLUGIN_CA_BUNDLE", bundle.as_str()),
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
        ("RUST_LOG", "info,sqlx=warn,trellis::plugin=debug"),
    ];
    env.extend_from_slice(extra_env);
    let server = Server::start_with(&env);
    let admin = server.admin().await;
    // Every name these tests order is under example.com: the workspace must hold it before
    // the host presents any challenge answer for it.
    claim_domain(&admin, "example.com").await;
    Setup { pebble, server, admin }
}

/// Assigns `domain` to the admin's current workspace (an instance administrator's claim).
pub(crate) async fn claim_domain(admin: &Client, domain: &str) {
    let user = admin.get("/api/auth/user").await;
    let workspace = user.body["data"]["currentWorkspaceId"].as_str().expect("workspace").to_owned();
    let assigned = admin.post("/api/admin/domain-claims", json!({ "workspaceId": workspace, "domain": domain })).await;
    assert_eq!(assigned.status, 201, "{}", assigned.body);
}

async fn create_ca(s: &Setup, name: &str, config: Value) -> Response {
    s.admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": name, "type": "acme", "url": s.pebble.directory_url, "config": config }),
        )
        .await
}

async fn acme_ca(s: &Setup, config: Value) -> i64 {
    let created = create_ca(s, "Pebble", config).await;
    assert_eq!(created.status, 201, "{}\n{}", created.body, s.server.log());
    created.body["data"]["id"].as_i64().expect("CA id")
}

pub(crate) async fn issue(s: &Setup, ca: i64, names: &[&str]) -> Response {
    s.admin
        .post("/api/certificates/issue", json!({ "caId": ca, "commonName": names[0], "subjectAltNames": names }))
        .await
}

pub(crate) async fn issued(s: &Setup, ca: i64, names: &[&str]) -> Value {
    let res = issue(s, ca, names).await;
    assert!(
        res.status == 200 || res.status == 201,
        "{}: {}\npebble: {}\ntrellis: {}",
        res.status,
        res.body,
        s.pebble.log(),
        s.server.log()
    );
    res.body["data"].clone()
}

async fn account_url(s: &Setup, ca: i64) -> Value {
    let tested = s.admin.post(&format!("/api/certificate-authorities/{ca}/test"), json!({})).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    tested.body["data"]["details"]["accountUrl"].clone()
}

/// Verifies `cert` (with its returned chain) against Pebble's root.
pub(crate) fn verify_against_pebble_root(s: &Setup, cert: &Value) {
    let openssl = Openssl::new();
    openssl.write("root.pem", s.pebble.root_pem());
    openssl.write("leaf.pem", cert["certificate"].as_str().expect("PEM"));
    let chain: String = cert["chain"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(!chain.is_empty(), "the intermediate comes with the certificate: {cert}");
    openssl.write("chain.pem", chain);
    let (ok, out) = openssl.verify(&["-CAfile", "root.pem", "-untrusted", "chain.pem", "leaf.pem"]);
    assert!(ok, "verify against Pebble's root: {out}");
    let (ok, _) = openssl.verify(&["-CAfile", "root.pem", "leaf.pem"]);
    assert!(!ok, "the leaf needs the returned intermediate");
}

#[tokio::test]
async fn http01_issuance_through_the_challenge_listener_verifies_revokes_and_reuses_the_account() {
    let s = setup(PebbleOptions::default()).await;
    let ca = acme_ca(&s, json!({ "email": "ops@example.com", "termsOfServiceAgreed": true })).await;

    let tested = s.admin.post(&format!("/api/certificate-authorities/{ca}/test"), json!({})).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    let report = &tested.body["data"];
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(report["details"]["directoryUrl"], s.pebble.directory_url);
    let endpoints: Vec<&str> =
        report["details"]["endpoints"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(endpoints.iter().any(|e| e.ends_with("/order-plz")), "the directory's URLs: {endpoints:?}");
    let account = account_url(&s, ca).await;
    assert!(account.as_str().is_some_and(|u| u.contains("/my-account/")), "registered at setup: {account}");

    let first = issued(&s, ca, &["app.example.com", "www.app.example.com"]).await;
    assert_eq!(first["issuanceSource"], "external", "{first}");
    assert_eq!(first["status"], "active");
    let sans = first["subjectAlternativeNames"].to_string();
    assert!(sans.contains("app.example.com") && sans.contains("www.app.example.com"), "{sans}");
    verify_against_pebble_root(&s, &first);

    let second = issued(&s, ca, &["api.example.com"]).await;
    verify_against_pebble_root(&s, &second);
    assert_eq!(account_url(&s, ca).await, account, "one account, registered once, reused");

    let id = first["id"].as_i64().expect("id");
    let revoked = s.admin.post(&format!("/api/certificates/{id}/revoke"), json!({ "reason": "superseded" })).await;
    assert_eq!(revoked.status, 200, "{}\n{}", revoked.body, s.server.log());
    let serial = first["serialNumber"].as_str().expect("serial").to_ascii_lowercase();
    let status =
        s.pebble.get(&format!("{}/cert-status-by-serial/{}", s.pebble.management_url, serial.trim_start_matches('0')));
    assert!(status.to_ascii_lowercase().contains("revoked"), "Pebble's view: {status}");
}

#[tokio::test]
async fn dns01_goes_through_challtestsrv() {
    let s = setup(PebbleOptions::default()).await;
    // The provider's API is reached under the plugin's egress rules: the operator grants it.
    let ctl = s.pebble.challtestsrv_url.trim_start_matches("http://").to_owned();
    let granted = s.admin.put("/api/plugins/trellis.acme/grants", json!({ "hosts": [ctl] })).await;
    assert_eq!(granted.status, 200, "{}", granted.body);
    let provider = json!({ "type": "challtestsrv", "url": s.pebble.challtestsrv_url });
    let ca =
        acme_ca(&s, json!({ "termsOfServiceAgreed": true, "challengeType": "dns-01", "dnsProvider": provider })).await;
    let cert = issued(&s, ca, &["dns.example.com", "*.dns.example.com"]).await;
    assert!(cert["subjectAlternativeNames"].to_string().contains("*.dns.example.com"), "{cert}");
    verify_against_pebble_root(&s, &cert);

    // An unknown provider type is refused clearly, before anything is sent.
    let bad = create_ca(
        &s,
        "Bad provider",
        json!({ "termsOfServiceAgreed": true, "challengeType": "dns-01", "dnsProvider": { "type": "route66" } }),
    )
    .await;
    assert_eq!(bad.status, 201, "the provider is used at issuance, not at setup: {}", bad.body);
    let refused = issue(&s, bad.body["data"]["id"].as_i64().expect("id"), &["nope.example.com"]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.to_string().contains("route66"), "{}", refused.body);
}

#[tokio::test]
async fn external_account_binding_bad_keys_are_a_clear_400_and_good_ones_work() {
    let s = setup(PebbleOptions { eab_keys: vec![(EAB_KID.into(), EAB_KEY.into())], ..PebbleOptions::default() }).await;
    let without = create_ca(&s, "No EAB", json!({ "termsOfServiceAgreed": true })).await;
    assert_eq!(without.status, 400, "{}", without.body);
    assert!(without.body.to_string().contains("eabKid"), "{}", without.body);

    let wrong_key = "c2VjcmV0LXRoYXQtaXMtbm90LXRoZS1vbmUtcGViYmxlLWtub3dz";
    let bad =
        create_ca(&s, "Bad EAB", json!({ "termsOfServiceAgreed": true, "eabKid": EAB_KID, "eabHmacKey": wrong_key }))
            .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.error_code(), "VALIDATION_ERROR", "{}", bad.body);
    let text = bad.body.to_string();
    assert!(text.contains("eabKid") && text.contains("External Account Binding"), "{text}");
    assert!(!text.contains(wrong_key), "the secret is not echoed: {text}");
    let listed = s.admin.get("/api/certificate-authorities").await;
    assert!(!listed.body.to_string().contains("Bad EAB"), "a refused setup creates no CA");

    let ca = acme_ca(&s, json!({ "termsOfServiceAgreed": true, "eabKid": EAB_KID, "eabHmacKey": EAB_KEY })).await;
    let got = s.admin.get(&format!("/api/certificate-authorities/{ca}")).await;
    assert!(!got.body.to_string().contains(EAB_KEY), "the MAC key is masked: {}", got.body);
    let cert = issued(&s, ca, &["eab.example.com"]).await;
    verify_against_pebble_root(&s, &cert);
}

/// Issue 21: an unreachable directory is a 503 at issuance, but it does not refuse the record:
/// create saves it `active` (spec §3.2), `test` moves it to `error`, and once the directory is
/// back the account is registered by the next test or the first issuance.
#[tokio::test]
async fn an_unreachable_directory_is_503_at_issuance_and_a_ca_created_meanwhile_registers_later() {
    let mut s = setup(PebbleOptions::default()).await;
    let ca = acme_ca(&s, json!({ "termsOfServiceAgreed": true })).await;
    s.pebble.stop();

    let res = issue(&s, ca, &["down.example.com"]).await;
    assert_eq!(res.status, 503, "{}", res.body);
    assert_eq!(res.error_code(), "SERVICE_UNAVAILABLE", "{}", res.body);

    // Created while the directory is down: saved, active, audited; no account yet.
    let created = create_ca(&s, "Down", json!({ "termsOfServiceAgreed": true })).await;
    assert_eq!(created.status, 201, "setup cannot reach the directory, the record is saved: {}", created.body);
    let tested_later = created.body["data"]["id"].as_i64().expect("CA id");
    assert_eq!(created.body["data"]["status"], "active", "{}", created.body);
    let created = create_ca(&s, "Down too", json!({ "termsOfServiceAgreed": true })).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let issued_later = created.body["data"]["id"].as_i64().expect("CA id");
    let audit = s.admin.get("/api/audit-logs?action=ca.created").await;
    assert_eq!(audit.body["total"], 3, "{}", audit.body);

    // The connection test reports the failure in its report (§4.1) and moves the CA to error.
    for id in [ca, tested_later] {
        let tested = s.admin.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
        assert_eq!(tested.status, 200, "{}", tested.body);
        assert_eq!(tested.body["data"]["success"], false, "{}", tested.body);
        assert_eq!(tested.body["data"]["details"]["directoryUrl"], s.pebble.directory_url);
        assert_eq!(tested.body["data"]["details"]["accountUrl"], Value::Null, "{}", tested.body);
        let got = s.admin.get(&format!("/api/certificate-authorities/{id}")).await;
        assert_eq!(got.body["data"]["status"], "error", "{}", got.body);
    }

    // The directory is back (a new Pebble on the same ports, which knows no account).
    s.pebble.restart();
    let tested = s.admin.post(&format!("/api/certificate-authorities/{tested_later}/test"), json!({})).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    assert_eq!(tested.body["data"]["success"], true, "{}\n{}", tested.body, s.server.log());
    let account = tested.body["data"]["details"]["accountUrl"].clone();
    assert!(account.as_str().is_some_and(|u| u.contains("/my-account/")), "registered by the test: {account}");
    let got = s.admin.get(&format!("/api/certificate-authorities/{tested_later}")).await;
    assert_eq!(got.body["data"]["status"], "active", "{}", got.body);
    assert_eq!(account_url(&s, tested_later).await, account, "registered once");

    // The other one registers at its first issuance.
    let cert = issued(&s, issued_later, &["later.example.com"]).await;
    verify_against_pebble_root(&s, &cert);
    let account = account_url(&s, issued_later).await;
    assert!(account.as_str().is_some_and(|u| u.contains("/my-account/")), "registered at issuance: {account}");
}

/// Issue 21: Pebble's `agreementRequired` names the member to fix and what to do.
#[tokio::test]
async fn terms_not_agreed_are_a_400_naming_terms_of_service_agreed() {
    let s = setup(PebbleOptions::default()).await;
    for config in [json!({}), json!({ "termsOfServiceAgreed": false })] {
        let refused = create_ca(&s, "No terms", config.clone()).await;
        assert_eq!(refused.status, 400, "{config}: {}", refused.body);
        assert_eq!(refused.error_code(), "VALIDATION_ERROR", "{}", refused.body);
        let issues = refused.body["error"]["details"]["config"].as_array().cloned().unwrap_or_default();
        assert_eq!(issues.len(), 1, "{}", refused.body);
        assert_eq!(issues[0]["field"], "/termsOfServiceAgreed", "{}", refused.body);
        let message = issues[0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("set termsOfServiceAgreed to true"), "what to do: {message}");
    }
    let listed = s.admin.get("/api/certificate-authorities").await;
    assert_eq!(listed.body["total"], 0, "a CA the directory refused is not created: {}", listed.body);
}

#[tokio::test]
async fn injected_bad_nonces_are_retried() {
    // 30 %: the plugin retries a POST 8 times, so nine refusals in a row (0.3^9 per POST, about
    // 20 POSTs here) fail the test about once in 2,500 runs, and no refusal at all (0.7^20) about
    // once in 1,250. At 40 % the first happened about once in 190 runs (a CI run met it).
    let s = setup(PebbleOptions { nonce_reject_percent: Some(30), ..PebbleOptions::default() }).await;
    let ca = acme_ca(&s, json!({ "termsOfServiceAgreed": true })).await;
    for name in ["n1.example.com", "n2.example.com"] {
        let cert = issued(&s, ca, &[name]).await;
        verify_against_pebble_root(&s, &cert);
    }
    assert!(s.server.flushed_log().await.contains("badNonce"), "Pebble refused some nonces and the plugin retried");
}

#[tokio::test]
async fn an_order_outlasting_the_call_budget_completes_in_the_background() {
    // A 3 s wall time leaves the plugin no budget past its reserve: every call does one step
    // of the order and answers pending, so the request completes through poll-issue.
    let s = setup_with(
        PebbleOptions::default(),
        &[("TRELLIS_PLUGIN_CA_CONNECTOR_WALL_MS", "3000"), ("TRELLIS_ISSUANCE_POLL_INTERVAL_SECS", "3600")],
    )
    .await;
    let ca = acme_ca(&s, json!({ "termsOfServiceAgreed": true })).await;
    let res = issue(&s, ca, &["later.example.com"]).await;
    assert_eq!(res.status, 202, "{}\n{}", res.body, s.server.log());
    let opened = res.body["data"].clone();
    assert_eq!(opened["status"], "issuing", "{opened}");
    assert!(opened["statusMessage"].as_str().is_some_and(|m| !m.is_empty()), "{opened}");

    let id = opened["id"].clone();
    let mut status = opened;
    for round in 1..=20 {
        let at = time::OffsetDateTime::now_utc() + time::Duration::hours(round);
        let at = at.format(&time::format_description::well_known::Rfc3339).expect("format");
        s.server.cli(&["jobs", "poll-issuance", "--as-of", &at]).expect("jobs poll-issuance");
        status = s.admin.get(&format!("/api/certificate-requests/{id}")).await.body["data"].clone();
        if status["status"] != "issuing" {
            break;
        }
    }
    assert_eq!(status["status"], "issued", "{status}\n{}", s.server.log());
    let certificate_id = status["certificateId"].as_i64().expect("certificateId");
    let cert = s.admin.get(&format!("/api/certificates/{certificate_id}")).await.body["data"].clone();
    assert_eq!(cert["commonName"], "later.example.com", "{cert}");
    let openssl = Openssl::new();
    openssl.write("root.pem", s.pebble.root_pem());
    openssl.write("chain.pem", s.pebble.get(&format!("{}/intermediates/0", s.pebble.management_url)));
    openssl.write("leaf.pem", cert["certificate"].as_str().expect("PEM"));
    let (ok, out) = openssl.verify(&["-CAfile", "root.pem", "-untrusted", "chain.pem", "leaf.pem"]);
    assert!(ok, "verify against Pebble's root: {out}");
}
