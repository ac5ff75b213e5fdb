//! Pending issuance against in-memory fakes: a connector that answers "pending" leaves an
//! `issuing` request; the poller completes it once (certificate, request and audit in one job),
//! reschedules what is still pending or retryable, and fails what cannot issue.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use serde_json::json;

use super::requests::{self, CertificateRequest, FAILED, ISSUED, ISSUING};
use super::{issue, pending, IssueInput, Outcome};
use crate::cas::CertificateAuthority;
use crate::error::Error;
use crate::plugins::*;
use crate::ports::Store;
use crate::testing::{context_with, owner, MemoryStore, NoPlugins};
use crate::Context;

const NOW_MS: i64 = 1_795_521_600_000;
const WORKSPACE: &str = "ws_a";
const CA_ID: i64 = 3;

/// What the scripted CA answers to `poll-issue`, in order (the last one repeats).
#[derive(Clone)]
enum Answer {
    Pending,
    /// A certificate for the CSR's key, signed by a throwaway issuer.
    Issue,
    /// A certificate for another key.
    IssueForeign,
    Unavailable,
    Rejected,
}

struct Fixture {
    store: MemoryStore,
    answers: Arc<Mutex<Vec<Answer>>>,
    /// (reference, idempotency key) of every poll.
    polls: Arc<Mutex<Vec<(String, String)>>>,
    issued_keys: Arc<Mutex<Vec<String>>>,
}

fn connector() -> PluginInfo {
    PluginInfo {
        id: "fixture.pending".into(),
        version: semver::Version::new(0, 1, 0),
        kind: PluginKind::CaConnector,
        name: "pending".into(),
        description: String::new(),
        serves: vec!["pending".into()],
        config_schema: json!({}),
        secret_fields: Vec::new(),
        capabilities: Capabilities { issue: true, ..Capabilities::default() },
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

fn ca() -> CertificateAuthority {
    crate::testing::active_ca(WORKSPACE, CA_ID, "pending")
}

/// A certificate for the CSR's public key (or for a fresh key), made natively with rcgen.
fn certificate_for(csr_der: &[u8], foreign: bool) -> Vec<u8> {
    let issuer_key = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
    let mut issuer_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|err| panic!("{err}"));
    issuer_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = issuer_params.self_signed(&issuer_key).unwrap_or_else(|err| panic!("issuer: {err}"));
    if foreign {
        let other = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
        let params =
            rcgen::CertificateParams::new(vec!["slow.example.com".to_string()]).unwrap_or_else(|e| panic!("{e}"));
        return params
            .signed_by(&other, &issuer, &issuer_key)
            .unwrap_or_else(|err| panic!("sign: {err}"))
            .der()
            .to_vec();
    }
    let der = rustls_pki_types::CertificateSigningRequestDer::from(csr_der.to_vec());
    rcgen::CertificateSigningRequestParams::from_der(&der)
        .unwrap_or_else(|err| panic!("csr: {err}"))
        .signed_by(&issuer, &issuer_key)
        .unwrap_or_else(|err| panic!("sign: {err}"))
        .der()
        .to_vec()
}

impl Fixture {
    /// A context over the fixture's store and scripts, its clock `seconds` after `NOW_MS`.
    fn at(&self, seconds: i64) -> Context {
        let now = chrono::DateTime::from_timestamp_millis(NOW_MS + seconds * 1000).unwrap_or_default().to_rfc3339();
        let issue_script: crate::testing::IssueScript = {
            let issued_keys = self.issued_keys.clone();
            Arc::new(move |_target: CallTarget, request: IssueRequest| {
                let issued_keys = issued_keys.clone();
                async move {
                    issued_keys.lock().unwrap_or_else(|_| panic!("lock")).push(request.idempotency_key.clone());
                    Ok(IssueOutcome::Pending(PendingIssue {
                        reference: format!("order/{}", request.idempotency_key),
                        retry_after_secs: Some(5),
                        status_message: "validating dns-01 for slow.example.com".into(),
                    }))
                }
                .boxed()
            })
        };
        let poll_script: crate::testing::PollScript = {
            let (answers, polls) = (self.answers.clone(), self.polls.clone());
            Arc::new(move |reference: String, request: IssueRequest| {
                let (answers, polls) = (answers.clone(), polls.clone());
                async move {
                    polls
                        .lock()
                        .unwrap_or_else(|_| panic!("lock"))
                        .push((reference.clone(), request.idempotency_key.clone()));
                    let answer = {
                        let mut answers = answers.lock().unwrap_or_else(|_| panic!("lock"));
                        if answers.len() > 1 {
                            answers.remove(0)
                        } else {
                            answers[0].clone()
                        }
                    };
                    let issued = |der| {
                        Ok(IssueOutcome::Issued(IssuedCertificate {
                            certificate_der: der,
                            chain_der: vec![],
                            ca_reference: None,
                        }))
                    };
                    match answer {
                        Answer::Pending => Ok(IssueOutcome::Pending(PendingIssue {
                            reference,
                            retry_after_secs: None,
                            status_message: "still validating".into(),
                        })),
                        Answer::Issue => issued(certificate_for(&request.csr_der, false)),
                        Answer::IssueForeign => issued(certificate_for(&request.csr_der, true)),
                        Answer::Unavailable => Err(PluginError::Reported {
                            plugin: "fixture.pending".into(),
                            error: ReportedError::Upstream {
                                status: Some(503),
                                message: "down".into(),
                                retryable: true,
                            },
                        }),
                        Answer::Rejected => Err(PluginError::Reported {
                            plugin: "fixture.pending".into(),
                            error: ReportedError::Rejected { message: "the CA refused the order".into() },
                        }),
                    }
                }
                .boxed()
            })
        };
        let plugins = NoPlugins {
            issue: Some(issue_script),
            poll: Some(poll_script),
            connector: Some(connector()),
            ..NoPlugins::default()
        };
        context_with(self.store.clone(), &now, plugins)
    }
}

fn fixture(answers: Vec<Answer>) -> (Context, Fixture) {
    let store = MemoryStore::default();
    store.put_ca(ca());
    let fixture = Fixture {
        store,
        answers: Arc::new(Mutex::new(answers)),
        polls: Arc::new(Mutex::new(Vec::new())),
        issued_keys: Arc::new(Mutex::new(Vec::new())),
    };
    (fixture.at(0), fixture)
}

/// The same store and scripts `seconds` later (the poller's clock).
fn later(fixture: &Fixture, seconds: i64) -> Context {
    fixture.at(seconds)
}

async fn open(ctx: &Context, generated_key: bool) -> CertificateRequest {
    let input = IssueInput {
        ca_id: Some(CA_ID),
        common_name: Some("slow.example.com".into()),
        csr: (!generated_key).then(super::ledger_tests::caller_csr),
        ..IssueInput::default()
    };
    match issue(&ctx.issuance_deps(), &owner(WORKSPACE), input).await.unwrap_or_else(|err| panic!("issue: {err}")) {
        Outcome::Issuing(request) => *request,
        other => panic!("an issuing request expected: {other:?}"),
    }
}

fn actions(store: &MemoryStore) -> Vec<String> {
    store.snapshot().audit.iter().map(|a| a.action.clone()).collect()
}

fn request(store: &MemoryStore, id: i64) -> CertificateRequest {
    store.snapshot().requests.into_iter().find(|r| r.id == id).unwrap_or_else(|| panic!("request {id}"))
}

#[tokio::test]
async fn a_pending_answer_opens_an_issuing_request_with_the_order_sealed() {
    let (ctx, fixture) = fixture(vec![Answer::Issue]);
    let opened = open(&ctx, true).await;

    assert_eq!(opened.status, ISSUING);
    assert_eq!(opened.status_message.as_deref(), Some("validating dns-01 for slow.example.com"));
    assert_eq!(opened.poll_at, Some(NOW_MS + 5_000), "the CA's retry-after");
    assert_eq!((opened.issuing_since, opened.poll_attempts), (Some(NOW_MS), 0));
    assert_eq!(opened.requested_by, "user:usr_test");
    let sealed = opened.order_sealed.clone().unwrap_or_default();
    assert!(!sealed.is_empty() && !sealed.contains("PRIVATE KEY") && !sealed.contains("order/"), "sealed: {sealed}");
    assert!(fixture.store.snapshot().certificates.is_empty());
    assert_eq!(actions(&fixture.store), ["certificate_request.issuing"]);
    let listed = requests::list(
        &ctx.issuance_deps(),
        &owner(WORKSPACE),
        Some(ISSUING.as_str()),
        crate::pagination::PageRequest::new(None, None, None, 20).unwrap_or_else(|e| panic!("{e}")),
    )
    .await
    .unwrap_or_else(|err| panic!("list: {err}"));
    assert_eq!(listed.items.len(), 1);
    // Another workspace sees nothing.
    let other = requests::get(&ctx.issuance_deps(), &owner("ws_b"), opened.id)
        .await
        .map(|_| ())
        .expect_err("another workspace");
    assert!(matches!(other, Error::NotFound(_)), "{other:?}");
}

#[tokio::test]
async fn the_poller_issues_once_with_the_same_request_and_completes_the_request_in_the_same_job() {
    let (ctx, fixture) = fixture(vec![Answer::Pending, Answer::Issue]);
    let opened = open(&ctx, true).await;

    // Not due yet: nothing is polled.
    let early = pending::poll(&ctx.issuance_deps(), "poller-a", 10).await.unwrap_or_else(|err| panic!("poll: {err}"));
    assert_eq!(early, pending::PollRun::default());

    let ctx = later(&fixture, 10);
    let first = pending::poll(&ctx.issuance_deps(), "poller-a", 10).await.unwrap_or_else(|err| panic!("poll: {err}"));
    assert_eq!((first.pending, first.issued), (1, 0), "{first:?}");
    let waiting = request(&fixture.store, opened.id);
    assert_eq!(waiting.status, ISSUING);
    assert_eq!(waiting.status_message.as_deref(), Some("still validating"));
    assert_eq!(waiting.poll_attempts, 1);
    assert_eq!(waiting.poll_at, Some(NOW_MS + 10_000 + pending::FIRST_BACKOFF_MS), "back-off without retry-after");

    let ctx = later(&fixture, 60);
    let commits_before = fixture.store.snapshot().commits;
    let second = pending::poll(&ctx.issuance_deps(), "poller-b", 10).await.unwrap_or_else(|err| panic!("poll: {err}"));
    assert_eq!(second.issued, 1, "{second:?}");
    let tables = fixture.store.snapshot();
    // The claim, then one job for the certificate, the request, audit rows and the event.
    assert_eq!(tables.commits - commits_before, 2);
    let done = request(&fixture.store, opened.id);
    assert_eq!(done.status, ISSUED);
    assert_eq!(done.order_sealed, None, "the order (and its generated key) is erased");
    let certificate = tables.certificates.first().unwrap_or_else(|| panic!("a certificate"));
    assert_eq!(done.certificate_id, Some(certificate.id));
    assert!(certificate.has_private_key, "the key generated at submission went with the certificate");
    assert_eq!(
        actions(&fixture.store),
        ["certificate_request.issuing", "certificate.issued", "certificate_request.issued"]
    );
    assert_eq!(tables.events.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>(), ["certificate.created"]);

    // Every poll sent the order's reference and the issuance's idempotency key.
    let key = fixture.issued_keys.lock().map(|k| k[0].clone()).unwrap_or_default();
    let polls = fixture.polls.lock().map(|p| p.clone()).unwrap_or_default();
    assert_eq!(polls, vec![(format!("order/{key}"), key.clone()), (format!("order/{key}"), key)]);

    let again = pending::poll(&later(&fixture, 3600).issuance_deps(), "poller-c", 10)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(again, pending::PollRun::default(), "an issued request is never polled again");
    assert_eq!(fixture.store.snapshot().certificates.len(), 1);
}

#[tokio::test]
async fn a_certificate_for_another_key_fails_the_request_and_stores_nothing() {
    let (ctx, fixture) = fixture(vec![Answer::IssueForeign]);
    let opened = open(&ctx, false).await;

    let run =
        pending::poll(&later(&fixture, 10).issuance_deps(), "poller", 10).await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(run.failed, 1, "{run:?}");
    let failed = request(&fixture.store, opened.id);
    assert_eq!(failed.status, FAILED);
    assert!(failed.error.as_deref().unwrap_or_default().contains("public key is not the CSR's"), "{failed:?}");
    assert!(fixture.store.snapshot().certificates.is_empty());
    assert_eq!(actions(&fixture.store), ["certificate_request.issuing", "certificate_request.failed"]);
}

#[tokio::test]
async fn a_refusal_fails_and_an_outage_is_retried_until_the_order_is_a_day_old() {
    let (ctx, fixture) = fixture(vec![Answer::Rejected]);
    let refused = open(&ctx, true).await;
    pending::poll(&later(&fixture, 10).issuance_deps(), "poller", 10).await.unwrap_or_else(|err| panic!("{err}"));
    let refused = request(&fixture.store, refused.id);
    assert_eq!(refused.status, FAILED);
    assert!(refused.error.as_deref().unwrap_or_default().contains("refused the order"), "{refused:?}");
    assert_eq!(refused.order_sealed, None);

    *fixture.answers.lock().unwrap_or_else(|_| panic!("lock")) = vec![Answer::Unavailable];
    let down = open(&ctx, true).await;
    let run =
        pending::poll(&later(&fixture, 10).issuance_deps(), "poller", 10).await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(run.retrying, 1, "{run:?}");
    let retrying = request(&fixture.store, down.id);
    assert_eq!(retrying.status, ISSUING);
    assert!(retrying.error.as_deref().unwrap_or_default().contains("down"), "the last failure shows: {retrying:?}");
    assert!(retrying.poll_at > Some(NOW_MS + 10_000));

    let day = pending::RETRY_GIVE_UP_MS / 1000;
    let run = pending::poll(&later(&fixture, day + 60).issuance_deps(), "poller", 10)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(run.failed, 1, "{run:?}");
    assert_eq!(request(&fixture.store, down.id).status, FAILED);
}

#[tokio::test]
async fn a_claimed_request_is_not_claimed_again_until_its_lease_ends() {
    let (ctx, fixture) = fixture(vec![Answer::Pending]);
    let opened = open(&ctx, true).await;
    let at = NOW_MS + 10_000;
    let mut tx = Store::begin(&fixture.store).await.unwrap_or_else(|err| panic!("begin: {err}"));
    let first = tx.claim_issuing(at, "a", at + pending::LEASE_MS, 10).await.unwrap_or_default();
    let second = tx.claim_issuing(at, "b", at + pending::LEASE_MS, 10).await.unwrap_or_default();
    assert_eq!((first.len(), second.len()), (1, 0));
    // Only the holder may write the outcome.
    let done = CertificateRequest { status: FAILED, ..first[0].clone() };
    assert!(tx.finish_poll(&done, "b").await.unwrap_or_default().is_none());
    let after_lease = at + pending::LEASE_MS;
    let taken_over = tx.claim_issuing(after_lease, "b", after_lease + pending::LEASE_MS, 10).await.unwrap_or_default();
    assert_eq!(taken_over.iter().map(|r| r.id).collect::<Vec<_>>(), [opened.id]);
    assert!(tx.finish_poll(&done, "a").await.unwrap_or_default().is_none(), "a lost its lease");
    assert!(tx.finish_poll(&done, "b").await.unwrap_or_default().is_some());
    drop(ctx);
}
