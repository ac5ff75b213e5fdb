//! The ACME HTTP-01 challenge listener (`TRELLIS_ACME_HTTP01_LISTEN`): a connector presents an
//! answer through `challenge-solver` during a call, and the listener serves it to the CA,
//! unauthenticated, as text/plain; nothing else is served there.

use serde_json::json;
use trellis_tests::Server;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// The fixture presents token `tok` for `example.com`; the admin's workspace claims it first.
async fn present_through_the_fixture(server: &Server) -> serde_json::Value {
    let admin = server.admin().await;
    crate::acme::claim_domain(&admin, "example.com").await;
    install_fixture(server).await;
    test_fixture(&admin).await
}

async fn test_fixture(client: &trellis_tests::Client) -> serde_json::Value {
    let tested = client.post("/api/plugin-bindings/ca-connector/fixture-v02/test", json!({ "config": {} })).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    tested.body["data"]["details"].clone()
}

async fn install_fixture(server: &Server) {
    let admin = server.admin().await;
    let bytes = std::fs::read(trellis_tests::plugin_file("fixture-connector-v02"))
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
    // Only on the Host the token was presented for (a CA validating example.com asks for it).
    let served =
        http.get(format!("{challenge}tok")).header("Host", "example.com").send().await.expect("listener answers");
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "text/plain");
    assert_eq!(served.text().await.expect("body"), "tok.thumb");

    for host in [format!("127.0.0.1:{port}"), "b.example".into(), "www.example.com".into(), "example.com.evil".into()] {
        let res = http.get(format!("{challenge}tok")).header("Host", &host).send().await.expect("listener answers");
        assert_eq!(res.status(), 404, "the token is not served on {host}");
    }

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

#[tokio::test]
async fn a_workspace_gets_no_answer_presented_for_a_domain_it_has_not_claimed() {
    let port = free_port();
    let server = Server::start_with(&[("TRELLIS_ACME_HTTP01_LISTEN", &format!("127.0.0.1:{port}"))]);
    install_fixture(&server).await;
    let http = reqwest::Client::new();
    let served = || async {
        http.get(format!("http://127.0.0.1:{port}/.well-known/acme-challenge/tok"))
            .header("Host", "example.com")
            .send()
            .await
            .expect("listener answers")
            .status()
    };

    // Workspace B claims example.com (by the administrator's assignment); workspace A (the
    // admin's) has no claim: the host refuses A's answer and says how to claim.
    let (b, b_workspace) = server.new_user("b@example.org").await;
    let admin = server.admin().await;
    let assigned =
        admin.post("/api/admin/domain-claims", json!({ "workspaceId": b_workspace, "domain": "example.com" })).await;
    assert_eq!(assigned.status, 201, "{}", assigned.body);
    assert_eq!(assigned.body["data"]["status"], "verified", "{}", assigned.body);
    let refused = test_fixture(&admin).await;
    let solver = refused["solver"].as_str().unwrap_or_default();
    assert!(solver.contains("example.com") && solver.contains("/api/domain-claims"), "{refused}");
    assert_eq!(served().await, 404, "nothing was presented");

    // A cannot claim B's verified domain, nor a name under it or above it.
    for domain in ["example.com", "www.example.com", "EXAMPLE.com."] {
        let taken = admin.post("/api/domain-claims", json!({ "domain": domain })).await;
        assert_eq!(taken.status, 409, "{domain}: {}", taken.body);
    }
    // Claims are the workspace's own: B sees its claim, A sees none.
    assert_eq!(b.get("/api/domain-claims").await.body["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(admin.get("/api/domain-claims").await.body["data"].as_array().map(Vec::len), Some(0));
    // Only an instance administrator assigns.
    let own =
        b.post("/api/admin/domain-claims", json!({ "workspaceId": b_workspace, "domain": "other.example" })).await;
    assert_eq!(own.status, 403, "{}", own.body);

    // A pending claim (TXT record not yet found) entitles to nothing either.
    let pending = admin.post("/api/domain-claims", json!({ "domain": "a-corp.example" })).await;
    assert_eq!(pending.status, 201, "{}", pending.body);
    assert_eq!(pending.body["data"]["status"], "pending");
    assert_eq!(pending.body["data"]["verification"]["recordName"], "_trellis-challenge.a-corp.example");
    let id = pending.body["data"]["id"].as_str().expect("id").to_owned();
    let unverified = admin.post(&format!("/api/domain-claims/{id}/verify"), json!({})).await;
    assert_eq!(
        unverified.status, 409,
        "no resolver here: a conflict with the instance's state, not bad input: {}",
        unverified.body
    );
    assert_eq!(unverified.error_code(), "CONFLICT", "{}", unverified.body);

    // The administrator reassigns example.com to A: now A's answer is presented and served.
    let me =
        admin.get("/api/auth/user").await.body["data"]["currentWorkspaceId"].as_str().unwrap_or_default().to_owned();
    let moved = admin.post("/api/admin/domain-claims", json!({ "workspaceId": me, "domain": "example.com" })).await;
    assert_eq!(moved.status, 201, "{}", moved.body);
    assert_eq!(b.get("/api/domain-claims").await.body["data"].as_array().map(Vec::len), Some(0), "B lost it");
    let presented = test_fixture(&admin).await;
    assert!(presented["solver"].as_str().unwrap_or_default().starts_with("Ok(Presented"), "{presented}");
    assert_eq!(served().await, 200);
}
