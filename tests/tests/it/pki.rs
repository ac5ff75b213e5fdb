//! The public `/pki/{caId}` endpoints as relying parties and outsiders meet them: revocation
//! reaching OCSP and the CRL whatever became of the CA record, the CRL and OCSP caches, the
//! endpoints' own admission pool, what they reveal, and the separate metrics listener.

use std::io::Write;

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

use crate::cas::{create_ca, internal_root, Openssl};

async fn issue(client: &Client, body: Value) -> Value {
    let res = client.post("/api/certificates/issue", body.clone()).await;
    assert_eq!(res.status, 201, "issuing {body}: {}", res.body);
    res.body["data"].clone()
}

/// What `/pki/{id}/ca` serves, saved as `<file>`.
async fn save_ca(server: &Server, openssl: &Openssl, id: i64, file: &str) {
    let res = Client::new(server, None).get(&format!("/pki/{id}/ca")).await;
    assert_eq!(res.status, 200, "/pki/{id}/ca is public");
    openssl.write(file, &res.bytes);
}

/// The CA's CRL as served (DER), also saved as PEM in `<file>`.
async fn crl(server: &Server, openssl: &Openssl, id: i64, file: &str) -> Vec<u8> {
    let res = Client::new(server, None).get(&format!("/pki/{id}/crl")).await;
    assert_eq!(res.status, 200, "/pki/{id}/crl is public: {}", res.body);
    let der = format!("{file}.der");
    openssl.write(&der, &res.bytes);
    openssl.ok(&["crl", "-inform", "DER", "-in", &der, "-out", file]);
    res.bytes
}

fn crl_number(openssl: &Openssl, file: &str) -> u128 {
    let text = openssl.ok(&["crl", "-in", file, "-noout", "-crlnumber"]);
    let hex = text.trim().trim_start_matches("crlNumber=").trim_start_matches("0x");
    u128::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("CRL number: {text}"))
}

/// `openssl ocsp` against the running responder: (stdout + stderr).
fn ocsp(server: &Server, openssl: &Openssl, ca_id: i64, cert: &str, extra: &[&str]) -> String {
    let url = server.url(&format!("/pki/{ca_id}/ocsp"));
    let mut args = vec!["ocsp", "-issuer", "ca.pem", "-cert", cert, "-url", url.as_str(), "-CAfile", "ca.pem"];
    args.extend_from_slice(extra);
    let output = openssl.run(&args);
    String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr)
}

/// Finding 7: a certificate revoked after its CA record was deleted must reach that CA's OCSP
/// responder and CRL, which keep answering for what it signed.
#[tokio::test]
async fn revoking_after_the_ca_record_is_deleted_reaches_ocsp_and_the_crl() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Deleted Root").await;
    let openssl = Openssl::new();
    save_ca(&server, &openssl, root, "ca.pem").await;
    let doomed = issue(&admin, json!({ "caId": root, "commonName": "doomed.example.com" })).await;
    let spared = issue(&admin, json!({ "caId": root, "commonName": "spared.example.com" })).await;
    openssl.write("doomed.pem", doomed["certificate"].as_str().unwrap());
    openssl.write("spared.pem", spared["certificate"].as_str().unwrap());
    let answer = ocsp(&server, &openssl, root, "doomed.pem", &[]);
    assert!(answer.contains("doomed.pem: good"), "{answer}");

    assert_eq!(admin.delete(&format!("/api/certificate-authorities/{root}")).await.status, 204);
    let revoked =
        admin.post(&format!("/api/certificates/{}/revoke", doomed["id"]), json!({ "reason": "keyCompromise" })).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert_eq!(revoked.body["data"]["status"], "revoked");

    // The deleted CA's public endpoints still answer for what it signed, the revocation included.
    save_ca(&server, &openssl, root, "ca-after.pem").await;
    assert_eq!(openssl.read("ca-after.pem"), openssl.read("ca.pem"));
    for extra in [&[][..], &["-no_nonce"][..]] {
        let answer = ocsp(&server, &openssl, root, "doomed.pem", extra);
        assert!(answer.contains("Response verify OK") && answer.contains("doomed.pem: revoked"), "{answer}");
        assert!(answer.contains("keyCompromise"), "{answer}");
    }
    let answer = ocsp(&server, &openssl, root, "spared.pem", &["-no_nonce"]);
    assert!(answer.contains("spared.pem: good"), "{answer}");
    crl(&server, &openssl, root, "crl.pem").await;
    let (ok, out) = openssl.verify(&["-crl_check", "-CAfile", "ca.pem", "-CRLfile", "crl.pem", "doomed.pem"]);
    assert!(!ok && out.contains("certificate revoked"), "the CRL lacks the revocation: {out}");
    let (ok, out) = openssl.verify(&["-crl_check", "-CAfile", "ca.pem", "-CRLfile", "crl.pem", "spared.pem"]);
    assert!(ok, "{out}");
    let entries = admin.get("/api/certificates/crl").await;
    assert_eq!(entries.body["total"], 1, "{}", entries.body);
    assert_eq!(entries.body["data"][0]["reason"], "keyCompromise");
}

/// The CRL is signed once and served from the cache until a revocation changes it; its number
/// only grows.
#[tokio::test]
async fn the_crl_is_served_from_its_cache_and_resigned_on_revocation() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Cached CRL Root").await;
    let openssl = Openssl::new();
    save_ca(&server, &openssl, root, "ca.pem").await;
    let cert = issue(&admin, json!({ "caId": root, "commonName": "cached.example.com" })).await;
    openssl.write("leaf.pem", cert["certificate"].as_str().unwrap());

    let first = crl(&server, &openssl, root, "first.pem").await;
    let second = crl(&server, &openssl, root, "second.pem").await;
    assert_eq!(first, second, "an unchanged CRL is served as signed, not signed again");
    let before = crl_number(&openssl, "first.pem");

    let revoked = admin.post(&format!("/api/certificates/{}/revoke", cert["id"]), json!({})).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let after = crl(&server, &openssl, root, "after.pem").await;
    assert_ne!(after, first);
    assert!(crl_number(&openssl, "after.pem") > before, "CRL numbers never go back");
    let (ok, out) = openssl.verify(&["-crl_check", "-CAfile", "ca.pem", "-CRLfile", "after.pem", "leaf.pem"]);
    assert!(!ok && out.contains("certificate revoked"), "{out}");
    assert_eq!(crl(&server, &openssl, root, "again.pem").await, after);
}

/// Answers to nonce-less requests are reused until a revocation; a nonce gets a fresh one.
#[tokio::test]
async fn ocsp_answers_without_a_nonce_are_cached_until_a_revocation() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Cached OCSP Root").await;
    let openssl = Openssl::new();
    save_ca(&server, &openssl, root, "ca.pem").await;
    let cert = issue(&admin, json!({ "caId": root, "commonName": "ocsp.example.com" })).await;
    openssl.write("leaf.pem", cert["certificate"].as_str().unwrap());

    let answer = ocsp(&server, &openssl, root, "leaf.pem", &["-no_nonce", "-respout", "a.der"]);
    assert!(answer.contains("Response verify OK") && answer.contains("leaf.pem: good"), "{answer}");
    let answer = ocsp(&server, &openssl, root, "leaf.pem", &["-no_nonce", "-respout", "b.der"]);
    assert!(answer.contains("leaf.pem: good"), "{answer}");
    assert_eq!(std::fs::read(openssl.path("a.der")).unwrap(), std::fs::read(openssl.path("b.der")).unwrap());
    let answer = ocsp(&server, &openssl, root, "leaf.pem", &["-respout", "n1.der"]);
    assert!(answer.contains("Response verify OK") && answer.contains("leaf.pem: good"), "{answer}");
    let answer = ocsp(&server, &openssl, root, "leaf.pem", &["-respout", "n2.der"]);
    assert!(answer.contains("Response verify OK"), "nonce echoed: {answer}");
    assert_ne!(std::fs::read(openssl.path("n1.der")).unwrap(), std::fs::read(openssl.path("n2.der")).unwrap());

    let revoked = admin.post(&format!("/api/certificates/{}/revoke", cert["id"]), json!({})).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let answer = ocsp(&server, &openssl, root, "leaf.pem", &["-no_nonce"]);
    assert!(answer.contains("Response verify OK") && answer.contains("leaf.pem: revoked"), "{answer}");
}

/// A request that holds an admission slot: its headers announce a body that never comes.
fn hold_slot(server: &Server, method: &str, path: &str) -> std::net::TcpStream {
    let address = server.url("").trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{")
        .expect("send");
    stream.flush().expect("flush");
    stream
}

/// Holds a slot with `method hold_path` and asks `probe` until it is refused for lack of slots.
/// A held request that arrived while a probe had the only slot is itself refused (its socket
/// gets the 503): it is then sent again.
async fn hold_until_busy(
    server: &Server,
    client: &Client,
    method: &str,
    hold_path: &str,
    probe: &str,
) -> (std::net::TcpStream, trellis_tests::Response) {
    use std::io::Read;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut held = hold_slot(server, method, hold_path);
    while std::time::Instant::now() < deadline {
        let res = client.get(probe).await;
        if res.status == 503 {
            return (held, res);
        }
        held.set_nonblocking(true).expect("nonblocking");
        let refused = matches!(held.read(&mut [0u8; 64]), Ok(n) if n > 0);
        held.set_nonblocking(false).expect("blocking");
        if refused {
            held = hold_slot(server, method, hold_path);
        }
    }
    panic!("{probe} was never refused for lack of slots");
}

/// `/pki` has its own admission pool: filling it answers 503 there and nowhere else, and a full
/// API pool does not refuse relying parties.
#[tokio::test]
async fn pki_requests_have_an_admission_pool_of_their_own() {
    let server =
        Server::start_with(&[("TRELLIS_MAX_CONCURRENT_REQUESTS", "1"), ("TRELLIS_PKI_MAX_CONCURRENT_REQUESTS", "1")]);
    let admin = server.key_client(&["cas:read", "cas:write", "certificates:read", "certificates:write"]).await;
    let root = internal_root(&admin, "Pool Root").await;
    let public = Client::new(&server, None);

    let (held, busy) =
        hold_until_busy(&server, &public, "POST", &format!("/pki/{root}/ocsp"), &format!("/pki/{root}/crl")).await;
    assert_eq!(busy.error_code(), "SERVICE_UNAVAILABLE", "{}", busy.body);
    assert!(busy.header("retry-after").is_some(), "{:?}", busy.headers);
    let api = admin.get("/api/certificates").await;
    assert_eq!(api.status, 200, "a full /pki pool must not refuse the API: {}", api.body);
    drop(held);

    let (held, busy) = hold_until_busy(&server, &admin, "POST", "/api/auth/login", "/api/certificates").await;
    assert_eq!(busy.error_code(), "SERVICE_UNAVAILABLE", "{}", busy.body);
    let crl = public.get(&format!("/pki/{root}/crl")).await;
    assert_eq!(crl.status, 200, "a full API pool must not refuse relying parties: {}", crl.body);
    drop(held);
}

/// `/pki` answers only for internal CAs, with one 404 for every id it does not serve (an id
/// that is not a number is the caller's error, 400, and says nothing of any CA).
#[tokio::test]
async fn pki_answers_only_for_internal_cas_and_says_nothing_else() {
    let server = Server::start();
    let admin = server.admin().await;
    let other = create_ca(&admin, json!({ "name": "Probe", "type": "google_cas", "url": "https://127.0.0.1:9" })).await;
    let other = other["id"].as_i64().unwrap();
    let public = Client::new(&server, None);
    let unknown = public.get("/pki/987654/ca").await;
    assert_eq!(unknown.status, 404);
    for path in [format!("/pki/{other}/ca"), format!("/pki/{other}/crl"), "/pki/987654/crl".into()] {
        let res = public.get(&path).await;
        assert_eq!((res.status, &res.body), (404, &unknown.body), "{path}");
    }
}

/// With `TRELLIS_METRICS_LISTEN`, `/metrics` is served there and nowhere on the API listener.
#[tokio::test]
async fn metrics_move_to_their_own_listener() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let server = Server::start_with(&[("TRELLIS_METRICS_LISTEN", address.as_str())]);
    assert_eq!(Client::new(&server, None).get("/metrics").await.status, 404);
    assert_eq!(Client::new(&server, None).get("/health").await.status, 200);
    let http = reqwest::Client::new();
    let metrics = http.get(format!("http://{address}/metrics")).send().await.expect("metrics listener");
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.unwrap();
    assert!(text.contains("http_requests_total"), "{text}");
    let other = http.get(format!("http://{address}/api/certificates")).send().await.unwrap();
    assert_eq!(other.status(), 404, "the metrics listener serves nothing else");
}
