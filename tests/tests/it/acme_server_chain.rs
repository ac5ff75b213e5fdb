//! Trellis's ACME server (docs/acme-server.md) in front of CAs that do not issue at once
//! (issue 23, items 4 and 5), with the test's raw ACME client (`acme_server::raw`): certbot polls
//! a `processing` order for 90 s at most, these orders wait on a person or on a poller.
//!
//! - An ACME client → Trellis → Pebble chain: the directory is enabled on an `acme` connector CA
//!   fronting a real Pebble, whose call budget is cut so the connector answers pending; the
//!   order stays `processing` (with `Retry-After`) until `trellis jobs poll-issuance` (the
//!   pending-issuance poller, run as another replica would) completes it. The chain verifies
//!   against Pebble's root.
//! - Approval: a workspace policy that requires approval parks the finalized order until an
//!   administrator approves (the order becomes `valid`) or rejects it (`invalid`, with the
//!   reason in the order's `error`).
//! - An upstream CA that refuses (the `fixture-ca-pending` wasm connector whose poll fails): the
//!   order becomes `invalid` with the CA's error.
//!
//! Challenges are dns-01, answered through pebble-challtestsrv's TXT records (`Acme::dns`), so
//! no client-side HTTP server is needed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use trellis_tests::pebble::{free_port, Pebble, PebbleOptions};

use crate::acme::claim_domain;
use crate::acme_server::{answer_dns01, certbot_venv, check_chain, inventory_entry, raw, text, Acme};
use crate::cas::{create_ca, install_plugin, Openssl};

const DEADLINE: Duration = Duration::from_secs(60);

/// RFC 3339, `secs` from now (`jobs poll-issuance --as-of`: the poller's clock, moved past each
/// request's next poll time instead of waiting for it).
fn from_now(secs: i64) -> String {
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(secs);
    at.format(&time::format_description::well_known::Rfc3339).expect("format")
}

/// A registered raw client of `ca`'s directory.
async fn client(acme: &Acme, ca: i64, name: &str) -> raw::Client {
    let (_, kid, hmac) = acme.eab(ca, name).await;
    let mut client = raw::Client::new(&acme.directory(ca)).await;
    let registered = client.register(&kid, &hmac).await;
    assert_eq!(registered.status, 201, "{}", registered.text);
    client
}

/// A new order for `names`, made `ready` by dns-01 (Trellis validates the TXT records the
/// client sets in challtestsrv); returns the order's URL and its finalize URL.
async fn ready_order(acme: &Acme, client: &raw::Client, names: &[&str]) -> (String, String) {
    let identifiers: Vec<Value> = names.iter().map(|n| json!({ "type": "dns", "value": n })).collect();
    let order = client.post(&client.url("newOrder"), Some(&json!({ "identifiers": identifiers }))).await;
    assert_eq!(order.status, 201, "{}", order.text);
    let order_url = order.location.clone().expect("order URL");
    answer_dns01(acme, client, &order.body).await;
    let ready = poll_order(acme, client, &order_url, "ready", || {}).await;
    let finalize = ready.body["finalize"].as_str().expect("finalize URL").to_owned();
    (order_url, finalize)
}

/// POST-as-GET on the order until its status is `want` (a deadline, never a fixed sleep);
/// `between` runs after each look that is not yet it (e.g. a poller run). Panics on any other
/// final status.
async fn poll_order(
    acme: &Acme,
    client: &raw::Client,
    order_url: &str,
    want: &str,
    mut between: impl FnMut(),
) -> raw::Answer {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let now = client.post(order_url, None).await;
        assert_eq!(now.status, 200, "{}\n{}", now.text, acme.server.log());
        if now.body["status"] == want {
            return now;
        }
        let status = now.body["status"].as_str().unwrap_or_default();
        assert!(status != "invalid" && status != "valid", "the order is {status}, not {want}: {}", now.text);
        assert!(Instant::now() < deadline, "the order never became {want}: {}", now.text);
        between();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A CSR (DER) for `names` with a new P-256 key.
fn csr_for(names: &[&str]) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
    // rcgen's default subject is a common name of its own, which is no identifier.
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.serialize_request(&key).expect("CSR").der().to_vec()
}

/// Finalizes with a CSR for `names` and asserts the order is left `processing` with a
/// `Retry-After` (the CA or an approver has not decided yet).
async fn finalize_processing(acme: &Acme, client: &raw::Client, finalize_url: &str, names: &[&str]) -> raw::Answer {
    let finalized = client.post(finalize_url, Some(&json!({ "csr": raw::b64(&csr_for(names)) }))).await;
    assert_eq!(finalized.status, 200, "{}\n{}", finalized.text, acme.server.log());
    assert_eq!(finalized.body["status"], "processing", "{}", finalized.text);
    assert!(
        finalized.retry_after.as_deref().is_some_and(|s| s.parse::<u64>().is_ok()),
        "Retry-After: {}",
        finalized.text
    );
    assert!(finalized.body.get("certificate").is_none(), "{}", finalized.text);
    finalized
}

/// Downloads the order's certificate (`application/pem-certificate-chain`) into `dir`:
/// the leaf alone and the full chain, as files for openssl and Python.
async fn download(client: &raw::Client, order: &raw::Answer, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let url = order.body["certificate"].as_str().unwrap_or_else(|| panic!("a certificate URL: {}", order.text));
    let chain = client.post(url, None).await;
    assert_eq!(chain.status, 200, "{}", chain.text);
    assert_eq!(chain.content_type, "application/pem-certificate-chain");
    let end = "-----END CERTIFICATE-----";
    let leaf_end = chain.text.find(end).expect("a leaf") + end.len();
    let (leaf, fullchain) = (dir.join("cert.pem"), dir.join("fullchain.pem"));
    std::fs::write(&leaf, format!("{}\n", &chain.text[..leaf_end])).expect("write leaf");
    std::fs::write(&fullchain, &chain.text).expect("write chain");
    (leaf, fullchain)
}

/// The ACME problem an order carries in `error`.
fn order_error(order: &raw::Answer) -> (String, String) {
    let error = &order.body["error"];
    let kind = error["type"].as_str().unwrap_or_else(|| panic!("the order has an error: {}", order.text));
    (kind.to_owned(), error["detail"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn an_acme_client_gets_a_pebble_chain_through_trellis_while_the_connector_answers_pending() {
    let http_port = free_port();
    let pebble = Pebble::start(PebbleOptions { http_port, ..PebbleOptions::default() });
    let listen = format!("127.0.0.1:{http_port}");
    let bundle = pebble.tls_bundle_path();
    let acme = Acme::start(&[
        // The connector answers Pebble's HTTP-01 challenges on this listener.
        ("TRELLIS_ACME_HTTP01_LISTEN", listen.as_str()),
        ("TRELLIS_PLUGIN_CA_BUNDLE", bundle.as_str()),
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
        // A 3 s call leaves the connector no budget past its reserve: each call does one step of
        // Pebble's order and answers pending, so finalize goes through the pending branch.
        ("TRELLIS_PLUGIN_CA_CONNECTOR_WALL_MS", "3000"),
        // The server's own poller stays out of the way: the test runs it (`jobs poll-issuance`).
        ("TRELLIS_ISSUANCE_POLL_INTERVAL_SECS", "3600"),
    ])
    .await;
    claim_domain(&acme.admin, "example.com").await;
    let created = acme
        .admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "Pebble", "type": "acme", "url": pebble.directory_url, "config": { "termsOfServiceAgreed": true } }),
        )
        .await;
    assert_eq!(created.status, 201, "{}\n{}", created.body, acme.server.log());
    let ca = created.body["data"]["id"].as_i64().expect("CA id");
    let enabled = acme.admin.put(&format!("/api/certificate-authorities/{ca}/acme"), json!({ "enabled": true })).await;
    assert_eq!(enabled.status, 200, "{}", enabled.body);

    let client = client(&acme, ca, "chain").await;
    let names = ["chain.example.com", "www.chain.example.com"];
    let (order_url, finalize_url) = ready_order(&acme, &client, &names).await;
    finalize_processing(&acme, &client, &finalize_url, &names).await;
    let still = client.post(&order_url, None).await;
    assert_eq!(still.body["status"], "processing", "{}", still.text);
    assert!(still.retry_after.is_some(), "a processing order tells the client when to look again");

    // The request Trellis opened is `issuing`, waiting on Pebble.
    let issuing = acme.admin.get("/api/certificate-requests?status=issuing").await;
    assert_eq!(issuing.body["total"], 1, "{}", issuing.body);

    let mut round = 0;
    let server = &acme.server;
    let valid = poll_order(&acme, &client, &order_url, "valid", || {
        // Each run is an hour further on, past the request's next poll time (Pebble gives no
        // Retry-After on every step, so the poller backs off from 30 s).
        round += 1;
        server.cli(&["jobs", "poll-issuance", "--as-of", &from_now(round * 3600)]).expect("jobs poll-issuance");
    })
    .await;
    assert!(round > 0, "the order completed through the poller");

    let dir = tempfile::tempdir().expect("dir");
    let (leaf, fullchain) = download(&client, &valid, dir.path()).await;
    let openssl = Openssl::new();
    let root = openssl.write("root.pem", pebble.root_pem());
    let (leaf, fullchain) = (leaf.display().to_string(), fullchain.display().to_string());
    let (ok, said) = openssl.verify(&["-CAfile", &root, "-untrusted", &fullchain, &leaf]);
    assert!(ok, "the chain verifies against Pebble's root: {said}");
    let (alone, _) = openssl.verify(&["-CAfile", &root, &leaf]);
    assert!(!alone, "the leaf needs the chain's intermediate");
    let script = "import sys\nfrom cryptography import x509\ncerts = x509.load_pem_x509_certificates(open(sys.argv[1], 'rb').read())\n\
                  san = certs[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value\n\
                  assert certs[0].issuer == certs[1].subject\n\
                  print(','.join(sorted(san.get_values_for_type(x509.DNSName))))";
    let parsed = Command::new(certbot_venv().join("python")).args(["-c", script, &fullchain]).output().expect("python");
    assert!(parsed.status.success(), "cryptography: {}", text(&parsed));
    assert_eq!(String::from_utf8_lossy(&parsed.stdout).trim(), "chain.example.com,www.chain.example.com");

    let entry = inventory_entry(&acme.admin, "chain.example.com").await;
    assert_eq!(entry["caId"], ca, "{entry}");
    assert!(entry["metadata"]["acme"]["accountId"].as_str().is_some_and(|a| a.starts_with("acct_")), "{entry}");
    assert_eq!(entry["metadata"]["acme"]["orderId"].as_str().map(|o| order_url.ends_with(o)), Some(true), "{entry}");

    // Pebble gone: the connector's failure at finalize makes the order invalid, and the client
    // reads the CA's own words (in the answer and in the order's `error`).
    let mut pebble = pebble;
    pebble.stop();
    let names = ["down.example.com"];
    let (order_url, finalize_url) = ready_order(&acme, &client, &names).await;
    let finalized = client.post(&finalize_url, Some(&json!({ "csr": raw::b64(&csr_for(&names)) }))).await;
    assert_eq!(finalized.status, 500, "{}", finalized.text);
    assert_eq!(finalized.content_type, "application/problem+json", "{}", finalized.text);
    assert_eq!(finalized.body["type"], "urn:ietf:params:acme:error:serverInternal", "{}", finalized.text);
    let said = finalized.body["detail"].as_str().unwrap_or_default().to_owned();
    assert!(said.starts_with("the CA did not issue the certificate: "), "the CA's own words: {}", finalized.text);
    let after = client.post(&order_url, None).await;
    assert_eq!(after.body["status"], "invalid", "{}", after.text);
    assert_eq!(after.body["error"]["type"], "urn:ietf:params:acme:error:serverInternal", "{}", after.text);
    assert_eq!(after.body["error"]["detail"], said.as_str(), "the order keeps the error the client was told");
}

#[tokio::test]
async fn an_order_waits_for_approval_in_trellis_and_a_rejection_makes_it_invalid() {
    let acme = Acme::start(&[]).await;
    let ca = acme.ca("ACME Approval Root").await;
    let gate = acme
        .admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "gate", "type": "domain-policy", "config": { "requireApprovalFor": ["*.prod.example.test"] } }),
        )
        .await;
    assert_eq!(gate.status, 201, "{}", gate.body);
    let client = client(&acme, ca, "approval").await;

    // Approved: the order becomes valid and the chain downloads.
    let names = ["api.prod.example.test"];
    let (order_url, finalize_url) = ready_order(&acme, &client, &names).await;
    finalize_processing(&acme, &client, &finalize_url, &names).await;
    let waiting = client.post(&order_url, None).await;
    assert_eq!(waiting.body["status"], "processing", "{}\n{}", waiting.text, acme.server.log());
    assert!(waiting.retry_after.is_some(), "{}", waiting.text);
    assert_eq!(acme.admin.get("/api/certificates").await.body["total"], 0, "nothing issued before the approval");
    let pending = acme.admin.get("/api/certificate-requests?status=pending").await;
    assert_eq!(pending.body["total"], 1, "{}", pending.body);
    let request = pending.body["data"][0].clone();
    assert!(
        request["request"]["metadata"]["acme"]["orderId"].as_str().is_some_and(|o| order_url.ends_with(o)),
        "{request}"
    );
    assert!(request["requestedBy"].as_str().is_some_and(|r| r.starts_with("acme_account:")), "{request}");
    let approved = acme.admin.post(&format!("/api/certificate-requests/{}/approve", request["id"]), json!({})).await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let valid = poll_order(&acme, &client, &order_url, "valid", || {}).await;
    let dir = tempfile::tempdir().expect("dir");
    let (leaf, fullchain) = download(&client, &valid, dir.path()).await;
    check_chain(&acme, ca, &leaf, &fullchain, &names).await;
    let entry = inventory_entry(&acme.admin, names[0]).await;
    assert!(entry["metadata"]["acme"]["orderId"].as_str().is_some_and(|o| order_url.ends_with(o)), "{entry}");

    // Rejected: the order becomes invalid, with the approver's reason in its error.
    let names = ["web.prod.example.test"];
    let (order_url, finalize_url) = ready_order(&acme, &client, &names).await;
    finalize_processing(&acme, &client, &finalize_url, &names).await;
    let pending = acme.admin.get("/api/certificate-requests?status=pending").await;
    let id = pending.body["data"][0]["id"].clone();
    let rejected = acme
        .admin
        .post(&format!("/api/certificate-requests/{id}/reject"), json!({ "reason": "not a production service" }))
        .await;
    assert_eq!(rejected.status, 200, "{}", rejected.body);
    let invalid = poll_order(&acme, &client, &order_url, "invalid", || {}).await;
    let (kind, detail) = order_error(&invalid);
    assert_eq!(kind, "urn:ietf:params:acme:error:unauthorized", "{}", invalid.text);
    assert!(detail.contains("rejected") && detail.contains("not a production service"), "{}", invalid.text);
    assert!(invalid.body.get("certificate").is_none(), "{}", invalid.text);
}

#[tokio::test]
async fn an_upstream_ca_that_refuses_makes_the_order_invalid_with_its_error() {
    // The server's own poller, every second (the fixture asks for a 1 s Retry-After): no
    // `jobs poll-issuance` here, the background task completes the orders.
    let acme = Acme::start(&[("TRELLIS_ISSUANCE_POLL_INTERVAL_SECS", "1")]).await;
    install_plugin(&acme.admin, "fixture-ca-pending").await;
    let enable = |ca: i64| {
        let admin = &acme.admin;
        async move {
            let enabled =
                admin.put(&format!("/api/certificate-authorities/{ca}/acme"), json!({ "enabled": true })).await;
            assert_eq!(enabled.status, 200, "{}", enabled.body);
        }
    };
    let slow = create_ca(&acme.admin, json!({ "name": "Slow", "type": "fixture-pending", "config": {} })).await;
    let slow = slow["id"].as_i64().expect("id");
    let refusing = create_ca(
        &acme.admin,
        json!({ "name": "Refusing", "type": "fixture-pending", "config": { "failPoll": "rejected" } }),
    )
    .await;
    let refusing = refusing["id"].as_i64().expect("id");
    enable(slow).await;
    enable(refusing).await;

    // A CA that answers pending then issues: processing, then valid after a poller run.
    let client_slow = client(&acme, slow, "slow").await;
    let (order_url, finalize_url) = ready_order(&acme, &client_slow, &["slow.example.test"]).await;
    finalize_processing(&acme, &client_slow, &finalize_url, &["slow.example.test"]).await;
    let valid = poll_order(&acme, &client_slow, &order_url, "valid", || {}).await;
    let dir = tempfile::tempdir().expect("dir");
    let (_, fullchain) = download(&client_slow, &valid, dir.path()).await;
    assert!(std::fs::read_to_string(fullchain).expect("chain").contains("BEGIN CERTIFICATE"));
    let entry = inventory_entry(&acme.admin, "slow.example.test").await;
    assert!(entry["metadata"]["acme"]["orderId"].as_str().is_some_and(|o| order_url.ends_with(o)), "{entry}");

    // A CA that refuses the order when polled: invalid, the CA's refusal in the order's error.
    let client_refused = client(&acme, refusing, "refusing").await;
    let (order_url, finalize_url) = ready_order(&acme, &client_refused, &["refused.example.test"]).await;
    finalize_processing(&acme, &client_refused, &finalize_url, &["refused.example.test"]).await;
    let invalid = poll_order(&acme, &client_refused, &order_url, "invalid", || {}).await;
    let (kind, detail) = order_error(&invalid);
    assert_eq!(kind, "urn:ietf:params:acme:error:serverInternal", "{}", invalid.text);
    assert!(detail.contains("refused the order"), "the CA's own words: {}", invalid.text);
    // Finalizing again is refused: the order is over.
    let again = client_refused
        .post(&finalize_url, Some(&json!({ "csr": raw::b64(&csr_for(&["refused.example.test"])) })))
        .await;
    assert_eq!(again.status, 403, "{}", again.text);
    assert_eq!(again.body["type"], "urn:ietf:params:acme:error:orderNotReady", "{}", again.text);
}
