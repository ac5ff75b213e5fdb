use serde_json::{json, Value};
use trellis_tests::certs::Spec;
use trellis_tests::{Client, Server};

async fn audit(client: &Client, query: &str) -> Vec<Value> {
    let res = client.get(&format!("/api/audit-logs?limit=100&{query}")).await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["data"].as_array().unwrap().clone()
}

async fn events(client: &Client, event_type: &str) -> Vec<Value> {
    let res = client.get(&format!("/api/events?limit=100&type={event_type}")).await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["data"].as_array().unwrap().clone()
}

#[tokio::test]
async fn every_mutation_writes_an_audit_row_and_an_event() {
    let server = Server::start();
    let admin = server.admin().await;
    let me = admin.get("/api/auth/user").await.body["data"]["id"].as_str().unwrap().to_string();
    let res = admin.post("/api/certificates", json!({ "certificate": Spec::tls("aud.example.com").pem() })).await;
    let request_id = res.header("x-request-id").unwrap().to_string();
    let id = res.body["data"]["id"].as_i64().unwrap();
    let target = id.to_string();
    admin.put(&format!("/api/certificates/{id}"), json!({ "location": "dc-2" })).await;
    admin.put(&format!("/api/certificates/{id}/auto-renew"), json!({ "enabled": true })).await;
    admin.post(&format!("/api/certificates/{id}/revoke"), json!({ "reason": "superseded" })).await;
    admin.delete(&format!("/api/certificates/{id}")).await;

    let rows = audit(&admin, &format!("targetType=certificate&targetId={target}")).await;
    let actions: Vec<&str> = rows.iter().rev().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "certificate.created",
            "certificate.updated",
            "certificate.auto_renewal_changed",
            "certificate.revoked",
            "certificate.deleted"
        ]
    );
    let created = rows.last().unwrap();
    assert_eq!(created["actorType"], "user");
    assert_eq!(created["actorId"], me);
    assert_eq!(created["requestId"], request_id.as_str());
    assert!(created["createdAt"].is_string());
    assert_eq!(rows.iter().find(|r| r["action"] == "certificate.revoked").unwrap()["details"]["reason"], "superseded");
    assert_eq!(audit(&admin, &format!("requestId={request_id}")).await.len(), 1);

    for (event_type, count) in
        [("certificate.created", 1), ("certificate.updated", 2), ("certificate.revoked", 1), ("certificate.deleted", 1)]
    {
        let found = events(&admin, event_type).await;
        assert_eq!(found.len(), count, "{event_type}");
        assert_eq!(found[0]["payload"]["data"]["certificateId"], id);
        assert_eq!(found[0]["payload"]["type"], event_type);
    }
}

#[tokio::test]
async fn failed_mutations_write_nothing() {
    let server = Server::start();
    let admin = server.admin().await;
    let pem = Spec::tls("once.example.com").pem();
    let id = admin.register(&pem).await["id"].as_i64().unwrap();
    admin.post(&format!("/api/certificates/{id}/revoke"), json!({})).await;
    let before_audit = audit(&admin, "").await.len();
    let before_events = admin.get("/api/events").await.body["total"].as_i64().unwrap();

    assert_eq!(admin.post("/api/certificates", json!({ "certificate": pem })).await.status, 409);
    assert_eq!(admin.post(&format!("/api/certificates/{id}/revoke"), json!({})).await.status, 400);
    assert_eq!(admin.post("/api/certificates", json!({ "certificate": "junk" })).await.status, 400);
    assert_eq!(admin.put("/api/certificates/4242", json!({ "location": "x" })).await.status, 404);
    assert_eq!(admin.get(&format!("/api/certificates/{id}/private-key")).await.status, 403);

    assert_eq!(audit(&admin, "").await.len(), before_audit);
    assert_eq!(admin.get("/api/events").await.body["total"].as_i64().unwrap(), before_events);
}

#[tokio::test]
async fn audit_log_filters_and_pages() {
    let server = Server::start();
    let admin = server.admin().await;
    for i in 0..3 {
        admin.register(&Spec::tls(&format!("f{i}.example.com")).pem()).await;
    }
    admin.post("/api/api-keys", json!({ "name": "k", "scopes": ["audit:read"] })).await;
    assert_eq!(audit(&admin, "action=certificate.created").await.len(), 3);
    assert_eq!(audit(&admin, "action=api_key.created").await.len(), 1);
    let page = admin.get("/api/audit-logs?action=certificate.created&limit=2&page=2").await;
    assert_eq!(page.body["total"], 3);
    assert_eq!(page.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(audit(&admin, "since=2000-01-01T00:00:00Z&action=certificate.created").await.len(), 3);
    assert_eq!(audit(&admin, "until=2000-01-01T00:00:00Z").await.len(), 0);
    assert_eq!(admin.get("/api/audit-logs?since=yesterday").await.status, 400);
}

/// A client's X-Request-Id reaches logs and audit rows only when it is a plain token (at most
/// 64 characters of letters, digits, `-`, `_`, `.`); anything else is replaced by our own id.
#[tokio::test]
async fn client_request_ids_are_checked_before_they_reach_audit_rows() {
    let server = Server::start();
    let admin = server.admin().await;
    let plain = admin.with_header("x-request-id", "deploy-42.a_b");
    let res = plain.post("/api/certificates", json!({ "certificate": Spec::tls("rid1.example.com").pem() })).await;
    assert_eq!(res.header("x-request-id"), Some("deploy-42.a_b"));
    assert_eq!(audit(&admin, "requestId=deploy-42.a_b").await.len(), 1);

    for hostile in ["evil\" OR 1=1 --", &"x".repeat(65), "tab\tseparated", "semi;colon"] {
        let client = admin.with_header("x-request-id", hostile);
        let pem = Spec::tls(&format!("rid{}.example.com", hostile.len())).pem();
        let res = client.post("/api/certificates", json!({ "certificate": pem })).await;
        assert_eq!(res.status, 201, "{}", res.body);
        let echoed = res.header("x-request-id").unwrap_or_default().to_string();
        assert_ne!(echoed, hostile);
        assert!(echoed.len() == 32 && echoed.chars().all(|c| c.is_ascii_hexdigit()), "{echoed}");
        let rows = audit(&admin, &format!("requestId={echoed}")).await;
        assert_eq!(rows.len(), 1, "the audit row carries our id, not the client's");
    }
}
