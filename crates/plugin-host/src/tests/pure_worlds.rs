//! The pure worlds of contract 0.2, served by real components: the `issuance-policy` world
//! (`plugins/fixtures/policy`) and the two-step `attestation-verifier`
//! (`plugins/fixtures/verifier-v02`).

use serde_json::json;

use crate::tests::{install, runtime, test_config};
use crate::{
    BoundCsr, CallTarget, Decision, EnrolledDevice, EnrollmentRequest, EvaluationRequest, Evidence, IssuanceSource,
    PcrValue, PluginError, PluginHost, PluginKind, PluginRef, ReportedError, Requester, RequesterKind, SubjectAltName,
    SubjectKey, Tpm2Certification, Tpm2Evidence, TpmClock, TrustAnchor, VerifyRequest,
};

fn policy_target(config: serde_json::Value) -> CallTarget {
    CallTarget::new("ws_test", PluginRef::Serving("fixture-policy".into()), config).for_record("pol_1")
}

fn evaluation(names: &[&str], rsa_bits: u32, validity_days: u32) -> EvaluationRequest {
    EvaluationRequest {
        ca_type: "internal".into(),
        ca_id: "ca_1".into(),
        template: Some("web_server".into()),
        subject: crate::CertificateProfile::default().subject,
        subject_alt_names: names.iter().map(|n| SubjectAltName::Dns((*n).into())).collect(),
        key: SubjectKey { algorithm: "rsa".into(), size_bits: rsa_bits, curve: None, server_generated: false },
        validity_days,
        requester: Requester { kind: RequesterKind::User, id: "usr_1".into(), display_name: Some("a@b.c".into()) },
        source: IssuanceSource::Api,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuance_policy_decides_allow_shorten_deny_and_approval() {
    let runtime = runtime(test_config());
    let installed = install(&runtime, "fixture-policy").await;
    assert_eq!((installed.info.kind, installed.wit_version.as_str()), (PluginKind::IssuancePolicy, "0.2.0"));

    let config = json!({ "allowedSuffixes": [".example.com"], "maxValidityDays": 90, "approvalAboveDays": 365 });
    let target = policy_target(config);
    runtime.validate_config(&target, PluginKind::IssuancePolicy).await.expect("config accepted");

    let decide = |request: EvaluationRequest| {
        let (runtime, target) = (&runtime, &target);
        async move { runtime.policy_evaluate(target, &request).await.expect("policy decides") }
    };
    assert_eq!(decide(evaluation(&["www.example.com"], 2048, 30)).await, Decision::Allow { max_validity_days: None });
    assert_eq!(
        decide(evaluation(&["www.example.com"], 2048, 200)).await,
        Decision::Allow { max_validity_days: Some(90) },
        "longer than allowed: shortened"
    );
    let Decision::Deny(reasons) = decide(evaluation(&["*.example.com", "evil.test"], 1024, 30)).await else {
        panic!("a wildcard, a foreign name and a weak key are denied");
    };
    let codes: Vec<_> = reasons.iter().map(|r| r.code.as_str()).collect();
    assert_eq!(codes, ["wildcard-not-allowed", "san-not-allowed", "key-too-weak"]);
    assert!(matches!(decide(evaluation(&["a.example.com"], 4096, 400)).await, Decision::RequireApproval(_)));

    // Its configuration is checked by the plugin itself.
    let bad = policy_target(json!({ "maxValidityDays": 0 }));
    let err = runtime.validate_config(&bad, PluginKind::IssuancePolicy).await.expect_err("refused");
    assert!(matches!(err, PluginError::Reported { error: ReportedError::InvalidConfig { .. }, .. }), "{err}");
    // A policy is not a connector.
    let err = runtime.ca_test_connection(&policy_target(json!({}))).await.expect_err("wrong kind");
    assert!(matches!(err.code(), "plugin.wrong_kind" | "plugin.not_bound"), "{err}");
}

fn verifier_target(config: serde_json::Value) -> CallTarget {
    CallTarget::new("ws_test", PluginRef::Serving("fixture-tpm2".into()), config).for_record("dev_1")
}

fn enrollment(ek: Option<&[u8]>, anchors: &[&[u8]]) -> EnrollmentRequest {
    EnrollmentRequest {
        ek_certificate: ek.map(<[u8]>::to_vec),
        ek_chain: vec![],
        ek_public: vec![0xee; 8],
        ak_public: vec![0xaa; 8],
        trust_anchors: anchors
            .iter()
            .map(|der| TrustAnchor { certificate_der: der.to_vec(), manufacturer: Some("id:54455354".into()) })
            .collect(),
        policy: None,
        secret: (0..32).collect(),
        entropy: (100..164).collect(),
        now: 1_700_000_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_step_verifier_enrolls_then_verifies() {
    let runtime = runtime(test_config());
    let installed = install(&runtime, "fixture-verifier-v02").await;
    assert_eq!(installed.wit_version, "0.2.0");
    let target = verifier_target(json!({}));

    // Step 1: the challenge wraps the host's secret; the device recovers it.
    let request = enrollment(Some(b"ek-cert"), &[b"ek-cert"]);
    let enrolled = runtime.verifier_enroll(&target, &request).await.expect("enroll");
    assert!(enrolled.passed && enrolled.failures.is_empty(), "{enrolled:?}");
    assert_eq!(enrolled.ek_manufacturer.as_deref(), Some("id:54455354"));
    let challenge = enrolled.challenge.expect("a challenge");
    let recovered: Vec<u8> =
        challenge.credential_blob.iter().zip(&challenge.encrypted_secret).map(|(c, e)| c ^ e).collect();
    assert_eq!(recovered, request.secret);
    let ak_name = enrolled.ak_name.expect("AK name");

    let refused = runtime.verifier_enroll(&target, &enrollment(Some(b"ek-cert"), &[])).await.expect("enroll");
    assert!(!refused.passed && refused.challenge.is_none());
    assert_eq!(refused.failures[0].code, "ek_cert_untrusted");

    // Step 2: evidence for the enrolled AK.
    let nonce = vec![7u8; 32];
    let quote = |nonce: &[u8], clock: u64| [b"quote".as_slice(), nonce, &clock.to_be_bytes()].concat();
    let verify = |quote: Vec<u8>, pcr: u8, csr: bool, last_clock: Option<u64>| VerifyRequest {
        evidence: Evidence::Tpm2(Tpm2Evidence {
            quote,
            quote_signature: vec![1],
            pcrs: vec![PcrValue { bank: "SHA256".into(), index: 7, digest: vec![pcr; 32] }],
            certification: csr.then(|| Tpm2Certification {
                attest: vec![2],
                signature: vec![3],
                certified_key_public: vec![4],
            }),
            event_log: None,
        }),
        policy: json!({
            "expectedPcrs": { "SHA256": { "7": "11".repeat(32) } },
            "maxAttestationAgeSeconds": 300,
            "requireBoundCsrKey": true,
        }),
        nonce: nonce.clone(),
        nonce_issued_at: 1_700_000_000,
        now: 1_700_000_010,
        device: EnrolledDevice {
            ak_public: vec![0xaa; 8],
            ak_name: ak_name.clone(),
            ek_certificate: Some(b"ek-cert".to_vec()),
            ek_chain: vec![],
            last_clock: last_clock.map(|clock| TpmClock { clock, reset_count: 0, restart_count: 0, safe: true }),
        },
        csr: csr.then(|| BoundCsr { der: vec![5], public_key: vec![6] }),
        trust_anchors: vec![],
    };
    let ok = runtime.verify(&target, &verify(quote(&nonce, 5_000), 0x11, true, Some(4_000))).await.expect("verify");
    assert!(ok.passed, "{ok:?}");
    assert_eq!((ok.trust_score, ok.verified_pcrs.len()), (70, 1));
    assert_eq!(ok.clock.map(|c| c.clock), Some(5_000));

    let bad = runtime.verify(&target, &verify(quote(&[9; 32], 3_000), 0x22, false, Some(4_000))).await.expect("verify");
    let codes: Vec<_> = bad.failures.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["quote_nonce_mismatch", "pcr_mismatch", "bound_key_missing", "clock_regressed"]);
    assert_eq!(bad.failures[1].message, "SHA256 PCR 7");
    assert!(!bad.passed && bad.trust_score == 0);

    // A verifier claiming `passed` beside failures is not believed, and carries no trust.
    let liar = verifier_target(json!({ "misreport": true }));
    let lied = runtime.verify(&liar, &verify(quote(&[9; 32], 3_000), 0x22, false, None)).await.expect("verify");
    assert!(!lied.passed && lied.trust_score == 0 && !lied.failures.is_empty());
    let lied = runtime.verifier_enroll(&liar, &enrollment(None, &[])).await.expect("enroll");
    assert!(!lied.passed && lied.challenge.is_none(), "no challenge leaves a refused enrollment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pure_world_that_imports_io_is_refused_at_install() {
    let runtime = runtime(test_config());
    let err = runtime
        .install(&crate::tests::plugin_bytes("fixture-impure-policy"), crate::Activation::IfNewer)
        .await
        .expect_err("an issuance policy may not reach the network");
    assert_eq!(err.code(), "plugin.unsupported_import", "{err}");
    assert!(err.to_string().contains("wasi:http/outgoing-handler"), "{err}");
    assert!(err.to_string().contains("pure computation"), "{err}");
}
