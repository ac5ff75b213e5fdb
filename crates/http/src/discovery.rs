//! `/api/discovery/scans`: start, list, read and cancel discovery scans.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::extract::{numeric_id, Authenticated, Json, Query};
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::discovery::{self, Scan, ScanRequest};
use trellis_core::error::Error;

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/discovery/scans", get(list_scans).post(start_scan))
        .route("/api/discovery/scans/{id}", get(get_scan))
        .route("/api/discovery/scans/{id}/cancel", post(cancel_scan))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScanDto {
    id: i64,
    /// `ca_certs` or `tls_endpoints`.
    #[serde(rename = "type")]
    scan_type: String,
    /// The CA scanned (`ca_certs`).
    ca_id: Option<i64>,
    /// The targets as given (`tls_endpoints`; empty for `ca_certs`).
    targets: Vec<String>,
    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    status: String,
    /// Certificates found so far, new to the inventory, updated (revoked at the CA, or linked to
    /// a CA), and targets or certificates that failed (unreachable, refused, not importable).
    found: i64,
    new: i64,
    updated: i64,
    failed: i64,
    /// Endpoints to probe (`tls_endpoints`, ranges expanded; null until the scan starts) and
    /// probed so far.
    total_targets: Option<i64>,
    done_targets: i64,
    /// Percent done (null while unknown: a running `ca_certs` scan).
    progress: Option<i64>,
    /// The first 100 failures, each with its target (`host:port`, or the CA's reference of
    /// the certificate) and why.
    failures: Vec<FailureDto>,
    /// Why the scan failed (state `failed`).
    error: Option<String>,
    requested_by: String,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    /// The last sign of life of a running scan.
    heartbeat_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FailureDto {
    target: String,
    message: String,
}

fn scan_dto(s: Scan) -> ScanDto {
    let progress = s.progress();
    ScanDto {
        id: s.id,
        scan_type: s.scan_type,
        ca_id: s.ca_id,
        targets: s.targets,
        status: s.status.to_string(),
        found: s.found,
        new: s.new_count,
        updated: s.updated_count,
        failed: s.failed_count,
        total_targets: s.total,
        done_targets: s.done,
        progress,
        failures: s.failures.into_iter().map(|f| FailureDto { target: f.target, message: f.message }).collect(),
        error: s.error,
        requested_by: s.requested_by,
        created_at: rfc3339(s.created_at),
        started_at: s.started_at.map(rfc3339),
        finished_at: s.finished_at.map(rfc3339),
        heartbeat_at: s.heartbeat_at.map(rfc3339),
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScanFilters {
    /// `ca_certs` or `tls_endpoints` (empty: all).
    #[serde(rename = "type")]
    #[param(pattern = "^(ca_certs|tls_endpoints|)$")]
    scan_type: Option<String>,
    /// `pending`, `running`, `completed`, `failed` or `cancelled` (empty: all).
    #[param(pattern = "^(pending|running|completed|failed|cancelled|)$")]
    status: Option<String>,
}

/// The workspace's scans, newest first.
#[utoipa::path(get, path = "/api/discovery/scans", tag = "discovery", params(ScanFilters, PageParams),
    responses((status = 200, body = ListEnvelope<ScanDto>)))]
async fn list_scans(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<ScanFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<ScanDto>>> {
    let scans = discovery::list(
        &ctx.discovery_deps(),
        &caller,
        filters.scan_type.as_deref(),
        filters.status.as_deref(),
        page.request()?,
    )
    .await?;
    Ok(list(scans, scan_dto))
}

/// One scan, with its progress.
#[utoipa::path(get, path = "/api/discovery/scans/{id}", tag = "discovery", responses((status = 200, body = Data<ScanDto>)))]
async fn get_scan(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(scan_dto(discovery::get(&ctx.discovery_deps(), &caller, numeric_id(&id)?).await?)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartBody {
    /// `ca_certs` (pages through a CA connector's certificates) or `tls_endpoints` (connects to
    /// `targets` over TLS and records the chains served).
    #[serde(rename = "type")]
    #[schema(pattern = "^(ca_certs|tls_endpoints)$")]
    scan_type: String,
    /// The CA to scan (`ca_certs`, required).
    ca_id: Option<i64>,
    /// Endpoints (`tls_endpoints`, required, 1 to 256 entries): `host:port`, `ip:port`,
    /// `[ipv6]:port`, a bare host (port 443), or a range `10.0.0.0/24:443` (at most a /24, or
    /// an IPv6 /120); at most 4,096 endpoints once ranges are expanded.
    #[schema(min_items = 1, max_items = 256)]
    targets: Option<Vec<String>>,
}

/// Starts a scan (runs in the background).
#[utoipa::path(post, path = "/api/discovery/scans", tag = "discovery", request_body = StartBody,
    responses((status = 201, body = Data<ScanDto>), (status = 400, description = "Invalid type, CA or targets (`details.targets` names each bad target)")))]
async fn start_scan(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<StartBody>,
) -> ApiResult<Response> {
    let request = match body.scan_type.as_str() {
        discovery::CA_CERTS => {
            if body.targets.is_some() {
                return Err(Error::invalid_field("targets", "only a tls_endpoints scan takes targets").into());
            }
            let ca_id = body.ca_id.ok_or_else(|| Error::invalid_field("caId", "is required for a ca_certs scan"))?;
            ScanRequest::CaCerts { ca_id }
        }
        discovery::TLS_ENDPOINTS => {
            if body.ca_id.is_some() {
                return Err(Error::invalid_field("caId", "only a ca_certs scan takes a CA").into());
            }
            let targets =
                body.targets.ok_or_else(|| Error::invalid_field("targets", "is required for a tls_endpoints scan"))?;
            ScanRequest::TlsEndpoints { targets }
        }
        other => {
            return Err(Error::invalid_field("type", format!("`{other}` is not one of ca_certs, tls_endpoints")).into())
        }
    };
    Ok(created(scan_dto(discovery::start(&ctx.discovery_deps(), &caller, request).await?)))
}

/// Cancels a pending or running scan; what it already imported stays.
#[utoipa::path(post, path = "/api/discovery/scans/{id}/cancel", tag = "discovery",
    responses((status = 200, body = Data<ScanDto>), (status = 409, description = "Already finished")))]
async fn cancel_scan(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(scan_dto(discovery::cancel(&ctx.discovery_deps(), &caller, numeric_id(&id)?).await?)))
}
