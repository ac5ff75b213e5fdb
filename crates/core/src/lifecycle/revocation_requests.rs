//! Revocations that wait for approval: a certificate whose template says
//! `revocationRequiresApproval` is revoked only when someone other than the requester approves
//! (`/api/certificates/revocation-requests`). Approval revokes through the same path as a
//! direct revoke (at the CA, then in the ledger and the inventory).

use serde_json::json;

use super::revocation::revoke_now;
use super::LifecycleDeps;
use crate::approvals::{check_decidable, Decision};
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::certificates::revocation_requests::{
    RevocationRequest, RevocationStatus, APPROVED, FAILED, PENDING, REJECTED,
};
use crate::certificates::Certificate;
use crate::error::{Entity, Error, Result};
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreError;
use crate::unit_of_work::Target;

/// Whether revoking `certificate` needs approval (its template says so). Fails closed: when
/// the template cannot be read (deleted, no longer valid, the store failing), approval is
/// required, since nobody can tell that it was not.
pub(crate) async fn requires_approval(ctx: &LifecycleDeps, certificate: &Certificate) -> bool {
    let Some(name) = certificate.issuance_template.as_deref() else { return false };
    match crate::issuance::templates::resolve(&ctx.issuance, &certificate.workspace_id, Some(name)).await {
        Ok(template) => template.revocation_requires_approval,
        Err(err) => {
            tracing::warn!(certificate = certificate.id, template = name, error = %err, "the certificate's template cannot be read; its revocation waits for approval");
            true
        }
    }
}

pub(crate) async fn open(
    ctx: &LifecycleDeps,
    caller: &Caller,
    certificate: &Certificate,
    reason: &str,
) -> Result<RevocationRequest> {
    let actor = Audit::of(caller);
    let mut change = ctx.change(actor.clone(), Some(&certificate.workspace_id)).await?;
    let at = change.at();
    let row = RevocationRequest {
        id: 0,
        workspace_id: certificate.workspace_id.clone(),
        certificate_id: certificate.id,
        reason: reason.to_owned(),
        status: PENDING,
        requested_by: actor.principal.to_string(),
        decided_by: None,
        decided_at: None,
        decision_reason: None,
        error: None,
        created_at: at,
        updated_at: at,
    };
    let request = change.tx().insert_revocation_request(&row).await.map_err(|err| match err {
        StoreError::Unique(_) => {
            Error::Conflict(format!("a revocation of certificate {} is already waiting for approval", certificate.id))
        }
        other => other.into(),
    })?;
    change.audit(
        "revocation_request.created",
        Target::new("revocation_request", request.id),
        json!({ "certificateId": certificate.id, "reason": reason }),
    );
    change.commit().await?;
    Ok(request)
}

pub async fn list(
    ctx: &LifecycleDeps,
    caller: &Caller,
    status: Option<&str>,
    page: PageRequest,
) -> Result<Page<RevocationRequest>> {
    caller.require(Scope::CertificatesRead)?;
    let status = status.map(str::trim).filter(|s| !s.is_empty());
    if let Some(status) = status.filter(|s| RevocationStatus::parse(s).is_none()) {
        return Err(Error::invalid_field("status", format!("`{status}` is not one of {}", RevocationStatus::names())));
    }
    Ok(ctx.store.list_revocation_requests(&caller.workspace_id, status, page).await?)
}

async fn decide(
    ctx: &LifecycleDeps,
    caller: &Caller,
    id: i64,
    to: RevocationStatus,
    reason: Option<String>,
) -> Result<RevocationRequest> {
    caller.require(Scope::CertificatesWrite)?;
    let actor = Audit::of(caller);
    // Read first (the four-eyes check may read API keys), then decided in one transaction.
    let seen = {
        let mut tx = ctx.store.begin_lifecycle().await?;
        let seen = tx.find_revocation_request(&caller.workspace_id, id).await?;
        tx.commit().await?;
        seen.ok_or(Error::NotFound(Entity::RevocationRequest))?
    };
    let decision = if to == REJECTED { Decision::Reject } else { Decision::Approve };
    check_decidable(
        ctx.store.as_ref(),
        caller,
        decision,
        "revocation request",
        id,
        seen.status.as_str(),
        &seen.requested_by,
    )
    .await?;
    let mut change = ctx.change(actor.clone(), Some(&caller.workspace_id)).await?;
    let current = change
        .tx()
        .find_revocation_request(&caller.workspace_id, id)
        .await?
        .ok_or(Error::NotFound(Entity::RevocationRequest))?;
    if current.status != PENDING {
        return Err(Error::Conflict(format!("revocation request {id} is {}, not pending", current.status)));
    }
    let at = change.at();
    let decided = RevocationRequest {
        status: to,
        decided_by: Some(actor.principal.to_string()),
        decided_at: Some(at),
        decision_reason: reason,
        updated_at: at,
        ..current
    };
    let updated = change
        .tx()
        .update_revocation_request(&decided, PENDING)
        .await?
        .ok_or_else(|| Error::Conflict(format!("revocation request {id} was decided meanwhile")))?;
    change.audit(&format!("revocation_request.{to}"), Target::new("revocation_request", id), json!({}));
    change.commit().await?;
    Ok(updated)
}

pub async fn reject(
    ctx: &LifecycleDeps,
    caller: &Caller,
    id: i64,
    reason: Option<String>,
) -> Result<RevocationRequest> {
    let reason = reason.map(|r| r.trim().chars().take(1024).collect::<String>()).filter(|r| !r.is_empty());
    decide(ctx, caller, id, REJECTED, reason).await
}

/// Approves and revokes. A revocation that fails (the CA unreachable) leaves the request
/// `failed` with the error, which is also returned; the certificate stays as it was.
pub async fn approve(ctx: &LifecycleDeps, caller: &Caller, id: i64) -> Result<(RevocationRequest, Certificate)> {
    let approved = decide(ctx, caller, id, APPROVED, None).await?;
    let revoked = async {
        let certificate = ctx
            .store
            .find_certificate(&approved.workspace_id, approved.certificate_id)
            .await?
            .ok_or(Error::NotFound(Entity::Certificate))?;
        revoke_now(ctx, &Audit::of(caller), &certificate, &approved.reason).await
    }
    .await;
    match revoked {
        Ok(certificate) => Ok((approved, certificate)),
        Err(err) => {
            let mut change = ctx.change(Audit::of(caller), Some(&approved.workspace_id)).await?;
            let failed = RevocationRequest { status: FAILED, error: Some(err.to_string()), ..approved };
            change.tx().update_revocation_request(&failed, APPROVED).await?;
            change.audit(
                "revocation_request.failed",
                Target::new("revocation_request", id),
                json!({ "error": err.to_string() }),
            );
            change.commit().await?;
            Err(err)
        }
    }
}
