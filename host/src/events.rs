//! Domain events. Each is written to the outbox in the transaction of the change that
//! caused it; delivery workers (webhooks, integrations) read the outbox later.

use crate::store::{NewEvent, StoreResult, Tx};

pub const CERTIFICATE_CREATED: &str = "certificate.created";
pub const CERTIFICATE_UPDATED: &str = "certificate.updated";
pub const CERTIFICATE_REVOKED: &str = "certificate.revoked";
pub const CERTIFICATE_DELETED: &str = "certificate.deleted";
pub const CERTIFICATE_EXPIRING: &str = "certificate.expiring";
pub const CERTIFICATE_EXPIRED: &str = "certificate.expired";

/// Enqueues an event. The payload envelope is `{type, workspaceId, occurredAt, data}`.
pub async fn enqueue(
    tx: &mut Tx,
    workspace_id: &str,
    event_type: &str,
    data: serde_json::Value,
    at: i64,
) -> StoreResult<()> {
    let payload = serde_json::json!({
        "type": event_type,
        "workspaceId": workspace_id,
        "occurredAt": crate::clock::rfc3339(at),
        "data": data,
    });
    tx.insert_event(&NewEvent { workspace_id, event_type, payload: &payload, created_at: at }).await
}

/// The workspace's event feed (what webhooks and integrations receive), newest first.
pub async fn list(
    ctx: &crate::context::Context,
    caller: &crate::auth::Caller,
    event_type: Option<&str>,
    page: crate::pagination::PageRequest,
) -> crate::error::Result<crate::pagination::Page<crate::store::OutboxEvent>> {
    caller.require(crate::auth::Scope::IntegrationsRead)?;
    Ok(ctx.store.list_events(&caller.workspace_id, event_type, page).await?)
}
