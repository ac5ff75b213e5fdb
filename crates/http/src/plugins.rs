//! `/api/plugins` (instance administrators) and `/api/plugin-bindings` (per workspace).
//!
//! Install takes the component bytes as the raw request body (`application/wasm` or
//! `application/octet-stream`), up to 32 MiB; a detached wasmsign2 signature travels beside
//! it, base64 in the `Trellis-Plugin-Signature` header (an embedded one needs nothing).
//! `/api/plugin-keys` is the trust store of publisher keys (instance administrators).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Authenticated, Json, Query};
use crate::plugin_dto::{PluginDto, PluginKeyDto, PluginVersionDto, RevocationDto, TestReportDto};
use crate::{created, data, Data};
use trellis_core::context::SharedContext;
use trellis_core::plugins::service;
use trellis_core::plugins::signatures::{self, NewSigningKey};
use trellis_core::plugins::Activation;
use trellis_core::plugins::StoredBinding;

const MAX_COMPONENT_BYTES: usize = 32 << 20;
/// Refused uploads up to this size are read and dropped before answering (see `install_plugin`).
const DRAIN_BEFORE_REFUSING: u64 = 1 << 20;

fn declared_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers.get(axum::http::header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/plugins", get(list_plugins).post(install_plugin))
        .route("/api/plugins/{id}", get(show_plugin).delete(remove_plugin))
        .route("/api/plugins/{id}/versions/{version}", delete(remove_version))
        .route("/api/plugins/{id}/versions/{version}/activate", post(activate_version))
        .route("/api/plugins/{id}/rollback", post(rollback_plugin))
        .route("/api/plugins/{id}/grants", put(grant_hosts))
        .route("/api/plugin-bindings", get(list_bindings).put(bind))
        .route("/api/plugin-bindings/{kind}/{service_type}", delete(unbind))
        .route("/api/plugin-bindings/{kind}/{service_type}/test", post(test_binding))
        .route("/api/plugin-keys", get(list_keys).post(add_key))
        .route("/api/plugin-keys/{key_id}/revoke", post(revoke_key))
}

/// The header carrying a detached signature (base64 of wasmsign2's detached signature bytes).
pub const SIGNATURE_HEADER: &str = "trellis-plugin-signature";

/// The detached signature of an install, if one was sent. Signatures are a few hundred bytes;
/// anything over 16 KiB is refused rather than decoded.
fn detached_signature(headers: &axum::http::HeaderMap) -> ApiResult<Option<Vec<u8>>> {
    use base64::Engine as _;
    let Some(value) = headers.get(SIGNATURE_HEADER) else { return Ok(None) };
    let invalid = || {
        ApiError::Domain(trellis_core::Error::invalid_field(
            "Trellis-Plugin-Signature",
            "must be the base64 of a detached wasmsign2 signature (at most 16 KiB)",
        ))
    };
    let text = value.to_str().map_err(|_| invalid())?.trim();
    if text.len() > 22 << 10 {
        return Err(invalid());
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).map_err(|_| invalid())?;
    if bytes.is_empty() {
        return Err(invalid());
    }
    Ok(Some(bytes))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InstallParams {
    /// `false` stores the version without activating it; default: activate when newer.
    activate: Option<bool>,
}

#[utoipa::path(post, path = "/api/plugins", tag = "plugins", request_body(content((Vec<u8> = "application/octet-stream"), (Vec<u8> = "application/wasm")), description = "The component bytes (up to 32 MiB)"), params(("activate" = Option<bool>, Query, description = "false: store without activating; true: always activate; absent: activate when newer"), ("Trellis-Plugin-Signature" = Option<String>, Header, description = "Base64 of a detached wasmsign2 signature of the body (an embedded signature needs none)")), responses((status = 201, body = Data<PluginVersionDto>, description = "Installed version: info (describe()), sha256, sizeBytes, witVersion, active, signerKeyId, signatureWarning"), (status = 400, description = "Refused: details.code is plugin.not_a_component, plugin.unsupported_import, plugin.incompatible_wit_version, plugin.unknown_world, plugin.invalid_metadata, …; with TRELLIS_PLUGIN_SIGNATURES=require, error.code PLUGIN_SIGNATURE_REFUSED and details.code plugin.unsigned, plugin.signature_unknown_key, plugin.signature_key_revoked, plugin.signature_invalid or plugin.signature_out_of_scope"), (status = 409, description = "Same id and version (or same bytes) already installed"), (status = 403, description = "Not an instance administrator")))]
async fn install_plugin(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(params): Query<InstallParams>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    // Authorize before reading up to 32 MiB: a non-administrator's upload is refused unread.
    // A small body is drained first so that the client reads the refusal on a clean connection
    // (closing with unread data makes the kernel reset it, and the client may lose the answer).
    if let Err(refused) = service::authorize_install(&caller) {
        if declared_length(&headers).is_some_and(|length| length <= DRAIN_BEFORE_REFUSING) {
            let _ = axum::body::to_bytes(body, DRAIN_BEFORE_REFUSING as usize).await;
        }
        return Err(refused.into());
    }
    let body = axum::body::to_bytes(body, MAX_COMPONENT_BYTES).await.map_err(|err| {
        if std::error::Error::source(&err).is_some_and(|source| source.is::<http_body_util::LengthLimitError>()) {
            ApiError::PayloadTooLarge
        } else {
            ApiError::Domain(trellis_core::Error::validation("The request body could not be read"))
        }
    })?;
    let activation = match params.activate {
        Some(false) => Activation::Never,
        Some(true) => Activation::Always,
        None => Activation::IfNewer,
    };
    let signature = detached_signature(&headers)?;
    let installed = service::install(&ctx.plugin_deps(), &caller, &body, signature.as_deref(), activation).await?;
    Ok(created(PluginVersionDto::from(installed)))
}

#[utoipa::path(get, path = "/api/plugins", tag = "plugins", responses((status = 200, body = Data<Vec<PluginDto>>, description = "Every installed plugin with its versions (instance administrators)")))]
async fn list_plugins(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let plugins: Vec<PluginDto> = service::list(&ctx.plugin_deps(), &caller)?.into_iter().map(Into::into).collect();
    Ok(data(plugins))
}

#[utoipa::path(get, path = "/api/plugins/{id}", tag = "plugins", params(("id" = String, Path)), responses((status = 200, body = Data<PluginDto>, description = "One plugin: id, kind, name, activeVersion, previousVersions, grantedHosts, versions[]"), (status = 404, description = "No such plugin")))]
async fn show_plugin(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    Ok(data(PluginDto::from(service::show(&ctx.plugin_deps(), &caller, &id)?)))
}

#[utoipa::path(post, path = "/api/plugins/{id}/versions/{version}/activate", tag = "plugins", params(("id" = String, Path), ("version" = String, Path)), responses((status = 200, body = Data<PluginDto>, description = "The plugin after activation; calls in flight finish on their version")))]
async fn activate_version(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    Ok(data(PluginDto::from(service::activate(&ctx.plugin_deps(), &caller, &id, &version).await?)))
}

#[utoipa::path(post, path = "/api/plugins/{id}/rollback", tag = "plugins", params(("id" = String, Path)), responses((status = 200, body = Data<PluginDto>, description = "The plugin with the previously active version active again"), (status = 409, description = "Nothing to roll back to")))]
async fn rollback_plugin(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    Ok(data(PluginDto::from(service::rollback(&ctx.plugin_deps(), &caller, &id).await?)))
}

#[utoipa::path(delete, path = "/api/plugins/{id}", tag = "plugins", params(("id" = String, Path)), responses((status = 204, description = "Removed with its versions, bindings, grants and state")))]
async fn remove_plugin(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    service::remove(&ctx.plugin_deps(), &caller, &id, None).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(delete, path = "/api/plugins/{id}/versions/{version}", tag = "plugins", params(("id" = String, Path), ("version" = String, Path)), responses((status = 204, description = "Version removed"), (status = 409, description = "The version is active")))]
async fn remove_version(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path((id, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    service::remove(&ctx.plugin_deps(), &caller, &id, Some(&version)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct GrantBody {
    /// `host`, `host:port`, `*.domain` or an http(s) URL.
    hosts: Vec<String>,
}

#[utoipa::path(put, path = "/api/plugins/{id}/grants", tag = "plugins", params(("id" = String, Path)), request_body = GrantBody, responses((status = 200, body = Data<PluginDto>, description = "The plugin with its new grants")))]
async fn grant_hosts(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<GrantBody>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    Ok(data(PluginDto::from(service::grant_hosts(&ctx.plugin_deps(), &caller, &id, body.hosts).await?)))
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct BindingDto {
    /// `ca-connector`, `integration`, `attestation-verifier` or `issuance-policy`.
    #[schema(pattern = "^(ca-connector|integration|attestation-verifier|issuance-policy)$")]
    kind: String,
    /// The CA type, integration type or attestation check.
    #[serde(rename = "type")]
    #[schema(min_length = 1, pattern = r"\S")]
    service_type: String,
    #[schema(min_length = 1)]
    plugin_id: String,
}

fn binding_dto(binding: StoredBinding) -> BindingDto {
    BindingDto { kind: binding.kind, service_type: binding.service_type, plugin_id: binding.plugin_id }
}

#[utoipa::path(get, path = "/api/plugin-bindings", tag = "plugins", responses((status = 200, description = "The workspace's bindings: [{kind, type, pluginId}] (scope plugins:read)")))]
async fn list_bindings(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let bindings: Vec<BindingDto> =
        service::list_bindings(&ctx.plugin_deps(), &caller).await?.into_iter().map(binding_dto).collect();
    Ok(data(bindings))
}

#[utoipa::path(put, path = "/api/plugin-bindings", tag = "plugins", request_body = BindingDto, responses((status = 200, description = "The binding (scope plugins:write)")))]
async fn bind(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<BindingDto>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let binding = service::bind(&ctx.plugin_deps(), &caller, &body.kind, &body.service_type, &body.plugin_id).await?;
    Ok(data(binding_dto(binding)))
}

#[utoipa::path(delete, path = "/api/plugin-bindings/{kind}/{service_type}", tag = "plugins", params(("kind" = String, Path, pattern = "^(ca-connector|integration|attestation-verifier|issuance-policy)$"), ("service_type" = String, Path, description = "CA type, integration type or attestation check")), responses((status = 204, description = "Binding removed; the default choice applies again")))]
async fn unbind(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path((kind, service_type)): Path<(String, String)>,
) -> ApiResult<Response> {
    service::unbind(&ctx.plugin_deps(), &caller, &kind, &service_type).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
struct TestBody {
    #[serde(default)]
    config: serde_json::Value,
}

#[utoipa::path(post, path = "/api/plugin-bindings/{kind}/{service_type}/test", tag = "plugins", params(("kind" = String, Path, pattern = "^(ca-connector|integration|attestation-verifier|issuance-policy)$"), ("service_type" = String, Path)), request_body(content = Object, description = "{\"config\": {…}}: the configuration a record of this type would carry"), responses((status = 200, body = Data<TestReportDto>, description = "Test report {success, message, checks[{name, status, message}], details}, as the CA test response (spec §4.1); plugin failures give success=false with the error code")))]
async fn test_binding(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path((kind, service_type)): Path<(String, String)>,
    Json(body): Json<TestBody>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    Ok(data(TestReportDto::from(
        service::test_binding(&ctx.plugin_deps(), &caller, &kind, &service_type, body.config).await?,
    )))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct NewKeyBody {
    /// What the key is (the publisher), for people.
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// The ed25519 public key, PEM (`-----BEGIN PUBLIC KEY-----`).
    #[schema(min_length = 1)]
    public_key: String,
    /// Plugin ids the key may sign start with one of these (e.g. `com.example.`).
    #[schema(min_items = 1, max_items = 32)]
    id_prefixes: Vec<String>,
    /// Kinds the key may sign (`ca-connector`, `integration`, `attestation-verifier`,
    /// `issuance-policy`); absent or empty: every kind.
    #[serde(default)]
    kinds: Vec<String>,
}

#[utoipa::path(get, path = "/api/plugin-keys", tag = "plugins", responses((status = 200, body = Data<Vec<PluginKeyDto>>, description = "The trust store of plugin publisher keys, revoked ones included (instance administrators)"), (status = 403, description = "Not an instance administrator")))]
async fn list_keys(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let keys: Vec<PluginKeyDto> =
        signatures::list_keys(&ctx.plugin_deps(), &caller).await?.into_iter().map(Into::into).collect();
    Ok(data(keys))
}

#[utoipa::path(post, path = "/api/plugin-keys", tag = "plugins", request_body = NewKeyBody, responses((status = 201, body = Data<PluginKeyDto>, description = "The key, trusted from now on for its scope"), (status = 400, description = "Not an ed25519 public key, bad prefixes or kinds"), (status = 409, description = "The trust store already holds this key"), (status = 403, description = "Not an instance administrator")))]
async fn add_key(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<NewKeyBody>,
) -> ApiResult<Response> {
    let new = NewSigningKey {
        name: body.name,
        public_key: body.public_key.into_bytes(),
        id_prefixes: body.id_prefixes,
        kinds: body.kinds,
    };
    Ok(created(PluginKeyDto::from(signatures::add_key(&ctx.plugin_deps(), &caller, new).await?)))
}

#[utoipa::path(post, path = "/api/plugin-keys/{key_id}/revoke", tag = "plugins", params(("key_id" = String, Path)), responses((status = 200, body = Data<RevocationDto>, description = "The revoked key and the versions it signed, deactivated (plugin.version_deactivated events)"), (status = 404, description = "No such key"), (status = 409, description = "Already revoked"), (status = 403, description = "Not an instance administrator")))]
async fn revoke_key(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(key_id): Path<String>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    Ok(data(RevocationDto::from(signatures::revoke_key(&ctx.plugin_deps(), &caller, &key_id).await?)))
}
