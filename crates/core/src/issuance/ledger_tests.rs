//! The internal CA's ledger through the issuance path, against in-memory fakes: the ledger row
//! `pki-core` signs into the permit's slot is written with the certificate in one job, and a
//! certificate signed for an issuance that then fails is recorded all the same.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use serde_json::json;

use super::{request, templates, Approval, Decision, IssueInput, Issued, Run};
use crate::audit::Audit;
use crate::cas::CertificateAuthority;
use crate::error::Error;
use crate::pki::{InternalPki, IssuedRecord};
use crate::plugins::*;
use crate::ports::Store;
use crate::testing::{context_with, owner, MemoryStore, NoPlugins};
use crate::Context;

const NOW: &str = "2026-11-24T12:00:00Z";
const WORKSPACE: &str = "ws_a";
const CA_ID: i64 = 7;

/// What the scripted connector does once `pki-core` signed.
#[derive(Clone)]
enum Then {
    /// Returns the certificate, as the `internal` connector does.
    Return,
    /// Fails the call (the certificate never reaches the domain).
    Fail,
    /// Returns this other certificate instead (one the inventory holds already).
    ReturnInstead(Vec<u8>),
}

struct Fixture {
    ctx: Context,
    store: MemoryStore,
    then: Arc<Mutex<Then>>,
    ca: CertificateAuthority,
}

fn grant(sign: Option<SignPermit>) -> PkiGrant {
    PkiGrant { workspace_id: WORKSPACE.into(), ca_id: CA_ID, withheld_config: json!({}), sign }
}

/// A context whose connector signs through a real `InternalPki` over the memory store.
async fn fixture() -> Fixture {
    let store = MemoryStore::default();
    let bare = context_with(store.clone(), NOW, NoPlugins::default());
    let pki = Arc::new(InternalPki::new(
        Arc::new(bare.store.clone()),
        bare.master_key.clone(),
        bare.clock.clone(),
        bare.entropy.clone(),
        "https://trellis.example",
    ));
    let spec = NewAuthoritySpec {
        subject: Subject { common_name: Some("Ledger Test Root".into()), ..Subject::default() },
        key_algorithm: KeyAlgorithm::EcdsaP256,
        validity_days: 365,
        path_length: None,
    };
    pki.create_authority(&grant(None), AuthoritySpec::Root(spec)).await.unwrap_or_else(|err| panic!("root: {err}"));
    let then = Arc::new(Mutex::new(Then::Return));
    let script: crate::testing::IssueScript = {
        let (pki, then) = (pki.clone(), then.clone());
        Arc::new(move |target: CallTarget, request: IssueRequest| {
            let (pki, then) = (pki.clone(), then.clone());
            async move {
                let grant = target.pki.clone().unwrap_or_else(|| panic!("an internal CA call carries a grant"));
                let permit = grant.sign.clone().unwrap_or_else(|| panic!("an issue call may sign"));
                permit.allows(&request.csr_der, &request.profile).unwrap_or_else(|why| panic!("permit: {why}"));
                let signed = pki
                    .sign_csr(&grant, &request.csr_der, &request.profile)
                    .await
                    .unwrap_or_else(|err| panic!("sign: {err}"));
                let then = then.lock().map(|t| t.clone()).unwrap_or(Then::Return);
                let certificate_der = match then {
                    Then::Return => signed.certificate_der,
                    Then::ReturnInstead(der) => der,
                    Then::Fail => {
                        return Err(PluginError::Trapped { plugin: "internal".into(), message: "after signing".into() })
                    }
                };
                Ok(IssueOutcome::Issued(IssuedCertificate {
                    certificate_der,
                    chain_der: signed.chain_der,
                    ca_reference: Some(signed.serial_number),
                }))
            }
            .boxed()
        })
    };
    let ctx = context_with(store.clone(), NOW, NoPlugins { issue: Some(script), ..NoPlugins::default() });
    let ca = crate::testing::active_ca(WORKSPACE, CA_ID, "internal");
    Fixture { ctx, store, then, ca }
}

fn connector() -> PluginInfo {
    PluginInfo {
        id: "internal".into(),
        version: semver::Version::new(0, 1, 0),
        kind: PluginKind::CaConnector,
        name: "internal".into(),
        description: String::new(),
        serves: vec!["internal".into()],
        config_schema: json!({}),
        secret_fields: Vec::new(),
        capabilities: Capabilities::default(),
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

async fn issue(fixture: &Fixture, name: &str) -> Result<Issued, Error> {
    issue_input(fixture, IssueInput { common_name: Some(name.into()), ..IssueInput::default() }).await
}

/// A CSR of a caller-held key, PEM.
pub(super) fn caller_csr() -> String {
    let pkcs8 = generate_pkcs8(KeyAlgorithm::EcdsaP256).unwrap_or_else(|err| panic!("key: {err}"));
    let key = rcgen::KeyPair::try_from(pkcs8.as_slice()).unwrap_or_else(|err| panic!("key: {err}"));
    // No names of its own (rcgen's default subject would be a name the request does not make).
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.serialize_request(&key).and_then(|csr| csr.pem()).unwrap_or_else(|err| panic!("csr: {err}"))
}

async fn issue_input(fixture: &Fixture, input: IssueInput) -> Result<Issued, Error> {
    let template = templates::built_in_named("web_server").unwrap_or_else(|| panic!("built-in web_server"));
    let prepared = request::prepare(&input, &template).unwrap_or_else(|err| panic!("prepare: {err}"));
    let caller = owner(WORKSPACE);
    let run = Run {
        ca: fixture.ca.clone(),
        connector: Arc::new(connector()),
        requester: super::requester(&caller),
        actor: Audit::of(&caller),
        source: IssuanceSource::Api,
        request: prepared,
        approval: Approval::Open { template: Box::new(template) },
    };
    run.decide(&fixture.ctx.issuance_deps()).await.map(|decision| match decision {
        Decision::Issued(issued) => *issued,
        other => panic!("the internal CA did not issue: {other:?}"),
    })
}

fn serials(ledger: &[IssuedRecord]) -> Vec<&str> {
    ledger.iter().map(|r| r.serial_number.as_str()).collect()
}

#[tokio::test]
async fn the_ledger_row_commits_with_the_certificate_in_one_job() {
    let fixture = fixture().await;
    let commits_before = fixture.store.snapshot().commits;

    let issued = issue(&fixture, "api.example.com").await.unwrap_or_else(|err| panic!("issue: {err}"));

    let tables = fixture.store.snapshot();
    assert_eq!(tables.commits - commits_before, 1, "the ledger row and the certificate share one write");
    // The ledger keeps serials in lowercase hex, the inventory in uppercase.
    assert_eq!(serials(&tables.issued), [issued.certificate.serial_number.to_ascii_lowercase().as_str()]);
    assert_eq!(tables.issued[0].ca_id, CA_ID);
    assert_eq!(tables.certificates.len(), 1);
    assert_eq!(tables.audit.len(), 1);
    assert_eq!(tables.events.len(), 1);
}

#[tokio::test]
async fn a_certificate_signed_for_a_call_that_then_fails_is_recorded() {
    let fixture = fixture().await;
    *fixture.then.lock().unwrap_or_else(|_| panic!("lock")) = Then::Fail;

    let err = issue(&fixture, "api.example.com").await.map(|_| ()).expect_err("the connector failed");
    assert!(err.area::<crate::plugins::PluginError>().is_some(), "{err:?}");

    let tables = fixture.store.snapshot();
    assert_eq!(tables.issued.len(), 1, "the CA signed: its ledger keeps the certificate");
    assert!(tables.certificates.is_empty() && tables.audit.is_empty() && tables.events.is_empty());
}

#[tokio::test]
async fn a_certificate_signed_for_a_job_that_fails_is_recorded() {
    let fixture = fixture().await;
    // Both issuances for one caller-held key: the certificate returned instead carries the
    // CSR's key, so the public-key check passes and the inventory's uniqueness refuses it.
    let csr = caller_csr();
    let input = IssueInput { common_name: Some("api.example.com".into()), csr: Some(csr), ..IssueInput::default() };
    let first = issue_input(&fixture, input.clone()).await.unwrap_or_else(|err| panic!("issue: {err}"));
    let first_der = trellis_pki::x509::pem_certificates(&first.certificate.certificate_pem)
        .and_then(|blocks| blocks.into_iter().next())
        .unwrap_or_else(|| panic!("the stored PEM decodes"));
    // The connector signs a second certificate but returns the first: the inventory refuses it.
    *fixture.then.lock().unwrap_or_else(|_| panic!("lock")) = Then::ReturnInstead(first_der);

    let err = issue_input(&fixture, input).await.map(|_| ()).expect_err("a duplicate");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");

    let tables = fixture.store.snapshot();
    assert_eq!(tables.certificates.len(), 1);
    assert_eq!(tables.issued.len(), 2, "both signed certificates are in the ledger");
    let first_serial = first.certificate.serial_number.to_ascii_lowercase();
    assert_eq!(tables.issued[0].serial_number, first_serial);
    assert_ne!(tables.issued[1].serial_number, first_serial);
}

#[tokio::test]
async fn without_a_slot_pki_core_records_before_it_returns() {
    let fixture = fixture().await;
    let store: Arc<dyn Store> = Arc::new(fixture.store.clone());
    let pki = InternalPki::new(
        Arc::new(store),
        fixture.ctx.master_key.clone(),
        fixture.ctx.clock.clone(),
        fixture.ctx.entropy.clone(),
        "https://trellis.example",
    );
    let template = templates::built_in_named("web_server").unwrap_or_else(|| panic!("built-in web_server"));
    let input = IssueInput { common_name: Some("direct.example.com".into()), ..IssueInput::default() };
    let prepared = request::prepare(&input, &template).unwrap_or_else(|err| panic!("prepare: {err}"));
    let permit = SignPermit { csr_der: prepared.csr_der.clone(), profile: prepared.profile.clone(), ledger: None };

    let signed = pki
        .sign_csr(&grant(Some(permit)), &prepared.csr_der, &prepared.profile)
        .await
        .unwrap_or_else(|err| panic!("sign: {err}"));

    assert_eq!(serials(&fixture.store.snapshot().issued), [signed.serial_number.as_str()]);
}
