//! The `ca-connector` and `attestation-verifier` worlds, through their fixtures.

use serde_json::json;

use crate::tests::{install, runtime, target, test_config};
use crate::{
    Evidence, IssueRequest, PcrValue, PluginHost, PluginKind, PluginRef, ReportedError, RevocationReason,
    RevokeRequest, VerifyRequest,
};

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

    let issued = runtime
        .ca_issue(
            &ca,
            &IssueRequest {
                csr_pem: "-----BEGIN CERTIFICATE REQUEST-----\n...".into(),
                subject_alt_names: vec!["a.example".into(), "b.example".into()],
                validity_days: Some(30),
                profile: None,
                metadata: json!({}),
            },
        )
        .await
        .expect("issue");
    assert_eq!(issued.ca_reference.as_deref(), Some("a.example,b.example"));
    assert_eq!(issued.not_after - issued.not_before, 30 * 86_400);

    let revoke = |serial: &str| RevokeRequest {
        serial_number: serial.into(),
        certificate_pem: None,
        reason: RevocationReason::KeyCompromise,
    };
    runtime.ca_revoke(&ca, &revoke("abc")).await.expect("revoke");
    let err = runtime.ca_revoke(&ca, &revoke("dead")).await.expect_err("unknown serial");
    assert!(matches!(err, crate::PluginError::Reported { error: ReportedError::NotFound { .. }, .. }), "{err}");

    let first = runtime.ca_list_certificates(&ca, None, 2).await.expect("page 1");
    let second = runtime.ca_list_certificates(&ca, first.next_cursor.clone(), 2).await.expect("page 2");
    assert_eq!((first.items.len(), second.items.len()), (2, 1));
    assert_eq!(second.next_cursor, None);
    assert!(second.items[0].revoked);

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
        evidence: Evidence {
            format: "tpm2-quote".into(),
            quote: [b"quote:".as_slice(), b"n0nce"].concat(),
            signature: vec![],
            ak_public: vec![],
            pcrs: vec![PcrValue { bank: "sha256".into(), index: 0, digest: vec![pcr0; 4] }],
            ek_certificate: None,
            event_log: None,
        },
        policy: json!({"pcrs": {"0": "aaaaaaaa"}}),
        csr_public_key: vec![],
        expected_nonce: nonce.to_vec(),
    };
    let ok = runtime.verify(&target, &request(b"n0nce", 0xaa)).await.expect("verify");
    assert!(ok.verified && ok.failures.is_empty());
    assert_eq!(ok.verified_pcrs.len(), 1);

    let bad = runtime.verify(&target, &request(b"other", 0xbb)).await.expect("verify");
    assert!(!bad.verified);
    let codes: Vec<_> = bad.failures.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["nonce-mismatch", "pcr-mismatch"]);
    assert_eq!(bad.trust_score, 0);
}
