//! Trellis as an ACME server: the protocol endpoints under `/acme/{caId}/` (RFC 8555; outside
//! `/api`, answered with problem documents, never the API's error envelope) and their REST
//! management (`/api/certificate-authorities/{id}/acme`, `/api/acme/eab-keys`,
//! `/api/acme/accounts`). The protocol itself is `trellis_core::acme`; this file maps it to HTTP.
//! (`acme_challenges.rs` is something else: the HTTP-01 responder of Trellis as an ACME client.)

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::extract::{Authenticated, Json};
use crate::{created, data, Data};
use trellis_core::acme::server::{self, Endpoint, Reply, ReplyBody};
use trellis_core::acme::{admin, DirectoryConfig, EabKey, Problem, ProblemType};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/acme/{ca}/directory", get(directory))
        .route("/acme/{ca}/new-nonce", get(new_nonce_get).head(new_nonce_head))
        .route("/acme/{ca}/new-account", post(new_account))
        .route("/acme/{ca}/account/{id}", post(account))
        .route("/acme/{ca}/account/{id}/orders", post(account_orders))
        .route("/acme/{ca}/key-change", post(key_change))
        .route("/acme/{ca}/new-order", post(new_order))
        .route("/acme/{ca}/order/{id}", post(order))
        .route("/acme/{ca}/order/{id}/finalize", post(finalize))
        .route("/acme/{ca}/authz/{id}", post(authorization))
        .route("/acme/{ca}/chall/{id}", post(challenge))
        .route("/acme/{ca}/cert/{id}", post(certificate))
        .route("/acme/{ca}/revoke-cert", post(revoke_cert))
        .route("/acme/{ca}/renewal-info/{cert_id}", get(renewal_info))
        .route("/api/certificate-authorities/{id}/acme", get(get_directory).put(put_directory))
        .route("/api/acme/eab-keys", get(list_eab_keys).post(create_eab_key))
        .route("/api/acme/eab-keys/{id}", axum::routing::delete(revoke_eab_key))
        .route("/api/acme/accounts", get(list_accounts))
        .route("/api/acme/accounts/{id}/deactivate", post(deactivate_account))
}

/// The one mapping of ACME problem types to HTTP statuses.
fn status_of(kind: ProblemType) -> StatusCode {
    match kind {
        ProblemType::Unauthorized | ProblemType::OrderNotReady => StatusCode::FORBIDDEN,
        ProblemType::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ProblemType::ServerInternal => StatusCode::INTERNAL_SERVER_ERROR,
        ProblemType::NotFound => StatusCode::NOT_FOUND,
        // Boulder answers alreadyReplaced with 409 too: the order conflicts with another.
        ProblemType::Conflict | ProblemType::AlreadyReplaced => StatusCode::CONFLICT,
        _ => StatusCode::BAD_REQUEST,
    }
}

fn directory_link(ctx: &SharedContext, ca: i64) -> String {
    format!("<{}/directory>;rel=\"index\"", server::base_url(&ctx.acme_deps(), ca))
}

/// Headers every ACME answer carries: a fresh nonce (RFC 8555 §6.5: also on errors, so a
/// client retries a badNonce at once), no caching, the directory link.
async fn with_common(ctx: &SharedContext, ca: Option<i64>, mut response: Response) -> Response {
    let headers = response.headers_mut();
    if let Ok(nonce) = server::new_nonce(&ctx.acme_deps()).await {
        if let Ok(value) = HeaderValue::from_str(&nonce) {
            headers.insert("replay-nonce", value);
        }
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(ca) = ca {
        if let Ok(value) = HeaderValue::from_str(&directory_link(ctx, ca)) {
            headers.append(header::LINK, value);
        }
    }
    response
}

fn problem_response(problem: &Problem) -> Response {
    let status = status_of(problem.kind);
    let mut document = problem.document();
    document["status"] = serde_json::json!(status.as_u16());
    let mut response = (status, document.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    if let Some(seconds) = problem.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Some(location) = problem.location.as_deref().and_then(|l| HeaderValue::from_str(l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    response
}

fn reply_response(reply: Reply) -> Response {
    let status = if reply.created { StatusCode::CREATED } else { StatusCode::OK };
    let mut response = match reply.body {
        ReplyBody::Json(value) => {
            let mut r = (status, value.to_string()).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        ReplyBody::PemChain(pem) => {
            let mut r = (status, pem).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/pem-certificate-chain"));
            r
        }
        ReplyBody::Empty => (status, Body::empty()).into_response(),
    };
    let headers = response.headers_mut();
    if let Some(location) = reply.location.as_deref().and_then(|l| HeaderValue::from_str(l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    for (url, rel) in reply.links {
        if let Ok(value) = HeaderValue::from_str(&format!("<{url}>;rel=\"{rel}\"")) {
            headers.append(header::LINK, value);
        }
    }
    if let Some(seconds) = reply.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The CA id of the path: anything but a number is a directory that does not exist.
fn ca_id(text: &str) -> Result<i64, Problem> {
    text.parse::<i64>().map_err(|_| Problem::new(ProblemType::NotFound, "ACME directory not found"))
}

async fn directory(State(ctx): State<SharedContext>, Path(ca): Path<String>) -> Response {
    let answer = match ca_id(&ca) {
        Ok(ca) => server::directory(&ctx.acme_deps(), ca).await.map(|body| {
            let mut r = body.to_string().into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }),
        Err(problem) => Err(problem),
    };
    match answer {
        Ok(response) => response,
        Err(problem) => problem_response(&problem),
    }
}

/// `GET /acme/{caId}/renewal-info/{certID}` (RFC 9773): a plain GET, no JWS.
async fn renewal_info(State(ctx): State<SharedContext>, Path((ca, cert_id)): Path<(String, String)>) -> Response {
    let ca = match ca_id(&ca) {
        Ok(ca) => ca,
        Err(problem) => return problem_response(&problem),
    };
    // No Replay-Nonce: nothing is signed here, and clients poll this on a timer (a nonce is a
    // database row).
    match trellis_core::acme::renewal_info::renewal_info(&ctx.acme_deps(), ca, &cert_id).await {
        Ok(reply) => reply_response(reply),
        Err(problem) => problem_response(&problem),
    }
}

async fn nonce_answer(ctx: SharedContext, ca: String, status: StatusCode) -> Response {
    let ca = match ca_id(&ca) {
        Ok(ca) => ca,
        Err(problem) => return problem_response(&problem),
    };
    match server::nonce_for(&ctx.acme_deps(), ca).await {
        Ok(nonce) => {
            let mut response = (status, Body::empty()).into_response();
            let headers = response.headers_mut();
            if let Ok(value) = HeaderValue::from_str(&nonce) {
                headers.insert("replay-nonce", value);
            }
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            if let Ok(value) = HeaderValue::from_str(&directory_link(&ctx, ca)) {
                headers.append(header::LINK, value);
            }
            response
        }
        Err(problem) => problem_response(&problem),
    }
}

async fn new_nonce_head(State(ctx): State<SharedContext>, Path(ca): Path<String>) -> Response {
    nonce_answer(ctx, ca, StatusCode::OK).await
}

async fn new_nonce_get(State(ctx): State<SharedContext>, Path(ca): Path<String>) -> Response {
    nonce_answer(ctx, ca, StatusCode::NO_CONTENT).await
}

async fn answer(ctx: SharedContext, ca: &str, endpoint: Endpoint, body: Bytes) -> Response {
    let ca = match ca_id(ca) {
        Ok(ca) => ca,
        Err(problem) => return problem_response(&problem),
    };
    let response = match server::post(&ctx.acme_deps(), ca, endpoint, &body).await {
        Ok(reply) => reply_response(reply),
        Err(problem) => problem_response(&problem),
    };
    with_common(&ctx, Some(ca), response).await
}

async fn new_account(State(ctx): State<SharedContext>, Path(ca): Path<String>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::NewAccount, body).await
}

async fn account(State(ctx): State<SharedContext>, Path((ca, id)): Path<(String, String)>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::Account(id), body).await
}

async fn account_orders(
    State(ctx): State<SharedContext>,
    Path((ca, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    answer(ctx, &ca, Endpoint::AccountOrders(id), body).await
}

async fn key_change(State(ctx): State<SharedContext>, Path(ca): Path<String>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::KeyChange, body).await
}

async fn new_order(State(ctx): State<SharedContext>, Path(ca): Path<String>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::NewOrder, body).await
}

async fn order(State(ctx): State<SharedContext>, Path((ca, id)): Path<(String, String)>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::Order(id), body).await
}

async fn finalize(State(ctx): State<SharedContext>, Path((ca, id)): Path<(String, String)>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::Finalize(id), body).await
}

async fn authorization(
    State(ctx): State<SharedContext>,
    Path((ca, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    answer(ctx, &ca, Endpoint::Authorization(id), body).await
}

async fn challenge(State(ctx): State<SharedContext>, Path((ca, id)): Path<(String, String)>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::Challenge(id), body).await
}

async fn certificate(
    State(ctx): State<SharedContext>,
    Path((ca, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    answer(ctx, &ca, Endpoint::Certificate(id), body).await
}

async fn revoke_cert(State(ctx): State<SharedContext>, Path(ca): Path<String>, body: Bytes) -> Response {
    answer(ctx, &ca, Endpoint::RevokeCert, body).await
}

// ---- REST management ----

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcmeDirectoryDto {
    ca_id: i64,
    enabled: bool,
    external_account_required: bool,
    default_template: Option<String>,
    /// Profile name → template id (draft-aaron-acme-profiles).
    profiles: BTreeMap<String, String>,
    challenge_types: Vec<String>,
    order_lifetime_seconds: i64,
    /// What ACME clients are given (`--server`).
    directory_url: String,
    updated_at: Option<String>,
}

fn directory_dto(ctx: &SharedContext, config: DirectoryConfig) -> AcmeDirectoryDto {
    AcmeDirectoryDto {
        directory_url: format!("{}/directory", server::base_url(&ctx.acme_deps(), config.ca_id)),
        ca_id: config.ca_id,
        enabled: config.enabled,
        external_account_required: config.external_account_required,
        default_template: config.default_template,
        profiles: config.profiles,
        challenge_types: config.challenge_types,
        order_lifetime_seconds: config.order_lifetime_seconds,
        updated_at: (config.updated_at > 0).then(|| rfc3339(config.updated_at)),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcmeDirectoryBody {
    enabled: Option<bool>,
    /// Default true: accounts need an EAB key of this CA.
    external_account_required: Option<bool>,
    /// A template id or name; empty clears it (the built-in `web_server` applies).
    #[schema(max_length = 200)]
    default_template: Option<String>,
    profiles: Option<BTreeMap<String, String>>,
    /// Among `http-01`, `dns-01`, `tls-alpn-01`.
    challenge_types: Option<Vec<String>>,
    #[schema(minimum = 60, maximum = 2592000)]
    order_lifetime_seconds: Option<i64>,
}

/// The CA id of a management path: anything but a positive integer names no CA (404).
fn ca_path_id(text: &str) -> Result<i64, crate::error::ApiError> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(crate::error::ApiError::Domain(trellis_core::Error::NotFound(
            trellis_core::error::Entity::CertificateAuthority,
        ))),
    }
}

/// A CA's ACME directory settings.
#[utoipa::path(get, path = "/api/certificate-authorities/{id}/acme", tag = "acme",
    responses((status = 200, body = Data<AcmeDirectoryDto>), (status = 404, description = "No such CA")))]
async fn get_directory(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let config = admin::get_directory(&ctx.acme_deps(), &caller, ca_path_id(&id)?).await?;
    Ok(data(directory_dto(&ctx, config)).into_response())
}

/// Enables or changes a CA's ACME directory (`/acme/{caId}/directory`).
#[utoipa::path(put, path = "/api/certificate-authorities/{id}/acme", tag = "acme", request_body = AcmeDirectoryBody,
    responses((status = 200, body = Data<AcmeDirectoryDto>), (status = 400, description = "Invalid settings"),
        (status = 404, description = "No such CA")))]
async fn put_directory(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<AcmeDirectoryBody>,
) -> ApiResult<Response> {
    let input = admin::DirectoryInput {
        enabled: body.enabled,
        external_account_required: body.external_account_required,
        default_template: body.default_template.map(Some),
        profiles: body.profiles,
        challenge_types: body.challenge_types,
        order_lifetime_seconds: body.order_lifetime_seconds,
    };
    let config = admin::put_directory(&ctx.acme_deps(), &caller, ca_path_id(&id)?, input).await?;
    Ok(data(directory_dto(&ctx, config)).into_response())
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EabKeyDto {
    id: String,
    /// The EAB key identifier ACME clients send (`--eab-kid`).
    key_id: String,
    ca_id: i64,
    name: String,
    /// `unused`, `bound` or `revoked`.
    status: &'static str,
    account_id: Option<String>,
    created_at: String,
    revoked_at: Option<String>,
    /// base64url MAC key (`--eab-hmac-key`): only in the answer that created it.
    #[serde(skip_serializing_if = "Option::is_none")]
    hmac_key: Option<String>,
}

fn eab_dto(key: EabKey, hmac_key: Option<String>) -> EabKeyDto {
    EabKeyDto {
        status: match (&key.revoked_at, &key.account_id) {
            (Some(_), _) => "revoked",
            (None, Some(_)) => "bound",
            (None, None) => "unused",
        },
        id: key.id,
        key_id: key.key_id,
        ca_id: key.ca_id,
        name: key.name,
        account_id: key.account_id,
        created_at: rfc3339(key.created_at),
        revoked_at: key.revoked_at.map(rfc3339),
        hmac_key,
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EabKeyBody {
    ca_id: i64,
    #[schema(min_length = 1, max_length = 200)]
    name: String,
}

/// Creates an external account binding key for a CA's directory; the MAC key is shown once.
#[utoipa::path(post, path = "/api/acme/eab-keys", tag = "acme", request_body = EabKeyBody,
    responses((status = 201, body = Data<EabKeyDto>), (status = 400, description = "Invalid body"),
        (status = 404, description = "No such CA")))]
async fn create_eab_key(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<EabKeyBody>,
) -> ApiResult<Response> {
    let made = admin::create_eab_key(&ctx.acme_deps(), &caller, body.ca_id, &body.name).await?;
    Ok(created(eab_dto(made.key, Some(made.hmac_key))))
}

/// The workspace's EAB keys (MAC keys never shown).
#[utoipa::path(get, path = "/api/acme/eab-keys", tag = "acme", responses((status = 200, body = Data<Vec<EabKeyDto>>)))]
async fn list_eab_keys(State(ctx): State<SharedContext>, Authenticated(caller): Authenticated) -> ApiResult<Response> {
    let keys = admin::list_eab_keys(&ctx.acme_deps(), &caller).await?;
    Ok(data(keys.into_iter().map(|k| eab_dto(k, None)).collect::<Vec<_>>()).into_response())
}

/// Revokes an EAB key: it binds no new account.
#[utoipa::path(delete, path = "/api/acme/eab-keys/{id}", tag = "acme",
    params(("id" = String, Path, description = "EAB key id")),
    responses((status = 204, description = "Revoked"), (status = 404, description = "No such key (or revoked)")))]
async fn revoke_eab_key(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    admin::revoke_eab_key(&ctx.acme_deps(), &caller, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcmeAccountDto {
    id: String,
    ca_id: i64,
    /// `valid`, `deactivated` or `revoked`.
    status: &'static str,
    contact: Vec<String>,
    eab_key_id: Option<String>,
    orders: usize,
    created_at: String,
}

fn account_dto(view: admin::AccountView) -> AcmeAccountDto {
    let account = view.account;
    AcmeAccountDto {
        id: account.id,
        ca_id: account.ca_id,
        status: account.status.as_str(),
        contact: account.contact,
        eab_key_id: account.eab_key_id,
        orders: view.orders,
        created_at: rfc3339(account.created_at),
    }
}

/// The ACME accounts bound to the workspace.
#[utoipa::path(get, path = "/api/acme/accounts", tag = "acme", responses((status = 200, body = Data<Vec<AcmeAccountDto>>)))]
async fn list_accounts(State(ctx): State<SharedContext>, Authenticated(caller): Authenticated) -> ApiResult<Response> {
    let accounts = admin::list_accounts(&ctx.acme_deps(), &caller).await?;
    Ok(data(accounts.into_iter().map(account_dto).collect::<Vec<_>>()).into_response())
}

/// Deactivates an ACME account: its requests are refused from then on.
#[utoipa::path(post, path = "/api/acme/accounts/{id}/deactivate", tag = "acme",
    params(("id" = String, Path, description = "ACME account id")),
    responses((status = 200, body = Data<AcmeAccountDto>), (status = 404, description = "No such account")))]
async fn deactivate_account(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let view = admin::deactivate_account(&ctx.acme_deps(), &caller, &id).await?;
    Ok(data(account_dto(view)).into_response())
}
