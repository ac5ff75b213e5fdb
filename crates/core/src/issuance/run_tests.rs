//! The issuance run against in-memory fakes (issuance's port faked whole, a scripted connector
//! and scripted policies): policies allow, shorten, deny, hold for approval or fail closed; the
//! template shapes the request; approval is four-eyes and issues under the template the request
//! was made with; a CA that answers "pending" parks the request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use serde_json::json;

use super::policies::IssuancePolicy;
use super::requests::{self, FAILED, ISSUED, ISSUING, PENDING, REJECTED};
use super::templates::{self, StoredTemplate};
use super::{issue, issue_attested, Approval, Decision, IssueInput, Outcome, Run};
use crate::audit::Audit;
use crate::caller::{Actor, Caller, Role};
use crate::error::Error;
use crate::plugins::*;
use crate::testing::{context_with, owner, MemoryStore, NoPlugins};
use crate::Context;

const NOW: &str = "2026-11-28T12:00:00Z";
const WORKSPACE: &str = "ws_a";
const CA_ID: i64 = 3;
const POLICY_TYPE: &str = "scripted";

/// What a scripted policy answers.
#[derive(Debug, Clone)]
enum Verdict {
    Allow(Option<u32>),
    Deny(&'static str),
    RequireApproval(&'static str),
    /// The plugin fails (a trap, a timeout): the policy denies.
    Fail,
}

fn reason(code: &str) -> Vec<PolicyReason> {
    vec![PolicyReason { code: code.into(), message: format!("{code} says so") }]
}

struct Fixture {
    store: MemoryStore,
    /// Every `issue` call the CA received.
    issued: Arc<Mutex<Vec<IssueRequest>>>,
    /// Every evaluation, by policy record (`policy-<id>`).
    evaluated: Arc<Mutex<Vec<(String, EvaluationRequest)>>>,
    verdicts: Arc<Mutex<HashMap<String, Verdict>>>,
    /// The CA answers "pending" instead of issuing.
    pending: Arc<Mutex<bool>>,
    connector: PluginInfo,
    /// The contexts' read caches: a policy put through the fixture is forgotten there, as the
    /// policy use cases do.
    cached: Arc<crate::context::ReadCaches>,
}

fn connector(issue: bool) -> PluginInfo {
    PluginInfo {
        id: "fixture.scripted".into(),
        version: semver::Version::new(0, 1, 0),
        kind: PluginKind::CaConnector,
        name: "scripted".into(),
        description: String::new(),
        serves: vec!["scripted".into()],
        config_schema: json!({}),
        secret_fields: Vec::new(),
        capabilities: Capabilities { issue, ..Capabilities::default() },
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

fn policy_plugin() -> PluginInfo {
    PluginInfo {
        id: "fixture.policy".into(),
        kind: PluginKind::IssuancePolicy,
        name: "policy".into(),
        serves: vec![POLICY_TYPE.into()],
        capabilities: Capabilities::default(),
        ..connector(false)
    }
}

/// A certificate for exactly the CSR (its key and names), signed by a throwaway issuer.
pub(super) fn sign(csr_der: &[u8]) -> Vec<u8> {
    let issuer_key = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
    let mut issuer_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|err| panic!("{err}"));
    issuer_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = issuer_params.self_signed(&issuer_key).unwrap_or_else(|err| panic!("issuer: {err}"));
    let der = rustls_pki_types::CertificateSigningRequestDer::from(csr_der.to_vec());
    rcgen::CertificateSigningRequestParams::from_der(&der)
        .unwrap_or_else(|err| panic!("csr: {err}"))
        .signed_by(&issuer, &issuer_key)
        .unwrap_or_else(|err| panic!("sign: {err}"))
        .der()
        .to_vec()
}

impl Fixture {
    fn new(can_issue: bool) -> Fixture {
        let store = MemoryStore::default();
        store.put_ca(crate::testing::active_ca(WORKSPACE, CA_ID, "scripted"));
        Fixture {
            store,
            issued: Arc::default(),
            evaluated: Arc::default(),
            verdicts: Arc::default(),
            pending: Arc::default(),
            connector: connector(can_issue),
            cached: Arc::default(),
        }
    }

    /// Adds an enabled policy (at `position`) answering `verdict`.
    fn policy(&self, id: i64, position: i64, verdict: Verdict) {
        self.policy_enabled(id, position, verdict, true);
    }

    fn policy_enabled(&self, id: i64, position: i64, verdict: Verdict, enabled: bool) {
        self.store.put_policy(IssuancePolicy {
            id,
            workspace_id: WORKSPACE.into(),
            name: format!("policy {id}"),
            policy_type: POLICY_TYPE.into(),
            config: json!({}),
            position,
            enabled,
            created_at: 0,
            updated_at: 0,
        });
        self.verdicts.lock().unwrap_or_else(|_| panic!("lock")).insert(format!("policy-{id}"), verdict);
        self.cached.policies.forget(&WORKSPACE.to_owned());
    }

    fn ctx(&self) -> Context {
        let issue_script: crate::testing::IssueScript = {
            let (issued, pending) = (self.issued.clone(), self.pending.clone());
            Arc::new(move |_target: CallTarget, request: IssueRequest| {
                let (issued, pending) = (issued.clone(), pending.clone());
                async move {
                    issued.lock().unwrap_or_else(|_| panic!("lock")).push(request.clone());
                    if *pending.lock().unwrap_or_else(|_| panic!("lock")) {
                        return Ok(IssueOutcome::Pending(PendingIssue {
                            reference: format!("order/{}", request.idempotency_key),
                            retry_after_secs: Some(30),
                            status_message: "validating".into(),
                        }));
                    }
                    Ok(IssueOutcome::Issued(IssuedCertificate {
                        certificate_der: sign(&request.csr_der),
                        chain_der: vec![],
                        ca_reference: None,
                    }))
                }
                .boxed()
            })
        };
        let policy_script: crate::testing::PolicyScript = {
            let (evaluated, verdicts) = (self.evaluated.clone(), self.verdicts.clone());
            Arc::new(move |target: &CallTarget, request: &EvaluationRequest| {
                let record = target.context.record_id.clone();
                evaluated.lock().unwrap_or_else(|_| panic!("lock")).push((record.clone(), request.clone()));
                let verdict = verdicts.lock().unwrap_or_else(|_| panic!("lock")).get(&record).cloned();
                match verdict.unwrap_or(Verdict::Fail) {
                    Verdict::Allow(max_validity_days) => Ok(crate::plugins::Decision::Allow { max_validity_days }),
                    Verdict::Deny(code) => Ok(crate::plugins::Decision::Deny(reason(code))),
                    Verdict::RequireApproval(code) => Ok(crate::plugins::Decision::RequireApproval(reason(code))),
                    Verdict::Fail => Err(PluginError::NotFound { id: "policy trapped".into() }),
                }
            })
        };
        let plugins = NoPlugins {
            issue: Some(issue_script),
            connector: Some(self.connector.clone()),
            policy: Some((policy_plugin(), policy_script)),
            ..NoPlugins::default()
        };
        Context { cached: self.cached.clone(), ..context_with(self.store.clone(), NOW, plugins) }
    }

    fn calls_to_ca(&self) -> usize {
        self.issued.lock().map(|i| i.len()).unwrap_or_default()
    }

    fn evaluations(&self) -> Vec<(String, EvaluationRequest)> {
        self.evaluated.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

fn input(common_name: &str) -> IssueInput {
    IssueInput { ca_id: Some(CA_ID), common_name: Some(common_name.into()), ..IssueInput::default() }
}

/// A member of the workspace other than the owner (an approver).
fn member(id: &str) -> Caller {
    Caller {
        actor: Actor::User { id: id.into(), email: format!("{id}@example.com") },
        workspace_id: WORKSPACE.into(),
        scopes: Role::Member.scopes(),
        instance_admin: false,
        request_id: format!("req_{id}"),
    }
}

fn viewer() -> Caller {
    Caller { scopes: Role::Viewer.scopes(), ..member("usr_viewer") }
}

fn actions(store: &MemoryStore) -> Vec<String> {
    store.snapshot().audit.iter().map(|a| a.action.clone()).collect()
}

fn issued_certificate(outcome: Outcome) -> super::Issued {
    match outcome {
        Outcome::Issued(issued) => *issued,
        other => panic!("issued expected: {other:?}"),
    }
}

async fn awaiting(ctx: &Context, caller: &Caller, input: IssueInput) -> requests::CertificateRequest {
    match issue(&ctx.issuance_deps(), caller, input).await.unwrap_or_else(|err| panic!("issue: {err}")) {
        Outcome::AwaitingApproval(request) => *request,
        other => panic!("a request awaiting approval expected: {other:?}"),
    }
}

fn web_server() -> templates::Template {
    templates::built_in_named("web_server").unwrap_or_else(|| panic!("built-in web_server"))
}

// ---- policies ---------------------------------------------------------------------------

#[tokio::test]
async fn without_policies_the_ca_issues_under_the_templates_default_validity() {
    let fixture = Fixture::new(true);
    let ctx = fixture.ctx();
    let issued = issued_certificate(
        issue(&ctx.issuance_deps(), &owner(WORKSPACE), input("a.example.com")).await.unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(issued.certificate.common_name, "a.example.com");
    let sent = fixture.issued.lock().map(|i| i.clone()).unwrap_or_default();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].profile.validity_days, web_server().default_validity_days);
    assert_eq!(sent[0].template.as_deref(), Some("web_server"));
    assert_eq!(actions(&fixture.store), ["certificate.issued"]);
    let events: Vec<_> = fixture.store.snapshot().events.iter().map(|e| e.event_type.clone()).collect();
    assert_eq!(events, ["certificate.created"]);
}

#[tokio::test]
async fn policies_are_asked_in_order_and_the_shortest_allowed_validity_wins() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 2, Verdict::Allow(Some(30)));
    fixture.policy(12, 1, Verdict::Allow(Some(60)));
    let ctx = fixture.ctx();
    issue(&ctx.issuance_deps(), &owner(WORKSPACE), IssueInput { validity_days: Some(90), ..input("b.example.com") })
        .await
        .unwrap_or_else(|err| panic!("issue: {err}"));
    let order: Vec<String> = fixture.evaluations().into_iter().map(|(record, _)| record).collect();
    assert_eq!(order, ["policy-12", "policy-11"], "position, then id");
    let sent = fixture.issued.lock().map(|i| i[0].profile.validity_days).unwrap_or_default();
    assert_eq!(sent, 30);
}

#[tokio::test]
async fn policies_see_the_request_as_the_requester_made_it() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::Allow(None));
    let ctx = fixture.ctx();
    issue(
        &ctx.issuance_deps(),
        &member("usr_alice"),
        IssueInput { subject_alt_names: vec!["c2.example.com".into()], ..input("c.example.com") },
    )
    .await
    .unwrap_or_else(|err| panic!("issue: {err}"));
    let (_, seen) = fixture.evaluations().pop().unwrap_or_else(|| panic!("an evaluation"));
    assert_eq!((seen.requester.kind, seen.requester.id.as_str()), (RequesterKind::User, "usr_alice"));
    assert_eq!(seen.source, IssuanceSource::Api);
    assert_eq!((seen.ca_type.as_str(), seen.ca_id.as_str()), ("scripted", "3"));
    assert_eq!(seen.template.as_deref(), Some("web_server"));
    assert!(seen.subject_alt_names.contains(&SubjectAltName::Dns("c2.example.com".into())), "{seen:?}");
    assert!(seen.key.server_generated, "no CSR: the key is generated here");
}

#[tokio::test]
async fn a_denying_policy_refuses_with_its_reasons_and_nothing_reaches_the_ca() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::Allow(None));
    fixture.policy(12, 1, Verdict::Deny("no_wildcards"));
    let ctx = fixture.ctx();
    let refused =
        issue(&ctx.issuance_deps(), &owner(WORKSPACE), input("d.example.com")).await.map(|_| ()).expect_err("denied");
    match refused {
        Error::PolicyDenied(reasons) => assert_eq!(reasons[0]["code"], "no_wildcards"),
        other => panic!("POLICY_DENIED expected: {other:?}"),
    }
    assert_eq!(fixture.calls_to_ca(), 0);
    let tables = fixture.store.snapshot();
    assert!(tables.certificates.is_empty() && tables.requests.is_empty() && tables.audit.is_empty());
}

#[tokio::test]
async fn a_deny_outweighs_a_require_approval() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    fixture.policy(12, 1, Verdict::Deny("blocked_domain"));
    let ctx = fixture.ctx();
    let refused =
        issue(&ctx.issuance_deps(), &owner(WORKSPACE), input("e.example.com")).await.map(|_| ()).expect_err("denied");
    assert!(matches!(refused, Error::PolicyDenied(_)), "{refused:?}");
    assert!(fixture.store.snapshot().requests.is_empty(), "no request waits for a denied issuance");
}

#[tokio::test]
async fn a_failing_policy_denies_fail_closed() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::Fail);
    let ctx = fixture.ctx();
    let refused =
        issue(&ctx.issuance_deps(), &owner(WORKSPACE), input("f.example.com")).await.map(|_| ()).expect_err("denied");
    assert!(matches!(refused, Error::PolicyDenied(_)), "{refused:?}");
    assert_eq!(fixture.calls_to_ca(), 0);
}

#[tokio::test]
async fn a_disabled_policy_is_not_asked() {
    let fixture = Fixture::new(true);
    fixture.policy_enabled(11, 0, Verdict::Deny("would_deny"), false);
    let ctx = fixture.ctx();
    issue(&ctx.issuance_deps(), &owner(WORKSPACE), input("g.example.com"))
        .await
        .unwrap_or_else(|err| panic!("issue: {err}"));
    assert!(fixture.evaluations().is_empty());
    assert_eq!(fixture.calls_to_ca(), 1);
}

#[tokio::test]
async fn the_run_answers_refusals_as_decisions_not_errors() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::Deny("nope"));
    let ctx = fixture.ctx();
    let run = Run::for_caller(&ctx.issuance_deps(), &owner(WORKSPACE), &input("h.example.com"), IssuanceSource::Api)
        .await
        .unwrap_or_else(|err| panic!("run: {err}"));
    assert!(matches!(run.approval, Approval::Open { .. }));
    let decision = run.decide(&ctx.issuance_deps()).await.unwrap_or_else(|err| panic!("decide: {err}"));
    assert!(matches!(&decision, Decision::Refused(reasons) if reasons[0]["code"] == "nope"), "{decision:?}");
}

// ---- the request and its template ---------------------------------------------------------

#[tokio::test]
async fn the_template_bounds_the_validity_and_an_unknown_template_is_refused() {
    let fixture = Fixture::new(true);
    let ctx = fixture.ctx();
    let too_long = web_server().max_validity_days + 1;
    let refused = issue(
        &ctx.issuance_deps(),
        &owner(WORKSPACE),
        IssueInput { validity_days: Some(too_long), ..input("i.example.com") },
    )
    .await
    .map(|_| ())
    .expect_err("too long");
    assert!(matches!(&refused, Error::Validation { .. }) && refused.to_string().contains("validityDays"), "{refused}");
    let unknown = issue(
        &ctx.issuance_deps(),
        &owner(WORKSPACE),
        IssueInput { template_id: Some("nope".into()), ..input("i.example.com") },
    )
    .await
    .map(|_| ())
    .expect_err("unknown template");
    assert!(unknown.to_string().contains("templateId"), "{unknown}");
    assert_eq!(fixture.calls_to_ca(), 0);
}

#[tokio::test]
async fn a_workspace_template_applies_its_own_bounds() {
    let fixture = Fixture::new(true);
    fixture.store.edit(|tables| {
        tables.templates.push(StoredTemplate {
            id: 500,
            workspace_id: WORKSPACE.into(),
            name: "short".into(),
            body: json!({ "basedOn": "web_server", "defaultValidityDays": 7, "maxValidityDays": 10 }),
            created_at: 0,
            updated_at: 0,
        })
    });
    let ctx = fixture.ctx();
    issue(
        &ctx.issuance_deps(),
        &owner(WORKSPACE),
        IssueInput { template_id: Some("short".into()), ..input("j.example.com") },
    )
    .await
    .unwrap_or_else(|err| panic!("issue: {err}"));
    let sent = fixture.issued.lock().map(|i| i[0].clone()).unwrap_or_else(|_| panic!("lock"));
    // A workspace template is named by its id.
    assert_eq!((sent.profile.validity_days, sent.template.as_deref()), (7, Some("500")));
    let refused = issue(
        &ctx.issuance_deps(),
        &owner(WORKSPACE),
        IssueInput { template_id: Some("500".into()), validity_days: Some(11), ..input("j.example.com") },
    )
    .await
    .map(|_| ())
    .expect_err("above the template's maximum");
    assert!(refused.to_string().contains("validityDays"), "{refused}");
}

#[tokio::test]
async fn the_ca_must_exist_be_of_the_named_type_and_issue() {
    let fixture = Fixture::new(true);
    let ctx = fixture.ctx();
    let missing =
        issue(&ctx.issuance_deps(), &owner(WORKSPACE), IssueInput { ca_id: Some(99), ..input("k.example.com") }).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
    let no_ca =
        issue(&ctx.issuance_deps(), &owner(WORKSPACE), IssueInput { ca_id: None, ..input("k.example.com") }).await;
    assert!(no_ca.map(|_| ()).expect_err("caId").to_string().contains("caId"));
    let typed = issue(
        &ctx.issuance_deps(),
        &owner(WORKSPACE),
        IssueInput { ca_type: Some("acme".into()), ..input("k.example.com") },
    )
    .await;
    assert!(typed.map(|_| ()).expect_err("caType").to_string().contains("caType"));

    let cannot = Fixture::new(false);
    let refused = issue(&cannot.ctx().issuance_deps(), &owner(WORKSPACE), input("k.example.com")).await;
    assert!(matches!(refused, Err(Error::UnsupportedCa(_))), "{refused:?}");
    assert_eq!(fixture.calls_to_ca() + cannot.calls_to_ca(), 0);
}

#[tokio::test]
async fn issuing_needs_the_write_scope() {
    let fixture = Fixture::new(true);
    let refused = issue(&fixture.ctx().issuance_deps(), &viewer(), input("l.example.com")).await;
    assert!(matches!(refused, Err(Error::MissingScope(_))), "{refused:?}");
    let submitted = requests::submit(&fixture.ctx().issuance_deps(), &viewer(), input("l.example.com")).await;
    assert!(matches!(submitted, Err(Error::MissingScope(_))), "{submitted:?}");
}

// ---- approval ---------------------------------------------------------------------------

#[tokio::test]
async fn a_policy_that_requires_approval_leaves_a_pending_request_under_the_template_snapshot() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    let ctx = fixture.ctx();
    let request = awaiting(&ctx, &owner(WORKSPACE), input("m.example.com")).await;
    assert_eq!(request.status, PENDING);
    assert_eq!(request.requested_by, "user:usr_test");
    assert_eq!(request.reasons[0]["code"], "four_eyes");
    assert_eq!(request.common_name.as_deref(), Some("m.example.com"));
    let snapshot: templates::Template = serde_json::from_value(request.template_snapshot.clone().unwrap_or_default())
        .unwrap_or_else(|err| panic!("snapshot: {err}"));
    assert_eq!(snapshot, web_server());
    assert_eq!(fixture.calls_to_ca(), 0, "nothing reaches the CA before approval");
    assert_eq!(actions(&fixture.store), ["certificate_request.created"]);
}

#[tokio::test]
async fn someone_else_approves_and_the_request_issues_as_its_requester_made_it() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    let ctx = fixture.ctx();
    let request = awaiting(&ctx, &member("usr_alice"), input("n.example.com")).await;
    let (done, issued) = requests::approve(&ctx.issuance_deps(), &member("usr_bob"), request.id)
        .await
        .unwrap_or_else(|err| panic!("approve: {err}"));
    let issued = issued.unwrap_or_else(|| panic!("issued at once"));
    assert_eq!(done.status, ISSUED);
    assert_eq!(done.certificate_id, Some(issued.certificate.id));
    assert_eq!(done.decided_by.as_deref(), Some("user:usr_bob"));
    // Judged again at approval: as Alice's, from the request workflow, approval no longer holding.
    let (_, judged) = fixture.evaluations().pop().unwrap_or_else(|| panic!("an evaluation"));
    assert_eq!((judged.requester.id.as_str(), judged.source), ("usr_alice", IssuanceSource::RequestWorkflow));
    assert_eq!(
        actions(&fixture.store),
        [
            "certificate_request.created",
            "certificate_request.approved",
            "certificate.issued",
            "certificate_request.issued"
        ]
    );
}

#[tokio::test]
async fn a_requester_cannot_approve_or_reject_their_own_request() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    let ctx = fixture.ctx();
    let request = awaiting(&ctx, &member("usr_alice"), input("o.example.com")).await;
    let own = requests::approve(&ctx.issuance_deps(), &member("usr_alice"), request.id).await.map(|_| ());
    assert!(matches!(own, Err(Error::Forbidden(_))), "{own:?}");
    let own = requests::reject(&ctx.issuance_deps(), &member("usr_alice"), request.id, None).await.map(|_| ());
    assert!(matches!(own, Err(Error::Forbidden(_))), "{own:?}");
    assert_eq!(fixture.calls_to_ca(), 0);
    assert_eq!(fixture.store.snapshot().requests[0].status, PENDING);
}

#[tokio::test]
async fn a_rejected_request_issues_nothing_and_cannot_be_decided_again() {
    let fixture = Fixture::new(true);
    let ctx = fixture.ctx();
    let request = requests::submit(&ctx.issuance_deps(), &member("usr_alice"), input("p.example.com"))
        .await
        .unwrap_or_else(|err| panic!("submit: {err}"));
    assert_eq!(request.reasons[0]["code"], "requested");
    let rejected = requests::reject(&ctx.issuance_deps(), &member("usr_bob"), request.id, Some("  not now  ".into()))
        .await
        .unwrap_or_else(|err| panic!("reject: {err}"));
    assert_eq!((rejected.status, rejected.decision_reason.as_deref()), (REJECTED, Some("not now")));
    let again = requests::approve(&ctx.issuance_deps(), &member("usr_carol"), request.id).await.map(|_| ());
    assert!(matches!(again, Err(Error::Conflict(_))), "{again:?}");
    assert_eq!(fixture.calls_to_ca(), 0);
}

#[tokio::test]
async fn an_approval_that_a_policy_now_denies_fails_the_request_with_the_reason() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    let ctx = fixture.ctx();
    let request = awaiting(&ctx, &member("usr_alice"), input("q.example.com")).await;
    fixture.policy(12, 1, Verdict::Deny("frozen"));
    let refused = requests::approve(&ctx.issuance_deps(), &member("usr_bob"), request.id).await.map(|_| ());
    assert!(matches!(refused, Err(Error::PolicyDenied(_))), "{refused:?}");
    let failed = fixture.store.snapshot().requests.into_iter().find(|r| r.id == request.id).unwrap_or_default();
    assert_eq!(failed.status, FAILED);
    assert!(failed.error.is_some());
    assert_eq!(fixture.calls_to_ca(), 0);
}

#[tokio::test]
async fn an_approval_issues_under_the_template_as_it_was_when_the_request_was_made() {
    let fixture = Fixture::new(true);
    fixture.store.edit(|tables| {
        tables.templates.push(StoredTemplate {
            id: 500,
            workspace_id: WORKSPACE.into(),
            name: "short".into(),
            body: json!({ "defaultValidityDays": 7, "maxValidityDays": 10 }),
            created_at: 0,
            updated_at: 0,
        })
    });
    let ctx = fixture.ctx();
    let request = requests::submit(
        &ctx.issuance_deps(),
        &member("usr_alice"),
        IssueInput { template_id: Some("short".into()), ..input("r.example.com") },
    )
    .await
    .unwrap_or_else(|err| panic!("submit: {err}"));
    // Edited after the request: the approver saw 7 days.
    fixture.store.edit(|tables| tables.templates[0].body = json!({ "defaultValidityDays": 3, "maxValidityDays": 5 }));
    requests::approve(&ctx.issuance_deps(), &member("usr_bob"), request.id)
        .await
        .unwrap_or_else(|err| panic!("approve: {err}"));
    let sent = fixture.issued.lock().map(|i| i[0].profile.validity_days).unwrap_or_default();
    assert_eq!(sent, 7);
}

#[tokio::test]
async fn a_granted_run_is_no_longer_held_by_require_approval() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    let ctx = fixture.ctx();
    let open = Run::for_caller(&ctx.issuance_deps(), &owner(WORKSPACE), &input("s.example.com"), IssuanceSource::Api)
        .await
        .unwrap_or_else(|err| panic!("run: {err}"));
    let held = open.decide(&ctx.issuance_deps()).await.unwrap_or_else(|err| panic!("decide: {err}"));
    assert!(matches!(&held, Decision::NeedsApproval { reasons, .. } if reasons[0]["code"] == "four_eyes"), "{held:?}");
    let granted = Run { approval: Approval::Granted, actor: Audit::of(&member("usr_bob")), ..open };
    let decision = granted.decide(&ctx.issuance_deps()).await.unwrap_or_else(|err| panic!("decide: {err}"));
    assert!(matches!(decision, Decision::Issued(_)), "{decision:?}");
}

#[tokio::test]
async fn attestation_cannot_wait_for_approval_nor_for_a_pending_ca() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    let ctx = fixture.ctx();
    let held = issue_attested(&ctx.issuance_deps(), &owner(WORKSPACE), input("t.example.com")).await.map(|_| ());
    assert!(matches!(held, Err(Error::ApprovalRequired(_))), "{held:?}");
    assert!(fixture.store.snapshot().requests.is_empty(), "nothing waits");

    let fixture = Fixture::new(true);
    *fixture.pending.lock().unwrap_or_else(|_| panic!("lock")) = true;
    let waiting =
        issue_attested(&fixture.ctx().issuance_deps(), &owner(WORKSPACE), input("t.example.com")).await.map(|_| ());
    assert!(matches!(waiting, Err(Error::Pending(_))), "{waiting:?}");
    assert!(fixture.store.snapshot().requests.is_empty(), "the order is left unpolled");
}

// ---- pending ----------------------------------------------------------------------------

#[tokio::test]
async fn an_approved_request_the_ca_leaves_pending_moves_to_issuing() {
    let fixture = Fixture::new(true);
    fixture.policy(11, 0, Verdict::RequireApproval("four_eyes"));
    let ctx = fixture.ctx();
    let request = awaiting(&ctx, &member("usr_alice"), input("u.example.com")).await;
    *fixture.pending.lock().unwrap_or_else(|_| panic!("lock")) = true;
    let (parked, issued) = requests::approve(&ctx.issuance_deps(), &member("usr_bob"), request.id)
        .await
        .unwrap_or_else(|err| panic!("approve: {err}"));
    assert!(issued.is_none());
    assert_eq!(parked.status, ISSUING);
    assert_eq!(parked.status_message.as_deref(), Some("validating"));
    assert!(parked.order_sealed.is_some());
    assert!(fixture.store.snapshot().certificates.is_empty());
}

#[tokio::test]
async fn a_pending_issue_opens_an_issuing_request_as_the_caller() {
    let fixture = Fixture::new(true);
    *fixture.pending.lock().unwrap_or_else(|_| panic!("lock")) = true;
    let ctx = fixture.ctx();
    let request = match issue(&ctx.issuance_deps(), &member("usr_alice"), input("v.example.com")).await {
        Ok(Outcome::Issuing(request)) => *request,
        other => panic!("issuing expected: {other:?}"),
    };
    assert_eq!((request.status, request.ca_id), (ISSUING, CA_ID));
    assert_eq!(request.requested_by, "user:usr_alice");
    assert_eq!(request.request["commonName"], "v.example.com", "the body as received");
    assert_eq!(request.renews_certificate_id, None);
}
