//! The ACME HTTP-01 challenge listener (`TRELLIS_ACME_HTTP01_LISTEN`): a connector presents an
//! answer through `challenge-solver` during a call, and the listener serves it to the CA,
//! unauthenticated, as text/plain; nothing else is served there.

use serde_json::json;
use trellis_tests::{workspace_root, Server};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

async fn present_through_the_fixture(server: &Server) -> serde_json::Value {
    let admin = server.admin().await;
    let bytes = std::fs::read(workspace_root().join("target/plugins/fixture-connector-v02.wasm"))
        .expect("fixture-connector-v02 is built (make plugins)");
    let installed = admin.post_raw("/api/plugins", "application/wasm", bytes).await;
    assert_eq!(installed.status, 201, "{}", installed.body);
    let bound = admin
        .put(
            "/api/plugin-bindings",
            json!({ "kind": "ca-connector", "type": "fixture-v02", "pluginId": "trellis.fixture.connector-v02" }),
        )
        .await;
    assert_eq!(bound.status, 200, "{}", bound.body);
    // The fixture's connection test presents token `tok` with key authorization `tok.thumb`.
    let tested = admin.post("/api/plugin-bindings/ca-connector/fixture-v02/test", json!({ "config": {} })).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    tested.body["data"]["details"].clone()
}

#[tokio::test]
async fn presented_answers_are_served_on_the_challenge_listener() {
    let port = free_port();
    let server = Server::start_with(&[("TRELLIS_ACME_HTTP01_LISTEN", &format!("127.0.0.1:{port}"))]);
    let details = present_through_the_fixture(&server).await;
    assert_eq!(details["supported"], 2, "HTTP-01 and DNS-01 (the host's DNS providers): {details}");
    assert!(details["solver"].as_str().unwrap_or_default().starts_with("Ok(Presented"), "{details}");

    let http = reqwest::Client::new();
    let challenge = format!("http://127.0.0.1:{port}/.well-known/acme-challenge/");
    let served = http.get(format!("{challenge}tok")).send().await.expect("listener answers");
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "text/plain");
    assert_eq!(served.text().await.expect("body"), "tok.thumb");

    for path in ["/.well-known/acme-challenge/unknown", "/.well-known/acme-challenge/..%2F..", "/api/health", "/"] {
        let res = http.get(format!("http://127.0.0.1:{port}{path}")).send().await.expect("listener answers");
        assert_eq!(res.status(), 404, "{path}");
    }
}

#[tokio::test]
async fn without_a_listener_connectors_are_told_http01_is_unsupported() {
    let server = Server::start();
    let details = present_through_the_fixture(&server).await;
    assert_eq!(details["supported"], 1, "only DNS-01: {details}");
    let solver = details["solver"].as_str().unwrap_or_default();
    assert!(solver.contains("TRELLIS_ACME_HTTP01_LISTEN"), "the message names the setting: {details}");
}
