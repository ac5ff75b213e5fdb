//! `delivery-bench`: the webhook delivery figures of issue 11 against the real release binary
//! (`target/release/trellis serve`, next to this driver), delivering to an HTTPS receiver in
//! this process on the loopback interface. Every phase of every run has a fresh server and
//! database (a temporary data directory; on PostgreSQL a new database).
//!
//! Figures (targets in brackets), each measured `--runs` times (default 3), medians reported:
//! * `throughput`: signed webhook deliveries per second on SQLite, one endpoint subscribed to
//!   `*`, `--events` (default 20,000) events waiting in the outbox when the server starts:
//!   N / (time from the first to the N-th request the receiver got); also the time from the
//!   server's start to the last delivery                                          [>= 2,000/s]
//! * `postgres` (only with `--postgres URL` / `DELIVERY_BENCH_POSTGRES_URL`, an admin URL such
//!   as `scripts/postgres.sh` prints): the same with two replicas (`trellis serve` twice, one
//!   database, one master key), and that each event arrived exactly once across both
//!   [every event exactly once; no rate target set]
//! * `latency`: event-to-delivery latency at a fixed `--rate` (default 500/s) of certificate
//!   registrations (`POST /api/certificates`, open loop, `--emit-clients` keep-alive clients)
//!   for `--seconds` after `--warmup`: receiver arrival time minus the delivered body's
//!   `occurredAt` (same host clock, millisecond resolution), p50 / p99 / max, and the emit rate
//!   achieved; p50 per half of the window shows a backlog building     [p99: no target]
//! * `memory`: the server's VmRSS, VmHWM and RssAnon (`/proc/<pid>/status`; VmRSS counts the
//!   database pages SQLite maps, RssAnon only the process's own allocations) once `--memory-events`
//!   (default 100,000) deliveries are pending (the backlog gauge `trellis_webhook_queue_depth`
//!   of `/metrics`, refreshed every 5 s) while the receiver never answers (`--memory-reply 503`:
//!   it answers 503 and the worker retries), against the same server idle before the events were inserted [no target]
//! * `peer`: this driver POSTs the same number of signed deliveries (same body shape and size,
//!   the same headers, one HMAC-SHA256 per request) over keep-alive HTTPS to the same receiver
//!   from `--peer-tasks` (default 64) tasks, no database: an upper bound of what signing and
//!   HTTPS cost on this machine; reported as the ratio Trellis / peer            [no target]
//!   (Trellis runs at most `TRELLIS_DELIVERY_PER_TARGET_IN_FLIGHT`, default 64, attempts per
//!   endpoint and process at once; the peer's 64 are its own choice)
//!
//! Method of `throughput` and `postgres`: a user, workspace and API key are made with the
//! `trellis` CLI; the server is started with `TRELLIS_DELIVERY_WORKER=false`, the endpoint is
//! created over the API (`POST /api/integrations/webhooks`), the server is stopped (SIGTERM);
//! the events are inserted straight into `event_outbox` in one transaction (sqlx on SQLite,
//! `psql` `INSERT … SELECT … generate_series` on PostgreSQL), stamped after the endpoint's
//! creation (the worker only delivers events emitted after an endpoint was made); then the
//! server starts with its worker and the receiver's clock runs. The receiver (rustls, rcgen
//! self-signed certificate for `localhost`, trusted through `TRELLIS_WEBHOOK_CA_BUNDLE`;
//! HTTP/1.1 keep-alive, answers `200` with an empty body) records each `Trellis-Event-Id` and
//! arrival time, and checks the signatures of the first 100 requests. Afterwards the database
//! must hold N successful deliveries. CPU of the server(s), of this driver (the receiver) and
//! of the rest of the machine is reported beside each figure: on a shared machine "other
//! processes" far above 0 means the figure is distorted (on PostgreSQL it includes the
//! database). The phases of a run are rotated from run to run, so that drift of the machine
//! spreads over all of them. `delivery-bench --help` lists the knobs; `make bench-delivery`
//! builds and runs it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trellis_tests::bench::{
    clock_ticks, env_or, load_average, machine_jiffies, max, median, min, percentile, sorted, Samples,
};

const HELP: &str = "\
delivery-bench: webhook delivery figures of issue 11 against target/release/trellis

USAGE: delivery-bench [OPTIONS]

OPTIONS (environment variable in brackets):
  --runs N            runs; every phase of a run has a fresh server and database; medians
                                                             [DELIVERY_BENCH_RUNS, default 3]
  --events N          events of the throughput, postgres and peer phases
                                                             [DELIVERY_BENCH_EVENTS, default 20000]
  --only LIST         comma list of throughput,latency,memory,peer,postgres
                      (postgres runs only with a URL)        [DELIVERY_BENCH_ONLY, default all]
  --postgres URL      admin URL of a PostgreSQL cluster (scripts/postgres.sh prints one); a
                      database is created per run and dropped after it
                                                             [DELIVERY_BENCH_POSTGRES_URL]
  --rate R            events per second of the latency phase                    [default 500]
  --seconds S         measured seconds of the latency phase  [DELIVERY_BENCH_SECONDS, default 10]
  --warmup S          unmeasured seconds at the same rate before them           [default 2]
  --emit-clients N    keep-alive HTTP clients the latency phase emits through   [default 16]
  --memory-events N   pending deliveries of the memory phase                    [default 100000]
  --memory-reply R    what the receiver answers in the memory phase: 503 or hang [default hang]
  --peer-tasks N      concurrent keep-alive connections of the peer             [default 64]
  --timeout S         give up waiting for deliveries after S seconds (default: 60 + N/200)
  --server-env K=V    extra environment variable for `trellis serve` (repeatable; diagnostics,
                      e.g. TRELLIS_DELIVERY_PER_TARGET_IN_FLIGHT=64; the figures are measured
                      without)
  --trellis PATH      server binary               [TRELLIS_BIN, default: next to this binary]
  --json PATH         also write all samples as JSON
  --keep              keep the temporary directories and PostgreSQL databases (printed)
  -h, --help          this text
";

const PHASES: [&str; 5] = ["throughput", "postgres", "latency", "memory", "peer"];

/// Signatures checked per phase (the first requests to arrive).
const SIGNATURE_SAMPLE: usize = 100;

// ---------------------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reply {
    Ok = 0,
    Unavailable = 1,
    Hang = 2,
}

struct Options {
    runs: usize,
    events: usize,
    only: Vec<String>,
    only_given: bool,
    postgres: Option<String>,
    rate: f64,
    seconds: f64,
    warmup: f64,
    emit_clients: usize,
    memory_events: usize,
    memory_reply: Reply,
    peer_tasks: usize,
    timeout: Option<f64>,
    server_env: Vec<(String, String)>,
    trellis: PathBuf,
    json: Option<PathBuf>,
    keep: bool,
}

impl Options {
    fn wants(&self, phase: &str) -> bool {
        self.only.iter().any(|o| o == phase) && (phase != "postgres" || self.postgres.is_some())
    }

    fn delivery_timeout(&self, n: usize) -> Duration {
        Duration::from_secs_f64(self.timeout.unwrap_or(60.0 + n as f64 / 200.0))
    }
}

fn parse_options() -> Result<Options> {
    let default_trellis = std::env::var_os("TRELLIS_BIN")
        .map(PathBuf::from)
        .or_else(|| std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join("trellis"))))
        .unwrap_or_else(|| PathBuf::from("target/release/trellis"));
    let only_env = std::env::var("DELIVERY_BENCH_ONLY").ok().filter(|v| !v.trim().is_empty());
    let mut options = Options {
        runs: env_or("DELIVERY_BENCH_RUNS", 3)?,
        events: env_or("DELIVERY_BENCH_EVENTS", 20_000)?,
        only_given: only_env.is_some(),
        only: only_env.unwrap_or_else(|| PHASES.join(",")).split(',').map(|s| s.trim().to_string()).collect(),
        postgres: std::env::var("DELIVERY_BENCH_POSTGRES_URL").ok().filter(|v| !v.trim().is_empty()),
        rate: 500.0,
        seconds: env_or("DELIVERY_BENCH_SECONDS", 10.0)?,
        warmup: 2.0,
        emit_clients: 16,
        memory_events: 100_000,
        memory_reply: Reply::Hang,
        peer_tasks: 64,
        timeout: None,
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
            "--events" => options.events = num(&flag, value(&flag)?)?,
            "--only" => {
                options.only = value(&flag)?.split(',').map(|s| s.trim().to_string()).collect();
                options.only_given = true;
            }
            "--postgres" => {
                // `--postgres=postgres://…` splits at the first `=` above, which a URL may hold too.
                let url = match (&inline, arg.split_once('=')) {
                    (Some(_), Some((_, rest))) => rest.to_string(),
                    _ => value(&flag)?,
                };
                options.postgres = Some(url);
            }
            "--rate" => options.rate = num(&flag, value(&flag)?)?,
            "--seconds" => options.seconds = num(&flag, value(&flag)?)?,
            "--warmup" => options.warmup = num(&flag, value(&flag)?)?,
            "--emit-clients" => options.emit_clients = num(&flag, value(&flag)?)?,
            "--memory-events" => options.memory_events = num(&flag, value(&flag)?)?,
            "--memory-reply" => {
                options.memory_reply = match value(&flag)?.as_str() {
                    "503" => Reply::Unavailable,
                    "hang" => Reply::Hang,
                    other => bail!("--memory-reply: `{other}` is neither 503 nor hang"),
                }
            }
            "--peer-tasks" => options.peer_tasks = num(&flag, value(&flag)?)?,
            "--timeout" => options.timeout = Some(num(&flag, value(&flag)?)?),
            "--server-env" => {
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
    if options.only_given && options.only.iter().any(|p| p == "postgres") && options.postgres.is_none() {
        bail!("--only postgres needs --postgres URL (or DELIVERY_BENCH_POSTGRES_URL); scripts/postgres.sh prints one");
    }
    if options.runs == 0
        || options.events < 2
        || options.memory_events == 0
        || options.emit_clients == 0
        || options.peer_tasks == 0
        || options.rate <= 0.0
        || options.seconds <= 0.0
        || options.warmup < 0.0
    {
        bail!("--runs, --memory-events, --emit-clients, --peer-tasks, --rate and --seconds must be positive, --events at least 2, --warmup not negative");
    }
    Ok(options)
}

// ---------------------------------------------------------------------------------------
// Statistics (as in issuance-bench)

// ---------------------------------------------------------------------------------------
// Processes: CPU time, memory, the machine

/// CPU time (user + system) of a process so far, seconds (`/proc/<pid>/stat`); 0 once gone.
fn cpu_seconds(pid: &str, ticks_per_second: f64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / ticks_per_second
}

/// VmRSS, VmHWM and RssAnon of a process, MiB. VmRSS also counts the database pages SQLite
/// reads through its memory map (page cache, shared with the kernel); RssAnon is the process's
/// own allocations.
fn memory_mib(pid: &str) -> (f64, f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"), field("RssAnon:"))
}

/// Cores busy on the whole machine between two `machine_jiffies` samples.
fn machine_cores(before: (f64, f64), after: (f64, f64)) -> f64 {
    let cpus = std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0);
    cpus * (after.0 - before.0) / (after.1 - before.1).max(1.0)
}

/// CPU of the servers, this driver and the machine over a window.
struct CpuProbe {
    ticks: f64,
    at: Instant,
    servers: f64,
    driver: f64,
    machine: (f64, f64),
    load: f64,
}

#[derive(Default, Clone, Copy)]
struct CpuUse {
    window: f64,
    servers: f64,
    driver: f64,
    machine_cores: f64,
    load: f64,
}

impl CpuUse {
    /// Cores the rest of the machine used during the window (not the servers, not this driver).
    fn others(&self) -> f64 {
        (self.machine_cores - (self.servers + self.driver) / self.window.max(1e-9)).max(0.0)
    }
}

impl CpuProbe {
    fn start(pids: &[&str]) -> CpuProbe {
        let ticks = clock_ticks();
        CpuProbe {
            ticks,
            at: Instant::now(),
            servers: pids.iter().map(|pid| cpu_seconds(pid, ticks)).sum(),
            driver: cpu_seconds("self", ticks),
            machine: machine_jiffies(),
            load: load_average(),
        }
    }

    fn stop(&self, pids: &[&str]) -> CpuUse {
        let servers: f64 = pids.iter().map(|pid| cpu_seconds(pid, self.ticks)).sum();
        CpuUse {
            window: self.at.elapsed().as_secs_f64(),
            servers: servers - self.servers,
            driver: cpu_seconds("self", self.ticks) - self.driver,
            machine_cores: machine_cores(self.machine, machine_jiffies()),
            load: self.load,
        }
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding an ephemeral port")?;
    Ok(listener.local_addr()?.port())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// `2025-01-02T03:04:05.678Z`, as the server writes `occurredAt`.
fn rfc3339_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, as the server writes it).
fn parse_rfc3339_ms(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text.get(..24)?).ok()?;
    if text.as_bytes()[23] != b'Z' {
        return None;
    }
    let n = |range: std::ops::Range<usize>| text.get(range).and_then(|s| s.parse::<i64>().ok());
    let month = time::Month::try_from(u8::try_from(n(5..7)?).ok()?).ok()?;
    let date =
        time::Date::from_calendar_date(i32::try_from(n(0..4)?).ok()?, month, u8::try_from(n(8..10)?).ok()?).ok()?;
    let seconds = date.midnight().assume_utc().unix_timestamp() + n(11..13)? * 3600 + n(14..16)? * 60 + n(17..19)?;
    Some(seconds * 1000 + n(20..23)?)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn hmac_hex(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let mut context = ring::hmac::Context::with_key(&key);
    context.update(timestamp.as_bytes());
    context.update(b".");
    context.update(body);
    hex::encode(context.sign().as_ref())
}

// ---------------------------------------------------------------------------------------
// The database of a phase: SQLite file or PostgreSQL database

enum Database {
    Sqlite(PathBuf),
    Postgres { admin: String, url: String, name: String },
}

impl Database {
    fn url(&self) -> String {
        match self {
            Database::Sqlite(path) => format!("sqlite://{}", path.display()),
            Database::Postgres { url, .. } => url.clone(),
        }
    }

    fn create_postgres(admin: &str, run: usize) -> Result<Database> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let name = format!("delivery_bench_{}_{run}_{nanos}", std::process::id());
        psql(admin, &format!("CREATE DATABASE {name}"))?;
        let base = admin.rsplit_once('/').map_or(admin, |(base, _)| base);
        // Keep query parameters of the admin URL (e.g. ?sslmode=disable).
        let query = admin.rsplit_once('/').and_then(|(_, db)| db.split_once('?')).map(|(_, q)| format!("?{q}"));
        let url = format!("{base}/{name}{}", query.unwrap_or_default());
        Ok(Database::Postgres { admin: admin.to_string(), url, name })
    }

    /// One integer from a query (sqlite3 or psql on the command line; never during a measurement).
    fn scalar(&self, sql: &str) -> Result<i64> {
        let text = match self {
            Database::Sqlite(path) => {
                let out = std::process::Command::new("sqlite3")
                    .arg("-bail")
                    .arg(path)
                    .arg(sql)
                    .output()
                    .context("running sqlite3")?;
                if !out.status.success() {
                    bail!("sqlite3 `{sql}`: {}", String::from_utf8_lossy(&out.stderr));
                }
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            }
            Database::Postgres { url, .. } => psql(url, sql)?,
        };
        text.lines().last().unwrap_or("").trim().parse().map_err(|_| anyhow!("`{sql}` printed no number: {text}"))
    }

    fn drop_database(&self, keep: bool) {
        if let Database::Postgres { admin, name, .. } = self {
            if keep {
                eprintln!("  keeping PostgreSQL database {name}");
            } else if let Err(err) = psql(admin, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")) {
                eprintln!("  warning: cannot drop {name}: {err:#}");
            }
        }
    }
}

fn psql(url: &str, sql: &str) -> Result<String> {
    let out = std::process::Command::new("psql")
        .args([url, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .context("psql is needed for the PostgreSQL phase (apt-get install postgresql-client)")?;
    if !out.status.success() {
        bail!("psql `{}`: {}", sql.chars().take(200).collect::<String>(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

// ---------------------------------------------------------------------------------------
// The server

fn server_env(cmd: &mut tokio::process::Command, dir: &Path, database_url: &str, port: u16) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TRELLIS_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("TRELLIS_LISTEN", format!("127.0.0.1:{port}"))
        .env("TRELLIS_DATABASE_URL", database_url)
        .env("TRELLIS_DATA_DIR", dir)
        .env("TRELLIS_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn");
}

async fn trellis_cli(
    trellis: &Path,
    dir: &Path,
    database_url: &str,
    env: &[(String, String)],
    args: &[&str],
) -> Result<Value> {
    let mut cmd = tokio::process::Command::new(trellis);
    server_env(&mut cmd, dir, database_url, 0);
    cmd.env("TRELLIS_LISTEN", "127.0.0.1:1");
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
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

struct Tenant {
    workspace_id: String,
    api_key: String,
}

/// A user with a new workspace and an API key of it that may register certificates and manage
/// webhooks, made with the CLI before the server starts.
async fn new_tenant(trellis: &Path, dir: &Path, database_url: &str, env: &[(String, String)]) -> Result<Tenant> {
    let user = trellis_cli(
        trellis,
        dir,
        database_url,
        env,
        &["user", "create", "--email", "bench@example.com", "--password", "bench-password-123"],
    )
    .await?;
    let workspace_id =
        user["workspaceId"].as_str().ok_or_else(|| anyhow!("user create printed no workspaceId: {user}"))?.to_string();
    if !workspace_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        bail!("unexpected workspace id `{workspace_id}`");
    }
    let key = trellis_cli(
        trellis,
        dir,
        database_url,
        env,
        &[
            "api-key",
            "create",
            "--workspace",
            &workspace_id,
            "--name",
            "delivery-bench",
            "--scopes",
            "certificates:read,certificates:write,integrations:read,integrations:write",
        ],
    )
    .await?;
    let api_key = key["key"].as_str().ok_or_else(|| anyhow!("api-key create printed no key: {key}"))?.to_string();
    Ok(Tenant { workspace_id, api_key })
}

struct Server {
    child: tokio::process::Child,
    pid: String,
    base: String,
    log: PathBuf,
    spawned: Instant,
}

impl Server {
    /// Spawns `trellis serve`; [`Server::wait_ready`] waits for it.
    fn spawn(trellis: &Path, dir: &Path, database_url: &str, env: &[(String, String)]) -> Result<Server> {
        let port = free_port()?;
        let log = dir.join(format!("serve-{port}.log"));
        let log_file = std::fs::File::create(&log)?;
        let mut cmd = tokio::process::Command::new(trellis);
        server_env(&mut cmd, dir, database_url, port);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.arg("serve").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log_file)).kill_on_drop(true);
        let spawned = Instant::now();
        let child = cmd.spawn().with_context(|| format!("starting {} serve", trellis.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("server exited at once"))?.to_string();
        Ok(Server { child, pid, base: format!("http://127.0.0.1:{port}"), log, spawned })
    }

    async fn start(trellis: &Path, dir: &Path, database_url: &str, env: &[(String, String)]) -> Result<Server> {
        let mut server = Server::spawn(trellis, dir, database_url, env)?;
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.check_alive()?;
            if let Ok(response) = client.get(format!("{}/ready", self.base)).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("server not ready after 120 s:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("server exited with {status}:\n{}", self.log_tail());
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Log lines of a level, but for the warning that `make plugins` was not run (no plugin
    /// takes part in webhook deliveries).
    fn logged(&self, level: &str) -> usize {
        let needle = format!("\"level\":\"{level}\"");
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&needle) && !l.contains("first-party plugin missing"))
            .count()
    }

    /// SIGTERM (graceful shutdown), then SIGKILL after 15 s. Warns about logged errors.
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
        let (errors, warnings) = (self.logged("ERROR"), self.logged("WARN"));
        if errors + warnings > 0 {
            eprintln!(
                "  note: the server ({}) logged {errors} ERROR and {warnings} WARN lines; last lines:\n{}",
                self.log.display(),
                self.log_tail()
            );
        }
        Ok(())
    }
}

/// The environment of a server that delivers to the receiver.
fn webhook_env(
    receiver: &Receiver,
    worker: bool,
    options: &Options,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = vec![
        ("TRELLIS_WEBHOOK_ALLOW_PRIVATE_NETWORKS".to_string(), "true".to_string()),
        ("TRELLIS_WEBHOOK_CA_BUNDLE".to_string(), receiver.bundle.display().to_string()),
    ];
    if !worker {
        env.push(("TRELLIS_DELIVERY_WORKER".to_string(), "false".to_string()));
    }
    env.extend(extra.iter().cloned());
    env.extend(options.server_env.iter().cloned());
    env
}

struct Endpoint {
    id: String,
    secret: String,
}

async fn create_endpoint(http: &reqwest::Client, base: &str, api_key: &str, url: &str) -> Result<Endpoint> {
    let response = http
        .post(format!("{base}/api/integrations/webhooks"))
        .header("X-API-Key", api_key)
        .json(&json!({ "url": url, "events": ["*"] }))
        .send()
        .await?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status != 201 {
        bail!("creating the webhook endpoint returned {status}: {body}");
    }
    let id = body["data"]["id"].as_str().ok_or_else(|| anyhow!("no endpoint id in {body}"))?.to_string();
    let secret = body["data"]["secret"].as_str().ok_or_else(|| anyhow!("no secret in {body}"))?.to_string();
    Ok(Endpoint { id, secret })
}

fn http_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder().pool_max_idle_per_host(4).timeout(Duration::from_secs(60)).build()?)
}

/// A gauge or counter of `/metrics` (first series of that name).
async fn metric(http: &reqwest::Client, base: &str, name: &str) -> Option<f64> {
    let text = http.get(format!("{base}/metrics")).send().await.ok()?.text().await.ok()?;
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let matches = series == name || series.strip_prefix(name).is_some_and(|rest| rest.starts_with('{'));
        if matches {
            value.trim().parse().ok()
        } else {
            None
        }
    })
}

// ---------------------------------------------------------------------------------------
// Events straight into the outbox

/// The `data` of a `certificate.created` event, shaped and sized as the server's.
fn event_data(i: i64) -> Value {
    use sha2::Digest;
    json!({
        "certificateId": i,
        "commonName": format!("svc-{i}.bench.example.com"),
        "issuer": "CN=Delivery Bench Issuing CA,O=Trellis Bench",
        "serialNumber": format!("{:032x}", (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        "fingerprintSha256": hex::encode(sha2::Sha256::digest(i.to_le_bytes())),
        "expiresAt": "2027-01-01T00:00:00.000Z",
        "status": "active",
    })
}

/// Inserts `n` events stamped `at` into the SQLite outbox in one transaction; returns the
/// first and last outbox id.
async fn insert_events_sqlite(db: &Path, workspace_id: &str, n: usize, at: i64) -> Result<(i64, i64)> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    use sqlx::{Connection as _, SqliteConnection};
    let options = SqliteConnectOptions::new()
        .filename(db)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    let mut conn = SqliteConnection::connect_with(&options).await.context("opening the SQLite database")?;
    let mut tx = conn.begin().await?;
    let before: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM event_outbox").fetch_one(&mut *tx).await?;
    let occurred = rfc3339_ms(at);
    for i in 1..=n as i64 {
        let payload = json!({
            "type": "certificate.created",
            "workspaceId": workspace_id,
            "occurredAt": occurred,
            "data": event_data(before + i),
        });
        sqlx::query(
            "INSERT INTO event_outbox (workspace_id, event_type, payload, created_at, claimed_by, claimed_until, processed_at) \
             VALUES (?, 'certificate.created', ?, ?, NULL, NULL, NULL)",
        )
        .bind(workspace_id)
        .bind(payload.to_string())
        .bind(at)
        .execute(&mut *tx)
        .await?;
    }
    let after: i64 = sqlx::query_scalar("SELECT MAX(id) FROM event_outbox").fetch_one(&mut *tx).await?;
    tx.commit().await?;
    conn.close().await?;
    if after - before != n as i64 {
        bail!("inserted {n} events but the outbox ids run {before}..{after}");
    }
    Ok((before + 1, after))
}

/// The same on PostgreSQL, one `INSERT … SELECT … generate_series` through psql.
fn insert_events_postgres(url: &str, workspace_id: &str, n: usize, at: i64) -> Result<(i64, i64)> {
    let before: i64 = psql(url, "SELECT COALESCE(MAX(id), 0) FROM event_outbox")?.parse()?;
    let occurred = rfc3339_ms(at);
    let sql = format!(
        "INSERT INTO event_outbox (workspace_id, event_type, payload, created_at, claimed_by, claimed_until, processed_at) \
         SELECT '{workspace_id}', 'certificate.created', jsonb_build_object( \
           'type', 'certificate.created', 'workspaceId', '{workspace_id}', 'occurredAt', '{occurred}', \
           'data', jsonb_build_object( \
             'certificateId', g, 'commonName', 'svc-' || g || '.bench.example.com', \
             'issuer', 'CN=Delivery Bench Issuing CA,O=Trellis Bench', \
             'serialNumber', lpad(to_hex(g), 32, '0'), 'fingerprintSha256', md5(g::text) || md5((-g)::text), \
             'expiresAt', '2027-01-01T00:00:00.000Z', 'status', 'active'))::text, \
           {at}, NULL, NULL, NULL \
         FROM generate_series(1, {n}) AS g"
    );
    psql(url, &sql)?;
    let after: i64 = psql(url, "SELECT MAX(id) FROM event_outbox")?.parse()?;
    if after - before != n as i64 {
        bail!("inserted {n} events but the outbox ids run {before}..{after}");
    }
    Ok((before + 1, after))
}

// ---------------------------------------------------------------------------------------
// The receiver: HTTPS, HTTP/1.1 keep-alive, in this process

#[derive(Clone, Copy)]
struct Arrival {
    /// `Trellis-Event-Id` without `evt_`; -1 when absent or not a number.
    event: i64,
    /// Nanoseconds since the receiver's `base`.
    at_ns: u64,
    /// Wall clock, microseconds since the epoch.
    wall_us: i64,
    /// The body's `occurredAt`, ms since the epoch (only when asked to parse it); -1 otherwise.
    occurred_ms: i64,
}

struct SignedSample {
    timestamp: String,
    signature: String,
    body: Vec<u8>,
}

struct ReceiverState {
    base: Instant,
    mode: AtomicU8,
    parse_occurred: AtomicBool,
    count: AtomicUsize,
    malformed: AtomicUsize,
    arrivals: Mutex<Vec<Arrival>>,
    signed: Mutex<Vec<SignedSample>>,
}

struct Receiver {
    port: u16,
    bundle: PathBuf,
    cert_der: rustls_pki_types::CertificateDer<'static>,
    state: Arc<ReceiverState>,
    _dir: tempfile::TempDir,
}

impl Receiver {
    async fn start() -> Result<Receiver> {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])?;
        let dir = tempfile::Builder::new().prefix("trellis-delivery-receiver-").tempdir()?;
        let bundle = dir.path().join("receiver.pem");
        std::fs::write(&bundle, certified.cert.pem())?;
        let cert_der = certified.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![cert_der.clone()], key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(ReceiverState {
            base: Instant::now(),
            mode: AtomicU8::new(Reply::Ok as u8),
            parse_occurred: AtomicBool::new(false),
            count: AtomicUsize::new(0),
            malformed: AtomicUsize::new(0),
            arrivals: Mutex::new(Vec::new()),
            signed: Mutex::new(Vec::new()),
        });
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (acceptor, state) = (acceptor.clone(), shared.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    serve_connection(tls, state).await;
                });
            }
        });
        Ok(Receiver { port, bundle, cert_der, state, _dir: dir })
    }

    fn url(&self) -> String {
        format!("https://localhost:{}/hook", self.port)
    }

    /// Forgets everything received; answers `mode` from now on.
    fn reset(&self, mode: Reply, parse_occurred: bool) {
        self.state.mode.store(mode as u8, Ordering::SeqCst);
        self.state.parse_occurred.store(parse_occurred, Ordering::SeqCst);
        let mut arrivals = self.state.arrivals.lock().unwrap_or_else(|p| p.into_inner());
        arrivals.clear();
        self.state.signed.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.state.malformed.store(0, Ordering::SeqCst);
        self.state.count.store(0, Ordering::SeqCst);
    }

    fn count(&self) -> usize {
        self.state.count.load(Ordering::Acquire)
    }

    fn ns_since_base(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.state.base).as_nanos() as u64
    }

    fn arrivals(&self) -> Vec<Arrival> {
        let mut arrivals = self.state.arrivals.lock().unwrap_or_else(|p| p.into_inner()).clone();
        arrivals.sort_by_key(|a| a.at_ns);
        arrivals
    }

    /// (checked, bad) signatures of the first requests, against `secret`.
    fn check_signatures(&self, secret: &str) -> (usize, usize) {
        let signed = self.state.signed.lock().unwrap_or_else(|p| p.into_inner());
        let bad = signed
            .iter()
            .filter(|s| {
                let expected = format!("v1={}", hmac_hex(secret, &s.timestamp, &s.body));
                !s.signature.split(',').any(|entry| entry.trim() == expected)
            })
            .count();
        (signed.len(), bad)
    }
}

/// Requests on one connection: head up to the blank line, then Content-Length bytes of body.
async fn serve_connection<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    state: Arc<ReceiverState>,
) {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
    let mut data: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut scanned = 0usize;
        let split = loop {
            let from = scanned.saturating_sub(3);
            if let Some(at) = find(&data[from..], b"\r\n\r\n") {
                break from + at;
            }
            scanned = data.len();
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => data.extend_from_slice(&buf[..n]),
            }
        };
        let (mut length, mut event, mut timestamp, mut signature, mut chunked) = (0usize, -1i64, None, None, false);
        for line in data[..split].split(|b| *b == b'\n').skip(1) {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
            let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
            if name.eq_ignore_ascii_case(b"content-length") {
                length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
            } else if name.eq_ignore_ascii_case(b"trellis-event-id") {
                event = value
                    .strip_prefix(b"evt_")
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(-1);
            } else if name.eq_ignore_ascii_case(b"trellis-timestamp") {
                timestamp = Some(String::from_utf8_lossy(value).into_owned());
            } else if name.eq_ignore_ascii_case(b"trellis-signature") {
                signature = Some(String::from_utf8_lossy(value).into_owned());
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                chunked = true;
            }
        }
        if chunked {
            // Trellis sends a Content-Length; anything else is not what this receiver measures.
            state.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        while data.len() < split + 4 + length {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => data.extend_from_slice(&buf[..n]),
            }
        }
        let at_ns = state.base.elapsed().as_nanos() as u64;
        let wall_us = now_us();
        let body = &data[split + 4..split + 4 + length];
        let occurred_ms = if state.parse_occurred.load(Ordering::Relaxed) {
            find(body, b"\"occurredAt\":\"").and_then(|at| parse_rfc3339_ms(&body[at + 14..])).unwrap_or(-1)
        } else {
            -1
        };
        let index = {
            let mut arrivals = state.arrivals.lock().unwrap_or_else(|p| p.into_inner());
            arrivals.push(Arrival { event, at_ns, wall_us, occurred_ms });
            state.count.fetch_add(1, Ordering::AcqRel)
        };
        if index < SIGNATURE_SAMPLE {
            if let (Some(timestamp), Some(signature)) = (timestamp, signature) {
                let sample = SignedSample { timestamp, signature, body: body.to_vec() };
                state.signed.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
            } else {
                state.malformed.fetch_add(1, Ordering::Relaxed);
            }
        }
        data.drain(..split + 4 + length);
        let reply = match state.mode.load(Ordering::Relaxed) {
            0 => OK,
            1 => UNAVAILABLE,
            _ => {
                // Never answer: read until the client gives up and closes.
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                return;
            }
        };
        if stream.write_all(reply).await.is_err() || stream.flush().await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Deliveries of N outbox events: what the receiver saw

#[derive(Default)]
struct Delivered {
    /// N / (N-th arrival − first arrival).
    rate: f64,
    start_to_first: f64,
    start_to_last: f64,
    received: usize,
    duplicates: usize,
    missing: usize,
    foreign: usize,
    checked_signatures: usize,
    bad_signatures: usize,
    malformed: usize,
    /// Deliveries not recorded as `success` in the database 20 s after the N-th arrival.
    unrecorded: i64,
    cpu: CpuUse,
    timed_out: bool,
}

/// Waits for the events `first..=last` to arrive (started servers already spawned), then checks
/// them: each exactly once, signatures of the first ones, and the delivery log in the database.
async fn await_deliveries(
    options: &Options,
    receiver: &Receiver,
    servers: &mut [Server],
    probe: CpuProbe,
    db: &Database,
    (first, last): (i64, i64),
    secret: &str,
) -> Result<Delivered> {
    let n = (last - first + 1) as usize;
    let spawned = servers.iter().map(|s| s.spawned).min().unwrap_or_else(Instant::now);
    let deadline = Instant::now() + options.delivery_timeout(n);
    let mut progress = Instant::now();
    let mut timed_out = false;
    while receiver.count() < n {
        for server in servers.iter_mut() {
            server.check_alive()?;
        }
        if Instant::now() > deadline {
            timed_out = true;
            eprintln!("  warning: only {} of {n} deliveries arrived before the timeout", receiver.count());
            break;
        }
        if progress.elapsed() > Duration::from_secs(10) {
            eprintln!("  … {} of {n} delivered", receiver.count());
            progress = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let pids: Vec<&str> = servers.iter().map(|s| s.pid.as_str()).collect();
    let cpu = probe.stop(&pids);
    // Anything delivered twice right after is on its way now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let arrivals = receiver.arrivals();
    let mut result = Delivered { received: arrivals.len(), cpu, timed_out, ..Delivered::default() };
    if arrivals.len() >= n {
        let span = (arrivals[n - 1].at_ns - arrivals[0].at_ns) as f64 / 1e9;
        result.rate = n as f64 / span.max(1e-9);
        let spawned_ns = receiver.ns_since_base(spawned);
        result.start_to_first = (arrivals[0].at_ns.saturating_sub(spawned_ns)) as f64 / 1e9;
        result.start_to_last = (arrivals[n - 1].at_ns.saturating_sub(spawned_ns)) as f64 / 1e9;
    } else {
        result.rate = f64::NAN;
        result.start_to_first = f64::NAN;
        result.start_to_last = f64::NAN;
    }
    let mut seen = vec![0u32; n];
    for a in &arrivals {
        if a.event >= first && a.event <= last {
            seen[(a.event - first) as usize] += 1;
        } else {
            result.foreign += 1;
        }
    }
    result.missing = seen.iter().filter(|&&c| c == 0).count();
    result.duplicates = seen.iter().map(|&c| c.saturating_sub(1) as usize).sum();
    (result.checked_signatures, result.bad_signatures) = receiver.check_signatures(secret);
    result.malformed = receiver.state.malformed.load(Ordering::Relaxed);
    // The delivery log: N successes (the completions are written in batches shortly after).
    let record_deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let done = db.scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'success'")?;
        result.unrecorded = n as i64 - done;
        if done >= n as i64 || Instant::now() > record_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(result)
}

fn record_delivered(samples: &mut Samples, prefix: &str, target: &str, n: usize, d: &Delivered) {
    samples.push(&format!("{prefix}: deliveries/s (1st → {n}th arrival)"), "/s", target, d.rate);
    samples.push(&format!("{prefix}: server start → first delivery"), "s", "", d.start_to_first);
    samples.push(&format!("{prefix}: server start → last delivery"), "s", "", d.start_to_last);
    let servers = if prefix.starts_with("postgres") { "servers'" } else { "server's" };
    samples.push(
        &format!("{prefix}: {servers} CPU per delivery (start → last)"),
        "µs",
        "",
        d.cpu.servers * 1e6 / n as f64,
    );
    samples.push(&format!("{prefix}: {servers} CPU utilisation"), "cores", "(2 = all)", d.cpu.servers / d.cpu.window);
    samples.push(&format!("{prefix}: receiver (driver) CPU utilisation"), "cores", "", d.cpu.driver / d.cpu.window);
    let others = if prefix.starts_with("postgres") {
        "other processes' CPU (PostgreSQL included)"
    } else {
        "other processes' CPU"
    };
    samples.push(&format!("{prefix}: {others}"), "cores", "(~0 = quiet)", d.cpu.others());
    samples.push(
        &format!("{prefix}: missing + duplicate + foreign deliveries"),
        "",
        "0",
        (d.missing + d.duplicates + d.foreign) as f64,
    );
    samples.push(
        &format!("{prefix}: bad signatures (of first {SIGNATURE_SAMPLE})"),
        "",
        "0",
        (d.bad_signatures + d.malformed + SIGNATURE_SAMPLE.min(n).saturating_sub(d.checked_signatures)) as f64,
    );
    samples.push(&format!("{prefix}: not logged as success"), "", "0", d.unrecorded as f64);
    samples.push(&format!("{prefix}: load average at start"), "", "", d.cpu.load);
}

fn print_delivered(label: &str, n: usize, d: &Delivered) {
    eprintln!(
        "  {label:<10} {:>7.0}/s  start→first {:.2} s  start→last {:.2} s  {} received of {n} ({} missing, {} duplicate, {} foreign)  signatures {}/{} bad  unlogged {}  servers {:.2} cores ({:.0} µs/delivery)  receiver {:.2} cores  others {:.2} cores  load {:.2}",
        d.rate,
        d.start_to_first,
        d.start_to_last,
        d.received,
        d.missing,
        d.duplicates,
        d.foreign,
        d.bad_signatures,
        d.checked_signatures,
        d.unrecorded,
        d.cpu.servers / d.cpu.window,
        d.cpu.servers * 1e6 / n as f64,
        d.cpu.driver / d.cpu.window,
        d.cpu.others(),
        d.cpu.load,
    );
    if d.timed_out {
        eprintln!("  warning: the deliveries timed out (--timeout): rate and times are not measured");
    }
    if d.cpu.others() > 0.15 && !label.starts_with("postgres") {
        eprintln!(
            "  warning: other processes used {:.2} cores during this phase: its figures are distorted",
            d.cpu.others()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Phases

struct Scratch {
    dir: PathBuf,
    _guard: Option<tempfile::TempDir>,
}

fn scratch(prefix: &str, keep: bool) -> Result<Scratch> {
    let guard = tempfile::Builder::new().prefix(prefix).tempdir().context("creating a temporary directory")?;
    let dir = guard.path().to_path_buf();
    if keep {
        eprintln!("  keeping {}", dir.display());
        let _ = guard.keep();
        Ok(Scratch { dir, _guard: None })
    } else {
        Ok(Scratch { dir, _guard: Some(guard) })
    }
}

/// Throughput on SQLite: N events waiting when the server starts with its worker.
async fn throughput_phase(options: &Options, receiver: &Receiver) -> Result<Delivered> {
    let scratch = scratch("trellis-delivery-", options.keep)?;
    let dir = &scratch.dir;
    let path = dir.join("trellis.db");
    let db = Database::Sqlite(path.clone());
    let url = db.url();
    let tenant = new_tenant(&options.trellis, dir, &url, &[]).await?;
    let setup = Server::start(&options.trellis, dir, &url, &webhook_env(receiver, false, options, &[])).await?;
    let endpoint = create_endpoint(&http_client()?, &setup.base, &tenant.api_key, &receiver.url()).await?;
    setup.stop().await?;
    let created = db.scalar(&format!("SELECT created_at FROM webhook_endpoints WHERE id = '{}'", endpoint.id))?;
    let at = now_ms().max(created);
    let ids = insert_events_sqlite(&path, &tenant.workspace_id, options.events, at).await?;
    receiver.reset(Reply::Ok, false);
    let mut servers = vec![Server::spawn(&options.trellis, dir, &url, &webhook_env(receiver, true, options, &[]))?];
    let probe = CpuProbe::start(&[servers[0].pid.as_str()]);
    servers[0].wait_ready().await?;
    let delivered = await_deliveries(options, receiver, &mut servers, probe, &db, ids, &endpoint.secret).await?;
    for server in servers {
        server.stop().await?;
    }
    Ok(delivered)
}

/// Two replicas on one PostgreSQL database.
async fn postgres_phase(options: &Options, receiver: &Receiver, admin: &str, run: usize) -> Result<Delivered> {
    let scratch = scratch("trellis-delivery-pg-", options.keep)?;
    let db = Database::create_postgres(admin, run)?;
    let outcome = async {
        let url = db.url();
        let master_key = {
            use sha2::Digest;
            let seed = format!("{}-{run}-{}", std::process::id(), now_us());
            hex::encode(sha2::Sha256::digest(seed.as_bytes()))
        };
        let key_env = vec![("TRELLIS_MASTER_KEY".to_string(), master_key)];
        let (dir_a, dir_b) = (scratch.dir.join("a"), scratch.dir.join("b"));
        std::fs::create_dir_all(&dir_a)?;
        std::fs::create_dir_all(&dir_b)?;
        let tenant = new_tenant(&options.trellis, &dir_a, &url, &key_env).await?;
        let setup =
            Server::start(&options.trellis, &dir_a, &url, &webhook_env(receiver, false, options, &key_env)).await?;
        let endpoint = create_endpoint(&http_client()?, &setup.base, &tenant.api_key, &receiver.url()).await?;
        setup.stop().await?;
        let created = db.scalar(&format!("SELECT created_at FROM webhook_endpoints WHERE id = '{}'", endpoint.id))?;
        let at = now_ms().max(created);
        let ids = insert_events_postgres(&url, &tenant.workspace_id, options.events, at)?;
        receiver.reset(Reply::Ok, false);
        let env = webhook_env(receiver, true, options, &key_env);
        let mut servers = vec![
            Server::spawn(&options.trellis, &dir_a, &url, &env)?,
            Server::spawn(&options.trellis, &dir_b, &url, &env)?,
        ];
        let probe = CpuProbe::start(&[servers[0].pid.as_str(), servers[1].pid.as_str()]);
        for server in servers.iter_mut() {
            server.wait_ready().await?;
        }
        let delivered = await_deliveries(options, receiver, &mut servers, probe, &db, ids, &endpoint.secret).await?;
        for server in servers {
            server.stop().await?;
        }
        Ok::<_, anyhow::Error>(delivered)
    }
    .await;
    db.drop_database(options.keep);
    outcome
}

#[derive(Default)]
struct LatencyResult {
    /// Event → delivery, ms, events emitted inside the measured window.
    latencies: Vec<f64>,
    /// The same for the first and the second half of the window (a growing backlog shows).
    first_half: Vec<f64>,
    second_half: Vec<f64>,
    /// Deliveries that arrived during the window, per second.
    delivered_rate: f64,
    /// Registrations sent in the window per second (first to last send).
    emit_rate: f64,
    acknowledged_rate: f64,
    register_ms: Vec<f64>,
    register_failures: usize,
    undelivered: usize,
    duplicates: usize,
    pacer_max_lag_ms: f64,
    bad_signatures: usize,
    checked_signatures: usize,
    cpu: CpuUse,
}

/// Certificates registered at a fixed rate (open loop) while the worker delivers.
async fn latency_phase(options: &Options, receiver: &Receiver, bodies: &[bytes::Bytes]) -> Result<LatencyResult> {
    let scratch = scratch("trellis-delivery-lat-", options.keep)?;
    let dir = &scratch.dir;
    let db = Database::Sqlite(dir.join("trellis.db"));
    let url = db.url();
    let tenant = new_tenant(&options.trellis, dir, &url, &[]).await?;
    receiver.reset(Reply::Ok, true);
    let server = Server::start(&options.trellis, dir, &url, &webhook_env(receiver, true, options, &[])).await?;
    let endpoint = create_endpoint(&http_client()?, &server.base, &tenant.api_key, &receiver.url()).await?;
    let mut clients = Vec::new();
    for _ in 0..options.emit_clients {
        let c = http_client()?;
        c.get(format!("{}/health", server.base)).send().await?.error_for_status()?;
        clients.push(c);
    }
    let register_url = format!("{}/api/certificates", server.base);
    let interval = Duration::from_secs_f64(1.0 / options.rate);
    let start = Instant::now() + Duration::from_millis(100);
    let window_start = start + Duration::from_secs_f64(options.warmup);
    let window_end = window_start + Duration::from_secs_f64(options.seconds);
    // Instants to wall-clock milliseconds (the server stamps events with the wall clock).
    let (wall_now, instant_now) = (now_us() as f64 / 1000.0, Instant::now());
    let wall_ms = |at: Instant| wall_now + (at.saturating_duration_since(instant_now).as_secs_f64() * 1000.0);
    let (window_start_ms, window_end_ms) = (wall_ms(window_start), wall_ms(window_end));
    let pid = server.pid.clone();
    let probe_task = tokio::spawn(async move {
        tokio::time::sleep_until(window_start.into()).await;
        let probe = CpuProbe::start(&[pid.as_str()]);
        tokio::time::sleep_until(window_end.into()).await;
        probe.stop(&[pid.as_str()])
    });
    let mut tasks = Vec::with_capacity(bodies.len());
    let mut sends_in_window: Vec<Instant> = Vec::new();
    let mut max_lag = Duration::ZERO;
    for (i, body) in bodies.iter().enumerate() {
        let scheduled = start + interval * i as u32;
        if scheduled >= window_end {
            break;
        }
        tokio::time::sleep_until(scheduled.into()).await;
        let sent = Instant::now();
        max_lag = max_lag.max(sent - scheduled);
        if sent >= window_start && sent < window_end {
            sends_in_window.push(sent);
        }
        let request = clients[i % clients.len()]
            .post(&register_url)
            .header("X-API-Key", &tenant.api_key)
            .header("Content-Type", "application/json")
            .body(body.clone());
        tasks.push(tokio::spawn(async move {
            let outcome = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let text = response.text().await.unwrap_or_default();
                    (status, text)
                }
                Err(err) => (0, err.to_string()),
            };
            (sent, Instant::now(), outcome)
        }));
    }
    let cpu = probe_task.await?;
    let mut result = LatencyResult { cpu, pacer_max_lag_ms: max_lag.as_secs_f64() * 1000.0, ..Default::default() };
    let (mut acknowledged, mut acknowledged_in_window) = (0usize, 0usize);
    for task in tasks {
        let (sent, done, (status, text)) = task.await?;
        if status == 201 {
            acknowledged += 1;
            if sent >= window_start && sent < window_end {
                acknowledged_in_window += 1;
                result.register_ms.push((done - sent).as_secs_f64() * 1000.0);
            }
        } else {
            result.register_failures += 1;
            if result.register_failures <= 3 {
                eprintln!("  registration failed: {status} {}", text.chars().take(300).collect::<String>());
            }
        }
    }
    if sends_in_window.len() >= 2 {
        let span = (sends_in_window[sends_in_window.len() - 1] - sends_in_window[0]).as_secs_f64();
        result.emit_rate = (sends_in_window.len() - 1) as f64 / span;
        result.acknowledged_rate = acknowledged_in_window as f64 / options.seconds;
    }
    // Every acknowledged registration emitted one certificate.created: wait for its delivery.
    let deadline = Instant::now() + Duration::from_secs(60);
    while receiver.count() < acknowledged && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let arrivals = receiver.arrivals();
    let mut events: Vec<i64> = arrivals.iter().map(|a| a.event).collect();
    events.sort_unstable();
    let total = events.len();
    events.dedup();
    result.duplicates = total - events.len();
    result.undelivered = acknowledged.saturating_sub(events.len());
    let middle_ms = (window_start_ms + window_end_ms) / 2.0;
    let mut arrived_in_window = 0usize;
    for a in &arrivals {
        let (occurred, arrived) = (a.occurred_ms as f64, a.wall_us as f64 / 1000.0);
        if arrived >= window_start_ms && arrived < window_end_ms {
            arrived_in_window += 1;
        }
        if a.occurred_ms >= 0 && occurred >= window_start_ms && occurred < window_end_ms {
            result.latencies.push(arrived - occurred);
            if occurred < middle_ms {
                result.first_half.push(arrived - occurred);
            } else {
                result.second_half.push(arrived - occurred);
            }
        }
    }
    result.delivered_rate = arrived_in_window as f64 / options.seconds;
    (result.checked_signatures, result.bad_signatures) = receiver.check_signatures(&endpoint.secret);
    result.bad_signatures += receiver.state.malformed.load(Ordering::Relaxed);
    server.stop().await?;
    Ok(result)
}

struct MemoryResult {
    idle_rss: f64,
    idle_hwm: f64,
    idle_anon: f64,
    backlog_rss: f64,
    backlog_hwm: f64,
    backlog_anon: f64,
    /// Server start → the gauge showing every delivery pending.
    fan_out_seconds: f64,
    pending_seen: f64,
    attempts: usize,
    insert_seconds: f64,
}

/// The server's memory with `--memory-events` deliveries pending, and idle before.
async fn memory_phase(options: &Options, receiver: &Receiver) -> Result<MemoryResult> {
    let scratch = scratch("trellis-delivery-mem-", options.keep)?;
    let dir = &scratch.dir;
    let path = dir.join("trellis.db");
    let db = Database::Sqlite(path.clone());
    let url = db.url();
    let tenant = new_tenant(&options.trellis, dir, &url, &[]).await?;
    receiver.reset(options.memory_reply, false);
    let http = http_client()?;
    // Idle, with the worker running (it polls an empty outbox), after one gauge refresh.
    let idle = Server::start(&options.trellis, dir, &url, &webhook_env(receiver, true, options, &[])).await?;
    let endpoint = create_endpoint(&http, &idle.base, &tenant.api_key, &receiver.url()).await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (idle_rss, idle_hwm, idle_anon) = memory_mib(&idle.pid);
    idle.stop().await?;
    let created = db.scalar(&format!("SELECT created_at FROM webhook_endpoints WHERE id = '{}'", endpoint.id))?;
    let at = now_ms().max(created);
    let t = Instant::now();
    insert_events_sqlite(&path, &tenant.workspace_id, options.memory_events, at).await?;
    let insert_seconds = t.elapsed().as_secs_f64();
    receiver.reset(options.memory_reply, false);
    let mut server = Server::start(&options.trellis, dir, &url, &webhook_env(receiver, true, options, &[])).await?;
    let target = options.memory_events as f64;
    let deadline = Instant::now() + Duration::from_secs_f64(options.timeout.unwrap_or(600.0));
    let mut progress = Instant::now();
    let pending = loop {
        server.check_alive()?;
        let pending = metric(&http, &server.base, "trellis_webhook_queue_depth").await.unwrap_or(0.0);
        if pending >= target {
            break pending;
        }
        if Instant::now() > deadline {
            eprintln!("  warning: the backlog gauge shows {pending} pending, not {target}, before the timeout");
            break pending;
        }
        if progress.elapsed() > Duration::from_secs(10) {
            eprintln!("  … backlog gauge at {pending} of {target}");
            progress = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let fan_out_seconds = server.spawned.elapsed().as_secs_f64();
    let (backlog_rss, backlog_hwm, backlog_anon) = memory_mib(&server.pid);
    let attempts = receiver.count();
    server.stop().await?;
    Ok(MemoryResult {
        idle_rss,
        idle_hwm,
        idle_anon,
        backlog_rss,
        backlog_hwm,
        backlog_anon,
        fan_out_seconds,
        pending_seen: pending,
        attempts,
        insert_seconds,
    })
}

struct PeerResult {
    delivered: Delivered,
    failures: usize,
}

/// The driver delivers N signed requests itself: signing + HTTPS, no database.
async fn peer_phase(options: &Options, receiver: &Receiver) -> Result<PeerResult> {
    let n = options.events;
    let secret = format!("whsec_{}", "5a".repeat(40));
    let workspace = "ws_peerbench0000000000";
    let mut roots = rustls::RootCertStore::empty();
    roots.add(receiver.cert_der.clone())?;
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    receiver.reset(Reply::Ok, false);
    let next = Arc::new(AtomicUsize::new(1));
    let occurred = rfc3339_ms(now_ms());
    let probe = CpuProbe::start(&[]);
    let mut tasks = Vec::new();
    for _ in 0..options.peer_tasks {
        let (connector, next, secret, occurred) = (connector.clone(), next.clone(), secret.clone(), occurred.clone());
        let port = receiver.port;
        tasks.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            tcp.set_nodelay(true)?;
            let name = rustls_pki_types::ServerName::try_from("localhost")?;
            let mut tls = connector.connect(name, tcp).await?;
            let mut buf = vec![0u8; 4096];
            let mut request = Vec::with_capacity(2048);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i > n {
                    return Ok::<_, anyhow::Error>(());
                }
                // The body as the server builds it: {id, type, workspaceId, occurredAt, data}.
                let event_id = format!("evt_{i}");
                let body = json!({
                    "id": event_id,
                    "type": "certificate.created",
                    "workspaceId": workspace,
                    "occurredAt": occurred,
                    "data": event_data(i as i64),
                })
                .to_string();
                let timestamp = (now_ms() / 1000).to_string();
                let signature = hmac_hex(&secret, &timestamp, body.as_bytes());
                request.clear();
                write!(
                    Adapter(&mut request),
                    "POST /hook HTTP/1.1\r\nhost: localhost:{port}\r\ncontent-type: application/json\r\n\
                     user-agent: delivery-bench-peer\r\ntrellis-event-id: {event_id}\r\n\
                     trellis-event-type: certificate.created\r\ntrellis-delivery-id: dlv_peer{i:020}\r\n\
                     trellis-timestamp: {timestamp}\r\ntrellis-signature: v1={signature}\r\n\
                     content-length: {}\r\n\r\n",
                    body.len()
                )?;
                request.extend_from_slice(body.as_bytes());
                tls.write_all(&request).await?;
                tls.flush().await?;
                // The response: a status line and headers, no body (Content-Length: 0).
                let mut head = Vec::new();
                loop {
                    let got = tls.read(&mut buf).await?;
                    if got == 0 {
                        bail!("the receiver closed the connection");
                    }
                    head.extend_from_slice(&buf[..got]);
                    if head.ends_with(b"\r\n\r\n") {
                        break;
                    }
                }
                if !head.starts_with(b"HTTP/1.1 200") {
                    bail!("the receiver answered {}", String::from_utf8_lossy(&head).lines().next().unwrap_or(""));
                }
            }
        }));
    }
    let mut failures = 0;
    for task in tasks {
        if let Err(err) = task.await? {
            failures += 1;
            if failures <= 3 {
                eprintln!("  peer task failed: {err:#}");
            }
        }
    }
    let cpu = probe.stop(&[]);
    let arrivals = receiver.arrivals();
    let mut delivered = Delivered { received: arrivals.len(), cpu, ..Delivered::default() };
    if arrivals.len() >= n {
        delivered.rate = n as f64 / ((arrivals[n - 1].at_ns - arrivals[0].at_ns) as f64 / 1e9).max(1e-9);
    } else {
        delivered.rate = f64::NAN;
    }
    let mut events: Vec<i64> = arrivals.iter().map(|a| a.event).collect();
    events.sort_unstable();
    events.dedup();
    delivered.duplicates = arrivals.len() - events.len();
    delivered.missing = n.saturating_sub(events.len());
    (delivered.checked_signatures, delivered.bad_signatures) = receiver.check_signatures(&secret);
    Ok(PeerResult { delivered, failures })
}

/// `write!` into a `Vec<u8>` without `std::io::Write` (which would clash with tokio's traits).
struct Adapter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Adapter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// A run

async fn run_once(
    options: &Options,
    run: usize,
    receiver: &Receiver,
    bodies: &[bytes::Bytes],
    samples: &mut Samples,
) -> Result<()> {
    let wanted: Vec<&str> = PHASES.iter().copied().filter(|p| options.wants(p)).collect();
    let mut order = wanted.clone();
    if !order.is_empty() {
        let shift = (run - 1) % order.len();
        order.rotate_left(shift);
    }
    eprintln!("run {run}/{}: phases {}", options.runs, order.join(" → "));
    let n = options.events;
    let mut rates: BTreeMap<&str, f64> = BTreeMap::new();
    for phase in order {
        match phase {
            "throughput" => {
                let d = throughput_phase(options, receiver).await?;
                print_delivered("sqlite", n, &d);
                record_delivered(samples, "sqlite", ">= 2000", n, &d);
                rates.insert("sqlite", d.rate);
            }
            "postgres" => {
                let admin = options.postgres.as_deref().unwrap_or_default();
                let d = postgres_phase(options, receiver, admin, run).await?;
                print_delivered("postgres×2", n, &d);
                record_delivered(samples, "postgres, 2 replicas", "", n, &d);
                rates.insert("postgres", d.rate);
            }
            "latency" => {
                let r = latency_phase(options, receiver, bodies).await?;
                let lat = sorted(&r.latencies);
                let reg = sorted(&r.register_ms);
                eprintln!(
                    "  latency    event→delivery p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms ({} events; p50 {:.1} ms in the 1st half, {:.1} ms in the 2nd; {:.0} deliveries/s)  emitted {:.0}/s (acknowledged {:.0}/s, {} failed; pacer lag ≤ {:.1} ms)  register p50 {:.1} ms p99 {:.1} ms  {} undelivered, {} duplicates, signatures {}/{} bad  server {:.2} cores  others {:.2} cores",
                    percentile(&lat, 50.0),
                    percentile(&lat, 99.0),
                    max(&lat),
                    lat.len(),
                    percentile(&sorted(&r.first_half), 50.0),
                    percentile(&sorted(&r.second_half), 50.0),
                    r.delivered_rate,
                    r.emit_rate,
                    r.acknowledged_rate,
                    r.register_failures,
                    r.pacer_max_lag_ms,
                    percentile(&reg, 50.0),
                    percentile(&reg, 99.0),
                    r.undelivered,
                    r.duplicates,
                    r.bad_signatures,
                    r.checked_signatures,
                    r.cpu.servers / r.cpu.window,
                    r.cpu.others(),
                );
                let prefix = format!("latency at {}/s", options.rate);
                samples.push(&format!("{prefix}: event → delivery p50"), "ms", "", percentile(&lat, 50.0));
                samples.push(&format!("{prefix}: event → delivery p99"), "ms", "", percentile(&lat, 99.0));
                samples.push(&format!("{prefix}: event → delivery max"), "ms", "", max(&lat));
                samples.push(
                    &format!("{prefix}: event → delivery p50, 1st half of the window"),
                    "ms",
                    "",
                    percentile(&sorted(&r.first_half), 50.0),
                );
                samples.push(
                    &format!("{prefix}: event → delivery p50, 2nd half of the window"),
                    "ms",
                    "",
                    percentile(&sorted(&r.second_half), 50.0),
                );
                samples.push(&format!("{prefix}: deliveries arriving during the window"), "/s", "", r.delivered_rate);
                samples.push(&format!("{prefix}: emit rate achieved"), "/s", &format!("{}", options.rate), r.emit_rate);
                samples.push(&format!("{prefix}: registrations acknowledged"), "/s", "", r.acknowledged_rate);
                samples.push(&format!("{prefix}: registration p50"), "ms", "", percentile(&reg, 50.0));
                samples.push(&format!("{prefix}: registration p99"), "ms", "", percentile(&reg, 99.0));
                samples.push(&format!("{prefix}: pacer max lag"), "ms", "", r.pacer_max_lag_ms);
                samples.push(
                    &format!("{prefix}: failed registrations + undelivered + duplicates"),
                    "",
                    "0",
                    (r.register_failures + r.undelivered + r.duplicates) as f64,
                );
                samples.push(
                    &format!("{prefix}: bad signatures (of first {SIGNATURE_SAMPLE})"),
                    "",
                    "0",
                    r.bad_signatures as f64,
                );
                samples.push(
                    &format!("{prefix}: server CPU utilisation"),
                    "cores",
                    "(2 = all)",
                    r.cpu.servers / r.cpu.window,
                );
                samples.push(&format!("{prefix}: other processes' CPU"), "cores", "(~0 = quiet)", r.cpu.others());
            }
            "memory" => {
                let m = memory_phase(options, receiver).await?;
                eprintln!(
                    "  memory     idle VmRSS {:.1} MiB (HWM {:.1}, anonymous {:.1})  with {} pending VmRSS {:.1} MiB (HWM {:.1}, anonymous {:.1})  gauge reached after {:.1} s  {} attempts meanwhile  (insert {:.1} s)",
                    m.idle_rss, m.idle_hwm, m.idle_anon, m.pending_seen, m.backlog_rss, m.backlog_hwm, m.backlog_anon, m.fan_out_seconds, m.attempts, m.insert_seconds
                );
                let k = options.memory_events;
                samples.push("memory: VmRSS idle, worker on (before the insert)", "MiB", "", m.idle_rss);
                samples.push("memory: VmHWM idle", "MiB", "", m.idle_hwm);
                samples.push(&format!("memory: VmRSS with {k} pending"), "MiB", "", m.backlog_rss);
                samples.push(&format!("memory: VmHWM with {k} pending"), "MiB", "", m.backlog_hwm);
                samples.push("memory: RssAnon idle (the process's own allocations)", "MiB", "", m.idle_anon);
                samples.push(&format!("memory: RssAnon with {k} pending"), "MiB", "", m.backlog_anon);
                samples.push(
                    &format!("memory: VmHWM with {k} pending minus idle VmHWM"),
                    "MiB",
                    "",
                    m.backlog_hwm - m.idle_hwm,
                );
                samples.push(&format!("memory: server start → gauge shows {k} pending"), "s", "", m.fan_out_seconds);
                samples.push("memory: attempts the receiver got meanwhile", "", "", m.attempts as f64);
            }
            "peer" => {
                let p = peer_phase(options, receiver).await?;
                let d = &p.delivered;
                eprintln!(
                    "  peer       {:>7.0}/s  {} received of {n} ({} missing, {} duplicate)  signatures {}/{} bad  {} failed tasks  driver {:.2} cores  machine {:.2} cores",
                    d.rate,
                    d.received,
                    d.missing,
                    d.duplicates,
                    d.bad_signatures,
                    d.checked_signatures,
                    p.failures,
                    d.cpu.driver / d.cpu.window,
                    d.cpu.machine_cores,
                );
                samples.push("peer: deliveries/s (signing + HTTPS, no database)", "/s", "", d.rate);
                samples.push("peer: driver CPU (client + receiver)", "cores", "(2 = all)", d.cpu.driver / d.cpu.window);
                samples.push("peer: other processes' CPU", "cores", "(~0 = quiet)", d.cpu.others());
                samples.push(
                    "peer: failures + missing + duplicates + bad signatures",
                    "",
                    "0",
                    (p.failures + d.missing + d.duplicates + d.bad_signatures) as f64,
                );
                rates.insert("peer", d.rate);
            }
            other => bail!("unknown phase {other}"),
        }
    }
    if let Some(peer) = rates.get("peer") {
        if let Some(sqlite) = rates.get("sqlite") {
            samples.push("ratio sqlite / peer", "%", "", 100.0 * sqlite / peer);
        }
        if let Some(postgres) = rates.get("postgres") {
            samples.push("ratio postgres (2 replicas) / peer", "%", "", 100.0 * postgres / peer);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Report

fn report(options: &Options, samples: &Samples, started: &str) -> String {
    let mut out = String::new();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "delivery-bench  {started}  runs={}  events={}  rate={}/s  seconds={}  memory-events={}  peer-tasks={}  cpus={cpus}  server={}{}",
        options.runs,
        options.events,
        options.rate,
        options.seconds,
        options.memory_events,
        options.peer_tasks,
        options.trellis.display(),
        if options.postgres.is_some() { "  postgres=yes" } else { "" }
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
    let peer = samples.median_of("peer: deliveries/s (signing + HTTPS, no database)");
    for (label, name) in [
        ("sqlite", format!("sqlite: deliveries/s (1st → {}th arrival)", options.events)),
        ("postgres (2 replicas)", format!("postgres, 2 replicas: deliveries/s (1st → {}th arrival)", options.events)),
    ] {
        let rate = samples.median_of(&name);
        if rate.is_finite() && peer.is_finite() {
            let _ = writeln!(out, "ratio of the medians {label} / peer: {:.1}%", 100.0 * rate / peer);
        }
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
            "{} is missing: build it with `cargo build --release -p trellis --bin trellis` (make bench-delivery does)",
            options.trellis.display()
        );
    }
    if options.only.iter().any(|p| p == "postgres") && options.postgres.is_none() {
        eprintln!("note: no --postgres URL (DELIVERY_BENCH_POSTGRES_URL): the two-replica PostgreSQL phase is skipped");
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
    // The latency phase's certificates, made before any clock runs (distinct names; each run
    // has its own database, so the runs reuse them).
    let bodies: Vec<bytes::Bytes> = if options.wants("latency") {
        let count = (options.rate * (options.warmup + options.seconds)).ceil() as usize + 1;
        eprintln!("generating {count} certificates for the latency phase (not timed) ...");
        (0..count)
            .map(|i| {
                let (pem, _) = trellis_tests::certs::Spec::tls(&format!("lat-{i}.delivery.example.com")).build();
                bytes::Bytes::from(serde_json::to_vec(&json!({ "certificate": pem })).unwrap_or_default())
            })
            .collect()
    } else {
        Vec::new()
    };
    // The receiver and the HTTP clients share one runtime, one worker per core.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut samples = Samples::default();
    runtime.block_on(async {
        let receiver = Receiver::start().await?;
        for run in 1..=options.runs {
            run_once(&options, run, &receiver, &bodies, &mut samples).await?;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let text = report(&options, &samples, &started);
    println!("{text}");
    if let Some(path) = &options.json {
        let json = json!({
            "started": started,
            "runs": options.runs,
            "events": options.events,
            "rate": options.rate,
            "seconds": options.seconds,
            "memoryEvents": options.memory_events,
            "peerTasks": options.peer_tasks,
            "postgres": options.postgres.is_some(),
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
