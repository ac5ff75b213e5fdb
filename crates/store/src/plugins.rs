//! Plugin persistence: content-addressed component bytes, versions, active version and grants,
//! workspace bindings, and the plugin state behind the `trellis:plugin/state` import.

use crate::DbResult;
use sqlx::Row;

use crate::{Store, StoreResult, Tx};
use async_trait::async_trait;
use trellis_core::clock::OsEntropy;
use trellis_core::crypto::MasterKey;
use trellis_core::plugins::{
    NewPluginVersion, PluginStateStore, StateError, StateFuture, StateScope, StoredBinding, StoredPlugin,
    StoredPluginVersion,
};
use trellis_core::ports::{PluginReads, PluginWrites};

fn binding_from_row(row: &sqlx::any::AnyRow) -> StoreResult<StoredBinding> {
    Ok(StoredBinding {
        workspace_id: row.try_get("workspace_id").db()?,
        kind: row.try_get("kind").db()?,
        service_type: row.try_get("service_type").db()?,
        plugin_id: row.try_get("plugin_id").db()?,
    })
}

fn string_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

#[async_trait]
impl PluginReads for Store {
    async fn list_plugin_versions(&self) -> StoreResult<Vec<StoredPluginVersion>> {
        let rows =
            sqlx::query("SELECT plugin_id, version, sha256 FROM plugin_versions ORDER BY plugin_id, installed_at")
                .fetch_all(&self.pool)
                .await
                .db()?;
        rows.iter()
            .map(|row| {
                Ok(StoredPluginVersion {
                    plugin_id: row.try_get("plugin_id").db()?,
                    version: row.try_get("version").db()?,
                    sha256: row.try_get("sha256").db()?,
                })
            })
            .collect()
    }

    async fn plugin_component(&self, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
        let row = sqlx::query("SELECT bytes FROM plugin_components WHERE sha256 = $1")
            .bind(sha256)
            .fetch_optional(&self.pool)
            .await
            .db()?;
        Ok(match row {
            Some(row) => Some(row.try_get("bytes").db()?),
            None => None,
        })
    }

    async fn list_plugins(&self) -> StoreResult<Vec<StoredPlugin>> {
        let rows = sqlx::query(
            "SELECT plugin_id, kind, active_version, previous_versions, granted_hosts FROM plugins ORDER BY plugin_id",
        )
        .fetch_all(&self.pool)
        .await
        .db()?;
        rows.iter()
            .map(|row| {
                let previous: String = row.try_get("previous_versions").db()?;
                let grants: String = row.try_get("granted_hosts").db()?;
                Ok(StoredPlugin {
                    plugin_id: row.try_get("plugin_id").db()?,
                    kind: row.try_get("kind").db()?,
                    active_version: row.try_get("active_version").db()?,
                    previous_versions: string_list(&previous),
                    granted_hosts: string_list(&grants),
                })
            })
            .collect()
    }

    async fn list_plugin_bindings(&self) -> StoreResult<Vec<StoredBinding>> {
        let rows = sqlx::query("SELECT workspace_id, kind, service_type, plugin_id FROM plugin_bindings")
            .fetch_all(&self.pool)
            .await
            .db()?;
        rows.iter().map(binding_from_row).collect()
    }

    async fn list_workspace_plugin_bindings(&self, workspace_id: &str) -> StoreResult<Vec<StoredBinding>> {
        let rows = sqlx::query(
            "SELECT workspace_id, kind, service_type, plugin_id FROM plugin_bindings WHERE workspace_id = $1 \
             ORDER BY kind, service_type",
        )
        .bind(workspace_id)
        .fetch_all(&self.pool)
        .await
        .db()?;
        rows.iter().map(binding_from_row).collect()
    }

    /// Whether any plugin was ever installed (first start installs the first-party ones).
    async fn any_plugin_installed(&self) -> StoreResult<bool> {
        let count: i64 =
            sqlx::query("SELECT COUNT(*) FROM plugin_versions").fetch_one(&self.pool).await.db()?.try_get(0).db()?;
        Ok(count > 0)
    }
}

#[async_trait]
impl PluginWrites for Tx {
    /// Stores the bytes (once per digest), the version row and the plugin row.
    async fn insert_plugin_version(&mut self, new: &NewPluginVersion<'_>) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO plugin_components (sha256, bytes, size_bytes, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (sha256) DO NOTHING",
        )
        .bind(new.sha256)
        .bind(new.bytes.to_vec())
        .bind(new.bytes.len() as i64)
        .bind(new.at)
        .execute(&mut *self.inner)
        .await
        .db()?;
        sqlx::query(
            "INSERT INTO plugins (plugin_id, kind, active_version, previous_versions, granted_hosts, created_at, updated_at) \
             VALUES ($1, $2, NULL, '[]', '[]', $3, $3) ON CONFLICT (plugin_id) DO NOTHING",
        )
        .bind(new.plugin_id)
        .bind(new.kind)
        .bind(new.at)
        .execute(&mut *self.inner)
        .await.db()?;
        sqlx::query(
            "INSERT INTO plugin_versions (plugin_id, version, sha256, wit_version, info, installed_by, installed_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(new.plugin_id)
        .bind(new.version)
        .bind(new.sha256)
        .bind(new.wit_version)
        .bind(new.info.to_string())
        .bind(new.installed_by)
        .bind(new.at)
        .execute(&mut *self.inner)
        .await
        .db()?;
        Ok(())
    }

    /// Records which version is active and the rollback history.
    async fn set_plugin_activation(
        &mut self,
        plugin_id: &str,
        active_version: Option<&str>,
        previous_versions: &[String],
        at: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE plugins SET active_version = $1, previous_versions = $2, updated_at = $3 WHERE plugin_id = $4",
        )
        .bind(active_version)
        .bind(serde_json::to_string(previous_versions).unwrap_or_else(|_| "[]".into()))
        .bind(at)
        .bind(plugin_id)
        .execute(&mut *self.inner)
        .await
        .db()?;
        Ok(())
    }

    async fn set_plugin_grants(&mut self, plugin_id: &str, hosts: &[String], at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE plugins SET granted_hosts = $1, updated_at = $2 WHERE plugin_id = $3")
            .bind(serde_json::to_string(hosts).unwrap_or_else(|_| "[]".into()))
            .bind(at)
            .bind(plugin_id)
            .execute(&mut *self.inner)
            .await
            .db()?;
        Ok(())
    }

    /// Removes one version, or with `None` the plugin, its versions, bindings and state.
    /// Component bytes no version refers to any more are removed too.
    async fn delete_plugin(&mut self, plugin_id: &str, version: Option<&str>) -> StoreResult<()> {
        match version {
            Some(version) => {
                sqlx::query("DELETE FROM plugin_versions WHERE plugin_id = $1 AND version = $2")
                    .bind(plugin_id)
                    .bind(version)
                    .execute(&mut *self.inner)
                    .await
                    .db()?;
            }
            None => {
                for table in ["plugin_bindings", "plugin_versions", "plugin_state", "plugins"] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE plugin_id = $1"))
                        .bind(plugin_id)
                        .execute(&mut *self.inner)
                        .await
                        .db()?;
                }
            }
        }
        sqlx::query("DELETE FROM plugin_components WHERE sha256 NOT IN (SELECT sha256 FROM plugin_versions)")
            .execute(&mut *self.inner)
            .await
            .db()?;
        Ok(())
    }

    async fn upsert_plugin_binding(&mut self, binding: &StoredBinding, at: i64) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO plugin_bindings (workspace_id, kind, service_type, plugin_id, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (workspace_id, kind, service_type) DO UPDATE SET plugin_id = excluded.plugin_id, updated_at = excluded.updated_at",
        )
        .bind(&binding.workspace_id)
        .bind(&binding.kind)
        .bind(&binding.service_type)
        .bind(&binding.plugin_id)
        .bind(at)
        .execute(&mut *self.inner)
        .await.db()?;
        Ok(())
    }

    async fn delete_plugin_binding(&mut self, workspace_id: &str, kind: &str, service_type: &str) -> StoreResult<bool> {
        let done =
            sqlx::query("DELETE FROM plugin_bindings WHERE workspace_id = $1 AND kind = $2 AND service_type = $3")
                .bind(workspace_id)
                .bind(kind)
                .bind(service_type)
                .execute(&mut *self.inner)
                .await
                .db()?;
        Ok(done.rows_affected() > 0)
    }
}

/// Plugin state in the database, shared by every replica. Values are sealed under the master
/// key (plugins keep account URLs, order references and the like there); the quota counts
/// the sealed size.
#[derive(Clone)]
pub struct DbPluginState {
    store: Store,
    clock: trellis_core::clock::SharedClock,
    master_key: MasterKey,
}

/// Marks a sealed value; rows written before sealing existed are read as they are and sealed
/// on their next write.
const SEALED_PREFIX: &[u8] = b"sealed:v1:";

impl DbPluginState {
    pub fn new(store: Store, clock: trellis_core::clock::SharedClock, master_key: MasterKey) -> Self {
        DbPluginState { store, clock, master_key }
    }

    fn seal(&self, value: &[u8]) -> Vec<u8> {
        let mut sealed = SEALED_PREFIX.to_vec();
        sealed.extend_from_slice(self.master_key.seal(value, &OsEntropy).as_bytes());
        sealed
    }

    fn unseal(&self, stored: Vec<u8>) -> Result<Vec<u8>, StateError> {
        match stored.strip_prefix(SEALED_PREFIX) {
            None => Ok(stored),
            Some(sealed) => {
                let text = std::str::from_utf8(sealed)
                    .map_err(|_| StateError::Unavailable("a sealed state value is corrupt".into()))?;
                self.master_key
                    .open(text)
                    .map_err(|_| StateError::Unavailable("a state value does not open with this master key".into()))
            }
        }
    }

    async fn get_value(&self, scope: &StateScope, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let row =
            sqlx::query("SELECT value FROM plugin_state WHERE plugin_id = $1 AND workspace_id = $2 AND state_key = $3")
                .bind(&scope.plugin_id)
                .bind(&scope.workspace_id)
                .bind(key)
                .fetch_optional(&self.store.pool)
                .await
                .db()?;
        Ok(match row {
            Some(row) => Some(row.try_get("value").db()?),
            None => None,
        })
    }

    async fn set_value(&self, scope: &StateScope, key: &str, value: Vec<u8>, quota: u64) -> Result<(), StateError> {
        let value = self.seal(&value);
        let unavailable = |err: crate::StoreError| StateError::Unavailable(err.to_string());
        let mut tx = self.store.begin_tx().await.map_err(unavailable)?;
        let used: i64 = sqlx::query(
            "SELECT COALESCE(SUM(LENGTH(state_key) + LENGTH(value)), 0) FROM plugin_state \
             WHERE plugin_id = $1 AND workspace_id = $2 AND state_key <> $3",
        )
        .bind(&scope.plugin_id)
        .bind(&scope.workspace_id)
        .bind(key)
        .fetch_one(&mut *tx.inner)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|err| unavailable(crate::db(err)))?;
        if used as u64 + (key.len() + value.len()) as u64 > quota {
            return Err(StateError::QuotaExceeded(quota));
        }
        sqlx::query(
            "INSERT INTO plugin_state (plugin_id, workspace_id, state_key, value, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (plugin_id, workspace_id, state_key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(&scope.plugin_id)
        .bind(&scope.workspace_id)
        .bind(key)
        .bind(value)
        .bind(self.clock.now().timestamp_millis())
        .execute(&mut *tx.inner)
        .await
        .map_err(|err| unavailable(crate::db(err)))?;
        tx.commit_tx().await.map_err(unavailable)
    }
}

impl PluginStateStore for DbPluginState {
    fn get<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let stored = self.get_value(scope, key).await.map_err(|err| StateError::Unavailable(err.to_string()))?;
            stored.map(|value| self.unseal(value)).transpose()
        })
    }

    fn set<'a>(&'a self, scope: &'a StateScope, key: &'a str, value: Vec<u8>, quota: u64) -> StateFuture<'a, ()> {
        Box::pin(self.set_value(scope, key, value, quota))
    }

    fn delete<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, ()> {
        Box::pin(async move {
            sqlx::query("DELETE FROM plugin_state WHERE plugin_id = $1 AND workspace_id = $2 AND state_key = $3")
                .bind(&scope.plugin_id)
                .bind(&scope.workspace_id)
                .bind(key)
                .execute(&self.store.pool)
                .await
                .map(|_| ())
                .map_err(|err| StateError::Unavailable(err.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sqlx::Row;
    use trellis_core::clock::SystemClock;
    use trellis_core::crypto::MasterKey;
    use trellis_core::plugins::{PluginStateStore, StateError, StateScope};

    use super::DbPluginState;
    use crate::Store;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn state_is_sealed_at_rest_and_bounded_by_the_quota() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&format!("sqlite://{}", dir.path().join("state.db").display())).await.expect("store");
        let key = MasterKey::parse(&"7".repeat(64)).expect("key");
        let state = DbPluginState::new(store.clone(), Arc::new(SystemClock), key);
        let scope = StateScope { plugin_id: "p".into(), workspace_id: "w".into() };

        state.set(&scope, "account", b"-----BEGIN account url-----".to_vec(), 10_000).await.expect("set");
        assert_eq!(
            state.get(&scope, "account").await.expect("get").as_deref(),
            Some(&b"-----BEGIN account url-----"[..])
        );
        let raw: Vec<u8> = sqlx::query("SELECT value FROM plugin_state WHERE state_key = 'account'")
            .fetch_one(&store.pool)
            .await
            .and_then(|row| row.try_get(0))
            .expect("raw row");
        assert!(!raw.windows(5).any(|w| w == b"BEGIN"), "state stored in plaintext");

        let err = state.set(&scope, "big", vec![0; 20_000], 10_000).await.expect_err("over quota");
        assert_eq!(err, StateError::QuotaExceeded(10_000));
        state.delete(&scope, "account").await.expect("delete");
        assert_eq!(state.get(&scope, "account").await.expect("get"), None);
    }
}
