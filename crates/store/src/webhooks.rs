//! Webhook endpoints, external integrations and the delivery log, with the delivery worker's
//! claims (row leases; `FOR UPDATE SKIP LOCKED` on PostgreSQL so replicas share the work).

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;

use trellis_core::events::OutboxEvent;
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{WebhookReads, WebhookWrites};
use trellis_core::webhooks::deliveries::{Completion, Delivery, DeliveryFilter, DeliveryStatus, NewDelivery};
use trellis_core::webhooks::worker::Subscriber;
use trellis_core::webhooks::{DeliveryStats, ExternalIntegration, TargetKind, WebhookEndpoint};

use crate::{bool_column, json_column, state_column, Bind, DbResult, Dialect, Store, StoreError, StoreResult, Tx};

const WEBHOOK_COLUMNS: &str = "id, workspace_id, url, description, events, secret_sealed, previous_secret_sealed, \
    previous_secret_until, enabled, disabled_reason, failing_since, created_at, updated_at, \
    COALESCE(subscribed_at, created_at) AS subscribed_at";

const INTEGRATION_COLUMNS: &str = "id, workspace_id, name, integration_type, events, config, enabled, \
    disabled_reason, failing_since, created_at, updated_at, COALESCE(subscribed_at, created_at) AS subscribed_at";

const DELIVERY_COLUMNS: &str = "id, workspace_id, target_kind, target_id, event_id, event_type, payload, status, \
    attempts, next_attempt_at, http_status, latency_ms, error, reference, redelivery_of, created_at, \
    first_attempt_at, last_attempt_at, completed_at, duration_ms";

fn events_column(row: &AnyRow) -> StoreResult<Vec<String>> {
    let text: String = row.try_get("events").db()?;
    serde_json::from_str(&text).map_err(|_| StoreError::Corrupt(format!("subscription list `{text}`")))
}

fn webhook_from_row(row: &AnyRow) -> StoreResult<WebhookEndpoint> {
    Ok(WebhookEndpoint {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        url: row.try_get("url").db()?,
        description: row.try_get("description").db()?,
        events: events_column(row)?,
        secret_sealed: row.try_get("secret_sealed").db()?,
        previous_secret_sealed: row.try_get("previous_secret_sealed").db()?,
        previous_secret_until: row.try_get("previous_secret_until").db()?,
        enabled: bool_column(row.try_get("enabled").db()?),
        disabled_reason: row.try_get("disabled_reason").db()?,
        failing_since: row.try_get("failing_since").db()?,
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
        subscribed_at: row.try_get("subscribed_at").db()?,
    })
}

fn integration_from_row(row: &AnyRow) -> StoreResult<ExternalIntegration> {
    let config: String = row.try_get("config").db()?;
    Ok(ExternalIntegration {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        integration_type: row.try_get("integration_type").db()?,
        events: events_column(row)?,
        config: json_column(&config),
        enabled: bool_column(row.try_get("enabled").db()?),
        disabled_reason: row.try_get("disabled_reason").db()?,
        failing_since: row.try_get("failing_since").db()?,
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
        subscribed_at: row.try_get("subscribed_at").db()?,
    })
}

fn delivery_from_row(row: &AnyRow) -> StoreResult<Delivery> {
    let kind: String = row.try_get("target_kind").db()?;
    Ok(Delivery {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        target_kind: TargetKind::parse(&kind).ok_or_else(|| StoreError::Corrupt(format!("target kind `{kind}`")))?,
        target_id: row.try_get("target_id").db()?,
        event_id: row.try_get("event_id").db()?,
        event_type: row.try_get("event_type").db()?,
        payload: row.try_get("payload").db()?,
        status: state_column(row, "delivery", DeliveryStatus::parse)?,
        attempts: row.try_get("attempts").db()?,
        next_attempt_at: row.try_get("next_attempt_at").db()?,
        http_status: row.try_get("http_status").db()?,
        latency_ms: row.try_get("latency_ms").db()?,
        error: row.try_get("error").db()?,
        reference: row.try_get("reference").db()?,
        redelivery_of: row.try_get("redelivery_of").db()?,
        created_at: row.try_get("created_at").db()?,
        first_attempt_at: row.try_get("first_attempt_at").db()?,
        last_attempt_at: row.try_get("last_attempt_at").db()?,
        completed_at: row.try_get("completed_at").db()?,
        duration_ms: row.try_get("duration_ms").db()?,
    })
}

fn events_text(events: &[String]) -> String {
    serde_json::to_string(events).unwrap_or_else(|_| "[]".into())
}

/// `$first, $first+1, …` for `n` values.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

fn target_table(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Webhook => "webhook_endpoints",
        TargetKind::Integration => "external_integrations",
    }
}

#[async_trait]
impl WebhookReads for Store {
    async fn find_webhook(&self, workspace_id: &str, id: &str) -> StoreResult<Option<WebhookEndpoint>> {
        let sql = format!("SELECT {WEBHOOK_COLUMNS} FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(webhook_from_row).transpose()
    }

    async fn list_webhooks(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<WebhookEndpoint>> {
        let binds = [Bind::Text(workspace_id.to_owned())];
        self.fetch_page(
            WEBHOOK_COLUMNS,
            "webhook_endpoints",
            "workspace_id = $1",
            "created_at DESC, id DESC",
            &binds,
            page,
            webhook_from_row,
        )
        .await
    }

    async fn find_integration(&self, workspace_id: &str, id: &str) -> StoreResult<Option<ExternalIntegration>> {
        let sql =
            format!("SELECT {INTEGRATION_COLUMNS} FROM external_integrations WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(integration_from_row).transpose()
    }

    async fn list_integrations(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<ExternalIntegration>> {
        let binds = [Bind::Text(workspace_id.to_owned())];
        self.fetch_page(
            INTEGRATION_COLUMNS,
            "external_integrations",
            "workspace_id = $1",
            "created_at DESC, id DESC",
            &binds,
            page,
            integration_from_row,
        )
        .await
    }

    async fn delivery_stats(
        &self,
        workspace_id: &str,
        target_ids: &[String],
        since: i64,
    ) -> StoreResult<Vec<(String, DeliveryStats)>> {
        if target_ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT target_id, \
             SUM(CASE WHEN status = 'success' THEN 1 ELSE 0 END) AS succeeded, \
             SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) AS failed \
             FROM webhook_deliveries WHERE workspace_id = $1 AND completed_at >= $2 AND target_id IN ({}) \
             GROUP BY target_id",
            placeholders(3, target_ids.len())
        );
        let mut query = sqlx::query(&sql).bind(workspace_id).bind(since);
        for id in target_ids {
            query = query.bind(id.as_str());
        }
        let rows = query.fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("target_id").db()?,
                    DeliveryStats { succeeded: row.try_get("succeeded").db()?, failed: row.try_get("failed").db()? },
                ))
            })
            .collect()
    }

    async fn list_deliveries(
        &self,
        workspace_id: &str,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Delivery>> {
        let mut clauses = vec!["workspace_id = $1".to_owned()];
        let mut binds = vec![Bind::Text(workspace_id.to_owned())];
        for target in &filter.target_ids {
            binds.push(Bind::Text(target.clone()));
            clauses.push(format!("target_id = ${}", binds.len()));
        }
        for (column, value) in [("status", &filter.status), ("event_type", &filter.event_type)] {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                binds.push(Bind::Text(value.to_owned()));
                clauses.push(format!("{column} = ${}", binds.len()));
            }
        }
        self.fetch_page(
            DELIVERY_COLUMNS,
            "webhook_deliveries",
            &clauses.join(" AND "),
            "created_at DESC, id DESC",
            &binds,
            page,
            delivery_from_row,
        )
        .await
    }

    async fn find_delivery(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Delivery>> {
        let sql = format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(delivery_from_row).transpose()
    }

    async fn has_undelivered_events(&self) -> StoreResult<bool> {
        let row = sqlx::query("SELECT id FROM event_outbox WHERE processed_at IS NULL LIMIT 1")
            .fetch_optional(&mut *self.reader().await?)
            .await
            .db()?;
        Ok(row.is_some())
    }

    async fn has_due_deliveries(&self, now: i64) -> StoreResult<bool> {
        let row = sqlx::query(
            "SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= $1 \
             AND (lease_until IS NULL OR lease_until < $1) LIMIT 1",
        )
        .bind(now)
        .fetch_optional(&mut *self.reader().await?)
        .await
        .db()?;
        Ok(row.is_some())
    }

    async fn delivery_backlog(&self) -> StoreResult<(i64, Option<i64>)> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS pending, MIN(created_at) AS oldest FROM webhook_deliveries WHERE status = 'pending'",
        )
        .fetch_one(&mut *self.reader().await?)
        .await
        .db()?;
        Ok((row.try_get("pending").db()?, row.try_get("oldest").db()?))
    }
}

#[async_trait]
impl WebhookWrites for Tx {
    async fn insert_webhook(&mut self, e: &WebhookEndpoint) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO webhook_endpoints (id, workspace_id, url, description, events, secret_sealed, \
             previous_secret_sealed, previous_secret_until, enabled, disabled_reason, failing_since, created_at, updated_at, \
             subscribed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(&e.id)
        .bind(&e.workspace_id)
        .bind(&e.url)
        .bind(e.description.as_deref())
        .bind(events_text(&e.events))
        .bind(&e.secret_sealed)
        .bind(e.previous_secret_sealed.as_deref())
        .bind(e.previous_secret_until)
        .bind(i64::from(e.enabled))
        .bind(e.disabled_reason.as_deref())
        .bind(e.failing_since)
        .bind(e.created_at)
        .bind(e.updated_at)
        .bind(e.subscribed_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn update_webhook(&mut self, e: &WebhookEndpoint) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE webhook_endpoints SET url = $3, description = $4, events = $5, secret_sealed = $6, \
             previous_secret_sealed = $7, previous_secret_until = $8, enabled = $9, disabled_reason = $10, \
             failing_since = $11, updated_at = $12, subscribed_at = $13 \
             WHERE workspace_id = $1 AND id = $2",
        )
        .bind(&e.workspace_id)
        .bind(&e.id)
        .bind(&e.url)
        .bind(e.description.as_deref())
        .bind(events_text(&e.events))
        .bind(&e.secret_sealed)
        .bind(e.previous_secret_sealed.as_deref())
        .bind(e.previous_secret_until)
        .bind(i64::from(e.enabled))
        .bind(e.disabled_reason.as_deref())
        .bind(e.failing_since)
        .bind(e.updated_at)
        .bind(e.subscribed_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_webhook(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        if done.rows_affected() > 0 {
            self.fail_pending(workspace_id, id, "the webhook endpoint was deleted", at).await?;
        }
        Ok(done.rows_affected() > 0)
    }

    async fn insert_integration(&mut self, i: &ExternalIntegration) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO external_integrations (id, workspace_id, name, integration_type, events, config, enabled, \
             disabled_reason, failing_since, created_at, updated_at, subscribed_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&i.id)
        .bind(&i.workspace_id)
        .bind(&i.name)
        .bind(&i.integration_type)
        .bind(events_text(&i.events))
        .bind(i.config.to_string())
        .bind(i64::from(i.enabled))
        .bind(i.disabled_reason.as_deref())
        .bind(i.failing_since)
        .bind(i.created_at)
        .bind(i.updated_at)
        .bind(i.subscribed_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn update_integration(&mut self, i: &ExternalIntegration) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE external_integrations SET name = $3, integration_type = $4, events = $5, config = $6, \
             enabled = $7, disabled_reason = $8, failing_since = $9, updated_at = $10, subscribed_at = $11 \
             WHERE workspace_id = $1 AND id = $2",
        )
        .bind(&i.workspace_id)
        .bind(&i.id)
        .bind(&i.name)
        .bind(&i.integration_type)
        .bind(events_text(&i.events))
        .bind(i.config.to_string())
        .bind(i64::from(i.enabled))
        .bind(i.disabled_reason.as_deref())
        .bind(i.failing_since)
        .bind(i.updated_at)
        .bind(i.subscribed_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_integration(&mut self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM external_integrations WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        if done.rows_affected() > 0 {
            self.fail_pending(workspace_id, id, "the integration was deleted", at).await?;
        }
        Ok(done.rows_affected() > 0)
    }

    async fn insert_delivery(&mut self, d: &NewDelivery) -> StoreResult<Delivery> {
        self.insert_deliveries(std::slice::from_ref(d)).await?;
        let sql = format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = $1");
        let row = sqlx::query(&sql).bind(&d.id).fetch_one(self.conn().await?).await.db()?;
        delivery_from_row(&row)
    }

    async fn claim_outbox_events(&mut self, limit: i64) -> StoreResult<Vec<OutboxEvent>> {
        let lock = if self.dialect == Dialect::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "SELECT id, workspace_id, event_type, payload, created_at, processed_at FROM event_outbox \
             WHERE processed_at IS NULL ORDER BY id LIMIT $1{lock}"
        );
        let rows = sqlx::query(&sql).bind(limit).fetch_all(self.conn().await?).await.db()?;
        rows.iter()
            .map(|row| {
                let payload: String = row.try_get("payload").db()?;
                Ok(OutboxEvent {
                    id: row.try_get("id").db()?,
                    workspace_id: row.try_get("workspace_id").db()?,
                    event_type: row.try_get("event_type").db()?,
                    payload: json_column(&payload),
                    created_at: row.try_get("created_at").db()?,
                    processed_at: row.try_get("processed_at").db()?,
                })
            })
            .collect()
    }

    async fn subscribers(&mut self, workspace_ids: &[String]) -> StoreResult<Vec<Subscriber>> {
        if workspace_ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = placeholders(1, workspace_ids.len());
        let sql = format!(
            "SELECT 'webhook' AS kind, id, workspace_id, events, COALESCE(subscribed_at, created_at) AS subscribed_at \
             FROM webhook_endpoints WHERE enabled = 1 AND workspace_id IN ({list}) \
             UNION ALL SELECT 'integration' AS kind, id, workspace_id, events, \
             COALESCE(subscribed_at, created_at) AS subscribed_at \
             FROM external_integrations WHERE enabled = 1 AND workspace_id IN ({list})"
        );
        let mut query = sqlx::query(&sql);
        for id in workspace_ids {
            query = query.bind(id.as_str());
        }
        let rows = query.fetch_all(self.conn().await?).await.db()?;
        rows.iter()
            .map(|row| {
                let kind: String = row.try_get("kind").db()?;
                Ok(Subscriber {
                    kind: TargetKind::parse(&kind).unwrap_or(TargetKind::Webhook),
                    id: row.try_get("id").db()?,
                    workspace_id: row.try_get("workspace_id").db()?,
                    events: events_column(row)?,
                    subscribed_at: row.try_get("subscribed_at").db()?,
                })
            })
            .collect()
    }

    async fn insert_deliveries(&mut self, deliveries: &[NewDelivery]) -> StoreResult<()> {
        // Multi-row inserts of up to 50 rows (10 values each), far below both dialects' limits.
        for chunk in deliveries.chunks(50) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let b = i * 10 + 1;
                    format!(
                        "(${}, ${}, ${}, ${}, ${}, ${}, ${}, '{}', 0, ${}, ${}, ${})",
                        b,
                        b + 1,
                        b + 2,
                        b + 3,
                        b + 4,
                        b + 5,
                        b + 6,
                        DeliveryStatus::Pending.as_str(),
                        b + 7,
                        b + 8,
                        b + 9
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO webhook_deliveries (id, workspace_id, target_kind, target_id, event_id, event_type, payload, \
                 status, attempts, next_attempt_at, redelivery_of, created_at) VALUES {} ON CONFLICT DO NOTHING",
                rows.join(", ")
            );
            let mut query = sqlx::query(&sql);
            for d in chunk {
                query = query
                    .bind(d.id.as_str())
                    .bind(d.workspace_id.as_str())
                    .bind(d.target_kind.as_str())
                    .bind(d.target_id.as_str())
                    .bind(d.event_id.as_str())
                    .bind(d.event_type.as_str())
                    .bind(d.payload.as_str())
                    .bind(d.created_at)
                    .bind(d.redelivery_of.as_deref())
                    .bind(d.created_at);
            }
            query.execute(self.conn().await?).await.db()?;
        }
        Ok(())
    }

    async fn mark_events_processed(&mut self, ids: &[i64], at: i64) -> StoreResult<()> {
        for chunk in ids.chunks(500) {
            let sql =
                format!("UPDATE event_outbox SET processed_at = $1 WHERE id IN ({})", placeholders(2, chunk.len()));
            let mut query = sqlx::query(&sql).bind(at);
            for id in chunk {
                query = query.bind(*id);
            }
            query.execute(self.conn().await?).await.db()?;
        }
        Ok(())
    }

    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
        exclude_targets: &[String],
    ) -> StoreResult<Vec<Delivery>> {
        let exclude = if exclude_targets.is_empty() {
            String::new()
        } else {
            format!(" AND target_id NOT IN ({})", placeholders(5, exclude_targets.len()))
        };
        // The due index walked in order: the cost is the rows claimed plus the leased or excluded
        // ones passed over (bounded by what this process has in flight), not the backlog.
        // PostgreSQL locks the candidates, skipping rows another replica holds, and checks the
        // condition again on each row's newest version.
        let lock = if self.dialect == Dialect::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "UPDATE webhook_deliveries SET lease_owner = $2, lease_until = $3 WHERE id IN (\
             SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= $1 \
             AND (lease_until IS NULL OR lease_until < $1){exclude} ORDER BY next_attempt_at LIMIT $4{lock}) \
             RETURNING {DELIVERY_COLUMNS}"
        );
        let mut query = sqlx::query(&sql).bind(now).bind(lease_owner).bind(lease_until).bind(limit);
        for id in exclude_targets {
            query = query.bind(id.as_str());
        }
        let rows = query.fetch_all(self.conn().await?).await.db()?;
        rows.iter().map(delivery_from_row).collect()
    }

    async fn extend_leases(&mut self, lease_owner: &str, now: i64, lease_until: i64) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET lease_until = $3 WHERE lease_owner = $1 AND status = 'pending' AND lease_until >= $2",
        )
        .bind(lease_owner)
        .bind(now)
        .bind(lease_until)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected())
    }

    async fn complete_deliveries(&mut self, completions: &[Completion]) -> StoreResult<u64> {
        let mut applied = 0;
        for c in completions {
            let done = sqlx::query(
                "UPDATE webhook_deliveries SET status = $3, attempts = $4, next_attempt_at = $5, lease_owner = NULL, \
                 lease_until = NULL, http_status = $6, latency_ms = $7, error = $8, reference = COALESCE($9, reference), \
                 first_attempt_at = $10, last_attempt_at = $11, completed_at = $12, duration_ms = $13 \
                 WHERE id = $1 AND lease_owner = $2 AND status = 'pending'",
            )
            .bind(&c.id)
            .bind(&c.lease_owner)
            .bind(c.status.as_str())
            .bind(c.attempts)
            .bind(c.next_attempt_at)
            .bind(c.http_status)
            .bind(c.latency_ms)
            .bind(c.error.as_deref())
            .bind(c.reference.as_deref())
            .bind(c.first_attempt_at)
            .bind(c.last_attempt_at)
            .bind(c.completed_at)
            .bind(c.duration_ms)
            .execute(self.conn().await?)
            .await
            .db()?;
            applied += done.rows_affected();
        }
        Ok(applied)
    }

    async fn record_target_outcomes(
        &mut self,
        succeeded: &[(TargetKind, String)],
        failed: &[(TargetKind, String)],
        at: i64,
    ) -> StoreResult<()> {
        for (kind, id) in succeeded {
            let sql = format!(
                "UPDATE {} SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL",
                target_table(*kind)
            );
            sqlx::query(&sql).bind(id.as_str()).execute(self.conn().await?).await.db()?;
        }
        for (kind, id) in failed {
            let sql = format!(
                "UPDATE {} SET failing_since = $2 WHERE id = $1 AND failing_since IS NULL",
                target_table(*kind)
            );
            sqlx::query(&sql).bind(id.as_str()).bind(at).execute(self.conn().await?).await.db()?;
        }
        Ok(())
    }

    async fn disable_target(&mut self, kind: TargetKind, id: &str, reason: &str, at: i64) -> StoreResult<bool> {
        let sql = format!(
            "UPDATE {} SET enabled = 0, disabled_reason = $2, updated_at = $3 WHERE id = $1 AND enabled = 1",
            target_table(kind)
        );
        let done = sqlx::query(&sql).bind(id).bind(reason).bind(at).execute(self.conn().await?).await.db()?;
        Ok(done.rows_affected() > 0)
    }
}

impl Tx {
    /// Ends the pending deliveries of a deleted target.
    async fn fail_pending(&mut self, workspace_id: &str, target_id: &str, error: &str, at: i64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET status = 'failed', error = $3, completed_at = $4, lease_owner = NULL, \
             lease_until = NULL WHERE workspace_id = $1 AND target_id = $2 AND status = 'pending'",
        )
        .bind(workspace_id)
        .bind(target_id)
        .bind(error)
        .bind(at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }
}
