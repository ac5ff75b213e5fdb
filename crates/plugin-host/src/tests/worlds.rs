//! The `ca-connector` and `attestation-verifier` worlds, through their fixtures.

use serde_json::json;

use crate::tests::{install, runtime, target, test_config};
use crate::{
    CertificateProfile, CertificateRef, EnrolledDevice, Evidence, IssueOutcome, IssueRequest, PcrValue, PluginHost,
    PluginKind, PluginRef, ReportedError, RevocationReason, RevokeRequest, SubjectAltName, Tpm2Evidence, VerifyRequest,
};

/// A 0.2-shaped request (the domain's), which the host flattens for 0.1 connectors.
pub(crate) fn issue_request(names: &[&str], validity_days: u32) -> IssueRequest {
    IssueRequest {
        idempotency_key: "req_1".into(),
        csr_der: vec![0x30, 0x03, 0x02, 0x01, 0x00],
        template: None,
        profile: CertificateProfile {
            subject_alt_names: names.iter().map(|n| SubjectAltName::Dns((*n).into())).collect(),
            validity_days,
            ..CertificateProfile::default()
        },
        replaces: None,
        metadata: json!({}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_connector_world_round_trip() {
    let runtime = runtime(test_config());
    let installed = install(&runtime, "fixture-ca-static").await;
    assert_eq!(installed.info.kind, PluginKind::CaConnector);
    assert_eq!(installed.info.default_issuer_patterns, ["*Fixture CA*"]);

    let ca = crate::CallTarget::new("ws", PluginRef::Serving("fixture-static".into()), json!({}));
    let report = runtime.ca_test_connection(&ca).await.expect("test");
    assert!(report.success);
    assert_eq!(report.details, json!({"endpoints": ["static"]}));

    let outcome = runtime.ca_issue(&ca, &issue_request(&["a.example", "b.example"], 30)).await.expect("issue");
    let IssueOutcome::Issued(issued) = outcome else { panic!("a 0.1 connector issues at once: {outcome:?}") };
    assert_eq!(issued.ca_reference.as_deref(), Some("a.example,b.example"));
    // The PEM the 0.1 plugin returned arrives as DER, its chain block too.
    assert_eq!(issued.certificate_der.first(), Some(&0x30));
    assert_eq!(issued.chain_der.len(), 1);
    // Operations 0.1 lacks are answered by the host.
    runtime.ca_setup(&ca).await.expect("setup is a no-op for 0.1");
    assert!(runtime.ca_chain(&ca).await.expect("chain").is_empty());
    let err = runtime.ca_poll_issue(&ca, "ref", &issue_request(&["a.example"], 30)).await.expect_err("no poll in 0.1");
    assert!(matches!(err, crate::PluginError::Reported { error: ReportedError::NotSupported { .. }, .. }), "{err}");

    let revoke = |serial: &str| RevokeRequest {
        certificate: CertificateRef { serial_number: serial.into(), ..CertificateRef::default() },
        reason: RevocationReason::KeyCompromise,
    };
    runtime.ca_revoke(&ca, &revoke("abc")).await.expect("revoke");
    let err = runtime.ca_revoke(&ca, &revoke("dead")).await.expect_err("unknown serial");
    assert!(matches!(err, crate::PluginError::Reported { error: ReportedError::NotFound { .. }, .. }), "{err}");

    let first = runtime.ca_list_certificates(&ca, None, 2).await.expect("page 1");
    let second = runtime.ca_list_certificates(&ca, first.next_cursor.clone(), 2).await.expect("page 2");
    assert_eq!((first.items.len(), second.items.len()), (2, 1));
    assert_eq!(second.next_cursor, None);
    assert!(second.items[0].revocation.is_some());

    // A CA connector is not an integration.
    let err = runtime
        .notify(&target("trellis.fixture.ca-static", json!({})), &crate::tests::event("x"))
        .await
        .expect_err("wrong kind");
    assert_eq!(err.code(), "plugin.wrong_kind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attestation_verifier_world_reports_failures() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-verifier").await;
    let target = crate::CallTarget::new("ws", PluginRef::Serving("fixture-quote".into()), json!({}));
    let request = |nonce: &[u8], pcr0: u8| VerifyRequest {
        evidence: Evidence::Tpm2(Tpm2Evidence {
            quote: [b"quote:".as_slice(), b"n0nce"].concat(),
            quote_signature: vec![],
            pcrs: vec![PcrValue { bank: "sha256".into(), index: 0, digest: vec![pcr0; 4] }],
            certification: None,
            event_log: None,
        }),
        policy: json!({"pcrs": {"0": "aaaaaaaa"}}),
        nonce: nonce.to_vec(),
        nonce_issued_at: 0,
        now: 0,
        device: EnrolledDevice {
            ak_public: vec![],
            ak_name: vec![],
            ek_certificate: None,
            ek_chain: vec![],
            last_clock: None,
        },
        csr: None,
        trust_anchors: vec![],
    };
    let ok = runtime.verify(&target, &request(b"n0nce", 0xaa)).await.expect("verify");
    assert!(ok.passed && ok.failures.is_empty());
    assert_eq!(ok.verified_pcrs.len(), 1);

    let bad = runtime.verify(&target, &request(b"other", 0xbb)).await.expect("verify");
    assert!(!bad.passed);
    let codes: Vec<_> = bad.failures.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["nonce-mismatch", "pcr-mismatch"]);
    assert_eq!(bad.trust_score, 0);

    // A 0.1 verifier has no enrollment step; the host says so instead of calling it.
    let enrollment = crate::EnrollmentRequest {
        ek_certificate: None,
        ek_chain: vec![],
        ek_public: vec![1],
        ak_public: vec![2],
        trust_anchors: vec![],
        policy: None,
        secret: vec![0; 32],
        entropy: vec![0; 64],
        now: 0,
    };
    let err = runtime.verifier_enroll(&target, &enrollment).await.expect_err("0.1 cannot enroll");
    assert!(matches!(err, crate::PluginError::Reported { error: ReportedError::NotSupported { .. }, .. }), "{err}");
}
