use serde_json::json;
use trellis_tests::certs::Spec;
use trellis_tests::Server;

#[tokio::test]
async fn bad_input_gets_a_clear_400() {
    let server = Server::start();
    let admin = server.admin().await;
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("application/json", b"{not json".to_vec()),
        ("application/json", b"[]".to_vec()),
        ("application/json", br#"{"certificate": 42}"#.to_vec()),
        (
            "application/json",
            br#"{"certificate": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}"#.to_vec(),
        ),
        ("application/json", br#"{"certificate": "hello"}"#.to_vec()),
        ("application/json", br#"{}"#.to_vec()),
        ("application/json", br#"{"certificate": "x", "autoRenewal": "yes"}"#.to_vec()),
        ("text/plain", b"hello".to_vec()),
        ("application/json", vec![0xff, 0xfe, 0x00]),
    ];
    for (content_type, body) in bodies {
        let res = admin.post_raw("/api/certificates", content_type, body.clone()).await;
        assert_eq!(res.status, 400, "{} -> {}", String::from_utf8_lossy(&body), res.body);
        assert_eq!(res.error_code(), "VALIDATION_ERROR");
    }
    let res = admin.post("/api/certificates", json!({ "certificate": "hello" })).await;
    assert!(res.body["error"]["message"].as_str().unwrap().contains("certificate"), "says which field: {}", res.body);
    assert_eq!(res.body["error"]["details"]["field"], "certificate");

    for path in [
        "/api/certificates/abc",
        "/api/certificates/0",
        "/api/certificates/-1",
        "/api/certificates/1.5",
        "/api/certificates/99999999999999999999999",
    ] {
        let res = admin.get(path).await;
        assert_eq!(res.status, 400, "{path}");
        assert_eq!(res.error_code(), "VALIDATION_ERROR");
    }
    assert_eq!(admin.get("/api/certificates/424242").await.status, 404);
    let res = admin.put("/api/certificates/1", json!({ "autoRenewal": "maybe" })).await;
    assert_eq!(res.status, 400);
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let server = Server::start_with(&[("TRELLIS_BODY_LIMIT_BYTES", "4096")]);
    let admin = server.admin().await;
    let big = json!({ "certificate": "A".repeat(10_000) });
    let res = admin.post("/api/certificates", big).await;
    assert_eq!(res.status, 413, "{}", res.body);
    assert_eq!(res.error_code(), "PAYLOAD_TOO_LARGE");
    // The limit does not stop ordinary registrations.
    admin.register(&Spec::tls("small.example.com").pem()).await;
}

#[tokio::test]
async fn unknown_routes_and_methods_use_the_error_shape() {
    let server = Server::start();
    let admin = server.admin().await;
    let res = admin.get("/api/nothing-here").await;
    assert_eq!(res.status, 404);
    assert_eq!(res.error_code(), "NOT_FOUND");
    let res = admin.delete("/api/certificates").await;
    assert_eq!(res.status, 405);
    assert_eq!(res.error_code(), "METHOD_NOT_ALLOWED");
}

#[tokio::test]
async fn oversized_raw_uploads_are_413_in_the_error_shape() {
    let server = Server::start();
    let admin = server.admin().await;
    let res = admin.post_raw("/api/plugins", "application/wasm", vec![0u8; 33 << 20]).await;
    assert_eq!(res.status, 413);
    assert_eq!(res.error_code(), "PAYLOAD_TOO_LARGE");
}

/// Windows deeper than any list serves are a 400 naming the parameter, on every list; they
/// used to overflow the page arithmetic (a panic in debug builds, a negative page in release).
#[tokio::test]
async fn out_of_range_pagination_is_a_400() {
    let server = Server::start();
    let admin = server.admin().await;
    for list in
        ["/api/certificates", "/api/audit-logs", "/api/machine-identities", "/api/certificate-usage", "/api/events"]
    {
        let deep = admin.get(&format!("{list}?offset=9223372036854775807&limit=1")).await;
        assert_eq!(deep.status, 400, "{list}: {}", deep.body);
        assert_eq!(deep.error_code(), "VALIDATION_ERROR");
        assert_eq!(deep.body["error"]["details"]["field"], "offset", "{list}: {}", deep.body);
        let far = admin.get(&format!("{list}?page=92233720368547758&limit=100")).await;
        assert_eq!(far.status, 400, "{list}: {}", far.body);
        assert_eq!(far.body["error"]["details"]["field"], "page", "{list}: {}", far.body);
        let last = admin.get(&format!("{list}?offset=1000000000&limit=100")).await;
        assert_eq!(last.status, 200, "{list}: {}", last.body);
    }
}

/// A certificate made to be huge (a 5,000-character common name; 100 of them at 700 KB used to
/// make one list page over 100 MB) is refused, naming the problem.
#[tokio::test]
async fn oversized_certificate_fields_are_refused() {
    let server = Server::start();
    let admin = server.admin().await;
    let mut spec = Spec::tls("big.example.com");
    spec.common_name = "a".repeat(5000);
    let res = admin.post("/api/certificates", json!({ "certificate": spec.pem() })).await;
    assert_eq!(res.status, 400, "{}", res.body);
    assert_eq!(res.error_code(), "VALIDATION_ERROR");
    assert!(res.body["error"]["message"].as_str().unwrap_or_default().contains("common name"), "{}", res.body);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0);
}

/// A client that trickles its body holds the server only until the request timeout, then
/// gets 408 in the error shape.
#[tokio::test]
async fn a_slow_body_is_cut_off_at_the_request_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start_with(&[("TRELLIS_REQUEST_TIMEOUT_SECS", "1")]);
    let key = server.key_client(&["certificates:write"]).await;
    let address = server.base_url.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /api/certificates HTTP/1.1\r\nHost: {address}\r\nX-API-Key: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"cert",
        key.api_key().unwrap_or_default()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // The rest of the body never comes; the server answers on its own.
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("answered within the timeout")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
}

/// Found by schemathesis: a NUL in the search term was a 500 from the search index.
#[tokio::test]
async fn control_characters_in_a_search_are_a_400() {
    let server = Server::start();
    let admin = server.admin().await;
    for term in ["h%00x", "a%01", "%7F"] {
        let res = admin.get(&format!("/api/certificates?search={term}&status=active")).await;
        assert_eq!(res.status, 400, "{term}: {}", res.body);
        assert_eq!(res.body["error"]["details"]["field"], "search");
    }
}
