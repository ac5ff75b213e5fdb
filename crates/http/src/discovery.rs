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
use trellis_core::discovery::{self, Scan};
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
    /// `ca_certs` (or `tls_endpoints`).
    #[serde(rename = "type")]
    scan_type: String,
    ca_id: Option<i64>,
    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    status: String,
    /// Certificates seen so far, new to the inventory, updated (e.g. revoked at the CA), failed to import.
    found: i64,
    new: i64,
    updated: i64,
    failed: i64,
    error: Option<String>,
    requested_by: String,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    /// The last sign of life of a running scan.
    heartbeat_at: Option<String>,
}

fn scan_dto(s: Scan) -> ScanDto {
    ScanDto {
        id: s.id,
        scan_type: s.scan_type,
        ca_id: s.ca_id,
        status: s.status,
        found: s.found,
        new: s.new_count,
        updated: s.updated_count,
        failed: s.failed_count,
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
    Ok(list(discovery::list(&ctx, &caller, filters.scan_type.as_deref(), page.request()?).await?, scan_dto))
}

/// One scan, with its progress.
#[utoipa::path(get, path = "/api/discovery/scans/{id}", tag = "discovery", responses((status = 200, body = Data<ScanDto>)))]
async fn get_scan(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(scan_dto(discovery::get(&ctx, &caller, numeric_id(&id)?).await?)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartBody {
    /// `ca_certs` (`tls_endpoints` arrives with the connectors).
    #[serde(rename = "type")]
    #[schema(pattern = "^ca_certs$")]
    scan_type: String,
    /// The CA to scan.
    ca_id: Option<i64>,
}

/// Starts a scan (runs in the background).
#[utoipa::path(post, path = "/api/discovery/scans", tag = "discovery", request_body = StartBody,
    responses((status = 201, body = Data<ScanDto>)))]
async fn start_scan(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<StartBody>,
) -> ApiResult<Response> {
    if body.scan_type != discovery::CA_CERTS {
        return Err(Error::invalid_field("type", "only `ca_certs` scans can be started in this version").into());
    }
    let ca_id = body.ca_id.ok_or_else(|| Error::invalid_field("caId", "is required for a ca_certs scan"))?;
    Ok(created(scan_dto(discovery::start_ca_scan(&ctx, &caller, ca_id).await?)))
}

/// Cancels a pending or running scan; what it already imported stays.
#[utoipa::path(post, path = "/api/discovery/scans/{id}/cancel", tag = "discovery",
    responses((status = 200, body = Data<ScanDto>), (status = 409, description = "Already finished")))]
async fn cancel_scan(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(scan_dto(discovery::cancel(&ctx, &caller, numeric_id(&id)?).await?)))
}
