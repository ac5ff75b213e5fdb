//! attest-and-provision against the area's fake port, a scripted verifier and a scripted CA:
//! the nonce rules, the policy choice, what the verifier is given (the device's enrolled keys,
//! not the request's), the issued certificate and the failure records and events. The clock is
//! fixed; nothing sleeps.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::{json, Value};

use super::devices::{Device, ATTESTED, DISABLED, ENROLLED, FAILED};
use super::nonces::{Nonce, AK_ENROLLMENT, ATTESTATION};
use super::policies::Policy;
use super::provision::{attest_and_provision, ProvisionInput, KIND_PROVISION};
use super::AttestationError;
use crate::context::Context;
use crate::error::Error;
use crate::plugins::{
    CallTarget, Capabilities, Evidence, Failure, IssueOutcome, IssueRequest, IssuedCertificate, PcrValue, PluginInfo,
    PluginKind, TpmClock, Verdict, VerifyRequest,
};
use crate::testing::{active_ca, context_with, owner, IssueScript, MemoryStore, NoPlugins, VerifyScript};

const WORKSPACE: &str = "ws_iot";
const DEVICE_ID: i64 = 700;
const OTHER_DEVICE_ID: i64 = 701;
const POLICY_ID: i64 = 800;
const CA_ID: i64 = 900;
const NOW: &str = "2026-11-24T12:00:00Z";
const NOW_MS: i64 = 1_795_521_600_000;
const NAME: &str = "device-1.example.com";

fn device(id: i64) -> Device {
    Device {
        id,
        workspace_id: WORKSPACE.into(),
        name: format!("device {id}"),
        device_type: Some("gateway".into()),
        serial: None,
        description: None,
        status: ENROLLED,
        ak_public: Some(b"enrolled-ak-public".to_vec()),
        ak_name: Some(b"enrolled-ak-name".to_vec()),
        ek_public: Some(b"enrolled-ek-public".to_vec()),
        ek_certificate: Some(b"enrolled-ek-certificate".to_vec()),
        ek_chain: vec![b"enrolled-ek-intermediate".to_vec()],
        ek_manufacturer: Some("Infineon".into()),
        last_clock: None,
        enrolled_at: Some(NOW_MS - 86_400_000),
        last_attested_at: None,
        metadata: json!({}),
        created_at: 0,
        updated_at: 0,
    }
}

fn policy(id: i64, device_type: Option<&str>, enabled: bool) -> Policy {
    Policy {
        id,
        workspace_id: WORKSPACE.into(),
        name: format!("policy {id}"),
        description: None,
        device_type: device_type.map(str::to_owned),
        expected_pcrs: BTreeMap::new(),
        required_pcr_banks: vec!["SHA256".into()],
        required_pcrs: vec![0],
        allowed_ek_manufacturers: Vec::new(),
        max_attestation_age_seconds: 300,
        require_bound_csr_key: false,
        require_secure_boot: false,
        enabled,
        created_at: 0,
        updated_at: 0,
    }
}

fn nonce(text: &str, device_id: i64, purpose: &str, expires_at: i64) -> Nonce {
    Nonce {
        nonce: text.into(),
        workspace_id: WORKSPACE.into(),
        device_id,
        purpose: purpose.into(),
        issued_at: NOW_MS - 10_000,
        expires_at,
        consumed_at: None,
    }
}

const NONCE: &str = "aa00000000000000000000000000000000000000000000000000000000000001";

fn connector() -> PluginInfo {
    PluginInfo {
        id: "fixture.issuer".into(),
        version: semver::Version::new(0, 1, 0),
        kind: PluginKind::CaConnector,
        name: "issuer".into(),
        description: String::new(),
        serves: vec!["fixture".into()],
        config_schema: json!({}),
        secret_fields: Vec::new(),
        capabilities: Capabilities { issue: true, ..Capabilities::default() },
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

/// A device key's CSR for [`NAME`] (subject and SAN).
fn csr() -> String {
    let key = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
    let mut params = rcgen::CertificateParams::new(vec![NAME.to_string()]).unwrap_or_else(|err| panic!("{err}"));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, NAME);
    params.serialize_request(&key).and_then(|csr| csr.pem()).unwrap_or_else(|err| panic!("csr: {err}"))
}

/// The CA signs the CSR as it is, with a throwaway issuer.
fn signing_ca() -> IssueScript {
    Arc::new(|_target: CallTarget, request: IssueRequest| {
        Box::pin(async move {
            let issuer_key = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
            let mut issuer_params =
                rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|err| panic!("{err}"));
            issuer_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let issuer = issuer_params.self_signed(&issuer_key).unwrap_or_else(|err| panic!("issuer: {err}"));
            let der = rustls_pki_types::CertificateSigningRequestDer::from(request.csr_der.clone());
            let certificate = rcgen::CertificateSigningRequestParams::from_der(&der)
                .unwrap_or_else(|err| panic!("csr: {err}"))
                .signed_by(&issuer, &issuer_key)
                .unwrap_or_else(|err| panic!("sign: {err}"));
            Ok(IssueOutcome::Issued(IssuedCertificate {
                certificate_der: certificate.der().to_vec(),
                chain_der: vec![issuer.der().to_vec()],
                ca_reference: None,
            }))
        })
    })
}

fn passing(manufacturer: Option<&str>) -> Verdict {
    Verdict {
        passed: true,
        failures: Vec::new(),
        verified_pcrs: vec![PcrValue { bank: "SHA256".into(), index: 0, digest: vec![0xab; 32] }],
        ek_manufacturer: manufacturer.map(str::to_owned),
        trust_score: 90,
        clock: Some(TpmClock { clock: 42, reset_count: 1, restart_count: 0, safe: true }),
    }
}

fn refusing(code: &str, message: &str) -> Verdict {
    Verdict {
        passed: false,
        failures: vec![Failure { code: code.into(), message: message.into() }],
        verified_pcrs: Vec::new(),
        ek_manufacturer: None,
        trust_score: 0,
        clock: None,
    }
}

/// What the verifier was asked, for assertions.
type Asked = Arc<Mutex<Vec<VerifyRequest>>>;

struct Fixture {
    store: MemoryStore,
    ctx: Context,
    asked: Asked,
}

fn fixture(verdict: Verdict) -> Fixture {
    let store = MemoryStore::default();
    store.put_ca(active_ca(WORKSPACE, CA_ID, "fixture"));
    store.put_device(device(DEVICE_ID));
    store.put_device(device(OTHER_DEVICE_ID));
    store.put_attestation_policy(policy(POLICY_ID, Some("gateway"), true));
    store.put_nonce(nonce(NONCE, DEVICE_ID, ATTESTATION, NOW_MS + 300_000));
    let asked: Asked = Arc::default();
    let seen = asked.clone();
    let verify: VerifyScript = Arc::new(move |_target: &CallTarget, request: &VerifyRequest| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(request.clone());
        }
        Ok(verdict.clone())
    });
    let plugins = NoPlugins {
        connector: Some(connector()),
        issue: Some(signing_ca()),
        verify: Some(verify),
        ..NoPlugins::default()
    };
    let ctx = context_with(store.clone(), NOW, plugins);
    Fixture { store, ctx, asked }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn input(nonce: &str) -> ProvisionInput {
    ProvisionInput {
        ca_id: Some(json!(CA_ID)),
        template_id: Some("device".into()),
        csr: Some(csr()),
        validity_days: None,
        policy_id: None,
        evidence: Some(json!({
            "nonce": nonce,
            "quoteBlob": b64(b"quote"),
            "quoteSignature": b64(b"signature"),
            "pcrs": { "SHA256": { "0": "ab".repeat(32) } },
        })),
    }
}

fn failures_of(result: Result<impl std::fmt::Debug, Error>) -> Vec<String> {
    match refusal_of(&result) {
        Some(AttestationError::Failed(failures)) => failures.clone(),
        _ => panic!("expected attestation_failed, got {result:?}"),
    }
}

/// The attestation refusal a use case answered, if it answered one.
fn refusal_of<T>(result: &Result<T, Error>) -> Option<&AttestationError> {
    result.as_ref().err().and_then(Error::area)
}

fn stored_device(store: &MemoryStore, id: i64) -> Device {
    store.snapshot().devices.into_iter().find(|d| d.id == id).unwrap_or_else(|| panic!("device {id}"))
}

fn event_types(store: &MemoryStore) -> Vec<String> {
    store.snapshot().events.into_iter().map(|e| e.event_type).collect()
}

fn nonce_consumed(store: &MemoryStore, text: &str) -> bool {
    store.snapshot().nonces.iter().any(|n| n.nonce == text && n.consumed_at.is_some())
}

#[tokio::test]
async fn a_passing_attestation_issues_and_records_the_certificate() {
    let f = fixture(passing(Some("STMicro")));

    let provisioned = attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, input(NONCE))
        .await
        .unwrap_or_else(|err| panic!("provision: {err}"));

    assert_eq!(provisioned.policy_id, POLICY_ID);
    assert_eq!(provisioned.issued.certificate.common_name, NAME);
    assert_eq!(provisioned.issued.certificate.ca_id, Some(CA_ID));
    assert_eq!(provisioned.verified_pcrs, json!({ "SHA256": { "0": "ab".repeat(32) } }));
    assert_eq!(provisioned.ek_manufacturer.as_deref(), Some("STMicro"), "the verifier's word wins");
    let tables = f.store.snapshot();
    let record = tables.attestation_records.first().unwrap_or_else(|| panic!("a record"));
    assert_eq!((record.kind.as_str(), record.passed, record.trust_score), (KIND_PROVISION, true, 90));
    assert_eq!(record.certificate_id, Some(provisioned.issued.certificate.id));
    assert_eq!(record.policy_id, Some(POLICY_ID));
    assert_eq!(record.nonce.as_deref(), Some(NONCE));
    let device = stored_device(&f.store, DEVICE_ID);
    assert_eq!(device.status, ATTESTED);
    assert_eq!(device.last_attested_at, Some(NOW_MS));
    assert_eq!(device.last_clock.map(|c| c.clock), Some(42), "a passing quote's clock is kept");
    assert!(nonce_consumed(&f.store, NONCE));
    let actions: Vec<&str> = tables.audit.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(actions, ["certificate.issued", "attestation.passed"]);
    assert_eq!(event_types(&f.store), ["certificate.created"], "no attestation.failed");
}

#[tokio::test]
async fn the_verifier_gets_the_enrolled_keys_the_nonce_the_policy_and_the_csr() {
    let f = fixture(passing(None));

    let provisioned = attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, input(NONCE))
        .await
        .unwrap_or_else(|err| panic!("provision: {err}"));

    let asked = f.asked.lock().map(|a| a.clone()).unwrap_or_default();
    assert_eq!(asked.len(), 1);
    let request = &asked[0];
    // The AK and EK pinned at enrollment, never anything the request carries.
    assert_eq!(request.device.ak_public, b"enrolled-ak-public");
    assert_eq!(request.device.ak_name, b"enrolled-ak-name");
    assert_eq!(request.device.ek_certificate.as_deref(), Some(&b"enrolled-ek-certificate"[..]));
    assert_eq!(request.device.ek_chain, vec![b"enrolled-ek-intermediate".to_vec()]);
    assert_eq!(request.nonce, hex::decode(NONCE).unwrap_or_default());
    assert_eq!(request.nonce_issued_at, (NOW_MS - 10_000) / 1000);
    assert_eq!(request.now, NOW_MS / 1000);
    assert_eq!(request.policy["id"], POLICY_ID);
    let Evidence::Tpm2(evidence) = &request.evidence else { panic!("TPM 2.0 evidence: {:?}", request.evidence) };
    assert_eq!(evidence.quote, b"quote");
    assert_eq!(evidence.pcrs, vec![PcrValue { bank: "SHA256".into(), index: 0, digest: vec![0xab; 32] }]);
    assert!(request.csr.is_some(), "the CSR goes to the verifier to be bound");
    assert_eq!(
        provisioned.ek_manufacturer.as_deref(),
        Some("Infineon"),
        "without the verifier's word, the manufacturer enrollment recorded"
    );
}

#[tokio::test]
async fn a_verifier_refusal_is_recorded_with_its_failures_and_announced() {
    let f = fixture(refusing("pcr_mismatch", "SHA256 PCR 0"));

    let failures =
        failures_of(attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, input(NONCE)).await);

    assert_eq!(failures, ["pcr_mismatch: SHA256 PCR 0"]);
    let tables = f.store.snapshot();
    assert!(tables.certificates.is_empty(), "nothing issued");
    let record = tables.attestation_records.first().unwrap_or_else(|| panic!("a record"));
    assert_eq!((record.passed, record.trust_score), (false, 0));
    assert_eq!(record.failures, failures);
    assert_eq!(record.policy_id, Some(POLICY_ID));
    assert_eq!(stored_device(&f.store, DEVICE_ID).status, FAILED);
    let event = tables.events.first().unwrap_or_else(|| panic!("an event"));
    assert_eq!(event.event_type, "attestation.failed");
    assert_eq!(
        event.payload["data"],
        json!({ "deviceId": DEVICE_ID, "attestationId": record.id, "policyId": POLICY_ID, "failures": failures })
    );
    assert!(nonce_consumed(&f.store, NONCE), "a refused attestation spends its nonce");
}

#[tokio::test]
async fn a_nonce_is_good_for_one_attempt() {
    let f = fixture(refusing("quote_invalid", "bad signature"));
    let caller = owner(WORKSPACE);
    failures_of(attest_and_provision(&f.ctx.attestation_deps(), &caller, DEVICE_ID, input(NONCE)).await);
    let records_before = f.store.snapshot().attestation_records.len();

    let again = attest_and_provision(&f.ctx.attestation_deps(), &caller, DEVICE_ID, input(NONCE)).await;

    assert!(matches!(refusal_of(&again), Some(AttestationError::NonceAlreadyUsed)), "{again:?}");
    assert_eq!(f.store.snapshot().attestation_records.len(), records_before, "a nonce refusal records nothing");
    assert_eq!(f.asked.lock().map(|a| a.len()).unwrap_or_default(), 1, "the verifier ran once");
}

#[tokio::test]
async fn a_nonce_of_another_device_expired_or_for_enrollment_is_refused_and_left_alone() {
    let f = fixture(passing(None));
    let other = "bb00000000000000000000000000000000000000000000000000000000000002";
    let expired = "cc00000000000000000000000000000000000000000000000000000000000003";
    let enrollment = "dd00000000000000000000000000000000000000000000000000000000000004";
    f.store.put_nonce(nonce(other, OTHER_DEVICE_ID, ATTESTATION, NOW_MS + 300_000));
    f.store.put_nonce(nonce(expired, DEVICE_ID, ATTESTATION, NOW_MS));
    f.store.put_nonce(nonce(enrollment, DEVICE_ID, AK_ENROLLMENT, NOW_MS + 300_000));
    let caller = owner(WORKSPACE);

    let deps = f.ctx.attestation_deps();
    let refusal = |text: &str| attest_and_provision(&deps, &caller, DEVICE_ID, input(text));
    assert!(matches!(refusal_of(&refusal(other).await), Some(AttestationError::NonceDeviceMismatch)));
    assert!(matches!(refusal_of(&refusal(expired).await), Some(AttestationError::NonceExpired)));
    assert!(matches!(
        refusal_of(&refusal(enrollment).await),
        Some(AttestationError::NoncePurposeMismatch { expected: ATTESTATION, .. })
    ));
    let unknown = "ee00000000000000000000000000000000000000000000000000000000000005";
    assert!(matches!(refusal_of(&refusal(unknown).await), Some(AttestationError::NonceNotFound)));
    assert!(matches!(refusal_of(&refusal("not-hex").await), Some(AttestationError::NonceNotFound)));

    let tables = f.store.snapshot();
    assert!(tables.nonces.iter().all(|n| n.consumed_at.is_none()), "refusals leave nonces as they were");
    assert!(tables.attestation_records.is_empty());
    assert!(tables.events.is_empty());
}

#[tokio::test]
async fn a_missing_member_is_named_before_the_nonce_is_spent() {
    let f = fixture(passing(None));
    let without_ca = ProvisionInput { ca_id: None, ..input(NONCE) };

    let refused = attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, without_ca).await;

    assert!(matches!(refusal_of(&refused), Some(AttestationError::MissingField(f)) if f == "caId"), "{refused:?}");
    let mut no_quote = input(NONCE);
    if let Some(Value::Object(evidence)) = no_quote.evidence.as_mut() {
        evidence.remove("quoteBlob");
    }
    let refused = attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, no_quote).await;
    assert!(
        matches!(refusal_of(&refused), Some(AttestationError::MissingField(f)) if f == "evidence.quoteBlob"),
        "{refused:?}"
    );
    assert!(!nonce_consumed(&f.store, NONCE));
}

#[tokio::test]
async fn without_a_policy_for_the_device_type_the_attempt_fails_and_is_recorded() {
    let f = fixture(passing(None));
    f.store.edit(|tables| tables.attestation_policies = vec![policy(POLICY_ID, Some("camera"), true)]);

    let failures =
        failures_of(attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, input(NONCE)).await);

    assert_eq!(failures.len(), 1);
    assert!(failures[0].starts_with("no_policy:"), "{failures:?}");
    let record = f.store.snapshot().attestation_records.pop().unwrap_or_else(|| panic!("a record"));
    assert_eq!(record.policy_id, None);
    assert_eq!(event_types(&f.store), ["attestation.failed"]);
    assert!(f.asked.lock().map(|a| a.is_empty()).unwrap_or_default(), "no verifier without a policy");
}

#[tokio::test]
async fn the_first_enabled_matching_policy_is_chosen() {
    let f = fixture(passing(None));
    f.store.edit(|tables| {
        tables.attestation_policies = vec![
            policy(801, Some("gateway"), false),
            policy(802, Some("camera"), true),
            policy(803, None, true),
            policy(804, Some("gateway"), true),
        ]
    });

    let provisioned = attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, input(NONCE))
        .await
        .unwrap_or_else(|err| panic!("provision: {err}"));

    assert_eq!(provisioned.policy_id, 803, "oldest enabled policy that applies (no type applies to all)");
}

#[tokio::test]
async fn a_named_policy_must_be_enabled_and_written_for_the_device_s_type() {
    let f = fixture(passing(None));
    f.store.edit(|tables| {
        tables.attestation_policies.push(policy(810, Some("gateway"), false));
        tables.attestation_policies.push(policy(811, Some("camera"), true));
    });
    let second = "ab00000000000000000000000000000000000000000000000000000000000006";
    f.store.put_nonce(nonce(second, DEVICE_ID, ATTESTATION, NOW_MS + 300_000));
    let caller = owner(WORKSPACE);

    let disabled = ProvisionInput { policy_id: Some(810), ..input(NONCE) };
    let failures = failures_of(attest_and_provision(&f.ctx.attestation_deps(), &caller, DEVICE_ID, disabled).await);
    assert!(failures[0].starts_with("policy_disabled:"), "{failures:?}");

    let foreign = ProvisionInput { policy_id: Some(811), ..input(second) };
    let failures = failures_of(attest_and_provision(&f.ctx.attestation_deps(), &caller, DEVICE_ID, foreign).await);
    assert!(failures[0].starts_with("policy_not_applicable:"), "{failures:?}");

    let records = f.store.snapshot().attestation_records;
    assert_eq!(records.iter().map(|r| r.policy_id).collect::<Vec<_>>(), [Some(810), Some(811)], "the named policy");
    assert_eq!(event_types(&f.store), ["attestation.failed", "attestation.failed"]);
}

#[tokio::test]
async fn an_unknown_named_policy_is_a_404_after_the_nonce() {
    let f = fixture(passing(None));
    let unknown = ProvisionInput { policy_id: Some(999), ..input(NONCE) };

    let refused = attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, unknown).await;

    assert!(matches!(refusal_of(&refused), Some(AttestationError::PolicyNotFound)), "{refused:?}");
    assert!(nonce_consumed(&f.store, NONCE));
    assert_eq!(event_types(&f.store), ["attestation.failed"]);
}

#[tokio::test]
async fn a_disabled_device_is_refused_recorded_and_stays_disabled() {
    let f = fixture(passing(None));
    f.store.edit(|tables| {
        if let Some(device) = tables.devices.iter_mut().find(|d| d.id == DEVICE_ID) {
            device.status = DISABLED;
        }
    });

    let failures =
        failures_of(attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, input(NONCE)).await);

    assert!(failures[0].starts_with("device_disabled:"), "{failures:?}");
    assert_eq!(stored_device(&f.store, DEVICE_ID).status, DISABLED);
    assert_eq!(event_types(&f.store), ["attestation.failed"]);
}

#[tokio::test]
async fn a_device_without_an_enrolled_key_never_reaches_the_verifier() {
    let f = fixture(passing(None));
    f.store.edit(|tables| {
        if let Some(device) = tables.devices.iter_mut().find(|d| d.id == DEVICE_ID) {
            device.ak_public = None;
            device.ak_name = None;
        }
    });

    let failures =
        failures_of(attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, input(NONCE)).await);

    assert!(failures[0].starts_with("device_not_enrolled:"), "{failures:?}");
    assert!(f.asked.lock().map(|a| a.is_empty()).unwrap_or_default());
    assert_eq!(stored_device(&f.store, DEVICE_ID).status, FAILED);
}

#[tokio::test]
async fn an_issuance_failure_after_a_passing_verdict_is_recorded_as_a_failure() {
    let f = fixture(passing(None));
    let unknown_ca = ProvisionInput { ca_id: Some(json!(CA_ID + 1)), ..input(NONCE) };

    let refused = attest_and_provision(&f.ctx.attestation_deps(), &owner(WORKSPACE), DEVICE_ID, unknown_ca).await;

    assert!(matches!(refused, Err(Error::NotFound(_))), "{refused:?}");
    let tables = f.store.snapshot();
    assert!(tables.certificates.is_empty());
    let record = tables.attestation_records.first().unwrap_or_else(|| panic!("a record"));
    assert!(!record.passed);
    assert_eq!(record.policy_id, Some(POLICY_ID));
    assert!(record.failures[0].starts_with("not_found:"), "{:?}", record.failures);
    assert_eq!(event_types(&f.store), ["attestation.failed"]);
}
