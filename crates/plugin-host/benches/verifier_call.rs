//! The TPM verifier's cost (issue 10): one full `verify` of the happy-path evidence recorded
//! from swtpm (plugins/tpm2-verifier/tests/vectors: RSA AK quote of sha1+sha256 PCRs 0-4,7,
//! certify of a P-256 CSR key, EK chain, secure-boot event log) through the plugin host
//! (admission, fresh instance, the wasm component, verdict), against the same checks compiled
//! natively and called through the same export glue, in the same run. Three runs of 1,000
//! calls each (after 50 warm-up calls), interleaved; p50 per run and the median of the runs.
//!
//! Run: `make bench-verifier` (builds the plugins first).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use trellis_core::plugins::{
    BoundCsr, EnrolledDevice, Evidence, PcrValue, PluginHost, Tpm2Certification, Tpm2Evidence, TrustAnchor,
    VerifyRequest,
};
use trellis_plugin_host::{CallTarget, PluginRef};
use trellis_plugin_sdk::bindings::attestation_verifier::exports::trellis::plugin::verifier as wv;
use trellis_plugin_sdk::bindings::imports::trellis::plugin::types as wt;
use x509_parser::prelude::FromDer;

const CALLS: usize = 1_000;
const WARM_UP: usize = 50;
const RUNS: usize = 3;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn vector(name: &str) -> Vec<u8> {
    let path = root().join("plugins/tpm2-verifier/tests/vectors").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn pcrs() -> Vec<PcrValue> {
    String::from_utf8(vector("pcrs.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            PcrValue { bank: f[0].to_owned(), index: f[1].parse().unwrap(), digest: hex::decode(f[2]).unwrap() }
        })
        .collect()
}

/// The verifier tests' happy path (tests/support/mod.rs), as the host builds it.
fn request() -> VerifyRequest {
    let values = pcrs();
    let mut expected = serde_json::Map::new();
    for v in &values {
        let bank = expected.entry(v.bank.clone()).or_insert_with(|| serde_json::json!({}));
        bank[v.index.to_string()] = serde_json::json!(hex::encode(&v.digest));
    }
    let policy = serde_json::json!({
        "id": 1, "name": "swtpm", "expectedPcrs": expected, "requiredPcrBanks": ["SHA1", "SHA256"],
        "requiredPcrs": [0, 1, 2, 3, 4, 7], "allowedEkManufacturers": ["id:00001014"],
        "maxAttestationAgeSeconds": 300, "requireBoundCsrKey": true, "requireSecureBoot": true,
    });
    let ek = vector("ek_rsa_cert.nv");
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&ek).unwrap();
    let now = cert.validity().not_before.timestamp() + 86_400;
    VerifyRequest {
        evidence: Evidence::Tpm2(Tpm2Evidence {
            quote: vector("quote_rsa.attest"),
            quote_signature: vector("quote_rsa.sig"),
            pcrs: values,
            certification: Some(Tpm2Certification {
                attest: vector("certify.attest"),
                signature: vector("certify.sig"),
                certified_key_public: vector("key.tpmt"),
            }),
            event_log: Some(vector("eventlog.bin")),
        }),
        policy,
        nonce: vector("nonce.bin"),
        nonce_issued_at: now - 5,
        now,
        device: EnrolledDevice {
            ak_public: vector("ak_rsa.tpmt"),
            ak_name: vector("ak_rsa.name"),
            ek_certificate: Some(ek),
            ek_chain: vec![vector("intermediate.der")],
            last_clock: None,
        },
        csr: Some(BoundCsr { der: b"not parsed by the verifier".to_vec(), public_key: vector("key_spki.der") }),
        trust_anchors: vec![TrustAnchor { certificate_der: vector("root.der"), manufacturer: None }],
    }
}

/// The same request as the contract's records (what the export glue hands the verifier).
fn native_request(r: &VerifyRequest) -> wv::VerifyRequest {
    let Evidence::Tpm2(e) = &r.evidence else { unreachable!() };
    wv::VerifyRequest {
        evidence: wv::Evidence::Tpm2(wv::Tpm2Evidence {
            quote: e.quote.clone(),
            quote_signature: e.quote_signature.clone(),
            pcrs: e
                .pcrs
                .iter()
                .map(|p| wv::PcrValue { bank: p.bank.clone(), index: p.index, digest: p.digest.clone() })
                .collect(),
            certification: e.certification.as_ref().map(|c| wv::Tpm2Certification {
                attest: c.attest.clone(),
                signature: c.signature.clone(),
                certified_key_public: c.certified_key_public.clone(),
            }),
            event_log: e.event_log.clone(),
        }),
        policy: r.policy.to_string(),
        nonce: r.nonce.clone(),
        nonce_issued_at: r.nonce_issued_at,
        now: r.now,
        device: wv::EnrolledDevice {
            ak_public: r.device.ak_public.clone(),
            ak_name: r.device.ak_name.clone(),
            ek_certificate: r.device.ek_certificate.clone(),
            ek_chain: r.device.ek_chain.clone(),
            last_clock: None,
        },
        csr: r.csr.as_ref().map(|c| wv::BoundCsr { der: c.der.clone(), public_key: c.public_key.clone() }),
        trust_anchors: r
            .trust_anchors
            .iter()
            .map(|a| wv::TrustAnchor {
                certificate_der: a.certificate_der.clone(),
                manufacturer: a.manufacturer.clone(),
            })
            .collect(),
    }
}

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort_unstable();
    values[values.len() / 2]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let path = root().join("target/plugins/tpm2-verifier.wasm");
    let wasm = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make plugins` first", path.display()));
    let runtime = rt.block_on(trellis_plugin_host::bench_support::runtime_with(&wasm)).unwrap();
    let target = CallTarget::new("ws", PluginRef::Serving("tpm2".into()), serde_json::json!({}));
    let request = request();
    let native = native_request(&request);
    let ctx = wt::CallContext {
        workspace_id: "ws".into(),
        record_id: "1".into(),
        request_id: "bench".into(),
        endpoint: None,
        time_budget_ms: 5_000,
    };

    let wasm_call = || {
        let verdict = rt.block_on(runtime.verify(&target, &request)).unwrap();
        assert!(verdict.passed, "{:?}", verdict.failures);
    };
    let native_call = || {
        let verdict = trellis_plugin_sdk::glue::verifier::verify::<trellis_plugin_tpm2_verifier::Tpm2Verifier>(
            ctx.clone(),
            "{}".into(),
            native.clone(),
        )
        .unwrap();
        assert!(verdict.passed, "{:?}", verdict.failures);
    };
    for _ in 0..WARM_UP {
        wasm_call();
        native_call();
    }
    let (mut wasm_p50, mut native_p50) = (Vec::new(), Vec::new());
    let load =
        || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split(' ').next().unwrap_or("?").to_owned();
    println!("verify, happy path, {CALLS} calls per run (load average {})", load());
    for run in 1..=RUNS {
        let (mut w, mut n) = (Vec::with_capacity(CALLS), Vec::with_capacity(CALLS));
        for _ in 0..CALLS {
            let start = Instant::now();
            wasm_call();
            w.push(start.elapsed());
            let start = Instant::now();
            native_call();
            n.push(start.elapsed());
        }
        let (w, n) = (p50(&mut w), p50(&mut n));
        println!(
            "run {run}: plugin p50 {}, native p50 {}, ratio {:.2}",
            micros(w),
            micros(n),
            w.as_secs_f64() / n.as_secs_f64()
        );
        wasm_p50.push(w);
        native_p50.push(n);
    }
    let (w, n) = (median(wasm_p50), median(native_p50));
    println!(
        "median of {RUNS} runs: plugin p50 {} (target ≤ 1 ms), native p50 {}, ratio {:.2} (load average {})",
        micros(w),
        micros(n),
        w.as_secs_f64() / n.as_secs_f64(),
        load()
    );
}
