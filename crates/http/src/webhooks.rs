//! `/api/integrations/webhooks/*`: webhook endpoints, their test and secret rotation, and the
//! delivery log (spec §2.7, §2.8, §4.4).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::cas::double_option;
use crate::error::ApiResult;
use crate::extract::{prefixed_id, Authenticated, Json, Query};
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::webhooks::deliveries::{self, Delivery, DeliveryFilter};
use trellis_core::webhooks::endpoints::{self, WebhookInput, WebhookView, WithSecret};

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/integrations/webhooks", get(list_webhooks).post(create_webhook))
        .route("/api/integrations/webhooks/deliveries", get(list_deliveries))
        .route("/api/integrations/webhooks/deliveries/{id}", get(get_delivery))
        .route("/api/integrations/webhooks/deliveries/{id}/redeliver", post(redeliver))
        .route("/api/integrations/webhooks/{id}", get(get_webhook).patch(update_webhook).delete(delete_webhook))
        .route("/api/integrations/webhooks/{id}/test", post(test_webhook))
        .route("/api/integrations/webhooks/{id}/rotate-secret", post(rotate_secret))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDto {
    /// `whk_…`
    id: String,
    url: String,
    description: Option<String>,
    /// Subscribed event types; `["*"]` = every event.
    events: Vec<String>,
    enabled: bool,
    /// Why the endpoint is off (a user, or the service after days of failed deliveries).
    disabled_reason: Option<String>,
    /// Rolling percentage (0–100) of deliveries that succeeded among those finished in the
    /// last 24 hours; 100 when none finished.
    success_rate: f64,
    deliveries_succeeded_24h: i64,
    deliveries_failed_24h: i64,
    /// The first failed attempt since the last success, if failing.
    failing_since: Option<String>,
    /// When the previous secret (after a rotation) stops signing.
    previous_secret_expires_at: Option<String>,
    created_at: String,
    updated_at: String,
}

fn webhook_dto(view: WebhookView) -> WebhookDto {
    let e = view.endpoint;
    WebhookDto {
        id: e.id,
        url: e.url,
        description: e.description,
        events: e.events,
        enabled: e.enabled,
        disabled_reason: e.disabled_reason,
        success_rate: view.stats.success_rate(),
        deliveries_succeeded_24h: view.stats.succeeded,
        deliveries_failed_24h: view.stats.failed,
        failing_since: e.failing_since.map(rfc3339),
        previous_secret_expires_at: e.previous_secret_until.map(rfc3339),
        created_at: rfc3339(e.created_at),
        updated_at: rfc3339(e.updated_at),
    }
}

/// An endpoint with its signing secret: shown only by the call that made the secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookWithSecretDto {
    #[serde(flatten)]
    endpoint: WebhookDto,
    /// `whsec_` + 80 hex digits (40 random bytes). Store it now: it is never shown again.
    secret: String,
}

fn with_secret(made: WithSecret) -> WebhookWithSecretDto {
    WebhookWithSecretDto { endpoint: webhook_dto(made.view), secret: made.secret }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookBody {
    /// Absolute `https://` URL that receives the POSTs (required on create).
    #[schema(max_length = 2000, pattern = "^https://")]
    url: Option<String>,
    /// Non-empty list of event types (required on create); `["*"]` for all.
    #[schema(min_items = 1)]
    events: Option<Vec<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, max_length = 500)]
    description: Option<Option<String>>,
    /// `false` stops deliveries; `true` re-enables (and clears the failure record).
    enabled: Option<bool>,
}

fn input(body: WebhookBody) -> WebhookInput {
    WebhookInput { url: body.url, events: body.events, description: body.description, enabled: body.enabled }
}

/// The workspace's webhook endpoints, newest first (secrets never shown).
#[utoipa::path(get, path = "/api/integrations/webhooks", tag = "webhooks", params(PageParams),
    responses((status = 200, body = ListEnvelope<WebhookDto>)))]
async fn list_webhooks(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<WebhookDto>>> {
    Ok(list(endpoints::list(&ctx.webhook_deps(), &caller, page.request()?).await?, webhook_dto))
}

/// Registers an endpoint; the response carries its `whsec_` signing secret, once.
#[utoipa::path(post, path = "/api/integrations/webhooks", tag = "webhooks", request_body = WebhookBody,
    responses((status = 201, body = Data<WebhookWithSecretDto>)))]
async fn create_webhook(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<WebhookBody>,
) -> ApiResult<Response> {
    Ok(created(with_secret(endpoints::create(&ctx.webhook_deps(), &caller, input(body)).await?)))
}

#[utoipa::path(get, path = "/api/integrations/webhooks/{id}", params(("id" = String, Path, pattern = "^whk_[0-9a-f]{1,64}$")), tag = "webhooks",
    responses((status = 200, body = Data<WebhookDto>)))]
async fn get_webhook(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(webhook_dto(endpoints::get(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "whk_")?).await?)))
}

/// Changes URL, events, description or enabled (absent members stay).
#[utoipa::path(patch, path = "/api/integrations/webhooks/{id}", params(("id" = String, Path, pattern = "^whk_[0-9a-f]{1,64}$")), tag = "webhooks", request_body = WebhookBody,
    responses((status = 200, body = Data<WebhookDto>)))]
async fn update_webhook(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<WebhookBody>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(webhook_dto(
        endpoints::update(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "whk_")?, input(body)).await?,
    )))
}

/// Deletes the endpoint; its pending deliveries end `failed`.
#[utoipa::path(delete, path = "/api/integrations/webhooks/{id}", params(("id" = String, Path, pattern = "^whk_[0-9a-f]{1,64}$")), tag = "webhooks",
    responses((status = 204, description = "Deleted")))]
async fn delete_webhook(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    endpoints::delete(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "whk_")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestEnqueuedDto {
    /// The delivery of the synthetic `webhook.test` event.
    delivery_id: String,
}

/// Enqueues a synthetic `webhook.test` event for this endpoint; returns its `deliveryId`.
#[utoipa::path(post, path = "/api/integrations/webhooks/{id}/test", params(("id" = String, Path, pattern = "^whk_[0-9a-f]{1,64}$")), tag = "webhooks",
    responses((status = 200, body = Data<TestEnqueuedDto>)))]
async fn test_webhook(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    let delivery = endpoints::test(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "whk_")?).await?;
    Ok(data(TestEnqueuedDto { delivery_id: delivery.id }))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RotateBody {
    /// How long the current secret keeps signing beside the new one: 0 to 604800 seconds,
    /// default 86400.
    #[serde(default, deserialize_with = "crate::extract::optional_integral")]
    #[schema(minimum = 0, maximum = 604800)]
    grace_seconds: Option<i64>,
}

/// Makes a new signing secret (returned once); the current one keeps signing for the grace
/// period, so receivers can switch without a failed delivery.
#[utoipa::path(post, path = "/api/integrations/webhooks/{id}/rotate-secret", params(("id" = String, Path, pattern = "^whk_[0-9a-f]{1,64}$")), tag = "webhooks",
    request_body(content = Option<RotateBody>, description = "Optional"),
    responses((status = 200, body = Data<WebhookWithSecretDto>)))]
async fn rotate_secret(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<axum::Json<Value>> {
    // The body is optional: empty means the default grace period.
    let body: RotateBody = if body.iter().all(u8::is_ascii_whitespace) {
        RotateBody::default()
    } else {
        serde_json::from_slice::<Option<RotateBody>>(&body)
            .map_err(|err| Error::validation(format!("The request body is not a valid rotation request: {err}")))?
            .unwrap_or_default()
    };
    let grace = body.grace_seconds;
    Ok(data(with_secret(
        endpoints::rotate_secret(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "whk_")?, grace).await?,
    )))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryDto {
    /// `dlv_…`
    delivery_id: String,
    /// `webhook` or `integration`.
    target_type: &'static str,
    /// The webhook endpoint (`whk_…`) or integration (`int_…`).
    target_id: String,
    /// Receivers deduplicate on it (header `Trellis-Event-Id`).
    event_id: String,
    event_type: String,
    /// The exact JSON body that was or will be POSTed.
    #[schema(value_type = Object)]
    payload: Value,
    /// `pending`, `success` or `failed`.
    status: String,
    attempts: i64,
    /// When the next attempt is due (pending deliveries).
    next_attempt_at: Option<String>,
    /// Status the receiver returned on the last attempt.
    http_status: Option<i64>,
    /// Milliseconds to the first byte of the last attempt's response.
    latency_ms: Option<i64>,
    /// Why the last attempt failed.
    error: Option<String>,
    /// What an integration created (message, incident key, ticket).
    reference: Option<String>,
    /// From the first attempt to the end of the last, retries included.
    duration_ms: Option<i64>,
    /// The delivery this one re-sends.
    redelivery_of: Option<String>,
    created_at: String,
    first_attempt_at: Option<String>,
    last_attempt_at: Option<String>,
    completed_at: Option<String>,
}

pub(crate) fn delivery_dto(d: Delivery) -> DeliveryDto {
    let payload = deliveries::payload_json(&d);
    DeliveryDto {
        next_attempt_at: (d.status == deliveries::DeliveryStatus::Pending).then(|| rfc3339(d.next_attempt_at)),
        delivery_id: d.id,
        target_type: d.target_kind.as_str(),
        target_id: d.target_id,
        event_id: d.event_id,
        event_type: d.event_type,
        payload,
        status: d.status.as_str().to_owned(),
        attempts: d.attempts,
        http_status: d.http_status,
        latency_ms: d.latency_ms,
        error: d.error,
        reference: d.reference,
        duration_ms: d.duration_ms,
        redelivery_of: d.redelivery_of,
        created_at: rfc3339(d.created_at),
        first_attempt_at: d.first_attempt_at.map(rfc3339),
        last_attempt_at: d.last_attempt_at.map(rfc3339),
        completed_at: d.completed_at.map(rfc3339),
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryFilters {
    /// Only deliveries to this webhook endpoint (`whk_…`).
    #[param(pattern = "^(whk_[0-9a-f]{1,64})?$")]
    webhook_id: Option<String>,
    /// Only deliveries to this external integration (`int_…`).
    #[param(pattern = "^(int_[0-9a-f]{1,64})?$")]
    integration_id: Option<String>,
    /// `pending`, `success` or `failed`.
    #[param(pattern = "^(pending|success|failed|)$")]
    status: Option<String>,
    /// Only this event type.
    event_type: Option<String>,
}

/// Delivery records, newest first, optionally of one endpoint or integration.
#[utoipa::path(get, path = "/api/integrations/webhooks/deliveries", tag = "webhooks", params(DeliveryFilters, PageParams),
    responses((status = 200, body = ListEnvelope<DeliveryDto>)))]
async fn list_deliveries(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<DeliveryFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<DeliveryDto>>> {
    let webhook =
        filters.webhook_id.as_deref().filter(|s| !s.is_empty()).map(|id| prefixed_id(id, "whk_")).transpose()?;
    let integration =
        filters.integration_id.as_deref().filter(|s| !s.is_empty()).map(|id| prefixed_id(id, "int_")).transpose()?;
    let filter = DeliveryFilter {
        target_ids: webhook.into_iter().chain(integration).collect(),
        status: filters.status.filter(|s| !s.is_empty()),
        event_type: filters.event_type.filter(|s| !s.is_empty()),
    };
    Ok(list(deliveries::list(&ctx.webhook_deps(), &caller, &filter, page.request()?).await?, delivery_dto))
}

#[utoipa::path(get, path = "/api/integrations/webhooks/deliveries/{id}", params(("id" = String, Path, pattern = "^dlv_[0-9a-f]{1,64}$")), tag = "webhooks",
    responses((status = 200, body = Data<DeliveryDto>)))]
async fn get_delivery(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    Ok(data(delivery_dto(deliveries::get(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "dlv_")?).await?)))
}

/// Sends the delivery's payload again as a new delivery (same event id).
#[utoipa::path(post, path = "/api/integrations/webhooks/deliveries/{id}/redeliver", params(("id" = String, Path, pattern = "^dlv_[0-9a-f]{1,64}$")), tag = "webhooks",
    responses((status = 201, body = Data<DeliveryDto>)))]
async fn redeliver(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(created(delivery_dto(deliveries::redeliver(&ctx.webhook_deps(), &caller, &prefixed_id(&id, "dlv_")?).await?)))
}
