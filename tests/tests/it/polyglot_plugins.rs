//! Plugins written with the Python and JavaScript SDKs (issue 27), built into components by
//! scripts/build-polyglot-plugins.sh and installed into the real binary over the API:
//! - the Python notifier (`plugins-py/webhook-notifier`, type `json-webhook-py`) delivers a real
//!   lifecycle event to the local HTTPS receiver over the host's `wasi:http`, bearer token and
//!   idempotency key included, and its `/test` passes;
//! - the JavaScript connector (`plugins-js/rest-ca`, CA type `rest-ca-js`) issues through a small
//!   REST CA the test runs (the receiver answering as the CA, signing the CSR with rcgen), reached
//!   over the host's HTTP import at the CA record's own URL; a CA refusal is a 4xx.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trellis_tests::certs::Spec;
use trellis_tests::receiver::{Received, Receiver, Reply};
use trellis_tests::{Client, Server};

use crate::cas::{create_ca, install_plugin};
use crate::issuance::validity_secs;

const WAIT: Duration = Duration::from_secs(30);
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

/// The first delivery of `event_type` to `integration` that is no longer pending (polls the log
/// with a deadline).
async fn settled_delivery(client: &Client, integration: &str, event_type: &str) -> Value {
    let query = format!("/api/integrations/webhooks/deliveries?integrationId={integration}&eventType={event_type}");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let res = client.get(&query).await;
        assert_eq!(res.status, 200, "{}", res.body);
        if let Some(delivery) = res.body["data"].as_array().and_then(|d| d.first()).filter(|d| d["status"] != "pending")
        {
            return delivery.clone();
        }
        assert!(std::time::Instant::now() < deadline, "the {event_type} delivery never settled: {}", res.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_python_notifier_delivers_events_to_the_receiver() {
    let receiver = Receiver::start().await;
    receiver.respond_with(|_| {
        Reply::WithHeaders(202, vec![("content-type".into(), "application/json".into())], r#"{"id":"msg-1"}"#.into())
    });
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let installed = install_plugin(&admin, "py-webhook-notifier").await;
    assert_eq!(installed["info"]["kind"], "integration", "{installed}");

    let token = "tok_S3CRET_python_5e1";
    let bad = admin
        .post(
            "/api/integrations/external",
            json!({ "name": "x", "type": "json-webhook-py", "configuration": { "url": "http://plain.example.com" } }),
        )
        .await;
    assert_eq!(bad.status, 400, "the Python plugin validates its configuration: {}", bad.body);
    let created = admin
        .post(
            "/api/integrations/external",
            json!({
                "name": "Python hook",
                "type": "json-webhook-py",
                "configuration": { "url": receiver.url("/hooks/trellis"), "token": token },
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["data"]["configuration"]["token"], MASK, "the declared secret is masked");
    let id = created.body["data"]["id"].as_str().expect("integration id").to_owned();

    let (pem, _) = Spec::tls("py-notify.example.com").build();
    let certificate = admin.register(&pem).await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got.len(), 1, "one request for one event: {got:?}");
    let request: &Received = &got[0];
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/hooks/trellis"));
    assert_eq!(request.header("authorization"), Some(format!("Bearer {token}").as_str()));
    assert!(request.header("content-type").is_some_and(|v| v.starts_with("application/json")), "{request:?}");
    let body = request.json();
    assert_eq!(body["eventType"], "certificate.created", "{body}");
    assert_eq!(body["data"]["commonName"], "py-notify.example.com", "{body}");
    assert_eq!(body["data"]["certificateId"], certificate["id"], "{body}");
    assert_eq!(request.header("idempotency-key"), body["eventId"].as_str(), "the event id deduplicates");

    let delivery = settled_delivery(&admin, &id, "certificate.created").await;
    assert_eq!(delivery["status"], "success", "{delivery}");
    assert_eq!(delivery["httpStatus"], 202, "{delivery}");
    assert_eq!(delivery["reference"], "msg-1", "{delivery}");

    let test = admin.post(&format!("/api/integrations/external/{id}/test"), json!({})).await;
    assert_eq!(test.status, 200, "{}", test.body);
    assert_eq!(test.body["data"]["success"], true, "{}", test.body);
    let checks: Vec<&str> =
        test.body["data"]["checks"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(checks, ["config", "delivery"], "{}", test.body);

    let log = server.flushed_log().await;
    assert!(!log.contains(token), "the token (a secret) is in the log");
}

/// A REST CA on the receiver: `POST /v1/sign` signs the CSR (rcgen) with the names and validity
/// asked, unless a name is `forbidden.example.com` (422); `GET /v1/chain` lists its certificate.
fn serve_rest_ca(receiver: &Receiver, api_key: &'static str) -> String {
    use rcgen::{BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(DnType::CommonName, "REST Test CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = params.self_signed(&ca_key).expect("CA certificate");
    let ca_pem = ca_cert.pem();
    let ca = Arc::new((ca_cert, ca_key));
    let chain_pem = ca_pem.clone();
    receiver.respond_with(move |request| {
        if request.header("authorization") != Some(format!("Bearer {api_key}").as_str()) {
            return Reply::Status(401, r#"{"error":"unauthorized"}"#.into());
        }
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/v1/chain") => Reply::Status(200, json!({ "chain": [chain_pem] }).to_string()),
            ("POST", "/v1/sign") => {
                let body = request.json();
                let names: Vec<String> = body["dnsNames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect();
                if names.iter().any(|n| n == "forbidden.example.com") {
                    return Reply::Status(422, r#"{"error":"forbidden.example.com is not allowed by this CA"}"#.into());
                }
                let Ok(mut csr) = CertificateSigningRequestParams::from_pem(body["csr"].as_str().unwrap_or_default())
                else {
                    return Reply::Status(400, r#"{"error":"bad CSR"}"#.into());
                };
                csr.params.subject_alt_names =
                    names.iter().filter_map(|n| n.clone().try_into().ok().map(SanType::DnsName)).collect();
                let now = time::OffsetDateTime::now_utc();
                csr.params.not_before = now - time::Duration::minutes(1);
                csr.params.not_after = now - time::Duration::minutes(1)
                    + time::Duration::days(body["validityDays"].as_i64().unwrap_or(30));
                let (ca_cert, ca_key) = &*ca;
                match csr.signed_by(ca_cert, ca_key) {
                    Ok(leaf) => Reply::Status(
                        201,
                        json!({ "certificate": leaf.pem(), "chain": [ca_cert.pem()], "id": "cert-1" }).to_string(),
                    ),
                    Err(err) => Reply::Status(500, json!({ "error": err.to_string() }).to_string()),
                }
            }
            _ => Reply::Status(404, "{}".into()),
        }
    });
    ca_pem
}

#[tokio::test]
async fn the_javascript_connector_issues_through_a_rest_ca() {
    let receiver = Receiver::start().await;
    let api_key = "key_S3CRET_js_ca_0b7";
    serve_rest_ca(&receiver, api_key);
    let server = server_for(&receiver);
    let admin = server.admin().await;
    let installed = install_plugin(&admin, "js-rest-ca").await;
    assert_eq!(installed["info"]["kind"], "ca-connector", "{installed}");

    let ca = create_ca(
        &admin,
        json!({ "name": "REST CA", "type": "rest-ca-js", "url": receiver.url("/v1"), "config": { "apiKey": api_key } }),
    )
    .await;
    assert_eq!(ca["config"]["apiKey"], MASK, "{ca}");
    let ca_id = ca["id"].as_i64().expect("CA id");

    let res = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": ca_id, "commonName": "js-ca.example.com", "validityDays": 20 }),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let issued = &res.body["data"];
    assert_eq!(validity_secs(issued), 20 * 86_400, "{issued}");
    assert!(issued["issuer"].as_str().is_some_and(|i| i.contains("REST Test CA")), "{issued}");
    let signs: Vec<Received> = receiver.requests().into_iter().filter(|r| r.path == "/v1/sign").collect();
    assert_eq!(signs.len(), 1, "one signing request: {signs:?}");
    assert_eq!(signs[0].json()["dnsNames"], json!(["js-ca.example.com"]), "{:?}", signs[0].json());
    assert!(signs[0].json()["csr"].as_str().is_some_and(|c| c.contains("CERTIFICATE REQUEST")));

    // The CA refuses a name: the requester gets a 4xx with the CA's reason, never a 5xx.
    let refused =
        admin.post("/api/certificates/issue", json!({ "caId": ca_id, "commonName": "forbidden.example.com" })).await;
    assert!((400..500).contains(&refused.status), "{}", refused.body);
    assert!(refused.body.to_string().contains("not allowed by this CA"), "{}", refused.body);

    let log = server.flushed_log().await;
    assert!(!log.contains(api_key), "the API key (a secret) is in the log");
}
