//! A real ACME CA for tests: Debian's `pebble` with `pebble-challtestsrv` as its DNS server,
//! each on free loopback ports, Pebble serving a fresh rcgen certificate. Validation is real
//! (no `PEBBLE_VA_ALWAYS_VALID`): HTTP-01 requests go to `127.0.0.1:<http_port>` (challtestsrv
//! answers every A query with 127.0.0.1 and no AAAA), DNS-01 lookups to challtestsrv, whose
//! TXT records a test (or Trellis's `challtestsrv` DNS provider) sets through its management API.
//! Both processes are killed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct PebbleOptions {
    /// The port Pebble's VA connects to for HTTP-01 (Trellis's `TRELLIS_ACME_HTTP01_LISTEN`).
    pub http_port: u16,
    /// External Account Binding keys (kid, base64url MAC key); when set, EAB is required.
    pub eab_keys: Vec<(String, String)>,
    /// `PEBBLE_WFE_NONCEREJECT`: the percentage of good nonces Pebble refuses with badNonce
    /// (`None`: Pebble's default).
    pub nonce_reject_percent: Option<u32>,
}

/// A running Pebble and challtestsrv.
pub struct Pebble {
    pebble: Child,
    challtestsrv: Child,
    dir: tempfile::TempDir,
    /// How Pebble was started (`restart` starts it the same way, on the same ports).
    command: Vec<String>,
    nonce_reject_percent: Option<u32>,
    ports: Vec<u16>,
    /// `https://127.0.0.1:<port>/dir`.
    pub directory_url: String,
    /// `https://127.0.0.1:<port>` (roots, intermediates).
    pub management_url: String,
    /// challtestsrv's management API, `http://127.0.0.1:<port>`.
    pub challtestsrv_url: String,
    /// PEM of the certificate Pebble serves (a trust anchor of its own).
    pub tls_cert_pem: String,
}

/// A port nothing listens on right now.
/// A port for a peer that must be told its port before it listens (Pebble's HTTP-01 port, the
/// service's challenge listener). Taken below Linux's ephemeral range (32768-60999), which is
/// where `bind(0)` and every outgoing connection of the parallel tests draw from: a port found
/// free by `bind(0)` and released could be handed to another test before its owner listens on it.
/// Tests run one per process, so the process id spreads them over the range; a port in use is
/// skipped.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 10_000;
    const SPAN: u32 = 20_000;
    let start = std::process::id().wrapping_mul(97);
    for _ in 0..SPAN {
        let offset = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let Ok(port) = u16::try_from(FIRST + offset) else { continue };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

fn binary(name: &str) -> PathBuf {
    let path = PathBuf::from("/usr/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: install Debian's `pebble` package (scripts/install-deps.sh test)",
        path.display()
    );
    path
}

impl Pebble {
    /// Starts both and waits until Pebble's directory answers.
    pub fn start(options: PebbleOptions) -> Pebble {
        let dir = tempfile::tempdir().expect("temp dir");
        let certified =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("pebble cert");
        let tls_cert_pem = certified.cert.pem();
        let cert_path = dir.path().join("cert.pem");
        let key_path = dir.path().join("key.pem");
        std::fs::write(&cert_path, &tls_cert_pem).expect("write cert");
        std::fs::write(&key_path, certified.key_pair.serialize_pem()).expect("write key");

        let (dns_port, ctl_port) = (free_port(), free_port());
        let challtestsrv = Command::new(binary("pebble-challtestsrv"))
            .args(["-dns01", &format!("127.0.0.1:{dns_port}"), "-management", &format!("127.0.0.1:{ctl_port}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv starts");

        let (listen, management, tls_port) = (free_port(), free_port(), free_port());
        let mut config = json!({
            "listenAddress": format!("127.0.0.1:{listen}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": cert_path,
            "privateKey": key_path,
            "httpPort": options.http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": !options.eab_keys.is_empty(),
        });
        if !options.eab_keys.is_empty() {
            config["externalAccountMACKeys"] = options
                .eab_keys
                .iter()
                .map(|(kid, key)| (kid.clone(), json!(key)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        let config_path = dir.path().join("pebble-config.json");
        std::fs::write(&config_path, json!({ "pebble": config }).to_string()).expect("write config");
        let command = vec![
            "-config".to_string(),
            config_path.display().to_string(),
            "-dnsserver".to_string(),
            format!("127.0.0.1:{dns_port}"),
        ];
        let pebble = spawn_pebble(&dir, &command, options.nonce_reject_percent);

        let started = Pebble {
            pebble,
            challtestsrv,
            dir,
            command,
            nonce_reject_percent: options.nonce_reject_percent,
            ports: vec![listen, management],
            directory_url: format!("https://127.0.0.1:{listen}/dir"),
            management_url: format!("https://127.0.0.1:{management}"),
            challtestsrv_url: format!("http://127.0.0.1:{ctl_port}"),
            tls_cert_pem,
        };
        started.wait_until_listening(&[listen, management, ctl_port]);
        started
    }

    fn wait_until_listening(&self, ports: &[u16]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for port in ports {
            while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
                assert!(Instant::now() < deadline, "pebble did not listen on {port}: {}", self.log());
                std::thread::sleep(Duration::from_millis(25));
            }
        }
    }

    /// Path of a PEM file with Pebble's TLS certificate (for `TRELLIS_PLUGIN_CA_BUNDLE`).
    pub fn tls_bundle_path(&self) -> String {
        self.dir.path().join("cert.pem").display().to_string()
    }

    /// Pebble's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }

    /// GET over HTTPS trusting Pebble's certificate (curl: the test client speaks no TLS).
    pub fn get(&self, url: &str) -> String {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert", &self.tls_bundle_path(), url])
            .output()
            .expect("curl runs");
        assert!(out.status.success(), "GET {url}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Pebble's issuing root, PEM (`/roots/0` on the management interface).
    pub fn root_pem(&self) -> String {
        self.get(&format!("{}/roots/0", self.management_url))
    }

    /// Stops Pebble (the directory becomes unreachable); challtestsrv keeps running.
    pub fn stop(&mut self) {
        let _ = self.pebble.kill();
        let _ = self.pebble.wait();
    }

    /// Starts Pebble again as before, on the same ports (the directory is back; Pebble's
    /// accounts, orders and roots are new).
    pub fn restart(&mut self) {
        self.stop();
        self.pebble = spawn_pebble(&self.dir, &self.command, self.nonce_reject_percent);
        self.wait_until_listening(&self.ports.clone());
    }
}

/// Pebble with `args`, its output appended to `pebble.log` in `dir`.
fn spawn_pebble(dir: &tempfile::TempDir, args: &[String], nonce_reject_percent: Option<u32>) -> Child {
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.path().join("pebble.log")).expect("log file");
    let mut command = Command::new(binary("pebble"));
    command
        .args(args)
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env_remove("PEBBLE_VA_ALWAYS_VALID")
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    if let Some(percent) = nonce_reject_percent {
        command.env("PEBBLE_WFE_NONCEREJECT", percent.to_string());
    }
    command.spawn().expect("pebble starts")
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in [&mut self.pebble, &mut self.challtestsrv] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// pebble-challtestsrv alone, as a DNS server for a validator other than Pebble's (the ACME
/// server's tests point `TRELLIS_ACME_DNS_RESOLVER` at it): every A query answers 127.0.0.1,
/// no AAAA, and TXT records are set through its management API. Killed on drop.
pub struct ChallTestSrv {
    child: Child,
    /// `127.0.0.1:<port>` of its DNS server.
    pub dns_address: String,
    /// Its management API, `http://127.0.0.1:<port>`.
    pub management_url: String,
}

impl ChallTestSrv {
    pub fn start() -> ChallTestSrv {
        let (dns_port, ctl_port) = (free_port(), free_port());
        let child = Command::new(binary("pebble-challtestsrv"))
            .args(["-dns01", &format!("127.0.0.1:{dns_port}"), "-management", &format!("127.0.0.1:{ctl_port}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", ctl_port)).is_err() {
            assert!(Instant::now() < deadline, "pebble-challtestsrv did not listen on {ctl_port}");
            std::thread::sleep(Duration::from_millis(25));
        }
        ChallTestSrv {
            child,
            dns_address: format!("127.0.0.1:{dns_port}"),
            management_url: format!("http://127.0.0.1:{ctl_port}"),
        }
    }
}

impl Drop for ChallTestSrv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
