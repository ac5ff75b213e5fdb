//! `acme-bench`: ACME issuance through Trellis against `lego` (Debian's package) on the same
//! Pebble, HTTP-01 validated for real (no `PEBBLE_VA_ALWAYS_VALID`, `PEBBLE_VA_NOSLEEP=1`,
//! no injected badNonce).
//!
//! * Trellis: `POST /api/certificates/issue` (server-generated P-256 key, one new name per
//!   order) through an `acme` CA whose account was registered at create; HTTP-01 answered by
//!   Trellis's own challenge listener. `--concurrency` closed-loop clients until `--orders`
//!   certificates are issued.
//! * lego: `lego run --key-type ec256 --http --http.webroot` per order (a new process per
//!   certificate, as lego is used), the same concurrency, one account registered beforehand;
//!   HTTP-01 answered by a small static server over lego's webroot on the port Pebble validates.
//!
//! Reported per side: orders/s (orders over the phase's wall time) and the p50 of one order's
//! latency, medians over `--runs` (phases alternate from run to run). `make bench-acme` builds
//! the release binaries and runs it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trellis_tests::pebble::{free_port, Pebble, PebbleOptions};
use trellis_tests::Server;

const HELP: &str = "\
acme-bench: ACME issuance through Trellis vs lego on the same Pebble

USAGE: acme-bench [--orders N] [--concurrency C] [--runs R] [--lego PATH]

  --orders N        certificates per side and run                 [default 48]
  --concurrency C   orders in flight at once                      [default 8]
  --runs R          runs (fresh Pebble and server each); medians  [default 3]
  --lego PATH       the lego binary                               [default /usr/bin/lego]
The server is TRELLIS_BIN, else target/release/trellis next to this binary.
";

struct Options {
    orders: usize,
    concurrency: usize,
    runs: usize,
    lego: PathBuf,
}

fn options() -> Result<Options> {
    let mut o = Options { orders: 48, concurrency: 8, runs: 3, lego: PathBuf::from("/usr/bin/lego") };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--orders" => o.orders = value()?.parse()?,
            "--concurrency" => o.concurrency = value()?.parse()?,
            "--runs" => o.runs = value()?.parse()?,
            "--lego" => o.lego = PathBuf::from(value()?),
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => bail!("unknown option {other}\n{HELP}"),
        }
    }
    if o.orders == 0 || o.concurrency == 0 || o.runs == 0 {
        bail!("--orders, --concurrency and --runs must be positive");
    }
    Ok(o)
}

/// One side's figures of one run.
#[derive(Debug, Clone, Copy)]
struct Figures {
    per_second: f64,
    p50_ms: f64,
}

fn figures(wall: Duration, mut latencies: Vec<Duration>) -> Figures {
    latencies.sort();
    let p50 = latencies.get(latencies.len() / 2).copied().unwrap_or_default();
    Figures { per_second: latencies.len() as f64 / wall.as_secs_f64(), p50_ms: p50.as_secs_f64() * 1e3 }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `orders` jobs, `concurrency` at a time; returns the wall time and each job's latency.
async fn closed_loop<F, Fut>(orders: usize, concurrency: usize, job: F) -> Result<(Duration, Vec<Duration>)>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let job = Arc::new(job);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (job, next) = (job.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= orders {
                    return Ok::<_, anyhow::Error>(latencies);
                }
                let t = Instant::now();
                job(n).await?;
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await??);
    }
    Ok((started.elapsed(), all))
}

async fn trellis_run(o: &Options, run: usize) -> Result<Figures> {
    let http_port = free_port();
    let pebble = Pebble::start(PebbleOptions { http_port, nonce_reject_percent: Some(0), ..PebbleOptions::default() });
    let server = Server::start_with(&[
        ("TRELLIS_ACME_HTTP01_LISTEN", &format!("127.0.0.1:{http_port}")),
        ("TRELLIS_PLUGIN_CA_BUNDLE", &pebble.tls_bundle_path()),
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
    ]);
    let admin = server.admin().await;
    // Challenge answers are presented only for domains the workspace holds (issue 21, finding 4).
    let user = admin.get("/api/auth/user").await;
    let workspace = user.body["data"]["currentWorkspaceId"].as_str().context("workspace")?.to_owned();
    let claim = admin
        .post("/api/admin/domain-claims", json!({ "workspaceId": workspace, "domain": "bench.example.com" }))
        .await;
    if claim.status != 201 {
        bail!("cannot claim bench.example.com: {}", claim.body);
    }
    let ca = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "Pebble", "type": "acme", "url": pebble.directory_url, "config": { "termsOfServiceAgreed": true } }),
        )
        .await;
    if ca.status != 201 {
        bail!("cannot create the ACME CA: {}", ca.body);
    }
    let ca = ca.body["data"]["id"].as_i64().context("CA id")?;
    let admin = Arc::new(admin);
    let (wall, latencies) = closed_loop(o.orders, o.concurrency, move |n| {
        let admin = admin.clone();
        async move {
            let name = format!("t{run}-{n}.bench.example.com");
            let res = admin.post("/api/certificates/issue", json!({ "caId": ca, "commonName": name })).await;
            if res.status != 201 {
                bail!("issue {name}: {} {}", res.status, res.body);
            }
            Ok(())
        }
    })
    .await?;
    Ok(figures(wall, latencies))
}

/// Serves `<webroot>/.well-known/acme-challenge/<token>` on 127.0.0.1:`port` (lego's webroot).
async fn serve_webroot(port: u16, webroot: PathBuf) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let webroot = webroot.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let Ok(n) = tcp.read(&mut buf).await else { return };
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let token = path.strip_prefix("/.well-known/acme-challenge/").unwrap_or("");
                let ok =
                    !token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                let body = if ok {
                    tokio::fs::read(webroot.join(".well-known/acme-challenge").join(token)).await.ok()
                } else {
                    None
                };
                let response = match body {
                    Some(body) => {
                        let mut r =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len())
                                .into_bytes();
                        r.extend(body);
                        r
                    }
                    None => b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
                };
                let _ = tcp.write_all(&response).await;
            });
        }
    });
    Ok(())
}

fn lego_command(lego: &Path, pebble: &Pebble, path: &Path, webroot: &Path, name: &str) -> Command {
    let mut command = Command::new(lego);
    command
        .env("LEGO_CA_CERTIFICATES", pebble.tls_bundle_path())
        .args(["--server", &pebble.directory_url, "--email", "bench@example.com", "--accept-tos"])
        .args(["--key-type", "ec256", "--domains", name, "--http", "--http.webroot"])
        .arg(webroot)
        .arg("--path")
        .arg(path)
        .arg("run");
    command
}

async fn lego_run(o: &Options, run: usize) -> Result<Figures> {
    let http_port = free_port();
    let pebble = Pebble::start(PebbleOptions { http_port, nonce_reject_percent: Some(0), ..PebbleOptions::default() });
    let dir = tempfile::tempdir()?;
    let (path, webroot) = (dir.path().join("lego"), dir.path().join("webroot"));
    std::fs::create_dir_all(webroot.join(".well-known/acme-challenge"))?;
    serve_webroot(http_port, webroot.clone()).await?;
    // The account is registered before the clock starts, as Trellis's is at CA create.
    let warm = lego_command(&o.lego, &pebble, &path, &webroot, &format!("warm{run}.bench.example.com")).output()?;
    if !warm.status.success() {
        bail!("lego: {}", String::from_utf8_lossy(&warm.stderr));
    }
    let (lego, pebble) = (o.lego.clone(), Arc::new(pebble));
    let (wall, latencies) = closed_loop(o.orders, o.concurrency, move |n| {
        let command = lego_command(&lego, &pebble, &path, &webroot, &format!("l{run}-{n}.bench.example.com"));
        async move {
            let out = tokio::process::Command::from(command).output().await?;
            if !out.status.success() {
                bail!("lego: {}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(())
        }
    })
    .await?;
    Ok(figures(wall, latencies))
}

#[tokio::main]
async fn main() -> Result<()> {
    let o = options()?;
    if std::env::var_os("TRELLIS_BIN").is_none() {
        let beside = std::env::current_exe()?.with_file_name("trellis");
        std::env::set_var("TRELLIS_BIN", beside);
    }
    if !o.lego.exists() {
        bail!("{} is missing: apt-get install lego", o.lego.display());
    }
    let (mut trellis, mut lego) = (Vec::new(), Vec::new());
    for run in 0..o.runs {
        // Alternate which side goes first, so drift of the machine spreads over both.
        let order: [bool; 2] = if run % 2 == 0 { [true, false] } else { [false, true] };
        for is_trellis in order {
            if is_trellis {
                let f = trellis_run(&o, run).await?;
                println!("run {run} trellis: {:.1} orders/s, p50 {:.0} ms", f.per_second, f.p50_ms);
                trellis.push(f);
            } else {
                let f = lego_run(&o, run).await?;
                println!("run {run} lego:    {:.1} orders/s, p50 {:.0} ms", f.per_second, f.p50_ms);
                lego.push(f);
            }
        }
    }
    let summary = |name: &str, f: &[Figures]| {
        println!(
            "{name}: median {:.1} orders/s, p50 {:.0} ms ({} orders x {} runs, {} in flight)",
            median(f.iter().map(|f| f.per_second).collect()),
            median(f.iter().map(|f| f.p50_ms).collect()),
            o.orders,
            o.runs,
            o.concurrency
        )
    };
    summary("trellis", &trellis);
    summary("lego", &lego);
    Ok(())
}
