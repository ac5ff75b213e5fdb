//! `pki-bench`: the public `/pki` figures of issue 21, against the real binary (`TRELLIS_BIN`,
//! default target/release/trellis next to this driver), loopback only.
//!
//! * the API's p99 (`GET /api/certificates` with an API key, `API_CLIENTS` sequential clients)
//!   idle, then while `/pki` is flooded with OCSP POSTs against an RSA-4096 internal root
//!   (`FLOOD` concurrent senders from a child process, every request with a nonce, so every
//!   answer is a fresh RSA-4096 signature: the worst case), and the ratio (target: within 2×);
//! * OCSP answers/s of that flood, and of nonce-less requests (served from the cache);
//! * CRL GETs/s from the cache (`FLOOD` concurrent clients).
//!
//! Each window lasts `PKI_BENCH_WINDOW_SECS` (default 5). Usage: pki-bench [RUNS] (default 3;
//! medians printed).

use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::json;
use trellis_tests::bench::{env_or, load_average, median, percentile, sorted};
use trellis_tests::Server;

const API_CLIENTS: usize = 4;
const FLOOD: usize = 64;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    if std::env::var("TRELLIS_BIN").is_err() {
        let beside = std::env::current_exe()?.with_file_name("trellis");
        std::env::set_var("TRELLIS_BIN", beside);
    }
    let args: Vec<String> = std::env::args().collect();
    let window = Duration::from_secs(env_or("PKI_BENCH_WINDOW_SECS", 5u64)?);
    if args.get(1).map(String::as_str) == Some("--flood-only") {
        let (url, file) = (args.get(2).cloned().unwrap_or_default(), args.get(3).cloned().unwrap_or_default());
        let body = std::fs::read(&file).with_context(|| format!("reading {file}"))?;
        let answered = flood(&url, Some(body), window + Duration::from_secs(2)).await;
        println!("answered {answered}");
        return Ok(());
    }
    let runs: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(3);
    let mut figures: Vec<[f64; 6]> = Vec::new();
    for run in 1..=runs {
        let f = one_run(window).await?;
        println!(
            "run {run}/{runs}: API p99 idle {:.2} ms, under an OCSP flood {:.2} ms (ratio {:.2}); \
             OCSP with nonce {:.0}/s, without nonce (cached) {:.0}/s; CRL GETs from cache {:.0}/s (load {:.2})",
            f[0],
            f[1],
            f[1] / f[0].max(0.001),
            f[2],
            f[3],
            f[4],
            f[5]
        );
        figures.push(f);
    }
    let column = |i: usize| median(&figures.iter().map(|f| f[i]).collect::<Vec<_>>());
    let ratios: Vec<f64> = figures.iter().map(|f| f[1] / f[0].max(0.001)).collect();
    println!(
        "medians over {runs} runs: API p99 idle {:.2} ms, under the /pki flood {:.2} ms, ratio {:.2} (target ≤ 2); \
         OCSP signed {:.0}/s, cached {:.0}/s; CRL GETs {:.0}/s",
        column(0),
        column(1),
        median(&ratios),
        column(2),
        column(3),
        column(4)
    );
    Ok(())
}

/// One server: [API p99 idle, API p99 flooded, OCSP/s signed, OCSP/s cached, CRL GET/s, load].
async fn one_run(window: Duration) -> Result<[f64; 6]> {
    let server = Server::start();
    let admin = server.admin().await;
    // An imported RSA-4096 root made by openssl: generating one in the service costs seconds
    // (minutes in a debug build) and is not what is measured.
    let dir = tempfile::tempdir()?;
    let openssl = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir.path()).output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(anyhow!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
        }
    };
    openssl(&[
        "req",
        "-x509",
        "-nodes",
        "-days",
        "365",
        "-subj",
        "/CN=Bench RSA-4096 Root",
        "-newkey",
        "rsa:4096",
        "-keyout",
        "root.key",
        "-out",
        "root.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ])?;
    let (certificate_pem, private_key_pem) =
        (std::fs::read_to_string(dir.path().join("root.pem"))?, std::fs::read_to_string(dir.path().join("root.key"))?);
    let ca = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "Bench RSA-4096", "type": "internal",
                    "config": { "certificatePem": certificate_pem, "privateKeyPem": private_key_pem } }),
        )
        .await;
    let ca_id = ca.body["data"]["id"].as_i64().ok_or_else(|| anyhow!("creating the CA: {}", ca.body))?;
    let mut leaf = String::new();
    for i in 0..50 {
        let issued = admin
            .post("/api/certificates/issue", json!({ "caId": ca_id, "commonName": format!("b{i}.example") }))
            .await;
        leaf = issued.body["data"]["certificate"].as_str().ok_or_else(|| anyhow!("issuing: {}", issued.body))?.into();
    }
    let reader = server.key_client(&["certificates:read"]).await;
    let key = reader.api_key().unwrap_or_default().to_owned();

    // The OCSP requests, made by openssl as relying parties make them.
    let ca_pem = admin.get(&format!("/pki/{ca_id}/ca")).await.bytes;
    std::fs::write(dir.path().join("ca.pem"), ca_pem)?;
    std::fs::write(dir.path().join("leaf.pem"), leaf)?;
    for (file, nonce) in [("nonce.der", None), ("plain.der", Some("-no_nonce"))] {
        let mut args = vec!["ocsp", "-issuer", "ca.pem", "-cert", "leaf.pem", "-reqout", file];
        args.extend(nonce);
        let out = std::process::Command::new("openssl").args(&args).current_dir(dir.path()).output()?;
        if !out.status.success() {
            return Err(anyhow!("openssl ocsp: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    let ocsp_url = server.url(&format!("/pki/{ca_id}/ocsp"));
    let api_url = server.url("/api/certificates?limit=20");

    let idle = api_latencies(&api_url, &key, window).await;
    let child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["--flood-only", &ocsp_url, &dir.path().join("nonce.der").display().to_string()])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // The flood's senders connect first; then the API is measured while they run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let load = load_average();
    let flooded = api_latencies(&api_url, &key, window).await;
    let output = child.wait_with_output().await?;
    let answered: f64 = String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("answered ").and_then(|n| n.trim().parse().ok()))
        .unwrap_or(f64::NAN);
    let signed_per_sec = answered / (window + Duration::from_secs(2)).as_secs_f64();

    let plain = std::fs::read(dir.path().join("plain.der"))?;
    let cached_per_sec = flood(&ocsp_url, Some(plain), window).await as f64 / window.as_secs_f64();
    let crl_url = server.url(&format!("/pki/{ca_id}/crl"));
    let crl_per_sec = flood(&crl_url, None, window).await as f64 / window.as_secs_f64();

    let p99 = |samples: &[f64]| percentile(&sorted(samples), 99.0);
    Ok([p99(&idle), p99(&flooded), signed_per_sec, cached_per_sec, crl_per_sec, load])
}

/// Latencies (ms) of `GET url` from `API_CLIENTS` sequential clients for `window`.
async fn api_latencies(url: &str, key: &str, window: Duration) -> Vec<f64> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(API_CLIENTS).build().unwrap_or_default();
    let clients = (0..API_CLIENTS).map(|_| {
        let (http, url, key) = (http.clone(), url.to_owned(), key.to_owned());
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let started = Instant::now();
            while started.elapsed() < window {
                let t = Instant::now();
                let ok = http.get(&url).header("X-API-Key", &key).send().await.is_ok_and(|r| r.status().is_success());
                if ok {
                    samples.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
            samples
        })
    });
    let handles: Vec<_> = clients.collect();
    let mut samples = Vec::new();
    for handle in handles {
        samples.extend(handle.await.unwrap_or_default());
    }
    samples
}

/// `FLOOD` concurrent senders for `window`: OCSP POSTs of `body`, or GETs without one. Returns
/// the answers that were 200.
async fn flood(url: &str, body: Option<Vec<u8>>, window: Duration) -> u64 {
    let http = reqwest::Client::builder().pool_max_idle_per_host(FLOOD).build().unwrap_or_default();
    let senders = (0..FLOOD).map(|_| {
        let (http, url, body) = (http.clone(), url.to_owned(), body.clone());
        tokio::spawn(async move {
            let mut answered = 0u64;
            let started = Instant::now();
            while started.elapsed() < window {
                let request = match &body {
                    Some(body) => http.post(&url).header("content-type", "application/ocsp-request").body(body.clone()),
                    None => http.get(&url),
                };
                if let Ok(response) = request.send().await {
                    let ok = response.status().is_success();
                    if response.bytes().await.is_ok() && ok {
                        answered += 1;
                    }
                }
            }
            answered
        })
    });
    let handles: Vec<_> = senders.collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await.unwrap_or(0);
    }
    total
}
