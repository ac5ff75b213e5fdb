//! Shared test helpers: the swtpm vectors (tests/vectors, made by tests/make-vectors.sh) and
//! calls through the SDK's export glue with the contract's own records, exactly as the host
//! passes them (the SDK's plain-Rust `Tpm2Certification` and `BoundCsr` cannot be built outside
//! the SDK, and its verdicts do not expose `verified_pcrs`, `clock` or `ak_name`).

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::PathBuf;

use serde_json::{json, Value};
use trellis_plugin_sdk::bindings::attestation_verifier::exports::trellis::plugin::verifier as wv;
use trellis_plugin_sdk::bindings::imports::trellis::plugin::types as wt;
use trellis_plugin_sdk::glue::verifier as glue;
use trellis_plugin_tpm2_verifier::Tpm2Verifier;

pub use wv::{
    ActivationChallenge, BoundCsr, EnrolledDevice, EnrollmentRequest, EnrollmentVerdict, Evidence, PcrValue,
    Tpm2Certification, Tpm2Evidence, TpmClock, TrustAnchor, Verdict, VerifyRequest,
};

/// A vector file's bytes.
pub fn vector(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors").join(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (regenerate with plugins/tpm2-verifier/tests/make-vectors.sh)", path.display())
    })
}

/// `BANK INDEX HEX` lines.
pub fn pcrs(name: &str) -> Vec<PcrValue> {
    String::from_utf8(vector(name))
        .expect("PCR file is text")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut f = line.split_whitespace();
            let bank = f.next().expect("bank").to_owned();
            let index = f.next().expect("index").parse().expect("index is a number");
            let digest = hex::decode(f.next().expect("digest")).expect("hex digest");
            PcrValue { bank, index, digest }
        })
        .collect()
}

/// A policy expecting exactly `values`, both banks required, every other member at its
/// strictest: manufacturer swtpm's, 300 s, bound CSR key and secure boot required.
pub fn policy_for(values: &[PcrValue]) -> Value {
    let mut expected = serde_json::Map::new();
    for v in values {
        let bank = expected.entry(v.bank.clone()).or_insert_with(|| json!({}));
        bank[v.index.to_string()] = json!(hex::encode(&v.digest));
    }
    json!({
        "id": 1,
        "name": "swtpm",
        "expectedPcrs": expected,
        "requiredPcrBanks": ["SHA1", "SHA256"],
        "requiredPcrs": [0, 1, 2, 3, 4, 7],
        "allowedEkManufacturers": ["id:00001014"],
        "maxAttestationAgeSeconds": 300,
        "requireBoundCsrKey": true,
        "requireSecureBoot": true,
    })
}

/// "Now" for the tests: a day after the vectors' EK certificate was issued (swtpm_setup issues
/// it at generation time, valid until 9999).
pub fn now() -> i64 {
    use x509_parser::prelude::FromDer;
    let der = vector("ek_rsa_cert.nv");
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).expect("EK certificate");
    cert.validity().not_before.timestamp() + 86_400
}

pub fn anchors_root() -> Vec<TrustAnchor> {
    vec![TrustAnchor { certificate_der: vector("root.der"), manufacturer: None }]
}

/// The device as enrolled with `ak` ("rsa", "ecc", "pss", "rsa2"): its AK, the RSA EK
/// certificate and the local CA's intermediate.
pub fn device(ak: &str) -> EnrolledDevice {
    EnrolledDevice {
        ak_public: vector(&format!("ak_{ak}.tpmt")),
        ak_name: vector(&format!("ak_{ak}.name")),
        ek_certificate: Some(vector("ek_rsa_cert.nv")),
        ek_chain: vec![vector("intermediate.der")],
        last_clock: None,
    }
}

/// The certification of the P-256 key by the RSA AK.
pub fn certification() -> Tpm2Certification {
    Tpm2Certification {
        attest: vector("certify.attest"),
        signature: vector("certify.sig"),
        certified_key_public: vector("key.tpmt"),
    }
}

pub fn csr() -> BoundCsr {
    // The verifier compares the SPKI; the host has already verified the PKCS#10 itself.
    BoundCsr { der: b"not parsed by the verifier".to_vec(), public_key: vector("key_spki.der") }
}

/// Evidence of the quote by `ak` with everything else of the happy path.
pub fn evidence(ak: &str) -> Tpm2Evidence {
    Tpm2Evidence {
        quote: vector(&format!("quote_{ak}.attest")),
        quote_signature: vector(&format!("quote_{ak}.sig")),
        pcrs: pcrs("pcrs.txt"),
        certification: Some(certification()),
        event_log: Some(vector("eventlog.bin")),
    }
}

/// The happy-path request: the RSA AK's quote, its certification of the CSR key, the log.
pub fn happy() -> VerifyRequest {
    request_for("rsa")
}

pub fn request_for(ak: &str) -> VerifyRequest {
    let mut policy = policy_for(&pcrs("pcrs.txt"));
    if ak != "rsa" {
        // The certification is by the RSA AK only.
        policy["requireBoundCsrKey"] = json!(false);
    }
    VerifyRequest {
        evidence: Evidence::Tpm2(evidence(ak)),
        policy: policy.to_string(),
        nonce: vector("nonce.bin"),
        nonce_issued_at: now() - 5,
        now: now(),
        device: device(ak),
        csr: if ak == "rsa" { Some(csr()) } else { None },
        trust_anchors: anchors_root(),
    }
}

/// The request's evidence, to tamper with.
pub fn tpm2(request: &mut VerifyRequest) -> &mut Tpm2Evidence {
    match &mut request.evidence {
        Evidence::Tpm2(e) => e,
        Evidence::Other(_) => panic!("not tpm2 evidence"),
    }
}

/// The request's policy as JSON, to change.
pub fn set_policy(request: &mut VerifyRequest, change: impl FnOnce(&mut Value)) {
    let mut policy: Value = serde_json::from_str(&request.policy).expect("policy JSON");
    change(&mut policy);
    request.policy = policy.to_string();
}

fn ctx() -> wt::CallContext {
    wt::CallContext {
        workspace_id: "ws_1".into(),
        record_id: "dev_1".into(),
        request_id: "req_1".into(),
        endpoint: None,
        time_budget_ms: 5_000,
    }
}

/// `verify` through the export glue (what the host calls).
pub fn try_verify(request: VerifyRequest) -> Result<Verdict, wt::PluginError> {
    glue::verify::<Tpm2Verifier>(ctx(), "{}".into(), request)
}

pub fn verify(request: VerifyRequest) -> Verdict {
    let verdict = try_verify(request).expect("a verdict, not an error");
    assert_eq!(verdict.passed, verdict.failures.is_empty(), "passed exactly without failures: {verdict:?}");
    if !verdict.passed {
        assert_eq!(verdict.trust_score, 0);
    }
    verdict
}

/// The codes of the failures, in order.
pub fn codes(verdict: &Verdict) -> Vec<String> {
    verdict.failures.iter().map(|f| f.split(':').next().unwrap_or_default().to_owned()).collect()
}

/// Asserts the verdict failed with `code` first (the check that caught the tamper) and returns
/// the failures.
#[track_caller]
pub fn fails_first(request: VerifyRequest, code: &str) -> Vec<String> {
    let verdict = verify(request);
    assert!(!verdict.passed, "expected {code}, but it passed");
    assert_eq!(codes(&verdict).first().map(String::as_str), Some(code), "failures: {:?}", verdict.failures);
    verdict.failures
}

/// Asserts the verdict failed with exactly `code` (possibly several times) and nothing else.
#[track_caller]
pub fn fails_only(request: VerifyRequest, code: &str) -> Vec<String> {
    let verdict = verify(request);
    assert!(!verdict.passed, "expected {code}, but it passed");
    assert!(codes(&verdict).iter().all(|c| c == code), "expected only {code}: {:?}", verdict.failures);
    verdict.failures
}

pub fn enrollment() -> EnrollmentRequest {
    EnrollmentRequest {
        ek_certificate: Some(vector("ek_rsa_cert.nv")),
        ek_chain: vec![vector("intermediate.der")],
        ek_public: vector("ek_rsa.tpmt"),
        ak_public: vector("ak_rsa.tpmt"),
        trust_anchors: anchors_root(),
        policy: Some(json!({"allowedEkManufacturers": ["id:00001014"]}).to_string()),
        secret: vector("secret.bin"),
        entropy: vector("entropy.bin"),
        now: now(),
    }
}

pub fn try_enroll(request: EnrollmentRequest) -> Result<EnrollmentVerdict, wt::PluginError> {
    glue::enroll::<Tpm2Verifier>(ctx(), "{}".into(), request)
}

pub fn enroll(request: EnrollmentRequest) -> EnrollmentVerdict {
    let verdict = try_enroll(request).expect("a verdict, not an error");
    assert_eq!(verdict.passed, verdict.failures.is_empty(), "passed exactly without failures: {verdict:?}");
    assert_eq!(verdict.passed, verdict.challenge.is_some(), "a challenge exactly when passed");
    verdict
}

pub fn enroll_codes(verdict: &EnrollmentVerdict) -> Vec<String> {
    verdict.failures.iter().map(|f| f.split(':').next().unwrap_or_default().to_owned()).collect()
}

/// A challenge as (credential blob, encrypted secret): the bindings' records have no `PartialEq`.
pub fn pair(challenge: &ActivationChallenge) -> (Vec<u8>, Vec<u8>) {
    (challenge.credential_blob.clone(), challenge.encrypted_secret.clone())
}

/// A clock as a tuple, for comparisons.
pub fn clock_tuple(c: TpmClock) -> (u64, u32, u32, bool) {
    (c.clock, c.reset_count, c.restart_count, c.safe)
}

/// The (credential blob, encrypted secret) in a tpm2-tools credential file.
pub fn credential_file(name: &str) -> (Vec<u8>, Vec<u8>) {
    let bytes = vector(name);
    assert_eq!(&bytes[..8], &[0xba, 0xdc, 0xc0, 0xde, 0, 0, 0, 1], "tpm2-tools credential header");
    let id_len = usize::from(u16::from_be_bytes([bytes[8], bytes[9]]));
    let credential_blob = bytes[10..10 + id_len].to_vec();
    let rest = &bytes[10 + id_len..];
    let secret_len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
    assert_eq!(rest.len(), 2 + secret_len);
    (credential_blob, rest[2..].to_vec())
}
