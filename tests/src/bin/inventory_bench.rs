//! `inventory-bench`: measures the inventory figures of issue 2 against the real release
//! binary (`target/release/trellis serve`), over HTTP, on an ephemeral port, with a
//! temporary data directory per server start.
//!
//! Figures (targets in brackets):
//! * register throughput with 8 concurrent clients, certificates/s   [>= 1,500/s]
//! * list p99 with `search` + `status` filters at 1,000,000 rows, ms [<= 25 ms]
//! * idle resident memory of `trellis serve`, MiB                    [<= 60 MiB]
//!
//! With `--only console`, the console figures of issue 26 on the list figure's seeded
//! database (see `inventory_bench/console.rs`):
//! * dashboard and first inventory page (newest first, soonest expiry first), p99 server
//!   time seen by the client over loopback, ms                    [<= 50 ms]
//! * their page weight, HTML + CSS + JS, KB                        [<= 100 KB]
//!
//! Every figure is measured `--runs` times (default 5, env `INVENTORY_BENCH_RUNS`);
//! the summary prints median, min and max, followed by the raw samples.
//! Run `inventory-bench --help` for the knobs. `make bench-inventory` builds and runs it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::Value;
use trellis_tests::bench::{clock_ticks, load_average, max, median, min, percentile, sorted};

#[path = "inventory_bench/console.rs"]
mod console;

const HELP: &str = "\
inventory-bench: inventory figures of issue 2 against target/release/trellis

USAGE: inventory-bench [OPTIONS]

OPTIONS (environment variable in brackets):
  --runs N              runs per figure, median reported      [INVENTORY_BENCH_RUNS, default 5]
  --only LIST           comma list of rss,register,list,console [INVENTORY_BENCH_ONLY,
                        default rss,register,list]
  --rows N              rows seeded for the list figure       [INVENTORY_BENCH_ROWS, default 1000000]
  --register-certs N    certificates POSTed per register run  [default 20000]
  --register-clients N  concurrent register clients           [default 8]
  --list-requests N     measured list requests per run        [default 2400]
  --list-clients N      concurrent list clients               [default 4]
  --console-requests N  console: measured requests per page per run [default 200]
  --list-seconds S      time budget per list run: stop issuing requests after S
                        seconds even if fewer than N were sent [INVENTORY_BENCH_LIST_SECONDS, default 90]
  --trellis PATH        server binary                         [TRELLIS_BIN, default: next to this binary]
  --json PATH           also write all samples as JSON
  --with-status-only    add a status-only reference class to the list mix (not part of
                        the search+status figure; today it is slow enough to crowd it out)
  --with-small-tenant   add a reference class: broad searches + status by a second
                        workspace of 1,000 certificates, older than every row of the big one
                        (tenant isolation of the search index; not part of the figure)
  --keep                keep the temporary directories (printed)
  --seeded-dir DIR      list figure: seed into DIR once and reuse it on later invocations
                        (a `bench.json` there remembers the workspace and key)
  -h, --help            this text
";

// ---------------------------------------------------------------------------------------
// Options

struct Options {
    runs: usize,
    only: Vec<String>,
    rows: u64,
    register_certs: usize,
    register_clients: usize,
    list_requests: usize,
    console_requests: usize,
    list_seconds: f64,
    status_only: bool,
    small_tenant: bool,
    list_clients: usize,
    trellis: PathBuf,
    json: Option<PathBuf>,
    keep: bool,
    seeded_dir: Option<PathBuf>,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => {
            text.trim().parse().map_err(|_| anyhow!("{name}: `{text}` is not a valid value"))
        }
        _ => Ok(default),
    }
}

fn parse_options() -> Result<Options> {
    let default_trellis = std::env::var_os("TRELLIS_BIN")
        .map(PathBuf::from)
        .or_else(|| std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join("trellis"))))
        .unwrap_or_else(|| PathBuf::from("target/release/trellis"));
    let mut options = Options {
        runs: env_or("INVENTORY_BENCH_RUNS", 5)?,
        only: env_or("INVENTORY_BENCH_ONLY", String::from("rss,register,list"))?
            .split(',')
            .map(|s| s.trim().to_string())
            .collect(),
        rows: env_or("INVENTORY_BENCH_ROWS", 1_000_000)?,
        register_certs: 20_000,
        register_clients: 8,
        list_requests: 2_400,
        console_requests: 200,
        list_seconds: env_or("INVENTORY_BENCH_LIST_SECONDS", 90.0)?,
        status_only: false,
        small_tenant: false,
        list_clients: 4,
        trellis: default_trellis,
        json: None,
        keep: false,
        seeded_dir: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => args.next().ok_or_else(|| anyhow!("{name} needs a value")),
            }
        };
        fn num<T: std::str::FromStr>(flag: &str, text: String) -> Result<T> {
            text.parse().map_err(|_| anyhow!("{flag}: `{text}` is not a number"))
        }
        match flag.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            "--runs" => options.runs = num(&flag, value(&flag)?)?,
            "--only" => options.only = value(&flag)?.split(',').map(|s| s.trim().to_string()).collect(),
            "--rows" => options.rows = num(&flag, value(&flag)?)?,
            "--register-certs" => options.register_certs = num(&flag, value(&flag)?)?,
            "--register-clients" => options.register_clients = num(&flag, value(&flag)?)?,
            "--list-requests" => options.list_requests = num(&flag, value(&flag)?)?,
            "--console-requests" => options.console_requests = num(&flag, value(&flag)?)?,
            "--list-seconds" => options.list_seconds = num(&flag, value(&flag)?)?,
            "--list-clients" => options.list_clients = num(&flag, value(&flag)?)?,
            "--trellis" => options.trellis = PathBuf::from(value(&flag)?),
            "--json" => options.json = Some(PathBuf::from(value(&flag)?)),
            "--keep" => options.keep = true,
            "--seeded-dir" => options.seeded_dir = Some(PathBuf::from(value(&flag)?)),
            "--with-status-only" => options.status_only = true,
            "--with-small-tenant" => options.small_tenant = true,
            other => bail!("unknown argument `{other}`\n\n{HELP}"),
        }
    }
    for figure in &options.only {
        if !["rss", "register", "list", "console"].contains(&figure.as_str()) {
            bail!("--only: `{figure}` is none of rss, register, list, console");
        }
    }
    if options.runs == 0
        || options.register_clients == 0
        || options.list_clients == 0
        || options.list_requests == 0
        || options.console_requests == 0
    {
        bail!("--runs, --register-clients, --list-clients, --list-requests and --console-requests must be positive");
    }
    Ok(options)
}

// ---------------------------------------------------------------------------------------
// The request mix

/// Deterministic xorshift64* so that runs issue the same request mix.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Samples of one figure across runs, in display order.
#[derive(Default)]
struct Samples {
    order: Vec<String>,
    values: BTreeMap<String, Vec<f64>>,
    meta: BTreeMap<String, (String, String)>, // unit, target
}

impl Samples {
    fn declare(&mut self, name: &str, unit: &str, target: &str) {
        if !self.meta.contains_key(name) {
            self.order.push(name.to_string());
            self.meta.insert(name.to_string(), (unit.to_string(), target.to_string()));
        }
    }
    fn push(&mut self, name: &str, unit: &str, target: &str, value: f64) {
        self.declare(name, unit, target);
        self.values.entry(name.to_string()).or_default().push(value);
    }
}

// ---------------------------------------------------------------------------------------
// Server process

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding an ephemeral port")?;
    Ok(listener.local_addr()?.port())
}

/// A temporary data directory with its SQLite database, a user, a workspace and an API key.
struct Instance {
    dir: PathBuf,
    _guard: Option<tempfile::TempDir>,
    db: PathBuf,
    workspace_id: String,
    api_key: String,
    /// A second, small workspace (`SMALL_TENANT_ROWS` certificates) and its key.
    small_workspace_id: String,
    small_api_key: String,
}

/// Certificates of the second workspace, seeded before (so older than) the big one's.
const SMALL_TENANT_ROWS: u64 = 1_000;

fn server_env(cmd: &mut tokio::process::Command, dir: &Path, db: &Path, port: u16) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TRELLIS_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("TRELLIS_LISTEN", format!("127.0.0.1:{port}"))
        .env("TRELLIS_DATABASE_URL", format!("sqlite://{}", db.display()))
        .env("TRELLIS_DATA_DIR", dir)
        .env("TRELLIS_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn");
}

async fn trellis_cli(trellis: &Path, dir: &Path, db: &Path, args: &[&str]) -> Result<Value> {
    let mut cmd = tokio::process::Command::new(trellis);
    server_env(&mut cmd, dir, db, 0);
    cmd.env("TRELLIS_LISTEN", "127.0.0.1:1");
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {} {}", trellis.display(), args.join(" ")))?;
    if !out.status.success() {
        bail!("`trellis {}` failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!("`trellis {}` printed no JSON: {}", args.join(" "), String::from_utf8_lossy(&out.stdout))
    })
}

/// Creates the database (migrations), a user with workspace `default`, and an API key,
/// through the binary's own admin subcommands.
async fn new_instance(trellis: &Path, keep: bool) -> Result<Instance> {
    let guard =
        tempfile::Builder::new().prefix("trellis-bench-").tempdir().context("creating a temporary directory")?;
    let dir = guard.path().to_path_buf();
    let guard = if keep {
        eprintln!("  keeping {}", dir.display());
        let _ = guard.keep();
        None
    } else {
        Some(guard)
    };
    new_instance_in(trellis, dir, guard).await
}

async fn new_instance_in(trellis: &Path, dir: PathBuf, guard: Option<tempfile::TempDir>) -> Result<Instance> {
    let db = dir.join("trellis.db");
    let (workspace_id, api_key) = new_tenant(trellis, &dir, &db, "bench@example.com").await?;
    let (small_workspace_id, small_api_key) = new_tenant(trellis, &dir, &db, "small-tenant@example.com").await?;
    Ok(Instance { dir, _guard: guard, db, workspace_id, api_key, small_workspace_id, small_api_key })
}

/// A user with a new workspace, and an API key of that workspace.
async fn new_tenant(trellis: &Path, dir: &Path, db: &Path, email: &str) -> Result<(String, String)> {
    let user = trellis_cli(trellis, dir, db, &["user", "create", "--email", email, "--password", "bench-password-123"])
        .await?;
    let workspace_id =
        user["workspaceId"].as_str().ok_or_else(|| anyhow!("user create printed no workspaceId: {user}"))?.to_string();
    let key = trellis_cli(
        trellis,
        dir,
        db,
        &[
            "api-key",
            "create",
            "--workspace",
            &workspace_id,
            "--name",
            "inventory-bench",
            "--scopes",
            "certificates:read,certificates:write",
        ],
    )
    .await?;
    let api_key = key["key"].as_str().ok_or_else(|| anyhow!("api-key create printed no key: {key}"))?.to_string();
    Ok((workspace_id, api_key))
}

struct Server {
    child: tokio::process::Child,
    pid: u32,
    base: String,
    log: PathBuf,
}

impl Server {
    async fn start(trellis: &Path, instance: &Instance) -> Result<Server> {
        let port = free_port()?;
        let log = instance.dir.join(format!("serve-{port}.log"));
        let log_file = std::fs::File::create(&log)?;
        let mut cmd = tokio::process::Command::new(trellis);
        server_env(&mut cmd, &instance.dir, &instance.db, port);
        cmd.arg("serve").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log_file)).kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("starting {} serve", trellis.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("server exited at once"))?;
        let mut server = Server { child, pid, base: format!("http://127.0.0.1:{port}"), log };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("server exited with {status}:\n{}", self.log_tail());
            }
            if let Ok(response) = client.get(format!("{}/ready", self.base)).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("server not ready after 60 s:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// CPU time (user + system) the server has used so far, in seconds.
    fn cpu_seconds(&self) -> Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).context("reading /proc/<pid>/stat")?;
        // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        Ok((ticks(11) + ticks(12)) / clock_ticks())
    }

    /// Resident set size (VmRSS) in MiB.
    fn rss_mib(&self) -> Result<f64> {
        self.status_mib("VmRSS:")
    }

    /// Resident memory of the process's own (anonymous) allocations. VmRSS also counts the
    /// database file pages SQLite reads through its memory map: page cache shared with the
    /// kernel, counted once per mapping connection, and reclaimable.
    fn anon_mib(&self) -> Result<f64> {
        self.status_mib("RssAnon:")
    }

    fn status_mib(&self, field: &str) -> Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .context("reading /proc/<pid>/status (Linux only)")?;
        let kib: f64 = status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow!("no {field} in /proc/{}/status", self.pid))?;
        Ok(kib / 1024.0)
    }

    /// SIGTERM (graceful shutdown), then SIGKILL after 15 s.
    async fn stop(mut self) -> Result<()> {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.pid.to_string()]).status();
        match tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    eprintln!("  warning: server exited with {status}:\n{}", self.log_tail());
                }
            }
            Err(_) => {
                eprintln!("  warning: server ignored SIGTERM for 15 s; killing it");
                self.child.kill().await?;
            }
        }
        Ok(())
    }

    /// Error lines the server logged (level ERROR); an honest run has none.
    fn logged_errors(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"level\":\"ERROR\""))
            .count()
    }
}

fn client() -> Result<reqwest::Client> {
    // One client per simulated caller: its own keep-alive connection.
    Ok(reqwest::Client::builder().pool_max_idle_per_host(1).timeout(Duration::from_secs(60)).build()?)
}

// ---------------------------------------------------------------------------------------
// Certificates

/// Distinct leaf certificates (ECDSA P-256, one shared key, distinct CN and serial, so
/// distinct fingerprints) signed by one bench CA. Generated before any timing.
fn generate_certificates(count: usize) -> Result<Vec<String>> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, SerialNumber,
        PKCS_ECDSA_P256_SHA256,
    };
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    let mut ca_dn = DistinguishedName::new();
    ca_dn.push(DnType::OrganizationName, "Trellis Bench");
    ca_dn.push(DnType::CommonName, "Trellis Bench Issuing CA");
    ca_params.distinguished_name = ca_dn;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let now = time::OffsetDateTime::now_utc();
    let stamp = now.unix_timestamp();
    let mut pems = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("bench-{stamp}-{i}.reg.example.com");
        let mut params = CertificateParams::new(vec![name.clone()])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.serial_number = Some(SerialNumber::from((stamp as u64) << 24 | i as u64));
        params.not_before = now - time::Duration::days(1 + (i % 300) as i64);
        params.not_after = now + time::Duration::days(1 + (i % 400) as i64);
        pems.push(params.signed_by(&leaf_key, &ca, &ca_key)?.pem());
    }
    Ok(pems)
}

// ---------------------------------------------------------------------------------------
// Figure 1: idle RSS

async fn run_rss(options: &Options, certs: &[String], samples: &mut Samples) -> Result<()> {
    for run in 1..=options.runs {
        let instance = new_instance(&options.trellis, options.keep).await?;
        let server = Server::start(&options.trellis, &instance).await?;
        let client = client()?;
        // A handful of requests: probes, a few registrations, a list, a read.
        for path in ["/health", "/ready"] {
            client.get(format!("{}{path}", server.base)).send().await?.error_for_status()?;
        }
        for pem in certs.iter().skip(run * 10).take(5) {
            let response = client
                .post(format!("{}/api/certificates", server.base))
                .header("X-API-Key", &instance.api_key)
                .json(&serde_json::json!({ "certificate": pem }))
                .send()
                .await?;
            if response.status().as_u16() != 201 {
                bail!("register returned {}", response.status());
            }
        }
        let list: Value = client
            .get(format!("{}/api/certificates?limit=50", server.base))
            .header("X-API-Key", &instance.api_key)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if list["total"].as_i64() != Some(5) {
            bail!("expected 5 certificates, list says {}", list["total"]);
        }
        drop(client);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = server.rss_mib()?;
        eprintln!("  rss run {run}/{}: {rss:.1} MiB", options.runs);
        samples.push("idle RSS, fresh data dir", "MiB", "<= 60", rss);
        server.stop().await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Figure 2: register throughput

async fn run_register(options: &Options, certs: &Arc<Vec<String>>, samples: &mut Samples) -> Result<()> {
    for run in 1..=options.runs {
        let instance = new_instance(&options.trellis, options.keep).await?;
        let server = Server::start(&options.trellis, &instance).await?;
        let url = format!("{}/api/certificates", server.base);
        let next = Arc::new(AtomicUsize::new(0));
        // Open every client's connection before the clock starts.
        let mut clients = Vec::new();
        for _ in 0..options.register_clients {
            let c = client()?;
            c.get(format!("{}/health", server.base)).send().await?.error_for_status()?;
            clients.push(c);
        }
        let load = load_average();
        let cpu_before = server.cpu_seconds()?;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in clients {
            let (certs, next, url, key) = (certs.clone(), next.clone(), url.clone(), instance.api_key.clone());
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut failures = 0usize;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(pem) = certs.get(i) else { break };
                    let t = Instant::now();
                    let response = c
                        .post(&url)
                        .header("X-API-Key", &key)
                        .json(&serde_json::json!({ "certificate": pem }))
                        .send()
                        .await;
                    match response {
                        Ok(r) if r.status().as_u16() == 201 => {
                            let _ = r.bytes().await;
                            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                        }
                        Ok(r) => {
                            failures += 1;
                            if failures <= 3 {
                                let status = r.status();
                                let body = r.text().await.unwrap_or_default();
                                eprintln!("  register failed: {status} {body}");
                            }
                        }
                        Err(err) => {
                            failures += 1;
                            if failures <= 3 {
                                eprintln!("  register failed: {err}");
                            }
                        }
                    }
                }
                (latencies, failures)
            }));
        }
        let mut latencies = Vec::new();
        let mut failures = 0;
        for task in tasks {
            let (l, f) = task.await?;
            latencies.extend(l);
            failures += f;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = server.cpu_seconds()? - cpu_before;
        let ok = latencies.len();
        let rate = ok as f64 / elapsed;
        let latencies = sorted(&latencies);
        let rss = server.rss_mib()?;
        let errors = server.logged_errors();
        let log = server.log_tail();
        server.stop().await?;
        // The database must hold exactly what the server acknowledged (the list `total` is
        // capped, so ask SQLite itself).
        let stored: i64 = sqlite_query(&instance.db, "SELECT COUNT(*) FROM certificates")?.parse().unwrap_or(-1);
        eprintln!(
            "  register run {run}/{}: {ok} certs in {elapsed:.2} s = {rate:.0}/s; latency p50 {:.1} ms p99 {:.1} ms; {failures} failures; {stored} stored; rss after {rss:.1} MiB",
            options.runs,
            percentile(&latencies, 50.0),
            percentile(&latencies, 99.0)
        );
        if stored != ok as i64 {
            bail!("register run {run}: the server stored {stored} certificates but answered 201 {ok} times");
        }
        if failures > 0 {
            eprintln!("  warning: {failures} registrations failed (not counted in the throughput); server log:\n{log}");
        }
        if errors > 0 {
            eprintln!("  warning: the server logged {errors} ERROR lines");
        }
        let target = format!(">= 1500 ({} clients)", options.register_clients);
        samples.push("register throughput", "certs/s", &target, rate);
        samples.push("register failures (non-201)", "", "0", failures as f64);
        samples.push("register latency p50", "ms", "", percentile(&latencies, 50.0));
        samples.push("register latency p99", "ms", "", percentile(&latencies, 99.0));
        samples.push("register: server CPU per certificate", "ms", "", cpu * 1000.0 / ok.max(1) as f64);
        samples.push("register: server CPU utilisation", "cores", "(2 = all)", cpu / elapsed);
        samples.push("register: load average at start", "", "", load);
        samples.push("RSS after register run", "MiB", "", rss);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Figure 3: list latency at 1,000,000 rows

const TEAMS: [&str; 40] = [
    "payments",
    "identity",
    "checkout",
    "billing",
    "catalog",
    "inventory",
    "shipping",
    "ledger",
    "fraud",
    "messaging",
    "notifier",
    "analytics",
    "reporting",
    "gateway",
    "storage",
    "backup",
    "monitoring",
    "logging",
    "recommender",
    "pricing",
    "loyalty",
    "onboarding",
    "compliance",
    "treasury",
    "scheduler",
    "mailer",
    "crawler",
    "indexer",
    "geoloc",
    "media",
    "thumbnails",
    "transcoder",
    "chat",
    "voice",
    "kyc",
    "ads",
    "partners",
    "support",
    "warehouse",
    "ml-platform",
];

/// (issuer DN as x509-parser prints it, the term a user would search for).
const ISSUERS: [(&str, &str); 20] = [
    ("C=US, O=Let's Encrypt, CN=R11", "Let's Encrypt"),
    ("C=US, O=DigiCert Inc, CN=DigiCert Global G2 TLS RSA SHA256 2020 CA1", "DigiCert"),
    ("C=GB, O=Sectigo Limited, CN=Sectigo RSA Domain Validation Secure Server CA", "Sectigo"),
    ("C=BE, O=GlobalSign nv-sa, CN=GlobalSign GCC R3 DV TLS CA 2020", "GlobalSign"),
    ("C=US, O=Amazon, CN=Amazon RSA 2048 M02", "Amazon"),
    ("C=US, O=Google Trust Services, CN=WR2", "Google Trust"),
    ("C=US, O=Microsoft Corporation, CN=Microsoft Azure RSA TLS Issuing CA 03", "Microsoft"),
    ("C=US, O=Entrust, Inc., CN=Entrust Certification Authority - L1K", "Entrust"),
    ("C=US, O=GoDaddy.com, Inc., CN=Go Daddy Secure Certificate Authority - G2", "GoDaddy"),
    ("C=AT, O=ZeroSSL, CN=ZeroSSL RSA Domain Secure Site CA", "ZeroSSL"),
    ("C=US, O=Cloudflare, Inc., CN=Cloudflare Inc ECC CA-3", "Cloudflare"),
    ("O=HashiCorp, CN=Vault PKI Intermediate", "Vault PKI"),
    ("O=Acme Corp, CN=Acme Internal Issuing CA 1", "Acme Internal"),
    ("O=Initech, CN=Initech Root CA", "Initech"),
    ("C=US, O=SSL Corporation, CN=SSL.com RSA SSL subCA", "SSL.com"),
    ("O=Smallstep Labs, CN=Smallstep Intermediate CA", "Smallstep"),
    ("C=DE, O=D-Trust GmbH, CN=D-TRUST SSL Class 3 CA 1 2009", "D-TRUST"),
    ("C=US, O=Apple Inc., CN=Apple Public Server RSA CA 12 - G1", "Apple"),
    ("O=Platform, CN=Kubernetes cert-manager CA", "cert-manager"),
    ("C=GB, O=Comodo CA Limited, CN=COMODO RSA Domain Validation Secure Server CA", "COMODO"),
];

const STATUSES: [&str; 4] = ["active", "expiring", "expired", "revoked"];

fn sql_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Seeds `rows` certificates into the workspace straight through the `sqlite3` CLI
/// (the server is not running), with the schema's FTS triggers in place. Returns seconds.
fn seed(instance: &Instance, rows: u64, pem: &str) -> Result<f64> {
    let mut sql = String::from(
        "PRAGMA synchronous = OFF;\nPRAGMA cache_size = -262144;\nPRAGMA temp_store = MEMORY;\n\
         CREATE TEMP TABLE bench_teams (i INTEGER PRIMARY KEY, name TEXT NOT NULL);\n\
         CREATE TEMP TABLE bench_issuers (i INTEGER PRIMARY KEY, dn TEXT NOT NULL);\n",
    );
    for (i, team) in TEAMS.iter().enumerate() {
        let _ = writeln!(sql, "INSERT INTO bench_teams VALUES ({i}, {});", sql_text(team));
    }
    for (i, (dn, _)) in ISSUERS.iter().enumerate() {
        let _ = writeln!(sql, "INSERT INTO bench_issuers VALUES ({i}, {});", sql_text(dn));
    }
    // The small tenant first: its rows are older than all of the big workspace's, the worst
    // case for a search that walks the index newest-first.
    sql.push_str(&seed_rows(&instance.small_workspace_id, SMALL_TENANT_ROWS, pem));
    sql.push_str(&seed_rows(&instance.workspace_id, rows, pem));
    sql.push_str("PRAGMA wal_checkpoint(TRUNCATE);\n");
    let started = Instant::now();
    let mut child = std::process::Command::new("sqlite3")
        .arg("-bail")
        .arg(&instance.db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running the sqlite3 CLI (apt-get install sqlite3)")?;
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("sqlite3 stdin"))?;
        stdin.write_all(sql.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("seeding failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(started.elapsed().as_secs_f64())
}

/// One transaction inserting `rows` certificates into `workspace_id` (temp tables
/// `bench_teams` and `bench_issuers` must exist).
fn seed_rows(workspace_id: &str, rows: u64, pem: &str) -> String {
    let now_ms = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
    let mut sql = String::new();
    // n = 1..rows. created_at increases with n (one per 30 s, ending now); expiry is spread
    // pseudo-randomly from 1 year ago to 2 years ahead; ~2% revoked; team = n mod 40;
    // issuer pseudo-random among 20. Rows already expired or expiring are marked as
    // notified, as the expiry scanner of a running instance would have left them; otherwise
    // the first start would spend minutes emitting ~360,000 backlog events.
    let _ = write!(
        sql,
        "BEGIN;\n\
         WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {rows}),\n\
         src AS (SELECT n, {now_ms} - 31536000000 + ((n * 982451653) % 94608000) * 1000 AS exp,\n\
                        {now_ms} - ({rows} - n) * 30000 AS created,\n\
                        CASE WHEN (n * 104729) % 997 < 20 THEN 1 ELSE 0 END AS rev,\n\
                        'svc-' || n || '.' || (SELECT name FROM bench_teams WHERE i = n % 40) || '.example.com' AS cn,\n\
                        (SELECT dn FROM bench_issuers WHERE i = ((n * 7907) % 1009) % 20) AS iss\n\
                 FROM seq)\n\
         INSERT INTO certificates (workspace_id, common_name, issuer, subject, serial_number, not_before, expires_at,\n\
             signature_algorithm, signature_hash, key_algorithm, key_size, fingerprint_sha256, usage_category,\n\
             subject_alt_names, is_ca, issuance_source, auto_renewal, location, metadata, revoked, revoked_at,\n\
             revocation_reason, certificate_pem, expiring_notified_at, expired_notified_at, created_at, updated_at)\n\
         SELECT {ws}, cn, iss, 'CN=' || cn, printf('%032X', n), exp - 7776000000, exp,\n\
             'SHA256-ECDSA', 'SHA-256', 'ECDSA', 256, printf('%064x', n), 'TLS',\n\
             '[\"DNS:' || cn || '\"]', 0, 'external', 0, NULL, '{{}}', rev,\n\
             CASE WHEN rev = 1 THEN created + 86400000 END, CASE WHEN rev = 1 THEN 'keyCompromise' END,\n\
             {pem}, CASE WHEN rev = 0 AND exp <= {now_ms} + 2592000000 THEN {now_ms} END,\n\
             CASE WHEN rev = 0 AND exp <= {now_ms} THEN {now_ms} END, created, created\n\
         FROM src;\n\
         -- The search index takes new rows at the commit (migration 0590), as the store does.\n\
         INSERT INTO certificates_search (rowid, common_name, issuer)\n\
             SELECT w.number * 1099511627776 + c.id, c.common_name, c.issuer\n\
             FROM certificates_search_pending p JOIN certificates c ON c.id = p.id JOIN workspaces w ON w.id = c.workspace_id;\n\
         DELETE FROM certificates_search_pending;\n\
         COMMIT;\n",
        ws = sql_text(workspace_id),
        pem = sql_text(pem),
    );
    sql
}

fn sqlite_query(db: &Path, sql: &str) -> Result<String> {
    let out =
        std::process::Command::new("sqlite3").arg("-bail").arg(db).arg(sql).output().context("running sqlite3")?;
    if !out.status.success() {
        bail!("sqlite3 `{sql}`: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Class {
    /// `svc-<5 digits>`: 11 rows before the status filter.
    Service,
    /// A team name: 2.5% of rows before the status filter.
    Team,
    /// An issuer name: ~5% of rows before the status filter.
    Issuer,
    /// Status filter only (reference; not part of the search+status figure).
    StatusOnly,
    /// A team or issuer name + status, searched by the small second workspace (reference).
    SmallTenant,
}

impl Class {
    const FIGURE: [Class; 3] = [Class::Service, Class::Team, Class::Issuer];

    /// Reference classes are measured beside the figure, not in it.
    fn in_figure(self) -> bool {
        Class::FIGURE.contains(&self)
    }
    fn name(self) -> &'static str {
        match self {
            Class::Service => "search=svc-NNNNN (11 rows) + status",
            Class::Team => "search=<team> (2.5%) + status",
            Class::Issuer => "search=<issuer> (5%) + status",
            Class::StatusOnly => "status only (reference)",
            Class::SmallTenant => "small workspace: search=<team|issuer> + status (reference)",
        }
    }
}

fn list_request(i: usize, rng: &mut Rng, rows: u64, classes: &[Class]) -> (Class, Vec<(&'static str, String)>) {
    let class = classes[i % classes.len()];
    let status = STATUSES[rng.below(4) as usize].to_string();
    let mut query = vec![("status", status), ("limit", "50".to_string())];
    match class {
        Class::Service => {
            let hi = rows.clamp(10_001, 99_999);
            let n = 10_000 + rng.below(hi - 10_000);
            query.push(("search", format!("svc-{n}")));
        }
        Class::Team => query.push(("search", TEAMS[rng.below(40) as usize].to_string())),
        Class::Issuer => query.push(("search", ISSUERS[rng.below(20) as usize].1.to_string())),
        Class::StatusOnly => {}
        Class::SmallTenant => query.push((
            "search",
            match rng.below(2) {
                0 => TEAMS[rng.below(40) as usize].to_string(),
                _ => ISSUERS[rng.below(20) as usize].1.to_string(),
            },
        )),
    }
    (class, query)
}

struct ListResult {
    class: Class,
    ms: f64,
    total: i64,
}

#[allow(clippy::too_many_arguments, reason = "the knobs of one load phase")]
async fn list_phase(
    server: &Server,
    instance: &Instance,
    requests: usize,
    clients: usize,
    rows: u64,
    seed: u64,
    budget: Duration,
    classes: &[Class],
) -> Result<Vec<ListResult>> {
    let deadline = Instant::now() + budget;
    let mut rng = Rng(seed);
    let plan: Vec<_> = (0..requests).map(|i| list_request(i, &mut rng, rows, classes)).collect();
    let plan = Arc::new(plan);
    let next = Arc::new(AtomicUsize::new(0));
    let url = format!("{}/api/certificates", server.base);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (plan, next, url, c) = (plan.clone(), next.clone(), url.clone(), client()?);
        let (key, small_key) = (instance.api_key.clone(), instance.small_api_key.clone());
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            loop {
                if Instant::now() >= deadline {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((class, query)) = plan.get(i) else {
                    break;
                };
                let t = Instant::now();
                let key = if *class == Class::SmallTenant { &small_key } else { &key };
                let response = c.get(&url).query(query).header("X-API-Key", key).send().await?;
                let status = response.status();
                let body = response.bytes().await?;
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if !status.is_success() {
                    bail!("list {query:?} returned {status}: {}", String::from_utf8_lossy(&body));
                }
                let value: Value = serde_json::from_slice(&body)?;
                let total = value["total"].as_i64().ok_or_else(|| anyhow!("no total"))?;
                results.push(ListResult { class: *class, ms, total });
            }
            Ok::<_, anyhow::Error>(results)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

/// The seeded instance of a `--seeded-dir` from an earlier invocation, if it has `rows` rows.
fn reuse_seeded(dir: &Path, rows: u64) -> Result<Option<Instance>> {
    let Ok(text) = std::fs::read_to_string(dir.join("bench.json")) else { return Ok(None) };
    let saved: Value = serde_json::from_str(&text).context("reading bench.json")?;
    let db = dir.join("trellis.db");
    let field = |name: &str| saved[name].as_str().map(str::to_string).ok_or_else(|| anyhow!("bench.json lacks {name}"));
    let counted =
        format!("SELECT COUNT(*) FROM certificates WHERE workspace_id = {}", sql_text(&field("workspaceId")?));
    if saved["rows"].as_u64() != Some(rows)
        || saved["smallApiKey"].is_null()
        || sqlite_query(&db, &counted)? != rows.to_string()
    {
        return Ok(None);
    }
    Ok(Some(Instance {
        dir: dir.to_path_buf(),
        _guard: None,
        db,
        workspace_id: field("workspaceId")?,
        api_key: field("apiKey")?,
        small_workspace_id: field("smallWorkspaceId")?,
        small_api_key: field("smallApiKey")?,
    }))
}

async fn run_list(options: &Options, certs: &[String], samples: &mut Samples) -> Result<()> {
    let instance = seeded_instance(options, certs, samples).await?;
    run_list_on(options, &instance, samples).await
}

/// The `--seeded-dir` instance of an earlier invocation when it has the rows, else a fresh one.
async fn seeded_instance(options: &Options, certs: &[String], samples: &mut Samples) -> Result<Instance> {
    if let Some(instance) =
        options.seeded_dir.as_deref().map(|dir| reuse_seeded(dir, options.rows)).transpose()?.flatten()
    {
        eprintln!("  reusing the seeded database in {}", instance.dir.display());
        return Ok(instance);
    }
    seed_instance(options, certs, samples).await
}

async fn seed_instance(options: &Options, certs: &[String], samples: &mut Samples) -> Result<Instance> {
    let instance = match &options.seeded_dir {
        Some(dir) => {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            new_instance_in(&options.trellis, dir.clone(), None).await?
        }
        None => new_instance(&options.trellis, options.keep).await?,
    };
    eprintln!("  seeding {} rows into {} ...", options.rows, instance.db.display());
    let pem = certs.first().ok_or_else(|| anyhow!("no certificate"))?;
    let seconds = seed(&instance, options.rows, pem)?;
    let db_bytes: u64 = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", instance.db.display())).ok())
        .map(|m| m.len())
        .sum();
    let count = sqlite_query(&instance.db, "SELECT COUNT(*) FROM certificates")?;
    // The FTS index (filled by the insert trigger) must answer for every row.
    let fts = sqlite_query(
        &instance.db,
        "SELECT COUNT(*) FROM certificates_search WHERE certificates_search MATCH '\"example.com\"'",
    )?;
    eprintln!(
        "  seeded {count} rows ({SMALL_TENANT_ROWS} of them in the small workspace) in {seconds:.1} s ({:.0} rows/s); FTS matches {fts}; database {:.0} MiB",
        options.rows as f64 / seconds,
        db_bytes as f64 / 1048576.0
    );
    if count != (options.rows + SMALL_TENANT_ROWS).to_string() || fts != count {
        bail!("seeding incomplete: {count} rows, FTS index answers {fts}");
    }
    samples.push("seed time (sqlite3 CLI, once)", "s", "", seconds);
    samples.push("database size after seeding", "MiB", "", db_bytes as f64 / 1048576.0);
    if let Some(dir) = &options.seeded_dir {
        let saved = serde_json::json!({"rows": options.rows, "workspaceId": instance.workspace_id, "apiKey": instance.api_key,
                "smallWorkspaceId": instance.small_workspace_id, "smallApiKey": instance.small_api_key});
        std::fs::write(dir.join("bench.json"), saved.to_string()).context("writing bench.json")?;
    }
    Ok(instance)
}

async fn run_list_on(options: &Options, instance: &Instance, samples: &mut Samples) -> Result<()> {
    let rows_label = match options.rows {
        n if n % 1_000_000 == 0 => format!("{}M rows", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}k rows", n / 1_000),
        n => format!("{n} rows"),
    };
    let warmup = 40.min(options.list_requests);
    let budget = Duration::from_secs_f64(options.list_seconds);
    let mut classes = Class::FIGURE.to_vec();
    if options.status_only {
        classes.push(Class::StatusOnly);
    }
    if options.small_tenant {
        classes.push(Class::SmallTenant);
    }
    let classes = &classes[..];
    for run in 1..=options.runs {
        let server = Server::start(&options.trellis, instance).await?;
        let started = Instant::now();
        list_phase(
            &server,
            instance,
            warmup,
            options.list_clients,
            options.rows,
            0xDEAD_BEEF ^ run as u64,
            budget / 4,
            classes,
        )
        .await
        .map_err(|e| anyhow!("{e}\nserver log (tail):\n{}", server.log_tail()))?;
        let warm = started.elapsed().as_secs_f64();
        let load = load_average();
        let cpu_before = server.cpu_seconds()?;
        let started = Instant::now();
        let results = list_phase(
            &server,
            instance,
            options.list_requests,
            options.list_clients,
            options.rows,
            0x5EED_0000 + run as u64,
            budget,
            classes,
        )
        .await
        .map_err(|e| anyhow!("{e}\nserver log (tail):\n{}", server.log_tail()))?;
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = server.cpu_seconds()? - cpu_before;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = server.rss_mib()?;
        let anon = server.anon_mib()?;
        let errors = server.logged_errors();
        server.stop().await?;
        if errors > 0 {
            eprintln!("  warning: the server logged {errors} ERROR lines");
        }
        let search: Vec<f64> =
            sorted(&results.iter().filter(|r| r.class.in_figure()).map(|r| r.ms).collect::<Vec<_>>());
        let p99 = percentile(&search, 99.0);
        eprintln!(
            "  list run {run}/{}: {} requests in {elapsed:.1} s ({:.0} req/s, warm-up {warm:.1} s); search+status p50 {:.1} p95 {:.1} p99 {p99:.1} ms; rss {rss:.1} MiB (anonymous {anon:.1})",
            options.runs,
            results.len(),
            results.len() as f64 / elapsed,
            percentile(&search, 50.0),
            percentile(&search, 95.0),
        );
        samples.push(&format!("list p99, search+status, {rows_label}"), "ms", "<= 25", p99);
        samples.push(&format!("list p95, search+status, {rows_label}"), "ms", "", percentile(&search, 95.0));
        samples.push(&format!("list p50, search+status, {rows_label}"), "ms", "", percentile(&search, 50.0));
        samples.push(
            "list requests measured (all classes)",
            "",
            &format!("(up to {})", options.list_requests),
            results.len() as f64,
        );
        samples.push(
            "list throughput (all classes)",
            "req/s",
            &format!("({} clients)", options.list_clients),
            results.len() as f64 / elapsed,
        );
        for &class in classes {
            let mine: Vec<&ListResult> = results.iter().filter(|r| r.class == class).collect();
            let ms = sorted(&mine.iter().map(|r| r.ms).collect::<Vec<_>>());
            let totals: Vec<f64> = mine.iter().map(|r| r.total as f64).collect();
            for p in [50.0, 95.0, 99.0] {
                samples.push(&format!("  {} p{p}", class.name()), "ms", "", percentile(&ms, p));
            }
            samples.push(&format!("  {} rows matched (median)", class.name()), "rows", "", median(&totals));
        }
        samples.push(
            "list: server CPU per request (all classes)",
            "ms",
            "",
            cpu * 1000.0 / results.len().max(1) as f64,
        );
        samples.push("list: server CPU utilisation", "cores", "(2 = all)", cpu / elapsed);
        samples.push("list: load average at start", "", "", load);
        samples.push(&format!("RSS after list run ({rows_label}, 2 s idle)"), "MiB", "", rss);
        samples.push("  of which anonymous (not mapped database pages)", "MiB", "", anon);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Report

fn report(options: &Options, samples: &Samples, started: &str) -> String {
    let mut out = String::new();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let built = std::fs::metadata(&options.trellis)
        .and_then(|m| m.modified())
        .ok()
        .map(|t| {
            let t = time::OffsetDateTime::from(t);
            format!(
                "{}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            )
        })
        .unwrap_or_default();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "inventory-bench  {started}  runs={}  cpus={cpus}  server={} (built {built})",
        options.runs,
        options.trellis.display()
    );
    let width = samples.order.iter().map(|n| n.chars().count()).max().unwrap_or(10).max(10);
    let _ = writeln!(out, "{:<width$}  {:>9}  {:>9}  {:>9}  {:<8}  target", "figure", "median", "min", "max", "unit");
    for name in &samples.order {
        let values = samples.values.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let (unit, target) = &samples.meta[name];
        let _ = writeln!(
            out,
            "{:<width$}  {:>9.1}  {:>9.1}  {:>9.1}  {:<8}  {}",
            name,
            median(values),
            min(values),
            max(values),
            unit,
            target
        );
    }
    let _ = writeln!(out, "\nraw samples (one per run):");
    for name in &samples.order {
        let values = samples.values.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let text: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        let _ = writeln!(out, "  {}: [{}]", name.trim(), text.join(", "));
    }
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    let options = parse_options()?;
    if !options.trellis.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release -p trellis --bin trellis` (make bench-inventory does)",
            options.trellis.display()
        );
    }
    let now = time::OffsetDateTime::now_utc();
    let started = format!(
        "{}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    let wants = |figure: &str| options.only.iter().any(|f| f == figure);
    let count = if wants("register") { options.register_certs } else { 100 };
    eprintln!("generating {count} certificates (not timed) ...");
    let t = Instant::now();
    let certs = Arc::new(tokio::task::spawn_blocking(move || generate_certificates(count)).await??);
    eprintln!("  done in {:.1} s", t.elapsed().as_secs_f64());
    let mut samples = Samples::default();
    if wants("rss") {
        eprintln!("idle RSS: {} runs", options.runs);
        run_rss(&options, &certs, &mut samples).await?;
    }
    if wants("register") {
        eprintln!(
            "register throughput: {} runs x {} certificates, {} clients, fresh database each run",
            options.runs, options.register_certs, options.register_clients
        );
        run_register(&options, &certs, &mut samples).await?;
    }
    if wants("list") {
        eprintln!(
            "list latency: {} rows seeded once, {} runs x up to {} requests or {} s (after up to 40 warm-up), {} clients, server restarted each run",
            options.rows, options.runs, options.list_requests, options.list_seconds, options.list_clients
        );
        run_list(&options, &certs, &mut samples).await?;
    }
    if wants("console") {
        eprintln!(
            "console: {} rows seeded once, {} runs x {} requests per page (after 5 warm-up), one client, server restarted each run",
            options.rows, options.runs, options.console_requests
        );
        console::run_console(&options, &certs, &mut samples).await?;
    }
    let text = report(&options, &samples, &started);
    println!("{text}");
    if let Some(path) = &options.json {
        let json = serde_json::json!({
            "started": started,
            "runs": options.runs,
            "samples": samples.order.iter().map(|name| serde_json::json!({
                "name": name.trim(),
                "unit": samples.meta[name].0,
                "target": samples.meta[name].1,
                "values": samples.values.get(name),
                "median": median(samples.values.get(name).map(Vec::as_slice).unwrap_or(&[])),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)?;
    }
    Ok(())
}
