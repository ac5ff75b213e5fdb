//! `/api/integrations/external/*`: external integrations served by integration plugins
//! (spec §2.9, §4.4).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::extract::{prefixed_id, Authenticated, Json, Query};
use crate::plugin_dto::TestReportDto;
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::webhooks::integrations::{self, IntegrationInput, IntegrationView};

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/integrations/external", get(list_integrations).post(create_integration))
        .route(
            "/api/integrations/external/{id}",
            get(get_integration).patch(patch_integration).put(put_integration).delete(delete_integration),
        )
        .route("/api/integrations/external/{id}/test", post(test_integration))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntegrationDto {
    /// `int_…`
    id: String,
    name: String,
    /// `slack`, `msteams`, `pagerduty`, `jira`, `servicenow`, `splunk`, `datadog`, …
    #[serde(rename = "type")]
    integration_type: String,
    /// The plugin's settings; secret members read `********`.
    #[schema(value_type = Object)]
    configuration: Value,
    /// Subscribed event types; `["*"]` (the default) = every event.
    events: Vec<String>,
    enabled: bool,
    disabled_reason: Option<String>,
    /// Rolling percentage (0–100) of deliveries that succeeded in the last 24 hours.
    success_rate: f64,
    deliveries_succeeded_24h: i64,
    deliveries_failed_24h: i64,
    failing_since: Option<String>,
    created_at: String,
    updated_at: String,
}

fn integration_dto(view: IntegrationView) -> IntegrationDto {
    let i = view.integration;
    IntegrationDto {
        id: i.id,
        name: i.name,
        integration_type: i.integration_type,
        configuration: view.configuration,
        events: i.events,
        enabled: i.enabled,
        disabled_reason: i.disabled_reason,
        success_rate: view.stats.success_rate(),
        deliveries_succeeded_24h: view.stats.succeeded,
        deliveries_failed_24h: view.stats.failed,
        failing_since: i.failing_since.map(rfc3339),
        created_at: rfc3339(i.created_at),
        updated_at: rfc3339(i.updated_at),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IntegrationBody {
    /// Required on create and PUT.
    #[schema(min_length = 1, max_length = 200)]
    name: Option<String>,
    /// Required on create: a type an installed integration plugin serves.
    #[serde(rename = "type")]
    #[schema(max_length = 64, pattern = "^[a-z0-9_-]+$")]
    integration_type: Option<String>,
    /// The plugin's settings (validated by it); secrets are stored encrypted. Sending
    /// `********` back keeps a stored secret.
    #[schema(value_type = Option<Object>)]
    configuration: Option<Value>,
    /// Event types to deliver; default `["*"]`.
    #[schema(min_items = 1)]
    events: Option<Vec<String>>,
    enabled: Option<bool>,
}

fn input(body: IntegrationBody) -> IntegrationInput {
    IntegrationInput {
        name: body.name,
        integration_type: body.integration_type,
        configuration: body.configuration,
        events: body.events,
        enabled: body.enabled,
    }
}

/// The workspace's external integrations, newest first.
#[utoipa::path(get, path = "/api/integrations/external", tag = "integrations", params(PageParams),
    responses((status = 200, body = ListEnvelope<IntegrationDto>)))]
async fn list_integrations(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<IntegrationDto>>> {
    Ok(list(integrations::list(&ctx.webhook_deps(), &caller, page.request()?).await?, integration_dto))
}

/// Creates an integration `{name, type, configuration}`; the plugin serving `type` validates
/// the configuration.
#[utoipa::path(post, path = "/api/integrations/external", tag = "integrations", request_body = IntegrationBody,
    responses((status = 201, body = Data<IntegrationDto>)))]
async fn create_integration(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<IntegrationBody>,
) -> ApiResult<Response> {
    Ok(created(integration_dto(integrations::create(&ctx.webhook_deps(), &caller, input(body)).await?)))
}

#[utoipa::path(get, path = "/api/integrations/external/{id}", params(("id" = String, Path, pattern = "^int_[0-9a-f]{1,64}$")), tag = "integrations",
    responses((status = 200, body = Data<IntegrationDto>)))]
async fn get_integration(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(integration_dto(integrations::get(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "int_")?).await?)))
}

/// Changes the given members (configuration members merge; `********` keeps a secret).
#[utoipa::path(patch, path = "/api/integrations/external/{id}", params(("id" = String, Path, pattern = "^int_[0-9a-f]{1,64}$")), tag = "integrations", request_body = IntegrationBody,
    responses((status = 200, body = Data<IntegrationDto>)))]
async fn patch_integration(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<IntegrationBody>,
) -> ApiResult<axum::Json<Value>> {
    let id = prefixed_id(&id, "int_")?;
    Ok(data(integration_dto(integrations::update(&ctx.webhook_deps(), &caller, &id, input(body), false).await?)))
}

/// Replaces the integration (name and type required).
#[utoipa::path(put, path = "/api/integrations/external/{id}", params(("id" = String, Path, pattern = "^int_[0-9a-f]{1,64}$")), tag = "integrations", request_body = IntegrationBody,
    responses((status = 200, body = Data<IntegrationDto>)))]
async fn put_integration(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<IntegrationBody>,
) -> ApiResult<axum::Json<Value>> {
    let id = prefixed_id(&id, "int_")?;
    Ok(data(integration_dto(integrations::update(&ctx.webhook_deps(), &caller, &id, input(body), true).await?)))
}

/// Deletes the integration; its pending deliveries end `failed`.
#[utoipa::path(delete, path = "/api/integrations/external/{id}", params(("id" = String, Path, pattern = "^int_[0-9a-f]{1,64}$")), tag = "integrations",
    responses((status = 204, description = "Deleted")))]
async fn delete_integration(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    integrations::delete(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "int_")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a harmless test message through the plugin and reports each check.
#[utoipa::path(post, path = "/api/integrations/external/{id}/test", params(("id" = String, Path, pattern = "^int_[0-9a-f]{1,64}$")), tag = "integrations",
    responses((status = 200, body = Data<TestReportDto>)))]
async fn test_integration(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    let report = integrations::test(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "int_")?).await?;
    Ok(data(TestReportDto::from(report)))
}
