//! Discovery import against the area's fake port and a scripted connector: new and known
//! certificates, pages, revocations, failure isolation and the events a scan emits. The clock
//! is fixed; nothing sleeps.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::{claim_and_run, Scan, CA_CERTS, COMPLETED, FAILED, PENDING};
use crate::certificates::{Certificate, IssuanceSource, Status};
use crate::plugins::{
    Capabilities, CertificatePage, DiscoveredCertificate, PluginError, PluginInfo, PluginKind, RevocationInfo,
    RevocationReason,
};
use crate::testing::{active_ca, context_with, ListScript, MemoryStore, NoPlugins};

const WORKSPACE: &str = "ws_scan";
const CA_ID: i64 = 500;
const SCAN_ID: i64 = 900;
const NOW: &str = "2026-11-24T12:00:00Z";

fn connector() -> PluginInfo {
    PluginInfo {
        id: "fixture.lister".into(),
        version: semver::Version::new(0, 1, 0),
        kind: PluginKind::CaConnector,
        name: "lister".into(),
        description: String::new(),
        serves: vec!["fixture".into()],
        config_schema: json!({}),
        secret_fields: Vec::new(),
        capabilities: Capabilities { discover: true, ..Capabilities::default() },
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

fn der(name: &str) -> Vec<u8> {
    rcgen::generate_simple_self_signed(vec![name.to_string()])
        .map(|certified| certified.cert.der().to_vec())
        .unwrap_or_else(|err| panic!("rcgen: {err}"))
}

fn listed(der: Vec<u8>, reference: &str) -> DiscoveredCertificate {
    DiscoveredCertificate {
        certificate_der: der,
        chain_der: Vec::new(),
        ca_reference: Some(reference.into()),
        revocation: None,
    }
}

fn revoked(mut item: DiscoveredCertificate, at_secs: i64, reason: RevocationReason) -> DiscoveredCertificate {
    item.revocation = Some(RevocationInfo { revoked_at: Some(at_secs), reason });
    item
}

fn pending_scan() -> Scan {
    Scan {
        id: SCAN_ID,
        workspace_id: WORKSPACE.into(),
        scan_type: CA_CERTS.into(),
        ca_id: Some(CA_ID),
        targets: Vec::new(),
        status: PENDING,
        found: 0,
        new_count: 0,
        updated_count: 0,
        failed_count: 0,
        total: None,
        done: 0,
        failures: Vec::new(),
        error: None,
        requested_by: "user:usr_test".into(),
        created_at: 0,
        started_at: None,
        finished_at: None,
        heartbeat_at: None,
    }
}

/// A store with the workspace's CA (of `ca_type`) and a pending scan of it.
fn store_with_scan(ca_type: &str) -> MemoryStore {
    let store = MemoryStore::default();
    store.put_ca(active_ca(WORKSPACE, CA_ID, ca_type));
    store.put_scan(pending_scan());
    store
}

/// The connector lists `pages` one after the other (cursor = the next page's index); the
/// cursors it was asked with are recorded.
fn paged(pages: Vec<Vec<DiscoveredCertificate>>) -> (ListScript, Arc<Mutex<Vec<Option<String>>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let script: ListScript = Arc::new(move |cursor: Option<String>| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(cursor.clone());
        }
        let index: usize = cursor.as_deref().and_then(|c| c.parse().ok()).unwrap_or(0);
        let items = pages.get(index).cloned().unwrap_or_default();
        let next_cursor = (index + 1 < pages.len()).then(|| (index + 1).to_string());
        Ok(CertificatePage { items, next_cursor })
    });
    (script, asked)
}

async fn scan(store: &MemoryStore, list: ListScript) -> Scan {
    let plugins = NoPlugins { connector: Some(connector()), list_certificates: Some(list), ..NoPlugins::default() };
    let ctx = context_with(store.clone(), NOW, plugins);
    let ran = claim_and_run(&ctx.discovery_deps(), Some(SCAN_ID)).await.unwrap_or_else(|err| panic!("scan: {err}"));
    assert!(ran, "the pending scan was claimed");
    store.snapshot().scans.into_iter().find(|s| s.id == SCAN_ID).unwrap_or_else(|| panic!("the scan"))
}

async fn rescan(store: &MemoryStore, list: ListScript) -> Scan {
    store.edit(|tables| {
        if let Some(scan) = tables.scans.iter_mut().find(|s| s.id == SCAN_ID) {
            *scan = pending_scan();
        }
    });
    scan(store, list).await
}

fn events(store: &MemoryStore) -> Vec<(String, Value)> {
    store.snapshot().events.into_iter().map(|e| (e.event_type, e.payload["data"].clone())).collect()
}

fn event_types(store: &MemoryStore) -> Vec<String> {
    events(store).into_iter().map(|(t, _)| t).collect()
}

fn certificates(store: &MemoryStore) -> Vec<Certificate> {
    store.snapshot().certificates
}

#[tokio::test]
async fn a_ca_scan_brings_new_certificates_in_with_their_audit_rows_and_events() {
    let store = store_with_scan("fixture");
    let (list, _) = paged(vec![vec![listed(der("a.example.com"), "ref-a"), listed(der("b.example.com"), "ref-b")]]);

    let done = scan(&store, list).await;

    assert_eq!((done.status, done.found, done.new_count, done.updated_count), (COMPLETED, 2, 2, 0));
    let imported = certificates(&store);
    assert_eq!(imported.len(), 2);
    for certificate in &imported {
        assert_eq!(certificate.ca_id, Some(CA_ID), "the scanned CA owns what it lists");
        assert_eq!(certificate.issuance_source, IssuanceSource::External);
        assert_eq!(certificate.metadata, json!({ "discoveredBy": SCAN_ID }));
        assert!(!certificate.auto_renewal);
    }
    let audit = store.snapshot().audit;
    let created: Vec<&Value> = audit.iter().filter(|a| a.action == "certificate.created").map(|a| &a.details).collect();
    assert_eq!(created.len(), 2);
    assert!(created.iter().all(|d| d["source"] == "discovery" && d["scanId"] == SCAN_ID && d["caId"] == CA_ID));
    assert_eq!(
        event_types(&store),
        ["certificate.created", "certificate.created", "discovery.scan_completed", "discovery.new_certificates_found"]
    );
    let found = events(&store).pop().map(|(_, data)| data).unwrap_or_default();
    assert_eq!(found["count"], 2);
    assert_eq!(found["scanId"], SCAN_ID);
}

#[tokio::test]
async fn a_rescan_of_known_certificates_changes_nothing_and_announces_nothing_new() {
    let store = store_with_scan("fixture");
    let page = vec![listed(der("a.example.com"), "ref-a"), listed(der("b.example.com"), "ref-b")];
    let (list, _) = paged(vec![page.clone()]);
    scan(&store, list).await;
    let before = store.snapshot();

    let (list, _) = paged(vec![page]);
    let again = rescan(&store, list).await;

    assert_eq!((again.found, again.new_count, again.updated_count, again.failed_count), (2, 0, 0, 0));
    let after = store.snapshot();
    assert_eq!(after.certificates.len(), 2, "imports are idempotent (fingerprint)");
    let new_events: Vec<String> = after.events[before.events.len()..].iter().map(|e| e.event_type.clone()).collect();
    assert_eq!(new_events, ["discovery.scan_completed"], "no certificate events, no new_certificates_found");
}

#[tokio::test]
async fn a_scan_follows_the_connector_s_cursor_through_every_page() {
    let store = store_with_scan("fixture");
    let (list, asked) = paged(vec![
        vec![listed(der("p1.example.com"), "p1"), listed(der("p2.example.com"), "p2")],
        vec![listed(der("p3.example.com"), "p3")],
        vec![listed(der("p4.example.com"), "p4")],
    ]);

    let done = scan(&store, list).await;

    assert_eq!((done.found, done.new_count), (4, 4));
    let cursors = asked.lock().map(|a| a.clone()).unwrap_or_default();
    assert_eq!(cursors, [None, Some("1".into()), Some("2".into())]);
    assert_eq!(certificates(&store).len(), 4);
}

#[tokio::test]
async fn a_certificate_the_ca_lists_as_revoked_arrives_revoked_with_one_created_event() {
    let store = store_with_scan("fixture");
    let revoked_at = 1_790_000_000;
    let (list, _) = paged(vec![vec![revoked(
        listed(der("gone.example.com"), "gone"),
        revoked_at,
        RevocationReason::KeyCompromise,
    )]]);

    let done = scan(&store, list).await;

    assert_eq!(done.new_count, 1);
    let certificate = certificates(&store).pop().unwrap_or_else(|| panic!("imported"));
    assert!(certificate.revoked);
    assert_eq!(certificate.revoked_at, Some(revoked_at * 1000));
    assert_eq!(certificate.revocation_reason.as_deref(), Some("keyCompromise"));
    let certificate_events: Vec<(String, Value)> =
        events(&store).into_iter().filter(|(t, _)| t.starts_with("certificate.")).collect();
    assert_eq!(certificate_events.len(), 1, "{certificate_events:?}");
    assert_eq!(certificate_events[0].0, "certificate.created");
    assert_eq!(certificate_events[0].1["status"], Status::Revoked.as_str(), "created carries the status it arrives in");
}

#[tokio::test]
async fn a_known_certificate_the_ca_now_lists_as_revoked_is_revoked_with_its_reason() {
    let store = store_with_scan("fixture");
    let certificate = der("later.example.com");
    let (list, _) = paged(vec![vec![listed(certificate.clone(), "later")]]);
    scan(&store, list).await;

    let (list, _) =
        paged(vec![vec![revoked(listed(certificate, "later"), 1_790_000_000, RevocationReason::Superseded)]]);
    let again = rescan(&store, list).await;

    assert_eq!((again.new_count, again.updated_count), (0, 1));
    let stored = certificates(&store).pop().unwrap_or_else(|| panic!("the certificate"));
    assert!(stored.revoked);
    let (_, data) = events(&store)
        .into_iter()
        .find(|(t, _)| t == "certificate.revoked")
        .unwrap_or_else(|| panic!("certificate.revoked"));
    assert_eq!(data["reason"], "superseded", "certificate.revoked carries its reason on the scan's path too");
    assert_eq!(data["certificateId"], stored.id);
    let audit = store.snapshot().audit;
    let row = audit.iter().find(|a| a.action == "certificate.revoked").unwrap_or_else(|| panic!("audited"));
    assert_eq!(row.details, json!({ "reason": "superseded", "source": "discovery", "scanId": SCAN_ID }));
}

#[tokio::test]
async fn a_known_certificate_without_a_ca_is_linked_to_the_scanned_one() {
    let store = store_with_scan("fixture");
    let certificate = der("registered.example.com");
    let parsed = trellis_pki::x509::parse_der(&certificate).unwrap_or_else(|err| panic!("{err}"));
    let ctx = crate::testing::context(store.clone(), NOW);
    let caller = crate::testing::owner(WORKSPACE);
    let registration = crate::certificates::Registration { certificate: parsed.pem.clone(), ..Default::default() };
    let registered = crate::certificates::register(&ctx.certificate_deps(), &caller, registration)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(registered.ca_id, None);

    let (list, _) = paged(vec![vec![listed(certificate, "known")]]);
    let done = scan(&store, list).await;

    assert_eq!((done.new_count, done.updated_count), (0, 1));
    assert_eq!(certificates(&store)[0].ca_id, Some(CA_ID));
    let audit = store.snapshot().audit;
    let row = audit.iter().find(|a| a.action == "certificate.updated").unwrap_or_else(|| panic!("audited"));
    assert_eq!(row.details["caId"], CA_ID);
}

#[tokio::test]
async fn one_certificate_that_cannot_be_imported_fails_alone() {
    let store = store_with_scan("fixture");
    let (list, _) = paged(vec![vec![
        listed(der("first.example.com"), "first"),
        listed(b"not a certificate".to_vec(), "broken"),
        listed(der("third.example.com"), "third"),
    ]]);

    let done = scan(&store, list).await;

    assert_eq!(done.status, COMPLETED, "a bad certificate does not fail the scan");
    assert_eq!((done.found, done.new_count, done.failed_count), (3, 2, 1));
    assert_eq!(done.failures.len(), 1);
    assert_eq!(done.failures[0].target, "broken", "the failure names the CA's reference");
    assert!(done.failures[0].message.starts_with("cannot import the certificate"), "{:?}", done.failures);
    let names: Vec<String> = certificates(&store).into_iter().map(|c| c.common_name).collect();
    assert_eq!(names.len(), 2, "the page was imported again one by one: the others landed ({names:?})");
}

#[tokio::test]
async fn the_inventory_s_size_bounds_hold_for_discovered_certificates() {
    let store = store_with_scan("fixture");
    let sans: Vec<String> = (0..1001).map(|i| format!("host{i}.example.com")).collect();
    let huge = rcgen::generate_simple_self_signed(sans)
        .map(|certified| certified.cert.der().to_vec())
        .unwrap_or_else(|err| panic!("rcgen: {err}"));
    let (list, _) = paged(vec![vec![listed(huge, "huge"), listed(der("fine.example.com"), "fine")]]);

    let done = scan(&store, list).await;

    assert_eq!((done.new_count, done.failed_count), (1, 1));
    assert!(done.failures[0].message.contains("subject alternative names"), "{:?}", done.failures);
    assert_eq!(certificates(&store).len(), 1);
}

#[tokio::test]
async fn a_connector_that_fails_fails_the_scan_and_says_so() {
    let store = store_with_scan("fixture");
    let list: ListScript = Arc::new(|_| Err(PluginError::NotFound { id: "the CA is down".into() }));

    let done = scan(&store, list).await;

    assert_eq!(done.status, FAILED);
    assert!(done.error.is_some());
    let (kind, data) = events(&store).pop().unwrap_or_else(|| panic!("an event"));
    assert_eq!(kind, "discovery.scan_completed");
    assert_eq!(data["status"], FAILED.as_str());
    assert!(store.snapshot().audit.iter().any(|a| a.action == "discovery.scan_failed"));
}

#[tokio::test]
async fn certificates_of_an_internal_or_vault_ca_count_as_theirs() {
    for (ca_type, source) in [("internal", IssuanceSource::Internal), ("vault_pki", IssuanceSource::Vault)] {
        let store = store_with_scan(ca_type);
        let mut info = connector();
        info.serves = vec![ca_type.into()];
        let (list, _) = paged(vec![vec![listed(der("owned.example.com"), "owned")]]);
        let plugins = NoPlugins { connector: Some(info), list_certificates: Some(list), ..NoPlugins::default() };
        let ctx = context_with(store.clone(), NOW, plugins);
        claim_and_run(&ctx.discovery_deps(), Some(SCAN_ID)).await.unwrap_or_else(|err| panic!("scan: {err}"));
        let certificate = certificates(&store).pop().unwrap_or_else(|| panic!("imported"));
        assert_eq!(certificate.issuance_source, source, "{ca_type}");
    }
}

#[tokio::test]
async fn a_scans_findings_are_every_certificate_it_saw_new_updated_or_unchanged() {
    use super::FindingOutcome::{New, Unchanged, Updated};
    let store = store_with_scan("fixture");
    let known = der("known.example.com");
    let parsed = trellis_pki::x509::parse_der(&known).unwrap_or_else(|err| panic!("{err}"));
    let ctx = crate::testing::context(store.clone(), NOW);
    let caller = crate::testing::owner(WORKSPACE);
    let registration = crate::certificates::Registration { certificate: parsed.pem.clone(), ..Default::default() };
    let registered = crate::certificates::register(&ctx.certificate_deps(), &caller, registration)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let page = vec![listed(known, "known"), listed(der("fresh.example.com"), "fresh")];
    let (list, _) = paged(vec![page.clone()]);
    scan(&store, list).await;

    let window = crate::pagination::PageRequest { limit: 50, offset: 0 };
    let outcomes = |page: &crate::pagination::Page<super::ScanFinding>| -> Vec<(String, super::FindingOutcome)> {
        // rcgen names its certificates by their SANs only.
        page.items.iter().map(|f| (f.certificate.subject_alt_names.join(","), f.outcome)).collect()
    };
    let found =
        super::findings(&ctx.discovery_deps(), &caller, SCAN_ID, window).await.unwrap_or_else(|err| panic!("{err}"));
    // The known one gained the scanned CA's link: updated.
    assert_eq!(
        outcomes(&found),
        [("DNS:known.example.com".to_string(), Updated), ("DNS:fresh.example.com".to_string(), New)]
    );
    assert_eq!(found.items[0].certificate.id, registered.id);
    assert_eq!(found.total, 2);

    // A rerun of the same scan that changes nothing keeps each one's strongest outcome; a page
    // past the end is empty.
    let (list, _) = paged(vec![page.clone()]);
    rescan(&store, list).await;
    let later = crate::pagination::PageRequest { limit: 1, offset: 1 };
    let second =
        super::findings(&ctx.discovery_deps(), &caller, SCAN_ID, later).await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!((second.total, outcomes(&second)), (2, vec![("DNS:fresh.example.com".to_string(), New)]));

    // A second scan of the same CA lists both, as already known and left unchanged.
    const SECOND: i64 = SCAN_ID + 1;
    store.put_scan(Scan { id: SECOND, ..pending_scan() });
    let (list, _) = paged(vec![page]);
    let plugins = NoPlugins { connector: Some(connector()), list_certificates: Some(list), ..NoPlugins::default() };
    let run = context_with(store.clone(), NOW, plugins);
    assert!(claim_and_run(&run.discovery_deps(), Some(SECOND)).await.unwrap_or_else(|err| panic!("scan: {err}")));
    let again =
        super::findings(&ctx.discovery_deps(), &caller, SECOND, window).await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        outcomes(&again),
        [("DNS:known.example.com".to_string(), Unchanged), ("DNS:fresh.example.com".to_string(), Unchanged)]
    );

    // A scan from before the record (migration 0580) is listed from its audit rows: what it
    // added or changed.
    store.edit(|tables| tables.scan_certificates.retain(|(_, scan, _, _)| *scan != SCAN_ID));
    let traced =
        super::findings(&ctx.discovery_deps(), &caller, SCAN_ID, window).await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        outcomes(&traced),
        [("DNS:known.example.com".to_string(), Updated), ("DNS:fresh.example.com".to_string(), New)]
    );

    // Another workspace does not see the scan.
    let stranger = crate::testing::owner("ws_other");
    assert!(super::findings(&ctx.discovery_deps(), &stranger, SCAN_ID, window).await.is_err());
}
