//! The inventory's use cases against in-memory fakes of the ports: no database, no HTTP.
//! They show that a change, its audit row and its event commit together or not at all.

use crate::certificates::{self, Registration, Status};
use crate::error::Error;
use crate::testing::{context, owner, MemoryStore};

fn self_signed(name: &str) -> String {
    rcgen::generate_simple_self_signed(vec![name.to_string()])
        .map(|certified| certified.cert.pem())
        .unwrap_or_else(|err| panic!("rcgen: {err}"))
}

#[tokio::test]
async fn revoke_records_the_change_its_audit_row_and_its_event_together() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), "2026-11-24T12:00:00Z");
    let caller = owner("ws_a");
    let registered = certificates::register(
        &ctx,
        &caller,
        Registration { certificate: self_signed("api.example.com"), ..Default::default() },
    )
    .await
    .unwrap_or_else(|err| panic!("register: {err}"));

    let revoked = crate::lifecycle::revoke(&ctx, &caller, registered.id, Some("keyCompromise".into()))
        .await
        .unwrap_or_else(|err| panic!("revoke: {err}"))
        .revoked()
        .unwrap_or_else(|| panic!("revocation is not held for approval here"));
    assert_eq!(revoked.status(ctx.clock.now()), Status::Revoked);

    let tables = store.snapshot();
    let actions: Vec<&str> = tables.audit.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(actions, ["certificate.created", "certificate.revoked"]);
    assert!(tables.audit.iter().all(|a| a.request_id.as_deref() == Some("req_test")));
    let events: Vec<&str> = tables.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(events, ["certificate.created", "certificate.revoked"]);
    assert_eq!(tables.events[1].payload["data"]["reason"], "keyCompromise");
    assert_eq!(tables.events[1].payload["workspaceId"], "ws_a");
}

#[tokio::test]
async fn a_refused_change_writes_nothing() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), "2026-11-24T12:00:00Z");
    let caller = owner("ws_a");
    let pem = self_signed("twice.example.com");
    let first = certificates::register(&ctx, &caller, Registration { certificate: pem.clone(), ..Default::default() })
        .await
        .unwrap_or_else(|err| panic!("register: {err}"));
    crate::lifecycle::revoke(&ctx, &caller, first.id, None).await.unwrap_or_else(|err| panic!("revoke: {err}"));
    let before = store.snapshot();

    let again = crate::lifecycle::revoke(&ctx, &caller, first.id, None).await;
    assert!(matches!(again, Err(Error::Validation { .. })), "{again:?}");
    let duplicate =
        certificates::register(&ctx, &caller, Registration { certificate: pem, ..Default::default() }).await;
    assert!(matches!(duplicate, Err(Error::Conflict(_))), "{duplicate:?}");

    let after = store.snapshot();
    assert_eq!(after.audit.len(), before.audit.len());
    assert_eq!(after.events.len(), before.events.len());
    assert_eq!(after.certificates.len(), 1);
}

#[tokio::test]
async fn another_workspace_sees_nothing() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), "2026-11-24T12:00:00Z");
    let mine = certificates::register(
        &ctx,
        &owner("ws_a"),
        Registration { certificate: self_signed("mine.example.com"), ..Default::default() },
    )
    .await
    .unwrap_or_else(|err| panic!("register: {err}"));
    let theirs = owner("ws_b");
    assert!(matches!(certificates::get(&ctx, &theirs, mine.id).await, Err(Error::NotFound(_))));
    assert!(matches!(crate::lifecycle::revoke(&ctx, &theirs, mine.id, None).await, Err(Error::NotFound(_))));
    assert!(matches!(certificates::delete(&ctx, &theirs, mine.id).await, Err(Error::NotFound(_))));
    assert_eq!(store.snapshot().audit.len(), 1, "only the registration is audited");
}
