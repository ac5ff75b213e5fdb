//! One issuance as one value. A [`Run`] is built once, from whichever path asks (the API, an
//! approval, renewal, attestation, the poller resuming an order), with everything the issuance
//! depends on resolved: the CA and its connector, who asks and on whose behalf the change is
//! recorded, the source, the request prepared under its template, and where it stands on
//! approval. Its step, [`Run::decide`], answers with a [`Decision`] value: refusals and the need
//! for approval are outcomes to act on, not errors to catch; an `Err` is a failure (the CA, the
//! plugin runtime or the store).

use std::sync::Arc;

use serde_json::{json, Value};

use super::pending::{self, Completion};
use super::request::{self, IssueInput, PreparedRequest};
use super::templates::{self, Template};
use super::IssuanceDeps;
use super::{policies, requester, requester_from_principal, store_issued, Issued};
use crate::audit::Audit;
use crate::caller::Caller;
use crate::cas::service::{call_target, cannot_issue, connector_for, find, find_for_issuance};
use crate::cas::CertificateAuthority;
use crate::error::{Error, Result};
use crate::pki::LedgerSlot;
use crate::plugins::{
    combine, Combined, Decision as PolicyDecision, IssuanceSource, IssueOutcome, IssueRequest, PluginInfo,
    PolicyReason, Requester, SignPermit,
};

/// Where a run stands on approval.
#[derive(Debug, Clone)]
pub enum Approval {
    /// Nobody approved it: a policy may hold it for approval, and the request then waits under
    /// this template, as it stood when the run was built (an approval issues with it).
    Open { template: Box<Template> },
    /// Someone other than the requester approved it: require-approval decisions no longer hold.
    Granted,
    /// Judged before the CA left its order pending; the poller resumes it, and its claimed
    /// request moves to `issued` in the certificate's own job.
    Resumed(Box<Completion>),
}

/// What a run's [`Run::decide`] ended with.
#[derive(Debug)]
pub enum Decision {
    /// The CA issued: the certificate is in the inventory.
    Issued(Box<Issued>),
    /// The CA accepted the order and has not issued yet: the order to park (see [`pending`]).
    Pending(Box<pending::Order>),
    /// A policy requires approval (with the policies' reasons, as the API shows them); nothing
    /// reached the CA.
    NeedsApproval { reasons: Value, template: Box<Template> },
    /// A policy denied (with every denying policy's reasons); nothing reached the CA.
    Refused(Value),
}

impl Decision {
    /// The `outcome` label of `trellis_issuances_total`.
    fn label(&self) -> &'static str {
        match self {
            Decision::Issued(_) => "issued",
            Decision::Pending(_) => "pending",
            Decision::NeedsApproval { .. } => "APPROVAL_REQUIRED",
            Decision::Refused(_) => "POLICY_DENIED",
        }
    }
}

/// One issuance: everything it depends on, resolved once. Built only by the domain (its fields
/// are the crate's), so nothing outside can mark a run approved.
#[derive(Debug, Clone)]
pub struct Run {
    pub(crate) ca: CertificateAuthority,
    /// The connector plugin serving the CA's type for its workspace.
    pub(crate) connector: Arc<PluginInfo>,
    /// Who asks, as policies see it (the requester of an approved request, whoever approved it).
    pub(crate) requester: Requester,
    /// Whom the change's audit rows name.
    pub(crate) actor: Audit,
    pub(crate) source: IssuanceSource,
    /// The request with its template applied (CSR, profile, renewal window, metadata).
    pub(crate) request: PreparedRequest,
    pub(crate) approval: Approval,
}

impl Run {
    /// A caller's issue body (`POST /api/certificates/issue`, attest-and-provision): the CA must
    /// exist, be of the type the body names (if it names one) and issue; the template resolves
    /// now.
    pub async fn for_caller(
        ctx: &IssuanceDeps,
        caller: &Caller,
        input: &IssueInput,
        source: IssuanceSource,
    ) -> Result<Run> {
        let ca_id = input.ca_id.ok_or_else(|| Error::invalid_field("caId", "is required"))?;
        let ca = find_for_issuance(&ctx.cas, &caller.workspace_id, ca_id).await?;
        if let Some(ca_type) = input.ca_type.as_deref().filter(|t| *t != ca.ca_type) {
            return Err(Error::invalid_field(
                "caType",
                format!("CA {ca_id} is of type `{}`, not `{ca_type}`", ca.ca_type),
            ));
        }
        let connector = connector_for(ctx.plugins.host(), &caller.workspace_id, &ca.ca_type)?;
        if !connector.capabilities.issue {
            return Err(cannot_issue(&ca, &connector));
        }
        let template = templates::resolve(ctx, &caller.workspace_id, input.template_id.as_deref()).await?;
        let request = request::prepare(input, &template)?;
        Ok(Run {
            ca,
            connector,
            requester: requester(caller),
            actor: Audit::of(caller),
            source,
            request,
            approval: Approval::Open { template: Box::new(template) },
        })
    }

    /// An ACME finalize (`acme::server`): the order's CSR through the CA of the directory, as
    /// the ACME account asks (policies see an API requester named by the account).
    pub(crate) async fn for_acme(
        ctx: &IssuanceDeps,
        workspace_id: &str,
        ca_id: i64,
        input: &IssueInput,
        actor: Audit,
    ) -> Result<Run> {
        let ca = find_for_issuance(&ctx.cas, workspace_id, ca_id).await?;
        let connector = connector_for(ctx.plugins.host(), workspace_id, &ca.ca_type)?;
        if !connector.capabilities.issue {
            return Err(cannot_issue(&ca, &connector));
        }
        let template = templates::resolve(ctx, workspace_id, input.template_id.as_deref()).await?;
        let request = request::prepare(input, &template)?;
        Ok(Run {
            ca,
            connector,
            requester: Requester {
                kind: crate::plugins::RequesterKind::ApiKey,
                id: format!("acme:{}", actor.principal.id),
                display_name: Some("ACME account".into()),
            },
            actor,
            source: IssuanceSource::Api,
            request,
            approval: Approval::Open { template: Box::new(template) },
        })
    }

    /// An approval request `approver` just approved: its body as submitted, under the template
    /// as it was when the request was made (what the approver saw), judged as its requester
    /// made it.
    pub(crate) async fn for_approved(
        ctx: &IssuanceDeps,
        approver: &Caller,
        approved: &super::requests::CertificateRequest,
    ) -> Result<Run> {
        let id = approved.id;
        let input: IssueInput = serde_json::from_value(approved.request.clone())
            .map_err(|err| Error::Internal(format!("stored request {id} is unreadable: {err}")))?;
        let ca = find(ctx.store.as_ref(), &approved.workspace_id, approved.ca_id).await?;
        let connector = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
        let template = match &approved.template_snapshot {
            Some(snapshot) => serde_json::from_value(snapshot.clone())
                .map_err(|err| Error::Internal(format!("request {id}'s template snapshot is unreadable: {err}")))?,
            None => templates::resolve(ctx, &ca.workspace_id, input.template_id.as_deref()).await?,
        };
        let request = request::prepare(&input, &template)?;
        Ok(Run {
            ca,
            connector,
            requester: requester_from_principal(&approved.requested_by),
            actor: Audit::of(approver),
            source: IssuanceSource::RequestWorkflow,
            request,
            approval: Approval::Granted,
        })
    }

    /// A renewal, from the issue body renewal builds for the certificate it replaces through
    /// `ca` (the body's `validityDays` is bounded by the template as it is now).
    pub(crate) async fn for_renewal(
        ctx: &IssuanceDeps,
        ca: CertificateAuthority,
        connector: Arc<PluginInfo>,
        input: &IssueInput,
        lifetime_days: u32,
    ) -> Result<(Run, IssueInput)> {
        let template = templates::resolve(ctx, &ca.workspace_id, input.template_id.as_deref()).await?;
        // The same lifetime as the certificate it replaces, within what the template allows now.
        let input =
            IssueInput { validity_days: Some(lifetime_days.clamp(1, template.max_validity_days)), ..input.clone() };
        let request = request::prepare(&input, &template)?;
        let run = Run {
            ca,
            connector,
            requester: Requester {
                kind: crate::plugins::RequesterKind::System,
                id: "renewal".into(),
                display_name: None,
            },
            actor: Audit::system("renewal"),
            source: IssuanceSource::Renewal,
            request,
            approval: Approval::Open { template: Box::new(template) },
        };
        Ok((run, input))
    }

    /// The poller's run for a claimed `issuing` request and its order: judged already, its
    /// change recorded on behalf of the requester.
    pub(crate) fn resumed(
        ca: CertificateAuthority,
        connector: Arc<PluginInfo>,
        order: &pending::Order,
        completion: Completion,
    ) -> Result<Run> {
        let claimed = completion.request();
        Ok(Run {
            requester: requester_from_principal(&claimed.requested_by),
            actor: pending::actor_of(claimed),
            source: order.source(),
            request: order.prepared()?,
            ca,
            connector,
            approval: Approval::Resumed(Box::new(completion)),
        })
    }

    /// Policies, then (unless they refuse or hold it) the CA's connector; an issued certificate
    /// goes into the inventory. Counted in `trellis_issuances_total` by outcome.
    pub async fn decide(&self, ctx: &IssuanceDeps) -> Result<Decision> {
        let decided = self.decide_uncounted(ctx).await;
        let outcome = match &decided {
            Ok(decision) => decision.label(),
            Err(err) => err.code(),
        };
        self.count(outcome);
        decided
    }

    /// Counts an outcome of this run in `trellis_issuances_total`.
    pub(crate) fn count(&self, outcome: &'static str) {
        metrics::counter!("trellis_issuances_total", "ca_type" => self.ca.ca_type.clone(), "source" => source_label(self.source), "outcome" => outcome)
            .increment(1);
    }

    /// The policies' combined verdict on this run: with approval granted, require-approval
    /// decisions no longer hold.
    async fn judge(&self, ctx: &IssuanceDeps) -> Result<Combined> {
        let evaluation = self.request.evaluation(&self.ca, &self.requester, self.source);
        let mut decisions = policies::evaluate(ctx, &self.ca.workspace_id, &evaluation).await?;
        if !matches!(self.approval, Approval::Open { .. }) {
            for decision in &mut decisions {
                if matches!(decision, PolicyDecision::RequireApproval(_)) {
                    *decision = PolicyDecision::Allow { max_validity_days: None };
                }
            }
        }
        Ok(combine(self.request.profile.validity_days, decisions))
    }

    async fn decide_uncounted(&self, ctx: &IssuanceDeps) -> Result<Decision> {
        let mut prepared = self.request.clone();
        match self.judge(ctx).await? {
            Combined::Denied(reasons) => return Ok(Decision::Refused(reasons_json(&reasons))),
            Combined::NeedsApproval(reasons) => {
                let template = match &self.approval {
                    Approval::Open { template } => template.clone(),
                    // Unreachable: past approval, nothing requires it; refused, not issued.
                    _ => return Err(Error::ApprovalRequired(reasons_json(&reasons))),
                };
                return Ok(Decision::NeedsApproval { reasons: reasons_json(&reasons), template });
            }
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
        let mut target = call_target(&ctx.master_key, &self.ca, &self.connector)?;
        // An internal CA's ledger row comes back in this slot and is written with the
        // certificate, in one group-commit job instead of two (see `pki::ledger` for why nothing
        // signed goes unrecorded).
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
            Ok(IssueOutcome::Pending(answer)) => Ok(Decision::Pending(Box::new(pending::Order::new(
                answer,
                request,
                prepared,
                source_label(self.source),
            )))),
            Ok(IssueOutcome::Issued(issued)) => {
                store_issued(ctx, self, prepared, issued, ledger_row).await.map(|i| Decision::Issued(Box::new(i)))
            }
            Err(err) => Err(err.into()),
        };
        match (unrecorded, &stored) {
            // The certificate's job committed, the ledger row with it.
            (Some(row), Ok(Decision::Issued(_))) => row.committed(),
            // Nothing leaves with the error (or the pending answer), but the CA signed: its
            // ledger keeps the certificate.
            (Some(row), _) => {
                if let Err(err) = row.record_now().await {
                    tracing::error!(error = %err, "recording an issued certificate in the CA's ledger failed");
                }
            }
            (None, _) => {}
        }
        stored
    }
}

/// The issuance's source, as `trellis_issuances_total` labels it.
pub(crate) fn source_label(source: IssuanceSource) -> &'static str {
    match source {
        IssuanceSource::Api => "api",
        IssuanceSource::RequestWorkflow => "request",
        IssuanceSource::Attestation => "attestation",
        IssuanceSource::Renewal => "renewal",
    }
}

fn reasons_json(reasons: &[PolicyReason]) -> Value {
    Value::Array(reasons.iter().map(|r| json!({ "code": r.code, "message": r.message })).collect())
}
