//! `discovery-bench`: the discovery import rate (certificates/s) of a `ca_certs` scan against
//! the real release binary (`target/release/trellis serve`, next to this driver) and the bulk
//! fixture connector (`target/plugins/fixture-ca-bulk.wasm`, type `fixture-bulk`: `--count`
//! distinct certificates, listed 100 per page).
//!
//! Each run starts a fresh server and database (SQLite in a temporary directory, or PostgreSQL
//! with `TRELLIS_TEST_POSTGRES_URL`), installs the fixture, registers a CA with it, starts a scan
//! and reads the scan's own `startedAt`/`finishedAt` once it completes: the import rate is
//! `new / (finishedAt - startedAt)`. A second scan of the same CA finds every certificate
//! already known (idempotent by fingerprint): its rate is reported too. Medians over `--runs`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use trellis_tests::{Client, Server};

const HELP: &str = "\
discovery-bench: import rate of a ca_certs discovery scan against target/release/trellis

USAGE: discovery-bench [--count N] [--runs N]

  --count N   certificates the fixture CA lists          [DISCOVERY_BENCH_COUNT, default 10000]
  --runs N    runs, each with a fresh server and database; medians reported
                                                        [DISCOVERY_BENCH_RUNS, default 3]
Environment: TRELLIS_BIN (default: trellis next to this binary), TRELLIS_TEST_POSTGRES_URL.
";

fn option(args: &[String], name: &str, env: &str, default: u64) -> Result<u64> {
    let given = args.iter().position(|a| a == name).map(|i| args.get(i + 1).cloned().unwrap_or_default());
    match given.or_else(|| std::env::var(env).ok()) {
        Some(text) => text.parse().with_context(|| format!("{name}: `{text}` is not a number")),
        None => Ok(default),
    }
}

fn millis(text: &Value) -> Result<i64> {
    let text = text.as_str().context("a timestamp is missing")?;
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)?;
    Ok((at.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// Starts a scan of `ca` and waits for it; returns (certificates found, new, seconds by the
/// scan's own timestamps).
async fn scan(admin: &Client, ca: &Value) -> Result<(i64, i64, f64)> {
    let res = admin.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": ca })).await;
    if res.status != 201 {
        bail!("starting the scan: {} {}", res.status, res.body);
    }
    let id = res.body["data"]["id"].as_i64().context("scan id")?;
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let scan = admin.get(&format!("/api/discovery/scans/{id}")).await.body["data"].clone();
        match scan["status"].as_str() {
            Some("completed") => {
                let ms = millis(&scan["finishedAt"])? - millis(&scan["startedAt"])?;
                let found = scan["found"].as_i64().unwrap_or(0);
                return Ok((found, scan["new"].as_i64().unwrap_or(0), (ms.max(1) as f64) / 1000.0));
            }
            Some("failed" | "cancelled") => bail!("the scan ended {scan}"),
            _ if Instant::now() > deadline => bail!("the scan did not finish within an hour"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{HELP}");
        return Ok(());
    }
    let count = option(&args, "--count", "DISCOVERY_BENCH_COUNT", 10_000)?;
    let runs = option(&args, "--runs", "DISCOVERY_BENCH_RUNS", 3)?.max(1);
    if std::env::var_os("TRELLIS_BIN").is_none() {
        let beside = std::env::current_exe()?.with_file_name("trellis");
        std::env::set_var("TRELLIS_BIN", &beside);
    }
    let fixture = trellis_tests::workspace_root().join("target/plugins/fixture-ca-bulk.wasm");
    let bytes = std::fs::read(&fixture)
        .with_context(|| format!("{}: build it with `scripts/build-plugins.sh ca-bulk`", fixture.display()))?;
    let database = if trellis_tests::on_postgres() { "PostgreSQL" } else { "SQLite" };
    println!("discovery-bench: {count} certificates, {runs} runs, {database}, {}", std::env::var("TRELLIS_BIN")?);
    let (mut first, mut again) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        let server = Server::start_with(&[("TRELLIS_CA_HEALTH_INTERVAL_SECS", "0")]);
        let admin = server.admin().await;
        let res = admin.post_raw("/api/plugins", "application/wasm", bytes.clone()).await;
        if res.status != 201 {
            bail!("installing the fixture: {} {}", res.status, res.body);
        }
        let ca = admin
            .post(
                "/api/certificate-authorities",
                json!({ "name": "Bulk", "type": "fixture-bulk", "config": { "count": count } }),
            )
            .await;
        if ca.status != 201 {
            bail!("creating the CA: {} {}", ca.status, ca.body);
        }
        let ca = ca.body["data"]["id"].clone();
        let (found, new, secs) = scan(&admin, &ca).await?;
        if new != count as i64 {
            bail!("run {run}: the scan imported {new} of {count} ({found} found)");
        }
        let (found2, new2, secs2) = scan(&admin, &ca).await?;
        if found2 != count as i64 || new2 != 0 {
            bail!("run {run}: the rescan found {found2} with {new2} new");
        }
        let (rate, rate2) = (new as f64 / secs, found2 as f64 / secs2);
        println!("run {run}: import {new} in {secs:.2} s = {rate:.0}/s; rescan (all known) {found2} in {secs2:.2} s = {rate2:.0}/s");
        first.push(rate);
        again.push(rate2);
    }
    println!(
        "median: import {:.0} certificates/s, rescan {:.0} certificates/s ({count} certificates, {runs} runs, {database})",
        median(first),
        median(again)
    );
    Ok(())
}
