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
//!
//! A second table, per world and language (every guest this repository has: the policies above,
//! the Rust (Slack) and Python notifiers, the Rust (Vault) and JavaScript (SpiderMonkey)
//! connectors), holds what one call needed against its kind's default limits, from the runtime's
//! own accounting (`PluginRuntime::call_usage`, exported per plugin in `/metrics`): memory
//! (`trellis_plugin_call_memory_peak_bytes`, the peak of the call's linear memories together) and
//! CPU (`trellis_plugin_call_cpu_peak_seconds`, what the CPU budget charged: whole epoch ticks of
//! 10 ms spent running wasm), the most of any call since start (install's `describe` included).
//! The notifiers deliver the lifecycle events of `POLYGLOT_BENCH_WORLD_CALLS` (default 20)
//! issuances through each connector to a local HTTPS receiver, which also plays both CAs
//! (a REST CA and Vault's PKI `sign`, signing the CSR with rcgen).
//! Run: `make bench-polyglot`, or `cargo build --release -p trellis --bin trellis -p trellis-tests --bin polyglot-bench &&
//! scripts/build-polyglot-plugins.sh && TRELLIS_BIN=target/release/trellis target/release/polyglot-bench`
//! (env: POLYGLOT_BENCH_CALLS, default 300; POLYGLOT_BENCH_CONCURRENCY, default 8;
//! POLYGLOT_BENCH_WORLD_CALLS, default 20; POLYGLOT_BENCH_CACHE_DIR, a compiled-code cache kept
//! across runs instead of a fresh one per run).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use trellis_tests::bench::{env_or, percentile, sorted};
use trellis_tests::receiver::{Received, Receiver, Reply};
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

/// The default limits of a plugin kind (`KindLimits::default()` in crates/plugin-host; the
/// server runs with them here).
struct KindDefaults {
    kind: &'static str,
    memory_mib: u64,
    cpu_ms: u64,
}

const POLICY: KindDefaults = KindDefaults { kind: "issuance-policy", memory_mib: 32, cpu_ms: 500 };
const INTEGRATION: KindDefaults = KindDefaults { kind: "integration", memory_mib: 64, cpu_ms: 2_000 };
const CONNECTOR: KindDefaults = KindDefaults { kind: "ca-connector", memory_mib: 128, cpu_ms: 5_000 };

/// One guest of the per-world table.
struct Guest {
    kind: &'static KindDefaults,
    language: &'static str,
    /// File stem in target/plugins.
    file: &'static str,
    plugin_id: &'static str,
}

const GUESTS: [Guest; 7] = [
    Guest { kind: &POLICY, language: "Rust", file: "domain-policy", plugin_id: "trellis.domain-policy" },
    Guest { kind: &POLICY, language: "Python", file: "py-domain-policy", plugin_id: "trellis.domain-policy-py" },
    Guest {
        kind: &POLICY,
        language: "JavaScript (QuickJS)",
        file: "js-domain-policy",
        plugin_id: "trellis.domain-policy-js",
    },
    Guest { kind: &INTEGRATION, language: "Rust (Slack)", file: "slack", plugin_id: "io.trellis.slack" },
    Guest { kind: &INTEGRATION, language: "Python", file: "py-webhook-notifier", plugin_id: "trellis.json-webhook-py" },
    Guest { kind: &CONNECTOR, language: "Rust (Vault)", file: "vault", plugin_id: "trellis.vault" },
    Guest {
        kind: &CONNECTOR,
        language: "JavaScript (SpiderMonkey)",
        file: "js-rest-ca",
        plugin_id: "trellis.rest-ca-js",
    },
];

/// The notifier and connector components the bench installs over the API (the Rust ones are first-party).
const WORLD_INSTALLS: [&str; 2] = ["py-webhook-notifier", "js-rest-ca"];

/// A `{plugin="<id>"}` series of `/metrics`.
fn series(metrics: &str, name: &str, plugin_id: &str) -> Result<f64> {
    let prefix = format!("{name}{{plugin=\"{plugin_id}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .with_context(|| format!("{prefix}missing from /metrics"))?
        .trim()
        .parse()
        .with_context(|| format!("{prefix}is not a number"))
}

/// Signs `csr_pem` for `names` (rcgen), valid `days`, with the peer's CA.
fn sign(ca: &(rcgen::Certificate, rcgen::KeyPair), csr_pem: &str, names: &[String], days: i64) -> Option<String> {
    use rcgen::{CertificateSigningRequestParams, SanType};
    let mut csr = CertificateSigningRequestParams::from_pem(csr_pem).ok()?;
    csr.params.subject_alt_names =
        names.iter().filter_map(|n| n.clone().try_into().ok().map(SanType::DnsName)).collect();
    let now = time::OffsetDateTime::now_utc();
    csr.params.not_before = now - time::Duration::minutes(1);
    csr.params.not_after = now - time::Duration::minutes(1) + time::Duration::days(days.max(1));
    csr.signed_by(&ca.0, &ca.1).ok().map(|leaf| leaf.pem())
}

/// The peers of the notifiers and connectors on the receiver: a POST under `/hooks/` (the Python
/// notifier) or `/services/` (Slack) is a delivered event; `POST /v1/sign` is the REST CA
/// `plugins-js/rest-ca` speaks; `POST /v1/pki/sign/web` is Vault's PKI `sign` for the role `web`.
fn serve_peers(receiver: &Receiver) -> Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, "Bench Peer CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key)?;
    let ca = Arc::new((cert, key));
    receiver.respond_with(move |request: &Received| {
        let ca_pem = ca.0.pem();
        let path = request.path.as_str();
        if request.method == "POST" && (path.starts_with("/hooks/") || path.starts_with("/services/")) {
            return Reply::Status(202, r#"{"id":"msg-1"}"#.into());
        }
        let body = request.json();
        let (names, days): (Vec<String>, i64) = match (request.method.as_str(), path) {
            ("POST", "/v1/sign") => (
                body["dnsNames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect(),
                body["validityDays"].as_i64().unwrap_or(30),
            ),
            ("POST", "/v1/pki/sign/web") => (
                body["alt_names"]
                    .as_str()
                    .unwrap_or_default()
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect(),
                body["ttl"]
                    .as_str()
                    .and_then(|t| t.strip_suffix('h'))
                    .and_then(|h| h.parse::<i64>().ok())
                    .unwrap_or(720)
                    / 24,
            ),
            _ => return Reply::Status(404, r#"{"errors":["no such path"]}"#.into()),
        };
        let Some(leaf) = sign(&ca, body["csr"].as_str().unwrap_or_default(), &names, days) else {
            return Reply::Status(400, r#"{"errors":["bad CSR"]}"#.into());
        };
        if path == "/v1/sign" {
            Reply::Status(201, json!({ "certificate": leaf, "chain": [ca_pem], "id": "cert-1" }).to_string())
        } else {
            let data =
                json!({ "certificate": leaf, "issuing_ca": ca_pem, "ca_chain": [ca_pem], "serial_number": "1a:2b:3c" });
            Reply::Status(200, json!({ "data": data }).to_string())
        }
    });
    Ok(())
}

/// One issuance through `ca`; its latency in ms.
async fn issued(client: &Client, ca: i64, name: &str) -> Result<f64> {
    let started = Instant::now();
    let res =
        client.post("/api/certificates/issue", json!({ "caId": ca, "commonName": name, "validityDays": 30 })).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if res.status != 201 {
        bail!("issuing {name} through CA {ca}: {} {}", res.status, res.body);
    }
    Ok(ms)
}

/// Creates a CA in the client's workspace; its id.
async fn create_ca(client: &Client, body: Value) -> Result<i64> {
    let res = client.post("/api/certificate-authorities", body).await;
    res.body["data"]["id"].as_i64().with_context(|| format!("CA: {} {}", res.status, res.body))
}

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
    let world_calls: usize = env_or("POLYGLOT_BENCH_WORLD_CALLS", 20)?;
    // A compiled-code cache of this run's own: in a build tree the binary otherwise shares
    // `target/plugin-cache`, and a component compiled by an earlier run would install in ms.
    // POLYGLOT_BENCH_CACHE_DIR keeps one across runs instead (a loaded machine may not start a
    // server that compiles every first-party plugin within the harness's timeout); the install
    // column then times a cache hit, and the per-world table does not depend on it.
    let cache = tempfile::tempdir()?;
    let cache_dir = std::env::var("POLYGLOT_BENCH_CACHE_DIR").unwrap_or_else(|_| cache.path().display().to_string());
    // The notifiers' receiver and the connectors' CAs, on loopback with a certificate of its own.
    let receiver = Receiver::start().await;
    serve_peers(&receiver)?;
    let bundle = receiver.bundle_path();
    let mut server = Server::start_with(&[
        ("TRELLIS_PLUGIN_CACHE_DIR", cache_dir.as_str()),
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
        ("TRELLIS_PLUGIN_CA_BUNDLE", bundle.as_str()),
    ]);
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

    let mut world_installs = Vec::new();
    for file in WORLD_INSTALLS {
        let bytes = std::fs::read(trellis_tests::plugin_file(file))?;
        let started = Instant::now();
        let res = admin.post_raw("/api/plugins", "application/wasm", bytes).await;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if res.status != 201 {
            bail!("installing {file}: {} {}", res.status, res.body);
        }
        world_installs.push((file, ms));
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

    // The notifiers and connectors, in a workspace of their own without a policy: each issuance
    // is one `issue` call of its connector, and its lifecycle events one `notify` call of each
    // notifier.
    let (worlds, _) = server.new_user("worlds@bench.example.com").await;
    for (kind, name, config) in [
        ("slack", "Slack", json!({ "webhookUrl": receiver.url("/services/T000/B000/XXXX") })),
        ("json-webhook-py", "Python hook", json!({ "url": receiver.url("/hooks/bench"), "token": "bench-token" })),
    ] {
        let res = worlds
            .post("/api/integrations/external", json!({ "name": name, "type": kind, "configuration": config }))
            .await;
        if res.status != 201 {
            bail!("integration {kind}: {} {}", res.status, res.body);
        }
    }
    let vault = create_ca(
        &worlds,
        json!({ "name": "Vault", "type": "hashicorp_vault", "url": receiver.url(""), "config": { "token": "s.bench", "role": "web" } }),
    )
    .await?;
    let rest = create_ca(
        &worlds,
        json!({ "name": "REST CA", "type": "rest-ca-js", "url": receiver.url("/v1"), "config": { "apiKey": "bench-key" } }),
    )
    .await?;
    let mut issuance: Vec<(&str, Vec<f64>)> = vec![("trellis.vault", Vec::new()), ("trellis.rest-ca-js", Vec::new())];
    for i in 0..world_calls {
        issuance[0].1.push(issued(&worlds, vault, &format!("v{i}.example.com")).await?);
        issuance[1].1.push(issued(&worlds, rest, &format!("r{i}.example.com")).await?);
    }
    // Every issuance's events reach both notifiers (the delivery worker runs them): wait for them.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let seen = receiver.requests();
        let count = |prefix: &str| seen.iter().filter(|r| r.path.starts_with(prefix)).count();
        let (hooks, slack) = (count("/hooks/"), count("/services/"));
        if hooks >= 2 * world_calls && slack >= 2 * world_calls {
            break;
        }
        if Instant::now() > deadline {
            bail!("deliveries still missing after 120 s: {hooks} to the Python notifier, {slack} to Slack");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The most one call needed, per guest, from the server's own accounting.
    let metrics = admin.get("/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics.bytes).into_owned();
    let mut peaks = Vec::new();
    for lang in &LANGS {
        let bytes =
            series(&metrics, "trellis_plugin_call_memory_peak_bytes", &format!("trellis.{}", lang.policy_type))?;
        peaks.push(bytes / (1024.0 * 1024.0));
    }
    let mut usage = Vec::new();
    for guest in &GUESTS {
        let memory = series(&metrics, "trellis_plugin_call_memory_peak_bytes", guest.plugin_id)?;
        let cpu = series(&metrics, "trellis_plugin_call_cpu_peak_seconds", guest.plugin_id)?;
        usage.push((memory / (1024.0 * 1024.0), cpu * 1000.0));
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

    println!();
    println!(
        "| world | language | component MiB | install ms | memory a call needs MiB | kind's memory limit MiB | CPU charged to a call ms (10 ms ticks) | kind's CPU limit ms | issuance through the API p50 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (guest, (memory, cpu)) in GUESTS.iter().zip(&usage) {
        let size = std::fs::metadata(trellis_tests::plugin_file(guest.file))?.len() as f64 / (1024.0 * 1024.0);
        let install = LANGS
            .iter()
            .position(|l| l.file == guest.file)
            .and_then(|i| installs[i])
            .or_else(|| world_installs.iter().find(|(file, _)| *file == guest.file).map(|(_, ms)| *ms))
            .map(|ms| format!("{ms:.0}"))
            .unwrap_or_else(|| "first-party".into());
        let p50 = issuance
            .iter()
            .find(|(id, _)| *id == guest.plugin_id)
            .map(|(_, ms)| format!("{:.1}", percentile(&sorted(ms), 50.0)))
            .unwrap_or_else(|| "-".into());
        println!(
            "| {} | {} | {size:.2} | {install} | {memory:.1} | {} | {cpu:.0} ({:.0}) | {} | {p50} |",
            guest.kind.kind,
            guest.language,
            guest.kind.memory_mib,
            cpu / 10.0,
            guest.kind.cpu_ms
        );
    }
    println!(
        "calls per notifier and connector: {world_calls} issuances per connector, {} events per notifier",
        2 * world_calls
    );
    println!(
        "server RSS right after a restart: {restarted_rss:.1} MiB; load average {:.1}",
        trellis_tests::bench::load_average()
    );
    Ok(())
}
