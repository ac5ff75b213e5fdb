//! Revocation: at the CA that issued the certificate through this service (its connector; an
//! internal CA puts it on its CRL and OCSP), then in the internal CA's ledger and the inventory
//! in one transaction. A certificate whose template requires approval waits for it instead.

use super::revocation_requests;
use super::LifecycleDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::cas::service::{call_target, connector_for};
use crate::certificates::revocation_requests::RevocationRequest;
use crate::certificates::{already_revoked, record_revocation, revocation_reason};
use crate::certificates::{connector_ref, Certificate};
use crate::error::{Entity, Error, Result};
use crate::pki::IssuedRecord;
use crate::plugins::{RevocationReason, RevokeRequest};
use trellis_pki::x509;

/// What a revoke request did.
#[derive(Debug, Clone)]
pub enum Revocation {
    Revoked(Box<Certificate>),
    /// The certificate's template requires approval: the revocation waits at
    /// `/api/certificates/revocation-requests`.
    AwaitingApproval(Box<RevocationRequest>),
}

impl Revocation {
    /// The revoked certificate, if the revocation happened now.
    pub fn revoked(self) -> Option<Certificate> {
        match self {
            Revocation::Revoked(certificate) => Some(*certificate),
            Revocation::AwaitingApproval(_) => None,
        }
    }
}

/// `POST /api/certificates/{id}/revoke`.
pub async fn revoke(ctx: &LifecycleDeps, caller: &Caller, id: i64, reason: Option<String>) -> Result<Revocation> {
    caller.require(Scope::CertificatesWrite)?;
    let reason = revocation_reason(reason)?;
    let existing =
        ctx.store.find_certificate(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::Certificate))?;
    if existing.revoked {
        return Err(already_revoked(&existing));
    }
    if revocation_requests::requires_approval(ctx, &existing).await {
        let request = revocation_requests::open(ctx, caller, &existing, &reason).await?;
        return Ok(Revocation::AwaitingApproval(Box::new(request)));
    }
    let certificate = revoke_now(ctx, &Audit::of(caller), &existing, &reason).await?;
    Ok(Revocation::Revoked(Box::new(certificate)))
}

/// Revokes at the CA (when issued through one), then in the ledger and the inventory, with the
/// audit row and `certificate.revoked`.
pub(crate) async fn revoke_now(
    ctx: &LifecycleDeps,
    actor: &Audit,
    existing: &Certificate,
    reason: &str,
) -> Result<Certificate> {
    // The CA revokes first (a plugin call, outside the transaction); a CA that cannot be
    // reached fails the request and the record stays as it was, so a retry revokes both.
    let at_ca = revoke_at_ca(ctx, existing, reason).await?;
    let ledger = ledger_rows(ctx, existing).await?;
    let mut change = ctx.change(actor.clone(), Some(&existing.workspace_id)).await?;
    // What an internal CA's CRL and OCSP answer from is its ledger, not the CA record: the
    // revocation reaches the ledger in this transaction whether or not the CA record (and the
    // certificate's link to it) still exists, or its connector was reachable.
    let ledger_reason = RevocationReason::parse(reason).unwrap_or(RevocationReason::Unspecified).as_str();
    let at = crate::clock::UnixMillis::from_millis(change.at());
    for row in &ledger {
        change.tx().revoke_issued(row.ca_id, &row.serial_number, at, ledger_reason).await?;
    }
    let certificate = record_revocation(&mut change, &existing.workspace_id, existing.id, reason, at_ca).await?;
    change.commit().await?;
    Ok(certificate)
}

/// Revokes `certificate` at the CA that issued it through this service (internal CAs put it on
/// their CRL and OCSP; other connectors call their CA). Returns what happened for the audit row:
/// `revoked`, `not_issued_here` (no CA link, or the CA is gone), `unsupported` (the connector
/// cannot revoke). A CA that cannot be reached fails the call, so the inventory never claims a
/// revocation the CA did not make.
pub async fn revoke_at_ca(ctx: &LifecycleDeps, certificate: &Certificate, reason: &str) -> Result<&'static str> {
    let Some(ca_id) = certificate.ca_id else { return Ok("not_issued_here") };
    let Some(ca) = ctx.store.find_ca(&certificate.workspace_id, ca_id).await? else { return Ok("not_issued_here") };
    let info = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
    if !info.capabilities.revoke {
        return Ok("unsupported");
    }
    let request = RevokeRequest {
        certificate: connector_ref(certificate),
        reason: RevocationReason::parse(reason).unwrap_or(RevocationReason::Unspecified),
    };
    ctx.plugins.host().ca_revoke(&call_target(&ctx.master_key, &ca, &info)?, &request).await?;
    Ok("revoked")
}

/// The ledger rows of the internal CAs of the certificate's workspace that signed exactly this
/// certificate: found by serial, confirmed by the certificate's bytes (another CA may have used
/// the serial).
async fn ledger_rows(ctx: &LifecycleDeps, certificate: &Certificate) -> Result<Vec<IssuedRecord>> {
    let first_der = |pem: &str| x509::pem_certificates(pem).and_then(|b| b.into_iter().next());
    let Some(der) = first_der(&certificate.certificate_pem) else { return Ok(Vec::new()) };
    let serial: String =
        certificate.serial_number.chars().filter(|c| *c != ':').collect::<String>().to_ascii_lowercase();
    let rows = ctx.store.find_issued_by_serial(&certificate.workspace_id, &serial).await?;
    Ok(rows.into_iter().filter(|row| first_der(&row.certificate_pem).as_deref() == Some(der.as_slice())).collect())
}
