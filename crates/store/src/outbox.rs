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

/// The insert of an outbox event (without its `VALUES`) and its number of parameters.
pub(crate) const INSERT_EVENT: (&str, usize) =
    ("INSERT INTO event_outbox (workspace_id, event_type, payload, created_at)", 4);

pub(crate) fn bind_event<'q>(query: crate::AnyQuery<'q>, event: &NewEvent<'q>) -> crate::AnyQuery<'q> {
    query
        .bind(event.workspace_id)
        .bind(event.event_type.as_str())
        .bind(event.payload.to_string())
        .bind(event.created_at)
}

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
        let sql = crate::insert_sql(INSERT_EVENT, 1);
        bind_event(sqlx::query(&sql), event).execute(self.conn().await?).await.db()?;
        Ok(())
    }

    async fn purge_delivered_events(&mut self, before: i64, limit: i64) -> StoreResult<u64> {
        let done = sqlx::query(
            "DELETE FROM event_outbox WHERE id IN (SELECT id FROM event_outbox \
             WHERE processed_at IS NOT NULL AND processed_at < $1 ORDER BY id LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use trellis_core::events::{EventType, NewEvent};
    use trellis_core::ports::Store as _;

    /// Retention deletes delivered events past their age, and never one still to deliver.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_old_delivered_events_are_purged() {
        let (_dir, store) = crate::testing::store().await;
        let payload = serde_json::json!({});
        let mut tx = store.begin().await.expect("begin");
        for at in [1_000, 2_000, 3_000, 4_000] {
            let event = NewEvent {
                workspace_id: "ws",
                event_type: EventType::CertificateCreated,
                payload: &payload,
                created_at: at,
            };
            tx.insert_event(&event).await.expect("insert");
        }
        tx.commit().await.expect("commit");
        // Events 1 and 2 were delivered long ago, 3 recently; 4 is still pending.
        for (id, processed) in [(1, 10_000), (2, 20_000), (3, 90_000)] {
            sqlx::query("UPDATE event_outbox SET processed_at = $1 WHERE id = $2")
                .bind(processed)
                .bind(id)
                .execute(&store.pool)
                .await
                .expect("mark delivered");
        }
        let mut tx = store.begin().await.expect("begin");
        assert_eq!(tx.purge_delivered_events(50_000, 1_000).await.expect("purge"), 2);
        tx.commit().await.expect("commit");
        let left: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM event_outbox ORDER BY id").fetch_all(&store.pool).await.expect("ids");
        assert_eq!(left, vec![3, 4]);
    }
}
