//! `attestation-bench`: attest-and-provision throughput (issue 10) against the real binary
//! (`TRELLIS_BIN`, `make bench-attestation` uses target/release/trellis) with pre-made evidence.
//!
//! Per run: a fresh server and software TPM (tests/src/swtpm.rs), a synthetic secure-boot event
//! log extended into the PCRs, the TPM's local CA trusted, a policy expecting the log's PCR
//! values (secure boot and a bound CSR key required), an internal CA, and one device per client,
//! each with its own AK enrolled by `trellis-agent enroll` (a device's quotes must arrive in the
//! order its TPM made them: the service refuses a TPM clock that goes back). Then ATTESTATION_BENCH_COUNT
//! nonces are issued and `trellis-agent evidence` makes the evidence and CSR for each (not
//! timed), and each client submits its device's bodies in order over one keep-alive connection
//! (timed): every submission consumes its nonce, runs the verifier plugin and issues a
//! certificate. Rate and p50/p99 per run, medians over the runs.
//!
//! Options (environment): ATTESTATION_BENCH_RUNS (3), ATTESTATION_BENCH_COUNT (300),
//! ATTESTATION_BENCH_CLIENTS (16), TRELLIS_AGENT_BIN (target/release/trellis-agent).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use trellis_tests::swtpm::{EventLog, SwTpm};
use trellis_tests::Server;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn agent_binary() -> PathBuf {
    std::env::var("TRELLIS_AGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| trellis_tests::workspace_root().join("target/release/trellis-agent"))
}

struct Sample {
    seconds: f64,
    latencies: Vec<Duration>,
    issued: usize,
}

async fn run(count: usize, clients: usize) -> anyhow::Result<Sample> {
    let tpm = std::thread::spawn(SwTpm::start);
    let server = Server::start();
    let tpm = tpm.join().map_err(|_| anyhow::anyhow!("swtpm did not start"))?;
    let boot = EventLog::firmware(true);
    tpm.extend(&boot);
    let admin = server.admin().await;
    let key = admin
        .post(
            "/api/api-keys",
            json!({ "name": "bench", "scopes": ["attestation:read", "attestation:write", "certificates:read", "certificates:write"] }),
        )
        .await;
    let api_key = key.body["data"]["key"].as_str().unwrap_or_default().to_owned();
    let root = admin.post("/api/attestation/trust-roots", json!({ "certificate": tpm.root_pem() })).await;
    anyhow::ensure!(root.status == 201, "trust root: {}", root.body);
    let expected: serde_json::Map<String, Value> =
        [0, 1, 2, 3, 4, 7].iter().map(|i| (i.to_string(), json!(boot.sha256_hex(*i)))).collect();
    let policy = admin
        .post("/api/attestation/policies", json!({ "name": "bench", "expectedPcrs": { "SHA256": expected } }))
        .await;
    anyhow::ensure!(policy.status == 201, "policy: {}", policy.body);
    let ca = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "Bench CA", "type": "internal", "config": { "subject": { "commonName": "Bench CA" } } }),
        )
        .await;
    let ca = ca.body["data"]["id"].as_i64().unwrap_or_default();
    let work = tempfile::tempdir()?;
    let log = work.path().join("eventlog.bin");
    std::fs::write(&log, &boot.bytes)?;
    let agent = |state: usize, args: &[&str]| -> anyhow::Result<Value> {
        let out = Command::new(agent_binary())
            .args(args)
            .env("TRELLIS_AGENT_TCTI", tpm.tcti())
            .env("TRELLIS_AGENT_STATE", work.path().join(format!("agent-{state}")))
            .env("TRELLIS_URL", &server.base_url)
            .env("TRELLIS_API_KEY", &api_key)
            .output()?;
        anyhow::ensure!(out.status.success(), "trellis-agent {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    // One device (its own AK on the TPM) per client: a device's quotes must arrive in the order
    // the TPM made them (the service refuses a TPM clock that goes back), so each client submits
    // one device's evidence in order.
    let chain = tpm.intermediate_path().display().to_string();
    let mut devices = Vec::new();
    for d in 0..clients {
        let device =
            admin.post("/api/iot/devices", json!({ "name": format!("bench-{d}"), "serial": format!("B-{d}") })).await;
        let device = device.body["data"]["id"].as_i64().unwrap_or_default();
        agent(d, &["enroll", "--device", &device.to_string(), "--ek-chain", &chain])?;
        devices.push(device);
    }

    let started = Instant::now();
    let mut queues: Vec<Vec<Value>> = vec![Vec::new(); clients];
    for i in 0..count {
        let d = i % clients;
        let device = devices[d];
        let nonce = admin
            .post(&format!("/api/iot/devices/{device}/attestation/challenge"), json!({ "ttlSeconds": 3600 }))
            .await;
        let nonce = nonce.body["nonce"].as_str().unwrap_or_default().to_owned();
        let cn = format!("device-{i}.bench.example");
        let made = agent(d, &["evidence", "--nonce", &nonce, "--cn", &cn, "--event-log", &log.display().to_string()])?;
        queues[d].push(json!({ "caId": ca, "templateId": "device", "csr": made["csr"], "evidence": made["evidence"] }));
    }
    eprintln!("  {count} evidences made in {:.1} s (not timed)", started.elapsed().as_secs_f64());

    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (queue, device) in queues.into_iter().zip(devices) {
        let path = format!("{}/api/iot/devices/{device}/attest-and-provision", server.base_url);
        let key = api_key.clone();
        tasks.spawn(async move {
            let http = reqwest::Client::new();
            let mut out = Vec::new();
            for body in queue {
                let start = Instant::now();
                let res = http.post(&path).header("X-API-Key", &key).json(&body).send().await;
                let failure = match res {
                    Ok(res) if res.status().is_success() => None,
                    Ok(res) => Some(format!("{}: {}", res.status(), res.text().await.unwrap_or_default())),
                    Err(err) => Some(err.to_string()),
                };
                out.push((start.elapsed(), failure));
            }
            out
        });
    }
    let mut latencies = Vec::new();
    let mut issued = 0;
    while let Some(done) = tasks.join_next().await {
        for (latency, failure) in done? {
            latencies.push(latency);
            match failure {
                None => issued += 1,
                Some(failure) if issued == 0 => eprintln!("  refused: {failure}"),
                Some(_) => {}
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Ok(Sample { seconds, latencies, issued })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let runs = env_or("ATTESTATION_BENCH_RUNS", 3);
    let count = env_or("ATTESTATION_BENCH_COUNT", 300);
    let clients = env_or("ATTESTATION_BENCH_CLIENTS", 16);
    println!("attest-and-provision with pre-made evidence: {count} submissions per run, {clients} clients");
    let mut rates = Vec::new();
    for r in 1..=runs {
        let sample = run(count, clients).await?;
        anyhow::ensure!(sample.issued == count, "only {} of {count} submissions issued", sample.issued);
        let rate = count as f64 / sample.seconds;
        let pct = |p: f64| ms(sample.latencies[((sample.latencies.len() as f64 * p) as usize).min(count - 1)]);
        println!("run {r}: {rate:.0}/s, p50 {:.1} ms, p99 {:.1} ms", pct(0.5), pct(0.99));
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    println!("median of {runs} runs: {:.0}/s (target ≥ 300/s)", rates[rates.len() / 2]);
    Ok(())
}
