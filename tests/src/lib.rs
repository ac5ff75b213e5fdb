//! Test support: start the real `trellis` binary on an ephemeral port with its own
//! SQLite database, and talk HTTP to it. Also builds test certificates with rcgen.

pub mod bench;
pub mod certs;
pub mod moto;
pub mod oidc;
pub mod openbao;
pub mod pebble;
pub mod receiver;
pub mod swtpm;
pub mod tls_endpoint;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

pub const ADMIN_EMAIL: &str = "admin@example.com";
pub const ADMIN_PASSWORD: &str = "correct horse battery";

/// The workspace root (parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, else `target/` of the workspace.
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| workspace_root().join("target"))
}

/// A plugin component `scripts/build-plugins.sh` built: `<target>/plugins/<name>.wasm`.
pub fn plugin_file(name: &str) -> PathBuf {
    let path = target_dir().join("plugins").join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run `make plugins` to build the plugin components", path.display());
    path
}

/// The `trellis` binary under test: `TRELLIS_BIN`, else target/debug/trellis.
pub fn trellis_binary() -> PathBuf {
    if let Ok(path) = std::env::var("TRELLIS_BIN") {
        return PathBuf::from(path);
    }
    let path = target_dir().join("debug").join("trellis");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p trellis --bin trellis` (`make test` does this)",
        path.display()
    );
    path
}

/// True when the suite runs against PostgreSQL (`TRELLIS_TEST_POSTGRES_URL`, see scripts/postgres.sh).
pub fn on_postgres() -> bool {
    std::env::var("TRELLIS_TEST_POSTGRES_URL").is_ok_and(|url| !url.is_empty())
}

/// Creates a fresh database on the test cluster and returns its URL.
fn create_postgres_database(admin_url: &str) -> anyhow::Result<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = format!(
        "trellis_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
    );
    let output = Command::new("psql")
        .args([admin_url, "-v", "ON_ERROR_STOP=1", "-qc", &format!("CREATE DATABASE {name}")])
        .output()
        .context("psql is needed for the PostgreSQL run (apt-get install postgresql-client)")?;
    if !output.status.success() {
        bail!("cannot create test database: {}", String::from_utf8_lossy(&output.stderr));
    }
    let base = admin_url.rsplit_once('/').map(|(base, _)| base).unwrap_or(admin_url);
    Ok(format!("{base}/{name}"))
}

/// Everything the server wrote to stderr (its log), line by line as it arrives.
#[derive(Default)]
struct CapturedLog {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

/// A running `trellis serve` with its own data directory; killed on drop.
pub struct Server {
    child: Child,
    pub base_url: String,
    pub dir: tempfile::TempDir,
    pub env: Vec<(String, String)>,
    log: Arc<CapturedLog>,
}

impl Server {
    /// Starts a server with the bootstrap admin and default settings.
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    /// Starts a server with extra environment variables.
    pub fn start_with(extra_env: &[(&str, &str)]) -> Server {
        Self::try_start(extra_env).expect("server starts")
    }

    fn try_start(extra_env: &[(&str, &str)]) -> anyhow::Result<Server> {
        let dir = tempfile::tempdir()?;
        let database_url = match std::env::var("TRELLIS_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => create_postgres_database(&url)?,
            _ => format!("sqlite://{}/trellis.db", dir.path().display()),
        };
        let mut env: Vec<(String, String)> = vec![
            ("TRELLIS_LISTEN".into(), "127.0.0.1:0".into()),
            ("TRELLIS_DATABASE_URL".into(), database_url),
            ("TRELLIS_DATA_DIR".into(), dir.path().display().to_string()),
            ("TRELLIS_ADMIN_EMAIL".into(), ADMIN_EMAIL.into()),
            ("TRELLIS_ADMIN_PASSWORD".into(), ADMIN_PASSWORD.into()),
            ("TRELLIS_LOG_FORMAT".into(), "json".into()),
            ("RUST_LOG".into(), "info,sqlx=warn".into()),
        ];
        for (name, value) in extra_env {
            env.retain(|(n, _)| n != name);
            env.push((name.to_string(), value.to_string()));
        }
        let (child, base_url, log) = spawn_serve(&env)?;
        Ok(Server { child, base_url, dir, env, log })
    }

    /// SIGKILLs the server (no shutdown at all) and starts it again on the same database, data
    /// directory and settings; `base_url` changes (a new ephemeral port).
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, base_url, log) = spawn_serve(&self.env).expect("server restarts");
        self.child = child;
        self.base_url = base_url;
        self.log = log;
    }

    /// The server's log so far (stderr: JSON lines, plugin logs included).
    pub fn log(&self) -> String {
        self.log.lines.lock().map(|lines| lines.join("\n")).unwrap_or_default()
    }

    /// Waits until a log line contains `needle` (false after `timeout`).
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let Ok(mut lines) = self.log.lines.lock() else { return false };
        loop {
            if lines.iter().any(|line| line.contains(needle)) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.log.grew.wait_timeout(lines, left) {
                Ok((guard, _)) => lines = guard,
                Err(_) => return false,
            }
        }
    }

    /// The log up to and including a request made now: everything the server logged for the
    /// requests before this call has been written by then.
    pub async fn flushed_log(&self) -> String {
        let res = Client::new(self, None).get("/health").await;
        let request_id = res.header("x-request-id").unwrap_or_default().to_string();
        assert!(!request_id.is_empty(), "/health answered without X-Request-Id");
        assert!(
            self.wait_for_log(&request_id, Duration::from_secs(10)),
            "the server never logged request {request_id}"
        );
        self.log()
    }

    /// The database this server runs on (`TRELLIS_DATABASE_URL`), for a second process on it.
    pub fn database_url(&self) -> String {
        self.env.iter().find(|(name, _)| name == "TRELLIS_DATABASE_URL").map(|(_, url)| url.clone()).unwrap_or_default()
    }

    /// Runs one SQL statement against this server's database (the `sqlite3` CLI, or `psql` on
    /// PostgreSQL) and returns its output, one row a line, columns separated by `|`.
    pub fn sql(&self, statement: &str) -> String {
        let url = self.database_url();
        let output = match url.strip_prefix("sqlite://") {
            Some(path) => Command::new("sqlite3")
                .args(["-bail", path.split('?').next().unwrap_or(path), statement])
                .output()
                .expect("the sqlite3 CLI is installed (apt-get install sqlite3)"),
            None => Command::new("psql")
                .args([url.as_str(), "-At", "-v", "ON_ERROR_STOP=1", "-c", statement])
                .output()
                .expect("psql is installed (apt-get install postgresql-client)"),
        };
        assert!(output.status.success(), "`{statement}` failed: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).trim_end().to_string()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill");
        assert!(sent.success());
        self.child.wait().expect("wait")
    }

    /// Runs a `trellis` subcommand against this server's database; returns stdout parsed as JSON.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<Value> {
        let output = self.cli_raw(args)?;
        if !output.status.success() {
            bail!("trellis {:?} failed: {}", args, String::from_utf8_lossy(&output.stderr));
        }
        Ok(serde_json::from_slice(&output.stdout)?)
    }

    pub fn cli_raw(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Ok(self.cli_command(args).output()?)
    }

    /// A `trellis` subcommand with this server's settings, not yet run.
    pub fn cli_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(trellis_binary());
        command.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    /// A client signed in as the bootstrap admin.
    pub async fn admin(&self) -> Client {
        self.login(ADMIN_EMAIL, ADMIN_PASSWORD).await
    }

    pub async fn login(&self, email: &str, password: &str) -> Client {
        let client = Client::new(self, None);
        let res = client.post("/api/auth/login", json!({ "email": email, "password": password })).await;
        assert_eq!(res.status, 200, "login failed: {}", res.body);
        client
    }

    /// A new user (with their own workspace) signed in.
    pub async fn new_user(&self, email: &str) -> (Client, String) {
        let created = self
            .cli(&["user", "create", "--email", email, "--password", "password-123", "--workspace", email])
            .expect("user create");
        let workspace = created["workspaceId"].as_str().expect("workspaceId").to_string();
        (self.login(email, "password-123").await, workspace)
    }

    /// A new user who is also a member of `workspace_id` with `role` (`owner`, `member`,
    /// `viewer`), signed in with that workspace selected (`X-Workspace-Id`). The membership row is
    /// written directly, so tests of other areas do not depend on the members API
    /// (`tests/it/members.rs` covers that).
    pub async fn new_member(&self, email: &str, workspace_id: &str, role: &str) -> Client {
        let (client, _) = self.new_user(email).await;
        let user = client.get("/api/auth/user").await;
        let user_id =
            user.body["data"]["id"].as_str().unwrap_or_else(|| panic!("no user id: {}", user.body)).to_string();
        for value in [workspace_id, user_id.as_str(), role] {
            assert!(value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "not an id: {value}");
        }
        self.sql(&format!(
            "INSERT INTO workspace_members (workspace_id, user_id, role, created_at) \
             VALUES ('{workspace_id}', '{user_id}', '{role}', 0)"
        ));
        client.with_header("X-Workspace-Id", workspace_id)
    }

    /// A client authenticating with a new API key the operator made at the command line for the
    /// admin's workspace: a principal of its own, acting for no user (a key a user makes acts
    /// for that user, so it cannot approve that user's requests).
    pub async fn operator_key_client(&self, scopes: &[&str]) -> Client {
        let admin = self.admin().await;
        let user = admin.get("/api/auth/user").await;
        let workspace = user.body["data"]["currentWorkspaceId"].as_str().expect("current workspace").to_string();
        let key = self
            .cli(&["api-key", "create", "--workspace", &workspace, "--name", "operator", "--scopes", &scopes.join(",")])
            .expect("trellis api-key create");
        Client::new(self, key["key"].as_str().map(str::to_string))
    }

    /// A client authenticating with a new API key of the admin's workspace.
    pub async fn key_client(&self, scopes: &[&str]) -> Client {
        let admin = self.admin().await;
        let res = admin.post("/api/api-keys", json!({ "name": "test", "scopes": scopes })).await;
        assert_eq!(res.status, 201, "{}", res.body);
        Client::new(self, res.body["data"]["key"].as_str().map(str::to_string))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response with its JSON body (or `Value::Null`) and raw bytes.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub bytes: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the spec §7 error shape and returns the code.
    pub fn error_code(&self) -> &str {
        let code = self.body["error"]["code"].as_str();
        assert!(code.is_some() && self.body["error"]["message"].is_string(), "not an error body: {}", self.body);
        code.unwrap_or_default()
    }
}

/// An HTTP client bound to one server, with a cookie jar, an optional API key and
/// optional extra headers.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    headers: Vec<(String, String)>,
}

impl Client {
    pub fn new(server: &Server, api_key: Option<String>) -> Client {
        let http = reqwest::Client::builder().cookie_store(true).build().expect("client");
        Client { http, base_url: server.base_url.clone(), api_key, headers: Vec::new() }
    }

    pub fn with_header(&self, name: &str, value: &str) -> Client {
        let mut client = self.clone();
        client.headers.push((name.to_string(), value.to_string()));
        client
    }

    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    pub async fn send(&self, builder: reqwest::RequestBuilder) -> Response {
        let mut builder = builder;
        if let Some(key) = &self.api_key {
            builder = builder.header("X-API-Key", key);
        }
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        let res = builder.send().await.expect("request");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let bytes = res.bytes().await.expect("body").to_vec();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Response { status, headers, body, bytes }
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{}", self.base_url, path))
    }

    pub async fn get(&self, path: &str) -> Response {
        self.send(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn delete(&self, path: &str) -> Response {
        self.send(self.request(reqwest::Method::DELETE, path)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Response {
        self.send(self.request(reqwest::Method::POST, path).json(&body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Response {
        self.send(self.request(reqwest::Method::PUT, path).json(&body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Response {
        self.send(self.request(reqwest::Method::PATCH, path).json(&body)).await
    }

    /// POST with a raw body and content type.
    pub async fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> Response {
        self.send(self.request(reqwest::Method::POST, path).header("content-type", content_type).body(body)).await
    }

    /// Registers a PEM and returns the created certificate's `data`.
    pub async fn register(&self, pem: &str) -> Value {
        let res = self.post("/api/certificates", json!({ "certificate": pem })).await;
        assert_eq!(res.status, 201, "register failed: {}", res.body);
        res.body["data"].clone()
    }
}

/// Spawns `trellis serve` with `env` and waits for its listening address.
fn spawn_serve(env: &[(String, String)]) -> anyhow::Result<(Child, String, Arc<CapturedLog>)> {
    let mut command = Command::new(trellis_binary());
    command.arg("serve").env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().context("spawn trellis")?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let log = Arc::new(CapturedLog::default());
    let captured = log.clone();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(mut lines) = captured.lines.lock() {
                lines.push(line.clone());
            }
            captured.grew.notify_all();
            if !sent {
                if let Ok(event) = serde_json::from_str::<Value>(&line) {
                    if event["message"] == "listening" {
                        let _ = tx.send(Ok(event["address"].as_str().unwrap_or_default().to_string()));
                        sent = true;
                        continue;
                    }
                }
                if line.starts_with("Error:") {
                    let _ = tx.send(Err(line.clone()));
                }
            }
            if std::env::var("TRELLIS_TEST_LOGS").is_ok() {
                eprintln!("[server] {line}");
            }
        }
    });
    // A first start installs the first-party plugins, which compiles them unless the build tree's
    // cache has them: on a fresh clone the first servers of a run (several at once, beside the
    // other tests) compile them all, which took over 30 s in a loaded CI run.
    let address = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Ok(address)) => address,
        Ok(Err(line)) => {
            let _ = child.kill();
            bail!("trellis failed to start: {line}")
        }
        Err(_) => {
            let _ = child.kill();
            bail!("trellis did not report a listening address within 120 s")
        }
    };
    Ok((child, format!("http://{address}"), log))
}
