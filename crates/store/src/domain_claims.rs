//! Domain claims (`DomainClaims`): which names each workspace may have ACME challenge answers
//! presented for, shared by every replica and the plugin host.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;
use trellis_core::domain_claims::{DomainClaim, DomainClaims};

use crate::{DbResult, Store, StoreResult};

const COLUMNS: &str = "id, workspace_id, domain, token, verified_at, method, created_at";

/// The domain claims of every workspace, in the database.
#[derive(Clone)]
pub struct DbDomainClaims {
    store: Store,
}

impl DbDomainClaims {
    pub fn new(store: Store) -> Self {
        DbDomainClaims { store }
    }
}

fn claim(row: &AnyRow) -> StoreResult<DomainClaim> {
    Ok(DomainClaim {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        domain: row.try_get("domain").db()?,
        token: row.try_get("token").db()?,
        verified_at: row.try_get("verified_at").db()?,
        method: row.try_get("method").db()?,
        created_at: row.try_get("created_at").db()?,
    })
}

#[async_trait]
impl DomainClaims for DbDomainClaims {
    async fn insert_claim(&self, c: &DomainClaim) -> StoreResult<()> {
        sqlx::query(&format!("INSERT INTO domain_claims ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"))
            .bind(&c.id)
            .bind(&c.workspace_id)
            .bind(&c.domain)
            .bind(&c.token)
            .bind(c.verified_at)
            .bind(&c.method)
            .bind(c.created_at)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn workspace_claims(&self, workspace_id: &str) -> StoreResult<Vec<DomainClaim>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM domain_claims WHERE workspace_id = $1 ORDER BY created_at, id"
        ))
        .bind(workspace_id)
        .fetch_all(&mut *self.store.reader().await?)
        .await
        .db()?;
        rows.iter().map(claim).collect()
    }

    async fn verified_claims(&self) -> StoreResult<Vec<DomainClaim>> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM domain_claims WHERE verified_at IS NOT NULL"))
            .fetch_all(&mut *self.store.reader().await?)
            .await
            .db()?;
        rows.iter().map(claim).collect()
    }

    async fn mark_verified(&self, id: &str, at: i64, method: &str) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE domain_claims SET verified_at = $1, method = $2 WHERE id = $3")
            .bind(at)
            .bind(method)
            .bind(id)
            .execute(&self.store.pool)
            .await
            .db()?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_claim(&self, workspace_id: &str, id: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM domain_claims WHERE id = $1 AND workspace_id = $2")
            .bind(id)
            .bind(workspace_id)
            .execute(&self.store.pool)
            .await
            .db()?;
        Ok(done.rows_affected() == 1)
    }
}
