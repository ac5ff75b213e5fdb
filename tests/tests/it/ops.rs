use trellis_tests::Server;

#[tokio::test]
async fn health_ready_metrics_and_request_ids() {
    let server = Server::start();
    let admin = server.admin().await;
    let health = admin.get("/health").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.body["status"], "ok");
    let ready = admin.get("/ready").await;
    assert_eq!(ready.status, 200);
    assert!(health.header("x-request-id").is_some_and(|id| id.len() >= 16));
    let echoed = admin.with_header("X-Request-Id", "trace-abc-123").get("/health").await;
    assert_eq!(echoed.header("x-request-id"), Some("trace-abc-123"));
    let junk = admin.with_header("X-Request-Id", "bad id with spaces").get("/health").await;
    assert_ne!(junk.header("x-request-id"), Some("bad id with spaces"));

    admin.get("/api/certificates").await;
    admin.get("/api/certificates/abc").await;
    admin.register(&trellis_tests::certs::Spec::tls("metrics.example.com").pem()).await;
    let metrics = admin.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8(metrics.bytes).unwrap();
    assert!(text.contains("http_requests_total"), "{text}");
    assert!(text.contains(r#"route="/api/certificates""#));
    assert!(text.contains(r#"route="/api/certificates/{id}""#) && text.contains(r#"status="400""#));
    assert!(text.contains("http_request_duration_seconds_bucket"));
    // SQLite's group-commit writer times its batches (the registration went through it).
    if !trellis_tests::on_postgres() {
        for phase in ["begin", "jobs", "commit"] {
            let sum = format!(r#"trellis_store_group_commit_seconds_sum{{phase="{phase}"}}"#);
            assert!(text.contains(&sum), "{sum} missing from {text}");
        }
    }
}

#[tokio::test]
async fn openapi_document_and_docs_page_cover_the_routes() {
    let server = Server::start();
    let admin = server.admin().await;
    let doc = admin.get("/api/openapi.json").await;
    assert_eq!(doc.status, 200);
    let paths = doc.body["paths"].as_object().unwrap();
    for path in [
        "/api/auth/login",
        "/api/auth/logout",
        "/api/auth/user",
        "/api/workspaces",
        "/api/api-keys",
        "/api/api-keys/{id}",
        "/api/certificates",
        "/api/certificates/stats",
        "/api/certificates/{id}",
        "/api/certificates/{id}/auto-renew",
        "/api/certificates/{id}/revoke",
        "/api/certificates/{id}/download",
        "/api/certificates/{id}/private-key",
        "/api/certificates/{id}/private-key-status",
        "/api/certificates/{id}/assign-identity",
        "/api/certificate-usage",
        "/api/machine-identities",
        "/api/machine-identities/{id}",
        "/api/audit-logs",
        "/api/events",
        "/health",
        "/ready",
        "/metrics",
    ] {
        assert!(paths.contains_key(path), "missing {path}");
    }
    let page = admin.get("/docs").await;
    assert_eq!(page.status, 200);
    let html = String::from_utf8(page.bytes).unwrap();
    assert!(html.contains("/api/certificates/{id}/revoke"));
}

#[tokio::test]
async fn the_master_key_file_is_created_private() {
    let server = Server::start();
    let path = server.dir.path().join("master.key");
    let meta = std::fs::metadata(&path).expect("master key created under the data dir");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
}

#[tokio::test]
async fn bad_configuration_is_refused_with_a_clear_message() {
    let server = Server::start();
    let out = std::process::Command::new(trellis_tests::trellis_binary())
        .arg("serve")
        .env("TRELLIS_LISTEN", "not-an-address")
        .env("TRELLIS_DATABASE_URL", format!("sqlite://{}/x.db", server.dir.path().display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TRELLIS_LISTEN"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_shuts_down_gracefully() {
    let mut server = Server::start();
    let admin = server.admin().await;
    assert_eq!(admin.get("/health").await.status, 200);
    let status = tokio::task::block_in_place(|| server.terminate());
    assert!(status.success(), "graceful shutdown exits 0, got {status}");
}

/// A failing CLI command prints its cause chain, not just the outermost message.
#[tokio::test]
async fn cli_errors_print_their_cause() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(trellis_tests::trellis_binary())
        .args(["api-key", "create", "--workspace", "ws_x", "--name", "k", "--scopes", "certificates:read"])
        // Nothing listens on port 1: the database cannot be reached.
        .env("TRELLIS_DATABASE_URL", "postgres://trellis:secret@127.0.0.1:1/trellis")
        .env("TRELLIS_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot start"), "{stderr}");
    assert!(stderr.contains("Caused by"), "{stderr}");
    assert!(stderr.contains("cannot open database postgres://trellis:***@127.0.0.1:1/trellis"), "{stderr}");
    assert!(!stderr.contains("secret"), "the password leaked: {stderr}");
}

/// Open connections are capped: with TRELLIS_MAX_CONNECTIONS=2 and two idle connections open,
/// a third client is not served until one of them closes.
#[tokio::test]
async fn open_connections_are_capped() {
    let server = Server::start_with(&[("TRELLIS_MAX_CONNECTIONS", "2")]);
    let address = server.base_url.trim_start_matches("http://").to_string();
    let first = tokio::net::TcpStream::connect(&address).await.unwrap();
    let _second = tokio::net::TcpStream::connect(&address).await.unwrap();
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_millis(800)).build().unwrap();
    let url = format!("{}/health", server.base_url);
    assert!(client.get(&url).send().await.is_err(), "a third connection was served beside two open ones");
    drop(first);
    let served = reqwest::Client::new().get(&url).send().await.unwrap();
    assert_eq!(served.status(), 200);
}
