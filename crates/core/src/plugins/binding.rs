//! One way to bind a stored record to the plugin that serves its type: CAs (connectors),
//! external integrations and issuance policies. A record kind says what it is
//! ([`RecordBinding`]); the functions here resolve its plugin (or a 400 naming the types that are
//! served), validate a configuration the way the plugin will receive it, seal it bound to the
//! record, and build the call target: the clear configuration minus withheld members, the
//! record's type where the plugin asks for it, the record's id and the record's hosts (the
//! outbound allowlist beside the operator's grants).

use serde_json::{json, Value};

use super::record_config::{self as secrets, Owner};
use super::{CallTarget, PluginError, PluginInfo, PluginKind, PluginRef};
use crate::context::Context;
use crate::error::{Error, Result};

/// A stored record served by a plugin of [`RecordBinding::KIND`].
pub trait RecordBinding {
    /// The plugin kind that serves records of this kind.
    const KIND: PluginKind;
    /// How a refusal names that kind of plugin ("CA connector").
    const PLUGIN_NOUN: &'static str;
    /// What a refusal suggests installing when no plugin of the kind is installed.
    const INSTALL_HINT: &'static str;
    /// The request member that carries the configuration (`config`, `configuration`).
    const CONFIG_MEMBER: &'static str;

    fn workspace_id(&self) -> &str;
    /// The record's type: what its plugin serves (`acme`, `slack`, `domain-allowlist`).
    fn service_type(&self) -> &str;
    /// The stored configuration (secret members sealed).
    fn stored_config(&self) -> &Value;
    /// What the record's sealed members are bound to.
    fn owner(&self) -> Owner;
    /// The record id the call is made for (plugin state and keystore are scoped to it).
    fn call_record_id(&self) -> String;
    /// The hosts the plugin may reach for this record, given its clear configuration. By
    /// default every http(s) URL in the configuration.
    fn record_hosts(&self, clear: &Value) -> Vec<String> {
        super::service::urls_in(clear)
    }
    /// Kind-specific parts of the target (a CA's endpoint and `pki-core` grant), given the clear
    /// configuration with withheld members.
    fn finish_target(&self, target: CallTarget, _clear: Value) -> CallTarget {
        target
    }
}

/// The plugin serving `service_type` for records of kind `R` in the workspace, or a 400
/// listing the types that are served.
pub fn resolve_plugin<R: RecordBinding>(ctx: &Context, workspace_id: &str, service_type: &str) -> Result<PluginInfo> {
    let host = ctx.plugins.host();
    host.serving(workspace_id, R::KIND, service_type).map_err(|err| match err {
        PluginError::NotBound { .. } | PluginError::NotFound { .. } => {
            let available = host.served_types(R::KIND);
            Error::validation_with(
                format!(
                    "No installed {} serves type `{service_type}`; available types: {}",
                    R::PLUGIN_NOUN,
                    if available.is_empty() {
                        format!("none (install {})", R::INSTALL_HINT)
                    } else {
                        available.join(", ")
                    }
                ),
                json!({ "field": "type", "availableTypes": available }),
            )
        }
        other => other.into(),
    })
}

/// The plugin serving `record`.
pub fn plugin_for<R: RecordBinding>(ctx: &Context, record: &R) -> Result<PluginInfo> {
    resolve_plugin::<R>(ctx, record.workspace_id(), record.service_type())
}

/// What the plugin receives of a clear configuration: withheld members removed, the record's
/// type set where the plugin's schema asks for it.
pub fn plugin_config(clear: &Value, info: &PluginInfo, service_type: &str) -> Value {
    secrets::with_record_type(secrets::for_plugin(clear, &secrets::secret_pointers(info)), info, service_type)
}

/// A call into `record`'s plugin `info`: its configuration unsealed, its id and its hosts.
pub fn call_target<R: RecordBinding>(ctx: &Context, record: &R, info: &PluginInfo) -> Result<CallTarget> {
    let pointers = secrets::secret_pointers(info);
    let clear = secrets::unseal(record.stored_config(), &pointers, &record.owner(), &ctx.master_key)?;
    let hosts = record.record_hosts(&clear);
    let target = CallTarget::new(
        record.workspace_id(),
        PluginRef::Id(info.id.clone()),
        plugin_config(&clear, info, record.service_type()),
    )
    .for_record(&record.call_record_id())
    .with_record_hosts(hosts);
    Ok(record.finish_target(target, clear))
}

/// Has the plugin validate a clear configuration as it would receive it in a call; its
/// `invalid-config` becomes a 400 naming each problem under the record's configuration member.
pub async fn validate_config<R: RecordBinding>(
    ctx: &Context,
    workspace_id: &str,
    info: &PluginInfo,
    service_type: &str,
    clear: &Value,
) -> Result<()> {
    let target =
        CallTarget::new(workspace_id, PluginRef::Id(info.id.clone()), plugin_config(clear, info, service_type));
    ctx.plugins
        .host()
        .validate_config(&target, R::KIND)
        .await
        .map_err(|err| secrets::invalid_config(err, R::CONFIG_MEMBER))
}

/// Seals the secret members of a clear configuration for storage, bound to `owner`; members
/// `previous` (the stored configuration) already holds sealed keep their ciphertext.
pub fn seal_config(
    ctx: &Context,
    info: &PluginInfo,
    clear: Value,
    previous: Option<&Value>,
    owner: &Owner,
) -> Result<Value> {
    secrets::seal(clear, previous, &secrets::secret_pointers(info), owner, &ctx.master_key, ctx.entropy.as_ref())
}
