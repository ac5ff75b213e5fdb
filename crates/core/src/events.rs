//! Domain events. Each is written to the outbox in the transaction of the change that
//! caused it; delivery workers (webhooks, integrations) read the outbox later.

pub const CERTIFICATE_CREATED: &str = "certificate.created";
pub const CERTIFICATE_UPDATED: &str = "certificate.updated";
pub const CERTIFICATE_REVOKED: &str = "certificate.revoked";
pub const CERTIFICATE_DELETED: &str = "certificate.deleted";
pub const CERTIFICATE_EXPIRING: &str = "certificate.expiring";
pub const CERTIFICATE_EXPIRED: &str = "certificate.expired";

/// The payload envelope every event is delivered in: `{type, workspaceId, occurredAt, data}`.
pub fn envelope(workspace_id: &str, event_type: &str, data: &serde_json::Value, at: i64) -> serde_json::Value {
    serde_json::json!({
        "type": event_type,
        "workspaceId": workspace_id,
        "occurredAt": crate::clock::rfc3339(at),
        "data": data,
    })
}

/// An event to append to the outbox.
pub struct NewEvent<'a> {
    pub workspace_id: &'a str,
    pub event_type: &'a str,
    pub payload: &'a serde_json::Value,
    pub created_at: i64,
}

/// An outbox row as workers and tests see it.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    pub id: i64,
    pub workspace_id: String,
    pub event_type: String,
    pub payload: serde_json::Value,
    pub created_at: i64,
    pub processed_at: Option<i64>,
}

/// The workspace's event feed (what webhooks and integrations receive), newest first.
pub async fn list(
    ctx: &crate::context::Context,
    caller: &crate::auth::Caller,
    event_type: Option<&str>,
    page: crate::pagination::PageRequest,
) -> crate::error::Result<crate::pagination::Page<OutboxEvent>> {
    caller.require(crate::auth::Scope::IntegrationsRead)?;
    Ok(ctx.store.list_events(&caller.workspace_id, event_type, page).await?)
}
