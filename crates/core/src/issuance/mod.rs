//! Issuance: every certificate the service obtains, from any caller (API, renewal, attestation),
//! goes through [`issue`]: the template resolves the profile, the workspace's issuance policies
//! (plugins) decide, the CA's connector plugin issues, and the certificate enters the inventory
//! with its audit row and `certificate.created` event. A CA that answers "pending" leaves a
//! certificate request `issuing`, which [`pending`] completes in the background.

pub mod pending;
pub mod policies;
pub mod renewal;
pub mod request;
pub mod requests;
pub mod templates;

#[cfg(test)]
mod ledger_tests;
#[cfg(test)]
mod pending_tests;
#[cfg(test)]
mod renewal_tests;

use serde_json::{json, Value};

use crate::audit::Audit;
use crate::auth::{Actor, Caller, Scope};
use crate::cas::service::{call_target, connector_for, INTERNAL};
use crate::cas::{self, CertificateAuthority, IssuedRecord};
use crate::certificates::x509::{parse_der, pem_encode, to_pem};
use crate::certificates::{Certificate, IssuanceSource as InventorySource, NewCertificate};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::events::Event;
use crate::pki::LedgerSlot;
use crate::plugins::{
    combine, CertificateProfile, Combined, Decision, IssuanceSource, IssueOutcome, IssueRequest, IssuedCertificate,
    PluginInfo, PolicyReason, Requester, RequesterKind, SignPermit, SubjectAltName,
};
use crate::ports::{NewRow, StoreError};
use crate::unit_of_work::{Target, UnitOfWork};

pub use self::request::{IssueInput, PreparedRequest, SubjectInput};

/// A certificate just issued; its chain is `certificate.chain()` (PEM, issuing CA first).
#[derive(Debug, Clone)]
pub struct Issued {
    pub certificate: Certificate,
}

/// What an issue call ended with.
#[derive(Debug, Clone)]
pub enum Outcome {
    Issued(Box<Issued>),
    /// A policy requires approval: the request waits at `/api/certificate-requests`.
    AwaitingApproval(Box<requests::CertificateRequest>),
    /// The CA accepted the order but has not issued yet: the request, `issuing`, completes in
    /// the background.
    Issuing(Box<requests::CertificateRequest>),
}

/// What the connector's `issue` ended with, once recorded.
#[derive(Debug)]
pub enum Progress {
    Issued(Box<Issued>),
    /// Not yet: the order to park (see [`pending`]).
    Pending(Box<pending::Order>),
}

/// Who asks, as policies see it.
pub fn requester(caller: &Caller) -> Requester {
    match &caller.actor {
        Actor::User { id, email } => {
            Requester { kind: RequesterKind::User, id: id.to_string(), display_name: Some(email.clone()) }
        }
        Actor::ApiKey { id, .. } => Requester { kind: RequesterKind::ApiKey, id: id.to_string(), display_name: None },
        Actor::System => Requester { kind: RequesterKind::System, id: "system".into(), display_name: None },
    }
}

/// The requester a stored request names (`<actor type>:<actor id>`), as policies see it.
pub fn requester_from_principal(principal: &str) -> Requester {
    let (kind, id) = principal.split_once(':').unwrap_or(("system", principal));
    let kind = match kind {
        "user" => RequesterKind::User,
        "api_key" => RequesterKind::ApiKey,
        "agent" => RequesterKind::Agent,
        _ => RequesterKind::System,
    };
    Requester { kind, id: id.to_owned(), display_name: None }
}

fn inventory_source(ca: &CertificateAuthority) -> InventorySource {
    if ca.ca_type == INTERNAL {
        InventorySource::Internal
    } else if ca.ca_type.contains("vault") {
        InventorySource::Vault
    } else {
        InventorySource::External
    }
}

/// Issues a certificate through the CA `input.ca_id` (POST /api/certificates/issue).
pub async fn issue(ctx: &Context, caller: &Caller, input: IssueInput) -> Result<Outcome> {
    caller.require(Scope::CertificatesWrite)?;
    match resolve_and_issue(ctx, caller, &input, IssuanceSource::Api).await {
        Ok(Progress::Issued(issued)) => Ok(Outcome::Issued(issued)),
        Ok(Progress::Pending(order)) => {
            let body = serde_json::to_value(&input).map_err(|err| Error::Internal(err.to_string()))?;
            let request = pending::open(
                ctx,
                &Audit::of(caller),
                &caller.workspace_id,
                input.ca_id.unwrap_or_default(),
                body,
                input.common_name.clone(),
                *order,
                None,
            )
            .await?;
            Ok(Outcome::Issuing(Box::new(request)))
        }
        Err(Error::ApprovalRequired(reasons)) => {
            let template = templates::resolve(ctx, &caller.workspace_id, input.template_id.as_deref()).await?;
            Ok(Outcome::AwaitingApproval(Box::new(requests::open(ctx, caller, &input, &template, reasons).await?)))
        }
        Err(err) => Err(err),
    }
}

/// Issues for a device whose attestation just passed (attest-and-provision): the attestation
/// is the authorization, so `attestation:write` suffices; issuance policies still run, and one
/// that requires approval refuses (a device cannot wait for a human), and so does a CA that
/// answers "pending" (nor for a CA: the order is left unpolled).
pub async fn issue_attested(ctx: &Context, caller: &Caller, input: IssueInput) -> Result<Issued> {
    caller.require(Scope::AttestationWrite)?;
    match resolve_and_issue(ctx, caller, &input, IssuanceSource::Attestation).await? {
        Progress::Issued(issued) => Ok(*issued),
        Progress::Pending(order) => Err(Error::Pending(format!(
            "the CA accepted the order ({}) but has not issued yet ({}); attest-and-provision needs a CA \
             that issues at once, since a device cannot wait",
            order.reference, order.status_message
        ))),
    }
}

async fn resolve_and_issue(
    ctx: &Context,
    caller: &Caller,
    input: &IssueInput,
    source: IssuanceSource,
) -> Result<Progress> {
    let workspace_id = caller.workspace_id.to_string();
    let ca_id = input.ca_id.ok_or_else(|| Error::invalid_field("caId", "is required"))?;
    let ca = cas::service::find(ctx, &workspace_id, ca_id).await?;
    if let Some(ca_type) = input.ca_type.as_deref().filter(|t| *t != ca.ca_type) {
        return Err(Error::invalid_field("caType", format!("CA {ca_id} is of type `{}`, not `{ca_type}`", ca.ca_type)));
    }
    let info = connector_for(ctx, &workspace_id, &ca.ca_type)?;
    if !info.capabilities.issue {
        return Err(cas::service::cannot_issue(&ca, &info));
    }
    let template = templates::resolve(ctx, &workspace_id, input.template_id.as_deref()).await?;
    let prepared = request::prepare(input, &template)?;
    issue_prepared(ctx, &Audit::of(caller), &requester(caller), &ca, &info, prepared, source, false).await
}

/// Runs the policies and the connector for a prepared request, then records the certificate.
/// An `approved` request is past approval: require-approval decisions no longer hold it.
#[allow(clippy::too_many_arguments)]
pub async fn issue_prepared(
    ctx: &Context,
    actor: &Audit,
    requester: &Requester,
    ca: &CertificateAuthority,
    info: &PluginInfo,
    prepared: PreparedRequest,
    source: IssuanceSource,
    approved: bool,
) -> Result<Progress> {
    let result = issue_through(ctx, actor, requester, ca, info, prepared, source, approved).await;
    let outcome = match &result {
        Ok(Progress::Issued(_)) => "issued",
        Ok(Progress::Pending(_)) => "pending",
        Err(err) => err.code(),
    };
    count_issuance(ca, source_label(source), outcome);
    result
}

fn source_label(source: IssuanceSource) -> &'static str {
    match source {
        IssuanceSource::Api => "api",
        IssuanceSource::RequestWorkflow => "request",
        IssuanceSource::Attestation => "attestation",
        IssuanceSource::Renewal => "renewal",
    }
}

fn count_issuance(ca: &CertificateAuthority, source: &'static str, outcome: &'static str) {
    metrics::counter!("trellis_issuances_total", "ca_type" => ca.ca_type.clone(), "source" => source, "outcome" => outcome)
        .increment(1);
}

#[allow(clippy::too_many_arguments)]
async fn issue_through(
    ctx: &Context,
    actor: &Audit,
    requester: &Requester,
    ca: &CertificateAuthority,
    info: &PluginInfo,
    mut prepared: PreparedRequest,
    source: IssuanceSource,
    approved: bool,
) -> Result<Progress> {
    let evaluation = prepared.evaluation(ca, requester, source);
    let mut decisions = policies::evaluate(ctx, &ca.workspace_id, &evaluation).await?;
    if approved {
        for decision in &mut decisions {
            if matches!(decision, Decision::RequireApproval(_)) {
                *decision = Decision::Allow { max_validity_days: None };
            }
        }
    }
    match combine(prepared.profile.validity_days, decisions) {
        Combined::Denied(reasons) => return Err(Error::PolicyDenied(reasons_json(&reasons))),
        Combined::NeedsApproval(reasons) => return Err(Error::ApprovalRequired(reasons_json(&reasons))),
        Combined::Proceed { validity_days } => prepared.profile.validity_days = validity_days,
    }
    let request = IssueRequest {
        idempotency_key: ctx.new_id("iss_"),
        csr_der: prepared.csr_der.clone(),
        template: Some(prepared.template.clone()),
        profile: prepared.profile.clone(),
        replaces: None,
        metadata: json!({}),
    };
    let mut target = call_target(ctx, ca, info)?;
    // An internal CA's ledger row comes back in this slot and is written with the certificate,
    // in one group-commit job instead of two (see `pki::ledger` for why nothing signed goes
    // unrecorded).
    let ledger = target.pki.is_some().then(LedgerSlot::default);
    if let Some(grant) = target.pki.as_mut() {
        grant.sign = Some(SignPermit {
            csr_der: request.csr_der.clone(),
            profile: request.profile.clone(),
            ledger: ledger.clone(),
        });
    }
    let outcome = ctx.plugins.host().ca_issue(&target, &request).await;
    let unrecorded = ledger.as_ref().and_then(LedgerSlot::take);
    let ledger_row = unrecorded.as_ref().map(|row| row.record().clone());
    let stored = match outcome {
        Ok(IssueOutcome::Pending(answer)) => {
            Ok(Progress::Pending(Box::new(pending::Order::new(answer, request, prepared, source_label(source)))))
        }
        Ok(IssueOutcome::Issued(issued)) => store_issued(ctx, actor, ca, info, prepared, issued, ledger_row, None)
            .await
            .map(|i| Progress::Issued(Box::new(i))),
        Err(err) => Err(err.into()),
    };
    match (unrecorded, &stored) {
        // The certificate's job committed, the ledger row with it.
        (Some(row), Ok(Progress::Issued(_))) => row.committed(),
        // Nothing leaves with the error (or the pending answer), but the CA signed: its ledger
        // keeps the certificate.
        (Some(row), _) => {
            if let Err(err) = row.record_now().await {
                tracing::error!(error = %err, "recording an issued certificate in the CA's ledger failed");
            }
        }
        (None, _) => {}
    }
    stored
}

/// The connector's answer into the inventory, with its audit row, its `certificate.created`
/// event and, for an internal CA, the ledger row of the certificate, in one group-commit job
/// (with `completes`, the poller's request moves to `issued` in that same job). Refused, with
/// nothing stored, when the certificate's public key is not the CSR's.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn store_issued(
    ctx: &Context,
    actor: &Audit,
    ca: &CertificateAuthority,
    info: &PluginInfo,
    mut prepared: PreparedRequest,
    issued: IssuedCertificate,
    ledger_row: Option<IssuedRecord>,
    completes: Option<pending::Completion>,
) -> Result<Issued> {
    let parsed = parse_der(&issued.certificate_der)
        .map_err(|_| Error::Internal(format!("the {} connector returned an unreadable certificate", info.id)))?;
    check_public_key(&issued.certificate_der, &prepared.csr_der, &info.id)?;
    if let Err(err) = check_names_signed(&issued.certificate_der, &prepared.profile, &info.id) {
        revoke_mis_issued(ctx, ca, info, &issued, &parsed).await;
        return Err(err);
    }
    let private_key_sealed =
        prepared.private_key_pem.as_ref().map(|pem| ctx.master_key.seal(pem.as_bytes(), ctx.entropy.as_ref()));
    let now = ctx.now_millis();
    let workspace_id = ca.workspace_id.clone();
    let (ca_id, ca_type) = (ca.id, ca.ca_type.clone());
    let source_label = inventory_source(ca);
    let chain_text: String = issued.chain_der.iter().map(|der| to_pem(der)).collect();
    let metadata = prepared.metadata.take().unwrap_or_else(|| json!({}));
    let auto_renewal = prepared.auto_renewal;
    let actor = actor.clone();
    let template = prepared.template.clone();
    let renew_before_ms = i64::from(prepared.renewal_window_days) * 86_400_000;
    // Renewal reuses a caller-held key through its CSR; a key generated here is replaced.
    let csr_pem = prepared.private_key_pem.is_none().then(|| pem_encode("CERTIFICATE REQUEST", &prepared.csr_der));
    let certificate = ctx
        .store
        .write(move |tx| {
            Box::pin(async move {
                let new = NewCertificate {
                    workspace_id: &workspace_id,
                    parsed: &parsed,
                    issuance_source: source_label,
                    auto_renewal,
                    location: None,
                    metadata: &metadata,
                    created_at: now,
                    expiry_announced: false,
                    ca_id: Some(ca_id),
                    chain_pem: (!chain_text.is_empty()).then_some(chain_text.as_str()),
                    private_key_sealed: private_key_sealed.as_deref(),
                    issuance_template: Some(template.as_str()),
                    csr_pem: csr_pem.as_deref(),
                    renew_before_ms: Some(renew_before_ms),
                };
                let certificate = tx.insert_certificate(&new).await.map_err(|err| match err {
                    StoreError::Unique(_) => Error::Conflict("the CA returned a certificate already in the inventory".into()),
                    other => other.into(),
                })?;
                let completed = match completes {
                    Some(completion) => Some(completion.apply(tx, &certificate, now).await?),
                    None => None,
                };
                let mut change = UnitOfWork::within(tx, actor, Some(&workspace_id), now);
                if let Some(completed) = &completed {
                    completed.record(&mut change, &certificate);
                }
                change
                    .audit(
                        "certificate.issued",
                        Target::new("certificate", certificate.id),
                        json!({ "caId": ca_id, "caType": ca_type, "template": template, "serialNumber": certificate.serial_number, "commonName": certificate.common_name }),
                    )
                    .emit(Event::CertificateCreated(crate::certificates::event_data(&certificate, now)));
                // The ledger row goes with the audit row and the event (one round trip).
                change.commit_with(ledger_row.iter().map(NewRow::Issued).collect()).await?;
                Ok(certificate)
            })
        })
        .await?;
    Ok(Issued { certificate })
}

/// The WIT's promise: an issued certificate carries the CSR's public key (their
/// SubjectPublicKeyInfo, byte for byte).
fn check_public_key(certificate_der: &[u8], csr_der: &[u8], connector: &str) -> Result<()> {
    use x509_parser::prelude::{FromDer, X509Certificate, X509CertificationRequest};
    let certificate = X509Certificate::from_der(certificate_der)
        .map_err(|_| Error::Internal(format!("the {connector} connector returned an unreadable certificate")))?
        .1;
    let csr = X509CertificationRequest::from_der(csr_der)
        .map_err(|_| Error::Internal("the issuance's CSR no longer parses".into()))?
        .1;
    if certificate.tbs_certificate.subject_pki.raw != csr.certification_request_info.subject_pki.raw {
        return Err(Error::CertificateKeyMismatch(format!(
            "the {connector} connector returned a certificate whose public key is not the CSR's (subject `{}`); \
             nothing was stored",
            certificate.subject()
        )));
    }
    Ok(())
}

/// The other half of "names judged = names signed" (the first is the request's CSR naming only
/// the request's names): every name the certificate carries, in its subjectAltName and its
/// subject's common names, is one the policies, the template and any approver judged.
fn check_names_signed(certificate_der: &[u8], profile: &CertificateProfile, connector: &str) -> Result<()> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let unreadable = || Error::Internal(format!("the {connector} connector returned an unreadable certificate"));
    let certificate = X509Certificate::from_der(certificate_der).map_err(|_| unreadable())?.1;
    let judged = |name: &SubjectAltName| profile.subject_alt_names.contains(name);
    let mut unjudged = Vec::new();
    match certificate.subject_alternative_name() {
        Ok(Some(san)) => {
            for name in &san.value.general_names {
                match crate::certificates::csr::alt_name(name) {
                    Ok(name) if judged(&name) => {}
                    Ok(name) => unjudged.push(name.to_string()),
                    Err(_) => unjudged.push(format!("{name:?}")),
                }
            }
        }
        Ok(None) => {}
        Err(_) => unjudged.push("an unreadable subjectAltName extension".into()),
    }
    for common_name in certificate.subject().iter_common_name() {
        let Ok(common_name) = common_name.as_str() else {
            unjudged.push("an unreadable common name".into());
            continue;
        };
        let named = profile.subject.common_name.as_deref().is_some_and(|cn| cn.eq_ignore_ascii_case(common_name))
            || request::classify(common_name).is_ok_and(|name| judged(&name));
        if !named {
            unjudged.push(format!("CN={common_name}"));
        }
    }
    if unjudged.is_empty() {
        return Ok(());
    }
    Err(Error::CertificateNameMismatch(format!(
        "the {connector} connector returned a certificate for names that were not requested ({}); nothing was \
         stored and the certificate was revoked at the CA where it can be. Check the CA's profile or template: \
         it must issue exactly the CSR's names",
        unjudged.join(", ")
    )))
}

/// A certificate refused after the CA signed it is revoked there (best effort: the refusal
/// stands whatever the CA answers, and the outcome is logged).
async fn revoke_mis_issued(
    ctx: &Context,
    ca: &CertificateAuthority,
    info: &PluginInfo,
    issued: &IssuedCertificate,
    parsed: &crate::certificates::ParsedCertificate,
) {
    if !info.capabilities.revoke {
        tracing::warn!(ca_id = ca.id, serial = %parsed.serial_number, "a certificate for names not requested was refused; its CA cannot revoke through Trellis: revoke it there");
        return;
    }
    let request = crate::plugins::RevokeRequest {
        certificate: crate::plugins::CertificateRef {
            certificate_der: Some(issued.certificate_der.clone()),
            serial_number: parsed.serial_number.to_ascii_lowercase(),
            authority_key_id: None,
            not_before: parsed.not_before / 1000,
            not_after: parsed.expires_at / 1000,
            ca_reference: issued.ca_reference.clone(),
        },
        reason: crate::plugins::RevocationReason::Unspecified,
    };
    let outcome = match call_target(ctx, ca, info) {
        Ok(target) => ctx.plugins.host().ca_revoke(&target, &request).await.map_err(|err| err.to_string()),
        Err(err) => Err(err.to_string()),
    };
    match outcome {
        Ok(_) => {
            tracing::warn!(ca_id = ca.id, serial = %parsed.serial_number, code = "CA_NAME_MISMATCH", "a certificate for names not requested was refused and revoked at the CA")
        }
        Err(error) => {
            tracing::error!(ca_id = ca.id, serial = %parsed.serial_number, code = "CA_NAME_MISMATCH", %error, "a certificate for names not requested was refused; revoking it at the CA failed: revoke it there")
        }
    }
}

fn reasons_json(reasons: &[PolicyReason]) -> Value {
    Value::Array(reasons.iter().map(|r| json!({ "code": r.code, "message": r.message })).collect())
}

/// PEM of a DER private key (PKCS#8).
pub(crate) fn private_key_pem(pkcs8: &[u8]) -> String {
    pem_encode("PRIVATE KEY", pkcs8)
}
