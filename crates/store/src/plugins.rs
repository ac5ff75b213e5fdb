//! Plugin persistence: content-addressed component bytes, versions, active version and grants,
//! workspace bindings, and the plugin state behind the `trellis:plugin/state` import.

use crate::DbResult;
use sqlx::Row;

use crate::{Store, StoreResult, Tx};
use async_trait::async_trait;
use trellis_core::clock::OsEntropy;
use trellis_core::crypto::MasterKey;
use trellis_core::plugins::signatures::SigningKey;
use trellis_core::plugins::PluginKind;
use trellis_core::plugins::{
    KeyInsert, NewPluginVersion, PluginKeyRecords, PluginStateStore, SealedKey, StateError, StateFuture, StateScope,
    StoredBinding, StoredPlugin, StoredPluginVersion,
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
        // Never the bytes: a start reads them only for versions that are called. Nor
        // `size_bytes`, stored after the bytes: SQLite reaches a column that follows a large
        // blob by walking the blob's overflow pages, while length() reads only the row header.
        let rows = sqlx::query(
            "SELECT v.plugin_id, v.version, v.sha256, v.wit_version, v.info, v.signer_key_id, \
             CAST(length(c.bytes) AS BIGINT) AS size_bytes \
             FROM plugin_versions v JOIN plugin_components c ON c.sha256 = v.sha256 \
             ORDER BY v.plugin_id, v.installed_at",
        )
        .fetch_all(&mut *self.reader().await?)
        .await
        .db()?;
        rows.iter()
            .map(|row| {
                let info: String = row.try_get("info").db()?;
                Ok(StoredPluginVersion {
                    plugin_id: row.try_get("plugin_id").db()?,
                    version: row.try_get("version").db()?,
                    sha256: row.try_get("sha256").db()?,
                    info: serde_json::from_str(&info).unwrap_or(serde_json::Value::Null),
                    wit_version: row.try_get("wit_version").db()?,
                    size_bytes: row.try_get("size_bytes").db()?,
                    signer_key_id: row.try_get("signer_key_id").db()?,
                })
            })
            .collect()
    }

    async fn plugin_component(&self, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
        let row = sqlx::query("SELECT bytes FROM plugin_components WHERE sha256 = $1")
            .bind(sha256)
            .fetch_optional(&mut *self.reader().await?)
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
        .fetch_all(&mut *self.reader().await?)
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
            .fetch_all(&mut *self.reader().await?)
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
        .fetch_all(&mut *self.reader().await?)
        .await
        .db()?;
        rows.iter().map(binding_from_row).collect()
    }

    /// Whether any plugin was ever installed (first start installs the first-party ones).
    async fn any_plugin_installed(&self) -> StoreResult<bool> {
        let count: i64 = sqlx::query("SELECT COUNT(*) FROM plugin_versions")
            .fetch_one(&mut *self.reader().await?)
            .await
            .db()?
            .try_get(0)
            .db()?;
        Ok(count > 0)
    }

    async fn list_plugin_signing_keys(&self) -> StoreResult<Vec<SigningKey>> {
        let rows = sqlx::query(
            "SELECT key_id, name, public_key_pem, id_prefixes, kinds, created_at, created_by, revoked_at \
             FROM plugin_signing_keys ORDER BY created_at, key_id",
        )
        .fetch_all(&self.pool)
        .await
        .db()?;
        rows.iter()
            .map(|row| {
                let prefixes: String = row.try_get("id_prefixes").db()?;
                let kinds: String = row.try_get("kinds").db()?;
                Ok(SigningKey {
                    key_id: row.try_get("key_id").db()?,
                    name: row.try_get("name").db()?,
                    public_key_pem: row.try_get("public_key_pem").db()?,
                    id_prefixes: string_list(&prefixes),
                    // An unknown stored kind widens nothing: it matches no plugin.
                    kinds: string_list(&kinds).iter().filter_map(|k| PluginKind::parse(k)).collect(),
                    created_at: row.try_get("created_at").db()?,
                    created_by: row.try_get("created_by").db()?,
                    revoked_at: row.try_get("revoked_at").db()?,
                })
            })
            .collect()
    }

    async fn plugin_versions_signed_by(&self, key_id: &str) -> StoreResult<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT plugin_id, version FROM plugin_versions WHERE signer_key_id = $1 ORDER BY plugin_id, installed_at",
        )
        .bind(key_id)
        .fetch_all(&self.pool)
        .await
        .db()?;
        rows.iter().map(|row| Ok((row.try_get("plugin_id").db()?, row.try_get("version").db()?))).collect()
    }

    async fn plugin_version_signer(&self, plugin_id: &str, version: &str) -> StoreResult<Option<String>> {
        let row = sqlx::query("SELECT signer_key_id FROM plugin_versions WHERE plugin_id = $1 AND version = $2")
            .bind(plugin_id)
            .bind(version)
            .fetch_optional(&self.pool)
            .await
            .db()?;
        Ok(match row {
            Some(row) => row.try_get("signer_key_id").db()?,
            None => None,
        })
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
        .execute(self.conn().await?)
        .await
        .db()?;
        sqlx::query(
            "INSERT INTO plugins (plugin_id, kind, active_version, previous_versions, granted_hosts, created_at, updated_at) \
             VALUES ($1, $2, NULL, '[]', '[]', $3, $3) ON CONFLICT (plugin_id) DO NOTHING",
        )
        .bind(new.plugin_id)
        .bind(new.kind)
        .bind(new.at)
        .execute(self.conn().await?)
        .await.db()?;
        sqlx::query(
            "INSERT INTO plugin_versions (plugin_id, version, sha256, wit_version, info, installed_by, installed_at, signer_key_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(new.plugin_id)
        .bind(new.version)
        .bind(new.sha256)
        .bind(new.wit_version)
        .bind(new.info.to_string())
        .bind(new.installed_by)
        .bind(new.at)
        .bind(new.signer_key_id)
        .execute(self.conn().await?)
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
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn set_plugin_grants(&mut self, plugin_id: &str, hosts: &[String], at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE plugins SET granted_hosts = $1, updated_at = $2 WHERE plugin_id = $3")
            .bind(serde_json::to_string(hosts).unwrap_or_else(|_| "[]".into()))
            .bind(at)
            .bind(plugin_id)
            .execute(self.conn().await?)
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
                    .execute(self.conn().await?)
                    .await
                    .db()?;
            }
            None => {
                for table in ["plugin_bindings", "plugin_versions", "plugin_state", "plugin_keys", "plugins"] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE plugin_id = $1"))
                        .bind(plugin_id)
                        .execute(self.conn().await?)
                        .await
                        .db()?;
                }
            }
        }
        sqlx::query("DELETE FROM plugin_components WHERE sha256 NOT IN (SELECT sha256 FROM plugin_versions)")
            .execute(self.conn().await?)
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
        .execute(self.conn().await?)
        .await.db()?;
        Ok(())
    }

    async fn delete_plugin_binding(&mut self, workspace_id: &str, kind: &str, service_type: &str) -> StoreResult<bool> {
        let done =
            sqlx::query("DELETE FROM plugin_bindings WHERE workspace_id = $1 AND kind = $2 AND service_type = $3")
                .bind(workspace_id)
                .bind(kind)
                .bind(service_type)
                .execute(self.conn().await?)
                .await
                .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_plugin_signing_key(&mut self, key: &SigningKey) -> StoreResult<bool> {
        let kinds: Vec<&str> = key.kinds.iter().map(|k| k.as_str()).collect();
        let done = sqlx::query(
            "INSERT INTO plugin_signing_keys \
             (key_id, name, public_key_pem, id_prefixes, kinds, created_at, created_by, revoked_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL) ON CONFLICT (key_id) DO NOTHING",
        )
        .bind(&key.key_id)
        .bind(&key.name)
        .bind(&key.public_key_pem)
        .bind(serde_json::to_string(&key.id_prefixes).unwrap_or_else(|_| "[]".into()))
        .bind(serde_json::to_string(&kinds).unwrap_or_else(|_| "[]".into()))
        .bind(key.created_at)
        .bind(&key.created_by)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn revoke_plugin_signing_key(&mut self, key_id: &str, at: i64) -> StoreResult<()> {
        sqlx::query("UPDATE plugin_signing_keys SET revoked_at = $1 WHERE key_id = $2 AND revoked_at IS NULL")
            .bind(at)
            .bind(key_id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }
}

/// Plugin state in the database, shared by every replica. Values are sealed under the master
/// key, bound to their plugin, workspace, record and key (plugins keep account URLs, order
/// references and the like there); the quota counts the sealed size.
#[derive(Clone)]
pub struct DbPluginState {
    store: Store,
    clock: trellis_core::clock::SharedClock,
    master_key: MasterKey,
}

/// Marks a value sealed without binding (before contract 0.2); still read, resealed on write.
const SEALED_V1: &[u8] = b"sealed:v1:";
/// Marks a value sealed bound to its row's scope and key.
const SEALED_V2: &[u8] = b"sealed:v2:";

fn state_binding(scope: &StateScope, key: &str) -> Vec<u8> {
    scope.sealing_context("trellis-state-v2", key)
}

pub(crate) fn unavailable(err: crate::StoreError) -> StateError {
    StateError::Unavailable(err.to_string())
}

const SCOPE: &str = "plugin_id = $1 AND workspace_id = $2 AND record_id = $3";

/// How many rows of `table` (a table with plugin_id, workspace_id, record_id) belong to `scope`.
pub(crate) async fn rows_in_scope(store: &Store, table: &'static str, scope: &StateScope) -> StoreResult<i64> {
    sqlx::query(&format!("SELECT COUNT(*) FROM {table} WHERE {SCOPE}"))
        .bind(&scope.plugin_id)
        .bind(&scope.workspace_id)
        .bind(&scope.record_id)
        .fetch_one(&store.pool)
        .await
        .and_then(|row| row.try_get(0))
        .db()
}

impl DbPluginState {
    pub fn new(store: Store, clock: trellis_core::clock::SharedClock, master_key: MasterKey) -> Self {
        DbPluginState { store, clock, master_key }
    }

    fn seal(&self, scope: &StateScope, key: &str, value: &[u8]) -> Vec<u8> {
        let mut sealed = SEALED_V2.to_vec();
        sealed.extend_from_slice(self.master_key.seal_bound(value, &state_binding(scope, key), &OsEntropy).as_bytes());
        sealed
    }

    fn unseal(&self, scope: &StateScope, key: &str, stored: Vec<u8>) -> Result<Vec<u8>, StateError> {
        let text = |sealed: &[u8]| {
            std::str::from_utf8(sealed)
                .map(str::to_owned)
                .map_err(|_| StateError::Unavailable("a sealed state value is corrupt".into()))
        };
        let wrong_key = |_| StateError::Unavailable("a state value does not open with this master key".into());
        if let Some(sealed) = stored.strip_prefix(SEALED_V2) {
            return self.master_key.open_bound(&text(sealed)?, &state_binding(scope, key)).map_err(wrong_key);
        }
        match stored.strip_prefix(SEALED_V1) {
            Some(sealed) => self.master_key.open(&text(sealed)?).map_err(wrong_key),
            None => Ok(stored),
        }
    }

    async fn get_raw(&self, scope: &StateScope, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let row = sqlx::query(&format!("SELECT value FROM plugin_state WHERE {SCOPE} AND state_key = $4"))
            .bind(&scope.plugin_id)
            .bind(&scope.workspace_id)
            .bind(&scope.record_id)
            .bind(key)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?;
        Ok(match row {
            Some(row) => Some(row.try_get("value").db()?),
            None => None,
        })
    }

    /// Bytes the scope's other keys use.
    async fn used_by_others(&self, scope: &StateScope, key: &str) -> StoreResult<u64> {
        let used: i64 = sqlx::query(&format!(
            "SELECT COALESCE(SUM(LENGTH(state_key) + LENGTH(value)), 0) FROM plugin_state WHERE {SCOPE} AND state_key <> $4"
        ))
        .bind(&scope.plugin_id)
        .bind(&scope.workspace_id)
        .bind(&scope.record_id)
        .bind(key)
        .fetch_one(&mut *self.store.reader().await?)
        .await
        .and_then(|row| row.try_get(0))
        .db()?;
        Ok(used.max(0) as u64)
    }

    async fn set_value(&self, scope: &StateScope, key: &str, value: Vec<u8>, quota: u64) -> Result<(), StateError> {
        let value = self.seal(scope, key, &value);
        let used = self.used_by_others(scope, key).await.map_err(unavailable)?;
        if used + (key.len() + value.len()) as u64 > quota {
            return Err(StateError::QuotaExceeded(quota));
        }
        sqlx::query(
            "INSERT INTO plugin_state (plugin_id, workspace_id, record_id, state_key, value, updated_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (plugin_id, workspace_id, record_id, state_key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(&scope.plugin_id)
        .bind(&scope.workspace_id)
        .bind(&scope.record_id)
        .bind(key)
        .bind(value)
        .bind(self.clock.now().timestamp_millis())
        .execute(&self.store.pool)
        .await
        .db()
        .map_err(unavailable)?;
        Ok(())
    }

    /// Optimistic compare-and-swap: the write is conditioned on the exact sealed bytes read, so a
    /// concurrent writer in between (another call, another replica) makes it affect no row.
    async fn swap(
        &self,
        scope: &StateScope,
        key: &str,
        expected: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
        quota: u64,
    ) -> Result<bool, StateError> {
        let current_raw = self.get_raw(scope, key).await.map_err(unavailable)?;
        let current = current_raw.clone().map(|raw| self.unseal(scope, key, raw)).transpose()?;
        if current != expected {
            return Ok(false);
        }
        let new = match new {
            Some(value) => {
                let sealed = self.seal(scope, key, &value);
                let used = self.used_by_others(scope, key).await.map_err(unavailable)?;
                if used + (key.len() + sealed.len()) as u64 > quota {
                    return Err(StateError::QuotaExceeded(quota));
                }
                Some(sealed)
            }
            None => None,
        };
        let now = self.clock.now().timestamp_millis();
        let query = match (&current_raw, &new) {
            (None, None) => return Ok(true),
            (None, Some(_)) => {
                "INSERT INTO plugin_state (plugin_id, workspace_id, record_id, state_key, value, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (plugin_id, workspace_id, record_id, state_key) DO NOTHING"
                    .to_owned()
            }
            (Some(_), Some(_)) => format!(
                "UPDATE plugin_state SET value = $5, updated_at = $6 WHERE {SCOPE} AND state_key = $4 AND value = $7"
            ),
            (Some(_), None) => format!("DELETE FROM plugin_state WHERE {SCOPE} AND state_key = $4 AND value = $5"),
        };
        let mut q =
            sqlx::query(&query).bind(&scope.plugin_id).bind(&scope.workspace_id).bind(&scope.record_id).bind(key);
        q = match (current_raw, new) {
            (None, Some(new)) => q.bind(new).bind(now),
            (Some(old), Some(new)) => q.bind(new).bind(now).bind(old),
            (Some(old), None) => q.bind(old),
            (None, None) => q,
        };
        let done = q.execute(&self.store.pool).await.db().map_err(unavailable)?;
        Ok(done.rows_affected() == 1)
    }
}

impl PluginStateStore for DbPluginState {
    fn get<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let stored = self.get_raw(scope, key).await.map_err(unavailable)?;
            stored.map(|value| self.unseal(scope, key, value)).transpose()
        })
    }

    fn set<'a>(&'a self, scope: &'a StateScope, key: &'a str, value: Vec<u8>, quota: u64) -> StateFuture<'a, ()> {
        Box::pin(self.set_value(scope, key, value, quota))
    }

    fn delete<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, ()> {
        Box::pin(async move {
            sqlx::query(&format!("DELETE FROM plugin_state WHERE {SCOPE} AND state_key = $4"))
                .bind(&scope.plugin_id)
                .bind(&scope.workspace_id)
                .bind(&scope.record_id)
                .bind(key)
                .execute(&self.store.pool)
                .await
                .db()
                .map(|_| ())
                .map_err(unavailable)
        })
    }

    fn list_keys<'a>(
        &'a self,
        scope: &'a StateScope,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> StateFuture<'a, Vec<String>> {
        Box::pin(async move {
            // Prefix matching by range (no LIKE, whose wildcards a key may contain); byte order
            // comes from the keys being compared as binary in both dialects' default collation.
            let rows = sqlx::query(&format!(
                "SELECT state_key FROM plugin_state WHERE {SCOPE} AND state_key > $4 ORDER BY state_key LIMIT $5"
            ))
            .bind(&scope.plugin_id)
            .bind(&scope.workspace_id)
            .bind(&scope.record_id)
            .bind(after.filter(|after| *after >= prefix).unwrap_or(prefix).to_owned())
            .bind(i64::from(limit.min(10_000)) + 1)
            .fetch_all(&mut *self.store.reader().await.map_err(unavailable)?)
            .await
            .db()
            .map_err(unavailable)?;
            let mut keys = Vec::new();
            // `> prefix` skips the prefix itself: add it back when it is a key and no cursor passed it.
            if after.is_none_or(|after| after < prefix)
                && !prefix.is_empty()
                && self.get_raw(scope, prefix).await.map_err(unavailable)?.is_some()
            {
                keys.push(prefix.to_owned());
            }
            for row in rows {
                let key: String = row.try_get("state_key").db().map_err(unavailable)?;
                if !key.starts_with(prefix) {
                    break;
                }
                keys.push(key);
            }
            keys.truncate(limit as usize);
            Ok(keys)
        })
    }

    fn compare_and_swap<'a>(
        &'a self,
        scope: &'a StateScope,
        key: &'a str,
        expected: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
        quota: u64,
    ) -> StateFuture<'a, bool> {
        Box::pin(self.swap(scope, key, expected, new, quota))
    }
}

/// Keystore keys in the database, sealed by the domain's [`trellis_core::plugins::Keystore`].
#[derive(Clone)]
pub struct DbPluginKeys {
    store: Store,
    clock: trellis_core::clock::SharedClock,
}

impl DbPluginKeys {
    pub fn new(store: Store, clock: trellis_core::clock::SharedClock) -> Self {
        DbPluginKeys { store, clock }
    }

    async fn insert_key(
        &self,
        scope: &StateScope,
        label: &str,
        key: SealedKey,
        max_keys: u32,
    ) -> StoreResult<KeyInsert> {
        let count = rows_in_scope(&self.store, "plugin_keys", scope).await?;
        if count >= i64::from(max_keys) {
            return Ok(KeyInsert::QuotaExceeded);
        }
        let done = sqlx::query(
            "INSERT INTO plugin_keys (plugin_id, workspace_id, record_id, label, algorithm, sealed, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (plugin_id, workspace_id, record_id, label) DO NOTHING",
        )
        .bind(&scope.plugin_id)
        .bind(&scope.workspace_id)
        .bind(&scope.record_id)
        .bind(label)
        .bind(&key.algorithm)
        .bind(&key.sealed)
        .bind(self.clock.now().timestamp_millis())
        .execute(&self.store.pool)
        .await
        .db()?;
        Ok(if done.rows_affected() == 1 { KeyInsert::Inserted } else { KeyInsert::AlreadyExists })
    }

    async fn get_key(&self, scope: &StateScope, label: &str) -> StoreResult<Option<SealedKey>> {
        let row = sqlx::query(&format!("SELECT algorithm, sealed FROM plugin_keys WHERE {SCOPE} AND label = $4"))
            .bind(&scope.plugin_id)
            .bind(&scope.workspace_id)
            .bind(&scope.record_id)
            .bind(label)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?;
        row.map(|row| Ok(SealedKey { algorithm: row.try_get("algorithm").db()?, sealed: row.try_get("sealed").db()? }))
            .transpose()
    }

    async fn key_labels(&self, scope: &StateScope) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(&format!("SELECT label FROM plugin_keys WHERE {SCOPE} ORDER BY label"))
            .bind(&scope.plugin_id)
            .bind(&scope.workspace_id)
            .bind(&scope.record_id)
            .fetch_all(&mut *self.store.reader().await?)
            .await
            .db()?;
        rows.iter().map(|row| row.try_get("label").db()).collect()
    }

    async fn delete_key(&self, scope: &StateScope, label: &str) -> StoreResult<()> {
        sqlx::query(&format!("DELETE FROM plugin_keys WHERE {SCOPE} AND label = $4"))
            .bind(&scope.plugin_id)
            .bind(&scope.workspace_id)
            .bind(&scope.record_id)
            .bind(label)
            .execute(&self.store.pool)
            .await
            .db()?;
        Ok(())
    }
}

impl PluginKeyRecords for DbPluginKeys {
    fn insert<'a>(
        &'a self,
        scope: &'a StateScope,
        label: &'a str,
        key: SealedKey,
        max_keys: u32,
    ) -> StateFuture<'a, KeyInsert> {
        Box::pin(async move { self.insert_key(scope, label, key, max_keys).await.map_err(unavailable) })
    }

    fn get<'a>(&'a self, scope: &'a StateScope, label: &'a str) -> StateFuture<'a, Option<SealedKey>> {
        Box::pin(async move { self.get_key(scope, label).await.map_err(unavailable) })
    }

    fn labels<'a>(&'a self, scope: &'a StateScope) -> StateFuture<'a, Vec<String>> {
        Box::pin(async move { self.key_labels(scope).await.map_err(unavailable) })
    }

    fn delete<'a>(&'a self, scope: &'a StateScope, label: &'a str) -> StateFuture<'a, ()> {
        Box::pin(async move { self.delete_key(scope, label).await.map_err(unavailable) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sqlx::Row;
    use trellis_core::clock::SystemClock;
    use trellis_core::crypto::MasterKey;
    use trellis_core::plugins::{KeyAlgorithm, Keystore, PluginStateStore, StateError, StateScope};

    use super::{DbPluginKeys, DbPluginState};
    use crate::Store;

    async fn open() -> (tempfile::TempDir, Store) {
        crate::testing::store().await
    }

    fn scope(record: &str) -> StateScope {
        StateScope { plugin_id: "p".into(), workspace_id: "w".into(), record_id: record.into() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn state_is_sealed_at_rest_and_bounded_by_the_quota() {
        let (_dir, store) = open().await;
        let key = MasterKey::parse(&"7".repeat(64)).expect("key");
        let state = DbPluginState::new(store.clone(), Arc::new(SystemClock), key);
        let scope = scope("ca_1");

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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn state_is_per_record_lists_by_prefix_and_swaps_atomically() {
        let (_dir, store) = open().await;
        let state = DbPluginState::new(store.clone(), Arc::new(SystemClock), MasterKey::from_bytes([3; 32]));
        for key in ["order/b", "order/a", "order", "orders", "account"] {
            state.set(&scope("ca_1"), key, key.as_bytes().to_vec(), 10_000).await.expect("set");
        }
        assert_eq!(state.get(&scope("ca_2"), "account").await.expect("get"), None, "records do not share state");
        let list = |prefix: &'static str, after: Option<&'static str>, limit| {
            let state = state.clone();
            async move { state.list_keys(&scope("ca_1"), prefix, after, limit).await.expect("list") }
        };
        assert_eq!(list("order/", None, 10).await, ["order/a", "order/b"]);
        assert_eq!(list("order", None, 10).await, ["order", "order/a", "order/b", "orders"]);
        assert_eq!(list("order", None, 2).await, ["order", "order/a"]);
        assert_eq!(list("order", Some("order/a"), 2).await, ["order/b", "orders"]);
        assert_eq!(list("", None, 100).await.len(), 5);

        // A sealed value copied to another record does not open there.
        sqlx::query("UPDATE plugin_state SET record_id = 'ca_9' WHERE state_key = 'account'")
            .execute(&store.pool)
            .await
            .expect("move row");
        assert!(matches!(state.get(&scope("ca_9"), "account").await, Err(StateError::Unavailable(_))));

        let swap = |expected: Option<&[u8]>, new: Option<&[u8]>| {
            let state = state.clone();
            let (expected, new) = (expected.map(<[u8]>::to_vec), new.map(<[u8]>::to_vec));
            async move { state.compare_and_swap(&scope("ca_1"), "lock", expected, new, 10_000).await.expect("cas") }
        };
        assert!(swap(None, Some(b"one")).await);
        assert!(!swap(None, Some(b"two")).await, "the key exists");
        assert!(!swap(Some(b"zero"), Some(b"two")).await, "stale expectation");
        assert!(swap(Some(b"one"), Some(b"two")).await);
        assert!(swap(Some(b"two"), None).await);
        assert_eq!(state.get(&scope("ca_1"), "lock").await.expect("get"), None);

        // Racing swaps from one expected value: exactly one wins.
        state.set(&scope("ca_1"), "lock", b"free".to_vec(), 10_000).await.expect("set");
        let racers: Vec<_> = (0..8u8)
            .map(|n| {
                let state = state.clone();
                tokio::spawn(async move {
                    state.compare_and_swap(&scope("ca_1"), "lock", Some(b"free".to_vec()), Some(vec![n]), 10_000).await
                })
            })
            .collect();
        let mut winners = 0;
        for racer in racers {
            if racer.await.expect("join").expect("cas") {
                winners += 1;
            }
        }
        assert_eq!(winners, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keystore_keys_are_sealed_in_the_database() {
        let (_dir, store) = open().await;
        let keystore = Keystore::new(
            Arc::new(DbPluginKeys::new(store.clone(), Arc::new(SystemClock))),
            MasterKey::from_bytes([5; 32]),
        );
        let info = keystore.generate(&scope("ca_1"), "account", KeyAlgorithm::EcdsaP256).await.expect("generate");
        assert_eq!(keystore.public_key(&scope("ca_1"), "account").await.expect("public"), info);
        assert_eq!(keystore.labels(&scope("ca_1")).await.expect("labels"), ["account"]);
        assert!(keystore.labels(&scope("ca_2")).await.expect("labels").is_empty());
        // Sealed under the master key: another key opens nothing.
        let records = Arc::new(DbPluginKeys::new(store.clone(), Arc::new(SystemClock)));
        let other = Keystore::new(records, MasterKey::from_bytes([6; 32]));
        assert!(matches!(
            other.sign(&scope("ca_1"), "account", b"m").await,
            Err(trellis_core::plugins::KeystoreError::Unavailable(_))
        ));
        assert_eq!(keystore.sign(&scope("ca_1"), "account", b"m").await.expect("sign").len(), 64);
    }
}
