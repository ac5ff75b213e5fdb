//! Issuance that outlives one plugin call. A CA that answers `issue` with "pending" (an ACME
//! order still validating, a CA waiting for its own approval) leaves a certificate request in
//! state `issuing`; [`poll`] asks the connector's `poll-issue` when it is due and, once the CA
//! issues, stores the certificate exactly as a direct issuance does and moves the request to
//! `issued` in the same transaction.
//!
//! What polling needs (the CA's reference and the exact issue request: idempotency key, CSR,
//! profile after policies, template; a key generated here) is sealed under the master key,
//! bound to the request, and erased when the request ends.
//!
//! Replica-safe: [`poll`] leases due requests ([`LEASE_MS`]) and writes its outcome only while
//! it still holds the lease, so one order is issued once however many pollers run.
//!
//! Schedule: the CA's `retry-after` (1 s to 1 h), else exponential back-off from 30 s to 1 h.
//! A retryable failure (the CA or the plugin runtime unavailable, a timeout, rate limiting, the
//! connector not installed right now) is retried on that schedule until the order is
//! [`RETRY_GIVE_UP_MS`] old; a CA still pending after [`PENDING_GIVE_UP_MS`] is given up too;
//! any other failure ends the request `failed` with the error.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::requests::{CertificateRequest, FAILED, ISSUED, ISSUING};
use super::run::Run;
use super::IssuanceDeps;
use super::{store_issued, IssueInput, PreparedRequest};
use crate::audit::Audit;
use crate::cas::service::{call_target, connector_for, find};
use crate::certificates::port::CertificateWrites;
use crate::certificates::Certificate;
use crate::error::{Entity, Error, Result};
use crate::events::{CertificateRenewalFailed, CertificateRenewed, Event};
use crate::issuance::port::IssuanceWrites;
use crate::plugins::{
    CertificateProfile, IssuanceSource, IssueOutcome, IssueRequest, PendingIssue, PluginError, SubjectKey,
};
use crate::principal::{Principal, PrincipalKind};
use crate::unit_of_work::{ChangeTx, Target, UnitOfWork};

/// How long a poller holds a claimed request (far above a plugin call's wall-clock limit).
pub const LEASE_MS: i64 = 5 * 60_000;
/// The first back-off when the CA names no time, doubled per attempt up to [`MAX_DELAY_MS`].
pub const FIRST_BACKOFF_MS: i64 = 30_000;
pub const MIN_DELAY_MS: i64 = 1_000;
pub const MAX_DELAY_MS: i64 = 3_600_000;
/// Retryable failures are retried until the order is this old (24 h).
pub const RETRY_GIVE_UP_MS: i64 = 24 * 3_600_000;
/// A CA still answering "pending" after this long (7 days, an ACME order's usual lifetime) is
/// given up.
pub const PENDING_GIVE_UP_MS: i64 = 7 * 24 * 3_600_000;
const MAX_STATUS_MESSAGE: usize = 1024;

/// A pending order: what the CA answered and what polling sends back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    pub reference: String,
    pub status_message: String,
    pub retry_after_secs: Option<u32>,
    pub idempotency_key: String,
    /// The CSR, DER in base64.
    csr: String,
    template: String,
    profile: CertificateProfile,
    /// PKCS#8 PEM of a key generated here.
    private_key_pem: Option<String>,
    metadata: Option<Value>,
    auto_renewal: bool,
    renewal_window_days: u32,
    /// The issuance's source, as `trellis_issuances_total` labels it.
    source: String,
}

impl Order {
    pub(crate) fn new(answer: PendingIssue, request: IssueRequest, prepared: PreparedRequest, source: &str) -> Order {
        Order {
            reference: answer.reference,
            status_message: truncate(&answer.status_message),
            retry_after_secs: answer.retry_after_secs,
            idempotency_key: request.idempotency_key,
            csr: base64::engine::general_purpose::STANDARD.encode(&request.csr_der),
            template: prepared.template,
            profile: request.profile,
            private_key_pem: prepared.private_key_pem,
            metadata: prepared.metadata,
            auto_renewal: prepared.auto_renewal,
            renewal_window_days: prepared.renewal_window_days,
            source: source.to_owned(),
        }
    }

    fn csr_der(&self) -> Result<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.csr)
            .map_err(|_| Error::Internal("a pending order's CSR is unreadable".into()))
    }

    /// The same request `issue` was called with.
    fn issue_request(&self) -> Result<IssueRequest> {
        Ok(IssueRequest {
            idempotency_key: self.idempotency_key.clone(),
            csr_der: self.csr_der()?,
            template: Some(self.template.clone()),
            profile: self.profile.clone(),
            replaces: None,
            metadata: json!({}),
        })
    }

    pub(crate) fn prepared(&self) -> Result<PreparedRequest> {
        Ok(PreparedRequest {
            template: self.template.clone(),
            csr_der: self.csr_der()?,
            // Only policies read the key's description, and they ran before the order.
            key: SubjectKey { algorithm: String::new(), size_bits: 0, curve: None, server_generated: false },
            private_key_pem: self.private_key_pem.clone(),
            profile: self.profile.clone(),
            auto_renewal: self.auto_renewal,
            renewal_window_days: self.renewal_window_days,
            metadata: self.metadata.clone(),
        })
    }

    /// Where the issuance came from (as `trellis_issuances_total` labelled it).
    pub(crate) fn source(&self) -> IssuanceSource {
        match self.source.as_str() {
            "api" => IssuanceSource::Api,
            "request" => IssuanceSource::RequestWorkflow,
            "renewal" => IssuanceSource::Renewal,
            _ => IssuanceSource::Attestation,
        }
    }
}

fn truncate(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(MAX_STATUS_MESSAGE).collect()
}

fn seal_context(workspace_id: &str, request_id: i64) -> Vec<u8> {
    format!("certificate_request_order:{workspace_id}:{request_id}").into_bytes()
}

fn seal(ctx: &IssuanceDeps, workspace_id: &str, request_id: i64, order: &Order) -> Result<String> {
    let plain = serde_json::to_vec(order).map_err(|err| Error::Internal(err.to_string()))?;
    Ok(ctx.master_key.seal_bound(&plain, &seal_context(workspace_id, request_id), ctx.entropy.as_ref()))
}

fn unseal(ctx: &IssuanceDeps, request: &CertificateRequest) -> Result<Order> {
    let sealed = request
        .order_sealed
        .as_deref()
        .ok_or_else(|| Error::Internal(format!("request {} is issuing but holds no order", request.id)))?;
    let plain = ctx.master_key.open_bound(sealed, &seal_context(&request.workspace_id, request.id)).map_err(|_| {
        Error::Internal(format!("the order of request {} does not open under this master key", request.id))
    })?;
    serde_json::from_slice(&plain).map_err(|err| Error::Internal(format!("the order of request {}: {err}", request.id)))
}

/// The delay before the next poll: the CA's `retry-after`, else back-off by attempt.
fn delay_ms(retry_after_secs: Option<u64>, attempts: i64) -> i64 {
    match retry_after_secs {
        Some(secs) => {
            i64::try_from(secs).unwrap_or(i64::MAX / 1000).saturating_mul(1000).clamp(MIN_DELAY_MS, MAX_DELAY_MS)
        }
        None => {
            let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
            FIRST_BACKOFF_MS.saturating_mul(1_i64 << doublings).min(MAX_DELAY_MS)
        }
    }
}

/// The issuing state of a request whose order the CA just accepted, at `at`.
fn issuing(request: CertificateRequest, order: &Order, sealed: String, at: i64) -> CertificateRequest {
    CertificateRequest {
        status: ISSUING,
        status_message: Some(order.status_message.clone()),
        poll_at: Some(at + delay_ms(order.retry_after_secs.map(u64::from), 0).max(MIN_DELAY_MS)),
        poll_attempts: 0,
        issuing_since: Some(at),
        order_sealed: Some(sealed),
        error: None,
        updated_at: at,
        ..request
    }
}

/// Opens an `issuing` request for `run`, whose CA left it pending (`POST
/// /api/certificates/issue`, renewal): `input` is the issue body as received, `renews` the
/// certificate a renewal replaces.
pub(crate) async fn open(
    ctx: &IssuanceDeps,
    run: &Run,
    input: &IssueInput,
    order: Order,
    renews: Option<i64>,
) -> Result<CertificateRequest> {
    let (actor, workspace_id, ca_id) = (&run.actor, run.ca.workspace_id.as_str(), run.ca.id);
    let body = serde_json::to_value(input).map_err(|err| Error::Internal(err.to_string()))?;
    let common_name = input.common_name.clone();
    let mut change = ctx.change(actor.clone(), Some(workspace_id)).await?;
    let at = change.at();
    let row = CertificateRequest {
        workspace_id: workspace_id.to_owned(),
        ca_id,
        status: ISSUING,
        request: body,
        common_name,
        reasons: json!([]),
        requested_by: actor.principal.to_string(),
        created_at: at,
        updated_at: at,
        renews_certificate_id: renews,
        ..CertificateRequest::default()
    };
    // The order is sealed bound to the request's id, so the row comes first.
    let inserted = change.tx().insert_request(&row).await?;
    let sealed = seal(ctx, workspace_id, inserted.id, &order)?;
    let parked = issuing(inserted, &order, sealed, at);
    let parked = change
        .tx()
        .update_request(&parked, ISSUING)
        .await?
        .ok_or_else(|| Error::Internal("a request just inserted is gone".into()))?;
    change.audit(
        "certificate_request.issuing",
        Target::new("certificate_request", parked.id),
        json!({ "caId": ca_id, "commonName": parked.common_name, "statusMessage": order.status_message, "renews": renews }),
    );
    change.commit().await?;
    Ok(parked)
}

/// Moves an approved request whose issuance the CA left pending to `issuing`.
pub(crate) async fn park_approved(
    ctx: &IssuanceDeps,
    actor: &Audit,
    approved: CertificateRequest,
    order: Order,
) -> Result<CertificateRequest> {
    let id = approved.id;
    let mut change = ctx.change(actor.clone(), Some(&approved.workspace_id)).await?;
    let at = change.at();
    let sealed = seal(ctx, &approved.workspace_id, id, &order)?;
    let parked = issuing(approved, &order, sealed, at);
    let parked = change
        .tx()
        .update_request(&parked, super::requests::APPROVED)
        .await?
        .ok_or_else(|| Error::Conflict(format!("request {id} changed meanwhile")))?;
    change.audit(
        "certificate_request.issuing",
        Target::new("certificate_request", id),
        json!({ "caId": parked.ca_id, "statusMessage": order.status_message }),
    );
    change.commit().await?;
    Ok(parked)
}

/// What a poll run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PollRun {
    /// Orders the CA issued: the certificate is in the inventory.
    pub issued: u32,
    /// Still pending at the CA.
    pub pending: u32,
    /// A retryable failure: tried again later.
    pub retrying: u32,
    pub failed: u32,
}

/// Polls up to `limit` due `issuing` requests of every workspace as `lease_owner` (unique per
/// poller: a process, a CLI run).
pub async fn poll(ctx: &IssuanceDeps, lease_owner: &str, limit: i64) -> Result<PollRun> {
    let now = ctx.now_millis();
    let mut change = ctx.change(Audit::system("issuance-poller"), None).await?;
    let claimed = change.tx().claim_issuing(now, lease_owner, now + LEASE_MS, limit).await?;
    change.commit().await?;
    let mut run = PollRun::default();
    for request in claimed {
        let id = request.id;
        match crate::error::contain_panic("a pending issuance poll", advance(ctx, lease_owner, request)).await {
            Ok(step) => {
                let counter = match step {
                    Step::Issued => &mut run.issued,
                    Step::Pending => &mut run.pending,
                    Step::Retrying => &mut run.retrying,
                    Step::Failed => &mut run.failed,
                    Step::LeaseLost => continue,
                };
                *counter += 1;
                metrics::counter!("trellis_issuance_polls_total", "outcome" => step.label()).increment(1);
            }
            // The lease runs out and the next poll tries again.
            Err(err) => tracing::warn!(request = id, error = %err, "polling a pending issuance failed"),
        }
    }
    let (backlog, oldest) = ctx.store.issuing_backlog().await?;
    metrics::gauge!("trellis_issuance_pending_orders").set(backlog as f64);
    let oldest_secs = oldest.map_or(0, |since| (ctx.now_millis() - since).max(0) / 1000);
    metrics::gauge!("trellis_issuance_oldest_pending_order_seconds").set(oldest_secs as f64);
    Ok(run)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Issued,
    Pending,
    Retrying,
    Failed,
    LeaseLost,
}

impl Step {
    fn label(self) -> &'static str {
        match self {
            Step::Issued => "issued",
            Step::Pending => "pending",
            Step::Retrying => "retrying",
            Step::Failed => "failed",
            Step::LeaseLost => "lease_lost",
        }
    }
}

/// Failures worth another poll: the CA or the runtime unavailable or slow, rate limiting.
fn retryable(err: &Error) -> bool {
    match err {
        Error::Store(_) => true,
        other => other.area::<PluginError>().is_some_and(PluginError::is_transient),
    }
}

fn retry_after(err: &Error) -> Option<u64> {
    err.area::<PluginError>().and_then(PluginError::retry_after_secs)
}

/// One claimed request: poll the CA and record what it says.
async fn advance(ctx: &IssuanceDeps, lease_owner: &str, claimed: CertificateRequest) -> Result<Step> {
    let order = match unseal(ctx, &claimed) {
        Ok(order) => order,
        Err(err) => return fail(ctx, lease_owner, claimed, None, &err).await,
    };
    let ca = match find(ctx.store.as_ref(), &claimed.workspace_id, claimed.ca_id).await {
        Ok(ca) => ca,
        Err(Error::NotFound(Entity::CertificateAuthority)) => {
            let err = Error::Conflict(format!("CA {} was deleted while its order was pending", claimed.ca_id));
            return fail(ctx, lease_owner, claimed, Some(&order), &err).await;
        }
        Err(err) => return Err(err),
    };
    let polled = async {
        let connector = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type).map_err(|err| match err {
            // Not installed or bound right now: an operator may be replacing it.
            Error::Validation { .. } => Error::from(PluginError::NotBound {
                kind: crate::plugins::PluginKind::CaConnector,
                service_type: ca.ca_type.clone(),
            }),
            other => other,
        })?;
        let target = call_target(&ctx.master_key, &ca, &connector)?;
        let request = order.issue_request()?;
        let completion = Completion { request: claimed.clone(), lease_owner: lease_owner.to_owned() };
        let run = Run::resumed(ca.clone(), connector, &order, completion)?;
        let outcome = ctx.plugins.host().ca_poll_issue(&target, &order.reference, &request).await?;
        Ok::<_, Error>((run, outcome))
    }
    .await;
    let now = ctx.now_millis();
    let age = now - claimed.issuing_since.unwrap_or(claimed.created_at);
    match polled {
        Ok((run, IssueOutcome::Issued(issued))) => {
            match store_issued(ctx, &run, run.request.clone(), issued, None).await {
                Ok(_) => {
                    run.count("issued");
                    Ok(Step::Issued)
                }
                Err(Error::Conflict(message)) if message == LEASE_LOST => Ok(Step::LeaseLost),
                Err(err) if retryable(&err) => reschedule(ctx, lease_owner, claimed, order, None, Some(&err)).await,
                Err(err) => {
                    run.count(err.code());
                    fail(ctx, lease_owner, claimed, Some(&order), &err).await
                }
            }
        }
        Ok((_, IssueOutcome::Pending(answer))) => {
            if age >= PENDING_GIVE_UP_MS {
                let err = Error::Pending(format!(
                    "the CA has not issued after {} days (last: {}); the order was given up",
                    PENDING_GIVE_UP_MS / 86_400_000,
                    truncate(&answer.status_message)
                ));
                return fail(ctx, lease_owner, claimed, Some(&order), &err).await;
            }
            let order = Order {
                reference: answer.reference,
                status_message: truncate(&answer.status_message),
                retry_after_secs: answer.retry_after_secs,
                ..order
            };
            let retry = order.retry_after_secs.map(u64::from);
            reschedule(ctx, lease_owner, claimed, order, retry, None).await.map(|_| Step::Pending)
        }
        Err(err) if retryable(&err) && age < RETRY_GIVE_UP_MS => {
            let retry = retry_after(&err);
            reschedule(ctx, lease_owner, claimed, order, retry, Some(&err)).await
        }
        Err(err) => fail(ctx, lease_owner, claimed, Some(&order), &err).await,
    }
}

/// Who a completed or failed request's audit rows name: its requester, on whose behalf the
/// poller acts (the system for renewals).
pub(crate) fn actor_of(request: &CertificateRequest) -> Audit {
    match Principal::parse(&request.requested_by) {
        Some(principal) if matches!(principal.kind, PrincipalKind::User | PrincipalKind::ApiKey) => {
            Audit::by(principal, None)
        }
        _ => Audit::system("issuance-poller"),
    }
}

/// Writes the next poll (keeping the order, with the CA's newest reference and message).
async fn reschedule(
    ctx: &IssuanceDeps,
    lease_owner: &str,
    claimed: CertificateRequest,
    order: Order,
    retry_after_secs: Option<u64>,
    err: Option<&Error>,
) -> Result<Step> {
    let mut change = ctx.change(Audit::system("issuance-poller"), Some(&claimed.workspace_id)).await?;
    let at = change.at();
    let sealed = seal(ctx, &claimed.workspace_id, claimed.id, &order)?;
    let next = CertificateRequest {
        status_message: Some(order.status_message.clone()),
        poll_at: Some(at + delay_ms(retry_after_secs, claimed.poll_attempts)),
        order_sealed: Some(sealed),
        error: err.map(|err| truncate(&err.to_string())),
        updated_at: at,
        ..claimed
    };
    if change.tx().finish_poll(&next, lease_owner).await?.is_none() {
        return Ok(Step::LeaseLost);
    }
    change.commit().await?;
    Ok(if err.is_some() { Step::Retrying } else { Step::Pending })
}

/// Ends the request `failed` with `err` (and a renewal it carried as failed), erasing the order.
async fn fail(
    ctx: &IssuanceDeps,
    lease_owner: &str,
    claimed: CertificateRequest,
    order: Option<&Order>,
    err: &Error,
) -> Result<Step> {
    let message = truncate(&err.to_string());
    tracing::warn!(request = claimed.id, error = %message, "a pending issuance failed");
    let mut change = ctx.change(actor_of(&claimed), Some(&claimed.workspace_id)).await?;
    let at = change.at();
    let id = claimed.id;
    let renews = claimed.renews_certificate_id;
    let workspace_id = claimed.workspace_id.clone();
    let failed = CertificateRequest {
        status: FAILED,
        error: Some(message.clone()),
        poll_at: None,
        order_sealed: None,
        updated_at: at,
        ..claimed
    };
    if change.tx().finish_poll(&failed, lease_owner).await?.is_none() {
        return Ok(Step::LeaseLost);
    }
    change.audit(
        "certificate_request.failed",
        Target::new("certificate_request", id),
        json!({ "error": message, "code": err.code(), "reference": order.map(|o| o.reference.as_str()) }),
    );
    if let Some(old_id) = renews {
        if let Some(old) = change.tx().find_certificate(&workspace_id, old_id).await? {
            change.tx().record_renewal_failure(&workspace_id, old_id, &message).await?;
            change
                .audit("certificate.renewal_failed", Target::new("certificate", old_id), json!({ "error": message }))
                .emit(Event::CertificateRenewalFailed(CertificateRenewalFailed {
                    certificate_id: old_id,
                    common_name: old.common_name,
                    error: message.clone(),
                    code: err.code(),
                }));
        }
    }
    change.commit().await?;
    Ok(Step::Failed)
}

const LEASE_LOST: &str = "the poll lease was taken over; another poller finishes this request";

/// The poller's request, moved to `issued` in the certificate's own job.
#[derive(Debug, Clone)]
pub struct Completion {
    request: CertificateRequest,
    lease_owner: String,
}

/// What a completion wrote, for the audit rows and events of the certificate's job.
pub(crate) struct Completed {
    request_id: i64,
    attempts: i64,
    /// The certificate renewed, and its common name.
    renewed: Option<(i64, String)>,
}

impl Completion {
    /// The claimed request.
    pub(crate) fn request(&self) -> &CertificateRequest {
        &self.request
    }

    /// Moves the request to `issued` with `certificate` (and links a renewed certificate to
    /// it); a lost lease fails the job, so the certificate is not stored twice.
    pub(crate) async fn apply<T: ?Sized + IssuanceWrites + CertificateWrites>(
        self,
        tx: &mut T,
        certificate: &Certificate,
        at: i64,
    ) -> Result<Completed> {
        let request_id = self.request.id;
        let attempts = self.request.poll_attempts;
        let renews = self.request.renews_certificate_id;
        let workspace_id = self.request.workspace_id.clone();
        let issued = CertificateRequest {
            status: ISSUED,
            certificate_id: Some(certificate.id),
            poll_at: None,
            order_sealed: None,
            error: None,
            updated_at: at,
            ..self.request
        };
        if tx.finish_poll(&issued, &self.lease_owner).await?.is_none() {
            return Err(Error::Conflict(LEASE_LOST.into()));
        }
        let mut renewed = None;
        if let Some(old_id) = renews {
            if let Some(old) = tx.find_certificate(&workspace_id, old_id).await? {
                tx.record_renewal(&workspace_id, old_id, certificate.id).await?;
                renewed = Some((old_id, old.common_name));
            }
        }
        Ok(Completed { request_id, attempts, renewed })
    }
}

impl Completed {
    pub(crate) fn record<T: ?Sized + ChangeTx>(&self, change: &mut UnitOfWork<'_, T>, certificate: &Certificate) {
        change.audit(
            "certificate_request.issued",
            Target::new("certificate_request", self.request_id),
            json!({ "certificateId": certificate.id, "pollAttempts": self.attempts }),
        );
        if let Some((old_id, common_name)) = &self.renewed {
            change
                .audit(
                    "certificate.renewed",
                    Target::new("certificate", *old_id),
                    json!({ "renewedBy": certificate.id }),
                )
                .emit(Event::CertificateRenewed(CertificateRenewed {
                    old_certificate_id: *old_id,
                    new_certificate_id: certificate.id,
                    common_name: common_name.clone(),
                    ca_id: certificate.ca_id,
                }));
        }
    }
}
