//! The storage port of the plugin registry: component bytes (content-addressed), versions, the
//! active version and its history, host grants, workspace bindings, and the trust store of
//! publisher keys. Plugin state (`trellis:plugin/state`) has its own port, `PluginStateStore`.

use async_trait::async_trait;

use super::signatures::SigningKey;
use super::{NewPluginVersion, StoredBinding, StoredPlugin, StoredPluginVersion};
use crate::store_error::StoreResult;
use crate::unit_of_work::ChangeTx;

#[async_trait]
pub trait PluginReads: Send + Sync {
    async fn list_plugin_versions(&self) -> StoreResult<Vec<StoredPluginVersion>>;
    async fn plugin_component(&self, sha256: &str) -> StoreResult<Option<Vec<u8>>>;
    async fn list_plugins(&self) -> StoreResult<Vec<StoredPlugin>>;
    /// Bindings of every workspace: the runtime of each replica serves them all.
    async fn list_plugin_bindings(&self) -> StoreResult<Vec<StoredBinding>>;
    /// Bindings of one workspace.
    async fn list_workspace_plugin_bindings(&self, workspace_id: &str) -> StoreResult<Vec<StoredBinding>>;
    async fn any_plugin_installed(&self) -> StoreResult<bool>;
    /// The trust store of plugin publisher keys, revoked ones included, oldest first.
    async fn list_plugin_signing_keys(&self) -> StoreResult<Vec<SigningKey>>;
    /// `(plugin id, version)` of every version the key signed.
    async fn plugin_versions_signed_by(&self, key_id: &str) -> StoreResult<Vec<(String, String)>>;
    /// The key that signed a version (none: unsigned or unknown version).
    async fn plugin_version_signer(&self, plugin_id: &str, version: &str) -> StoreResult<Option<String>>;
}

#[async_trait]
pub trait PluginWrites: Send {
    async fn insert_plugin_version(&mut self, new: &NewPluginVersion<'_>) -> StoreResult<()>;
    async fn set_plugin_activation(
        &mut self,
        plugin_id: &str,
        active_version: Option<&str>,
        previous_versions: &[String],
        at: i64,
    ) -> StoreResult<()>;
    async fn set_plugin_grants(&mut self, plugin_id: &str, hosts: &[String], at: i64) -> StoreResult<()>;
    async fn delete_plugin(&mut self, plugin_id: &str, version: Option<&str>) -> StoreResult<()>;
    async fn upsert_plugin_binding(&mut self, binding: &StoredBinding, at: i64) -> StoreResult<()>;
    async fn delete_plugin_binding(&mut self, workspace_id: &str, kind: &str, service_type: &str) -> StoreResult<bool>;
    /// Adds a key; false when the trust store already holds one with its id.
    async fn insert_plugin_signing_key(&mut self, key: &SigningKey) -> StoreResult<bool>;
    async fn revoke_plugin_signing_key(&mut self, key_id: &str, at: i64) -> StoreResult<()>;
}

/// What the registry's use cases need of storage: the area's reads, and transactions over its
/// writes plus the audit rows and events of a change. The full store is one implementation
/// (`crate::ports`).
#[async_trait]
pub trait PluginStore: Send + Sync {
    fn reads(&self) -> &dyn PluginReads;
    async fn begin(&self) -> StoreResult<Box<dyn PluginTx>>;
}

/// A transaction of [`PluginStore`]: the area's writes, and (as a [`ChangeTx`]) the rows of a
/// unit of work and the commit. Dropping it without [`ChangeTx::commit`] rolls it back.
pub trait PluginTx: ChangeTx {
    fn plugins(&mut self) -> &mut dyn PluginWrites;
}
