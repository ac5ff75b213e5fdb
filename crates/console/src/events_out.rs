//! `/events-out`: webhook endpoints (a new endpoint's signing secret shown once), the delivery
//! log with status and attempts and a redeliver button, and the integrations. The use cases
//! are the API's `webhooks::*`.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use trellis_core::auth::Scope;
use trellis_core::context::SharedContext;
use trellis_core::pagination::PageRequest;
use trellis_core::webhooks::deliveries::{self, DeliveryFilter};
use trellis_core::webhooks::endpoints::{self, WebhookInput};
use trellis_core::webhooks::integrations;

use crate::page::{render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

pub struct EndpointRow {
    pub url: String,
    pub events: String,
    pub enabled: bool,
    pub success: String,
}

pub struct DeliveryRow {
    pub id: String,
    pub event_type: String,
    pub target: String,
    pub status: &'static str,
    pub attempts: i64,
    pub http_status: String,
    pub error: String,
    pub at: String,
}

#[derive(Template)]
#[template(path = "events_out.html")]
struct EventsOutPage {
    chrome: Chrome,
    csrf: String,
    can_write: bool,
    endpoints: Vec<EndpointRow>,
    integrations: Vec<(String, String, String, bool)>,
    deliveries: Vec<DeliveryRow>,
    /// A new endpoint's signing secret: shown in this answer only.
    secret: Option<String>,
}

async fn page(ctx: &SharedContext, console: &Console, secret: Option<String>) -> Result<Response, PageError> {
    let caller = &console.caller;
    let page = PageRequest::new(None, Some(50), None, 50)?;
    let endpoints = endpoints::list(&ctx.webhook_deps(), caller, page)
        .await?
        .items
        .into_iter()
        .map(|v| EndpointRow {
            success: format!("{:.1} %", v.stats.success_rate()),
            url: v.endpoint.url,
            events: v.endpoint.events.join(", "),
            enabled: v.endpoint.enabled,
        })
        .collect();
    let integrations = integrations::list(&ctx.webhook_deps(), caller, page)
        .await?
        .items
        .into_iter()
        .map(|v| {
            (v.integration.name, v.integration.integration_type, v.integration.events.join(", "), v.integration.enabled)
        })
        .collect();
    let deliveries = deliveries::list(&ctx.webhook_deps(), caller, &DeliveryFilter::default(), page)
        .await?
        .items
        .into_iter()
        .map(|d| DeliveryRow {
            id: d.id,
            event_type: d.event_type,
            target: format!("{} {}", d.target_kind.as_str(), d.target_id),
            status: d.status.as_str(),
            attempts: d.attempts,
            http_status: d.http_status.map(|s| s.to_string()).unwrap_or_default(),
            error: d.error.unwrap_or_default(),
            at: when(d.created_at),
        })
        .collect();
    render(&EventsOutPage {
        chrome: Chrome::new(console, "Events out", "events-out"),
        csrf: console.csrf.clone(),
        can_write: console.can(Scope::IntegrationsWrite),
        endpoints,
        integrations,
        deliveries,
        secret,
    })
}

pub async fn show(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    page(&ctx, &console, None).await
}

#[derive(Deserialize)]
pub struct NewEndpoint {
    #[serde(default)]
    url: String,
    #[serde(default)]
    events: String,
    #[serde(default)]
    description: String,
}

pub async fn create(
    State(ctx): State<SharedContext>,
    Posted(console, form): Posted<NewEndpoint>,
) -> Result<Response, PageError> {
    let events: Vec<String> =
        form.events.split([',', ' ', '\n']).map(str::trim).filter(|e| !e.is_empty()).map(str::to_string).collect();
    let description = Some(form.description.trim().to_string()).filter(|d| !d.is_empty());
    let input = WebhookInput {
        url: Some(form.url.trim().to_string()),
        events: (!events.is_empty()).then_some(events),
        description: Some(description),
        enabled: Some(true),
    };
    let made = endpoints::create(&ctx.webhook_deps(), &console.caller, input).await?;
    page(&ctx, &console, Some(made.secret)).await
}

#[derive(Deserialize)]
pub struct Empty {}

pub async fn redeliver(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    deliveries::redeliver(&ctx.webhook_deps(), &console.caller, id.trim()).await?;
    Ok(see_other("/events-out"))
}
