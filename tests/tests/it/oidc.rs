//! OpenID Connect sign-in (issue 25, items 1-3), against a real OpenID provider
//! (`oidc-provider` under node), an IdP of the test's own for every bad token, and once in
//! headless Chromium.

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use sha2::Digest;
use trellis_tests::oidc::{
    query_param, trellis_port, Browser, FakeIdp, NodeIdp, Page, TestKey, CLIENT_ID, CLIENT_SECRET,
};
use trellis_tests::Server;

const MAPPINGS: &str = r#"
[[oidc.role_mappings]]
group = "pki-admins"
workspace = "ops"
role = "owner"

[[oidc.role_mappings]]
group = "pki-viewers"
workspace = "ops"
role = "viewer"

[[oidc.role_mappings]]
group = "devs"
workspace = "dev"
role = "member"

[[oidc.role_mappings]]
group = "solo-admins"
workspace = "solo"
role = "owner"
"#;

/// A Trellis on a port chosen in advance (its public URL is the IdP's redirect target).
fn start_trellis(port: u16, issuer: &str, extra: &[(&str, &str)]) -> (Server, tempfile::NamedTempFile) {
    let config = tempfile::NamedTempFile::new().expect("config file");
    std::fs::write(config.path(), MAPPINGS).expect("write config");
    let listen = format!("127.0.0.1:{port}");
    let url = format!("http://{listen}");
    let config_path = config.path().display().to_string();
    let mut env = vec![
        ("TRELLIS_LISTEN", listen.as_str()),
        ("TRELLIS_PUBLIC_URL", url.as_str()),
        ("TRELLIS_OIDC_ISSUER", issuer),
        ("TRELLIS_OIDC_CLIENT_ID", CLIENT_ID),
        ("TRELLIS_OIDC_CLIENT_SECRET", CLIENT_SECRET),
        ("TRELLIS_OIDC_DISPLAY_NAME", "Test IdP"),
        ("TRELLIS_CONFIG", config_path.as_str()),
    ];
    env.extend_from_slice(extra);
    (Server::start_with(&env), config)
}

async fn workspace(admin: &trellis_tests::Client, name: &str) -> String {
    let res = admin.post("/api/workspaces", json!({ "name": name })).await;
    assert_eq!(res.status, 201, "{}", res.body);
    res.body["data"]["id"].as_str().expect("id").to_owned()
}

async fn json_get(browser: &Browser, url: &str) -> Value {
    let page = browser.get(url).await;
    assert_eq!(page.status, 200, "{url}: {page:?}");
    page.json()
}

/// The person's workspaces as `(name, role)`, sorted.
async fn roles(browser: &Browser, trellis: &str) -> Vec<(String, String)> {
    let list = json_get(browser, &format!("{trellis}/api/workspaces")).await;
    let mut roles: Vec<(String, String)> = list["data"]
        .as_array()
        .expect("list")
        .iter()
        .map(|w| (w["name"].as_str().unwrap_or("").to_owned(), w["role"].as_str().unwrap_or("").to_owned()))
        .collect();
    roles.sort();
    roles
}

fn pair(name: &str, role: &str) -> (String, String) {
    (name.to_owned(), role.to_owned())
}

fn session_cookie(page: &Page) -> &str {
    page.set_cookies.iter().find(|c| c.starts_with("trellis_session=")).map(String::as_str).unwrap_or("")
}

#[tokio::test]
async fn a_real_idp_signs_people_in_and_its_groups_decide_their_workspaces() {
    let port = trellis_port();
    let trellis = format!("http://127.0.0.1:{port}");
    let idp = NodeIdp::start(&trellis);
    let (server, _config) = start_trellis(port, &idp.issuer, &[]);
    let admin = server.admin().await;
    let ops = workspace(&admin, "ops").await;
    workspace(&admin, "dev").await;
    let manual = workspace(&admin, "manual").await;

    let providers = admin.get("/api/auth/providers").await;
    assert_eq!(providers.status, 200);
    assert_eq!(providers.body["data"][0]["type"], "oidc");
    assert_eq!(providers.body["data"][0]["displayName"], "Test IdP");
    assert_eq!(providers.body["data"][1]["type"], "password");

    // First sign-in: the user is created just in time, in `ops` as owner.
    idp.set_account("alice", "Alice@Example.com", "Alice", &["pki-admins"]);
    let browser = Browser::new();
    let answer = browser.sign_in(&trellis, "/after?x=1", "alice").await;
    assert_eq!(answer.status, 302, "{answer:?}\n{}", server.log());
    assert_eq!(answer.location.as_deref(), Some("/after?x=1"));
    let cookie = session_cookie(&answer);
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/"), "{cookie}");
    let me = json_get(&browser, &format!("{trellis}/api/auth/user")).await;
    assert_eq!(me["data"]["email"], "alice@example.com");
    assert_eq!(me["data"]["firstName"], "Alice");
    assert_eq!(me["data"]["currentWorkspaceId"], ops.as_str());
    assert!(me["data"].get("notice").is_none());
    assert_eq!(roles(&browser, &trellis).await, vec![pair("ops", "owner")]);
    let user_id = me["data"]["id"].as_str().expect("id").to_owned();

    // A membership made by hand, which the IdP's groups must never touch.
    server.sql(&format!(
        "INSERT INTO workspace_members (workspace_id, user_id, role, created_at) VALUES ('{manual}', '{user_id}', 'viewer', 0)"
    ));

    // Group changes at the IdP change the role at the next sign-in (same browser: the IdP's
    // session and consent are reused, as they would be).
    idp.set_account("alice", "alice@example.com", "Alice", &["pki-viewers", "devs"]);
    let again = browser.sign_in(&trellis, "/", "alice").await;
    assert_eq!(again.status, 302, "{again:?}");
    assert_eq!(
        roles(&browser, &trellis).await,
        vec![pair("dev", "member"), pair("manual", "viewer"), pair("ops", "viewer")]
    );
    let audit = admin.with_header("X-Workspace-Id", &ops).get("/api/audit-logs?limit=100").await;
    let actions: Vec<&str> =
        audit.body["data"].as_array().expect("audit").iter().filter_map(|e| e["action"].as_str()).collect();
    assert!(actions.contains(&"membership.added") && actions.contains(&"membership.role_changed"), "{actions:?}");

    // The group gone: the membership it made goes; the manual one stays.
    idp.set_account("alice", "alice@example.com", "Alice", &[]);
    let third = browser.sign_in(&trellis, "/", "alice").await;
    assert_eq!(third.status, 302, "{third:?}");
    assert_eq!(roles(&browser, &trellis).await, vec![pair("manual", "viewer")]);
    let audit = admin.with_header("X-Workspace-Id", &ops).get("/api/audit-logs?limit=100").await;
    assert!(audit.body.to_string().contains("membership.removed"), "{}", audit.body);
    assert_eq!(server.sql("SELECT COUNT(*) FROM users WHERE email = 'alice@example.com'"), "1");

    // RP-initiated logout: the IdP has an end_session_endpoint.
    let logout = browser.http.post(format!("{trellis}/api/auth/logout")).send().await.expect("logout");
    let logout: Value = logout.json().await.expect("json");
    let end = logout["data"]["endSessionUrl"].as_str().unwrap_or_default();
    assert!(end.starts_with(&format!("{}/session/end?", idp.issuer)) && end.contains(CLIENT_ID), "{logout}");
    assert_eq!(browser.get(&format!("{trellis}/api/auth/user")).await.status, 401);

    // No group that maps: signed in all the same, with a clear "no workspace yet".
    idp.set_account("bob", "bob@example.com", "Bob", &["nobody-maps-this"]);
    let bob = Browser::new();
    let answer = bob.sign_in(&trellis, "/", "bob").await;
    assert_eq!(answer.status, 302, "{answer:?}");
    let me = json_get(&bob, &format!("{trellis}/api/auth/user")).await;
    assert_eq!(me["data"]["currentWorkspaceId"], Value::Null);
    assert!(me["data"]["notice"].as_str().unwrap_or_default().contains("No workspace yet"), "{me}");
    assert_eq!(json_get(&bob, &format!("{trellis}/api/workspaces")).await["data"], json!([]));

    // The groups never leave a workspace without an owner: the last owner's membership stays
    // (audited) when the IdP's groups would take it away.
    let solo = workspace(&admin, "solo").await;
    idp.set_account("bob", "bob@example.com", "Bob", &["solo-admins"]);
    assert_eq!(bob.sign_in(&trellis, "/", "bob").await.status, 302);
    assert_eq!(roles(&bob, &trellis).await, vec![pair("solo", "owner")]);
    let admin_id = admin.get("/api/auth/user").await.body["data"]["id"].as_str().expect("admin id").to_owned();
    server.sql(&format!("DELETE FROM workspace_members WHERE workspace_id = '{solo}' AND user_id = '{admin_id}'"));
    idp.set_account("bob", "bob@example.com", "Bob", &[]);
    assert_eq!(bob.sign_in(&trellis, "/", "bob").await.status, 302);
    assert_eq!(roles(&bob, &trellis).await, vec![pair("solo", "owner")], "the last owner stays");
    let audit = json_get(&bob, &format!("{trellis}/api/audit-logs?limit=100")).await;
    let kept =
        audit["data"].as_array().and_then(|all| all.iter().find(|e| e["action"] == "membership.sync_kept")).cloned();
    let kept = kept.unwrap_or_else(|| panic!("no membership.sync_kept in {audit}"));
    assert_eq!(kept["details"]["reason"], "last_owner", "{kept}");
}

/// A change to a good ID token's claims that makes it bad.
type TokenEdit = Box<dyn Fn(&mut Value)>;

/// Starts a sign-in at Trellis; answers the `state` and `nonce` it sent to the IdP, and the
/// authorization URL.
async fn start(browser: &Browser, trellis: &str) -> (String, String, String) {
    let page = browser.get(&format!("{trellis}/api/auth/oidc/login")).await;
    assert_eq!(page.status, 302, "{page:?}");
    let location = page.location.expect("Location");
    let binding = page.set_cookies.iter().find(|c| c.starts_with("trellis_oidc=")).cloned().unwrap_or_default();
    assert!(binding.contains("HttpOnly") && binding.contains("SameSite=Lax"), "{binding}");
    (query_param(&location, "state").expect("state"), query_param(&location, "nonce").expect("nonce"), location)
}

async fn callback(browser: &Browser, trellis: &str, query: &[(&str, &str)]) -> Page {
    let mut url = reqwest::Url::parse(&format!("{trellis}/api/auth/oidc/callback")).expect("url");
    url.query_pairs_mut().extend_pairs(query);
    browser.get(url.as_str()).await
}

#[tokio::test]
async fn every_bad_callback_and_token_is_refused_with_its_own_code() {
    let key = TestKey::generate("k1");
    let idp = FakeIdp::start(key).await;
    let port = trellis_port();
    let trellis = format!("http://127.0.0.1:{port}");
    let (server, _config) = start_trellis(port, &idp.issuer, &[]);
    let browser = Browser::new();

    // A good sign-in first: PKCE S256 with the verifier sent to the token endpoint.
    let (state, nonce, authorize) = start(&browser, &trellis).await;
    assert_eq!(query_param(&authorize, "code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(query_param(&authorize, "client_id").as_deref(), Some(CLIENT_ID));
    idp.state.lock().expect("state").claims = idp.good_claims(&nonce, "carol", &["pki-admins"]);
    let good = callback(&browser, &trellis, &[("code", "code-1"), ("state", &state), ("iss", &idp.issuer)]).await;
    assert_eq!(good.status, 302, "{good:?}\n{}", server.log());
    let verifier = idp.state.lock().expect("state").last_token_form.get("code_verifier").cloned().unwrap_or_default();
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
    assert_eq!(query_param(&authorize, "code_challenge"), Some(challenge));

    // The same callback again: the sign-in is finished, and the code is not redeemed twice.
    let requests = idp.state.lock().expect("state").token_requests;
    let replay = callback(&browser, &trellis, &[("code", "code-1"), ("state", &state), ("iss", &idp.issuer)]).await;
    assert_eq!((replay.status, replay.error_code().as_str()), (400, "OIDC_UNKNOWN_STATE"), "{replay:?}");
    assert_eq!(idp.state.lock().expect("state").token_requests, requests);
    // The code again in a new sign-in: the IdP refuses it.
    let (state, nonce, _) = start(&browser, &trellis).await;
    idp.state.lock().expect("state").claims = idp.good_claims(&nonce, "carol", &[]);
    let reused = callback(&browser, &trellis, &[("code", "code-1"), ("state", &state), ("iss", &idp.issuer)]).await;
    assert_eq!((reused.status, reused.error_code().as_str()), (401, "OIDC_CODE_REJECTED"), "{reused:?}");

    // A state from another browser: refused, and the right browser can still finish.
    let (state, nonce, _) = start(&browser, &trellis).await;
    let other = Browser::new();
    let stolen = callback(&other, &trellis, &[("code", "code-x"), ("state", &state), ("iss", &idp.issuer)]).await;
    assert_eq!((stolen.status, stolen.error_code().as_str()), (400, "OIDC_STATE_MISMATCH"), "{stolen:?}");
    idp.state.lock().expect("state").claims = idp.good_claims(&nonce, "carol", &[]);
    let mine = callback(&browser, &trellis, &[("code", "code-x"), ("state", &state), ("iss", &idp.issuer)]).await;
    assert_eq!(mine.status, 302, "{mine:?}");

    // Each bad ID token, each with its own code.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let other_key = TestKey::generate("k1");
    let cases: Vec<(&str, TokenEdit, &str)> = vec![
        ("wrong iss", Box::new(|c| c["iss"] = json!("http://127.0.0.1:1")), "OIDC_WRONG_ISSUER"),
        ("wrong aud", Box::new(|c| c["aud"] = json!("someone-else")), "OIDC_WRONG_AUDIENCE"),
        ("wrong nonce", Box::new(|c| c["nonce"] = json!("not-this-sign-in")), "OIDC_WRONG_NONCE"),
        (
            "expired",
            Box::new(move |c| {
                c["exp"] = json!(now - 3600);
                c["iat"] = json!(now - 3900);
            }),
            "OIDC_TOKEN_EXPIRED",
        ),
        ("issued in the future", Box::new(move |c| c["iat"] = json!(now + 3600)), "OIDC_BAD_IAT"),
        (
            "several audiences, no azp",
            Box::new(|c| c["aud"] = json!([CLIENT_ID, "another-client"])),
            "OIDC_MISSING_AZP",
        ),
        (
            "someone else's azp",
            Box::new(|c| {
                c["aud"] = json!([CLIENT_ID, "another-client"]);
                c["azp"] = json!("another-client");
            }),
            "OIDC_WRONG_AZP",
        ),
    ];
    for (what, edit, code) in cases {
        let (state, nonce, _) = start(&browser, &trellis).await;
        let mut claims = idp.good_claims(&nonce, "carol", &[]);
        edit(&mut claims);
        idp.state.lock().expect("state").claims = claims;
        let code_value = format!("code-{what}");
        let answer =
            callback(&browser, &trellis, &[("code", &code_value), ("state", &state), ("iss", &idp.issuer)]).await;
        assert_eq!((answer.status, answer.error_code().as_str()), (401, code), "{what}: {answer:?}");
        // The log arrives through a pipe: waited for, with a deadline.
        assert!(server.wait_for_log(code, Duration::from_secs(10)), "{what}: the failure is logged with its code");
    }

    // Signed by a key the IdP does not publish under that kid: the signature fails.
    let (state, nonce, _) = start(&browser, &trellis).await;
    {
        let mut state = idp.state.lock().expect("state");
        state.claims = idp.good_claims(&nonce, "carol", &[]);
        state.signer = std::sync::Arc::new(other_key);
    }
    let forged =
        callback(&browser, &trellis, &[("code", "code-forged"), ("state", &state), ("iss", &idp.issuer)]).await;
    assert_eq!((forged.status, forged.error_code().as_str()), (401, "OIDC_BAD_SIGNATURE"), "{forged:?}");

    // The callback itself: RFC 9207 `iss`, the IdP's own refusal, no state, no code.
    let (state, _, _) = start(&browser, &trellis).await;
    let mixup = callback(&browser, &trellis, &[("code", "c"), ("state", &state), ("iss", "http://127.0.0.1:1")]).await;
    assert_eq!((mixup.status, mixup.error_code().as_str()), (400, "OIDC_ISS_PARAMETER_MISMATCH"), "{mixup:?}");
    let (state, _, _) = start(&browser, &trellis).await;
    let denied = callback(&browser, &trellis, &[("error", "access_denied"), ("state", &state)]).await;
    assert_eq!((denied.status, denied.error_code().as_str()), (401, "OIDC_DENIED"), "{denied:?}");
    let (state, _, _) = start(&browser, &trellis).await;
    let no_code = callback(&browser, &trellis, &[("state", &state)]).await;
    assert_eq!((no_code.status, no_code.error_code().as_str()), (400, "OIDC_MISSING_CODE"), "{no_code:?}");
    let no_state = callback(&browser, &trellis, &[("code", "c")]).await;
    assert_eq!((no_state.status, no_state.error_code().as_str()), (400, "OIDC_MISSING_STATE"), "{no_state:?}");
    let unknown = callback(&browser, &trellis, &[("code", "c"), ("state", "made-up")]).await;
    assert_eq!((unknown.status, unknown.error_code().as_str()), (400, "OIDC_UNKNOWN_STATE"), "{unknown:?}");

    // Only same-site relative redirects.
    for bad in ["https://evil.example/", "//evil.example/x", "/\\evil.example", "relative"] {
        let mut url = reqwest::Url::parse(&format!("{trellis}/api/auth/oidc/login")).expect("url");
        url.query_pairs_mut().append_pair("redirect", bad);
        let page = browser.get(url.as_str()).await;
        assert_eq!((page.status, page.error_code().as_str()), (400, "OIDC_BAD_REDIRECT"), "{bad}: {page:?}");
    }
    assert!(!server.log().contains("\"status\":500"), "no 500 in {}", server.log());
}

#[tokio::test]
async fn the_idp_rotates_its_keys_without_a_trellis_restart() {
    let idp = FakeIdp::start(TestKey::generate("old")).await;
    let port = trellis_port();
    let trellis = format!("http://127.0.0.1:{port}");
    let (server, _config) = start_trellis(port, &idp.issuer, &[]);
    let browser = Browser::new();
    let sign_in = |code: &'static str| {
        let (browser, trellis, idp) = (&browser, trellis.clone(), &idp);
        async move {
            let (state, nonce, _) = start(browser, &trellis).await;
            idp.state.lock().expect("state").claims = idp.good_claims(&nonce, "dave", &[]);
            callback(browser, &trellis, &[("code", code), ("state", &state), ("iss", &idp.issuer)]).await
        }
    };
    assert_eq!(sign_in("c1").await.status, 302);
    assert_eq!(idp.state.lock().expect("state").jwks_requests, 1);
    // Cached: a second sign-in with the same key fetches nothing.
    assert_eq!(sign_in("c2").await.status, 302);
    assert_eq!(idp.state.lock().expect("state").jwks_requests, 1);

    // The IdP rotates: the unknown kid refreshes the JWKS once, and the sign-in works.
    let new_key = TestKey::generate("new");
    {
        let mut state = idp.state.lock().expect("state");
        state.published = vec![new_key.jwk.clone()];
        state.signer = std::sync::Arc::new(new_key);
    }
    let rotated = sign_in("c3").await;
    assert_eq!(rotated.status, 302, "{rotated:?}\n{}", server.log());
    assert_eq!(idp.state.lock().expect("state").jwks_requests, 2);

    // Another unknown kid at once: refused without hammering the IdP (one refresh a minute).
    idp.state.lock().expect("state").signer = std::sync::Arc::new(TestKey::generate("rogue"));
    let rogue = sign_in("c4").await;
    assert_eq!((rogue.status, rogue.error_code().as_str()), (401, "OIDC_UNKNOWN_KEY"), "{rogue:?}");
    assert_eq!(idp.state.lock().expect("state").jwks_requests, 2);
}

#[tokio::test]
async fn with_password_login_off_only_the_break_glass_administrator_uses_a_password() {
    let idp = FakeIdp::start(TestKey::generate("k")).await;
    let port = trellis_port();
    let (server, _config) = start_trellis(port, &idp.issuer, &[("TRELLIS_PASSWORD_LOGIN", "false")]);
    // The instance administrator (TRELLIS_ADMIN_EMAIL) keeps password sign-in: break-glass.
    let admin = server.admin().await;
    let providers = admin.get("/api/auth/providers").await;
    let types: Vec<&str> =
        providers.body["data"].as_array().expect("list").iter().filter_map(|p| p["type"].as_str()).collect();
    assert_eq!(types, vec!["oidc"]);
    server
        .cli(&["user", "create", "--email", "erin@example.com", "--password", "password-123", "--workspace", "erin"])
        .expect("user");
    let erin = trellis_tests::Client::new(&server, None);
    let refused =
        erin.post("/api/auth/login", json!({ "email": "erin@example.com", "password": "password-123" })).await;
    assert_eq!((refused.status, refused.error_code()), (403, "PASSWORD_LOGIN_DISABLED"), "{}", refused.body);
    let wrong =
        erin.post("/api/auth/login", json!({ "email": "erin@example.com", "password": "wrong-password" })).await;
    assert_eq!(wrong.status, 401, "a wrong password still says only that");
}

#[tokio::test]
async fn headless_chromium_signs_in_through_the_idp() {
    let port = trellis_port();
    let trellis = format!("http://127.0.0.1:{port}");
    let idp = NodeIdp::start(&trellis);
    let (server, _config) = start_trellis(port, &idp.issuer, &[]);
    let admin = server.admin().await;
    workspace(&admin, "ops").await;
    idp.set_account("frank", "frank@example.com", "Frank", &["pki-admins"]);
    let out = std::process::Command::new("node")
        .arg(trellis_tests::workspace_root().join("tests/oidc/browser.mjs"))
        .args([&format!("{trellis}/api/auth/oidc/login?redirect=/api/auth/user"), "frank"])
        .env("TRELLIS_NODE_MODULES", trellis_tests::oidc::node_modules())
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser.mjs failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let me: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("not JSON: {stdout}"));
    assert_eq!(me["user"]["data"]["email"], "frank@example.com", "{me}");
    let cookie = me["cookie"].as_object().expect("cookie");
    assert_eq!((cookie["httpOnly"].as_bool(), cookie["sameSite"].as_str()), (Some(true), Some("Lax")), "{me}");
}
