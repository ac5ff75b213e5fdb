//! OpenID Connect sign-in: user identities, sourced memberships and sign-ins in flight.

use async_trait::async_trait;
use sqlx::Row;
use trellis_core::auth::oidc::port::{LoginAttempt, Membership, MembershipSource, OidcReads, OidcWrites};
use trellis_core::auth::{Role, User};
use trellis_core::ids::{UserId, WorkspaceId};

use crate::auth::{user_from_row, USER_COLUMNS};
use crate::{DbResult, Store, StoreError, StoreResult, Tx};

const ATTEMPT_COLUMNS: &str = "state_digest, browser_digest, nonce, code_verifier, redirect, created_at, expires_at";

#[async_trait]
impl OidcReads for Store {
    async fn find_login_attempt(&self, state_digest: &str) -> StoreResult<Option<LoginAttempt>> {
        let sql = format!("SELECT {ATTEMPT_COLUMNS} FROM oidc_login_attempts WHERE state_digest = $1");
        let row = sqlx::query(&sql).bind(state_digest).fetch_optional(&mut *self.reader().await?).await.db()?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(LoginAttempt {
            state_digest: row.try_get("state_digest").db()?,
            browser_digest: row.try_get("browser_digest").db()?,
            nonce: row.try_get("nonce").db()?,
            sealed_verifier: row.try_get("code_verifier").db()?,
            redirect: row.try_get("redirect").db()?,
            created_at: row.try_get("created_at").db()?,
            expires_at: row.try_get("expires_at").db()?,
        }))
    }

    async fn find_identity_user(&self, issuer: &str, subject: &str) -> StoreResult<Option<User>> {
        let sql = format!(
            "SELECT {USER_COLUMNS} FROM user_identities i JOIN users u ON u.id = i.user_id \
             WHERE i.issuer = $1 AND i.subject = $2"
        );
        let row = sqlx::query(&sql).bind(issuer).bind(subject).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn has_identity(&self, user_id: &UserId, issuer: &str) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 FROM user_identities WHERE user_id = $1 AND issuer = $2")
            .bind(user_id.as_str())
            .bind(issuer)
            .fetch_optional(&mut *self.reader().await?)
            .await
            .db()?;
        Ok(row.is_some())
    }

    async fn list_memberships(&self, user_id: &UserId) -> StoreResult<Vec<Membership>> {
        let rows = sqlx::query(
            "SELECT workspace_id, role, source FROM workspace_members WHERE user_id = $1 ORDER BY created_at, workspace_id",
        )
        .bind(user_id.as_str())
        .fetch_all(&mut *self.reader().await?)
        .await
        .db()?;
        rows.iter()
            .map(|row| {
                let role: String = row.try_get("role").db()?;
                let source: String = row.try_get("source").db()?;
                Ok(Membership {
                    workspace_id: WorkspaceId::new(row.try_get::<String, _>("workspace_id").db()?),
                    role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role `{role}`")))?,
                    source: MembershipSource::parse(&source)
                        .ok_or_else(|| StoreError::Corrupt(format!("membership source `{source}`")))?,
                })
            })
            .collect()
    }
}

#[async_trait]
impl OidcWrites for Tx {
    async fn insert_login_attempt(&mut self, attempt: &LoginAttempt, now: i64) -> StoreResult<()> {
        // Abandoned sign-ins are swept here rather than by a separate job.
        sqlx::query("DELETE FROM oidc_login_attempts WHERE expires_at <= $1")
            .bind(now)
            .execute(self.conn().await?)
            .await
            .db()?;
        let sql = format!("INSERT INTO oidc_login_attempts ({ATTEMPT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)");
        sqlx::query(&sql)
            .bind(attempt.state_digest.as_str())
            .bind(attempt.browser_digest.as_str())
            .bind(attempt.nonce.as_str())
            .bind(attempt.sealed_verifier.as_str())
            .bind(attempt.redirect.as_str())
            .bind(attempt.created_at)
            .bind(attempt.expires_at)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn consume_login_attempt(&mut self, state_digest: &str, browser_digest: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM oidc_login_attempts WHERE state_digest = $1 AND browser_digest = $2")
            .bind(state_digest)
            .bind(browser_digest)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() == 1)
    }

    async fn insert_user_identity(
        &mut self,
        issuer: &str,
        subject: &str,
        user_id: &UserId,
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO user_identities (issuer, subject, user_id, created_at, last_login_at) VALUES ($1, $2, $3, $4, $4)",
        )
        .bind(issuer)
        .bind(subject)
        .bind(user_id.as_str())
        .bind(at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn touch_user_identity(&mut self, issuer: &str, subject: &str, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE user_identities SET last_login_at = $3 WHERE issuer = $1 AND subject = $2")
            .bind(issuer)
            .bind(subject)
            .bind(at)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn set_first_name(&mut self, user_id: &UserId, first_name: &str, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE users SET first_name = $2, updated_at = $3 WHERE id = $1")
            .bind(user_id.as_str())
            .bind(first_name)
            .bind(at)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn add_sourced_member(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
        source: MembershipSource,
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO workspace_members (workspace_id, user_id, role, created_at, source) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(workspace_id.as_str())
        .bind(user_id.as_str())
        .bind(role.as_str())
        .bind(at)
        .bind(source.as_str())
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn set_oidc_member_role(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
    ) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE workspace_members SET role = $3 WHERE workspace_id = $1 AND user_id = $2 AND source = 'oidc'",
        )
        .bind(workspace_id.as_str())
        .bind(user_id.as_str())
        .bind(role.as_str())
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn remove_oidc_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<bool> {
        let done =
            sqlx::query("DELETE FROM workspace_members WHERE workspace_id = $1 AND user_id = $2 AND source = 'oidc'")
                .bind(workspace_id.as_str())
                .bind(user_id.as_str())
                .execute(self.conn().await?)
                .await
                .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn set_current_workspace_opt(
        &mut self,
        user_id: &UserId,
        workspace_id: Option<&WorkspaceId>,
    ) -> StoreResult<()> {
        sqlx::query("UPDATE users SET current_workspace_id = $2 WHERE id = $1")
            .bind(user_id.as_str())
            .bind(workspace_id.map(|w| w.as_str()))
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }
}
