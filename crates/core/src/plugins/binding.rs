//! One way to bind a stored record to the plugin that serves its type: CAs (connectors),
//! external integrations and issuance policies. A record kind says what it is
//! ([`RecordBinding`]); the functions here resolve its plugin (or a 400 naming the types that are
//! served), validate a configuration the way the plugin will receive it, seal it bound to the
//! record, and build the call target: the clear configuration minus withheld members, the
//! record's type where the plugin asks for it, the record's id and the record's hosts (the
//! outbound allowlist beside the operator's grants).

use std::sync::Arc;

use serde_json::{json, Value};

use super::record_config::{self as secrets, Owner};
use super::{CallTarget, PluginError, PluginHost, PluginInfo, PluginKind, PluginRef};
use crate::clock::Entropy;
use crate::crypto::MasterKey;
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
pub fn resolve_plugin<R: RecordBinding>(
    host: &dyn PluginHost,
    workspace_id: &str,
    service_type: &str,
) -> Result<Arc<PluginInfo>> {
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
pub fn plugin_for<R: RecordBinding>(host: &dyn PluginHost, record: &R) -> Result<Arc<PluginInfo>> {
    resolve_plugin::<R>(host, record.workspace_id(), record.service_type())
}

/// What the plugin receives of a clear configuration: withheld members removed, the record's
/// type set where the plugin's schema asks for it.
pub fn plugin_config(clear: &Value, info: &PluginInfo, service_type: &str) -> Value {
    secrets::with_record_type(secrets::for_plugin(clear, &secrets::secret_pointers(info)), info, service_type)
}

/// A call into `record`'s plugin `info`: its configuration unsealed, its id and its hosts.
pub fn call_target<R: RecordBinding>(master_key: &MasterKey, record: &R, info: &PluginInfo) -> Result<CallTarget> {
    let pointers = secrets::secret_pointers(info);
    let clear = secrets::unseal(record.stored_config(), &pointers, &record.owner(), master_key)?;
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
    host: &dyn PluginHost,
    workspace_id: &str,
    info: &PluginInfo,
    service_type: &str,
    clear: &Value,
) -> Result<()> {
    let target =
        CallTarget::new(workspace_id, PluginRef::Id(info.id.clone()), plugin_config(clear, info, service_type));
    host.validate_config(&target, R::KIND).await.map_err(|err| secrets::invalid_config(err, R::CONFIG_MEMBER))
}

/// Seals the secret members of a clear configuration for storage, bound to `owner`; members
/// `previous` (the stored configuration) already holds sealed keep their ciphertext.
pub fn seal_config(
    master_key: &MasterKey,
    entropy: &dyn Entropy,
    info: &PluginInfo,
    clear: Value,
    previous: Option<&Value>,
    owner: &Owner,
) -> Result<Value> {
    secrets::seal(clear, previous, &secrets::secret_pointers(info), owner, master_key, entropy)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cas::CertificateAuthority;
    use crate::context::Context;
    use crate::issuance::policies::IssuancePolicy;
    use crate::plugins::{Capabilities, SecretField};
    use crate::testing::{active_ca, context, MemoryStore};
    use crate::webhooks::ExternalIntegration;

    const NOW: &str = "2026-11-24T12:00:00Z";

    fn plugin(kind: PluginKind, secret: &str, withheld: bool) -> PluginInfo {
        PluginInfo {
            id: "fixture.plugin".into(),
            version: semver::Version::new(0, 1, 0),
            kind,
            name: "plugin".into(),
            description: String::new(),
            serves: vec!["fixture".into()],
            config_schema: json!({ "properties": { "kind": { "x-trellis-record-type": true } } }),
            secret_fields: vec![SecretField { pointer: format!("/{secret}"), withheld }],
            capabilities: Capabilities::default(),
            default_issuer_patterns: Vec::new(),
            outbound_hosts: Vec::new(),
        }
    }

    /// `config` stored as a record owned by `owner` would store it: its secrets sealed.
    fn sealed(ctx: &Context, info: &PluginInfo, config: Value, owner: &Owner) -> Value {
        seal_config(&ctx.master_key, ctx.entropy.as_ref(), info, config, None, owner)
            .unwrap_or_else(|err| panic!("seal: {err}"))
    }

    fn policy(id: i64) -> IssuancePolicy {
        IssuancePolicy {
            id,
            workspace_id: "ws_bind".into(),
            name: "names".into(),
            policy_type: "fixture".into(),
            config: json!({}),
            position: 0,
            enabled: true,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn a_policy_call_carries_its_record_s_hosts_id_and_clear_config() {
        let ctx = context(MemoryStore::default(), NOW);
        let info = plugin(PluginKind::IssuancePolicy, "apiKey", false);
        let mut record = policy(7);
        let config = json!({ "endpoint": "https://names.example.net/check", "apiKey": "s3cret" });
        record.config = sealed(&ctx, &info, config, &record.owner());
        assert_ne!(record.config["apiKey"], "s3cret", "sealed at rest");

        let target = call_target(&ctx.master_key, &record, &info).unwrap_or_else(|err| panic!("target: {err}"));

        assert_eq!(target.record_hosts, ["https://names.example.net/check"], "the record's hosts are reachable");
        assert_eq!(target.context.record_id, "policy-7");
        assert_eq!(target.config["apiKey"], "s3cret");
        assert_eq!(target.config["kind"], "fixture", "the record's type, where the plugin asks for it");
        assert!(target.pki.is_none());
    }

    #[test]
    fn a_ca_call_reaches_the_ca_s_url_and_an_internal_ca_gets_its_pki_grant() {
        let ctx = context(MemoryStore::default(), NOW);
        let info = plugin(PluginKind::CaConnector, "signingKey", true);
        let mut ca: CertificateAuthority = active_ca("ws_bind", 12, "internal");
        ca.url = Some("https://ca.example.net".into());
        let config = json!({ "signingKey": "host-only", "note": "https://elsewhere.example.net" });
        ca.config = sealed(&ctx, &info, config, &ca.owner());

        let target = call_target(&ctx.master_key, &ca, &info).unwrap_or_else(|err| panic!("target: {err}"));

        assert_eq!(target.record_hosts, ["https://ca.example.net"], "a CA's host is its URL only");
        assert_eq!(target.context.endpoint.as_deref(), Some("https://ca.example.net"));
        assert_eq!(target.context.record_id, "12");
        assert!(target.config.get("signingKey").is_none(), "withheld from the plugin");
        let grant = target.pki.unwrap_or_else(|| panic!("an internal CA's grant"));
        assert_eq!(grant.withheld_config["signingKey"], "host-only", "pki-core reads it");
        assert_eq!(grant.ca_id, 12);
    }

    #[test]
    fn an_integration_call_reaches_the_urls_in_its_configuration() {
        let ctx = context(MemoryStore::default(), NOW);
        let info = plugin(PluginKind::Integration, "webhookUrl", false);
        let mut integration = ExternalIntegration {
            id: "int_1".into(),
            workspace_id: "ws_bind".into(),
            name: "alerts".into(),
            integration_type: "fixture".into(),
            events: vec!["*".into()],
            config: json!({}),
            enabled: true,
            disabled_reason: None,
            failing_since: None,
            created_at: 0,
            updated_at: 0,
            subscribed_at: 0,
        };
        let config = json!({ "webhookUrl": "https://hooks.example.net/T1" });
        integration.config = sealed(&ctx, &info, config, &integration.owner());

        let target = call_target(&ctx.master_key, &integration, &info).unwrap_or_else(|err| panic!("target: {err}"));

        assert_eq!(target.record_hosts, ["https://hooks.example.net/T1"]);
        assert_eq!(target.context.record_id, "int_1");
        assert_eq!(target.config["webhookUrl"], "https://hooks.example.net/T1");
    }

    #[test]
    fn an_unserved_type_is_a_400_naming_the_kind_of_plugin_to_install() {
        let ctx = context(MemoryStore::default(), NOW);
        let refusal = |err: Error| err.to_string();
        let ca =
            resolve_plugin::<CertificateAuthority>(ctx.plugins.host(), "ws_bind", "acme").map(|_| ()).map_err(refusal);
        assert_eq!(
            ca,
            Err("No installed CA connector serves type `acme`; available types: none (install a connector plugin)"
                .into())
        );
        let policy =
            resolve_plugin::<IssuancePolicy>(ctx.plugins.host(), "ws_bind", "names").map(|_| ()).map_err(refusal);
        assert!(policy.is_err_and(|m| m.starts_with("No installed issuance policy serves type `names`")));
    }
}
