//! Users, workspaces, memberships, sessions and API keys.

use crate::DbResult;
use sqlx::any::AnyRow;
use sqlx::Row;
use trellis_core::ids::{ApiKeyId, UserId, WorkspaceId};

use crate::{bool_column, Bind, Dialect, Store, StoreError, StoreResult, Tx};
use async_trait::async_trait;
use trellis_core::auth::{ApiKey, Invitation, KeyKind, Member, Role, Scope, User, Workspace};
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{AuthReads, AuthWrites};

pub(crate) const USER_COLUMNS: &str = "u.id, u.email, u.first_name, u.is_admin, u.current_workspace_id, u.created_at";
const KEY_COLUMNS: &str = "id, workspace_id, name, kind, key_prefix, scopes, created_by, created_at, last_used_at";

pub(crate) fn user_from_row(row: &AnyRow) -> StoreResult<User> {
    Ok(User {
        id: row.try_get::<String, _>("id").db()?.into(),
        email: row.try_get("email").db()?,
        first_name: row.try_get("first_name").db()?,
        is_admin: bool_column(row.try_get("is_admin").db()?),
        current_workspace_id: row.try_get::<Option<String>, _>("current_workspace_id").db()?.map(Into::into),
        created_at: row.try_get("created_at").db()?,
    })
}

fn key_from_row(row: &AnyRow) -> StoreResult<ApiKey> {
    let kind: String = row.try_get("kind").db()?;
    let scopes: String = row.try_get("scopes").db()?;
    Ok(ApiKey {
        id: row.try_get::<String, _>("id").db()?.into(),
        workspace_id: row.try_get::<String, _>("workspace_id").db()?.into(),
        name: row.try_get("name").db()?,
        kind: KeyKind::parse(&kind).ok_or_else(|| StoreError::Corrupt(format!("api key kind `{kind}`")))?,
        prefix: row.try_get("key_prefix").db()?,
        // Unknown names (from a newer version) are dropped rather than granted.
        scopes: scopes.split(',').filter_map(Scope::parse).collect(),
        created_by: row.try_get("created_by").db()?,
        created_at: row.try_get("created_at").db()?,
        last_used_at: row.try_get("last_used_at").db()?,
    })
}

const MEMBER_COLUMNS: &str = "u.id, u.email, u.first_name, m.role, m.created_at";
const INVITATION_COLUMNS: &str = "id, workspace_id, email, role, invited_by, created_at, expires_at";

fn role_column(row: &AnyRow) -> StoreResult<Role> {
    let role: String = row.try_get("role").db()?;
    Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role `{role}`")))
}

fn member_from_row(row: &AnyRow) -> StoreResult<Member> {
    Ok(Member {
        user_id: row.try_get::<String, _>("id").db()?.into(),
        email: row.try_get("email").db()?,
        first_name: row.try_get("first_name").db()?,
        role: role_column(row)?,
        joined_at: row.try_get("created_at").db()?,
    })
}

fn invitation_from_row(row: &AnyRow) -> StoreResult<Invitation> {
    Ok(Invitation {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get::<String, _>("workspace_id").db()?.into(),
        email: row.try_get("email").db()?,
        role: role_column(row)?,
        invited_by: row.try_get("invited_by").db()?,
        created_at: row.try_get("created_at").db()?,
        expires_at: row.try_get("expires_at").db()?,
    })
}

pub(crate) fn workspace_from_row(row: &AnyRow, with_role: bool) -> StoreResult<Workspace> {
    let role = if with_role {
        let role: String = row.try_get("role").db()?;
        Some(Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role `{role}`")))?)
    } else {
        None
    };
    Ok(Workspace {
        id: row.try_get::<String, _>("id").db()?.into(),
        name: row.try_get("name").db()?,
        role,
        created_at: row.try_get("created_at").db()?,
    })
}

#[async_trait]
impl AuthReads for Store {
    async fn count_users(&self) -> StoreResult<i64> {
        Ok(sqlx::query("SELECT COUNT(*) FROM users")
            .fetch_one(&mut *self.reader().await?)
            .await
            .db()?
            .try_get(0)
            .db()?)
    }

    /// The user and their password hash, by normalised email.
    async fn find_user_credentials(&self, email: &str) -> StoreResult<Option<(User, String)>> {
        let sql = format!("SELECT {USER_COLUMNS}, u.password_hash FROM users u WHERE u.email = $1");
        let row = sqlx::query(&sql).bind(email).fetch_optional(&mut *self.reader().await?).await.db()?;
        match row {
            Some(row) => Ok(Some((user_from_row(&row)?, row.try_get("password_hash").db()?))),
            None => Ok(None),
        }
    }

    async fn find_session_user(&self, token_hash: &str, now: i64) -> StoreResult<Option<User>> {
        let sql = format!(
            "SELECT {USER_COLUMNS} FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = $1 AND s.expires_at > $2"
        );
        let row = sqlx::query(&sql).bind(token_hash).bind(now).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn find_membership(&self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Role>> {
        let row = sqlx::query("SELECT role FROM workspace_members WHERE workspace_id = $1 AND user_id = $2")
            .bind(workspace_id.as_str())
            .bind(user_id.as_str())
            .fetch_optional(&mut *self.reader().await?)
            .await
            .db()?;
        match row {
            Some(row) => {
                let role: String = row.try_get(0).db()?;
                Ok(Some(Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role `{role}`")))?))
            }
            None => Ok(None),
        }
    }

    async fn find_workspace(&self, id: &str) -> StoreResult<Option<Workspace>> {
        let row = sqlx::query("SELECT id, name, created_at FROM workspaces WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *self.reader().await?)
            .await
            .db()?;
        row.as_ref().map(|row| workspace_from_row(row, false)).transpose()
    }

    async fn find_workspaces_by_name(&self, name: &str) -> StoreResult<Vec<Workspace>> {
        let rows = sqlx::query("SELECT id, name, created_at FROM workspaces WHERE name = $1 ORDER BY created_at, id")
            .bind(name)
            .fetch_all(&mut *self.reader().await?)
            .await
            .db()?;
        rows.iter().map(|row| workspace_from_row(row, false)).collect()
    }

    async fn list_members(&self, workspace_id: &WorkspaceId, page: PageRequest) -> StoreResult<Page<Member>> {
        self.fetch_page(
            MEMBER_COLUMNS,
            "workspace_members m JOIN users u ON u.id = m.user_id",
            "m.workspace_id = $1",
            "m.created_at DESC, u.id",
            &[Bind::Text(workspace_id.to_string())],
            page,
            member_from_row,
        )
        .await
    }

    async fn list_invitations(
        &self,
        workspace_id: &WorkspaceId,
        now: i64,
        page: PageRequest,
    ) -> StoreResult<Page<Invitation>> {
        self.fetch_page(
            INVITATION_COLUMNS,
            "workspace_invitations",
            "workspace_id = $1 AND expires_at > $2",
            "created_at DESC, id",
            &[Bind::Text(workspace_id.to_string()), Bind::Int(now)],
            page,
            invitation_from_row,
        )
        .await
    }

    async fn list_user_workspaces(&self, user_id: &str) -> StoreResult<Vec<Workspace>> {
        let rows = sqlx::query(
            "SELECT w.id, w.name, w.created_at, m.role FROM workspaces w \
             JOIN workspace_members m ON m.workspace_id = w.id WHERE m.user_id = $1 ORDER BY w.created_at DESC, w.id",
        )
        .bind(user_id)
        .fetch_all(&mut *self.reader().await?)
        .await
        .db()?;
        rows.iter().map(|row| workspace_from_row(row, true)).collect()
    }

    async fn find_api_key_by_hash(&self, key_hash: &str) -> StoreResult<Option<ApiKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = $1");
        let row = sqlx::query(&sql).bind(key_hash).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(key_from_row).transpose()
    }

    async fn list_api_keys(&self, workspace_id: &str) -> StoreResult<Vec<ApiKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE workspace_id = $1 ORDER BY created_at DESC, id");
        let rows = sqlx::query(&sql).bind(workspace_id).fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter().map(key_from_row).collect()
    }
}

#[async_trait]
impl AuthWrites for Tx {
    async fn touch_api_key(&mut self, id: &str, now: i64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)",
        )
        .bind(id)
        .bind(now)
        .bind(now - 60_000)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn insert_workspace(&mut self, workspace: &Workspace, created_by: Option<&str>) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO workspaces (id, name, created_by, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)",
        )
        .bind(workspace.id.as_str())
        .bind(workspace.name.as_str())
        .bind(created_by)
        .bind(workspace.created_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn insert_user(&mut self, user: &User, password_hash: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO users (id, email, password_hash, first_name, is_admin, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
        )
        .bind(user.id.as_str())
        .bind(user.email.as_str())
        .bind(password_hash)
        .bind(user.first_name.as_str())
        .bind(i64::from(user.is_admin))
        .bind(user.created_at)
        .execute(self.conn().await?)
        .await.db()?;
        Ok(())
    }

    async fn add_member(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
        role: Role,
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query("INSERT INTO workspace_members (workspace_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)")
            .bind(workspace_id.as_str())
            .bind(user_id.as_str())
            .bind(role.as_str())
            .bind(at)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn set_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()> {
        sqlx::query("UPDATE users SET current_workspace_id = $2 WHERE id = $1")
            .bind(user_id.as_str())
            .bind(workspace_id.as_str())
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn insert_session(&mut self, token_hash: &str, user_id: &str, at: i64, expires_at: i64) -> StoreResult<()> {
        // Expired sessions of this user are swept here rather than by a separate job.
        sqlx::query("DELETE FROM sessions WHERE user_id = $1 AND expires_at <= $2")
            .bind(user_id)
            .bind(at)
            .execute(self.conn().await?)
            .await
            .db()?;
        sqlx::query("INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)")
            .bind(token_hash)
            .bind(user_id)
            .bind(at)
            .bind(expires_at)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn delete_session(&mut self, token_hash: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn insert_api_key(&mut self, key: &ApiKey, key_hash: &str) -> StoreResult<()> {
        let scopes: Vec<&str> = key.scopes.iter().map(|s| s.as_str()).collect();
        sqlx::query(
            "INSERT INTO api_keys (id, workspace_id, name, kind, key_prefix, key_hash, scopes, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(key.id.as_str())
        .bind(key.workspace_id.as_str())
        .bind(key.name.as_str())
        .bind(key.kind.as_str())
        .bind(key.prefix.as_str())
        .bind(key_hash)
        .bind(scopes.join(","))
        .bind(key.created_by.as_deref())
        .bind(key.created_at)
        .execute(self.conn().await?)
        .await.db()?;
        Ok(())
    }

    async fn delete_api_key(&mut self, workspace_id: &WorkspaceId, id: &ApiKeyId) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM api_keys WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id.as_str())
            .bind(id.as_str())
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn lock_workspace(&mut self, workspace_id: &WorkspaceId) -> StoreResult<bool> {
        // SQLite write transactions are already exclusive (BEGIN IMMEDIATE); PostgreSQL locks
        // the workspace's row, so two owners demoting each other at once cannot both pass the
        // last-owner check.
        let lock = if self.dialect == Dialect::Postgres { " FOR UPDATE" } else { "" };
        let sql = format!("SELECT id FROM workspaces WHERE id = $1{lock}");
        let row = sqlx::query(&sql).bind(workspace_id.as_str()).fetch_optional(self.conn().await?).await.db()?;
        Ok(row.is_some())
    }

    async fn find_user_by_email(&mut self, email: &str) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users u WHERE u.email = $1");
        let row = sqlx::query(&sql).bind(email).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn find_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<Option<Member>> {
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM workspace_members m JOIN users u ON u.id = m.user_id \
             WHERE m.workspace_id = $1 AND m.user_id = $2"
        );
        let row = sqlx::query(&sql)
            .bind(workspace_id.as_str())
            .bind(user_id.as_str())
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        row.as_ref().map(member_from_row).transpose()
    }

    async fn count_owners(&mut self, workspace_id: &WorkspaceId) -> StoreResult<i64> {
        let row = sqlx::query("SELECT COUNT(*) FROM workspace_members WHERE workspace_id = $1 AND role = 'owner'")
            .bind(workspace_id.as_str())
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        row.try_get(0).db()
    }

    async fn set_member_role(&mut self, workspace_id: &WorkspaceId, user_id: &UserId, role: Role) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE workspace_members SET role = $3 WHERE workspace_id = $1 AND user_id = $2")
            .bind(workspace_id.as_str())
            .bind(user_id.as_str())
            .bind(role.as_str())
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn remove_member(&mut self, workspace_id: &WorkspaceId, user_id: &UserId) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM workspace_members WHERE workspace_id = $1 AND user_id = $2")
            .bind(workspace_id.as_str())
            .bind(user_id.as_str())
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_user_api_keys(
        &mut self,
        workspace_id: &WorkspaceId,
        user_id: &UserId,
    ) -> StoreResult<Vec<ApiKeyId>> {
        let rows = sqlx::query("DELETE FROM api_keys WHERE workspace_id = $1 AND created_by = $2 RETURNING id")
            .bind(workspace_id.as_str())
            .bind(user_id.as_str())
            .fetch_all(self.conn().await?)
            .await
            .db()?;
        rows.iter().map(|row| Ok(row.try_get::<String, _>(0).db()?.into())).collect()
    }

    async fn leave_current_workspace(&mut self, user_id: &UserId, workspace_id: &WorkspaceId) -> StoreResult<()> {
        // The oldest remaining membership becomes current; none leaves it NULL ("no workspace").
        sqlx::query(
            "UPDATE users SET current_workspace_id = (SELECT m.workspace_id FROM workspace_members m \
               WHERE m.user_id = $1 AND m.workspace_id <> $2 ORDER BY m.created_at, m.workspace_id LIMIT 1) \
             WHERE id = $1 AND current_workspace_id = $2",
        )
        .bind(user_id.as_str())
        .bind(workspace_id.as_str())
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn put_invitation(&mut self, invitation: &Invitation) -> StoreResult<()> {
        sqlx::query("DELETE FROM workspace_invitations WHERE workspace_id = $1 AND email = $2")
            .bind(invitation.workspace_id.as_str())
            .bind(invitation.email.as_str())
            .execute(self.conn().await?)
            .await
            .db()?;
        let sql =
            format!("INSERT INTO workspace_invitations ({INVITATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)");
        sqlx::query(&sql)
            .bind(invitation.id.as_str())
            .bind(invitation.workspace_id.as_str())
            .bind(invitation.email.as_str())
            .bind(invitation.role.as_str())
            .bind(invitation.invited_by.as_str())
            .bind(invitation.created_at)
            .bind(invitation.expires_at)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }

    async fn delete_invitation(&mut self, workspace_id: &WorkspaceId, id: &str) -> StoreResult<Option<Invitation>> {
        let sql = format!(
            "DELETE FROM workspace_invitations WHERE workspace_id = $1 AND id = $2 RETURNING {INVITATION_COLUMNS}"
        );
        let row =
            sqlx::query(&sql).bind(workspace_id.as_str()).bind(id).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(invitation_from_row).transpose()
    }

    async fn take_invitations(&mut self, email: &str, now: i64) -> StoreResult<Vec<Invitation>> {
        let sql = format!("DELETE FROM workspace_invitations WHERE email = $1 RETURNING {INVITATION_COLUMNS}");
        let rows = sqlx::query(&sql).bind(email).fetch_all(self.conn().await?).await.db()?;
        let mut taken = rows.iter().map(invitation_from_row).collect::<StoreResult<Vec<_>>>()?;
        taken.retain(|invitation| invitation.expires_at > now);
        taken.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(taken)
    }
}
