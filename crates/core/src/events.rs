//! Domain events. Each is written to the outbox in the transaction of the change that
//! caused it; delivery workers (webhooks, integrations) read the outbox later.

pub const CERTIFICATE_CREATED: &str = "certificate.created";
pub const CERTIFICATE_UPDATED: &str = "certificate.updated";
pub const CERTIFICATE_REVOKED: &str = "certificate.revoked";
pub const CERTIFICATE_DELETED: &str = "certificate.deleted";
pub const CERTIFICATE_EXPIRING: &str = "certificate.expiring";
pub const CERTIFICATE_EXPIRED: &str = "certificate.expired";
pub const CERTIFICATE_RENEWED: &str = "certificate.renewed";
pub const CERTIFICATE_RENEWAL_FAILED: &str = "certificate.renewal_failed";
pub const CA_CREATED: &str = "ca.created";
pub const DISCOVERY_SCAN_COMPLETED: &str = "discovery.scan_completed";
pub const DISCOVERY_NEW_CERTIFICATES_FOUND: &str = "discovery.new_certificates_found";
pub const CA_UPDATED: &str = "ca.updated";
pub const CA_HEALTH_CHANGED: &str = "ca.health_changed";
pub const WORKFLOW_EXECUTION_COMPLETED: &str = "workflow.execution_completed";
pub const ATTESTATION_FAILED: &str = "attestation.failed";
pub const WEBHOOK_TEST: &str = "webhook.test";
/// An endpoint failing for longer than the operator's limit was switched off (not in §6).
pub const WEBHOOK_DISABLED: &str = "webhook.disabled";
/// The same for an external integration.
pub const INTEGRATION_DISABLED: &str = "integration.disabled";

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

/// Retention of the outbox: deletes events delivered more than `retention` before now, in
/// batches (each its own short transaction), and returns how many went. Undelivered events are
/// never deleted, however old. Safe on several replicas: a row is deleted once.
pub async fn purge_delivered(
    ctx: &crate::context::Context,
    retention: std::time::Duration,
) -> crate::error::Result<u64> {
    const BATCH: i64 = 1000;
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let before = ctx.now_millis().saturating_sub(retention_ms);
    let mut purged = 0;
    loop {
        let mut tx = ctx.store.begin().await?;
        let batch = tx.purge_delivered_events(before, BATCH).await?;
        tx.commit().await?;
        purged += batch;
        if batch < BATCH as u64 {
            return Ok(purged);
        }
    }
}
