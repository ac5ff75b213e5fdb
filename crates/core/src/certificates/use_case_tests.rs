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
        &ctx.certificate_deps(),
        &caller,
        Registration { certificate: self_signed("api.example.com"), ..Default::default() },
    )
    .await
    .unwrap_or_else(|err| panic!("register: {err}"));

    let revoked = crate::lifecycle::revoke(&ctx.lifecycle_deps(), &caller, registered.id, Some("keyCompromise".into()))
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
    let first = certificates::register(
        &ctx.certificate_deps(),
        &caller,
        Registration { certificate: pem.clone(), ..Default::default() },
    )
    .await
    .unwrap_or_else(|err| panic!("register: {err}"));
    crate::lifecycle::revoke(&ctx.lifecycle_deps(), &caller, first.id, None)
        .await
        .unwrap_or_else(|err| panic!("revoke: {err}"));
    let before = store.snapshot();

    let again = crate::lifecycle::revoke(&ctx.lifecycle_deps(), &caller, first.id, None).await;
    assert!(matches!(again, Err(Error::Validation { .. })), "{again:?}");
    let duplicate = certificates::register(
        &ctx.certificate_deps(),
        &caller,
        Registration { certificate: pem, ..Default::default() },
    )
    .await;
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
        &ctx.certificate_deps(),
        &owner("ws_a"),
        Registration { certificate: self_signed("mine.example.com"), ..Default::default() },
    )
    .await
    .unwrap_or_else(|err| panic!("register: {err}"));
    let theirs = owner("ws_b");
    assert!(matches!(certificates::get(&ctx.certificate_deps(), &theirs, mine.id).await, Err(Error::NotFound(_))));
    assert!(matches!(
        crate::lifecycle::revoke(&ctx.lifecycle_deps(), &theirs, mine.id, None).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(certificates::delete(&ctx.certificate_deps(), &theirs, mine.id).await, Err(Error::NotFound(_))));
    assert_eq!(store.snapshot().audit.len(), 1, "only the registration is audited");
}

/// A self-signed certificate for `name` valid until midnight UTC of `(year, month, day)`.
fn expiring_on(name: &str, (year, month, day): (i32, u8, u8)) -> String {
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).unwrap_or_else(|err| panic!("params: {err}"));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(year, month, day);
    let key = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
    params.self_signed(&key).unwrap_or_else(|err| panic!("sign: {err}")).pem()
}

async fn register_pem(ctx: &crate::context::Context, workspace: &str, pem: String) -> crate::certificates::Certificate {
    certificates::register(
        &ctx.certificate_deps(),
        &owner(workspace),
        Registration { certificate: pem, ..Default::default() },
    )
    .await
    .unwrap_or_else(|err| panic!("register: {err}"))
}

/// `certificate.expiring` when a certificate enters the 30-day window, `certificate.expired`
/// when it passes its end: once each, however often the scan runs, across workspaces; a
/// certificate registered already expired was never in the inventory unexpired, so no event.
#[tokio::test]
async fn the_expiry_scan_announces_each_transition_once() {
    let store = MemoryStore::default();
    let at = |now: &str| context(store.clone(), now);
    let ctx = at("2026-11-24T12:00:00Z");
    let soon = register_pem(&ctx, "ws_a", expiring_on("soon.example.com", (2026, 12, 4))).await;
    let later = register_pem(&ctx, "ws_b", expiring_on("later.example.com", (2027, 1, 23))).await;
    register_pem(&ctx, "ws_a", expiring_on("gone.example.com", (2026, 11, 20))).await;
    let events_before = store.snapshot().events.len();

    let scan = |now: &'static str| {
        let ctx = at(now);
        async move {
            certificates::scan_expiry(&ctx.certificate_deps())
                .await
                .unwrap_or_else(|err| panic!("scan at {now}: {err}"))
        }
    };
    let counts = |s: certificates::ExpiryScan| (s.expiring, s.expired);
    assert_eq!(counts(scan("2026-11-24T12:00:00Z").await), (1, 0), "soon enters the window");
    assert_eq!(counts(scan("2026-11-24T12:00:00Z").await), (0, 0), "nothing twice");
    assert_eq!(counts(scan("2026-12-05T12:00:00Z").await), (0, 1), "soon has expired");
    assert_eq!(counts(scan("2026-12-25T12:00:00Z").await), (1, 0), "later enters the window");
    assert_eq!(counts(scan("2027-02-01T00:00:00Z").await), (0, 1), "later has expired");
    assert_eq!(counts(scan("2027-02-01T00:00:00Z").await), (0, 0));

    let tables = store.snapshot();
    let announced: Vec<(&str, &str, i64)> = tables.events[events_before..]
        .iter()
        .map(|e| {
            let id = e.payload["data"]["certificateId"].as_i64().unwrap_or_else(|| panic!("{:?}", e.payload));
            (e.event_type.as_str(), e.workspace_id.as_str(), id)
        })
        .collect();
    assert_eq!(
        announced,
        [
            ("certificate.expiring", "ws_a", soon.id),
            ("certificate.expired", "ws_a", soon.id),
            ("certificate.expiring", "ws_b", later.id),
            ("certificate.expired", "ws_b", later.id),
        ]
    );
}

/// The dashboard's figures and the list's filters over one inventory: statuses at the
/// context's instant, the seven-day count, facets, the day-by-day outlook, and a search.
#[tokio::test]
async fn statistics_outlook_and_filters_agree_on_one_inventory() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), "2026-11-24T12:00:00Z");
    let caller = owner("ws_a");
    let in_3_days = register_pem(&ctx, "ws_a", expiring_on("three.example.com", (2026, 11, 28))).await;
    register_pem(&ctx, "ws_a", expiring_on("twenty.example.com", (2026, 12, 14))).await;
    register_pem(&ctx, "ws_a", expiring_on("year.example.com", (2027, 11, 1))).await;
    let revoked = register_pem(&ctx, "ws_a", expiring_on("revoked.example.com", (2027, 6, 1))).await;
    register_pem(&ctx, "ws_a", expiring_on("past.example.com", (2026, 10, 1))).await;
    register_pem(&ctx, "ws_b", expiring_on("theirs.example.com", (2026, 11, 28))).await;
    crate::lifecycle::revoke(&ctx.lifecycle_deps(), &caller, revoked.id, None)
        .await
        .unwrap_or_else(|err| panic!("revoke: {err}"));

    let stats = certificates::statistics(&ctx.certificate_deps(), &caller)
        .await
        .unwrap_or_else(|err| panic!("statistics: {err}"));
    assert_eq!(stats.total, 5);
    assert_eq!(
        stats.by_status,
        [(Status::Active, 1), (Status::Expiring, 2), (Status::Expired, 1), (Status::Revoked, 1)]
    );
    assert_eq!(stats.expiring_within_7_days, 1);
    assert_eq!(stats.by_key_algorithm.iter().map(|(_, n)| n).sum::<i64>(), 5);

    let outlook = certificates::expiry_outlook(&ctx.certificate_deps(), &caller, 30)
        .await
        .unwrap_or_else(|err| panic!("outlook: {err}"));
    assert_eq!(outlook.len(), 30);
    // Midnight of the 28th is 3.5 days away (day 3); of 14 December, 19.5 days (day 19).
    let busy: Vec<(usize, i64)> = outlook.iter().copied().enumerate().filter(|(_, n)| *n > 0).collect();
    assert_eq!(busy, [(3, 1), (19, 1)]);

    let list = |status: Option<&str>, search: Option<&str>, sort: Option<&str>| {
        let query = certificates::ListQuery {
            status: status.map(Into::into),
            search: search.map(Into::into),
            sort: sort.map(Into::into),
            ..Default::default()
        };
        let ctx = &ctx;
        let caller = &caller;
        async move {
            let page = crate::pagination::PageRequest::new(None, Some(50), None, 50).unwrap_or_else(|e| panic!("{e}"));
            let found = certificates::list(&ctx.certificate_deps(), caller, query, page)
                .await
                .unwrap_or_else(|err| panic!("list: {err}"));
            found.items.into_iter().map(|c| c.common_name).collect::<Vec<_>>()
        }
    };
    assert_eq!(list(Some("expiring"), None, Some("expiresAt")).await, ["three.example.com", "twenty.example.com"]);
    assert_eq!(list(None, Some("TWENTY"), None).await, ["twenty.example.com"]);
    assert_eq!(list(Some("revoked"), None, None).await, ["revoked.example.com"]);
    assert_eq!(list(None, None, Some("-expiresAt")).await.first().map(String::as_str), Some("year.example.com"));
    assert_eq!(in_3_days.common_name, "three.example.com");
}

/// A machine identity counts the certificates assigned to it; deleting it keeps them, unlinked.
#[tokio::test]
async fn deleting_a_machine_identity_keeps_its_certificates() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), "2026-11-24T12:00:00Z");
    let caller = owner("ws_a");
    let certificate = register_pem(&ctx, "ws_a", self_signed("node.example.com")).await;
    let identity = certificates::create_identity(
        &ctx.certificate_deps(),
        &caller,
        certificates::NewIdentity {
            name: "node-1".into(),
            kind: Some("server".into()),
            description: None,
            metadata: None,
        },
    )
    .await
    .unwrap_or_else(|err| panic!("identity: {err}"));
    certificates::assign_identity(&ctx.certificate_deps(), &caller, certificate.id, identity.id)
        .await
        .unwrap_or_else(|err| panic!("assign: {err}"));
    let read = certificates::get_identity(&ctx.certificate_deps(), &caller, identity.id)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(read.certificate_count, 1);
    assert!(matches!(
        certificates::get_identity(&ctx.certificate_deps(), &owner("ws_b"), identity.id).await,
        Err(Error::NotFound(_))
    ));

    certificates::delete_identity(&ctx.certificate_deps(), &caller, identity.id)
        .await
        .unwrap_or_else(|err| panic!("delete: {err}"));
    assert!(matches!(
        certificates::get_identity(&ctx.certificate_deps(), &caller, identity.id).await,
        Err(Error::NotFound(_))
    ));
    let kept = certificates::get(&ctx.certificate_deps(), &caller, certificate.id)
        .await
        .unwrap_or_else(|err| panic!("get: {err}"));
    assert_eq!(kept.machine_identity_id, None);
}
