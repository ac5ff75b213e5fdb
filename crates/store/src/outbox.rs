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

/// How many parameters [`insert_event_sql`] binds ([`bind_event`]).
pub(crate) const EVENT_PARAMETERS: usize = 4;

/// The insert of an outbox event, its parameters numbered from `$first`.
///
/// An event of a workspace with no enabled webhook endpoint or integration enters already
/// processed (at its creation): nobody could receive it, and the fan-out's write transaction
/// (claim, mark, commit, beside the single SQLite writer) would only mark it so. A target
/// receives the events of the changes whose insert ran after its own creation committed,
/// which is what the fan-out's `subscribed_at` rule gave, give or take the instant of the race.
pub(crate) fn insert_event_sql(first: usize) -> String {
    let [workspace, event_type, payload, created_at] = std::array::from_fn(|n| first + n);
    format!(
        "INSERT INTO event_outbox (workspace_id, event_type, payload, created_at, processed_at) \
         SELECT ${workspace}, ${event_type}, ${payload}, ${created_at}, \
         CASE WHEN EXISTS (SELECT 1 FROM webhook_endpoints WHERE workspace_id = ${workspace} AND enabled = 1) \
           OR EXISTS (SELECT 1 FROM external_integrations WHERE workspace_id = ${workspace} AND enabled = 1) \
         THEN NULL ELSE ${created_at} END"
    )
}

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
        let sql = insert_event_sql(1);
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
        for (id, processed) in [(1, Some(10_000)), (2, Some(20_000)), (3, Some(90_000)), (4, None)] {
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

    /// An event enters pending only in a workspace with an enabled webhook endpoint or
    /// integration; elsewhere it enters processed, at its creation, and the fan-out never
    /// takes the write lock for it. Both insert paths (one event; several rows in one text).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_nobody_can_receive_enter_processed() {
        use trellis_core::unit_of_work::{ChangeTx as _, NewRow};
        use trellis_core::webhooks::port::WebhookReads as _;
        let (_dir, store) = crate::testing::store().await;
        for workspace in ["quiet", "heard", "muted", "notified"] {
            sqlx::query("INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ($1, $1, 0, 0)")
                .bind(workspace)
                .execute(&store.pool)
                .await
                .expect("workspace");
        }
        for (id, workspace, enabled) in [("whk_on", "heard", 1_i64), ("whk_off", "muted", 0)] {
            sqlx::query(
                "INSERT INTO webhook_endpoints (id, workspace_id, url, events, secret_sealed, enabled, created_at, \
                 updated_at, subscribed_at) VALUES ($1, $2, 'https://example.com/hook', '[\"*\"]', 'x', $3, 0, 0, 0)",
            )
            .bind(id)
            .bind(workspace)
            .bind(enabled)
            .execute(&store.pool)
            .await
            .expect("endpoint");
        }
        sqlx::query(
            "INSERT INTO external_integrations (id, workspace_id, name, integration_type, events, enabled, \
             created_at, updated_at, subscribed_at) VALUES ('int_on', 'notified', 'chat', 'slack', '[\"*\"]', 1, 0, 0, 0)",
        )
        .execute(&store.pool)
        .await
        .expect("integration");
        let payload = serde_json::json!({});
        let event = |workspace_id, created_at| NewEvent {
            workspace_id,
            event_type: EventType::CertificateCreated,
            payload: &payload,
            created_at,
        };
        let mut tx = store.begin().await.expect("begin");
        for (workspace, at) in [("quiet", 1_000), ("heard", 2_000), ("muted", 3_000), ("notified", 4_000)] {
            tx.insert_event(&event(workspace, at)).await.expect("insert");
        }
        let rows = [
            NewRow::Event(event("quiet", 5_000)),
            NewRow::Event(event("heard", 6_000)),
            NewRow::Event(event("muted", 7_000)),
            NewRow::Event(event("notified", 8_000)),
        ];
        tx.insert_rows(&rows).await.expect("insert rows");
        tx.commit().await.expect("commit");
        let processed: Vec<(String, Option<i64>)> =
            sqlx::query_as("SELECT workspace_id, processed_at FROM event_outbox ORDER BY id")
                .fetch_all(&store.pool)
                .await
                .expect("events");
        let expected = |quiet, muted| {
            vec![
                ("quiet".to_owned(), Some(quiet)),
                ("heard".into(), None),
                ("muted".into(), Some(muted)),
                ("notified".into(), None),
            ]
        };
        assert_eq!(processed[..4], expected(1_000, 3_000)[..]);
        assert_eq!(processed[4..], expected(5_000, 7_000)[..]);
        assert!(store.has_undelivered_events().await.expect("pending"));
    }
}
