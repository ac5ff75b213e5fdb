//! Use cases of the CA registry over the whole fake of its port (`super::fake`): the periodic
//! health check, statistics, sync and delete.

use std::time::Duration;

use super::service::{self, HealthRun};
use super::{CaStatus, HealthStatus};
use crate::testing::{active_ca, certificate_row, context, owner, MemoryStore};

const NOW: &str = "2026-05-01T10:00:00Z";
const TWO_HOURS_LATER: &str = "2026-05-01T12:00:00Z";
const HOUR: Duration = Duration::from_secs(3600);

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// `ws_a`: CA 1 (active, healthy, one certificate), CA 2 (set aside: disconnected). `ws_b`: CA 3.
fn registry() -> MemoryStore {
    let store = MemoryStore::default();
    let healthy = active_ca("ws_a", 1, "acme");
    let mut set_aside = active_ca("ws_a", 2, "acme");
    set_aside.status = CaStatus::Disconnected;
    set_aside.health_status = HealthStatus::Unknown;
    let mut elsewhere = active_ca("ws_b", 3, "acme");
    elsewhere.health_status = HealthStatus::Unknown;
    for ca in [healthy, set_aside, elsewhere] {
        store.put_ca(ca);
    }
    store.put_certificate(certificate_row("ws_a", 10, Some(1)));
    store
}

fn event_types(store: &MemoryStore) -> Vec<String> {
    store.snapshot().events.into_iter().map(|e| e.event_type).collect()
}

#[tokio::test]
async fn the_health_check_probes_each_connected_ca_once_per_interval_and_reports_only_moves() {
    let store = registry();
    let ctx = context(store.clone(), NOW);
    // No connector is installed here, so every probe fails: error and unhealthy.
    let run = ok(service::check_health(&ctx.ca_deps(), HOUR).await);
    assert_eq!(run, HealthRun { checked: 2, changed: 2 }, "the disconnected CA is left alone");
    let tables = store.snapshot();
    let state = |id: i64| tables.cas.iter().find(|ca| ca.id == id).map(|ca| (ca.status, ca.health_status));
    assert_eq!(state(1), Some((CaStatus::Error, HealthStatus::Unhealthy)));
    assert_eq!(state(2), Some((CaStatus::Disconnected, HealthStatus::Unknown)));
    assert_eq!(state(3), Some((CaStatus::Error, HealthStatus::Unhealthy)));
    let mut emitted = event_types(&store);
    emitted.sort();
    assert_eq!(emitted, ["ca.health_changed", "ca.health_changed", "ca.updated", "ca.updated"]);

    // Within the interval, another replica's run finds nothing due.
    assert_eq!(ok(service::check_health(&context(store.clone(), NOW).ca_deps(), HOUR).await), HealthRun::default());

    // Two hours later both are probed again; nothing moved, so nothing is audited or emitted.
    let audited = store.snapshot().audit.len();
    let later = ok(service::check_health(&context(store.clone(), TWO_HOURS_LATER).ca_deps(), HOUR).await);
    assert_eq!(later, HealthRun { checked: 2, changed: 0 });
    assert_eq!(store.snapshot().audit.len(), audited);
    assert_eq!(event_types(&store).len(), 4);
}

#[tokio::test]
async fn statistics_sync_and_delete_stay_in_the_callers_workspace() {
    let store = registry();
    let ctx = context(store.clone(), NOW);
    let caller = owner("ws_a");
    let stats = ok(service::stats(&ctx.ca_deps(), &caller).await);
    assert_eq!((stats.total, stats.connected, stats.disconnected, stats.healthy), (2, 1, 1, 1));
    assert_eq!(stats.certificates_issued, 1);

    let synced = ok(service::sync(&ctx.ca_deps(), &caller, 1).await);
    assert_eq!(synced.ca.last_sync, Some(ctx.now_millis()));
    let foreign = service::sync(&ctx.ca_deps(), &caller, 3).await;
    assert!(matches!(foreign, Err(crate::Error::NotFound(_))), "ws_b's CA: {foreign:?}");
    assert!(matches!(service::delete(&ctx.ca_deps(), &caller, 3).await, Err(crate::Error::NotFound(_))));

    ok(service::delete(&ctx.ca_deps(), &caller, 1).await);
    let tables = store.snapshot();
    assert_eq!(tables.cas.iter().map(|ca| ca.id).collect::<Vec<_>>(), [2, 3]);
    let kept = tables.certificates.iter().find(|c| c.id == 10).map(|c| c.ca_id);
    assert_eq!(kept, Some(None), "the certificate stays, unlinked from its deleted CA");
    let after = ok(service::stats(&ctx.ca_deps(), &caller).await);
    assert_eq!((after.total, after.certificates_issued), (1, 0));
    let actions: Vec<String> = tables.audit.into_iter().map(|a| a.action).collect();
    assert_eq!(actions, ["ca.synced", "ca.deleted"]);
}
