//! The append-only audit log. There is deliberately no UPDATE or DELETE here.

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::audit::AuditEntry;
use crate::pagination::{Page, PageRequest};
use crate::store::{json_column, Store, StoreResult, Tx};

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
        let mut texts: Vec<&str> = Vec::new();
        for (column, value) in [
            ("action", &filter.action),
            ("actor_id", &filter.actor_id),
            ("target_type", &filter.target_type),
            ("target_id", &filter.target_id),
            ("request_id", &filter.request_id),
        ] {
            if let Some(value) = value {
                texts.push(value);
                clauses.push(format!("{column} = ${}", texts.len() + 1));
            }
        }
        let mut ints: Vec<i64> = Vec::new();
        for (op, value) in [(">=", filter.since), ("<", filter.until)] {
            if let Some(value) = value {
                ints.push(value);
                clauses.push(format!("created_at {op} ${}", texts.len() + ints.len() + 1));
            }
        }
        let where_clause = clauses.join(" AND ");
        fn bind<'q>(
            sql: &'q str,
            workspace_id: &str,
            texts: &[&str],
            ints: &[i64],
        ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
            let mut query = sqlx::query(sql).bind(workspace_id.to_string());
            for text in texts {
                query = query.bind(text.to_string());
            }
            for int in ints {
                query = query.bind(*int);
            }
            query
        }
        let count_sql = format!("SELECT COUNT(*) FROM audit_logs WHERE {where_clause}");
        let total: i64 = bind(&count_sql, workspace_id, &texts, &ints).fetch_one(&self.pool).await?.try_get(0)?;
        let n = texts.len() + ints.len() + 1;
        let list_sql = format!(
            "SELECT id, workspace_id, actor_type, actor_id, action, target_type, target_id, request_id, details, created_at \
             FROM audit_logs WHERE {where_clause} ORDER BY created_at DESC, id DESC LIMIT ${} OFFSET ${}",
            n + 1,
            n + 2
        );
        let rows = bind(&list_sql, workspace_id, &texts, &ints)
            .bind(page.limit)
            .bind(page.offset)
            .fetch_all(&self.pool)
            .await?;
        let items = rows.iter().map(entry_from_row).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total, request: page })
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
