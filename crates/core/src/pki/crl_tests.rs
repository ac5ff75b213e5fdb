//! Revocation as relying parties see it, over the whole fake of the PKI's port: the CRL lists
//! what was revoked, is re-signed only when a revocation moved the CA's marker (on any replica),
//! never goes back in number, and OCSP's status follows.

use std::sync::Arc;

use serde_json::json;
use trellis_pki::{CertificateProfile, KeyAlgorithm, KeyUsage, RevocationReason, Subject, SubjectAltName};

use super::{AuthoritySpec, InternalPki, NewAuthoritySpec, PkiCore, PkiGrant, SerialStatus, SignPermit};
use crate::context::Context;
use crate::testing::{context, MemoryStore};

const CA_ID: i64 = 7;

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn profile(name: &str) -> CertificateProfile {
    CertificateProfile {
        subject: Subject { common_name: Some(name.into()), ..Subject::default() },
        subject_alt_names: vec![SubjectAltName::Dns(name.into())],
        key_usages: vec![KeyUsage::DigitalSignature],
        extended_key_usages: vec!["1.3.6.1.5.5.7.3.1".into()],
        validity_days: 30,
    }
}

fn grant(sign: Option<SignPermit>) -> PkiGrant {
    PkiGrant { workspace_id: "ws_a".into(), ca_id: CA_ID, withheld_config: json!({}), sign }
}

/// A replica's PKI over the context's store.
fn replica(ctx: &Context) -> InternalPki {
    InternalPki::new(
        Arc::new(ctx.store.clone()),
        ctx.master_key.clone(),
        ctx.clock.clone(),
        ctx.entropy.clone(),
        "https://trellis.example",
    )
}

async fn issue(pki: &InternalPki, name: &str) -> String {
    let key = ok(rcgen::KeyPair::generate());
    let csr = ok(ok(rcgen::CertificateParams::new(vec![name.to_owned()])).serialize_request(&key)).der().to_vec();
    let permit = SignPermit { csr_der: csr.clone(), profile: profile(name), ledger: None };
    ok(pki.sign_csr(&grant(Some(permit)), &csr, &profile(name)).await).serial_number
}

/// The CRL's number and its serials (lowercase hex, as the ledger keeps them).
fn read_crl(der: &[u8]) -> (String, Vec<String>) {
    let (_, crl) = ok(x509_parser::parse_x509_crl(der));
    let number = crl.crl_number().map(|n| n.to_string()).unwrap_or_default();
    let mut serials: Vec<String> =
        crl.iter_revoked_certificates().map(|entry| entry.raw_serial_as_string().replace(':', "")).collect();
    serials.sort();
    (number, serials)
}

fn normalized(serial: &str) -> String {
    serial.to_lowercase().trim_start_matches('0').to_string()
}

#[tokio::test]
async fn the_crl_follows_revocations_on_any_replica_and_ocsp_agrees() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), "2026-06-01T00:00:00Z");
    let first = replica(&ctx);
    let root = NewAuthoritySpec {
        subject: Subject { common_name: Some("Revocation Root".into()), ..Subject::default() },
        key_algorithm: KeyAlgorithm::EcdsaP256,
        validity_days: 365,
        path_length: None,
    };
    ok(first.create_authority(&grant(None), AuthoritySpec::Root(root)).await);
    let kept = issue(&first, "kept.example").await;
    let revoked = issue(&first, "revoked.example").await;

    let (number, listed) = read_crl(&ok(first.crl(CA_ID).await));
    assert!(listed.is_empty(), "nothing revoked yet: {listed:?}");

    ok(first.revoke(&grant(None), &revoked, RevocationReason::KeyCompromise).await);
    ok(first.revoke(&grant(None), &revoked, RevocationReason::Superseded).await);
    let state = ok(crate::ports::PkiReads::crl_state(&store, CA_ID, false).await);
    assert_eq!(state.revocations, 1, "revoking twice moves the marker once");
    let record = store.snapshot().issued.into_iter().find(|r| normalized(&r.serial_number) == normalized(&revoked));
    assert_eq!(record.and_then(|r| r.revocation_reason).as_deref(), Some("keyCompromise"), "the first reason stays");

    // Another replica sees the revocation at once: it signs a new CRL with a higher number.
    let second = replica(&ctx);
    let after_revocation = ok(second.crl(CA_ID).await);
    let (next_number, listed) = read_crl(&after_revocation);
    assert_eq!(listed.iter().map(|s| normalized(s)).collect::<Vec<_>>(), [normalized(&revoked)]);
    assert!(ok(next_number.parse::<u64>()) > ok(number.parse::<u64>()), "{next_number} after {number}");
    // The first replica serves the kept CRL rather than signing its own.
    assert_eq!(ok(first.crl(CA_ID).await), after_revocation);

    assert!(matches!(ok(second.serial_status(CA_ID, &revoked).await), SerialStatus::Revoked(_)));
    assert_eq!(ok(second.serial_status(CA_ID, &kept).await), SerialStatus::Good);
    assert_eq!(ok(second.serial_status(CA_ID, "0badc0de").await), SerialStatus::Unknown);
}
