//! The event outbox: events enter in the transaction of their change; workers
//! (webhooks, integrations) claim them later with a lease.

use crate::DbResult;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::{Bind, Store, StoreResult, Tx};
use async_trait::async_trait;
use trellis_core::events::{NewEvent, OutboxEvent};
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{EventReads, EventWrites};

#[async_trait]
impl EventReads for Store {
    /// Events of a workspace, newest first, processed or not.
    async fn list_events(
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
    let payload: String = row.try_get("payload").db()?;
    Ok(OutboxEvent {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        event_type: row.try_get("event_type").db()?,
        payload: super::json_column(&payload),
        created_at: row.try_get("created_at").db()?,
        processed_at: row.try_get("processed_at").db()?,
    })
}

#[async_trait]
impl EventWrites for Tx {
    async fn insert_event(&mut self, event: &NewEvent<'_>) -> StoreResult<()> {
        sqlx::query("INSERT INTO event_outbox (workspace_id, event_type, payload, created_at) VALUES ($1, $2, $3, $4)")
            .bind(event.workspace_id)
            .bind(event.event_type)
            .bind(event.payload.to_string())
            .bind(event.created_at)
            .execute(&mut *self.inner)
            .await
            .db()?;
        Ok(())
    }
}
