//! Issuance: every certificate the service obtains, from any caller (API, approval, renewal,
//! attestation, the pending poller), goes through one [`Run`]: the template resolves the
//! profile, the workspace's issuance policies (plugins) decide, the CA's connector plugin issues,
//! and the certificate enters the inventory with its audit row and `certificate.created` event.
//! The run's [`Decision`] says what happened (issued, pending at the CA, held for approval,
//! refused); each path records it its own way. A CA that answers "pending" leaves a certificate
//! request `issuing`, which [`pending`] completes in the background with the same run.

mod deps;
pub mod pending;
pub mod policies;
pub mod port;
pub mod renewal;
pub mod request;
pub mod requests;
pub mod run;
pub mod templates;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod ledger_tests;
#[cfg(test)]
mod pending_tests;
#[cfg(test)]
mod renewal_run_tests;
#[cfg(test)]
mod renewal_tests;
#[cfg(test)]
mod run_tests;

use serde_json::json;

use crate::caller::{Actor, Caller, Scope};
use crate::cas::service::call_target;
use crate::cas::CertificateAuthority;
use crate::certificates::inventory::{self, CaRef, Provenance};
use crate::certificates::Certificate;
use crate::error::{Error, Result};
use crate::pki::IssuedRecord;
use crate::plugins::{
    CertificateProfile, IssuanceSource, IssuedCertificate, PluginInfo, Requester, RequesterKind, SubjectAltName,
};
use crate::principal::{Principal, PrincipalKind};
use crate::store_error::StoreError;
use crate::unit_of_work::NewRow;
use crate::unit_of_work::UnitOfWork;
use trellis_pki::x509::{parse_der_inspecting, pem_encode, to_pem};
use x509_parser::prelude::{FromDer, X509Certificate};

pub use self::deps::IssuanceDeps;
pub use self::request::{IssueInput, PreparedRequest, SubjectInput};
pub use self::run::{Approval, Decision, Run};

/// A certificate just issued; its chain is `certificate.chain()` (PEM, issuing CA first).
#[derive(Debug, Clone)]
pub struct Issued {
    pub certificate: Certificate,
}

/// What an issue call ended with, once its decision is recorded.
#[derive(Debug, Clone)]
pub enum Outcome {
    Issued(Box<Issued>),
    /// A policy requires approval: the request waits at `/api/certificate-requests`.
    AwaitingApproval(Box<requests::CertificateRequest>),
    /// The CA accepted the order but has not issued yet: the request, `issuing`, completes in
    /// the background.
    Issuing(Box<requests::CertificateRequest>),
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

/// The requester a stored request names (its principal, `kind:id`), as policies see it.
pub fn requester_from_principal(stored: &str) -> Requester {
    let principal = Principal::parse(stored).unwrap_or_else(|| Principal::system(stored));
    let kind = match principal.kind {
        PrincipalKind::User => RequesterKind::User,
        PrincipalKind::ApiKey => RequesterKind::ApiKey,
        PrincipalKind::Agent => RequesterKind::Agent,
        PrincipalKind::AcmeAccount | PrincipalKind::System => RequesterKind::System,
    };
    Requester { kind, id: principal.id, display_name: None }
}

/// Issues a certificate through the CA `input.ca_id` (POST /api/certificates/issue). A policy
/// that requires approval leaves a `pending` request; a CA that answers "pending" an `issuing`
/// one; a policy that denies refuses (403 `POLICY_DENIED`).
pub async fn issue(ctx: &IssuanceDeps, caller: &Caller, input: IssueInput) -> Result<Outcome> {
    caller.require(Scope::CertificatesWrite)?;
    let run = Run::for_caller(ctx, caller, &input, IssuanceSource::Api).await?;
    match run.decide(ctx).await? {
        Decision::Issued(issued) => Ok(Outcome::Issued(issued)),
        Decision::Pending(order) => {
            let request = pending::open(ctx, &run, &input, *order, None).await?;
            Ok(Outcome::Issuing(Box::new(request)))
        }
        Decision::NeedsApproval { reasons, template } => {
            let request = requests::open(ctx, &run, &input, &template, reasons).await?;
            Ok(Outcome::AwaitingApproval(Box::new(request)))
        }
        Decision::Refused(reasons) => Err(Error::PolicyDenied(reasons)),
    }
}

/// Issues for a device whose attestation just passed (attest-and-provision): the attestation
/// is the authorization, so `attestation:write` suffices; issuance policies still run, and one
/// that requires approval refuses (a device cannot wait for a human), and so does a CA that
/// answers "pending" (nor for a CA: the order is left unpolled).
pub async fn issue_attested(ctx: &IssuanceDeps, caller: &Caller, input: IssueInput) -> Result<Issued> {
    caller.require(Scope::AttestationWrite)?;
    let run = Run::for_caller(ctx, caller, &input, IssuanceSource::Attestation).await?;
    match run.decide(ctx).await? {
        Decision::Issued(issued) => Ok(*issued),
        Decision::Pending(order) => Err(Error::Pending(format!(
            "the CA accepted the order ({}) but has not issued yet ({}); attest-and-provision needs a CA \
             that issues at once, since a device cannot wait",
            order.reference, order.status_message
        ))),
        Decision::NeedsApproval { reasons, .. } => Err(Error::ApprovalRequired(reasons)),
        Decision::Refused(reasons) => Err(Error::PolicyDenied(reasons)),
    }
}

/// The connector's answer into the inventory, with its audit row, its `certificate.created`
/// event and, for an internal CA, the ledger row of the certificate, in one group-commit job
/// (for a run the poller resumed, its request moves to `issued` in that same job). Refused, with
/// nothing stored, when the certificate's public key is not the CSR's.
///
/// `prepared` is the request as issued: `run.request` with the validity the policies settled
/// (the caller's own copy, so the run is not cloned for it).
pub(crate) async fn store_issued(
    ctx: &IssuanceDeps,
    run: &Run,
    mut prepared: PreparedRequest,
    issued: IssuedCertificate,
    ledger_row: Option<IssuedRecord>,
) -> Result<Issued> {
    let (ca, info, actor) = (&run.ca, &run.connector, &run.actor);
    let completes = match &run.approval {
        Approval::Resumed(completion) => Some(completion.as_ref().clone()),
        Approval::Open { .. } | Approval::Granted => None,
    };
    // One parse for the record and both checks (the ledger parses it its own way).
    let (parsed, key_checked) = parse_der_inspecting(&issued.certificate_der, |certificate| {
        check_public_key(certificate, &prepared.csr_der, &info.id)
            .map(|()| check_names_signed(certificate, &prepared.profile, &info.id))
    })
    .map_err(|_| Error::Internal(format!("the {} connector returned an unreadable certificate", info.id)))?;
    let names_signed = key_checked?;
    if let Err(err) = names_signed {
        revoke_mis_issued(ctx, ca, info, &issued, &parsed).await;
        return Err(err);
    }
    let private_key_sealed =
        prepared.private_key_pem.as_ref().map(|pem| ctx.master_key.seal(pem.as_bytes(), ctx.entropy.as_ref()));
    let now = ctx.now_millis();
    let workspace_id = ca.workspace_id.clone();
    let (ca_id, ca_type) = (ca.id, ca.ca_type.clone());
    let chain_text: String = issued.chain_der.iter().map(|der| to_pem(der)).collect();
    let metadata = prepared.metadata.take().unwrap_or_else(|| json!({}));
    let auto_renewal = prepared.auto_renewal;
    let actor = actor.clone();
    let template = prepared.template.clone();
    let renew_before_ms = i64::from(prepared.renewal_window_days) * 86_400_000;
    // Renewal reuses a caller-held key through its CSR; a key generated here is replaced.
    let csr_pem = prepared.private_key_pem.is_none().then(|| pem_encode("CERTIFICATE REQUEST", &prepared.csr_der));
    let certificate = crate::unit_of_work::write(ctx.store.as_ref(), move |tx| {
        Box::pin(async move {
            let mut change = UnitOfWork::within(tx, actor, Some(&workspace_id), now);
            let entry = inventory::Entry {
                auto_renewal,
                chain_pem: (!chain_text.is_empty()).then_some(chain_text.as_str()),
                private_key_sealed: private_key_sealed.as_deref(),
                csr_pem: csr_pem.as_deref(),
                renew_before_ms: Some(renew_before_ms),
                ..inventory::Entry::new(&workspace_id, &parsed, &metadata)
            };
            let provenance = Provenance::Issued { ca: CaRef { id: ca_id, ca_type: &ca_type }, template: &template };
            let certificate = inventory::add(&mut change, entry, provenance).await?;
            let recorded = async {
                if let Some(completion) = completes {
                    let completed = completion.apply(change.tx(), &certificate, now).await?;
                    completed.record(&mut change, &certificate);
                }
                // The ledger row goes with the audit row and the event, and the certificate's
                // own insert with them (one round trip).
                change.commit_with(ledger_row.iter().map(NewRow::Issued).collect()).await
            };
            // The insert may have travelled with a later statement: its duplicate shows there.
            recorded.await.map_err(|err| match err {
                Error::Store(StoreError::Unique(_)) => provenance.duplicate(&parsed),
                other => other,
            })?;
            Ok(certificate)
        })
    })
    .await?;
    Ok(Issued { certificate })
}

/// The WIT's promise: an issued certificate carries the CSR's public key (their
/// SubjectPublicKeyInfo, byte for byte).
fn check_public_key(certificate: &X509Certificate<'_>, csr_der: &[u8], connector: &str) -> Result<()> {
    use x509_parser::prelude::X509CertificationRequest;
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
fn check_names_signed(certificate: &X509Certificate<'_>, profile: &CertificateProfile, connector: &str) -> Result<()> {
    let judged = |name: &SubjectAltName| profile.subject_alt_names.contains(name);
    let mut unjudged = Vec::new();
    match certificate.subject_alternative_name() {
        Ok(Some(san)) => {
            for name in &san.value.general_names {
                match trellis_pki::csr::alt_name(name) {
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
    ctx: &IssuanceDeps,
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
    let outcome = match call_target(&ctx.master_key, ca, info) {
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

/// PEM of a DER private key (PKCS#8).
pub(crate) fn private_key_pem(pkcs8: &[u8]) -> String {
    pem_encode("PRIVATE KEY", pkcs8)
}
