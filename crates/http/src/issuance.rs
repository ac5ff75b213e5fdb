//! Issuance: `/api/certificates/issue`, `/api/certificate-requests` (approvals),
//! `/api/certificate-templates`, `/api/issuance-policies`, `/api/certificates/crl`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::certificates::{certificate_dto, CertificateDto};
use crate::error::ApiResult;
use crate::extract::{numeric_id, Authenticated, Json, OptionalJson, Query};
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::issuance::policies::{self, IssuancePolicy, NewPolicy};
use trellis_core::issuance::requests::{self, CertificateRequest};
use trellis_core::issuance::templates::{self, Template, TemplateSettings};
use trellis_core::issuance::{self, IssueInput, Issued, Outcome, SubjectInput};

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/certificates/issue", post(issue_certificate))
        .route("/api/certificates/crl", get(list_crl_entries))
        .route("/api/certificate-requests", get(list_requests).post(submit_request))
        .route("/api/certificate-requests/{id}", get(get_request))
        .route("/api/certificate-requests/{id}/approve", post(approve_request))
        .route("/api/certificate-requests/{id}/reject", post(reject_request))
        .route("/api/certificate-templates", get(list_templates).post(create_template))
        .route("/api/certificate-templates/{id}", get(get_template).put(update_template).delete(delete_template))
        .route("/api/issuance-policies", get(list_policies).post(create_policy))
        .route("/api/issuance-policies/{id}", axum::routing::delete(delete_policy))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubjectBody {
    organization: Option<String>,
    organizational_unit: Option<String>,
    /// Two letters.
    country: Option<String>,
    state: Option<String>,
    locality: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssueBody {
    /// The CA to issue through.
    ca_id: i64,
    /// Must match the CA's type when given.
    ca_type: Option<String>,
    /// PEM PKCS#10; without it the server generates the key.
    csr: Option<String>,
    /// Required without `csr`.
    #[schema(max_length = 64)]
    common_name: Option<String>,
    /// DNS names, IP addresses, e-mail addresses and URIs (classified by form).
    #[serde(default, alias = "sans", alias = "alternativeNames")]
    subject_alt_names: Vec<String>,
    /// A built-in template (`web_server`, `client_auth`, `code_signing`, `smime`, `device`); default `web_server`.
    #[serde(alias = "template")]
    template_id: Option<String>,
    #[serde(default)]
    subject: Option<SubjectBody>,
    #[schema(minimum = 1, maximum = 3650)]
    validity_days: Option<u32>,
    /// For a server-generated key: `ecdsa-p256` (default), `ecdsa-p384`, `ed25519`, `rsa-2048`, `rsa-3072`, `rsa-4096`.
    key_algorithm: Option<String>,
    auto_renewal: Option<bool>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

fn issue_input(body: IssueBody) -> IssueInput {
    let subject = body.subject.unwrap_or_default();
    IssueInput {
        ca_id: Some(body.ca_id),
        ca_type: body.ca_type,
        csr: body.csr,
        common_name: body.common_name,
        subject_alt_names: body.subject_alt_names,
        template_id: body.template_id,
        subject: SubjectInput {
            organization: subject.organization,
            organizational_unit: subject.organizational_unit,
            country: subject.country,
            state: subject.state,
            locality: subject.locality,
        },
        validity_days: body.validity_days,
        key_algorithm: body.key_algorithm,
        auto_renewal: body.auto_renewal,
        metadata: body.metadata,
    }
}

/// Issues a certificate through a CA: template, issuance policies, the CA's connector; the
/// result enters the inventory (201). 403 `POLICY_DENIED` with reasons when a policy denies;
/// 202 with the certificate request when a policy requires approval (`pending`) or when the CA
/// accepted the order but has not issued yet (`issuing`, completed in the background).
#[utoipa::path(post, path = "/api/certificates/issue", tag = "certificates", request_body = IssueBody,
    responses((status = 201, description = "`data`: the certificate record with `certificate` (PEM), `chain` (PEM list) and `serialNumber`"),
        (status = 202, body = Data<RequestDto>, description = "A policy requires approval (the `pending` request), or the CA has not issued yet (the `issuing` request, with `statusMessage` and `nextPollAt`)")))]
async fn issue_certificate(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<IssueBody>,
) -> ApiResult<Response> {
    let input = issue_input(body);
    match issuance::issue(&ctx.issuance_deps(), &caller, input).await? {
        Outcome::Issued(issued) => Ok(created(issued_dto(&ctx, *issued))),
        Outcome::AwaitingApproval(request) | Outcome::Issuing(request) => {
            Ok((StatusCode::ACCEPTED, data(request_dto(*request))).into_response())
        }
    }
}

/// The certificate record with its PEM and chain.
fn issued_dto(ctx: &SharedContext, issued: Issued) -> CertificateDto {
    certificate_dto(issued.certificate, ctx.clock.now(), true)
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrlEntryDto {
    /// Lowercase hex.
    serial_number: String,
    revoked_at: String,
    reason: String,
    ca_id: i64,
}

/// Revoked certificates of the workspace's internal CAs, newest first.
#[utoipa::path(get, path = "/api/certificates/crl", tag = "certificates", params(PageParams),
    responses((status = 200, body = ListEnvelope<CrlEntryDto>)))]
async fn list_crl_entries(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<CrlEntryDto>>> {
    let entries = trellis_core::cas::service::revoked_serials(&ctx.ca_deps(), &caller, page.request()?).await?;
    Ok(list(entries, |e| CrlEntryDto {
        serial_number: e.serial_number,
        revoked_at: e.revoked_at.unwrap_or_default().rfc3339(),
        reason: e.revocation_reason.unwrap_or_else(|| "unspecified".into()),
        ca_id: e.ca_id,
    }))
}

/// The workspace's templates: the built-ins (read-only), then its own.
#[utoipa::path(get, path = "/api/certificate-templates", tag = "certificate-templates",
    responses((status = 200, description = "`data`: templates")))]
async fn list_templates(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(templates::list(&ctx.issuance_deps(), &caller).await?))
}

/// One template: a built-in by name, or a workspace template by id.
#[utoipa::path(get, path = "/api/certificate-templates/{id}", tag = "certificate-templates",
    responses((status = 200, description = "`data`: the template")))]
async fn get_template(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(templates::get(&ctx.issuance_deps(), &caller, id.trim()).await?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateBody {
    #[schema(min_length = 1, max_length = 100, pattern = "^[A-Za-z0-9_. -]+$")]
    name: String,
    /// The built-in whose settings absent members take (default `web_server`).
    based_on: Option<String>,
    description: Option<String>,
    /// e.g. `digitalSignature`, `keyEncipherment`.
    key_usages: Option<Vec<String>>,
    /// Dotted OIDs.
    extended_key_usages: Option<Vec<String>>,
    default_validity_days: Option<u32>,
    max_validity_days: Option<u32>,
    /// `ecdsa-p256`, `ecdsa-p384`, `ed25519`, `rsa`.
    allowed_key_algorithms: Option<Vec<String>>,
    min_rsa_bits: Option<u32>,
    /// `{dns, ip, email, uri, required}` booleans.
    #[schema(value_type = Option<Object>)]
    san_rules: Option<Value>,
    /// `{organization, organizationalUnit, country, state, locality}`.
    #[schema(value_type = Option<Object>)]
    subject_defaults: Option<Value>,
    renewal_window_days: Option<u32>,
    /// Revocations of this template's certificates wait for someone else's approval.
    revocation_requires_approval: Option<bool>,
}

fn parse_member<T: serde::de::DeserializeOwned>(field: &str, value: Option<Value>) -> Result<Option<T>, Error> {
    value.map(serde_json::from_value).transpose().map_err(|err| Error::invalid_field(field, err.to_string()))
}

fn template_settings(body: TemplateBody) -> Result<(String, TemplateSettings), Error> {
    Ok((
        body.name,
        TemplateSettings {
            based_on: body.based_on,
            description: body.description,
            key_usages: body.key_usages,
            extended_key_usages: body.extended_key_usages,
            default_validity_days: body.default_validity_days,
            max_validity_days: body.max_validity_days,
            allowed_key_algorithms: body.allowed_key_algorithms,
            min_rsa_bits: body.min_rsa_bits,
            san_rules: parse_member("sanRules", body.san_rules)?,
            subject_defaults: parse_member("subjectDefaults", body.subject_defaults)?,
            renewal_window_days: body.renewal_window_days,
            revocation_requires_approval: body.revocation_requires_approval,
        },
    ))
}

/// Adds a workspace template (usable as `templateId` by its id or name).
#[utoipa::path(post, path = "/api/certificate-templates", tag = "certificate-templates", request_body = TemplateBody,
    responses((status = 201, description = "`data`: the template")))]
async fn create_template(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<TemplateBody>,
) -> ApiResult<Response> {
    let (name, settings) = template_settings(body)?;
    let template: Template = templates::create(&ctx.issuance_deps(), &caller, &name, settings).await?;
    Ok(created(template))
}

/// Replaces a workspace template (built-ins are read-only: 404).
#[utoipa::path(put, path = "/api/certificate-templates/{id}", tag = "certificate-templates", request_body = TemplateBody,
    responses((status = 200, description = "`data`: the template")))]
async fn update_template(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<TemplateBody>,
) -> ApiResult<axum::Json<Value>> {
    let (name, settings) = template_settings(body)?;
    Ok(data(templates::update(&ctx.issuance_deps(), &caller, &id, &name, settings).await?))
}

/// Deletes a workspace template.
#[utoipa::path(delete, path = "/api/certificate-templates/{id}", tag = "certificate-templates",
    responses((status = 204, description = "Deleted")))]
async fn delete_template(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    templates::delete(&ctx.issuance_deps(), &caller, id.trim()).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestDto {
    id: i64,
    ca_id: i64,
    /// `pending` (awaiting approval), `approved`, `issuing` (the CA accepted the order and has
    /// not issued yet), `issued`, `rejected` or `failed`.
    status: String,
    common_name: Option<String>,
    /// The issue body as submitted.
    #[schema(value_type = Object)]
    request: Value,
    /// Why approval is needed (`[{code, message}]`).
    #[schema(value_type = Object)]
    reasons: Value,
    requested_by: String,
    decided_by: Option<String>,
    decided_at: Option<String>,
    decision_reason: Option<String>,
    certificate_id: Option<i64>,
    /// The failure of a `failed` request; on an `issuing` one, the last retryable failure.
    error: Option<String>,
    created_at: String,
    updated_at: String,
    /// `issuing`: what the CA says it waits for.
    status_message: Option<String>,
    /// `issuing`: when Trellis asks the CA next.
    next_poll_at: Option<String>,
    /// How many times Trellis asked the CA after its first answer.
    poll_attempts: i64,
    /// When the CA accepted the order.
    issuing_since: Option<String>,
    /// Set when the request renews that certificate (auto-renewal left pending by the CA).
    renews_certificate_id: Option<i64>,
}

fn request_dto(r: CertificateRequest) -> RequestDto {
    let next_poll_at = r.poll_at.filter(|_| r.status == requests::ISSUING).map(rfc3339);
    RequestDto {
        id: r.id,
        ca_id: r.ca_id,
        status: r.status.to_string(),
        common_name: r.common_name,
        request: r.request,
        reasons: r.reasons,
        requested_by: r.requested_by,
        decided_by: r.decided_by,
        decided_at: r.decided_at.map(rfc3339),
        decision_reason: r.decision_reason,
        certificate_id: r.certificate_id,
        error: r.error,
        created_at: rfc3339(r.created_at),
        updated_at: rfc3339(r.updated_at),
        next_poll_at,
        status_message: r.status_message,
        poll_attempts: r.poll_attempts,
        issuing_since: r.issuing_since.map(rfc3339),
        renews_certificate_id: r.renews_certificate_id,
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RequestFilters {
    /// `pending`, `approved`, `issuing`, `issued`, `rejected`, `failed` (empty: all).
    #[param(pattern = "^(pending|approved|issuing|issued|rejected|failed|)$")]
    status: Option<String>,
}

/// Certificate requests of the workspace, newest first.
#[utoipa::path(get, path = "/api/certificate-requests", tag = "certificate-requests", params(RequestFilters, PageParams),
    responses((status = 200, body = ListEnvelope<RequestDto>)))]
async fn list_requests(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<RequestFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<RequestDto>>> {
    Ok(list(
        requests::list(&ctx.issuance_deps(), &caller, filters.status.as_deref(), page.request()?).await?,
        request_dto,
    ))
}

/// One certificate request.
#[utoipa::path(get, path = "/api/certificate-requests/{id}", tag = "certificate-requests",
    responses((status = 200, body = Data<RequestDto>)))]
async fn get_request(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(request_dto(requests::get(&ctx.issuance_deps(), &caller, numeric_id(&id)?).await?)))
}

/// Submits a request for approval: the issue body (CSR or commonName); nothing is issued until
/// someone else approves it.
#[utoipa::path(post, path = "/api/certificate-requests", tag = "certificate-requests", request_body = IssueBody,
    responses((status = 201, body = Data<RequestDto>)))]
async fn submit_request(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<IssueBody>,
) -> ApiResult<Response> {
    Ok(created(request_dto(requests::submit(&ctx.issuance_deps(), &caller, issue_input(body)).await?)))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovedDto {
    request: RequestDto,
    /// The issued certificate record (with `certificate` and `chain`).
    #[schema(value_type = Object)]
    certificate: CertificateDto,
}

/// Approves a pending request (not one's own) and issues it through the same path as
/// `/api/certificates/issue`: 200 with the certificate, or 202 with the request, now `issuing`,
/// when the CA has not issued yet.
#[utoipa::path(post, path = "/api/certificate-requests/{id}/approve", tag = "certificate-requests",
    responses((status = 200, body = Data<ApprovedDto>),
        (status = 202, body = Data<RequestDto>, description = "The CA has not issued yet: the `issuing` request"),
        (status = 409, description = "Not pending")))]
async fn approve_request(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    match requests::approve(&ctx.issuance_deps(), &caller, numeric_id(&id)?).await? {
        (request, Some(issued)) => {
            Ok(data(ApprovedDto { request: request_dto(request), certificate: issued_dto(&ctx, issued) })
                .into_response())
        }
        (request, None) => Ok((StatusCode::ACCEPTED, data(request_dto(request))).into_response()),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RejectBody {
    #[schema(max_length = 1024)]
    reason: Option<String>,
}

/// Rejects a pending request (not one's own), with an optional reason.
#[utoipa::path(post, path = "/api/certificate-requests/{id}/reject", tag = "certificate-requests",
    request_body(content = Option<RejectBody>, description = "Optional"),
    responses((status = 200, body = Data<RequestDto>), (status = 409, description = "Not pending")))]
async fn reject_request(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<RejectBody>,
) -> ApiResult<axum::Json<Value>> {
    let reason = body.and_then(|b| b.reason);
    Ok(data(request_dto(requests::reject(&ctx.issuance_deps(), &caller, numeric_id(&id)?, reason).await?)))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDto {
    id: i64,
    name: String,
    /// The policy type, served by an issuance-policy plugin (e.g. `domain-policy`).
    #[serde(rename = "type")]
    policy_type: String,
    #[schema(value_type = Object)]
    config: Value,
    position: i64,
    enabled: bool,
    created_at: String,
}

fn policy_dto(p: IssuancePolicy) -> PolicyDto {
    PolicyDto {
        id: p.id,
        name: p.name,
        policy_type: p.policy_type,
        config: trellis_core::plugins::record_config::masked(&p.config),
        position: p.position,
        enabled: p.enabled,
        created_at: rfc3339(p.created_at),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyBody {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    #[serde(rename = "type")]
    #[schema(min_length = 1)]
    policy_type: String,
    #[schema(value_type = Option<Object>)]
    config: Option<Value>,
    /// Evaluation order (ascending); default 0.
    position: Option<i64>,
    enabled: Option<bool>,
}

/// The workspace's issuance policies, in evaluation order.
#[utoipa::path(get, path = "/api/issuance-policies", tag = "issuance-policies",
    responses((status = 200, body = Data<Vec<PolicyDto>>)))]
async fn list_policies(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(policies::list(&ctx.issuance_deps(), &caller).await?.into_iter().map(policy_dto).collect::<Vec<_>>()))
}

/// Adds an issuance policy: every issuance in the workspace runs it from now on.
#[utoipa::path(post, path = "/api/issuance-policies", tag = "issuance-policies", request_body = PolicyBody,
    responses((status = 201, body = Data<PolicyDto>)))]
async fn create_policy(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<PolicyBody>,
) -> ApiResult<Response> {
    let new = NewPolicy {
        name: Some(body.name),
        policy_type: Some(body.policy_type),
        config: body.config,
        position: body.position,
        enabled: body.enabled,
    };
    Ok(created(policy_dto(policies::create(&ctx.issuance_deps(), &caller, new).await?)))
}

/// Removes an issuance policy.
#[utoipa::path(delete, path = "/api/issuance-policies/{id}", tag = "issuance-policies",
    responses((status = 204, description = "Deleted")))]
async fn delete_policy(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    policies::delete(&ctx.issuance_deps(), &caller, numeric_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}
