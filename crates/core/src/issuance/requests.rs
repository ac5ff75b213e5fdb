//! Approval-gated issuance (`/api/certificate-requests`): a request waits as `pending` until
//! someone other than its requester approves it (then it issues through the same path as
//! every issuance: `approved` → `issued`, or `failed` with the error) or rejects it.

use serde_json::{json, Value};

use super::run::{Decision as IssuanceDecision, Run};
use super::IssuanceDeps;
use super::{templates, IssueInput, Issued};
use crate::approvals::{check_decidable, Decision};
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::{Entity, Error, Result};
use crate::pagination::{Page, PageRequest};
use crate::unit_of_work::Target;

crate::state::state_enum! {
    /// Where a certificate request is: `pending` approval, `approved` (issuing through the
    /// usual path), `issuing` at a CA that has not answered yet, then `issued`, `rejected` or
    /// `failed`.
    #[derive(Default)]
    pub enum RequestStatus {
        #[default]
        Pending => "pending",
        Approved => "approved",
        /// The CA accepted the order and has not issued yet: the poller (`issuance::pending`)
        /// drives it.
        Issuing => "issuing",
        Issued => "issued",
        Rejected => "rejected",
        Failed => "failed",
    }
}

pub const PENDING: RequestStatus = RequestStatus::Pending;
pub const APPROVED: RequestStatus = RequestStatus::Approved;
pub const ISSUED: RequestStatus = RequestStatus::Issued;
pub const REJECTED: RequestStatus = RequestStatus::Rejected;
pub const FAILED: RequestStatus = RequestStatus::Failed;
pub const ISSUING: RequestStatus = RequestStatus::Issuing;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CertificateRequest {
    pub id: i64,
    pub workspace_id: String,
    pub ca_id: i64,
    pub status: RequestStatus,
    /// The issue body as submitted (CSR included).
    pub request: Value,
    pub common_name: Option<String>,
    /// Why approval is needed: policy reasons, or `requested` for a direct submission.
    pub reasons: Value,
    /// `<actor type>:<actor id>` of the requester.
    pub requested_by: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub decision_reason: Option<String>,
    pub certificate_id: Option<i64>,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// `issuing`: what the CA said it waits for.
    pub status_message: Option<String>,
    /// `issuing`: when the poller asks the CA next.
    pub poll_at: Option<i64>,
    pub poll_attempts: i64,
    /// When the CA accepted the order.
    pub issuing_since: Option<i64>,
    /// What polling needs (the CA's reference, the exact issue request, a generated key),
    /// sealed under the master key; never shown.
    pub order_sealed: Option<String>,
    /// Set when the order renews this certificate.
    pub renews_certificate_id: Option<i64>,
    /// The template the request was judged under (an approval issues with it, whatever was
    /// edited since); `None` for requests that do not wait for approval.
    pub template_snapshot: Option<Value>,
}

/// Stores a pending request for `input`, which `run` was built from (so validated as an
/// issuance is), waiting under `template` for `reasons`.
pub(crate) async fn open(
    ctx: &IssuanceDeps,
    run: &Run,
    input: &IssueInput,
    template: &templates::Template,
    reasons: Value,
) -> Result<CertificateRequest> {
    let workspace_id = run.ca.workspace_id.clone();
    let body = serde_json::to_value(input).map_err(|err| Error::Internal(err.to_string()))?;
    let template_snapshot = serde_json::to_value(template).map_err(|err| Error::Internal(err.to_string()))?;
    let actor = run.actor.clone();
    let mut change = ctx.change(actor.clone(), Some(&workspace_id)).await?;
    let at = change.at();
    let row = CertificateRequest {
        id: 0,
        workspace_id: workspace_id.clone(),
        ca_id: run.ca.id,
        status: PENDING,
        request: body,
        common_name: input.common_name.clone(),
        reasons,
        requested_by: actor.principal.to_string(),
        decided_by: None,
        decided_at: None,
        decision_reason: None,
        certificate_id: None,
        error: None,
        created_at: at,
        updated_at: at,
        template_snapshot: Some(template_snapshot),
        ..CertificateRequest::default()
    };
    let request = change.tx().insert_request(&row).await?;
    change.audit(
        "certificate_request.created",
        Target::new("certificate_request", request.id),
        json!({ "caId": request.ca_id, "commonName": request.common_name, "reasons": request.reasons }),
    );
    change.commit().await?;
    Ok(request)
}

/// Submits a request for approval (`POST /api/certificate-requests`).
pub async fn submit(ctx: &IssuanceDeps, caller: &Caller, input: IssueInput) -> Result<CertificateRequest> {
    caller.require(Scope::CertificatesWrite)?;
    // Built now (CA, connector, template, request) so an approver never approves what cannot
    // be issued.
    // (A submission's `caType` was never checked against the CA's; it still is not.)
    let unchecked = IssueInput { ca_type: None, ..input.clone() };
    let run = Run::for_caller(ctx, caller, &unchecked, crate::plugins::IssuanceSource::RequestWorkflow).await?;
    let template = match &run.approval {
        super::Approval::Open { template } => template.clone(),
        _ => return Err(Error::Internal("a new run is past approval".into())),
    };
    let reasons = json!([{ "code": "requested", "message": "submitted for approval" }]);
    open(ctx, &run, &input, &template, reasons).await
}

pub async fn list(
    ctx: &IssuanceDeps,
    caller: &Caller,
    status: Option<&str>,
    page: PageRequest,
) -> Result<Page<CertificateRequest>> {
    caller.require(Scope::CertificatesRead)?;
    let status = status.map(str::trim).filter(|s| !s.is_empty());
    if let Some(status) = status.filter(|s| RequestStatus::parse(s).is_none()) {
        return Err(Error::invalid_field("status", format!("`{status}` is not one of {}", RequestStatus::names())));
    }
    Ok(ctx.store.list_requests(&caller.workspace_id, status, page).await?)
}

pub async fn get(ctx: &IssuanceDeps, caller: &Caller, id: i64) -> Result<CertificateRequest> {
    caller.require(Scope::CertificatesRead)?;
    ctx.store.find_request(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::CertificateRequest))
}

/// Moves a pending request to `to` on behalf of `caller` (not its requester).
async fn decide(
    ctx: &IssuanceDeps,
    caller: &Caller,
    id: i64,
    to: RequestStatus,
    reason: Option<String>,
) -> Result<CertificateRequest> {
    caller.require(Scope::CertificatesWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let actor = Audit::of(caller);
    let seen = ctx.store.find_request(&workspace_id, id).await?.ok_or(Error::NotFound(Entity::CertificateRequest))?;
    let decision = if to == REJECTED { Decision::Reject } else { Decision::Approve };
    check_decidable(ctx.store.as_ref(), caller, decision, "request", id, seen.status.as_str(), &seen.requested_by)
        .await?;
    let mut change = ctx.change(actor.clone(), Some(&workspace_id)).await?;
    let current =
        change.tx().find_request(&workspace_id, id).await?.ok_or(Error::NotFound(Entity::CertificateRequest))?;
    if current.status != PENDING {
        return Err(Error::Conflict(format!("request {id} is {}, not pending", current.status)));
    }
    let at = change.at();
    let decided = CertificateRequest {
        status: to,
        decided_by: Some(actor.principal.to_string()),
        decided_at: Some(at),
        decision_reason: reason,
        updated_at: at,
        ..current
    };
    let updated = change
        .tx()
        .update_request(&decided, PENDING)
        .await?
        .ok_or_else(|| Error::Conflict(format!("request {id} was decided meanwhile")))?;
    change.audit(
        &format!("certificate_request.{to}"),
        Target::new("certificate_request", id),
        json!({ "reason": updated.decision_reason }),
    );
    change.commit().await?;
    Ok(updated)
}

pub async fn reject(
    ctx: &IssuanceDeps,
    caller: &Caller,
    id: i64,
    reason: Option<String>,
) -> Result<CertificateRequest> {
    let reason = reason.map(|r| r.trim().chars().take(1024).collect::<String>()).filter(|r| !r.is_empty());
    decide(ctx, caller, id, REJECTED, reason).await
}

/// Approves and issues. The request ends `issued` (with the certificate), `failed` (with the
/// error, which is also returned), or `issuing` when the CA answers "pending" (no certificate
/// yet: the poller completes it).
pub async fn approve(ctx: &IssuanceDeps, caller: &Caller, id: i64) -> Result<(CertificateRequest, Option<Issued>)> {
    let approved = decide(ctx, caller, id, APPROVED, None).await?;
    let decided = async { Run::for_approved(ctx, caller, &approved).await?.decide(ctx).await }.await;
    let outcome = match decided {
        Ok(IssuanceDecision::Pending(order)) => {
            let parked = super::pending::park_approved(ctx, &Audit::of(caller), approved, *order).await?;
            return Ok((parked, None));
        }
        Ok(IssuanceDecision::Issued(issued)) => Ok(*issued),
        Ok(IssuanceDecision::Refused(reasons)) => Err(Error::PolicyDenied(reasons)),
        // Past approval nothing requires it; kept as the refusal it would be.
        Ok(IssuanceDecision::NeedsApproval { reasons, .. }) => Err(Error::ApprovalRequired(reasons)),
        Err(err) => Err(err),
    };
    let mut change = ctx.change(Audit::of(caller), Some(&approved.workspace_id)).await?;
    let at = change.at();
    let (finished, result) = match outcome {
        Ok(issued) => (
            CertificateRequest {
                status: ISSUED,
                certificate_id: Some(issued.certificate.id),
                updated_at: at,
                ..approved
            },
            Ok(issued),
        ),
        Err(err) => {
            (CertificateRequest { status: FAILED, error: Some(err.to_string()), updated_at: at, ..approved }, Err(err))
        }
    };
    let finished = change.tx().update_request(&finished, APPROVED).await?.unwrap_or(finished);
    change.audit(
        &format!("certificate_request.{}", finished.status),
        Target::new("certificate_request", id),
        json!({ "certificateId": finished.certificate_id, "error": finished.error }),
    );
    change.commit().await?;
    result.map(|issued| (finished, Some(issued)))
}
