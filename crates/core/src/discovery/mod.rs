//! Discovery scans. A `ca_certs` scan pages through a CA connector's `list-certificates` and
//! brings what the CA issued into the inventory (new ones created and linked to the CA, known
//! ones updated when the CA says they are revoked). Scans run in the background: the request
//! that starts one returns its id at once; progress is read at `/api/discovery/scans/{id}`.
//!
//! States: `pending` → `running` → `completed` | `failed` (| `cancelled` by a cancel action).
//! A running scan beats a heartbeat; a scan whose heartbeat stopped (its process died) is
//! claimed and rerun by the discovery job of any replica. Imports are idempotent (fingerprint),
//! so a rerun never duplicates.

use std::sync::Arc;

use serde_json::json;

use crate::audit::Audit;
use crate::auth::{Caller, Scope};
use crate::cas::service::{call_target, connector_for, find, INTERNAL};
use crate::certificates::x509::parse_der;
use crate::certificates::{CertificateUpdate, IssuanceSource, NewCertificate};
use crate::context::Context;
use crate::error::{Entity, Error, Result};
use crate::events;
use crate::pagination::{Page, PageRequest};
use crate::ports::StoreError;
use crate::unit_of_work::{Target, UnitOfWork};

pub const CA_CERTS: &str = "ca_certs";
pub const PENDING: &str = "pending";
pub const RUNNING: &str = "running";
pub const COMPLETED: &str = "completed";
pub const FAILED: &str = "failed";
pub const CANCELLED: &str = "cancelled";
const TYPES: [&str; 2] = [CA_CERTS, "tls_endpoints"];
/// A running scan whose heartbeat is older than this is taken over.
pub const STALE_AFTER_MS: i64 = 5 * 60_000;
/// Page size asked of the connector.
const PAGE: u32 = 100;
/// Most certificates one scan imports (a CA with more is scanned in several runs).
const MAX_PER_SCAN: i64 = 100_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub id: i64,
    pub workspace_id: String,
    pub scan_type: String,
    pub ca_id: Option<i64>,
    pub status: String,
    pub found: i64,
    pub new_count: i64,
    pub updated_count: i64,
    pub failed_count: i64,
    pub error: Option<String>,
    pub requested_by: String,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub heartbeat_at: Option<i64>,
}

/// Creates a pending `ca_certs` scan of CA `ca_id` and starts it in the background.
pub async fn start_ca_scan(ctx: &Arc<Context>, caller: &Caller, ca_id: i64) -> Result<Scan> {
    caller.require(Scope::CasWrite)?;
    let ca = find(ctx, &caller.workspace_id, ca_id).await?;
    let info = connector_for(ctx, &ca.workspace_id, &ca.ca_type)?;
    if !info.capabilities.discover {
        return Err(Error::UnsupportedCa(format!("CA type `{}` cannot list its certificates", ca.ca_type)));
    }
    let actor = Audit::of(caller);
    let mut change = ctx.change(actor.clone(), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let row = Scan {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        scan_type: CA_CERTS.into(),
        ca_id: Some(ca_id),
        status: PENDING.into(),
        found: 0,
        new_count: 0,
        updated_count: 0,
        failed_count: 0,
        error: None,
        requested_by: format!("{}:{}", actor.actor_type, actor.actor_id),
        created_at: at,
        started_at: None,
        finished_at: None,
        heartbeat_at: None,
    };
    let scan = change.tx().insert_scan(&row).await?;
    change.audit(
        "discovery.scan_started",
        Target::new("discovery_scan", scan.id),
        json!({ "type": CA_CERTS, "caId": ca_id }),
    );
    change.commit().await?;
    let (ctx, id) = (ctx.clone(), scan.id);
    tokio::spawn(async move {
        if let Err(err) = claim_and_run(&ctx, Some(id)).await {
            tracing::warn!(scan = id, error = %err, "discovery scan failed to run");
        }
    });
    Ok(scan)
}

/// Claims one runnable scan (`only`, else any pending one or a stale running one) and runs it.
/// Returns whether one ran.
pub async fn claim_and_run(ctx: &Context, only: Option<i64>) -> Result<bool> {
    let now = ctx.now_millis();
    let mut change = ctx.change(Audit::system("discovery"), None).await?;
    let claimed = change.tx().claim_scan(only, now, now - STALE_AFTER_MS).await?;
    change.commit().await?;
    let Some(scan) = claimed else { return Ok(false) };
    run(ctx, scan).await?;
    Ok(true)
}

async fn run(ctx: &Context, mut scan: Scan) -> Result<()> {
    let outcome = import_from_ca(ctx, &mut scan).await;
    let now = ctx.now_millis();
    let (status, error) = match &outcome {
        Ok(()) => (COMPLETED, None),
        Err(err) => (FAILED, Some(err.to_string())),
    };
    scan.status = status.into();
    scan.error = error;
    scan.finished_at = Some(now);
    let mut change = ctx.change(Audit::system("discovery"), Some(&scan.workspace_id)).await?;
    if change.tx().finish_scan(&scan).await? {
        let data = json!({ "scanId": scan.id, "type": scan.scan_type, "caId": scan.ca_id, "status": scan.status,
            "found": scan.found, "new": scan.new_count, "updated": scan.updated_count, "failed": scan.failed_count, "error": scan.error });
        change.emit(events::DISCOVERY_SCAN_COMPLETED, data);
        if scan.new_count > 0 {
            change.emit(
                events::DISCOVERY_NEW_CERTIFICATES_FOUND,
                json!({ "scanId": scan.id, "caId": scan.ca_id, "count": scan.new_count }),
            );
        }
    }
    change.commit().await
}

async fn import_from_ca(ctx: &Context, scan: &mut Scan) -> Result<()> {
    let ca_id = scan.ca_id.ok_or_else(|| Error::Internal("a ca_certs scan without a CA".into()))?;
    let ca = find(ctx, &scan.workspace_id, ca_id).await?;
    let info = connector_for(ctx, &ca.workspace_id, &ca.ca_type)?;
    let target = call_target(ctx, &ca, &info)?;
    let source = if ca.ca_type == INTERNAL { IssuanceSource::Internal } else { IssuanceSource::External };
    let (mut cursor, mut seen) = (None, 0i64);
    scan.found = 0;
    scan.new_count = 0;
    scan.updated_count = 0;
    scan.failed_count = 0;
    loop {
        let page = ctx.plugins.host().ca_list_certificates(&target, cursor.take(), PAGE).await?;
        for item in &page.items {
            seen += 1;
            scan.found += 1;
            match import_one(ctx, scan, ca_id, source, item).await {
                Ok(Imported::New) => scan.new_count += 1,
                Ok(Imported::Updated) => scan.updated_count += 1,
                Ok(Imported::Unchanged) => {}
                Err(err) => {
                    scan.failed_count += 1;
                    tracing::info!(scan = scan.id, error = %err, "a discovered certificate could not be imported");
                }
            }
        }
        let now = ctx.now_millis();
        scan.heartbeat_at = Some(now);
        let mut change = ctx.change(Audit::system("discovery"), Some(&scan.workspace_id)).await?;
        let still_running = change.tx().update_scan_progress(scan).await?;
        change.commit().await?;
        if !still_running {
            // Cancelled meanwhile: stop, keep what was imported.
            return Err(Error::Conflict("the scan was cancelled".into()));
        }
        match page.next_cursor {
            Some(next) if seen < MAX_PER_SCAN && !page.items.is_empty() => cursor = Some(next),
            _ => return Ok(()),
        }
    }
}

enum Imported {
    New,
    Updated,
    Unchanged,
}

async fn import_one(
    ctx: &Context,
    scan: &Scan,
    ca_id: i64,
    source: IssuanceSource,
    item: &crate::plugins::DiscoveredCertificate,
) -> Result<Imported> {
    let parsed = parse_der(&item.certificate_der)?;
    let revoked = item.revocation.map(|r| (r.revoked_at.unwrap_or_default() * 1000, r.reason.as_str()));
    let now = ctx.now_millis();
    let workspace_id = scan.workspace_id.clone();
    let mut change = UnitOfWork::owning(ctx.store.begin().await?, Audit::system("discovery"), Some(&workspace_id), now);
    if let Some(existing) =
        change.tx().find_certificate_by_fingerprint(&workspace_id, &parsed.fingerprint_sha256).await?
    {
        let Some((at, reason)) = revoked.filter(|_| !existing.revoked) else { return Ok(Imported::Unchanged) };
        let update = CertificateUpdate { revoke: Some((at.max(0), reason)), ..Default::default() };
        let certificate = change
            .tx()
            .update_certificate(&workspace_id, existing.id, &update, now)
            .await?
            .ok_or(Error::NotFound(Entity::Certificate))?;
        change
            .audit(
                "certificate.revoked",
                Target::new("certificate", existing.id),
                json!({ "reason": reason, "source": "discovery", "scanId": scan.id }),
            )
            .emit(events::CERTIFICATE_REVOKED, crate::certificates::event_data(&certificate, now));
        change.commit().await?;
        return Ok(Imported::Updated);
    }
    let chain: String = item.chain_der.iter().map(|der| crate::certificates::x509::to_pem(der)).collect();
    let metadata = json!({ "discoveredBy": scan.id });
    let new = NewCertificate {
        workspace_id: &workspace_id,
        parsed: &parsed,
        issuance_source: source,
        auto_renewal: false,
        location: None,
        metadata: &metadata,
        created_at: now,
        expiry_announced: parsed.expires_at <= now,
        ca_id: Some(ca_id),
        chain_pem: (!chain.is_empty()).then_some(chain.as_str()),
        private_key_sealed: None,
        issuance_template: None,
        csr_pem: None,
        renew_before_ms: None,
    };
    let certificate = match change.tx().insert_certificate(&new).await {
        Ok(certificate) => certificate,
        // Imported concurrently (a rerun of the same scan): already there.
        Err(StoreError::Unique(_)) => return Ok(Imported::Unchanged),
        Err(err) => return Err(err.into()),
    };
    let certificate = match revoked {
        Some((at, reason)) => {
            let update = CertificateUpdate { revoke: Some((at.max(0), reason)), ..Default::default() };
            change.tx().update_certificate(&workspace_id, certificate.id, &update, now).await?.unwrap_or(certificate)
        }
        None => certificate,
    };
    change
        .audit(
            "certificate.created",
            Target::new("certificate", certificate.id),
            json!({ "commonName": certificate.common_name, "source": "discovery", "scanId": scan.id, "caId": ca_id }),
        )
        .emit(events::CERTIFICATE_CREATED, crate::certificates::event_data(&certificate, now));
    change.commit().await?;
    Ok(Imported::New)
}

pub async fn list(ctx: &Context, caller: &Caller, scan_type: Option<&str>, page: PageRequest) -> Result<Page<Scan>> {
    caller.require(Scope::CasRead)?;
    let scan_type = scan_type.map(str::trim).filter(|t| !t.is_empty());
    if let Some(t) = scan_type.filter(|t| !TYPES.contains(t)) {
        return Err(Error::invalid_field("type", format!("`{t}` is not one of {}", TYPES.join(", "))));
    }
    Ok(ctx.store.list_scans(&caller.workspace_id, scan_type, page).await?)
}

pub async fn get(ctx: &Context, caller: &Caller, id: i64) -> Result<Scan> {
    caller.require(Scope::CasRead)?;
    ctx.store.find_scan(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::DiscoveryScan))
}

/// Cancels a pending or running scan; what it imported stays.
pub async fn cancel(ctx: &Context, caller: &Caller, id: i64) -> Result<Scan> {
    caller.require(Scope::CasWrite)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let scan = change.tx().cancel_scan(&caller.workspace_id, id, at).await?;
    let scan = match scan {
        Some(scan) => scan,
        None => {
            let current =
                ctx.store.find_scan(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::DiscoveryScan))?;
            return Err(Error::Conflict(format!(
                "scan {id} is {}; only pending or running scans can be cancelled",
                current.status
            )));
        }
    };
    change.audit("discovery.scan_cancelled", Target::new("discovery_scan", id), json!({}));
    change.emit(events::DISCOVERY_SCAN_COMPLETED, json!({ "scanId": id, "type": scan.scan_type, "status": CANCELLED }));
    change.commit().await?;
    Ok(scan)
}
