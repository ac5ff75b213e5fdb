//! Certificate authority records (an internal CA's keys and ledger are in `pki.rs`).

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;

use trellis_core::cas::{CaFields, CaStats, CaStatus, CertificateAuthority, HealthStatus};
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{CaReads, CaWrites};

use crate::{json_column, DbResult, Store, StoreError, StoreResult, Tx};

const CA_COLUMNS: &str = "id, workspace_id, name, ca_type, description, url, status, health_status, issuer_patterns, \
    config, last_sync, created_at, updated_at";

fn ca_from_row(row: &AnyRow) -> StoreResult<CertificateAuthority> {
    let status: String = row.try_get("status").db()?;
    let health: String = row.try_get("health_status").db()?;
    let patterns: String = row.try_get("issuer_patterns").db()?;
    let config: String = row.try_get("config").db()?;
    Ok(CertificateAuthority {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        ca_type: row.try_get("ca_type").db()?,
        description: row.try_get("description").db()?,
        url: row.try_get("url").db()?,
        status: CaStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("CA status `{status}`")))?,
        health_status: HealthStatus::parse(&health)
            .ok_or_else(|| StoreError::Corrupt(format!("CA health `{health}`")))?,
        issuer_patterns: serde_json::from_str(&patterns).unwrap_or_default(),
        config: json_column(&config),
        last_sync: row.try_get("last_sync").db()?,
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

fn patterns_json(fields: &CaFields) -> String {
    serde_json::to_string(&fields.issuer_patterns).unwrap_or_else(|_| "[]".into())
}

#[async_trait]
impl CaReads for Store {
    async fn find_ca(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>> {
        let sql = format!("SELECT {CA_COLUMNS} FROM certificate_authorities WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(ca_from_row).transpose()
    }

    async fn list_cas(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<CertificateAuthority>> {
        self.workspace_page(CA_COLUMNS, "certificate_authorities", workspace_id, None, None, page, ca_from_row).await
    }

    async fn ca_stats(&self, workspace_id: &str) -> StoreResult<CaStats> {
        let row = sqlx::query(
            "SELECT COUNT(*), \
                COALESCE(SUM(CASE WHEN status = 'active' THEN 1 ELSE 0 END), 0), \
                COALESCE(SUM(CASE WHEN status <> 'active' THEN 1 ELSE 0 END), 0), \
                COALESCE(SUM(CASE WHEN health_status = 'healthy' THEN 1 ELSE 0 END), 0) \
             FROM certificate_authorities WHERE workspace_id = $1",
        )
        .bind(workspace_id)
        .fetch_one(&mut *self.reader().await?)
        .await
        .db()?;
        let issued: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM certificates WHERE workspace_id = $1 AND ca_id IS NOT NULL")
                .bind(workspace_id)
                .fetch_one(&mut *self.reader().await?)
                .await
                .db()?;
        Ok(CaStats {
            total: row.try_get(0).db()?,
            connected: row.try_get(1).db()?,
            disconnected: row.try_get(2).db()?,
            healthy: row.try_get(3).db()?,
            certificates_issued: issued,
        })
    }
}

#[async_trait]
impl CaWrites for Tx {
    async fn insert_ca(&mut self, workspace_id: &str, fields: &CaFields, at: i64) -> StoreResult<CertificateAuthority> {
        let sql = format!(
            "INSERT INTO certificate_authorities (workspace_id, name, ca_type, description, url, status, health_status, \
                issuer_patterns, config, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) RETURNING {CA_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(fields.name.as_str())
            .bind(fields.ca_type.as_str())
            .bind(fields.description.as_deref())
            .bind(fields.url.as_deref())
            .bind(fields.status.as_str())
            .bind(fields.health_status.as_str())
            .bind(patterns_json(fields))
            .bind(fields.config.to_string())
            .bind(at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        ca_from_row(&row)
    }

    async fn find_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>> {
        let sql = format!("SELECT {CA_COLUMNS} FROM certificate_authorities WHERE workspace_id = $1 AND id = $2");
        let row = sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(ca_from_row).transpose()
    }

    async fn update_ca(
        &mut self,
        workspace_id: &str,
        id: i64,
        fields: &CaFields,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>> {
        let sql = format!(
            "UPDATE certificate_authorities SET name = $3, ca_type = $4, description = $5, url = $6, status = $7, \
                issuer_patterns = $8, config = $9, updated_at = $10 \
             WHERE workspace_id = $1 AND id = $2 RETURNING {CA_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(id)
            .bind(fields.name.as_str())
            .bind(fields.ca_type.as_str())
            .bind(fields.description.as_deref())
            .bind(fields.url.as_deref())
            .bind(fields.status.as_str())
            .bind(patterns_json(fields))
            .bind(fields.config.to_string())
            .bind(at)
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        row.as_ref().map(ca_from_row).transpose()
    }

    async fn set_ca_health(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: CaStatus,
        health: HealthStatus,
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE certificate_authorities SET status = $3, health_status = $4, updated_at = $5 \
             WHERE workspace_id = $1 AND id = $2",
        )
        .bind(workspace_id)
        .bind(id)
        .bind(status.as_str())
        .bind(health.as_str())
        .bind(at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn claim_ca_health_checks(
        &mut self,
        now: i64,
        due_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateAuthority>> {
        // The outer condition is re-evaluated on each locked row (PostgreSQL), so a CA another
        // replica claimed meanwhile is skipped.
        let due = "status <> 'disconnected' AND (health_checked_at IS NULL OR health_checked_at < $2)";
        let sql = format!(
            "UPDATE certificate_authorities SET health_checked_at = $1 \
             WHERE id IN (SELECT id FROM certificate_authorities WHERE {due} ORDER BY id LIMIT $3) AND ({due}) \
             RETURNING {CA_COLUMNS}"
        );
        let rows = sqlx::query(&sql).bind(now).bind(due_before).bind(limit).fetch_all(self.conn().await?).await.db()?;
        rows.iter().map(ca_from_row).collect()
    }

    async fn touch_ca_sync(
        &mut self,
        workspace_id: &str,
        id: i64,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>> {
        let sql = format!(
            "UPDATE certificate_authorities SET last_sync = $3 WHERE workspace_id = $1 AND id = $2 RETURNING {CA_COLUMNS}"
        );
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).bind(at).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(ca_from_row).transpose()
    }

    async fn delete_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        sqlx::query("UPDATE certificates SET ca_id = NULL WHERE workspace_id = $1 AND ca_id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        let deleted = sqlx::query("DELETE FROM certificate_authorities WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(deleted.rows_affected() > 0)
    }
}
