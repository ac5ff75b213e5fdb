//! ACME Renewal Information (RFC 9773) in the renewal worker, against in-memory fakes: the CA's
//! suggested window, not the expiry-minus-window rule, decides when a certificate is due.

use std::sync::Arc;

use serde_json::json;

use super::renewal::{self, ARI_RETRY_DEFAULT_MS, ARI_RETRY_MAX_MS, ARI_RETRY_MIN_MS, WINDOW_MS};
use crate::audit::Audit;
use crate::cas::CertificateAuthority;
use crate::certificates::Certificate;
use crate::plugins::*;
use crate::testing::{context_with, MemoryStore, NoPlugins};
use crate::Context;

const NOW_MS: i64 = 1_795_521_600_000;
const DAY_MS: i64 = 86_400_000;
const WORKSPACE: &str = "ws_a";
const ARI_CA: i64 = 3;
const PLAIN_CA: i64 = 4;

fn connector(renewal_info: bool) -> PluginInfo {
    PluginInfo {
        id: "fixture.ari".into(),
        version: semver::Version::new(0, 1, 0),
        kind: PluginKind::CaConnector,
        name: "ari".into(),
        description: String::new(),
        serves: vec!["ari".into(), "plain".into()],
        config_schema: json!({}),
        secret_fields: Vec::new(),
        capabilities: Capabilities { issue: true, renewal_info, ..Capabilities::default() },
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

fn ca(id: i64, ca_type: &str) -> CertificateAuthority {
    crate::testing::active_ca(WORKSPACE, id, ca_type)
}

/// An auto-renewing certificate of `ca_id` (its serial names the window the script answers).
fn certificate(id: i64, ca_id: i64, serial: &str, expires_in_days: i64) -> Certificate {
    Certificate {
        common_name: format!("{serial}.example.com"),
        issuer: "CN=CA".into(),
        subject: format!("CN={serial}.example.com"),
        serial_number: serial.into(),
        not_before: NOW_MS - 10 * DAY_MS,
        expires_at: NOW_MS + expires_in_days * DAY_MS,
        auto_renewal: true,
        created_at: NOW_MS - 10 * DAY_MS,
        updated_at: NOW_MS - 10 * DAY_MS,
        ..crate::testing::certificate_row(WORKSPACE, id, Some(ca_id))
    }
}

/// The scripted CA's windows (seconds) per serial: `ended` (a window already over: renew now),
/// `later` (two to three days from now), `none` (no suggestion), `broken` (the call fails).
fn window(certificate: &CertificateRef) -> Result<Option<RenewalWindow>, PluginError> {
    let now = NOW_MS / 1000;
    let day = DAY_MS / 1000;
    let window = |start, end, retry| RenewalWindow { start, end, explanation_url: None, retry_after_secs: retry };
    match certificate.serial_number.as_str() {
        "ended" => Ok(Some(window(now - 2 * day, now - day, Some(60)))),
        "later" => Ok(Some(window(now + 2 * day, now + 3 * day, Some(7 * 86_400)))),
        "none" => Ok(None),
        _ => Err(PluginError::Reported {
            plugin: "fixture.ari".into(),
            error: ReportedError::Upstream { status: Some(503), message: "down".into(), retryable: true },
        }),
    }
}

fn context(store: &MemoryStore, at_ms: i64, renewal_info: bool) -> Context {
    let now = chrono::DateTime::from_timestamp_millis(at_ms).unwrap_or_default().to_rfc3339();
    let plugins = NoPlugins {
        renewal_info: Some(Arc::new(window)),
        connector: Some(connector(renewal_info)),
        ..NoPlugins::default()
    };
    context_with(store.clone(), &now, plugins)
}

/// The ids `claim_renewals` hands the worker at the context's time.
async fn due(ctx: &Context) -> Vec<i64> {
    let now = ctx.now_millis();
    let mut change = ctx.change(Audit::system("test"), None).await.unwrap_or_else(|err| panic!("change: {err}"));
    let claimed = change
        .tx()
        .claim_renewals(now, WINDOW_MS, now - renewal::CLAIM_LEASE_MS, 100)
        .await
        .unwrap_or_else(|err| panic!("claim: {err}"));
    change.commit().await.unwrap_or_else(|err| panic!("commit: {err}"));
    let mut ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    ids
}

fn store() -> MemoryStore {
    let store = MemoryStore::default();
    store.put_ca(ca(ARI_CA, "ari"));
    store.put_ca(ca(PLAIN_CA, "plain"));
    store
}

#[tokio::test]
async fn the_cas_window_decides_when_a_certificate_is_due() {
    let store = store();
    // Far from expiry, but the CA's window is over: due now.
    store.put_certificate(certificate(1, ARI_CA, "ended", 80));
    // Inside the 30-day default window, but the CA suggests two to three days from now.
    store.put_certificate(certificate(2, ARI_CA, "later", 20));
    // No suggestion, or a failing call: the default window applies.
    store.put_certificate(certificate(3, ARI_CA, "none", 20));
    store.put_certificate(certificate(4, ARI_CA, "broken", 20));
    store.put_certificate(certificate(5, ARI_CA, "none", 80));

    let ctx = context(&store, NOW_MS, true);
    renewal::check_renewal_info(&ctx.issuance_deps(), NOW_MS, 50).await.unwrap_or_else(|err| panic!("ari: {err}"));
    let info = store.snapshot().renewal_info;
    assert_eq!(info[&1], (Some(NOW_MS), Some(NOW_MS + ARI_RETRY_MIN_MS)), "window over: now; retry-after floored");
    let (later, next) = info[&2];
    let later = later.unwrap_or_else(|| panic!("a renewal time"));
    assert!((NOW_MS + 2 * DAY_MS..=NOW_MS + 3 * DAY_MS).contains(&later), "inside the window: {later}");
    assert_eq!(next, Some(NOW_MS + ARI_RETRY_MAX_MS), "retry-after capped");
    assert_eq!(info[&3], (None, Some(NOW_MS + ARI_RETRY_DEFAULT_MS)));
    assert_eq!(info[&4], (None, Some(NOW_MS + ARI_RETRY_DEFAULT_MS)), "a failure is asked again at the next check");

    assert_eq!(due(&ctx).await, vec![1, 3, 4]);
    // Asked again a day later, the same window keeps the time picked; not due before it.
    let ctx = context(&store, NOW_MS + DAY_MS, true);
    renewal::check_renewal_info(&ctx.issuance_deps(), NOW_MS + DAY_MS, 50)
        .await
        .unwrap_or_else(|err| panic!("ari: {err}"));
    assert_eq!(store.snapshot().renewal_info[&2].0, Some(later));
    // (1, 3 and 4 were never renewed here: claimed again once their hour's claim has passed.)
    assert_eq!(due(&ctx).await, vec![1, 3, 4]);
    let ctx = context(&store, later - 1, true);
    assert!(!due(&ctx).await.contains(&2));
    let ctx = context(&store, later, true);
    assert!(due(&ctx).await.contains(&2));
}

#[tokio::test]
async fn a_connector_without_renewal_info_keeps_the_default_window() {
    let store = store();
    store.put_certificate(certificate(1, PLAIN_CA, "ended", 80));
    store.put_certificate(certificate(2, PLAIN_CA, "later", 20));
    let ctx = context(&store, NOW_MS, false);
    renewal::check_renewal_info(&ctx.issuance_deps(), NOW_MS, 50).await.unwrap_or_else(|err| panic!("ari: {err}"));
    let info = store.snapshot().renewal_info;
    assert_eq!(info[&1], (None, Some(NOW_MS + ARI_RETRY_MAX_MS)), "not asked; checked again a day later");
    assert_eq!(due(&ctx).await, vec![2]);
}

#[tokio::test]
async fn checks_per_run_are_bounded() {
    let store = store();
    for id in 1..=5 {
        store.put_certificate(certificate(id, ARI_CA, "none", 80));
    }
    let ctx = context(&store, NOW_MS, true);
    renewal::check_renewal_info(&ctx.issuance_deps(), NOW_MS, 2).await.unwrap_or_else(|err| panic!("ari: {err}"));
    assert_eq!(store.snapshot().renewal_info.len(), 2);
    renewal::check_renewal_info(&ctx.issuance_deps(), NOW_MS, 2).await.unwrap_or_else(|err| panic!("ari: {err}"));
    assert_eq!(store.snapshot().renewal_info.len(), 4, "the next run asks the others");
}
