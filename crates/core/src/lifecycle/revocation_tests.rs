//! Revocation against in-memory fakes: the CA first (its connector, scripted), then the internal
//! CA's ledger and the inventory in one transaction; a template that requires approval holds the
//! revocation (failing closed when the template cannot be read) until someone else approves.
//! Also the auto-renewal switch, which needs a CA that can issue again.

use std::sync::{Arc, Mutex};

use serde_json::json;

use super::{revocation_requests, revoke, set_auto_renewal, Revocation};
use crate::caller::{Actor, Caller, Role};
use crate::certificates::revocation_requests::{FAILED, PENDING, REJECTED};
use crate::certificates::Certificate;
use crate::error::Error;
use crate::issuance::templates::StoredTemplate;
use crate::pki::IssuedRecord;
use crate::plugins::*;
use crate::testing::{context_with, MemoryStore, NoPlugins};
use crate::Context;

const NOW: &str = "2026-11-28T12:00:00Z";
const WORKSPACE: &str = "ws_a";
const CA_ID: i64 = 3;
const CERTIFICATE_ID: i64 = 40;

/// What the scripted CA does with a revocation.
#[derive(Clone, Copy, PartialEq)]
enum CaRevokes {
    Yes,
    /// The connector declares no `revoke`.
    Unsupported,
    /// The CA cannot be reached.
    Down,
}

struct Fixture {
    store: MemoryStore,
    revoked_at_ca: Arc<Mutex<Vec<RevokeRequest>>>,
    ca: Arc<Mutex<CaRevokes>>,
    /// The connector can issue (auto-renewal needs it).
    can_issue: bool,
}

fn member(id: &str) -> Caller {
    Caller {
        actor: Actor::User { id: id.into(), email: format!("{id}@example.com") },
        workspace_id: WORKSPACE.into(),
        scopes: Role::Member.scopes(),
        instance_admin: false,
        request_id: format!("req_{id}"),
    }
}

/// A real certificate's PEM (the ledger is matched by its bytes) and its serial, lowercase hex.
fn pem_and_serial() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
    let mut params =
        rcgen::CertificateParams::new(vec!["revoked.example.com".to_string()]).unwrap_or_else(|err| panic!("{err}"));
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x0a, 0x1b, 0x2c, 0x3d]));
    let certificate = params.self_signed(&key).unwrap_or_else(|err| panic!("certificate: {err}"));
    (certificate.pem(), "0a1b2c3d".into())
}

fn certificate(ca_id: Option<i64>, template: Option<&str>) -> Certificate {
    let (pem, _) = pem_and_serial();
    Certificate {
        common_name: "revoked.example.com".into(),
        issuer: "CN=CA".into(),
        subject: "CN=revoked.example.com".into(),
        serial_number: "0A:1B:2C:3D".into(),
        not_before: 0,
        expires_at: i64::MAX / 2,
        fingerprint_sha256: "0".repeat(64),
        subject_alt_names: vec!["dns:revoked.example.com".into()],
        certificate_pem: pem,
        issuance_template: template.map(str::to_owned),
        created_at: 0,
        updated_at: 0,
        ..crate::testing::certificate_row(WORKSPACE, CERTIFICATE_ID, ca_id)
    }
}

impl Fixture {
    fn new(certificate: Certificate) -> Fixture {
        let store = MemoryStore::default();
        store.put_ca(crate::testing::active_ca(WORKSPACE, CA_ID, "scripted"));
        store.put_certificate(certificate);
        store.edit(|tables| {
            tables.templates.push(StoredTemplate {
                id: 700,
                workspace_id: WORKSPACE.into(),
                name: "guarded".into(),
                body: json!({ "revocationRequiresApproval": true }),
                created_at: 0,
                updated_at: 0,
            })
        });
        Fixture { store, revoked_at_ca: Arc::default(), ca: Arc::new(Mutex::new(CaRevokes::Yes)), can_issue: true }
    }

    fn ctx(&self) -> Context {
        let ca = *self.ca.lock().unwrap_or_else(|_| panic!("lock"));
        let revoked = self.revoked_at_ca.clone();
        let script: crate::testing::RevokeScript = Arc::new(move |request: &RevokeRequest| {
            if ca == CaRevokes::Down {
                return Err(PluginError::Reported {
                    plugin: "fixture.scripted".into(),
                    error: ReportedError::Upstream { status: Some(503), message: "down".into(), retryable: true },
                });
            }
            revoked.lock().unwrap_or_else(|_| panic!("lock")).push(request.clone());
            Ok(())
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
            capabilities: Capabilities {
                revoke: ca != CaRevokes::Unsupported,
                issue: self.can_issue,
                ..Capabilities::default()
            },
            default_issuer_patterns: Vec::new(),
            outbound_hosts: Vec::new(),
        };
        let plugins = NoPlugins { connector: Some(connector), revoke: Some(script), ..NoPlugins::default() };
        context_with(self.store.clone(), NOW, plugins)
    }

    fn stored(&self) -> Certificate {
        self.store
            .snapshot()
            .certificates
            .into_iter()
            .find(|c| c.id == CERTIFICATE_ID)
            .unwrap_or_else(|| panic!("kept"))
    }

    fn calls_to_ca(&self) -> usize {
        self.revoked_at_ca.lock().map(|r| r.len()).unwrap_or_default()
    }

    fn audit_of(&self, action: &str) -> serde_json::Value {
        let tables = self.store.snapshot();
        tables.audit.into_iter().find(|a| a.action == action).map(|a| a.details).unwrap_or_else(|| panic!("{action}"))
    }
}

fn revoked(revocation: Revocation) -> Certificate {
    revocation.revoked().unwrap_or_else(|| panic!("revoked at once"))
}

async fn awaiting(ctx: &Context, caller: &Caller) -> crate::certificates::revocation_requests::RevocationRequest {
    match revoke(&ctx.lifecycle_deps(), caller, CERTIFICATE_ID, Some("superseded".into())).await {
        Ok(Revocation::AwaitingApproval(request)) => *request,
        other => panic!("a revocation awaiting approval expected: {other:?}"),
    }
}

#[tokio::test]
async fn a_certificate_without_a_ca_is_revoked_in_the_inventory_only() {
    let fixture = Fixture::new(certificate(None, None));
    let done = revoked(
        revoke(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, None)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert!(done.revoked);
    assert_eq!(done.revocation_reason.as_deref(), Some("unspecified"));
    assert_eq!(fixture.calls_to_ca(), 0);
    assert_eq!(fixture.audit_of("certificate.revoked")["atCa"], "not_issued_here");
    let events = fixture.store.snapshot().events;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "certificate.revoked");
}

#[tokio::test]
async fn the_ca_revokes_first_with_the_reason_then_the_inventory() {
    let fixture = Fixture::new(certificate(Some(CA_ID), None));
    let done = revoked(
        revoke(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, Some(" keyCompromise ".into()))
            .await
            .unwrap_or_else(|err| panic!("revoke: {err}")),
    );
    assert_eq!(done.revocation_reason.as_deref(), Some("keyCompromise"));
    let sent = fixture.revoked_at_ca.lock().map(|r| r.clone()).unwrap_or_default();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].reason, RevocationReason::KeyCompromise);
    assert_eq!(sent[0].certificate.serial_number, "0a:1b:2c:3d");
    assert_eq!(fixture.audit_of("certificate.revoked")["atCa"], "revoked");
    assert!(
        fixture.store.snapshot().events[0].payload.to_string().contains("keyCompromise"),
        "the event names the reason"
    );
}

#[tokio::test]
async fn a_ca_that_cannot_be_reached_fails_the_revocation_and_the_record_stays() {
    let fixture = Fixture::new(certificate(Some(CA_ID), None));
    *fixture.ca.lock().unwrap_or_else(|_| panic!("lock")) = CaRevokes::Down;
    let failed = revoke(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, None).await.map(|_| ());
    assert!(failed.as_ref().err().and_then(Error::area::<crate::plugins::PluginError>).is_some(), "{failed:?}");
    assert!(!fixture.stored().revoked, "the inventory never claims a revocation the CA did not make");
    let tables = fixture.store.snapshot();
    assert!(tables.audit.is_empty() && tables.events.is_empty());
}

#[tokio::test]
async fn a_connector_that_cannot_revoke_leaves_the_ca_alone() {
    let fixture = Fixture::new(certificate(Some(CA_ID), None));
    *fixture.ca.lock().unwrap_or_else(|_| panic!("lock")) = CaRevokes::Unsupported;
    revoke(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, None)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(fixture.stored().revoked);
    assert_eq!(fixture.calls_to_ca(), 0);
    assert_eq!(fixture.audit_of("certificate.revoked")["atCa"], "unsupported");
}

#[tokio::test]
async fn the_ledger_row_of_exactly_this_certificate_is_revoked_with_it() {
    let fixture = Fixture::new(certificate(None, None));
    let (other_pem, serial) = pem_and_serial();
    let row = |id, ca_id, certificate_pem: String| IssuedRecord {
        id,
        ca_id,
        workspace_id: WORKSPACE.into(),
        serial_number: serial.clone(),
        certificate_pem,
        not_after: crate::clock::UnixMillis::from_secs(i64::MAX / 4),
        issued_at: crate::clock::UnixMillis::default(),
        revoked_at: None,
        revocation_reason: None,
    };
    // The certificate's own row (its CA record gone), and another CA's certificate that happens
    // to use the same serial.
    let ours = fixture.stored().certificate_pem;
    fixture.store.edit(|tables| tables.issued.extend([row(1, 8, ours), row(2, 9, other_pem)]));
    revoke(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, Some("cessationOfOperation".into()))
        .await
        .unwrap_or_else(|err| panic!("revoke: {err}"));
    let ledger = fixture.store.snapshot().issued;
    assert_eq!(ledger[0].revocation_reason.as_deref(), Some("cessationOfOperation"));
    assert!(ledger[0].revoked_at.is_some());
    assert_eq!(ledger[1].revoked_at, None, "another certificate with the same serial stays valid");
}

#[tokio::test]
async fn a_certificate_already_revoked_is_refused() {
    let fixture = Fixture::new(Certificate { revoked: true, revoked_at: Some(1), ..certificate(Some(CA_ID), None) });
    let again = revoke(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, None).await.map(|_| ());
    assert!(matches!(&again, Err(Error::Validation { .. })), "{again:?}");
    assert_eq!(fixture.calls_to_ca(), 0);
}

#[tokio::test]
async fn a_built_in_template_revokes_at_once() {
    let fixture = Fixture::new(certificate(Some(CA_ID), Some("web_server")));
    let done = revoke(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, None).await;
    assert!(matches!(done, Ok(Revocation::Revoked(_))), "{done:?}");
}

#[tokio::test]
async fn a_template_that_requires_approval_holds_the_revocation() {
    let fixture = Fixture::new(certificate(Some(CA_ID), Some("guarded")));
    let request = awaiting(&fixture.ctx(), &member("usr_alice")).await;
    assert_eq!((request.status, request.reason.as_str()), (PENDING, "superseded"));
    assert_eq!(request.requested_by, "user:usr_alice");
    assert!(!fixture.stored().revoked);
    assert_eq!(fixture.calls_to_ca(), 0, "nothing reaches the CA before approval");
    // One waiting request per certificate.
    let twice = revoke(&fixture.ctx().lifecycle_deps(), &member("usr_carol"), CERTIFICATE_ID, None).await.map(|_| ());
    assert!(matches!(twice, Err(Error::Conflict(_))), "{twice:?}");
}

#[tokio::test]
async fn a_template_that_cannot_be_read_requires_approval_fail_closed() {
    let fixture = Fixture::new(certificate(Some(CA_ID), Some("deleted-since")));
    awaiting(&fixture.ctx(), &member("usr_alice")).await;
    assert!(!fixture.stored().revoked);
    assert_eq!(fixture.calls_to_ca(), 0);
}

#[tokio::test]
async fn someone_else_approves_and_the_ca_and_the_inventory_revoke() {
    let fixture = Fixture::new(certificate(Some(CA_ID), Some("guarded")));
    let ctx = fixture.ctx();
    let request = awaiting(&ctx, &member("usr_alice")).await;
    let own = revocation_requests::approve(&ctx.lifecycle_deps(), &member("usr_alice"), request.id).await.map(|_| ());
    assert!(matches!(own, Err(Error::Forbidden(_))), "four eyes: {own:?}");
    let (approved, certificate) = revocation_requests::approve(&ctx.lifecycle_deps(), &member("usr_bob"), request.id)
        .await
        .unwrap_or_else(|err| panic!("approve: {err}"));
    assert_eq!(approved.decided_by.as_deref(), Some("user:usr_bob"));
    assert!(certificate.revoked);
    assert_eq!(certificate.revocation_reason.as_deref(), Some("superseded"));
    assert_eq!(fixture.calls_to_ca(), 1);
    let revoked_by = fixture.store.snapshot().audit.into_iter().find(|a| a.action == "certificate.revoked");
    assert_eq!(revoked_by.map(|a| a.actor_id).as_deref(), Some("usr_bob"));
}

#[tokio::test]
async fn an_approval_the_ca_cannot_carry_out_fails_the_request() {
    let fixture = Fixture::new(certificate(Some(CA_ID), Some("guarded")));
    let request = awaiting(&fixture.ctx(), &member("usr_alice")).await;
    *fixture.ca.lock().unwrap_or_else(|_| panic!("lock")) = CaRevokes::Down;
    let failed =
        revocation_requests::approve(&fixture.ctx().lifecycle_deps(), &member("usr_bob"), request.id).await.map(|_| ());
    assert!(failed.as_ref().err().and_then(Error::area::<crate::plugins::PluginError>).is_some(), "{failed:?}");
    let stored = fixture.store.snapshot().revocation_requests;
    assert_eq!(stored[0].status, FAILED);
    assert!(stored[0].error.as_deref().unwrap_or_default().contains("down"), "{:?}", stored[0]);
    assert!(!fixture.stored().revoked);
}

#[tokio::test]
async fn a_rejected_revocation_leaves_the_certificate_and_lists_by_state() {
    let fixture = Fixture::new(certificate(Some(CA_ID), Some("guarded")));
    let ctx = fixture.ctx();
    let request = awaiting(&ctx, &member("usr_alice")).await;
    let rejected =
        revocation_requests::reject(&ctx.lifecycle_deps(), &member("usr_bob"), request.id, Some("keep it".into()))
            .await
            .unwrap_or_else(|err| panic!("reject: {err}"));
    assert_eq!(rejected.status, REJECTED);
    assert!(!fixture.stored().revoked);
    let page = crate::pagination::PageRequest::new(None, None, None, 20).unwrap_or_else(|err| panic!("{err}"));
    let listed = revocation_requests::list(&ctx.lifecycle_deps(), &member("usr_bob"), Some(REJECTED.as_str()), page)
        .await
        .unwrap_or_else(|err| panic!("list: {err}"));
    assert_eq!(listed.items.len(), 1);
    let unknown =
        revocation_requests::list(&ctx.lifecycle_deps(), &member("usr_bob"), Some("lost"), page).await.map(|_| ());
    assert!(matches!(unknown, Err(Error::Validation { .. })), "{unknown:?}");
}

#[tokio::test]
async fn auto_renewal_needs_a_ca_that_can_issue_again() {
    let mut fixture = Fixture::new(certificate(Some(CA_ID), None));
    fixture.can_issue = false;
    let refused = set_auto_renewal(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, Some(true))
        .await
        .map(|_| ());
    assert!(matches!(refused, Err(Error::UnsupportedCa(_))), "{refused:?}");
    assert!(!fixture.stored().auto_renewal);
    // Turning it off never asks the CA; a toggle turns it on where the CA can issue.
    set_auto_renewal(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, Some(false))
        .await
        .unwrap_or_else(|err| panic!("off: {err}"));
    fixture.can_issue = true;
    let on = set_auto_renewal(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, None)
        .await
        .unwrap_or_else(|err| panic!("toggle: {err}"));
    assert!(on.auto_renewal);
}

#[tokio::test]
async fn an_import_without_a_ca_keeps_auto_renewal_as_a_reminder() {
    let fixture = Fixture::new(certificate(None, None));
    let on = set_auto_renewal(&fixture.ctx().lifecycle_deps(), &member("usr_alice"), CERTIFICATE_ID, Some(true))
        .await
        .unwrap_or_else(|err| panic!("on: {err}"));
    assert!(on.auto_renewal);
}
