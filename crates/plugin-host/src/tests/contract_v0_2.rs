//! Contract 0.2 served end to end by a real 0.2 component (`plugins/fixtures/connector-v02`),
//! and contract 0.1 still served: the frozen 0.1 build of the Slack plugin loads and runs.

use serde_json::{json, Value};

use crate::tests::worlds::issue_request;
use crate::tests::{event, install, runtime, test_config};
use crate::{
    Activation, CallTarget, CertificateRef, IssueOutcome, PluginError, PluginHost, PluginKind, PluginRef,
    ReportedError, RevocationReason, RevokeRequest,
};

fn record(id: &str) -> CallTarget {
    CallTarget::new("ws_test", PluginRef::Serving("fixture-v02".into()), json!({})).for_record(id)
}

fn reported(err: &PluginError) -> &ReportedError {
    match err {
        PluginError::Reported { error, .. } => error,
        other => panic!("expected a reported error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_connector_installs_with_its_declarations() {
    let runtime = runtime(test_config());
    let installed = install(&runtime, "fixture-connector-v02").await;
    assert_eq!(installed.wit_version, "0.2.0");
    assert_eq!(installed.info.kind, PluginKind::CaConnector);
    let caps = installed.info.capabilities;
    assert!(caps.issue && caps.revoke && caps.renewal_info && !caps.discover && !caps.renew);
    let secrets: Vec<_> = installed.info.secret_fields.iter().map(|f| (f.pointer.as_str(), f.withheld)).collect();
    assert_eq!(secrets, [("/apiKey", false), ("/caKeyPem", true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystore_and_state_are_scoped_to_the_record() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-connector-v02").await;

    runtime.ca_setup(&record("ca_a")).await.expect("setup a");
    runtime.ca_setup(&record("ca_b")).await.expect("setup b");
    // Setup is idempotent: the key is not replaced.
    runtime.ca_setup(&record("ca_a")).await.expect("setup a again");

    let details = |report: crate::TestReport| report.details;
    let a: Value = details(runtime.ca_test_connection(&record("ca_a")).await.expect("test a"));
    let b: Value = details(runtime.ca_test_connection(&record("ca_b")).await.expect("test b"));
    let thumbprint = |d: &Value| d["thumbprint"].as_str().unwrap_or_default().to_owned();
    assert_eq!(a["recordId"], "ca_a");
    assert_eq!(thumbprint(&a).len(), 43, "a base64url SHA-256 thumbprint: {a}");
    assert_ne!(thumbprint(&a), thumbprint(&b), "two records never share an account key");
    assert_eq!(a["accountUrl"], format!("https://ca.example/acct/{}", thumbprint(&a)));
    // A record never set up has neither key nor state.
    let fresh: Value = details(runtime.ca_test_connection(&record("ca_new")).await.expect("test new"));
    assert_eq!((fresh["thumbprint"].as_str(), fresh["accountUrl"].as_str()), (Some(""), Some("")));
    // The host answers the imports it does not serve yet as the contract says.
    assert_eq!(a["pki"], "this record is not an internal CA");
    // Presenting an answer first needs the name to be the workspace's (issue 21, finding 4): a
    // host without the domain-claims port presents nothing.
    assert_eq!(a["solver"], "this host has no domain claims to check names against", "{a}");
    assert_eq!(a["supported"], 1, "DNS-01 only (the host's DNS providers): {a}");
    // The plugin is told a time budget below the host's hard limit.
    let budget = a["budgetMs"].as_u64().unwrap_or(0);
    assert!(budget > 0 && u128::from(budget) < crate::tests::test_limits().wall_time.as_millis(), "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issuance_can_be_pending_then_polled_and_is_idempotent() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-connector-v02").await;
    let ca = record("ca_a");
    runtime.ca_setup(&ca).await.expect("setup");

    let request = issue_request(&["a.example", "b.example"], 30);
    let first = runtime.ca_issue(&ca, &request).await.expect("issue");
    let IssueOutcome::Pending(pending) = first else { panic!("pending expected: {first:?}") };
    assert_eq!(pending.reference, "order/req_1");
    assert_eq!(pending.retry_after_secs, Some(1));
    assert_eq!(pending.status_message, "1 order(s); placed now: true; names: 2");
    // The same idempotency key places no second order.
    let again = runtime.ca_issue(&ca, &request).await.expect("issue again");
    let IssueOutcome::Pending(again) = again else { panic!("pending expected") };
    assert_eq!(again.status_message, "1 order(s); placed now: false; names: 2");

    let polled = runtime.ca_poll_issue(&ca, &pending.reference, &request).await.expect("poll");
    let IssueOutcome::Issued(issued) = polled else { panic!("issued expected: {polled:?}") };
    assert_eq!(issued.ca_reference.as_deref(), Some("order/req_1#sig64"), "signed with the P-256 account key");
    assert_eq!(issued.certificate_der.first(), Some(&0x30), "PEM from the plugin arrives as DER");
    // Another record has no such order.
    runtime.ca_setup(&record("ca_b")).await.expect("setup b");
    let err = runtime.ca_poll_issue(&record("ca_b"), &pending.reference, &request).await.expect_err("other record");
    assert!(matches!(reported(&err), ReportedError::NotFound { .. }), "{err}");

    let chain = runtime.ca_chain(&ca).await.expect("chain");
    assert_eq!(chain.len(), 1);
    let fetched = runtime.ca_fetch_certificate(&ca, "cert-9").await.expect("fetch");
    assert_eq!(fetched.ca_reference.as_deref(), Some("cert-9"));
    let certificate = CertificateRef {
        serial_number: "01".into(),
        not_after: 1_800_000_000,
        ca_reference: Some("cert-9".into()),
        ..CertificateRef::default()
    };
    let window = runtime.ca_renewal_info(&ca, &certificate).await.expect("ari").expect("a window");
    assert_eq!((window.start, window.end), (1_800_000_000 - 30 * 86_400, 1_800_000_000 - 20 * 86_400));
    let page = runtime.ca_list_certificates(&ca, None, 10).await.expect("page");
    let revocation = page.items[0].revocation.expect("revoked");
    assert_eq!((revocation.revoked_at, revocation.reason), (Some(1_767_225_600), RevocationReason::AaCompromise));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_0_2_error_cases_reach_the_domain() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-connector-v02").await;
    let ca = record("ca_a");
    let revoke = |reason, ca_reference: Option<&str>| RevokeRequest {
        certificate: CertificateRef {
            serial_number: "01".into(),
            ca_reference: ca_reference.map(Into::into),
            ..CertificateRef::default()
        },
        reason,
    };
    runtime.ca_revoke(&ca, &revoke(RevocationReason::Superseded, Some("cert-1"))).await.expect("revoke");
    let err =
        runtime.ca_revoke(&ca, &revoke(RevocationReason::AaCompromise, Some("cert-1"))).await.expect_err("rejected");
    assert!(matches!(reported(&err), ReportedError::Rejected { .. }), "{err}");
    assert_eq!(err.api_code(), "CA_REJECTED");
    let err = runtime.ca_revoke(&ca, &revoke(RevocationReason::Unspecified, None)).await.expect_err("conflict");
    assert!(matches!(reported(&err), ReportedError::Conflict { .. }), "{err}");
    assert_eq!(err.api_code(), "CONFLICT");
}

/// The Slack plugin as built against contract 0.1 (`plugins/frozen`), whatever `plugins/slack`
/// becomes: it installs, keeps its workspace-wide state scope, and delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frozen_0_1_slack_build_still_loads_and_runs() {
    let frozen =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/frozen/slack-0.1.0-contract-0.1.wasm");
    let bytes = std::fs::read(&frozen).expect("frozen component");
    let (port, cert_pem, mut received) = crate::tests::slack::https_receiver("HTTP/1.1 200 OK").await;
    let bundle = tempfile::NamedTempFile::new().expect("bundle");
    std::fs::write(bundle.path(), cert_pem).expect("write bundle");
    let mut config = test_config();
    config.egress.allow_private_networks = true;
    config.egress.ca_bundle = Some(bundle.path().to_owned());
    let runtime = runtime(config);

    let installed = runtime.install(&bytes, Activation::IfNewer).await.expect("install frozen 0.1 slack");
    assert_eq!((installed.info.id.as_str(), installed.wit_version.as_str()), ("io.trellis.slack", "0.1.0"));
    let webhook = format!("https://localhost:{port}/services/T000/B000/XXXX");
    let target = CallTarget::new("ws_test", PluginRef::Serving("slack".into()), json!({ "webhookUrl": webhook }))
        .with_record_hosts([webhook.clone()])
        .for_record("int_1");
    runtime.validate_config(&target, PluginKind::Integration).await.expect("config valid");
    let delivery = runtime.notify(&target, &event("certificate.expiring")).await.expect("notify");
    assert_eq!(delivery.status, Some(200));
    let message = received.recv().await.expect("webhook received");
    assert!(message.head.starts_with("POST /services/T000/B000/XXXX"), "{}", message.head);
    assert!(String::from_utf8_lossy(&message.body).contains("api.example.com"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http01_answers_go_to_the_challenge_listener_scoped_to_their_record() {
    use std::sync::Arc;
    use trellis_core::clock::FixedClock;
    use trellis_core::domain_claims::{DomainClaim, DomainClaims, InMemoryDomainClaims};
    use trellis_core::plugins::challenges::{answer_for, ChallengeAnswers, InMemoryChallengeAnswers};

    let answers = Arc::new(InMemoryChallengeAnswers::default());
    let claims = Arc::new(InMemoryDomainClaims::default());
    let now = chrono::DateTime::parse_from_rfc3339("2026-11-25T10:00:00Z").expect("time").to_utc();
    let runtime = runtime(test_config())
        .with_http01_answers(answers.clone(), Arc::new(FixedClock(now)))
        .with_domain_claims(claims.clone());
    install(&runtime, "fixture-connector-v02").await;
    let host = Some("example.com");

    // The fixture presents for example.com, which ws_test has not claimed: refused, and the
    // message says how to claim it.
    let unclaimed: Value = runtime.ca_test_connection(&record("ca_a")).await.expect("test").details;
    let solver = unclaimed["solver"].as_str().unwrap_or_default();
    assert!(solver.contains("Invalid") && solver.contains("/api/domain-claims"), "{unclaimed}");
    assert_eq!(
        answer_for(answers.as_ref() as &dyn ChallengeAnswers, "tok", host, now.timestamp_millis())
            .await
            .expect("lookup"),
        None
    );

    let claim = |workspace: &str, verified: bool| DomainClaim {
        id: format!("dc_{workspace}"),
        workspace_id: workspace.into(),
        domain: "example.com".into(),
        token: "t".into(),
        verified_at: verified.then_some(1),
        method: None,
        created_at: 0,
    };
    // Another workspace's claim, or an unverified one of its own, entitles to nothing.
    claims.insert_claim(&claim("ws_other", true)).await.expect("claim");
    claims.insert_claim(&claim("ws_test", false)).await.expect("claim");
    let still: Value = runtime.ca_test_connection(&record("ca_a")).await.expect("test").details;
    assert!(still["solver"].as_str().unwrap_or_default().contains("/api/domain-claims"), "{still}");

    claims.delete_claim("ws_other", "dc_ws_other").await.expect("delete");
    claims.mark_verified("dc_ws_test", 2, "admin").await.expect("verify");
    let a: Value = runtime.ca_test_connection(&record("ca_a")).await.expect("test a").details;
    assert_eq!(a["supported"], 2, "HTTP-01 is offered once a listener is configured, besides DNS-01: {a}");
    assert!(a["solver"].as_str().unwrap_or_default().starts_with("Ok(Presented"), "{a}");
    let served = answer_for(answers.as_ref() as &dyn ChallengeAnswers, "tok", host, now.timestamp_millis()).await;
    assert_eq!(served.expect("lookup"), Some("tok.thumb".to_owned()));

    // Another record cannot take over a token that is being served.
    let b: Value = runtime.ca_test_connection(&record("ca_b")).await.expect("test b").details;
    assert!(b["solver"].as_str().unwrap_or_default().contains("another record"), "{b}");

    // Answers expire: an hour later nothing is served even without a cleanup.
    let later = now.timestamp_millis() + trellis_core::plugins::challenges::CHALLENGE_LIFETIME_MS + 1;
    assert_eq!(answer_for(answers.as_ref(), "tok", host, later).await.expect("lookup"), None);
}
