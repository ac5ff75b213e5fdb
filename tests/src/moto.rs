//! A local AWS for tests: moto's server (`scripts/moto.sh` installs it into target/venv-moto)
//! on a free loopback port, with IAM enforced: every request after the setup's first three must
//! carry a valid SigV4 signature of a known key whose policy allows the action.
//! tests/moto/setup_pca.py then creates an active root private CA, IAM users and a role. Killed
//! on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::pebble::free_port;
use crate::workspace_root;

/// The region the tests use.
pub const REGION: &str = "eu-west-1";

/// A running moto server with a private CA set up.
pub struct Moto {
    child: Child,
    log: tempfile::NamedTempFile,
    /// `http://127.0.0.1:<port>`: ACM PCA, IAM and STS all answer here.
    pub url: String,
    /// What tests/moto/setup_pca.py printed: `caArn`, `pendingCaArn`, `rootPem`, `roleArn`, and
    /// `issuer` / `bystander` / `assumer` keys (`accessKeyId`, `secretAccessKey`).
    pub setup: Value,
}

fn venv() -> PathBuf {
    workspace_root().join("target/venv-moto/bin")
}

impl Moto {
    /// Starts moto and runs the setup script.
    pub fn start() -> Moto {
        let server = venv().join("moto_server");
        assert!(server.exists(), "{} is missing: run scripts/moto.sh (make test does)", server.display());
        let port = free_port();
        let log = tempfile::NamedTempFile::new().expect("log file");
        let child = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // IAM is enforced after the setup script's first three requests (see its docstring).
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "3")
            .env("MOTO_ALLOW_NONEXISTENT_REGION", "false")
            .stdout(log.reopen().expect("log"))
            .stderr(log.reopen().expect("log"))
            .spawn()
            .expect("moto_server starts");
        let url = format!("http://127.0.0.1:{port}");
        let mut moto = Moto { child, log, url, setup: Value::Null };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not listen on {port}: {}", moto.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = Command::new(venv().join("python"))
            .arg(workspace_root().join("tests/moto/setup_pca.py"))
            .args([&moto.url, REGION])
            .stderr(Stdio::piped())
            .output()
            .expect("setup_pca.py runs");
        assert!(out.status.success(), "setup_pca.py: {}\nmoto: {}", String::from_utf8_lossy(&out.stderr), moto.log());
        moto.setup = serde_json::from_slice(&out.stdout).expect("setup_pca.py prints JSON");
        moto
    }

    /// moto's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// A member of the setup as text.
    pub fn get(&self, pointer: &str) -> String {
        self.setup.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("setup has {pointer}")).to_owned()
    }

    /// moto's whole state (`/moto-api/data.json`), for assertions on what the CA recorded.
    pub fn state(&self) -> Value {
        let out = Command::new("curl")
            .args(["-sS", "--fail", &format!("{}/moto-api/data.json", self.url)])
            .output()
            .expect("curl runs");
        assert!(out.status.success(), "moto state: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("moto state is JSON")
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
