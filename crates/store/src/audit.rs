//! The append-only audit log. There is deliberately no UPDATE or DELETE here.

use crate::DbResult;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::{json_column, Bind, Store, StoreResult, Tx};
use async_trait::async_trait;
use trellis_core::audit::{AuditEntry, AuditFilter, NewAuditEntry};
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{AuditReads, AuditWrites};

fn entry_from_row(row: &AnyRow) -> StoreResult<AuditEntry> {
    let details: String = row.try_get("details").db()?;
    Ok(AuditEntry {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        actor_type: row.try_get("actor_type").db()?,
        actor_id: row.try_get("actor_id").db()?,
        action: row.try_get("action").db()?,
        target_type: row.try_get("target_type").db()?,
        target_id: row.try_get("target_id").db()?,
        request_id: row.try_get("request_id").db()?,
        details: json_column(&details),
        created_at: row.try_get("created_at").db()?,
    })
}

#[async_trait]
impl AuditReads for Store {
    async fn list_audit(
        &self,
        workspace_id: &str,
        filter: &AuditFilter,
        page: PageRequest,
    ) -> StoreResult<Page<AuditEntry>> {
        let mut clauses = vec!["workspace_id = $1".to_string()];
        let mut binds = vec![Bind::Text(workspace_id.to_string())];
        for (column, value) in [
            ("action", &filter.action),
            ("actor_id", &filter.actor_id),
            ("target_type", &filter.target_type),
            ("target_id", &filter.target_id),
            ("request_id", &filter.request_id),
        ] {
            if let Some(value) = value {
                binds.push(Bind::Text(value.clone()));
                clauses.push(format!("{column} = ${}", binds.len()));
            }
        }
        for (op, value) in [(">=", filter.since), ("<", filter.until)] {
            if let Some(value) = value {
                binds.push(Bind::Int(value));
                clauses.push(format!("created_at {op} ${}", binds.len()));
            }
        }
        let select =
            "id, workspace_id, actor_type, actor_id, action, target_type, target_id, request_id, details, created_at";
        let order = "created_at DESC, id DESC";
        self.fetch_page(select, "audit_logs", &clauses.join(" AND "), order, &binds, page, entry_from_row).await
    }
}

#[async_trait]
impl AuditWrites for Tx {
    async fn insert_audit(&mut self, entry: &NewAuditEntry<'_>) -> StoreResult<()> {
        let sql = crate::insert_sql(INSERT_AUDIT, 1);
        bind_audit(sqlx::query(&sql), entry).execute(self.conn().await?).await.db()?;
        Ok(())
    }
}

/// The insert of an audit row (without its `VALUES`) and its number of parameters.
pub(crate) const INSERT_AUDIT: (&str, usize) = (
    "INSERT INTO audit_logs (workspace_id, actor_type, actor_id, action, target_type, target_id, request_id, details, created_at)",
    9,
);

pub(crate) fn bind_audit<'q>(query: crate::AnyQuery<'q>, entry: &NewAuditEntry<'q>) -> crate::AnyQuery<'q> {
    query
        .bind(entry.workspace_id)
        .bind(entry.actor_type)
        .bind(entry.actor_id)
        .bind(entry.action)
        .bind(entry.target_type)
        .bind(entry.target_id)
        .bind(entry.request_id)
        .bind(entry.details.to_string())
        .bind(entry.created_at)
}
