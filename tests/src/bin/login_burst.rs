//! `login-burst`: the login figures of issue 12, against the real binary (`TRELLIS_BIN`, default
//! target/release/trellis next to this driver).
//!
//! * wrong logins that reach the password check when 200 arrive at once for one account from
//!   one client (the limit is 5: the rest must be 429);
//! * `GET /health` latency (p50, p99) while idle and during bursts of 200 concurrent logins from
//!   200 clients for 200 accounts (every one runs Argon2id: the worst case for the blocking pool).
//!
//! Usage: login-burst [RUNS]   (default 3; medians printed)

use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use trellis_tests::Server;

const HEALTH_CLIENTS: usize = 4;
const HEALTH_REQUESTS: usize = 1200;
const BURST: usize = 200;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<()> {
    if std::env::var("TRELLIS_BIN").is_err() {
        let beside = std::env::current_exe()?.with_file_name("trellis");
        std::env::set_var("TRELLIS_BIN", beside);
    }
    let runs: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(3);
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

/// `HEALTH_REQUESTS` health checks from `HEALTH_CLIENTS` clients; with `burst`, waves of that
/// many distinct logins run alongside until the checks are done.
async fn health(http: &reqwest::Client, base: &str, burst: Option<usize>) -> Latency {
    let started = Instant::now();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let burster = burst.map(|size| {
        let (http, base, done) = (http.clone(), base.to_string(), done.clone());
        tokio::spawn(async move {
            let mut sent = 0usize;
            let mut wave = 0usize;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                wave += 1;
                let logins = (0..size).map(|i| {
                    let (http, base) = (http.clone(), base.clone());
                    async move {
                        let email = format!("user{wave}-{i}@example.com");
                        let client = format!("198.51.{}.{}", (i / 250) % 250, i % 250 + 1);
                        login(&http, &base, &email, &client).await
                    }
                });
                sent += futures(logins).await.len();
            }
            sent
        })
    });
    let per_client = HEALTH_REQUESTS / HEALTH_CLIENTS;
    let checks = (0..HEALTH_CLIENTS).map(|_| {
        let (http, base) = (http.clone(), base.to_string());
        async move {
            let mut samples = Vec::with_capacity(per_client);
            for _ in 0..per_client {
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
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let logins = match burster {
        Some(handle) => handle.await.unwrap_or(0),
        None => 0,
    };
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples.get(((samples.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN);
    Latency { p50: at(0.50), p99: at(0.99), logins, seconds: started.elapsed().as_secs_f64() }
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
