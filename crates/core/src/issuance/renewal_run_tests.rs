//! The renewal worker against in-memory fakes: certificates inside their window are renewed
//! through the issuance run (same lifetime within the template, the successor linked), failures
//! are recorded (error on the certificate, audit row, `certificate.renewal_failed`) and retried
//! after the claim lease; a CA that answers "pending" parks the renewal.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use serde_json::json;

use super::policies::IssuancePolicy;
use super::renewal::{self, CLAIM_LEASE_MS};
use super::requests::ISSUING;
use crate::certificates::{Certificate, IssuanceSource as InventorySource};
use crate::plugins::*;
use crate::testing::{context_with, MemoryStore, NoPlugins};
use crate::Context;

const NOW_MS: i64 = 1_795_521_600_000;
const DAY_MS: i64 = 86_400_000;
const WORKSPACE: &str = "ws_a";
const CA_ID: i64 = 3;
/// Far above the ids the fake store allocates.
const OLD: i64 = 1_000;

#[derive(Clone, Copy, PartialEq)]
enum Ca {
    Issues,
    Pending,
    Fails,
}

struct Fixture {
    store: MemoryStore,
    issued: Arc<Mutex<Vec<IssueRequest>>>,
    evaluated: Arc<Mutex<Vec<EvaluationRequest>>>,
    ca: Ca,
    /// What the one policy (when set) answers.
    policy: Option<Decision>,
}

fn certificate(id: i64, lifetime_days: i64, expires_in_days: i64) -> Certificate {
    Certificate {
        common_name: format!("renew{id}.example.com"),
        issuer: "CN=CA".into(),
        subject: format!("CN=renew{id}.example.com"),
        serial_number: format!("{id:02x}"),
        not_before: NOW_MS + (expires_in_days - lifetime_days) * DAY_MS,
        expires_at: NOW_MS + expires_in_days * DAY_MS,
        subject_alt_names: vec![format!("dns:renew{id}.example.com")],
        issuance_source: InventorySource::External,
        auto_renewal: true,
        metadata: json!({ "team": "edge" }),
        issuance_template: Some("web_server".into()),
        has_private_key: true,
        created_at: 0,
        updated_at: 0,
        ..crate::testing::certificate_row(WORKSPACE, id, Some(CA_ID))
    }
}

impl Fixture {
    fn new(ca: Ca, certificates: Vec<Certificate>) -> Fixture {
        let store = MemoryStore::default();
        store.put_ca(crate::testing::active_ca(WORKSPACE, CA_ID, "scripted"));
        for certificate in certificates {
            store.put_certificate(certificate);
        }
        Fixture { store, issued: Arc::default(), evaluated: Arc::default(), ca, policy: None }
    }

    fn with_policy(mut self, decision: Decision) -> Fixture {
        self.store.put_policy(IssuancePolicy {
            id: 900,
            workspace_id: WORKSPACE.into(),
            name: "gate".into(),
            policy_type: "scripted".into(),
            config: json!({}),
            position: 0,
            enabled: true,
            created_at: 0,
            updated_at: 0,
        });
        self.policy = Some(decision);
        self
    }

    fn at(&self, at_ms: i64) -> Context {
        let (issued, ca) = (self.issued.clone(), self.ca);
        let issue: crate::testing::IssueScript = Arc::new(move |_target: CallTarget, request: IssueRequest| {
            let issued = issued.clone();
            async move {
                issued.lock().unwrap_or_else(|_| panic!("lock")).push(request.clone());
                match ca {
                    Ca::Issues => Ok(IssueOutcome::Issued(IssuedCertificate {
                        certificate_der: super::run_tests::sign(&request.csr_der),
                        chain_der: vec![],
                        ca_reference: None,
                    })),
                    Ca::Pending => Ok(IssueOutcome::Pending(PendingIssue {
                        reference: "order/1".into(),
                        retry_after_secs: None,
                        status_message: "validating".into(),
                    })),
                    Ca::Fails => Err(PluginError::Reported {
                        plugin: "fixture.scripted".into(),
                        error: ReportedError::Rejected { message: "the CA refused the order".into() },
                    }),
                }
            }
            .boxed()
        });
        let connector = PluginInfo {
            id: "fixture.scripted".into(),
            version: semver::Version::new(0, 1, 0),
            kind: PluginKind::CaConnector,
            name: "scripted".into(),
            description: String::new(),
            serves: vec!["scripted".into()],
            config_schema: json!({}),
            secret_fields: Vec::new(),
            capabilities: Capabilities { issue: true, ..Capabilities::default() },
            default_issuer_patterns: Vec::new(),
            outbound_hosts: Vec::new(),
        };
        let policy = self.policy.clone().map(|decision| {
            let evaluated = self.evaluated.clone();
            let info =
                PluginInfo { kind: PluginKind::IssuancePolicy, id: "fixture.policy".into(), ..connector.clone() };
            let script: crate::testing::PolicyScript = Arc::new(move |_: &CallTarget, request: &EvaluationRequest| {
                evaluated.lock().unwrap_or_else(|_| panic!("lock")).push(request.clone());
                Ok(decision.clone())
            });
            (info, script)
        });
        let plugins = NoPlugins { issue: Some(issue), connector: Some(connector), policy, ..NoPlugins::default() };
        let now = chrono::DateTime::from_timestamp_millis(at_ms).unwrap_or_default().to_rfc3339();
        context_with(self.store.clone(), &now, plugins)
    }

    fn certificate(&self, id: i64) -> Certificate {
        self.store
            .snapshot()
            .certificates
            .into_iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("certificate {id}"))
    }

    fn calls_to_ca(&self) -> usize {
        self.issued.lock().map(|i| i.len()).unwrap_or_default()
    }
}

#[tokio::test]
async fn a_certificate_inside_its_window_is_renewed_with_the_same_lifetime_and_linked() {
    let fixture = Fixture::new(Ca::Issues, vec![certificate(OLD, 90, 20)]);
    let run = renewal::run(&fixture.at(NOW_MS).issuance_deps(), 10).await.unwrap_or_else(|err| panic!("run: {err}"));
    assert_eq!((run.renewed, run.failed, run.pending), (1, 0, 0));
    let sent = fixture.issued.lock().map(|i| i[0].clone()).unwrap_or_else(|_| panic!("lock"));
    assert_eq!(sent.profile.validity_days, 90, "the lifetime of the certificate it replaces");
    assert_eq!(sent.template.as_deref(), Some("web_server"));
    let old = fixture.certificate(OLD);
    let new_id = old.renewed_by_id.unwrap_or_else(|| panic!("linked to its successor"));
    assert!(!old.auto_renewal, "auto-renewal moves to the successor");
    let new = fixture.certificate(new_id);
    assert!(new.auto_renewal && new.has_private_key, "{new:?}");
    assert_eq!(new.common_name, format!("renew{OLD}.example.com"));
    assert_eq!(new.metadata, json!({ "team": "edge" }));
    let tables = fixture.store.snapshot();
    let events: Vec<_> = tables.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(events, ["certificate.created", "certificate.renewed"]);
}

#[tokio::test]
async fn a_certificate_outside_its_window_is_left_alone() {
    let fixture = Fixture::new(Ca::Issues, vec![certificate(OLD, 90, 45)]);
    let run = renewal::run(&fixture.at(NOW_MS).issuance_deps(), 10).await.unwrap_or_else(|err| panic!("run: {err}"));
    assert_eq!(run, renewal::RenewalRun::default());
    assert_eq!(fixture.calls_to_ca(), 0);
    // Fifteen days on it is inside the 30-day window.
    let run = renewal::run(&fixture.at(NOW_MS + 16 * DAY_MS).issuance_deps(), 10)
        .await
        .unwrap_or_else(|err| panic!("run: {err}"));
    assert_eq!(run.renewed, 1);
}

#[tokio::test]
async fn a_lifetime_longer_than_the_template_allows_now_is_shortened_to_its_maximum() {
    let fixture = Fixture::new(Ca::Issues, vec![certificate(OLD, 2000, 10)]);
    renewal::run(&fixture.at(NOW_MS).issuance_deps(), 10).await.unwrap_or_else(|err| panic!("run: {err}"));
    let max = super::templates::built_in_named("web_server").map(|t| t.max_validity_days).unwrap_or_default();
    let sent = fixture.issued.lock().map(|i| i[0].profile.validity_days).unwrap_or_default();
    assert_eq!(sent, max);
}

#[tokio::test]
async fn a_failed_renewal_is_recorded_and_tried_again_after_the_claim_lease() {
    let fixture = Fixture::new(Ca::Fails, vec![certificate(OLD, 90, 20)]);
    let run = renewal::run(&fixture.at(NOW_MS).issuance_deps(), 10).await.unwrap_or_else(|err| panic!("run: {err}"));
    assert_eq!(run.failed, 1);
    let old = fixture.certificate(OLD);
    assert!(old.renewal_error.as_deref().unwrap_or_default().contains("refused the order"), "{old:?}");
    assert!(old.auto_renewal && old.renewed_by_id.is_none());
    let tables = fixture.store.snapshot();
    assert!(tables.audit.iter().any(|a| a.action == "certificate.renewal_failed"));
    let failed = tables.events.iter().find(|e| e.event_type == "certificate.renewal_failed");
    assert!(failed.is_some_and(|e| e.payload.to_string().contains("refused the order")), "{:?}", tables.events);

    // Claimed: not tried again within the lease, then tried again.
    let soon = renewal::run(&fixture.at(NOW_MS + CLAIM_LEASE_MS - 1).issuance_deps(), 10)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(soon, renewal::RenewalRun::default());
    let later = renewal::run(&fixture.at(NOW_MS + CLAIM_LEASE_MS + 1).issuance_deps(), 10)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(later.failed, 1);
    assert_eq!(fixture.calls_to_ca(), 2);
}

#[tokio::test]
async fn nobody_can_approve_a_renewal_so_a_policy_that_holds_it_fails_it() {
    let reasons = vec![PolicyReason { code: "four_eyes".into(), message: "a person must approve".into() }];
    let fixture =
        Fixture::new(Ca::Issues, vec![certificate(OLD, 90, 20)]).with_policy(Decision::RequireApproval(reasons));
    let run = renewal::run(&fixture.at(NOW_MS).issuance_deps(), 10).await.unwrap_or_else(|err| panic!("run: {err}"));
    assert_eq!(run.failed, 1);
    assert_eq!(fixture.calls_to_ca(), 0);
    let judged = fixture.evaluated.lock().map(|e| e[0].clone()).unwrap_or_else(|_| panic!("lock"));
    assert_eq!((judged.source, judged.requester.kind), (IssuanceSource::Renewal, RequesterKind::System));
    assert!(fixture.store.snapshot().requests.is_empty(), "no approval request for a renewal");
    let event = fixture.store.snapshot().events.into_iter().find(|e| e.event_type == "certificate.renewal_failed");
    assert!(event.is_some_and(|e| e.payload.to_string().contains("APPROVAL_REQUIRED")));
}

#[tokio::test]
async fn a_pending_renewal_parks_an_issuing_request_and_is_not_claimed_while_in_flight() {
    let fixture = Fixture::new(Ca::Pending, vec![certificate(OLD, 90, 20)]);
    let run = renewal::run(&fixture.at(NOW_MS).issuance_deps(), 10).await.unwrap_or_else(|err| panic!("run: {err}"));
    assert_eq!(run.pending, 1);
    let requests = fixture.store.snapshot().requests;
    assert_eq!(requests.len(), 1);
    assert_eq!((requests[0].status, requests[0].renews_certificate_id), (ISSUING, Some(OLD)));
    assert_eq!(requests[0].requested_by, "system:renewal");
    let again = renewal::run(&fixture.at(NOW_MS + CLAIM_LEASE_MS + 1).issuance_deps(), 10)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(again, renewal::RenewalRun::default(), "the renewal in flight is not started twice");
    assert_eq!(fixture.calls_to_ca(), 1);
}
