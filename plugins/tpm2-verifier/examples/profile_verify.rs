//! Where one happy-path `verify` spends its time natively: the whole call through the export
//! glue, then its costly steps one by one over the same swtpm vectors (median of 400 calls
//! each), and the RSA public operation with either limb width.
//!
//! Run: `cargo run --release --example profile_verify` (in plugins/tpm2-verifier). The plugin
//! runs the same code as wasm with u32 limbs; `make bench-verifier` measures it there.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use trellis_plugin_sdk::verifier::TrustAnchor;
use trellis_plugin_tpm2_verifier::checks::{check_ak, check_ek_certificate};
use trellis_plugin_tpm2_verifier::crypto::{self, KeyMaterial};
use trellis_plugin_tpm2_verifier::ekcert::{self, Cert};
use trellis_plugin_tpm2_verifier::eventlog::{secure_boot_state, EventLog};
use trellis_plugin_tpm2_verifier::montgomery::Modulus;
use trellis_plugin_tpm2_verifier::tpm::{HashAlg, KeyDetail, Signature, TpmPublic};

const CALLS: usize = 400;

fn median(mut f: impl FnMut()) -> Duration {
    for _ in 0..20 {
        f();
    }
    let mut samples: Vec<Duration> = (0..CALLS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn report(label: &str, f: impl FnMut()) {
    println!("{label:<56} {:>8.1} µs", median(f).as_secs_f64() * 1e6);
}

fn main() {
    let request = support::happy();
    let ak_bytes = support::vector("ak_rsa.tpmt");
    let ek = support::vector("ek_rsa_cert.nv");
    let intermediate = support::vector("intermediate.der");
    let anchors = vec![TrustAnchor::new(support::vector("root.der"), None)];
    let root = support::vector("root.der");
    let quote = support::vector("quote_rsa.attest");
    let quote_signature = support::vector("quote_rsa.sig");
    let certify = support::vector("certify.attest");
    let certify_signature = Signature::parse(&support::vector("certify.sig")).unwrap();
    let log = support::vector("eventlog.bin");
    let key = check_ak(&ak_bytes, &mut Vec::new()).unwrap().key.unwrap();

    report("verify (export glue, whole call)", || assert!(support::verify(request.clone()).passed));
    let pss_request = support::request_for("pss");
    report("verify, RSASSA-PSS AK (no certification)", || assert!(support::verify(pss_request.clone()).passed));
    report("EK certificate and chain (2 × RSA-3072)", || {
        let mut failures = Vec::new();
        let identity =
            check_ek_certificate(Some(&ek), std::slice::from_ref(&intermediate), &anchors, None, &mut failures);
        assert!(identity.unwrap().trusted, "{failures:?}");
    });
    let leaf = ekcert::parse_ek_certificate(&ek).unwrap();
    let issuer = ekcert::parse_certificates(&intermediate).unwrap().remove(0);
    let anchor = ekcert::parse_certificates(&root).unwrap().remove(0);
    let link = |cert: &Cert<'_>, issuer: &Cert<'_>| {
        crypto::verify_x509_signature(
            &cert.x509.signature_algorithm.algorithm.to_id_string(),
            cert.x509.tbs_certificate.as_ref(),
            &cert.x509.signature_value.data,
            issuer.x509.public_key(),
        )
        .unwrap();
    };
    report("  parse the three certificates", || {
        black_box(ekcert::parse_ek_certificate(&ek).unwrap());
        black_box(ekcert::parse_certificates(&intermediate).unwrap());
        black_box(ekcert::parse_certificates(&root).unwrap());
    });
    report("  EK certificate signed by the intermediate", || link(&leaf, &issuer));
    report("  intermediate signed by the root", || link(&issuer, &anchor));
    report("quote signature (RSA-2048 AK, SHA-256)", || {
        crypto::verify_tpm_signature(&key, &Signature::parse(&quote_signature).unwrap(), &quote).unwrap();
    });
    report("certify signature (RSA-2048 AK, SHA-256)", || {
        crypto::verify_tpm_signature(&key, &certify_signature, &certify).unwrap();
    });
    report("event log: parse, replay SHA-1 and SHA-256, secure boot", || {
        let log = EventLog::parse(&log).unwrap();
        for bank in [HashAlg::Sha1, HashAlg::Sha256] {
            black_box(log.replay(bank).unwrap());
        }
        black_box(secure_boot_state(&log));
    });

    let KeyDetail::Rsa { modulus: ak_modulus, .. } = TpmPublic::parse(&ak_bytes).unwrap().detail else {
        panic!("the AK is RSA")
    };
    let Signature::Rsa { signature: ak_signature, .. } = Signature::parse(&quote_signature).unwrap() else {
        panic!("an RSA signature")
    };
    let KeyMaterial::Rsa { modulus: issuer_modulus, .. } =
        crypto::material_from_parsed_spki(issuer.x509.public_key()).unwrap()
    else {
        panic!("the intermediate's key is RSA")
    };
    let leaf_signature = leaf.x509.signature_value.data.to_vec();
    for (bits, modulus, signature) in [(2048, &ak_modulus, &ak_signature), (3072, &issuer_modulus, &leaf_signature)] {
        report(&format!("s^65537 mod n, RSA-{bits}, u32 limbs"), || {
            black_box(Modulus::<u32>::from_be_bytes(modulus).unwrap().pow(signature, &[1, 0, 1]).unwrap());
        });
        report(&format!("s^65537 mod n, RSA-{bits}, u64 limbs"), || {
            black_box(Modulus::<u64>::from_be_bytes(modulus).unwrap().pow(signature, &[1, 0, 1]).unwrap());
        });
    }
}
