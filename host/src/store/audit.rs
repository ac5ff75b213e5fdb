//! The append-only audit log. There is deliberately no UPDATE or DELETE here.

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::audit::AuditEntry;
use crate::pagination::{Page, PageRequest};
use crate::store::{json_column, Bind, Store, StoreResult, Tx};

pub struct NewAuditEntry<'a> {
    pub workspace_id: Option<&'a str>,
    pub actor_type: &'a str,
    pub actor_id: &'a str,
    pub action: &'a str,
    pub target_type: &'a str,
    pub target_id: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub details: &'a serde_json::Value,
    pub created_at: i64,
}

#[derive(Debug, Default)]
pub struct AuditFilter {
    pub action: Option<String>,
    pub actor_id: Option<String>,
    pub target_type: Option<String>,
    pub target_id: Option<String>,
    pub request_id: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
}

fn entry_from_row(row: &AnyRow) -> StoreResult<AuditEntry> {
    let details: String = row.try_get("details")?;
    Ok(AuditEntry {
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        actor_type: row.try_get("actor_type")?,
        actor_id: row.try_get("actor_id")?,
        action: row.try_get("action")?,
        target_type: row.try_get("target_type")?,
        target_id: row.try_get("target_id")?,
        request_id: row.try_get("request_id")?,
        details: json_column(&details),
        created_at: row.try_get("created_at")?,
    })
}

impl Store {
    pub async fn list_audit(
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

impl Tx {
    pub async fn insert_audit(&mut self, entry: &NewAuditEntry<'_>) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO audit_logs (workspace_id, actor_type, actor_id, action, target_type, target_id, request_id, details, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(entry.workspace_id)
        .bind(entry.actor_type)
        .bind(entry.actor_id)
        .bind(entry.action)
        .bind(entry.target_type)
        .bind(entry.target_id)
        .bind(entry.request_id)
        .bind(entry.details.to_string())
        .bind(entry.created_at)
        .execute(&mut *self.inner)
        .await?;
        Ok(())
    }
}
