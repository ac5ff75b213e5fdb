//! The plugin registry's storage port, faked whole over the in-memory store's tables, with the
//! rules the SQL stores keep: component bytes stored once per digest and dropped when no
//! version refers to them; a plugin row made by its first version; removing a plugin removes
//! its versions and bindings; one binding per (workspace, kind, type); a trust-store key added
//! once and revoked once; the stores' orders.

use async_trait::async_trait;

use super::port::{PluginReads, PluginWrites};
use super::signatures::SigningKey;
use super::{NewPluginVersion, StoredBinding, StoredPlugin, StoredPluginVersion};
use crate::store_error::{StoreError, StoreResult};
use crate::testing::memory_store::Tables;
use crate::testing::{MemoryStore, MemoryTx};

/// A row of `plugin_versions`, with when it was installed (versions list in install order).
#[derive(Debug, Clone)]
pub struct PluginVersionRow {
    pub version: StoredPluginVersion,
    pub installed_at: i64,
}

fn drop_unreferenced_components(tables: &mut Tables) {
    let referenced: std::collections::HashSet<String> =
        tables.plugin_versions.iter().map(|row| row.version.sha256.clone()).collect();
    tables.plugin_components.retain(|sha256, _| referenced.contains(sha256));
}

#[async_trait]
impl PluginReads for MemoryStore {
    async fn list_plugin_versions(&self) -> StoreResult<Vec<StoredPluginVersion>> {
        let mut rows = self.snapshot().plugin_versions;
        rows.sort_by(|a, b| (&a.version.plugin_id, a.installed_at).cmp(&(&b.version.plugin_id, b.installed_at)));
        Ok(rows.into_iter().map(|row| row.version).collect())
    }
    async fn plugin_component(&self, sha256: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.snapshot().plugin_components.remove(sha256))
    }
    async fn list_plugins(&self) -> StoreResult<Vec<StoredPlugin>> {
        let mut plugins = self.snapshot().plugins;
        plugins.sort_by(|a, b| a.plugin_id.cmp(&b.plugin_id));
        Ok(plugins)
    }
    async fn list_plugin_bindings(&self) -> StoreResult<Vec<StoredBinding>> {
        Ok(self.snapshot().plugin_bindings)
    }
    async fn list_workspace_plugin_bindings(&self, workspace_id: &str) -> StoreResult<Vec<StoredBinding>> {
        let mut bindings: Vec<StoredBinding> =
            self.snapshot().plugin_bindings.into_iter().filter(|b| b.workspace_id == workspace_id).collect();
        bindings.sort_by(|a, b| (&a.kind, &a.service_type).cmp(&(&b.kind, &b.service_type)));
        Ok(bindings)
    }
    async fn any_plugin_installed(&self) -> StoreResult<bool> {
        Ok(!self.snapshot().plugin_versions.is_empty())
    }
    async fn list_plugin_signing_keys(&self) -> StoreResult<Vec<SigningKey>> {
        let mut keys = self.snapshot().plugin_signing_keys;
        keys.sort_by(|a, b| (a.created_at, &a.key_id).cmp(&(b.created_at, &b.key_id)));
        Ok(keys)
    }
    async fn plugin_versions_signed_by(&self, key_id: &str) -> StoreResult<Vec<(String, String)>> {
        let mut rows: Vec<PluginVersionRow> = self
            .snapshot()
            .plugin_versions
            .into_iter()
            .filter(|row| row.version.signer_key_id.as_deref() == Some(key_id))
            .collect();
        rows.sort_by(|a, b| (&a.version.plugin_id, a.installed_at).cmp(&(&b.version.plugin_id, b.installed_at)));
        Ok(rows.into_iter().map(|row| (row.version.plugin_id, row.version.version)).collect())
    }
    async fn plugin_version_signer(&self, plugin_id: &str, version: &str) -> StoreResult<Option<String>> {
        let tables = self.snapshot();
        let row =
            tables.plugin_versions.iter().find(|r| r.version.plugin_id == plugin_id && r.version.version == version);
        Ok(row.and_then(|row| row.version.signer_key_id.clone()))
    }
}

#[async_trait]
impl PluginWrites for MemoryTx {
    async fn insert_plugin_version(&mut self, new: &NewPluginVersion<'_>) -> StoreResult<()> {
        let tables = &mut self.working;
        if tables
            .plugin_versions
            .iter()
            .any(|r| r.version.plugin_id == new.plugin_id && r.version.version == new.version)
        {
            return Err(StoreError::Unique("plugin_versions".into()));
        }
        tables.plugin_components.entry(new.sha256.to_string()).or_insert_with(|| new.bytes.to_vec());
        if !tables.plugins.iter().any(|p| p.plugin_id == new.plugin_id) {
            tables.plugins.push(StoredPlugin {
                plugin_id: new.plugin_id.to_string(),
                kind: new.kind.to_string(),
                active_version: None,
                previous_versions: Vec::new(),
                granted_hosts: Vec::new(),
            });
        }
        tables.plugin_versions.push(PluginVersionRow {
            version: StoredPluginVersion {
                plugin_id: new.plugin_id.to_string(),
                version: new.version.to_string(),
                sha256: new.sha256.to_string(),
                info: new.info.clone(),
                wit_version: new.wit_version.to_string(),
                size_bytes: new.bytes.len() as i64,
                signer_key_id: new.signer_key_id.map(str::to_string),
            },
            installed_at: new.at,
        });
        Ok(())
    }
    async fn set_plugin_activation(
        &mut self,
        plugin_id: &str,
        active_version: Option<&str>,
        previous_versions: &[String],
        _: i64,
    ) -> StoreResult<()> {
        for plugin in self.working.plugins.iter_mut().filter(|p| p.plugin_id == plugin_id) {
            plugin.active_version = active_version.map(str::to_string);
            plugin.previous_versions = previous_versions.to_vec();
        }
        Ok(())
    }
    async fn set_plugin_grants(&mut self, plugin_id: &str, hosts: &[String], _: i64) -> StoreResult<()> {
        for plugin in self.working.plugins.iter_mut().filter(|p| p.plugin_id == plugin_id) {
            plugin.granted_hosts = hosts.to_vec();
        }
        Ok(())
    }
    async fn delete_plugin(&mut self, plugin_id: &str, version: Option<&str>) -> StoreResult<()> {
        let tables = &mut self.working;
        match version {
            Some(version) => {
                tables.plugin_versions.retain(|r| !(r.version.plugin_id == plugin_id && r.version.version == version));
            }
            None => {
                tables.plugin_bindings.retain(|b| b.plugin_id != plugin_id);
                tables.plugin_versions.retain(|r| r.version.plugin_id != plugin_id);
                tables.plugins.retain(|p| p.plugin_id != plugin_id);
            }
        }
        drop_unreferenced_components(tables);
        Ok(())
    }
    async fn upsert_plugin_binding(&mut self, binding: &StoredBinding, _: i64) -> StoreResult<()> {
        let bindings = &mut self.working.plugin_bindings;
        let same = |b: &StoredBinding| {
            b.workspace_id == binding.workspace_id && b.kind == binding.kind && b.service_type == binding.service_type
        };
        match bindings.iter_mut().find(|b| same(b)) {
            Some(existing) => existing.plugin_id = binding.plugin_id.clone(),
            None => bindings.push(binding.clone()),
        }
        Ok(())
    }
    async fn delete_plugin_binding(&mut self, workspace_id: &str, kind: &str, service_type: &str) -> StoreResult<bool> {
        let before = self.working.plugin_bindings.len();
        self.working
            .plugin_bindings
            .retain(|b| !(b.workspace_id == workspace_id && b.kind == kind && b.service_type == service_type));
        Ok(self.working.plugin_bindings.len() < before)
    }
    async fn insert_plugin_signing_key(&mut self, key: &SigningKey) -> StoreResult<bool> {
        if self.working.plugin_signing_keys.iter().any(|k| k.key_id == key.key_id) {
            return Ok(false);
        }
        self.working.plugin_signing_keys.push(SigningKey { revoked_at: None, ..key.clone() });
        Ok(true)
    }
    async fn revoke_plugin_signing_key(&mut self, key_id: &str, at: i64) -> StoreResult<()> {
        for key in self.working.plugin_signing_keys.iter_mut().filter(|k| k.key_id == key_id && k.revoked_at.is_none())
        {
            key.revoked_at = Some(at);
        }
        Ok(())
    }
}
