//! `polyglot-bench`: the per-language figures of issue 27 for the same issuance policy (the
//! domain policy's core rules) written in Rust (`domain-policy`, first-party), Python
//! (`py-domain-policy`) and JavaScript (`js-domain-policy`), against the real binary over HTTP,
//! all three in the same run:
//!
//! * component size (bytes of the .wasm);
//! * install time: `POST /api/plugins` of the component on a fresh server (validation, compile,
//!   `describe`); the Rust policy is installed at first start, so it has no figure here;
//! * first call: the first issuance judged by the policy after install (instantiation and, where
//!   the host compiles lazily, compilation);
//! * call p50 / p99: a denied issuance (`POST /api/certificates/issue`, 403 from the policy: no
//!   signing, so the policy call dominates), round-robin over the three languages;
//! * cold start: the first denied issuance per language after SIGKILL and restart on the same data
//!   directory (the compiled-code cache under it is kept);
//! * memory: after that restart, the server's RSS growth over each language's first eleven calls
//!   (its compiled code mapped in plus an instance), then over `concurrency` calls at once;
//! * memory a call needs: the peak of the call's linear memories together (what the policy
//!   kind's memory limit must leave room for), `trellis_plugin_call_memory_peak_bytes` in
//!   `/metrics`, after the latency calls.
//!
//! Each workspace binds exactly one policy, so each request runs one language.
//! Run: `make bench-polyglot`, or `cargo build --release -p trellis --bin trellis -p trellis-tests --bin polyglot-bench &&
//! scripts/build-polyglot-plugins.sh && TRELLIS_BIN=target/release/trellis target/release/polyglot-bench`
//! (env: POLYGLOT_BENCH_CALLS, default 300; POLYGLOT_BENCH_CONCURRENCY, default 8).

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::json;
use trellis_tests::bench::{env_or, percentile, sorted};
use trellis_tests::{Client, Server};

struct Lang {
    name: &'static str,
    policy_type: &'static str,
    file: &'static str,
    installed_by_api: bool,
}

const LANGS: [Lang; 3] = [
    Lang { name: "rust", policy_type: "domain-policy", file: "domain-policy", installed_by_api: false },
    Lang { name: "python", policy_type: "domain-policy-py", file: "py-domain-policy", installed_by_api: true },
    Lang { name: "javascript", policy_type: "domain-policy-js", file: "js-domain-policy", installed_by_api: true },
];

fn rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")?;
    Ok(kb / 1024.0)
}

/// One denied issuance; its latency in ms.
async fn denied(client: &Client, ca: i64) -> Result<f64> {
    let started = Instant::now();
    let res = client.post("/api/certificates/issue", json!({ "caId": ca, "commonName": "www.example.net" })).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if res.status != 403 || res.error_code() != "POLICY_DENIED" {
        bail!("expected a policy denial, got {}: {}", res.status, res.body);
    }
    Ok(ms)
}

#[tokio::main]
async fn main() -> Result<()> {
    let calls: usize = env_or("POLYGLOT_BENCH_CALLS", 300)?;
    let concurrency: usize = env_or("POLYGLOT_BENCH_CONCURRENCY", 8)?;
    // A compiled-code cache of this run's own: in a build tree the binary otherwise shares
    // `target/plugin-cache`, and a component compiled by an earlier run would install in ms.
    let cache = tempfile::tempdir()?;
    let cache_dir = cache.path().display().to_string();
    let mut server = Server::start_with(&[("TRELLIS_PLUGIN_CACHE_DIR", cache_dir.as_str())]);
    let admin = server.admin().await;
    println!(
        "polyglot-bench: {} ({} calls per language, concurrency {concurrency})",
        trellis_tests::trellis_binary().display(),
        calls
    );

    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut sizes = Vec::new();
    let mut installs = Vec::new();
    for lang in &LANGS {
        let bytes = std::fs::read(trellis_tests::plugin_file(lang.file))?;
        sizes.push(bytes.len());
        if lang.installed_by_api {
            let started = Instant::now();
            let res = admin.post_raw("/api/plugins", "application/wasm", bytes).await;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            if res.status != 201 {
                bail!("installing {}: {} {}", lang.file, res.status, res.body);
            }
            installs.push(Some(ms));
        } else {
            installs.push(None);
        }
    }

    let config = json!({ "allowedDnsSuffixes": [".example.com"], "allowWildcards": false, "maxValidityDays": 30 });
    let mut tenants = Vec::new();
    for lang in &LANGS {
        let email = format!("{}@bench.example.com", lang.name);
        let (client, _) = server.new_user(&email).await;
        let ca = client
            .post(
                "/api/certificate-authorities",
                json!({ "name": "Bench Root", "type": "internal", "config": { "subject": { "commonName": "Bench Root" } } }),
            )
            .await;
        let ca_id = ca.body["data"]["id"].as_i64().with_context(|| format!("CA: {}", ca.body))?;
        let policy = client
            .post("/api/issuance-policies", json!({ "name": lang.name, "type": lang.policy_type, "config": config }))
            .await;
        if policy.status != 201 {
            bail!("policy {}: {}", lang.policy_type, policy.body);
        }
        tenants.push((email, client, ca_id));
    }

    // First call after install, one language at a time.
    let mut first = Vec::new();
    for (_, client, ca) in &tenants {
        first.push(denied(client, *ca).await?);
        for _ in 0..10 {
            denied(client, *ca).await?;
        }
    }

    // Call latency, round-robin so the three share the machine's state.
    let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); LANGS.len()];
    for _ in 0..calls {
        for (i, (_, client, ca)) in tenants.iter().enumerate() {
            latencies[i].push(denied(client, *ca).await?);
        }
    }

    // The most one call needed, per language, from the server's own accounting.
    let metrics = admin.get("/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics.bytes).into_owned();
    let mut peaks = Vec::new();
    for lang in &LANGS {
        let series = format!("trellis_plugin_call_memory_peak_bytes{{plugin=\"trellis.{}\"}} ", lang.policy_type);
        let bytes: f64 = metrics
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str()))
            .with_context(|| format!("{series}missing from /metrics"))?
            .trim()
            .parse()?;
        peaks.push(bytes / (1024.0 * 1024.0));
    }

    // Cold start, per language: SIGKILL, restart on the same data directory and compiled-code
    // cache, then the first call, and the server's RSS growth over it and ten more (the compiled
    // code mapped in plus an instance), then over `concurrency` calls at once. Measured after a
    // restart so that install-time heap churn and the other languages do not blur the deltas.
    let mut cold = Vec::new();
    let mut rss_growth = Vec::new();
    let mut rss_concurrent = Vec::new();
    let mut restarted_rss = 0.0;
    for (email, _, ca) in &tenants {
        // One restart per language, so each one's growth is its own.
        server.kill_and_restart();
        let pid = server.pid();
        restarted_rss = rss_mib(pid)?;
        let client = server.login(email, "password-123").await;
        let before = rss_mib(pid)?;
        cold.push(denied(&client, *ca).await?);
        for _ in 0..10 {
            denied(&client, *ca).await?;
        }
        let after = rss_mib(pid)?;
        rss_growth.push(after - before);
        let mut parallel = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let (client, ca) = (client.clone(), *ca);
            parallel.spawn(async move { denied(&client, ca).await });
        }
        while let Some(result) = parallel.join_next().await {
            result??;
        }
        rss_concurrent.push(rss_mib(pid)? - after);
    }
    tokio::time::sleep(Duration::from_millis(10)).await;

    for (i, lang) in LANGS.iter().enumerate() {
        let s = sorted(&latencies[i]);
        rows.push(vec![
            lang.name.to_owned(),
            format!("{:.2}", sizes[i] as f64 / (1024.0 * 1024.0)),
            installs[i].map(|ms| format!("{ms:.0}")).unwrap_or_else(|| "first-party".into()),
            format!("{:.1}", first[i]),
            format!("{:.2}", percentile(&s, 50.0)),
            format!("{:.2}", percentile(&s, 99.0)),
            format!("{:.1}", cold[i]),
            format!("{:.1}", rss_growth[i]),
            format!("{:.1}", rss_concurrent[i]),
            format!("{:.1}", peaks[i]),
        ]);
    }
    println!(
        "| language | size MiB | install ms | first call after install ms | denied issuance p50 ms | p99 ms | cold start after restart ms | RSS growth over 11 calls after restart MiB | RSS growth, {concurrency} parallel calls MiB | memory a call needs MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        println!("| {} |", row.join(" | "));
    }
    println!(
        "server RSS right after a restart: {restarted_rss:.1} MiB; load average {:.1}",
        trellis_tests::bench::load_average()
    );
    Ok(())
}
