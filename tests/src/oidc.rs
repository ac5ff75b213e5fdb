//! OpenID Connect peers for tests/it/oidc.rs:
//! - [`NodeIdp`]: a real OpenID provider, panva's `oidc-provider` run by node from
//!   tests/oidc/provider.mjs (`scripts/oidc-provider.sh` installs it), with accounts the test
//!   rewrites in a JSON file;
//! - [`FakeIdp`]: discovery, JWKS and a token endpoint of the test's own (axum), whose ID tokens
//!   the test writes and signs (ES256, rcgen keys), to present every kind of bad token;
//! - [`Browser`]: a cookie-keeping HTTP client that follows the sign-in's redirects and fills in
//!   the IdP's forms, as a person's browser would.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use crate::pebble::free_port;
use crate::{target_dir, workspace_root};

/// Where scripts/oidc-provider.sh installs the npm peers.
pub fn node_modules() -> PathBuf {
    let dir = workspace_root().join("target/oidc-provider/node_modules");
    if dir.join("oidc-provider").exists() {
        return dir;
    }
    target_dir().join("oidc-provider/node_modules")
}

fn require_node_modules() -> PathBuf {
    let dir = node_modules();
    assert!(
        dir.join("oidc-provider/package.json").exists() && dir.join("playwright-core/package.json").exists(),
        "{} lacks oidc-provider or playwright-core: run scripts/oidc-provider.sh (make test does)",
        dir.display()
    );
    dir
}

/// A Trellis port chosen before the server starts, so the IdP can know the redirect URI.
pub fn trellis_port() -> u16 {
    free_port()
}

pub const CLIENT_ID: &str = "trellis-test";
pub const CLIENT_SECRET: &str = "test-client-secret-0123456789";

/// `oidc-provider` under node; killed on drop.
pub struct NodeIdp {
    child: Child,
    log: tempfile::NamedTempFile,
    accounts: tempfile::NamedTempFile,
    pub issuer: String,
}

impl NodeIdp {
    /// Starts the provider for a Trellis at `trellis_url`.
    pub fn start(trellis_url: &str) -> NodeIdp {
        let modules = require_node_modules();
        let port = free_port();
        let log = tempfile::NamedTempFile::new().expect("log file");
        let accounts = tempfile::NamedTempFile::new().expect("accounts file");
        std::fs::write(accounts.path(), "{}").expect("accounts");
        let child = Command::new("node")
            .arg(workspace_root().join("tests/oidc/provider.mjs"))
            .args([
                &port.to_string(),
                CLIENT_ID,
                CLIENT_SECRET,
                &format!("{trellis_url}/api/auth/oidc/callback"),
                &format!("{trellis_url}/"),
            ])
            .arg(accounts.path())
            .env("TRELLIS_NODE_MODULES", &modules)
            .stdout(log.reopen().expect("log"))
            .stderr(log.reopen().expect("log"))
            .spawn()
            .expect("node starts (apt-get install nodejs)");
        let idp = NodeIdp { child, log, accounts, issuer: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !idp.log().contains("listening") {
            assert!(Instant::now() < deadline, "oidc-provider did not start: {}", idp.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        idp
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Sets (or replaces) an account: the provider re-reads the file at every lookup.
    pub fn set_account(&self, login: &str, email: &str, given_name: &str, groups: &[&str]) {
        let text = std::fs::read_to_string(self.accounts.path()).unwrap_or_else(|_| "{}".into());
        let mut accounts: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
        accounts[login] = json!({ "email": email, "givenName": given_name, "groups": groups });
        std::fs::write(self.accounts.path(), accounts.to_string()).expect("write accounts");
    }
}

impl Drop for NodeIdp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser: keeps cookies (for every host, as a browser does), follows nothing by itself.
pub struct Browser {
    pub http: reqwest::Client,
}

/// One answer, read whole.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub url: String,
    pub location: Option<String>,
    pub set_cookies: Vec<String>,
    pub text: String,
}

impl Page {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    pub fn error_code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap_or_default().to_owned()
    }
}

impl Default for Browser {
    fn default() -> Self {
        Self::new()
    }
}

impl Browser {
    pub fn new() -> Browser {
        let http = reqwest::Client::builder()
            .cookie_store(true)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("browser");
        Browser { http }
    }

    async fn read(response: reqwest::Response) -> Page {
        let status = response.status().as_u16();
        let url = response.url().to_string();
        let location = response.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let set_cookies = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        let text = response.text().await.unwrap_or_default();
        Page { status, url, location, set_cookies, text }
    }

    pub async fn get(&self, url: &str) -> Page {
        Self::read(self.http.get(url).send().await.expect("GET")).await
    }

    pub async fn post_form(&self, url: &str, form: &[(String, String)]) -> Page {
        Self::read(self.http.post(url).form(form).send().await.expect("POST")).await
    }

    /// Starts a sign-in at Trellis and walks the IdP (`login` typed into its form, consent
    /// given) until the IdP redirects back to Trellis's callback; answers that callback URL
    /// without visiting it.
    pub async fn to_callback(&self, trellis_url: &str, redirect: &str, login: &str) -> String {
        let start = self.get(&format!("{trellis_url}/api/auth/oidc/login?redirect={redirect}")).await;
        assert_eq!(start.status, 302, "login start: {start:?}");
        let mut next = start.location.clone().expect("Location to the IdP");
        for _ in 0..20 {
            if next.starts_with(&format!("{trellis_url}/api/auth/oidc/callback")) {
                return next;
            }
            let page = self.get(&next).await;
            next = match (page.status, page.location.clone()) {
                (300..=399, Some(location)) => absolute(&page.url, &location),
                (200, None) => self.submit_form(&page, login).await,
                _ => panic!("unexpected answer from the IdP: {page:?}"),
            };
        }
        panic!("the sign-in did not come back to Trellis")
    }

    /// Fills in the IdP's login form (or its consent form) like a person; answers the next URL.
    async fn submit_form(&self, page: &Page, login: &str) -> String {
        let action = attribute(&page.text, "action").unwrap_or_else(|| panic!("no form in {}", page.text));
        let prompt = page
            .text
            .split("name=\"prompt\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("consent")
            .to_owned();
        let mut form = vec![("prompt".to_owned(), prompt.clone())];
        if prompt == "login" {
            form.push(("login".into(), login.into()));
            form.push(("password".into(), "any-password".into()));
        }
        let answer = self.post_form(&absolute(&page.url, &action), &form).await;
        assert!((300..400).contains(&answer.status), "form post: {answer:?}");
        absolute(&answer.url, answer.location.as_deref().expect("Location after the form"))
    }

    /// The whole sign-in: answers Trellis's answer to the callback.
    pub async fn sign_in(&self, trellis_url: &str, redirect: &str, login: &str) -> Page {
        let callback = self.to_callback(trellis_url, redirect, login).await;
        self.get(&callback).await
    }
}

fn attribute(html: &str, name: &str) -> Option<String> {
    let start = html.find(&format!("{name}=\""))? + name.len() + 2;
    let end = html[start..].find('"')? + start;
    Some(html[start..end].replace("&amp;", "&").replace("&#x2F;", "/").replace("&#47;", "/"))
}

fn absolute(base: &str, location: &str) -> String {
    reqwest::Url::parse(base).and_then(|b| b.join(location)).map(|u| u.to_string()).unwrap_or_else(|_| location.into())
}

/// A query parameter of a URL.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    reqwest::Url::parse(url).ok()?.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

/// An ES256 signing key and its public JWK.
pub struct TestKey {
    pub kid: String,
    encoding: jsonwebtoken::EncodingKey,
    pub jwk: Value,
}

impl TestKey {
    pub fn generate(kid: &str) -> TestKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256 key");
        let raw = pair.public_key_raw();
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
        });
        let encoding = jsonwebtoken::EncodingKey::from_ec_der(&pair.serialize_der());
        TestKey { kid: kid.to_owned(), encoding, jwk }
    }

    pub fn sign(&self, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("sign")
    }
}

/// What the fake IdP does; the test changes it between sign-ins.
pub struct FakeState {
    /// Keys published in the JWKS.
    pub published: Vec<Value>,
    /// The key the next ID token is signed with.
    pub signer: Arc<TestKey>,
    /// The next ID token's claims; `nonce` is filled from the sign-in unless set to something.
    pub claims: Value,
    /// Codes already redeemed (a second redemption is refused, as a real IdP does).
    pub redeemed: Vec<String>,
    pub token_requests: usize,
    pub jwks_requests: usize,
    /// The form of the last token request.
    pub last_token_form: HashMap<String, String>,
}

/// An IdP of the test's own, on a loopback port; stops with the runtime.
pub struct FakeIdp {
    pub issuer: String,
    pub state: Arc<Mutex<FakeState>>,
}

impl FakeIdp {
    pub async fn start(first_key: TestKey) -> FakeIdp {
        use axum::routing::{get, post};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let issuer = format!("http://{}", listener.local_addr().expect("addr"));
        let key = Arc::new(first_key);
        let state = Arc::new(Mutex::new(FakeState {
            published: vec![key.jwk.clone()],
            signer: key,
            claims: json!({}),
            redeemed: Vec::new(),
            token_requests: 0,
            jwks_requests: 0,
            last_token_form: HashMap::new(),
        }));
        let discovery = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "jwks_uri": format!("{issuer}/jwks"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        });
        let jwks_state = state.clone();
        let token_state = state.clone();
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(move || async move { axum::Json(discovery) }))
            .route(
                "/jwks",
                get(move || async move {
                    let mut state = jwks_state.lock().expect("state");
                    state.jwks_requests += 1;
                    axum::Json(json!({ "keys": state.published }))
                }),
            )
            .route(
                "/token",
                post(move |axum::Form(form): axum::Form<HashMap<String, String>>| async move {
                    let mut state = token_state.lock().expect("state");
                    state.token_requests += 1;
                    state.last_token_form = form.clone();
                    let code = form.get("code").cloned().unwrap_or_default();
                    if state.redeemed.contains(&code) {
                        let body = json!({ "error": "invalid_grant", "error_description": "code already used" });
                        return (axum::http::StatusCode::BAD_REQUEST, axum::Json(body));
                    }
                    state.redeemed.push(code);
                    let token = state.signer.sign(&state.claims);
                    (
                        axum::http::StatusCode::OK,
                        axum::Json(json!({ "id_token": token, "token_type": "Bearer", "access_token": "at" })),
                    )
                }),
            );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeIdp { issuer, state }
    }

    /// Claims of a good ID token for `nonce`, issued now.
    pub fn good_claims(&self, nonce: &str, subject: &str, groups: &[&str]) -> Value {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        json!({
            "iss": self.issuer, "aud": CLIENT_ID, "sub": subject, "nonce": nonce,
            "iat": now, "exp": now + 300,
            "email": format!("{subject}@example.com"), "email_verified": true, "given_name": subject,
            "groups": groups,
        })
    }
}
