//! `/api/certificate-authorities/*`, and the public endpoints of every internal CA: its
//! certificate (`/pki/{caId}/ca`), CRL (`/pki/{caId}/crl`) and OCSP responder (`/pki/{caId}/ocsp`).

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::extract::{numeric_id, Authenticated, Json, Query};
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::cas::service::{self as registry, CaInput, CaView};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::error::{Entity, Error};
use trellis_core::pki::PkiCoreError;
use trellis_core::plugins::TestReport;

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/certificate-authorities", get(list_cas).post(create_ca))
        .route("/api/certificate-authorities/stats", get(ca_stats))
        .route("/api/certificate-authorities/{id}", get(get_ca).patch(patch_ca).put(put_ca).delete(delete_ca))
        .route("/api/certificate-authorities/{id}/test", post(test_ca))
        .route("/api/certificate-authorities/{id}/sync", post(sync_ca))
        .route("/api/certificate-authorities/{id}/fetch-certificates", post(fetch_certificates))
        .route("/pki/{ca_id}/crl", get(crl))
        .route("/pki/{ca_id}/ca", get(ca_certificate))
        .route("/pki/{ca_id}/ocsp", post(ocsp_post))
        .route("/pki/{ca_id}/ocsp/{*request}", get(ocsp_get))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaDto {
    id: i64,
    workspace_id: String,
    name: String,
    /// The CA kind, e.g. `internal`, `acme`, `aws_private_ca`.
    #[serde(rename = "type")]
    ca_type: String,
    description: Option<String>,
    url: Option<String>,
    /// `active`, `disconnected` or `error`.
    status: &'static str,
    /// `healthy`, `degraded`, `unhealthy` or `unknown`.
    health_status: &'static str,
    issuer_patterns: Vec<String>,
    /// Type-specific settings; secret members read `********`.
    #[schema(value_type = Object)]
    config: Value,
    last_sync: Option<String>,
    created_at: String,
    updated_at: String,
    /// The CA's own certificate, PEM: internal CAs, on `GET /api/certificate-authorities/{id}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate: Option<String>,
    /// The CA's chain, PEM, its own certificate first and the root last: internal CAs, on
    /// `GET /api/certificate-authorities/{id}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    chain: Vec<String>,
}

fn ca_dto(view: CaView) -> CaDto {
    let ca = view.ca;
    CaDto {
        id: ca.id,
        workspace_id: ca.workspace_id,
        name: ca.name,
        ca_type: ca.ca_type,
        description: ca.description,
        url: ca.url,
        status: ca.status.as_str(),
        health_status: ca.health_status.as_str(),
        issuer_patterns: ca.issuer_patterns,
        config: view.config,
        last_sync: ca.last_sync.map(rfc3339),
        created_at: rfc3339(ca.created_at),
        updated_at: rfc3339(ca.updated_at),
        certificate: view.certificate,
        chain: view.chain,
    }
}

/// Accepts absent (leave alone), `null` (clear) and a value (set).
pub(crate) fn double_option<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaBody {
    /// Required on create and PUT.
    #[schema(min_length = 1, max_length = 200)]
    name: Option<String>,
    /// Required on create.
    #[serde(rename = "type")]
    #[schema(max_length = 64, pattern = "^[a-z0-9_-]+$")]
    ca_type: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, max_length = 2000)]
    description: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    url: Option<Option<String>>,
    /// Legacy name of `url` (create only).
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    endpoint: Option<Option<String>>,
    /// `active` (default), `disconnected` or `error`.
    #[schema(pattern = "^(active|disconnected|error)$")]
    status: Option<String>,
    issuer_patterns: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    config: Option<Value>,
    /// On create: start a `ca_certs` discovery scan of the new CA (its id is returned as `scanId`).
    scan_certificates: Option<bool>,
}

fn ca_input(body: CaBody) -> Result<CaInput, Error> {
    Ok(CaInput {
        name: body.name,
        ca_type: body.ca_type,
        description: body.description,
        url: body.url.or(body.endpoint),
        status: body.status,
        issuer_patterns: body.issuer_patterns,
        config: body.config,
    })
}

/// The workspace's CAs, newest first (default limit 50).
#[utoipa::path(get, path = "/api/certificate-authorities", tag = "certificate-authorities", params(PageParams),
    responses((status = 200, body = ListEnvelope<CaDto>)))]
async fn list_cas(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<CaDto>>> {
    Ok(list(registry::list(&ctx.ca_deps(), &caller, page.request()?).await?, ca_dto))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaStatsDto {
    #[serde(rename = "totalCAs")]
    total_cas: i64,
    #[serde(rename = "connectedCAs")]
    connected_cas: i64,
    #[serde(rename = "disconnectedCAs")]
    disconnected_cas: i64,
    total_certificates_issued: i64,
    #[serde(rename = "healthyCAs")]
    healthy_cas: i64,
}

/// Counts of the workspace's CAs (connected = status `active`).
#[utoipa::path(get, path = "/api/certificate-authorities/stats", tag = "certificate-authorities",
    responses((status = 200, body = Data<CaStatsDto>)))]
async fn ca_stats(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<Value>> {
    let stats = registry::stats(&ctx.ca_deps(), &caller).await?;
    Ok(data(CaStatsDto {
        total_cas: stats.total,
        connected_cas: stats.connected,
        disconnected_cas: stats.disconnected,
        total_certificates_issued: stats.certificates_issued,
        healthy_cas: stats.healthy,
    }))
}

/// One CA.
#[utoipa::path(get, path = "/api/certificate-authorities/{id}", tag = "certificate-authorities",
    responses((status = 200, body = Data<CaDto>)))]
async fn get_ca(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(ca_dto(registry::get(&ctx.ca_deps(), &caller, numeric_id(&id)?).await?)))
}

/// Registers a CA. `type` must be served by an installed connector plugin; `config` is checked
/// by it (an `internal` CA creates its root, intermediate or import here).
#[utoipa::path(post, path = "/api/certificate-authorities", tag = "certificate-authorities", request_body = CaBody,
    responses((status = 201, body = Data<CaDto>)))]
async fn create_ca(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<CaBody>,
) -> ApiResult<Response> {
    let scan = body.scan_certificates.unwrap_or(false);
    let (view, scan_id) =
        trellis_core::lifecycle::create_ca_and_scan(&ctx.lifecycle_deps(), &caller, ca_input(body)?, scan).await?;
    let mut dto = serde_json::to_value(ca_dto(view)).map_err(|err| Error::Internal(err.to_string()))?;
    if let Some(id) = scan_id {
        dto["scanId"] = Value::from(id);
    }
    Ok(created(dto))
}

/// Changes the given fields (config members merge; `********` keeps a secret).
#[utoipa::path(patch, path = "/api/certificate-authorities/{id}", tag = "certificate-authorities", request_body = CaBody,
    responses((status = 200, body = Data<CaDto>)))]
async fn patch_ca(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<CaBody>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(ca_dto(registry::update(&ctx.ca_deps(), &caller, numeric_id(&id)?, ca_input(body)?, false).await?)))
}

/// Replaces the CA's fields (name and type required).
#[utoipa::path(put, path = "/api/certificate-authorities/{id}", tag = "certificate-authorities", request_body = CaBody,
    responses((status = 200, body = Data<CaDto>)))]
async fn put_ca(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<CaBody>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(ca_dto(registry::update(&ctx.ca_deps(), &caller, numeric_id(&id)?, ca_input(body)?, true).await?)))
}

/// Removes the CA; its certificates stay in the inventory without the link.
#[utoipa::path(delete, path = "/api/certificate-authorities/{id}", tag = "certificate-authorities",
    responses((status = 204, description = "Deleted")))]
async fn delete_ca(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    registry::delete(&ctx.ca_deps(), &caller, numeric_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CheckDto {
    name: String,
    /// `pass`, `warn`, `fail` or `skip`.
    status: String,
    message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TestDto {
    success: bool,
    message: String,
    checks: Vec<CheckDto>,
    #[schema(value_type = Object)]
    details: Value,
}

fn test_dto(report: TestReport) -> TestDto {
    TestDto {
        success: report.success,
        message: report.message,
        checks: report
            .checks
            .into_iter()
            .map(|c| CheckDto {
                name: c.name,
                status: serde_json::to_value(c.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                message: c.message,
            })
            .collect(),
        details: report.details,
    }
}

/// Probes the CA through its connector: success → `active`, failure → `error`.
#[utoipa::path(post, path = "/api/certificate-authorities/{id}/test", tag = "certificate-authorities",
    responses((status = 200, body = Data<TestDto>)))]
async fn test_ca(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(test_dto(registry::test(&ctx.ca_deps(), &caller, numeric_id(&id)?).await?)))
}

/// Touches `lastSync` only.
#[utoipa::path(post, path = "/api/certificate-authorities/{id}/sync", tag = "certificate-authorities",
    responses((status = 200, body = Data<CaDto>)))]
async fn sync_ca(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(ca_dto(registry::sync(&ctx.ca_deps(), &caller, numeric_id(&id)?).await?)))
}

/// The DER CRL of an internal CA (RFC 5280), signed at request time; public, as relying
/// parties fetch it without credentials.
#[utoipa::path(get, path = "/pki/{ca_id}/crl", tag = "pki", security(()),
    responses((status = 200, description = "application/pkix-crl"), (status = 404, description = "No internal CA with this id")))]
async fn crl(State(ctx): State<SharedContext>, Path(ca_id): Path<String>) -> ApiResult<Response> {
    let ca_id = numeric_id(&ca_id)?;
    let pki = ctx.pki.as_ref().ok_or(Error::NotFound(Entity::CertificateAuthority))?;
    match pki.crl(ca_id).await {
        Ok(der) => Ok(([(header::CONTENT_TYPE, "application/pkix-crl"), (header::CACHE_CONTROL, "max-age=300")], der)
            .into_response()),
        Err(PkiCoreError::NoAuthority) => Err(Error::NotFound(Entity::CertificateAuthority).into()),
        Err(err) => Err(Error::Internal(err.to_string()).into()),
    }
}

/// The internal CA's certificate and its issuers up to the root (PEM): what relying parties
/// add to their trust store. Public, like the CRL.
#[utoipa::path(get, path = "/pki/{ca_id}/ca", tag = "pki", security(()),
    responses((status = 200, description = "application/x-pem-file"), (status = 404, description = "No internal CA with this id")))]
async fn ca_certificate(State(ctx): State<SharedContext>, Path(ca_id): Path<String>) -> ApiResult<Response> {
    let ca_id = numeric_id(&ca_id)?;
    let pki = ctx.pki.as_ref().ok_or(Error::NotFound(Entity::CertificateAuthority))?;
    match pki.ca_chain(ca_id).await {
        Ok(ca) => {
            let pem: String = ca.chain_der.iter().map(|der| trellis_pki::x509::to_pem(der)).collect();
            Ok(([(header::CONTENT_TYPE, "application/x-pem-file")], pem).into_response())
        }
        Err(PkiCoreError::NoAuthority) => Err(Error::NotFound(Entity::CertificateAuthority).into()),
        Err(err) => Err(Error::Internal(err.to_string()).into()),
    }
}

fn ocsp_response(der: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/ocsp-response"), (header::CACHE_CONTROL, "no-store")], der).into_response()
}

/// OCSP (RFC 6960) for an internal CA: POST an `application/ocsp-request`. Every answer is a
/// 200 `application/ocsp-response`, errors included, as OCSP clients expect.
#[utoipa::path(post, path = "/pki/{ca_id}/ocsp", tag = "pki", security(()),
    request_body(content = Vec<u8>, content_type = "application/ocsp-request"),
    responses((status = 200, description = "application/ocsp-response")))]
async fn ocsp_post(State(ctx): State<SharedContext>, Path(ca_id): Path<String>, body: axum::body::Bytes) -> Response {
    use trellis_core::pki::ocsp;
    let request =
        if body.len() > ocsp::MAX_REQUEST_BYTES { Err(ocsp::OcspError::TooLarge) } else { ocsp::parse_request(&body) };
    ocsp_answer(&ctx, &ca_id, request).await
}

/// OCSP by GET: the base64 DER request as the rest of the path (RFC 6960 appendix A.1).
#[utoipa::path(get, path = "/pki/{ca_id}/ocsp/{request}", tag = "pki", security(()),
    responses((status = 200, description = "application/ocsp-response")))]
async fn ocsp_get(State(ctx): State<SharedContext>, Path((ca_id, request)): Path<(String, String)>) -> Response {
    let request = if request.len() > 4 * trellis_core::pki::ocsp::MAX_REQUEST_BYTES {
        Err(trellis_core::pki::OcspError::TooLarge)
    } else {
        trellis_core::pki::parse_get_request(&request)
    };
    ocsp_answer(&ctx, &ca_id, request).await
}

async fn ocsp_answer(
    ctx: &SharedContext,
    ca_id: &str,
    request: Result<trellis_core::pki::OcspRequest, trellis_core::pki::OcspError>,
) -> Response {
    use trellis_core::pki::{error_response, OcspErrorStatus};
    let (Ok(ca_id), Some(pki)) = (ca_id.parse::<i64>(), ctx.pki.as_ref()) else {
        return ocsp_response(error_response(OcspErrorStatus::Unauthorized));
    };
    ocsp_response(pki.ocsp(ca_id, request).await)
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchDto {
    success: bool,
    message: String,
    scan_id: i64,
}

/// Starts a `ca_certs` discovery scan of the CA: its issued certificates come into the
/// inventory. Poll `/api/discovery/scans/{scanId}`.
#[utoipa::path(post, path = "/api/certificate-authorities/{id}/fetch-certificates", tag = "certificate-authorities",
    responses((status = 200, body = Data<FetchDto>)))]
async fn fetch_certificates(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    let scan = trellis_core::discovery::start_ca_scan(&ctx.discovery_deps(), &caller, numeric_id(&id)?).await?;
    Ok(data(FetchDto {
        success: true,
        message: format!("Scan {} started; poll /api/discovery/scans/{}", scan.id, scan.id),
        scan_id: scan.id,
    }))
}
