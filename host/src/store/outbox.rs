//! The event outbox: events enter in the transaction of their change; workers
//! (webhooks, integrations) claim them later with a lease.

use sqlx::Row;

use crate::pagination::{Page, PageRequest};
use crate::store::{Store, StoreResult, Tx};

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
        let filter = if event_type.is_some() { " AND event_type = $2" } else { " AND $2 = ''" };
        let event_type = event_type.unwrap_or("");
        let count_sql = format!("SELECT COUNT(*) FROM event_outbox WHERE workspace_id = $1{filter}");
        let total: i64 =
            sqlx::query(&count_sql).bind(workspace_id).bind(event_type).fetch_one(&self.pool).await?.try_get(0)?;
        let list_sql = format!(
            "SELECT id, workspace_id, event_type, payload, created_at, processed_at FROM event_outbox \
             WHERE workspace_id = $1{filter} ORDER BY id DESC LIMIT $3 OFFSET $4"
        );
        let rows = sqlx::query(&list_sql)
            .bind(workspace_id)
            .bind(event_type)
            .bind(page.limit)
            .bind(page.offset)
            .fetch_all(&self.pool)
            .await?;
        let items = rows
            .iter()
            .map(|row| {
                let payload: String = row.try_get("payload")?;
                Ok(OutboxEvent {
                    id: row.try_get("id")?,
                    workspace_id: row.try_get("workspace_id")?,
                    event_type: row.try_get("event_type")?,
                    payload: super::json_column(&payload),
                    created_at: row.try_get("created_at")?,
                    processed_at: row.try_get("processed_at")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total, request: page })
    }
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
