//! The event outbox: events enter in the transaction of their change; workers
//! (webhooks, integrations) claim them later with a lease.

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::pagination::{Page, PageRequest};
use crate::store::{Bind, Store, StoreResult, Tx};

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

impl Store {
    /// Events of a workspace, newest first, processed or not.
    pub async fn list_events(
        &self,
        workspace_id: &str,
        event_type: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<OutboxEvent>> {
        let mut where_clause = "workspace_id = $1".to_string();
        let mut binds = vec![Bind::Text(workspace_id.to_string())];
        if let Some(event_type) = event_type {
            where_clause.push_str(" AND event_type = $2");
            binds.push(Bind::Text(event_type.to_string()));
        }
        let select = "id, workspace_id, event_type, payload, created_at, processed_at";
        self.fetch_page(select, "event_outbox", &where_clause, "id DESC", &binds, page, event_from_row).await
    }
}

fn event_from_row(row: &AnyRow) -> StoreResult<OutboxEvent> {
    let payload: String = row.try_get("payload")?;
    Ok(OutboxEvent {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        event_type: row.try_get("event_type")?,
        payload: super::json_column(&payload),
        created_at: row.try_get("created_at")?,
        processed_at: row.try_get("processed_at")?,
    })
}

impl Tx {
    pub async fn insert_event(&mut self, event: &NewEvent<'_>) -> StoreResult<()> {
        sqlx::query("INSERT INTO event_outbox (workspace_id, event_type, payload, created_at) VALUES ($1, $2, $3, $4)")
            .bind(event.workspace_id)
            .bind(event.event_type)
            .bind(event.payload.to_string())
            .bind(event.created_at)
            .execute(&mut *self.inner)
            .await?;
        Ok(())
    }
}
