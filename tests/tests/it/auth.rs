use serde_json::json;
use trellis_tests::certs::Spec;
use trellis_tests::{Client, Server, ADMIN_EMAIL, ADMIN_PASSWORD};

#[tokio::test]
async fn login_sets_a_secure_session_cookie_and_returns_the_user() {
    let server = Server::start();
    let client = Client::new(&server, None);
    let res = client.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": ADMIN_PASSWORD })).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let cookie = res.header("set-cookie").expect("cookie");
    assert!(cookie.starts_with("trellis_session="));
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Max-Age=604800"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "Secure only when configured");
    assert_eq!(res.body["data"]["message"], "Login successful");
    let user = &res.body["data"]["user"];
    assert_eq!(user["email"], ADMIN_EMAIL);
    assert!(user["id"].is_string() && user["currentWorkspaceId"].is_string() && user["firstName"].is_string());

    let me = client.get("/api/auth/user").await;
    assert_eq!(me.status, 200);
    assert_eq!(me.body["data"]["id"], user["id"]);

    assert_eq!(client.post("/api/auth/logout", json!({})).await.status, 200);
    assert_eq!(client.get("/api/auth/user").await.status, 401);
}

#[tokio::test]
async fn secure_cookies_when_configured() {
    let server = Server::start_with(&[("TRELLIS_SECURE_COOKIES", "true")]);
    let res = Client::new(&server, None)
        .post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": ADMIN_PASSWORD }))
        .await;
    let cookie = res.header("set-cookie").unwrap_or_default();
    assert!(cookie.contains("; Secure"), "{cookie}");
    // The __Host- prefix: browsers take it only over HTTPS, from this origin, for Path=/.
    assert!(cookie.starts_with("__Host-trellis_session="), "{cookie}");
    assert!(cookie.contains("Path=/") && !cookie.contains("Domain"), "{cookie}");
    let token = cookie.split(';').next().unwrap_or_default().to_string();
    let signed_in = Client::new(&server, None).with_header("cookie", &token);
    assert_eq!(signed_in.get("/api/auth/user").await.status, 200);
    // The unprefixed name is not accepted when secure cookies are on.
    let plain = token.replacen("__Host-", "", 1);
    assert_eq!(Client::new(&server, None).with_header("cookie", &plain).get("/api/auth/user").await.status, 401);
}

/// Cross-site request forgery: a change authenticated by the session cookie must come from
/// this origin. API keys are not cookies and are not affected.
#[tokio::test]
async fn cross_origin_cookie_mutations_are_refused() {
    let server = Server::start();
    let admin = server.admin().await;
    let host = server.base_url.trim_start_matches("http://").to_string();
    let pem = trellis_tests::certs::Spec::tls("csrf.example.com").pem();
    let body = json!({ "certificate": pem });

    let evil = admin.with_header("origin", "https://evil.example");
    let res = evil.post("/api/certificates", body.clone()).await;
    assert_eq!(res.status, 403, "{}", res.body);
    assert_eq!(res.error_code(), "CSRF_REJECTED");
    let res = admin
        .with_header("sec-fetch-site", "cross-site")
        .post("/api/api-keys", json!({ "name": "x", "scopes": ["certificates:read"] }))
        .await;
    assert_eq!(res.status, 403, "{}", res.body);
    // A form post from another site (text/plain body, no JSON) is refused before it is read.
    let form = evil.post_raw("/api/auth/logout", "text/plain", b"x".to_vec()).await;
    assert_eq!(form.status, 403, "{}", form.body);
    assert_eq!(admin.get("/api/auth/user").await.status, 200, "the session survived");
    // Reads stay allowed cross-origin (they change nothing; CORS keeps the answer from the page).
    assert_eq!(evil.get("/api/certificates").await.status, 200);

    // Same origin, or a client that is not a browser (no Origin, no Sec-Fetch-Site), may change.
    let same = admin.with_header("origin", &format!("http://{host}"));
    assert_eq!(same.post("/api/certificates", body.clone()).await.status, 201);
    let res = admin
        .with_header("sec-fetch-site", "same-origin")
        .post("/api/api-keys", json!({ "name": "y", "scopes": ["certificates:read"] }))
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let key = server.key_client(&["certificates:read", "certificates:write"]).await;
    let keyed = key.with_header("origin", "https://evil.example");
    let pem2 = trellis_tests::certs::Spec::tls("csrf2.example.com").pem();
    assert_eq!(keyed.post("/api/certificates", json!({ "certificate": pem2 })).await.status, 201);
}

#[tokio::test]
async fn wrong_password_and_missing_credentials_are_401_in_the_spec_shape() {
    let server = Server::start();
    let client = Client::new(&server, None);
    let res = client.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": "nope" })).await;
    assert_eq!(res.status, 401);
    assert_eq!(res.body, json!({ "error": { "code": "UNAUTHORIZED", "message": "Unauthorized" } }));
    let res = client.get("/api/certificates").await;
    assert_eq!(res.status, 401);
    assert_eq!(res.body, json!({ "error": { "code": "UNAUTHORIZED", "message": "Unauthorized" } }));
    let bogus = Client::new(&server, Some(format!("ck_{}", "0".repeat(64))));
    assert_eq!(bogus.get("/api/certificates").await.status, 401);
    let malformed = Client::new(&server, Some("ck_short".into()));
    assert_eq!(malformed.get("/api/certificates").await.status, 401);
}

#[tokio::test]
async fn login_is_rate_limited_after_repeated_failures() {
    let server = Server::start_with(&[("TRELLIS_LOGIN_MAX_FAILURES", "3")]);
    let client = Client::new(&server, None);
    for _ in 0..3 {
        let res = client.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": "wrong" })).await;
        assert_eq!(res.status, 401);
    }
    // Locked out: even the right password is refused until the window passes.
    let res = client.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": ADMIN_PASSWORD })).await;
    assert_eq!(res.status, 429);
    assert_eq!(res.error_code(), "RATE_LIMITED");
    assert!(res.header("retry-after").and_then(|v| v.parse::<u64>().ok()).is_some_and(|s| s > 0));
}

/// 200 wrong logins at once: the limit is checked and counted in one step, so no more than
/// the limit get as far as the password check (they all got 401 before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_wrong_logins_cannot_race_past_the_limit() {
    let server = Server::start_with(&[("TRELLIS_LOGIN_MAX_FAILURES", "5")]);
    let client = Client::new(&server, None);
    let attempts = (0..200).map(|_| {
        let client = client.clone();
        async move { client.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": "wrong" })).await.status }
    });
    let statuses = futures_join_all(attempts).await;
    let unauthorized = statuses.iter().filter(|s| **s == 401).count();
    let throttled = statuses.iter().filter(|s| **s == 429).count();
    assert!(unauthorized <= 5, "{unauthorized} wrong logins were checked (limit 5)");
    assert_eq!(unauthorized + throttled, 200, "{statuses:?}");
}

async fn futures_join_all<F: std::future::Future<Output = u16> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<u16> {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("task"));
    }
    out
}

/// A stranger failing on purpose locks out only themselves: the account's owner, from
/// another address, still signs in. Client addresses come from X-Forwarded-For because the
/// test's loopback peer is configured as a trusted proxy.
#[tokio::test]
async fn a_strangers_failures_do_not_lock_the_owner_out() {
    let server = Server::start_with(&[("TRELLIS_LOGIN_MAX_FAILURES", "3"), ("TRELLIS_TRUSTED_PROXIES", "127.0.0.1")]);
    let stranger = Client::new(&server, None).with_header("x-forwarded-for", "203.0.113.9");
    for _ in 0..3 {
        let res = stranger.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": "wrong" })).await;
        assert_eq!(res.status, 401);
    }
    let res = stranger.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": ADMIN_PASSWORD })).await;
    assert_eq!(res.status, 429, "the stranger's client is locked out");
    let owner = Client::new(&server, None).with_header("x-forwarded-for", "198.51.100.7");
    let res = owner.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": ADMIN_PASSWORD })).await;
    assert_eq!(res.status, 200, "the owner must still get in: {}", res.body);
}

/// Without a trusted proxy, X-Forwarded-For is the client's own claim and is ignored: a new
/// value per attempt does not buy new attempts.
#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let server = Server::start_with(&[("TRELLIS_LOGIN_MAX_FAILURES", "3")]);
    for i in 0..3 {
        let client = Client::new(&server, None).with_header("x-forwarded-for", &format!("203.0.113.{i}"));
        let res = client.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": "wrong" })).await;
        assert_eq!(res.status, 401);
    }
    let client = Client::new(&server, None).with_header("x-forwarded-for", "203.0.113.99");
    let res = client.post("/api/auth/login", json!({ "email": ADMIN_EMAIL, "password": "wrong" })).await;
    assert_eq!(res.status, 429);
}

#[tokio::test]
async fn api_keys_are_shown_once_and_stored_only_as_hashes() {
    let server = Server::start();
    let admin = server.admin().await;
    let res = admin.post("/api/api-keys", json!({ "name": "ci", "scopes": ["certificates:read"] })).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let key = res.body["data"]["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("ck_") && key.len() == 67 && key[3..].chars().all(|c| c.is_ascii_hexdigit()));
    let id = res.body["data"]["id"].as_str().unwrap().to_string();

    let list = admin.get("/api/api-keys").await;
    assert_eq!(list.status, 200);
    assert!(!list.body.to_string().contains(&key[3..]), "the key must never be listed");
    assert_eq!(list.body["data"][0]["scopes"], json!(["certificates:read"]));

    if !trellis_tests::on_postgres() {
        let db = std::fs::read(server.dir.path().join("trellis.db")).unwrap();
        let wal = std::fs::read(server.dir.path().join("trellis.db-wal")).unwrap_or_default();
        let needle = key.as_bytes();
        assert!(
            !db.windows(needle.len()).any(|w| w == needle) && !wal.windows(needle.len()).any(|w| w == needle),
            "plaintext key on disk"
        );
    }

    let agent =
        admin.post("/api/api-keys", json!({ "name": "agent", "scopes": ["certificates:read"], "kind": "agent" })).await;
    assert!(agent.body["data"]["key"].as_str().unwrap().starts_with("ak_"));

    let keyed = Client::new(&server, Some(key.clone()));
    assert_eq!(keyed.get("/api/certificates").await.status, 200);
    let bearer = Client::new(&server, None).with_header("Authorization", &format!("Bearer {key}"));
    assert_eq!(bearer.get("/api/certificates").await.status, 200);

    assert_eq!(admin.delete(&format!("/api/api-keys/{id}")).await.status, 204);
    assert_eq!(keyed.get("/api/certificates").await.status, 401);
    assert_eq!(admin.delete(&format!("/api/api-keys/{id}")).await.status, 404);
}

#[tokio::test]
async fn unknown_scopes_are_rejected() {
    let server = Server::start();
    let admin = server.admin().await;
    let res = admin.post("/api/api-keys", json!({ "name": "x", "scopes": ["certificates:everything"] })).await;
    assert_eq!(res.status, 400);
    assert_eq!(res.error_code(), "VALIDATION_ERROR");
    let res = admin.post("/api/api-keys", json!({ "name": "x", "scopes": [] })).await;
    assert_eq!(res.status, 400);
}

#[tokio::test]
async fn a_read_only_key_cannot_write() {
    let server = Server::start();
    let reader = server.key_client(&["certificates:read"]).await;
    let pem = Spec::tls("ro.example.com").pem();
    let res = reader.post("/api/certificates", json!({ "certificate": pem })).await;
    assert_eq!(res.status, 403);
    assert_eq!(res.error_code(), "INSUFFICIENT_SCOPE");
    let admin = server.admin().await;
    let id = admin.register(&pem).await["id"].as_i64().unwrap();
    assert_eq!(reader.get(&format!("/api/certificates/{id}")).await.status, 200);
    for res in [
        reader.put(&format!("/api/certificates/{id}"), json!({ "location": "x" })).await,
        reader.post(&format!("/api/certificates/{id}/revoke"), json!({})).await,
        reader.delete(&format!("/api/certificates/{id}")).await,
        reader.put(&format!("/api/certificates/{id}/auto-renew"), json!({ "enabled": true })).await,
        reader.post("/api/api-keys", json!({ "name": "escalate", "scopes": ["certificates:write"] })).await,
        reader.get("/api/audit-logs").await,
    ] {
        assert_eq!(res.status, 403, "{}", res.body);
    }
    let writer = server.key_client(&["certificates:write"]).await;
    assert_eq!(writer.get("/api/certificates").await.status, 403, "write does not imply read");
}

#[tokio::test]
async fn keys_are_bound_to_their_workspace_and_ignore_the_workspace_header() {
    let server = Server::start();
    let (other, other_ws) = server.new_user("other@example.com").await;
    let other_id = other.register(&Spec::tls("other.example.com").pem()).await["id"].as_i64().unwrap();
    let key = server.key_client(&["certificates:read", "certificates:write"]).await;
    let with_header = key.with_header("X-Workspace-Id", &other_ws);
    let res = with_header.get("/api/certificates").await;
    assert_eq!(res.status, 200);
    assert_eq!(res.body["total"], 0, "the key sees its own workspace only");
    assert_eq!(with_header.get(&format!("/api/certificates/{other_id}")).await.status, 404);
}

#[tokio::test]
async fn sessions_switch_workspace_by_header_only_where_they_are_members() {
    let server = Server::start();
    let admin = server.admin().await;
    let created = admin.post("/api/workspaces", json!({ "name": "second" })).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let second = created.body["data"]["id"].as_str().unwrap().to_string();
    let in_second = admin.with_header("X-Workspace-Id", &second);
    let cert = in_second.register(&Spec::tls("second.example.com").pem()).await;
    assert_eq!(cert["workspaceId"], second);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0);
    assert_eq!(in_second.get("/api/certificates").await.body["total"], 1);
    let list = admin.get("/api/workspaces").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2);

    let (_, foreign) = server.new_user("foreign@example.com").await;
    let res = admin.with_header("X-Workspace-Id", &foreign).get("/api/certificates").await;
    assert_eq!(res.status, 403);
    assert_eq!(res.error_code(), "FORBIDDEN");
}

#[tokio::test]
async fn cli_creates_users_and_keys() {
    let server = Server::start();
    let created = server
        .cli(&[
            "user",
            "create",
            "--email",
            "ops@example.com",
            "--password",
            "s3cret-pass",
            "--first-name",
            "Ops",
            "--workspace",
            "ops",
        ])
        .unwrap();
    let workspace = created["workspaceId"].as_str().unwrap();
    assert!(created["userId"].is_string());
    let key = server
        .cli(&[
            "api-key",
            "create",
            "--workspace",
            workspace,
            "--name",
            "deploy",
            "--scopes",
            "certificates:read,certificates:write",
        ])
        .unwrap();
    let key = key["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("ck_"));
    let client = Client::new(&server, Some(key));
    client.register(&Spec::tls("cli.example.com").pem()).await;
    let ops = server.login("ops@example.com", "s3cret-pass").await;
    assert_eq!(ops.get("/api/certificates").await.body["total"], 1);
    let agent = server
        .cli(&[
            "api-key",
            "create",
            "--workspace",
            workspace,
            "--name",
            "a",
            "--scopes",
            "certificates:read",
            "--kind",
            "agent",
        ])
        .unwrap();
    assert!(agent["key"].as_str().unwrap().starts_with("ak_"));

    let duplicate =
        server.cli_raw(&["user", "create", "--email", "ops@example.com", "--password", "s3cret-pass"]).unwrap();
    assert!(!duplicate.status.success());
    assert!(String::from_utf8_lossy(&duplicate.stderr).contains("already exists"));
    let bad_scope =
        server.cli_raw(&["api-key", "create", "--workspace", workspace, "--name", "x", "--scopes", "nope"]).unwrap();
    assert!(!bad_scope.status.success());
}

/// Passwords reach `trellis user create` from stdin or a file, not the command line (where `ps`
/// and shell history would show them); without one the command says how to give it.
#[tokio::test]
async fn the_cli_reads_passwords_from_stdin_or_a_file() {
    use std::io::Write;
    let server = Server::start();
    let mut child = std::process::Command::new(trellis_tests::trellis_binary())
        .args(["user", "create", "--email", "stdin@example.com", "--password-stdin"])
        .envs(server.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"from-stdin-123\n").unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    server.login("stdin@example.com", "from-stdin-123").await;

    let file = server.dir.path().join("password.txt");
    std::fs::write(&file, "from-a-file-123\n").unwrap();
    let out = server
        .cli_raw(&["user", "create", "--email", "file@example.com", "--password-file", file.to_str().unwrap()])
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    server.login("file@example.com", "from-a-file-123").await;

    let out = server.cli_raw(&["user", "create", "--email", "none@example.com"]).unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--password-stdin"));
}
