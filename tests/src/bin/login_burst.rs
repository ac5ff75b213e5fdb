//! `login-burst`: the login figures of issue 12, against the real binary (`TRELLIS_BIN`, default
//! target/release/trellis next to this driver).
//!
//! * wrong logins that reach the password check when 200 arrive at once for one account from
//!   one client (the limit is 5: the rest must be 429);
//! * `GET /health` latency (p50, p99) while idle and during bursts of 200 concurrent logins from
//!   200 clients for 200 accounts (every one runs Argon2id: the worst case for the blocking pool).
//!
//! The bursts come from a child process (`login-burst --burst-only URL`), so that the health
//! client's own scheduling does not share a runtime with 200 login tasks.
//!
//! Usage: login-burst [RUNS]   (default 3; medians printed)

use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use trellis_tests::Server;

const HEALTH_CLIENTS: usize = 4;
/// How long health is measured, idle and during bursts (a wave of 200 Argon2id logins takes
/// about 3 s on 2 cores, so this spans more than one).
const HEALTH_WINDOW: std::time::Duration = std::time::Duration::from_secs(8);
const BURST: usize = 200;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<()> {
    if std::env::var("TRELLIS_BIN").is_err() {
        let beside = std::env::current_exe()?.with_file_name("trellis");
        std::env::set_var("TRELLIS_BIN", beside);
    }
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--burst-only") {
        return burst_forever(args.get(2).cloned().unwrap_or_default()).await;
    }
    let runs: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(3);
    let mut accepted = Vec::new();
    let mut idle = Vec::new();
    let mut loaded = Vec::new();
    for run in 1..=runs {
        let server =
            Server::start_with(&[("TRELLIS_TRUSTED_PROXIES", "127.0.0.1"), ("TRELLIS_LOGIN_MAX_FAILURES", "5")]);
        let http = reqwest::Client::builder().pool_max_idle_per_host(64).build()?;
        let base = server.base_url.clone();

        let statuses = futures((0..BURST).map(|_| {
            let (http, base) = (http.clone(), base.clone());
            async move { login(&http, &base, trellis_tests::ADMIN_EMAIL, "203.0.113.7").await }
        }))
        .await;
        let checked = statuses.iter().filter(|s| **s == 401).count();
        accepted.push(checked as f64);

        let quiet = health(&http, &base, None).await;
        let bursting = health(&http, &base, Some(BURST)).await;
        println!(
            "run {run}/{runs}: wrong logins checked {checked}/{BURST} (rest 429); /health idle p50 {:.2} p99 {:.2} ms; \
             during login bursts p50 {:.2} p99 {:.2} ms ({} logins in {:.1} s)",
            quiet.p50, quiet.p99, bursting.p50, bursting.p99, bursting.logins, bursting.seconds
        );
        idle.push(quiet.p99);
        loaded.push(bursting.p99);
    }
    println!(
        "medians over {runs} runs: wrong logins checked {:.0} (limit 5); /health p99 idle {:.2} ms, during bursts {:.2} ms (ratio {:.2})",
        median(&mut accepted),
        median(&mut idle.clone()),
        median(&mut loaded.clone()),
        median(&mut loaded) / median(&mut idle).max(0.001)
    );
    Ok(())
}

async fn login(http: &reqwest::Client, base: &str, email: &str, client: &str) -> u16 {
    http.post(format!("{base}/api/auth/login"))
        .header("x-forwarded-for", client)
        .json(&json!({ "email": email, "password": "wrong-password" }))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

struct Latency {
    p50: f64,
    p99: f64,
    logins: usize,
    seconds: f64,
}

/// Health checks from `HEALTH_CLIENTS` clients for `HEALTH_WINDOW`; with `burst`, a child process
/// sends waves of that many distinct logins meanwhile.
async fn health(http: &reqwest::Client, base: &str, burst: Option<usize>) -> Latency {
    let started = Instant::now();
    let mut burster: Option<tokio::process::Child> = match burst {
        Some(_) => Some(
            tokio::process::Command::new(std::env::current_exe().unwrap_or_default())
                .args(["--burst-only", base])
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .ok(),
        )
        .flatten(),
        None => None,
    };
    // Let the first wave get going before measuring.
    if burster.is_some() {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let checks = (0..HEALTH_CLIENTS).map(|_| {
        let (http, base) = (http.clone(), base.to_string());
        async move {
            let mut samples = Vec::new();
            let window = Instant::now();
            while window.elapsed() < HEALTH_WINDOW {
                let t = Instant::now();
                let ok = http.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success());
                if ok {
                    samples.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
            samples
        }
    });
    let handles: Vec<_> = checks.map(tokio::spawn).collect();
    let mut samples = Vec::new();
    for handle in handles {
        samples.extend(handle.await.unwrap_or_default());
    }
    let logins = match burster.take() {
        Some(mut child) => {
            let _ = child.start_kill();
            let output = child.wait_with_output().await.map(|o| o.stdout).unwrap_or_default();
            String::from_utf8_lossy(&output).lines().filter(|l| l.starts_with("wave")).count() * BURST
        }
        None => 0,
    };
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples.get(((samples.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    Latency { p50: at(0.50), p99: at(0.99), logins, seconds: started.elapsed().as_secs_f64() }
}

/// The child process: waves of `BURST` concurrent logins, each for a new account from a new
/// client address, until killed; prints a line per finished wave.
async fn burst_forever(base: String) -> Result<()> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    for wave in 0.. {
        let logins = (0..BURST).map(|i| {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let email = format!("user{wave}-{i}@example.com");
                let client = format!("198.51.{}.{}", (i / 250) % 250, i % 250 + 1);
                login(&http, &base, &email, &client).await
            }
        });
        futures(logins).await;
        println!("wave {wave}");
    }
    Ok(())
}

async fn futures<F: std::future::Future<Output = u16> + Send + 'static>(all: impl Iterator<Item = F>) -> Vec<u16> {
    let handles: Vec<_> = all.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap_or(0));
    }
    out
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
