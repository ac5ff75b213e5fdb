//! TPM attestation: devices (`/api/iot/devices`, the usual envelopes) and the attestation
//! endpoints of spec §4.3 (policies, challenge, AK enrollment, attest-and-provision, records,
//! trust roots), which answer raw JSON without the `data` envelope and refuse in the
//! attestation error form `{ "error": "<code>", "details": … }` (`failures[]` for a refused
//! attestation). Bodies are read as JSON values here so that malformed ones get that form too.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::cas::double_option;
use crate::error::{ApiError, ApiResult};
use crate::extract::{numeric_id, Authenticated, Json, Query};
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::attestation::devices::{self, Device, DeviceInput};
use trellis_core::attestation::enrollment::{self, EnrollmentInput};
use trellis_core::attestation::provision::{self, ProvisionInput};
use trellis_core::attestation::{b64, certificate_pem, nonces, policies, trust, AttestationError};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/iot/devices", get(list_devices).post(create_device))
        .route("/api/iot/devices/{id}", get(get_device).patch(update_device).delete(delete_device))
        .route("/api/iot/devices/{id}/attestation/challenge", post(challenge))
        .route("/api/iot/devices/{id}/enroll", post(enroll))
        .route("/api/iot/devices/{id}/enroll/activate", post(activate))
        .route("/api/iot/devices/{id}/reset-enrollment", post(reset_enrollment))
        .route("/api/iot/devices/{id}/attest-and-provision", post(attest_and_provision))
        .route("/api/iot/devices/{id}/attestations", get(attestations))
        .route("/api/iot/devices/{id}/attest", post(attest))
        .route("/api/iot/devices/{id}/attest-tpm", post(attest_tpm))
        .route("/api/attestation/policies", get(list_policies).post(create_policy))
        .route("/api/attestation/policies/{id}", get(get_policy).patch(update_policy).delete(delete_policy))
        .route("/api/attestation/trust-roots", get(list_roots).post(add_root))
        .route("/api/attestation/trust-roots/{id}", axum::routing::delete(remove_root))
}

// ---- the attestation error form ------------------------------------------------------------

/// An error of an attestation endpoint, answered as `{ "error": "<code>", "details": … }`.
#[derive(Debug)]
pub struct AttestationApiError(ApiError);

impl<E: Into<ApiError>> From<E> for AttestationApiError {
    fn from(err: E) -> Self {
        AttestationApiError(err.into())
    }
}

type AttResult<T> = Result<T, AttestationApiError>;

impl IntoResponse for AttestationApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.0.status_and_code();
        let refusal = match &self.0 {
            ApiError::Domain(err) => err.area::<AttestationError>(),
            _ => None,
        };
        let body = match &self.0 {
            _ if let Some(refusal) = refusal => refusal_body(refusal),
            ApiError::Domain(Error::NotFound(entity)) => json!({ "error": format!("{} not found", entity.label()) }),
            ApiError::Domain(err) if status == StatusCode::INTERNAL_SERVER_ERROR => {
                tracing::error!(code, error = ?err, "request failed");
                json!({ "error": code, "details": "Internal server error; the request id identifies it in the logs" })
            }
            ApiError::Domain(Error::Validation { message, details }) => {
                json!({ "error": code, "details": { "message": message, "problem": details } })
            }
            ApiError::Domain(Error::PolicyDenied(reasons)) => {
                json!({ "error": code, "details": { "reasons": reasons } })
            }
            other => json!({ "error": code, "details": other.message() }),
        };
        (status, axum::Json(body)).into_response()
    }
}

/// Spec §4.3's own error form of an attestation refusal.
fn refusal_body(err: &AttestationError) -> Value {
    match err {
        AttestationError::Failed(failures) | AttestationError::EnrollmentFailed(failures) => {
            json!({ "error": err.code(), "failures": failures })
        }
        AttestationError::InvalidPolicy(details) => json!({ "error": err.code(), "details": details }),
        AttestationError::MissingField(field) => {
            json!({ "error": err.code(), "details": { "field": field, "message": format!("{field} is required") } })
        }
        AttestationError::InvalidRequest { field, message } => {
            json!({ "error": err.code(), "details": { "field": field, "message": message } })
        }
        AttestationError::NoncePurposeMismatch { expected, actual } => json!({
            "error": err.code(),
            "details": { "expected": expected, "actual": actual, "message": format!("this endpoint needs a nonce of purpose {expected}") }
        }),
        AttestationError::ActivationFailed(reason) => json!({ "error": err.code(), "details": reason }),
        other => json!({ "error": other.code() }),
    }
}

fn body_json(bytes: &Bytes) -> AttResult<Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice(bytes) {
        Ok(Value::Null) => Ok(json!({})),
        Ok(body @ Value::Object(_)) => Ok(body),
        Ok(_) => Err(AttestationError::invalid("body", "must be a JSON object").into()),
        Err(err) => Err(AttestationError::invalid("body", format!("is not valid JSON: {err}")).into()),
    }
}

fn id_of(text: &str) -> AttResult<i64> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(AttestationError::invalid("id", "ids are positive integers").into()),
    }
}

fn string_member(body: &Value, name: &str) -> AttResult<Option<String>> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(AttestationError::invalid(name, "must be a string").into()),
    }
}

fn integer_member(body: &Value, name: &str) -> AttResult<Option<i64>> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| Some(f as i64))
            .ok_or_else(|| AttestationError::invalid(name, "must be an integer").into()),
    }
}

// ---- devices ---------------------------------------------------------------------------------

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceDto {
    id: i64,
    name: String,
    device_type: Option<String>,
    serial: Option<String>,
    description: Option<String>,
    /// `registered`, `enrolled`, `attested`, `failed` or `disabled`.
    status: String,
    /// The enrolled AK's name (nameAlg ‖ digest), hex.
    ak_name: Option<String>,
    /// The enrolled AK's public area (TPMT_PUBLIC), base64.
    ak_public: Option<String>,
    /// The EK certificate accepted at enrollment, PEM.
    ek_certificate: Option<String>,
    /// `id:XXXXXXXX` from the EK certificate.
    ek_manufacturer: Option<String>,
    enrolled_at: Option<String>,
    last_attested_at: Option<String>,
    #[schema(value_type = Object)]
    metadata: Value,
    created_at: String,
    updated_at: String,
}

fn device_dto(d: Device) -> DeviceDto {
    DeviceDto {
        id: d.id,
        name: d.name,
        device_type: d.device_type,
        serial: d.serial,
        description: d.description,
        status: d.status.to_string(),
        ak_name: d.ak_name.as_deref().map(hex::encode),
        ak_public: d.ak_public.as_deref().map(b64),
        ek_certificate: d.ek_certificate.as_deref().map(certificate_pem),
        ek_manufacturer: d.ek_manufacturer,
        enrolled_at: d.enrolled_at.map(rfc3339),
        last_attested_at: d.last_attested_at.map(rfc3339),
        metadata: d.metadata,
        created_at: rfc3339(d.created_at),
        updated_at: rfc3339(d.updated_at),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceBody {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    name: Option<String>,
    /// Matched against attestation policies' `deviceType`.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    device_type: Option<Option<String>>,
    /// Unique in the workspace.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    serial: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    description: Option<Option<String>>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// PATCH only: `disabled` refuses attestation and enrollment; `enabled` restores.
    #[schema(pattern = "^(disabled|enabled)$")]
    status: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceCreateBody {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    name: String,
    /// Matched against attestation policies' `deviceType`.
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    device_type: Option<String>,
    /// Unique in the workspace.
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    serial: Option<String>,
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    description: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

fn device_input(body: DeviceBody) -> DeviceInput {
    DeviceInput {
        name: body.name,
        device_type: body.device_type,
        serial: body.serial,
        description: body.description,
        metadata: body.metadata,
        status: body.status,
    }
}

/// The workspace's devices, newest first.
#[utoipa::path(get, path = "/api/iot/devices", tag = "attestation", params(PageParams),
    responses((status = 200, body = ListEnvelope<DeviceDto>)))]
async fn list_devices(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<DeviceDto>>> {
    Ok(list(devices::list(&ctx.attestation_deps(), &caller, page.request()?).await?, device_dto))
}

/// Registers a device (status `registered` until its AK is enrolled).
#[utoipa::path(post, path = "/api/iot/devices", tag = "attestation", request_body = DeviceCreateBody,
    responses((status = 201, body = Data<DeviceDto>)))]
async fn create_device(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<DeviceCreateBody>,
) -> ApiResult<Response> {
    let input = DeviceInput {
        name: Some(body.name),
        device_type: Some(body.device_type),
        serial: Some(body.serial),
        description: Some(body.description),
        metadata: body.metadata,
        status: None,
    };
    Ok(created(device_dto(devices::create(&ctx.attestation_deps(), &caller, input).await?)))
}

#[utoipa::path(get, path = "/api/iot/devices/{id}", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    responses((status = 200, body = Data<DeviceDto>)))]
async fn get_device(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(device_dto(devices::get(&ctx.attestation_deps(), &caller, numeric_id(&id)?).await?)))
}

#[utoipa::path(patch, path = "/api/iot/devices/{id}", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    request_body = DeviceBody, responses((status = 200, body = Data<DeviceDto>)))]
async fn update_device(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<DeviceBody>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(device_dto(devices::update(&ctx.attestation_deps(), &caller, numeric_id(&id)?, device_input(body)).await?)))
}

/// Deletes the device, its nonces and any pending enrollment (its attestation history stays).
#[utoipa::path(delete, path = "/api/iot/devices/{id}", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    responses((status = 204, description = "Deleted")))]
async fn delete_device(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    devices::delete(&ctx.attestation_deps(), &caller, numeric_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Forgets the device's enrolled EK and AK (scope `attestation:manage`): enrollment pins the first
/// EK, so this is the only way to enroll the device with another TPM. Audited.
#[utoipa::path(post, path = "/api/iot/devices/{id}/reset-enrollment", tag = "attestation",
    params(("id" = i64, Path, minimum = 1)), responses((status = 200, body = Data<DeviceDto>)))]
async fn reset_enrollment(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(device_dto(devices::reset_enrollment(&ctx.attestation_deps(), &caller, numeric_id(&id)?).await?)))
}

// ---- challenge, enrollment -------------------------------------------------------------------

/// The challenge body as documented; it is read as a JSON value so that refusals take the
/// attestation error form.
#[derive(Debug, ToSchema)]
#[allow(dead_code, reason = "documentation of the body only")]
pub struct ChallengeBody {
    /// How long the nonce is valid (default 300).
    #[schema(minimum = 1, maximum = 3600, rename = "ttlSeconds")]
    ttl_seconds: Option<i64>,
    /// `attestation` (default) or `ak_enrollment`.
    #[schema(pattern = "^(attestation|ak_enrollment)$")]
    purpose: Option<String>,
}

/// A nonce (spec §2.4): `{nonce, expiresAt, purpose}`.
#[utoipa::path(post, path = "/api/iot/devices/{id}/attestation/challenge", tag = "attestation",
    params(("id" = i64, Path, minimum = 1)), request_body(content = Option<ChallengeBody>, description = "Optional"),
    responses((status = 200, description = "{nonce, expiresAt, purpose}"), (status = 404, description = "{\"error\": \"Device not found\"}")))]
async fn challenge(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: Bytes,
) -> AttResult<axum::Json<Value>> {
    let body = body_json(&body)?;
    let ttl = integer_member(&body, "ttlSeconds")?;
    let purpose = string_member(&body, "purpose")?;
    let nonce = nonces::challenge(&ctx.attestation_deps(), &caller, id_of(&id)?, ttl, purpose.as_deref()).await?;
    Ok(axum::Json(json!({ "nonce": nonce.nonce, "expiresAt": rfc3339(nonce.expires_at), "purpose": nonce.purpose })))
}

/// AK enrollment, step 1: `{nonce (purpose ak_enrollment), ekCertificate (PEM or base64 DER),
/// ekChain?: [...], ekPublic (base64 TPMT_PUBLIC), akPublic (base64 TPMT_PUBLIC)}` →
/// `{credentialBlob, encryptedSecret (base64, for TPM2_ActivateCredential), akName (hex),
/// ekManufacturer, expiresAt}`; 403 `{error: "enrollment_failed", failures}`.
#[utoipa::path(post, path = "/api/iot/devices/{id}/enroll", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    request_body(content = Object, description = "{nonce, ekCertificate, ekChain?, ekPublic, akPublic}"),
    responses((status = 200, description = "The activation challenge"), (status = 403, description = "{error: enrollment_failed, failures}")))]
async fn enroll(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: Bytes,
) -> AttResult<axum::Json<Value>> {
    let body = body_json(&body)?;
    let chain = match body.get("ekChain") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| AttestationError::invalid("ekChain", "must be a list of certificates"))?,
        Some(_) => return Err(AttestationError::invalid("ekChain", "must be a list of certificates").into()),
    };
    let input = EnrollmentInput {
        nonce: string_member(&body, "nonce")?,
        ek_certificate: string_member(&body, "ekCertificate")?,
        ek_chain: chain,
        ek_public: string_member(&body, "ekPublic")?,
        ak_public: string_member(&body, "akPublic")?,
    };
    let challenge = enrollment::start(&ctx.attestation_deps(), &caller, id_of(&id)?, input).await?;
    Ok(axum::Json(json!({
        "credentialBlob": b64(&challenge.credential_blob),
        "encryptedSecret": b64(&challenge.encrypted_secret),
        "akName": hex::encode(&challenge.ak_name),
        "ekManufacturer": challenge.ek_manufacturer,
        "expiresAt": rfc3339(challenge.expires_at),
    })))
}

/// AK enrollment, step 2: `{secret}` (base64, what TPM2_ActivateCredential recovered) → the
/// device, now `enrolled`; 403 `{error: "activation_failed"}` (one try per challenge).
#[utoipa::path(post, path = "/api/iot/devices/{id}/enroll/activate", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    request_body(content = Object, description = "{secret}"),
    responses((status = 200, body = DeviceDto), (status = 403, description = "{error: activation_failed, details}")))]
async fn activate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: Bytes,
) -> AttResult<axum::Json<DeviceDto>> {
    let body = body_json(&body)?;
    let device =
        enrollment::activate(&ctx.attestation_deps(), &caller, id_of(&id)?, string_member(&body, "secret")?).await?;
    Ok(axum::Json(device_dto(device)))
}

// ---- attestation -----------------------------------------------------------------------------

/// Attestation-gated issuance (spec §4.3). Evidence members: docs/api.md.
#[utoipa::path(post, path = "/api/iot/devices/{id}/attest-and-provision", tag = "attestation",
    params(("id" = i64, Path, minimum = 1)),
    request_body(content = Object, description = "{caId, templateId, csr, validityDays?, policyId?, evidence: {nonce, quoteBlob, quoteSignature, pcrs, certifyBlob?, certifySignature?, csrKeyPublic?, eventLog?}}"),
    responses((status = 200, description = "{message, certificate: {certificate, chain[], serialNumber, attestation: {policyId, verifiedPcrs, ekManufacturer}}}"),
        (status = 400, description = "{error: nonce_not_found | nonce_already_used | nonce_expired | nonce_device_mismatch | missing_field, details}"),
        (status = 403, description = "{error: attestation_failed, failures: [\"code: detail\"]}")))]
async fn attest_and_provision(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: Bytes,
) -> AttResult<axum::Json<Value>> {
    let body = body_json(&body)?;
    let input = ProvisionInput {
        ca_id: body.get("caId").cloned(),
        template_id: match body.get("templateId") {
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => string_member(&body, "templateId")?,
        },
        csr: string_member(&body, "csr")?,
        validity_days: integer_member(&body, "validityDays")?,
        policy_id: integer_member(&body, "policyId")?,
        evidence: body.get("evidence").cloned(),
    };
    let done = provision::attest_and_provision(&ctx.attestation_deps(), &caller, id_of(&id)?, input).await?;
    let certificate = &done.issued.certificate;
    Ok(axum::Json(json!({
        "message": "Attestation verified; certificate issued",
        "certificate": {
            "id": certificate.id,
            "certificate": certificate.certificate_pem,
            "chain": certificate.chain(),
            "serialNumber": certificate.serial_number,
            "attestation": {
                "policyId": done.policy_id,
                "verifiedPcrs": done.verified_pcrs,
                "ekManufacturer": done.ek_manufacturer,
            }
        }
    })))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// At most this many, newest first (1–100, default 50).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
}

/// The device's attestation history, newest first (raw array).
#[utoipa::path(get, path = "/api/iot/devices/{id}/attestations", tag = "attestation",
    params(("id" = i64, Path, minimum = 1), HistoryParams), responses((status = 200, description = "Array of attestation records")))]
async fn attestations(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Query(params): Query<HistoryParams>,
) -> AttResult<axum::Json<Value>> {
    let limit = params.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(AttestationError::invalid("limit", "must be 1 to 100").into());
    }
    let records = provision::history(&ctx.attestation_deps(), &caller, id_of(&id)?, limit).await?;
    Ok(axum::Json(Value::Array(records.iter().map(|r| r.to_json()).collect())))
}

/// Records an attestation made elsewhere, without gating anything: `{passed, trustScore?,
/// failures?, claims?, policyId?}` → 201 the record.
#[utoipa::path(post, path = "/api/iot/devices/{id}/attest", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    request_body(content = Object, description = "{passed, trustScore?, failures?, claims?, policyId?}"),
    responses((status = 201, description = "The attestation record")))]
async fn attest(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: Bytes,
) -> AttResult<Response> {
    let body = body_json(&body)?;
    let record = provision::attest(&ctx.attestation_deps(), &caller, id_of(&id)?, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(record.to_json())).into_response())
}

/// Records a TPM quote: `{evidence, policyId?}`; the nonce rules apply and the verifier runs when
/// the device is enrolled and a policy applies, but nothing is refused or issued: 201 the record
/// with `passed`, `trustScore`, `failures`.
#[utoipa::path(post, path = "/api/iot/devices/{id}/attest-tpm", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    request_body(content = Object, description = "{evidence, policyId?}"),
    responses((status = 201, description = "The attestation record")))]
async fn attest_tpm(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: Bytes,
) -> AttResult<Response> {
    let body = body_json(&body)?;
    let policy_id = integer_member(&body, "policyId")?;
    let record =
        provision::attest_tpm(&ctx.attestation_deps(), &caller, id_of(&id)?, policy_id, body.get("evidence").cloned())
            .await?;
    Ok((StatusCode::CREATED, axum::Json(record.to_json())).into_response())
}

// ---- policies ----------------------------------------------------------------------------------

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct PolicyFilter {
    /// Only the policies of this device type.
    device_type: Option<String>,
}

/// Attestation policies (raw array, oldest first).
#[utoipa::path(get, path = "/api/attestation/policies", tag = "attestation", params(PolicyFilter),
    responses((status = 200, description = "Array of policy objects (spec §2.3)")))]
async fn list_policies(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filter): Query<PolicyFilter>,
) -> AttResult<axum::Json<Value>> {
    let device_type = filter.device_type.filter(|t| !t.is_empty());
    let all = policies::list(&ctx.attestation_deps(), &caller, device_type.as_deref()).await?;
    Ok(axum::Json(Value::Array(all.iter().map(|p| p.to_json()).collect())))
}

/// A policy. 404 `{"error": "Policy not found"}`.
#[utoipa::path(get, path = "/api/attestation/policies/{id}", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    responses((status = 200, description = "The policy"), (status = 404, description = "{\"error\": \"Policy not found\"}")))]
async fn get_policy(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> AttResult<axum::Json<Value>> {
    let id = id.parse::<i64>().map_err(|_| AttestationError::PolicyNotFound)?;
    Ok(axum::Json(policies::get(&ctx.attestation_deps(), &caller, id).await?.to_json()))
}

/// Creates a policy (spec §2.3: `name` and `expectedPcrs` required); 400 `{"error": "Invalid
/// policy", "details": {"problems": [{field, message}]}}`.
#[utoipa::path(post, path = "/api/attestation/policies", tag = "attestation",
    request_body(content = Object, description = "Policy per spec §2.3"),
    responses((status = 201, description = "The created policy"), (status = 400, description = "{\"error\": \"Invalid policy\", \"details\": …}")))]
async fn create_policy(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    body: Bytes,
) -> AttResult<Response> {
    let body: Value = serde_json::from_slice(&body).map_err(|err| {
        AttestationError::InvalidPolicy(
            json!({ "problems": [{ "field": "", "message": format!("the body is not JSON: {err}") }] }),
        )
    })?;
    let policy = policies::create(&ctx.attestation_deps(), &caller, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(policy.to_json())).into_response())
}

/// Partial update; the result is validated as on create.
#[utoipa::path(patch, path = "/api/attestation/policies/{id}", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    request_body(content = Object, description = "Members to change"),
    responses((status = 200, description = "The updated policy")))]
async fn update_policy(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: Bytes,
) -> AttResult<axum::Json<Value>> {
    let id = id.parse::<i64>().map_err(|_| AttestationError::PolicyNotFound)?;
    let body: Value = serde_json::from_slice(&body).map_err(|err| {
        AttestationError::InvalidPolicy(
            json!({ "problems": [{ "field": "", "message": format!("the body is not JSON: {err}") }] }),
        )
    })?;
    Ok(axum::Json(policies::update(&ctx.attestation_deps(), &caller, id, &body).await?.to_json()))
}

#[utoipa::path(delete, path = "/api/attestation/policies/{id}", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    responses((status = 204, description = "Deleted"), (status = 404, description = "{\"error\": \"Policy not found\"}")))]
async fn delete_policy(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> AttResult<StatusCode> {
    let id = id.parse::<i64>().map_err(|_| AttestationError::PolicyNotFound)?;
    policies::delete(&ctx.attestation_deps(), &caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- trust roots -------------------------------------------------------------------------------

fn root_json(root: &trust::TrustRoot) -> Value {
    json!({
        "id": root.id,
        "name": root.name,
        "subject": root.subject,
        "manufacturer": root.manufacturer,
        "fingerprintSha256": root.fingerprint_sha256,
        "notAfter": rfc3339(root.not_after),
        "certificate": root.certificate_pem,
        "createdAt": rfc3339(root.created_at),
    })
}

/// The workspace's TPM vendor roots (raw array).
#[utoipa::path(get, path = "/api/attestation/trust-roots", tag = "attestation",
    responses((status = 200, description = "Array of trust roots")))]
async fn list_roots(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> AttResult<axum::Json<Value>> {
    let roots = trust::list(&ctx.attestation_deps(), &caller).await?;
    Ok(axum::Json(Value::Array(roots.iter().map(root_json).collect())))
}

/// Adds a root: `{certificate (PEM or base64 DER of a CA), manufacturer? (id:XXXXXXXX), name?}`.
#[utoipa::path(post, path = "/api/attestation/trust-roots", tag = "attestation",
    request_body(content = Object, description = "{certificate, manufacturer?, name?}"),
    responses((status = 201, description = "The trust root"), (status = 409, description = "{error: duplicate_trust_root}")))]
async fn add_root(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    body: Bytes,
) -> AttResult<Response> {
    let body = body_json(&body)?;
    let root = trust::add(
        &ctx.attestation_deps(),
        &caller,
        string_member(&body, "name")?,
        string_member(&body, "certificate")?,
        string_member(&body, "manufacturer")?,
    )
    .await?;
    Ok((StatusCode::CREATED, axum::Json(root_json(&root))).into_response())
}

#[utoipa::path(delete, path = "/api/attestation/trust-roots/{id}", tag = "attestation", params(("id" = i64, Path, minimum = 1)),
    responses((status = 204, description = "Removed"), (status = 404, description = "{\"error\": \"Trust root not found\"}")))]
async fn remove_root(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> AttResult<StatusCode> {
    let id = id.parse::<i64>().map_err(|_| AttestationError::TrustRootNotFound)?;
    trust::remove(&ctx.attestation_deps(), &caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
