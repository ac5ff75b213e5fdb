//! `/api/certificates/*`, `/api/certificate-usage`, `/api/machine-identities`.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::extract::{numeric_id, Authenticated, Json, OptionalJson, Query};
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::certificates::revocation_requests::RevocationRequest;
use trellis_core::certificates::{self as inventory, Certificate, MachineIdentity, Statistics, UsageRecord};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::lifecycle::{self, revocation_requests};

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/certificates", get(list_certificates).post(register_certificate))
        .route("/api/certificates/stats", get(statistics))
        .route("/api/certificates/{id}", get(get_certificate).put(update_certificate).delete(delete_certificate))
        .route("/api/certificates/{id}/auto-renew", put(set_auto_renew))
        .route("/api/certificates/{id}/revoke", post(revoke_certificate))
        .route("/api/certificates/revocation-requests", get(list_revocation_requests))
        .route("/api/certificates/revocation-requests/{id}/approve", post(approve_revocation))
        .route("/api/certificates/revocation-requests/{id}/reject", post(reject_revocation))
        .route("/api/certificates/{id}/download", get(download_certificate))
        .route("/api/certificates/{id}/private-key", get(private_key))
        .route("/api/certificates/{id}/private-key-status", get(private_key_status))
        .route("/api/certificates/{id}/assign-identity", post(assign_identity))
        .route("/api/certificate-usage", get(list_usage).post(add_usage))
        .route("/api/machine-identities", get(list_identities).post(create_identity))
        .route("/api/machine-identities/{id}", get(get_identity).delete(delete_identity))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CertificateDto {
    id: i64,
    workspace_id: String,
    common_name: String,
    issuer: String,
    subject: String,
    serial_number: String,
    /// `active`, `expiring` (within 30 days), `expired` or `revoked`; computed when read.
    status: &'static str,
    not_before: String,
    expires_at: String,
    days_until_expiry: i64,
    /// e.g. `SHA256-RSA`, `SHA384-ECDSA`, `ED25519`.
    signature_algorithm: String,
    /// e.g. `SHA-256`; null for EdDSA.
    signature_hash: Option<String>,
    /// `RSA`, `ECDSA`, `ED25519`, `ED448`, `DSA`, `UNKNOWN`.
    key_algorithm: String,
    key_size: Option<i64>,
    fingerprint_sha256: String,
    /// One of `TLS`, `S/MIME`, `Code Signing`, `Client Auth`.
    usage_category: String,
    subject_alternative_names: Vec<String>,
    is_ca: bool,
    /// `internal`, `agent`, `vault` or `external`.
    issuance_source: &'static str,
    auto_renewal: bool,
    location: Option<String>,
    metadata: Value,
    ca_id: Option<i64>,
    machine_identity_id: Option<i64>,
    revoked_at: Option<String>,
    revocation_reason: Option<String>,
    /// The template it was issued under, for certificates issued here.
    issuance_template: Option<String>,
    /// The certificate that renewed this one, and the last renewal failure.
    renewed_by_id: Option<i64>,
    renewal_error: Option<String>,
    created_at: String,
    updated_at: String,
    /// PEM; present on single reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate: Option<String>,
    /// The issuing chain, one PEM per certificate, issuing CA first; on single reads (empty when
    /// unknown, e.g. a certificate registered without its chain).
    #[serde(skip_serializing_if = "Option::is_none")]
    chain: Option<Vec<String>>,
}

pub(crate) fn certificate_dto(
    certificate: Certificate,
    now: chrono::DateTime<chrono::Utc>,
    with_pem: bool,
) -> CertificateDto {
    let chain = with_pem.then(|| certificate.chain());
    CertificateDto {
        status: certificate.status(now).as_str(),
        days_until_expiry: certificate.days_until_expiry(now),
        id: certificate.id,
        workspace_id: certificate.workspace_id,
        common_name: certificate.common_name,
        issuer: certificate.issuer,
        subject: certificate.subject,
        serial_number: certificate.serial_number,
        not_before: rfc3339(certificate.not_before),
        expires_at: rfc3339(certificate.expires_at),
        signature_algorithm: certificate.signature_algorithm,
        signature_hash: certificate.signature_hash,
        key_algorithm: certificate.key_algorithm,
        key_size: certificate.key_size,
        fingerprint_sha256: certificate.fingerprint_sha256,
        usage_category: certificate.usage_category,
        subject_alternative_names: certificate.subject_alt_names,
        is_ca: certificate.is_ca,
        issuance_source: certificate.issuance_source.as_str(),
        auto_renewal: certificate.auto_renewal,
        location: certificate.location,
        metadata: certificate.metadata,
        ca_id: certificate.ca_id,
        machine_identity_id: certificate.machine_identity_id,
        revoked_at: certificate.revoked_at.map(rfc3339),
        revocation_reason: certificate.revocation_reason,
        issuance_template: certificate.issuance_template,
        renewed_by_id: certificate.renewed_by_id,
        renewal_error: certificate.renewal_error,
        created_at: rfc3339(certificate.created_at),
        updated_at: rfc3339(certificate.updated_at),
        chain,
        certificate: with_pem.then_some(certificate.certificate_pem),
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct CertificateFilters {
    /// `active`, `expiring`, `expired` or `revoked` (empty: no filter).
    #[param(pattern = "^(active|expiring|expired|revoked|)$")]
    status: Option<String>,
    /// Case-insensitive substring of commonName or issuer.
    #[param(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    search: Option<String>,
    /// Matches the signature algorithm (`SHA256-RSA`), its hash (`SHA-256`) or key type (`RSA`, `ECDSA`, `ED25519`).
    signature_algorithm: Option<String>,
    /// `RSA`, `ECDSA`, `ED25519`, …
    key_algorithm: Option<String>,
    /// `TLS`, `S/MIME`, `Code Signing`, `Client Auth` (also `tls`, `smime`, `code_signing`, `client_auth`; empty: no filter).
    #[param(
        pattern = "^(TLS|tls|S/MIME|s/mime|smime|SMIME|Code Signing|code signing|code_signing|Client Auth|client auth|client_auth|)$"
    )]
    usage_category: Option<String>,
    /// `internal`, `agent`, `vault`, `external` (empty: no filter).
    #[param(pattern = "^(internal|agent|vault|external|)$")]
    issuance_source: Option<String>,
    /// Only the certificates issued through this CA (its id; empty: no filter). Beyond the spec.
    #[param(pattern = "^([1-9][0-9]{0,17}|)$")]
    ca_id: Option<String>,
    /// `newest` (the default: creation order, newest first), `expiresAt` (soonest expiry first) or
    /// `-expiresAt` (latest first); ties go by id. Beyond the spec, which has no public sort.
    #[param(pattern = "^(newest|expiresAt|-expiresAt|)$")]
    sort: Option<String>,
}

/// Lists the workspace's certificates, newest first (or by expiry with `sort`).
#[utoipa::path(get, path = "/api/certificates", tag = "certificates", params(CertificateFilters, PageParams),
    responses((status = 200, body = ListEnvelope<CertificateDto>)))]
async fn list_certificates(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<CertificateFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<CertificateDto>>> {
    let query = inventory::ListQuery {
        status: filters.status,
        search: filters.search,
        signature_algorithm: filters.signature_algorithm,
        key_algorithm: filters.key_algorithm,
        usage_category: filters.usage_category,
        issuance_source: filters.issuance_source,
        ca_id: filters.ca_id,
        sort: filters.sort,
    };
    let page = inventory::list(&ctx.certificate_deps(), &caller, query, page.request()?).await?;
    let now = ctx.clock.now();
    Ok(list(page, |c| certificate_dto(c, now, false)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterBody {
    /// PEM certificate; the first CERTIFICATE block is registered.
    certificate: String,
    /// `external` (default), `agent` or `vault`.
    #[schema(pattern = "^(external|agent|vault)$")]
    issuance_source: Option<String>,
    auto_renewal: Option<bool>,
    #[schema(max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    location: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// Registers an existing certificate. 409 if its fingerprint is already in the workspace.
#[utoipa::path(post, path = "/api/certificates", tag = "certificates", request_body = RegisterBody,
    responses((status = 201, body = Data<CertificateDto>), (status = 400, description = "Bad PEM or field"), (status = 409, description = "Duplicate fingerprint")))]
async fn register_certificate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<RegisterBody>,
) -> ApiResult<Response> {
    let registration = inventory::Registration {
        certificate: body.certificate,
        issuance_source: body.issuance_source,
        auto_renewal: body.auto_renewal,
        location: body.location,
        metadata: body.metadata,
    };
    let certificate = inventory::register(&ctx.certificate_deps(), &caller, registration).await?;
    Ok(created(certificate_dto(certificate, ctx.clock.now(), true)))
}

/// One certificate, with its PEM.
#[utoipa::path(get, path = "/api/certificates/{id}", tag = "certificates", responses((status = 200, body = Data<CertificateDto>), (status = 404, description = "Absent or in another workspace")))]
async fn get_certificate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    let certificate = inventory::get(&ctx.certificate_deps(), &caller, numeric_id(&id)?).await?;
    Ok(data(certificate_dto(certificate, ctx.clock.now(), true)))
}

/// Accepts absent (leave alone), `null` (clear) and a value (set).
fn double_option<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateBody {
    auto_renewal: Option<bool>,
    /// A string sets it, `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    location: Option<Option<String>>,
    /// Replaces the metadata object.
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    #[schema(pattern = "^(external|agent|vault)$")]
    issuance_source: Option<String>,
    /// The certificate body is immutable: accepted only to answer with a clear error, so it
    /// is not part of the documented shape.
    #[schema(ignore)]
    certificate: Option<String>,
}

/// Changes annotations of a certificate (autoRenewal, location, metadata, issuanceSource).
#[utoipa::path(put, path = "/api/certificates/{id}", tag = "certificates", request_body = UpdateBody, responses((status = 200, body = Data<CertificateDto>)))]
async fn update_certificate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<UpdateBody>,
) -> ApiResult<axum::Json<Value>> {
    let id = numeric_id(&id)?;
    if body.certificate.is_some() {
        return Err(trellis_core::error::Error::invalid_field(
            "certificate",
            "the certificate body cannot be replaced; register the new certificate instead",
        )
        .into());
    }
    let changes = inventory::Changes {
        auto_renewal: body.auto_renewal,
        location: body.location,
        metadata: body.metadata,
        issuance_source: body.issuance_source,
    };
    let certificate = inventory::update(&ctx.certificate_deps(), &caller, id, changes).await?;
    Ok(data(certificate_dto(certificate, ctx.clock.now(), true)))
}

/// Removes the record. Does not revoke the certificate.
#[utoipa::path(delete, path = "/api/certificates/{id}", tag = "certificates", responses((status = 204, description = "Deleted")))]
async fn delete_certificate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    inventory::delete(&ctx.certificate_deps(), &caller, numeric_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoRenewBody {
    /// The new setting; `autoRenewal` is accepted too. With neither (or no body), the setting flips.
    enabled: Option<bool>,
    auto_renewal: Option<bool>,
}

/// Sets or toggles auto-renewal.
#[utoipa::path(put, path = "/api/certificates/{id}/auto-renew", tag = "certificates", request_body(content = Option<AutoRenewBody>, description = "Optional: without a body, auto-renewal is toggled"), responses((status = 200, body = Data<CertificateDto>)))]
async fn set_auto_renew(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<AutoRenewBody>,
) -> ApiResult<axum::Json<Value>> {
    let id = numeric_id(&id)?;
    let enabled = body.and_then(|b| b.enabled.or(b.auto_renewal));
    let certificate = lifecycle::set_auto_renewal(&ctx.lifecycle_deps(), &caller, id, enabled).await?;
    Ok(data(certificate_dto(certificate, ctx.clock.now(), false)))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RevokeBody {
    /// Free-form reason recorded in the audit log; default `unspecified`.
    #[schema(max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    reason: Option<String>,
}

/// Revokes the certificate (at its CA too, when issued through one). 400 VALIDATION_ERROR if it
/// already is; 202 with a pending revocation request when its template requires approval.
#[utoipa::path(post, path = "/api/certificates/{id}/revoke", tag = "certificates", request_body(content = Option<RevokeBody>, description = "Optional"), responses((status = 200, body = Data<CertificateDto>), (status = 202, body = Data<RevocationRequestDto>), (status = 400, description = "Already revoked")))]
async fn revoke_certificate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<RevokeBody>,
) -> ApiResult<Response> {
    let id = numeric_id(&id)?;
    match lifecycle::revoke(&ctx.lifecycle_deps(), &caller, id, body.and_then(|b| b.reason)).await? {
        lifecycle::Revocation::Revoked(certificate) => {
            Ok(data(certificate_dto(*certificate, ctx.clock.now(), false)).into_response())
        }
        lifecycle::Revocation::AwaitingApproval(request) => {
            Ok((StatusCode::ACCEPTED, data(revocation_request_dto(*request))).into_response())
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevocationRequestDto {
    id: i64,
    certificate_id: i64,
    reason: String,
    /// `pending`, `approved`, `rejected` or `failed`.
    status: String,
    requested_by: String,
    decided_by: Option<String>,
    decided_at: Option<String>,
    decision_reason: Option<String>,
    error: Option<String>,
    created_at: String,
    updated_at: String,
}

fn revocation_request_dto(r: RevocationRequest) -> RevocationRequestDto {
    RevocationRequestDto {
        id: r.id,
        certificate_id: r.certificate_id,
        reason: r.reason,
        status: r.status.to_string(),
        requested_by: r.requested_by,
        decided_by: r.decided_by,
        decided_at: r.decided_at.map(rfc3339),
        decision_reason: r.decision_reason,
        error: r.error,
        created_at: rfc3339(r.created_at),
        updated_at: rfc3339(r.updated_at),
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RevocationFilters {
    /// `pending` (the approvals to make), `approved`, `rejected`, `failed` (empty: all).
    #[param(pattern = "^(pending|approved|rejected|failed|)$")]
    status: Option<String>,
}

/// Revocations waiting for (or past) approval, newest first.
#[utoipa::path(get, path = "/api/certificates/revocation-requests", tag = "certificates", params(RevocationFilters, PageParams),
    responses((status = 200, body = ListEnvelope<RevocationRequestDto>)))]
async fn list_revocation_requests(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<RevocationFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<RevocationRequestDto>>> {
    let page =
        revocation_requests::list(&ctx.lifecycle_deps(), &caller, filters.status.as_deref(), page.request()?).await?;
    Ok(list(page, revocation_request_dto))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovedRevocationDto {
    request: RevocationRequestDto,
    certificate: CertificateDto,
}

/// Approves a pending revocation (not one's own): the certificate is revoked at its CA and in
/// the inventory.
#[utoipa::path(post, path = "/api/certificates/revocation-requests/{id}/approve", tag = "certificates",
    responses((status = 200, body = Data<ApprovedRevocationDto>), (status = 409, description = "Not pending")))]
async fn approve_revocation(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    let (request, certificate) = revocation_requests::approve(&ctx.lifecycle_deps(), &caller, numeric_id(&id)?).await?;
    Ok(data(ApprovedRevocationDto {
        request: revocation_request_dto(request),
        certificate: certificate_dto(certificate, ctx.clock.now(), false),
    }))
}

/// Rejects a pending revocation (not one's own); the certificate stays valid.
#[utoipa::path(post, path = "/api/certificates/revocation-requests/{id}/reject", tag = "certificates",
    request_body(content = Option<RevokeBody>, description = "Optional `reason`"),
    responses((status = 200, body = Data<RevocationRequestDto>)))]
async fn reject_revocation(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<RevokeBody>,
) -> ApiResult<axum::Json<Value>> {
    let request =
        revocation_requests::reject(&ctx.lifecycle_deps(), &caller, numeric_id(&id)?, body.and_then(|b| b.reason))
            .await?;
    Ok(data(revocation_request_dto(request)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DownloadParams {
    /// `pem` (default), `der`, or `fullchain` (the certificate then its issuing chain, PEM).
    #[param(pattern = "^(pem|der|fullchain)$")]
    format: Option<String>,
}

/// The certificate as a file attachment.
#[utoipa::path(get, path = "/api/certificates/{id}/download", tag = "certificates", params(DownloadParams), responses((status = 200, description = "PEM or DER bytes; `fullchain`: the certificate and its chain, PEM")))]
async fn download_certificate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Query(params): Query<DownloadParams>,
) -> ApiResult<Response> {
    let id = numeric_id(&id)?;
    let format = inventory::DownloadFormat::parse(params.format.as_deref())?;
    let download = inventory::download(&ctx.certificate_deps(), &caller, id, format).await?;
    let disposition = format!("attachment; filename=\"{}\"", download.file_name);
    Ok((
        [(header::CONTENT_TYPE, download.content_type.to_string()), (header::CONTENT_DISPOSITION, disposition)],
        download.bytes,
    )
        .into_response())
}

/// The private key (PEM), only for internally issued certificates; every download is audited.
#[utoipa::path(get, path = "/api/certificates/{id}/private-key", tag = "certificates", responses((status = 200, description = "`data: { privateKey, format }`"), (status = 403, description = "PRIVATE_KEY_NOT_AVAILABLE")))]
async fn private_key(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let (certificate, key) = inventory::private_key(&ctx.certificate_deps(), &caller, numeric_id(&id)?).await?;
    let body = data(serde_json::json!({ "certificateId": certificate.id, "privateKey": key, "format": "pem" }));
    Ok(([(header::CACHE_CONTROL, "no-store")], body).into_response())
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrivateKeyStatusDto {
    downloadable: bool,
    issuance_source: &'static str,
    reason: String,
}

/// Whether the private key can be downloaded, and why.
#[utoipa::path(get, path = "/api/certificates/{id}/private-key-status", tag = "certificates", responses((status = 200, body = Data<PrivateKeyStatusDto>)))]
async fn private_key_status(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    let status = inventory::private_key_status(&ctx.certificate_deps(), &caller, numeric_id(&id)?).await?;
    Ok(data(PrivateKeyStatusDto {
        downloadable: status.downloadable,
        issuance_source: status.issuance_source.as_str(),
        reason: status.reason,
    }))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatisticsDto {
    total: i64,
    active: i64,
    expiring: i64,
    expired: i64,
    revoked: i64,
    expiring_within_7_days: i64,
    auto_renewal_enabled: i64,
    #[schema(value_type = Object)]
    by_usage_category: Value,
    #[schema(value_type = Object)]
    by_issuance_source: Value,
    #[schema(value_type = Object)]
    by_key_algorithm: Value,
}

fn statistics_dto(stats: Statistics) -> StatisticsDto {
    let count = |status: inventory::Status| stats.by_status.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n);
    let object =
        |pairs: &[(String, i64)]| Value::Object(pairs.iter().map(|(k, v)| (k.clone(), Value::from(*v))).collect());
    StatisticsDto {
        total: stats.total,
        active: count(inventory::Status::Active),
        expiring: count(inventory::Status::Expiring),
        expired: count(inventory::Status::Expired),
        revoked: count(inventory::Status::Revoked),
        expiring_within_7_days: stats.expiring_within_7_days,
        auto_renewal_enabled: stats.auto_renewal_enabled,
        by_usage_category: object(&stats.by_usage_category),
        by_issuance_source: object(&stats.by_issuance_source),
        by_key_algorithm: object(&stats.by_key_algorithm),
    }
}

/// Aggregated counts of the workspace's inventory.
#[utoipa::path(get, path = "/api/certificates/stats", tag = "certificates", responses((status = 200, body = Data<StatisticsDto>)))]
async fn statistics(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(statistics_dto(inventory::statistics(&ctx.certificate_deps(), &caller).await?)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignIdentityBody {
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "crate::extract::integral")]
    machine_identity_id: i64,
}

/// Attaches the certificate to a machine identity.
#[utoipa::path(post, path = "/api/certificates/{id}/assign-identity", tag = "certificates", request_body = AssignIdentityBody, responses((status = 200, body = Data<CertificateDto>)))]
async fn assign_identity(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<AssignIdentityBody>,
) -> ApiResult<axum::Json<Value>> {
    let id = numeric_id(&id)?;
    let certificate =
        inventory::assign_identity(&ctx.certificate_deps(), &caller, id, body.machine_identity_id).await?;
    Ok(data(certificate_dto(certificate, ctx.clock.now(), false)))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageDto {
    id: i64,
    certificate_id: i64,
    host: String,
    port: Option<i64>,
    service: Option<String>,
    location: Option<String>,
    metadata: Value,
    created_at: String,
}

fn usage_dto(record: UsageRecord) -> UsageDto {
    UsageDto {
        id: record.id,
        certificate_id: record.certificate_id,
        host: record.host,
        port: record.port,
        service: record.service,
        location: record.location,
        metadata: record.metadata,
        created_at: rfc3339(record.created_at),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct UsageFilters {
    /// Only records of this certificate.
    #[param(minimum = 1)]
    certificate_id: Option<i64>,
}

/// Where certificates are deployed.
#[utoipa::path(get, path = "/api/certificate-usage", tag = "certificates", params(UsageFilters, PageParams), responses((status = 200, body = ListEnvelope<UsageDto>)))]
async fn list_usage(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<UsageFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<UsageDto>>> {
    let page = inventory::list_usage(&ctx.certificate_deps(), &caller, filters.certificate_id, page.request()?).await?;
    Ok(list(page, usage_dto))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageBody {
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "crate::extract::integral")]
    certificate_id: i64,
    #[schema(
        min_length = 1,
        max_length = 1024,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    host: String,
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default, deserialize_with = "crate::extract::optional_integral")]
    port: Option<i64>,
    #[schema(max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    service: Option<String>,
    #[schema(max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    location: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// Records where a certificate is deployed.
#[utoipa::path(post, path = "/api/certificate-usage", tag = "certificates", request_body = UsageBody, responses((status = 201, body = Data<UsageDto>)))]
async fn add_usage(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<UsageBody>,
) -> ApiResult<Response> {
    let new = inventory::NewUsage {
        certificate_id: body.certificate_id,
        host: body.host,
        port: body.port,
        service: body.service,
        location: body.location,
        metadata: body.metadata,
    };
    Ok(created(usage_dto(inventory::add_usage(&ctx.certificate_deps(), &caller, new).await?)))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityDto {
    id: i64,
    workspace_id: String,
    name: String,
    /// `server`, `workload`, `device`, `service_account` or `other`.
    #[serde(rename = "type")]
    kind: String,
    description: Option<String>,
    metadata: Value,
    certificate_count: i64,
    created_at: String,
    updated_at: String,
}

fn identity_dto(identity: MachineIdentity) -> IdentityDto {
    IdentityDto {
        id: identity.id,
        workspace_id: identity.workspace_id,
        name: identity.name,
        kind: identity.kind,
        description: identity.description,
        metadata: identity.metadata,
        certificate_count: identity.certificate_count,
        created_at: rfc3339(identity.created_at),
        updated_at: rfc3339(identity.updated_at),
    }
}

/// Machine identities of the workspace.
#[utoipa::path(get, path = "/api/machine-identities", tag = "machine-identities", params(PageParams), responses((status = 200, body = ListEnvelope<IdentityDto>)))]
async fn list_identities(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<IdentityDto>>> {
    Ok(list(inventory::list_identities(&ctx.certificate_deps(), &caller, page.request()?).await?, identity_dto))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct IdentityBody {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
    /// `server` (default), `workload`, `device`, `service_account`, `other`.
    #[serde(rename = "type")]
    #[schema(pattern = "^(server|workload|device|service_account|other)$")]
    kind: Option<String>,
    #[schema(max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    description: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// Creates a machine identity.
#[utoipa::path(post, path = "/api/machine-identities", tag = "machine-identities", request_body = IdentityBody, responses((status = 201, body = Data<IdentityDto>)))]
async fn create_identity(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<IdentityBody>,
) -> ApiResult<Response> {
    let new = inventory::NewIdentity {
        name: body.name,
        kind: body.kind,
        description: body.description,
        metadata: body.metadata,
    };
    Ok(created(identity_dto(inventory::create_identity(&ctx.certificate_deps(), &caller, new).await?)))
}

/// One machine identity.
#[utoipa::path(get, path = "/api/machine-identities/{id}", tag = "machine-identities", responses((status = 200, body = Data<IdentityDto>)))]
async fn get_identity(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(identity_dto(inventory::get_identity(&ctx.certificate_deps(), &caller, numeric_id(&id)?).await?)))
}

/// Deletes a machine identity; its certificates stay and lose the link.
#[utoipa::path(delete, path = "/api/machine-identities/{id}", tag = "machine-identities", responses((status = 204, description = "Deleted")))]
async fn delete_identity(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    inventory::delete_identity(&ctx.certificate_deps(), &caller, numeric_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}
