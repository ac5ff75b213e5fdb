//! `/api/audit-logs` and `/api/events`.

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::extract::Authenticated;
use crate::extract::Query;
use crate::{list, ListEnvelope, PageParams};
use trellis_core::audit::AuditFilter;
use trellis_core::audit::{self, AuditEntry};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::events::OutboxEvent;

pub fn routes() -> Router<SharedContext> {
    Router::new().route("/api/audit-logs", get(list_audit)).route("/api/events", get(list_events))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditDto {
    id: i64,
    workspace_id: Option<String>,
    /// `user`, `api_key` or `system`.
    actor_type: String,
    actor_id: String,
    /// e.g. `certificate.created`, `certificate.revoked`, `api_key.created`.
    action: String,
    target_type: String,
    target_id: Option<String>,
    request_id: Option<String>,
    details: Value,
    created_at: String,
}

fn audit_dto(entry: AuditEntry) -> AuditDto {
    AuditDto {
        id: entry.id,
        workspace_id: entry.workspace_id,
        actor_type: entry.actor_type,
        actor_id: entry.actor_id,
        action: entry.action,
        target_type: entry.target_type,
        target_id: entry.target_id,
        request_id: entry.request_id,
        details: entry.details,
        created_at: rfc3339(entry.created_at),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AuditFilters {
    action: Option<String>,
    actor_id: Option<String>,
    target_type: Option<String>,
    target_id: Option<String>,
    request_id: Option<String>,
    /// RFC 3339 lower bound (inclusive).
    #[param(format = DateTime)]
    since: Option<String>,
    /// RFC 3339 upper bound (exclusive).
    #[param(format = DateTime)]
    until: Option<String>,
}

fn parse_time(field: &str, text: Option<String>) -> Result<Option<i64>, Error> {
    text.map(|t| {
        chrono::DateTime::parse_from_rfc3339(&t)
            .map(|t| t.timestamp_millis())
            .map_err(|_| Error::invalid_field(field, "must be an RFC 3339 timestamp like 2026-01-31T00:00:00Z"))
    })
    .transpose()
}

/// The workspace's audit trail, newest first.
#[utoipa::path(get, path = "/api/audit-logs", tag = "audit", params(AuditFilters, PageParams), responses((status = 200, body = ListEnvelope<AuditDto>)))]
async fn list_audit(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<AuditFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<AuditDto>>> {
    let filter = AuditFilter {
        since: parse_time("since", filters.since)?,
        until: parse_time("until", filters.until)?,
        action: filters.action,
        actor_id: filters.actor_id,
        target_type: filters.target_type,
        target_id: filters.target_id,
        request_id: filters.request_id,
    };
    Ok(list(audit::list(ctx.store.as_ref(), &caller, filter, page.request()?).await?, audit_dto))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventDto {
    id: i64,
    #[serde(rename = "type")]
    event_type: String,
    payload: Value,
    created_at: String,
    /// When delivery workers finished with it; null while pending. An event of a workspace with
    /// no enabled webhook endpoint or integration is processed when it is created.
    processed_at: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventFilters {
    /// e.g. `certificate.created`.
    #[serde(rename = "type")]
    event_type: Option<String>,
}

/// The workspace's event feed (the outbox), newest first.
#[utoipa::path(get, path = "/api/events", tag = "events", params(EventFilters, PageParams), responses((status = 200, body = ListEnvelope<EventDto>)))]
async fn list_events(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Query(filters): Query<EventFilters>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<EventDto>>> {
    let page =
        trellis_core::events::list(ctx.store.as_ref(), &caller, filters.event_type.as_deref(), page.request()?).await?;
    Ok(list(page, |event: OutboxEvent| EventDto {
        id: event.id,
        event_type: event.event_type,
        payload: event.payload,
        created_at: rfc3339(event.created_at),
        processed_at: event.processed_at.map(rfc3339),
    }))
}
