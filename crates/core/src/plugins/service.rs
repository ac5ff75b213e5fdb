//! The plugin service: the runtime plus persistence, authorization and audit.
//!
//! The database is the source of truth (every replica runs the same bytes); each replica's
//! runtime follows it: at start ([`load`]) and every few seconds ([`spawn_sync`]).

use std::sync::Arc;

use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::clock::SharedClock;
use crate::error::{Entity, Error, Result};
use crate::plugins::port::{PluginStore, PluginTx, PluginWrites};
use crate::plugins::signatures::{self, SignatureMode, VerifiedSigner};
use crate::plugins::{
    Activation, CallTarget, Check, CheckStatus, ComponentSource, DeferredVersion, InstallError, InstalledVersion,
    NewPluginVersion, PluginError, PluginHost, PluginInfo, PluginKind, PluginRef, PluginSummary, StoredBinding,
    TestReport,
};
use crate::unit_of_work::Target;
use crate::unit_of_work::UnitOfWork;

/// The process's plugin runtime, as the service holds it.
#[derive(Clone)]
pub struct PluginService {
    host: Arc<dyn PluginHost>,
    /// Serializes lifecycle changes with `sync`, so a sync never sees a version that is
    /// installed in the runtime but not yet committed (and drops it).
    lifecycle: Arc<tokio::sync::Mutex<()>>,
    /// `TRELLIS_PLUGIN_SIGNATURES`.
    signatures: SignatureMode,
}

impl PluginService {
    pub fn new(host: Arc<dyn PluginHost>) -> PluginService {
        PluginService { host, lifecycle: Arc::new(tokio::sync::Mutex::new(())), signatures: SignatureMode::default() }
    }

    /// What installs do about signatures.
    pub fn with_signature_mode(mut self, mode: SignatureMode) -> PluginService {
        self.signatures = mode;
        self
    }

    pub fn signature_mode(&self) -> SignatureMode {
        self.signatures
    }

    pub(crate) fn lifecycle(&self) -> &tokio::sync::Mutex<()> {
        &self.lifecycle
    }

    /// The runtime, for domain services that call plugins (CA issuance, integrations).
    pub fn host(&self) -> &dyn PluginHost {
        self.host.as_ref()
    }
}

/// What the registry's use cases use, and nothing else of the service: the area's storage port,
/// the plugin runtime (one engine per process) with its lifecycle lock, and the clock.
/// `Context::plugin_deps` hands it out.
#[derive(Clone)]
pub struct PluginDeps {
    pub store: Arc<dyn PluginStore>,
    pub plugins: PluginService,
    pub clock: SharedClock,
}

impl PluginDeps {
    /// Opens a unit of work for a change made by `actor` (audited in `workspace_id`), now.
    pub(crate) async fn change(
        &self,
        actor: Audit,
        workspace_id: Option<&str>,
    ) -> Result<UnitOfWork<'static, dyn PluginTx>> {
        let tx = self.store.begin().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, crate::clock::now_millis(self.clock.as_ref())))
    }
}

fn parse_version(text: &str) -> Result<semver::Version> {
    semver::Version::parse(text).map_err(|_| Error::invalid_field("version", "must be a semantic version like 1.2.0"))
}

async fn persist_activation(tx: &mut dyn PluginWrites, runtime: &dyn PluginHost, id: &str, at: i64) -> Result<()> {
    let summary = runtime.show(id).ok_or(Error::NotFound(Entity::Plugin))?;
    tx.set_plugin_activation(id, summary.active_version.as_deref(), &summary.previous_versions, at).await?;
    Ok(())
}

/// Whether `caller` may install components: checked before the bytes are even read.
pub fn authorize_install(caller: &Caller) -> Result<()> {
    caller.require_instance_admin()
}

/// Installs a component (instance administrators only), with its detached signature if it has
/// one.
pub async fn install(
    ctx: &PluginDeps,
    caller: &Caller,
    wasm: &[u8],
    detached_signature: Option<&[u8]>,
    activation: Activation,
) -> Result<InstalledVersion> {
    authorize_install(caller)?;
    install_as(ctx, &Audit::of(caller), Some(&caller.workspace_id), wasm, detached_signature, activation).await
}

/// The signature check of an install, before compilation: the trusted signer, or (in `warn`
/// mode) the refusal `require` would have made, as a warning. `off` looks at nothing.
async fn check_signature(
    ctx: &PluginDeps,
    wasm: &[u8],
    detached: Option<&[u8]>,
) -> Result<(Option<VerifiedSigner>, Option<InstallError>)> {
    let mode = ctx.plugins.signature_mode();
    if mode == SignatureMode::Off {
        return Ok((None, None));
    }
    let keys = ctx.store.reads().list_plugin_signing_keys().await?;
    match signatures::verify(wasm, detached, &keys) {
        Ok(signer) => Ok((Some(signer), None)),
        Err(refusal) if mode == SignatureMode::Require => Err(PluginError::from(refusal).into()),
        Err(refusal) => Ok((None, Some(refusal))),
    }
}

/// Installs a component on behalf of `actor`: validates it in the runtime, then stores bytes,
/// version and activation in one transaction with the audit row. Plugins are instance-wide;
/// the audit row goes to the acting administrator's workspace (`None` for system actors).
pub async fn install_as(
    ctx: &PluginDeps,
    actor: &Audit,
    audit_workspace: Option<&str>,
    wasm: &[u8],
    detached_signature: Option<&[u8]>,
    activation: Activation,
) -> Result<InstalledVersion> {
    let runtime = ctx.plugins.host();
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    // Before compilation: an unsigned or untrusted component costs no compile in `require` mode.
    let (signer, mut warning) = check_signature(ctx, wasm, detached_signature).await?;
    // The scope needs the id and kind the component describes: known only once it is compiled
    // and described, and checked before anything is stored or served.
    let in_scope = |installed: &InstalledVersion| match &signer {
        Some(signer) => signatures::check_scope(signer, &installed.info).map(|()| Some(signer.key.key_id.clone())),
        None => Ok(None),
    };
    // Registered inactive until the scope is known, so that no call is served by it before.
    let mut installed = runtime.install(wasm, Activation::Never).await?;
    let id = installed.info.id.clone();
    let version = installed.info.version.clone();
    let signer_key_id = match in_scope(&installed) {
        Ok(key_id) => key_id,
        Err(refusal) if ctx.plugins.signature_mode() == SignatureMode::Require => {
            if let Err(remove_err) = runtime.remove(&id, Some(&version)) {
                tracing::error!(plugin = %id, %version, error = %remove_err, "cannot unload a version refused for its signer's scope");
            }
            return Err(PluginError::from(refusal).into());
        }
        Err(refusal) => {
            warning = Some(refusal);
            None
        }
    };
    if let Some(warning) = &warning {
        tracing::warn!(target: "trellis::security", plugin = %id, %version, code = warning.code(), reason = %warning, "plugin installed without a trusted signature (TRELLIS_PLUGIN_SIGNATURES=warn)");
    }
    // Now that the version may be served: the activation the caller asked for, and the signer.
    let activated = runtime.set_signer(&id, &version, signer_key_id.clone()).and_then(|()| {
        let active = runtime.show(&id).and_then(|s| s.active_version).and_then(|v| semver::Version::parse(&v).ok());
        let activate = match activation {
            Activation::Always => true,
            Activation::Never => false,
            Activation::IfNewer => active.as_ref().is_none_or(|active| version > *active),
        };
        if activate {
            runtime.activate(&id, &version)?;
        }
        Ok(activate)
    });
    match activated {
        Ok(active) => installed.active = active,
        Err(err) => {
            if let Err(remove_err) = runtime.remove(&id, Some(&version)) {
                tracing::error!(plugin = %id, %version, error = %remove_err, "cannot unload a version that failed to activate");
            }
            return Err(err.into());
        }
    }
    installed.signer_key_id = signer_key_id.clone();
    installed.signature_warning = warning.as_ref().map(|w| (w.code().to_owned(), w.to_string()));
    let persisted: Result<()> = async {
        let info = serde_json::to_value(&installed.info).map_err(|err| Error::Internal(err.to_string()))?;
        let mut change = ctx.change(actor.clone(), audit_workspace).await?;
        let at = change.at();
        change
            .tx()
            .plugins()
            .insert_plugin_version(&NewPluginVersion {
                plugin_id: &id,
                kind: installed.info.kind.as_str(),
                version: &version.to_string(),
                sha256: &installed.sha256,
                bytes: wasm,
                wit_version: &installed.wit_version,
                info: &info,
                installed_by: &actor.principal.id,
                at,
                signer_key_id: signer_key_id.as_deref(),
            })
            .await?;
        persist_activation(change.tx().plugins(), runtime, &id, at).await?;
        let details = serde_json::json!({
            "version": version.to_string(),
            "sha256": installed.sha256,
            "active": installed.active,
            "signerKeyId": signer_key_id,
            "signatureMode": ctx.plugins.signature_mode().as_str(),
            "signatureWarning": warning.as_ref().map(InstallError::code),
        });
        change.audit("plugin.installed", Target::new("plugin", &id), details);
        change.commit().await
    }
    .await;
    if let Err(err) = persisted {
        // Keep runtime and database in agreement: what was not stored is not served.
        if let Err(remove_err) = runtime.remove(&id, Some(&version)) {
            tracing::error!(plugin = %id, %version, error = %remove_err, "cannot unload a version that failed to persist");
        }
        return Err(err);
    }
    Ok(installed)
}

/// Makes a version active.
pub async fn activate(ctx: &PluginDeps, caller: &Caller, id: &str, version: &str) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let version = parse_version(version)?;
    signatures::check_activatable(ctx, id, &version.to_string()).await?;
    let runtime = ctx.plugins.host();
    runtime.activate(id, &version)?;
    record_activation(ctx, caller, id, "plugin.activated", &version).await
}

/// Persists the runtime's new activation of `id` with its audit row, and returns the summary.
async fn record_activation(
    ctx: &PluginDeps,
    caller: &Caller,
    id: &str,
    action: &str,
    version: &semver::Version,
) -> Result<PluginSummary> {
    let runtime = ctx.plugins.host();
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    persist_activation(change.tx().plugins(), runtime, id, at).await?;
    change.audit(action, Target::new("plugin", id), serde_json::json!({ "version": version.to_string() }));
    change.commit().await?;
    runtime.show(id).ok_or(Error::NotFound(Entity::Plugin))
}

/// Re-activates the previously active version.
pub async fn rollback(ctx: &PluginDeps, caller: &Caller, id: &str) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let runtime = ctx.plugins.host();
    // The version rollback would make active: refused if its signing key is revoked.
    if let Some(previous) = runtime.show(id).and_then(|s| s.previous_versions.last().cloned()) {
        signatures::check_activatable(ctx, id, &previous).await?;
    }
    let version = runtime.rollback(id)?;
    record_activation(ctx, caller, id, "plugin.rolled_back", &version).await
}

/// Removes one version or (without `version`) the whole plugin.
pub async fn remove(ctx: &PluginDeps, caller: &Caller, id: &str, version: Option<&str>) -> Result<()> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let version = version.map(parse_version).transpose()?;
    let runtime = ctx.plugins.host();
    runtime.remove(id, version.as_ref())?;
    let version_text = version.as_ref().map(ToString::to_string);
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    change.tx().plugins().delete_plugin(id, version_text.as_deref()).await?;
    if version.is_some() && runtime.show(id).is_some() {
        persist_activation(change.tx().plugins(), runtime, id, at).await?;
    }
    let details = serde_json::json!({ "version": version_text });
    change.audit("plugin.removed", Target::new("plugin", id), details);
    change.commit().await?;
    Ok(())
}

/// Replaces the outbound hosts the operator grants a plugin.
pub async fn grant_hosts(ctx: &PluginDeps, caller: &Caller, id: &str, hosts: Vec<String>) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    if hosts.iter().any(|h| h.trim().is_empty() || h.contains('/') && !h.contains("://")) {
        return Err(Error::invalid_field("hosts", "entries are host, host:port, *.domain or an http(s) URL"));
    }
    let runtime = ctx.plugins.host();
    runtime.grant_hosts(id, hosts.clone())?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    change.tx().plugins().set_plugin_grants(id, &hosts, at).await?;
    change.audit("plugin.hosts_granted", Target::new("plugin", id), serde_json::json!({ "hosts": hosts }));
    change.commit().await?;
    runtime.show(id).ok_or(Error::NotFound(Entity::Plugin))
}

/// Every installed plugin.
pub fn list(ctx: &PluginDeps, caller: &Caller) -> Result<Vec<PluginSummary>> {
    caller.require_instance_admin()?;
    Ok(ctx.plugins.host().list())
}

/// One plugin with its versions.
pub fn show(ctx: &PluginDeps, caller: &Caller, id: &str) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    ctx.plugins.host().show(id).ok_or(Error::NotFound(Entity::Plugin))
}

/// The caller's workspace bindings.
pub async fn list_bindings(ctx: &PluginDeps, caller: &Caller) -> Result<Vec<StoredBinding>> {
    caller.require(Scope::PluginsRead)?;
    Ok(ctx.store.reads().list_workspace_plugin_bindings(&caller.workspace_id).await?)
}

/// Chooses which plugin serves a type in the caller's workspace.
pub async fn bind(
    ctx: &PluginDeps,
    caller: &Caller,
    kind: &str,
    service_type: &str,
    plugin_id: &str,
) -> Result<StoredBinding> {
    caller.require(Scope::PluginsWrite)?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let kind_parsed = PluginKind::parse(kind).ok_or_else(|| {
        Error::invalid_field("kind", "must be ca-connector, integration, attestation-verifier or issuance-policy")
    })?;
    if service_type.trim().is_empty() {
        return Err(Error::invalid_field("type", "must not be empty"));
    }
    let runtime = ctx.plugins.host();
    runtime.bind(&caller.workspace_id, kind_parsed, service_type, plugin_id)?;
    let binding = StoredBinding {
        workspace_id: caller.workspace_id.to_string(),
        kind: kind.to_owned(),
        service_type: service_type.to_owned(),
        plugin_id: plugin_id.to_owned(),
    };
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    change.tx().plugins().upsert_plugin_binding(&binding, at).await?;
    let details = serde_json::json!({ "kind": kind, "type": service_type, "pluginId": plugin_id });
    change.audit("plugin.bound", Target::new("plugin", plugin_id), details);
    change.commit().await?;
    Ok(binding)
}

/// Removes a binding of the caller's workspace.
pub async fn unbind(ctx: &PluginDeps, caller: &Caller, kind: &str, service_type: &str) -> Result<()> {
    caller.require(Scope::PluginsWrite)?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let kind_parsed = PluginKind::parse(kind).ok_or_else(|| {
        Error::invalid_field("kind", "must be ca-connector, integration, attestation-verifier or issuance-policy")
    })?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if !change.tx().plugins().delete_plugin_binding(&caller.workspace_id, kind, service_type).await? {
        return Err(Error::NotFound(Entity::Plugin));
    }
    let details = serde_json::json!({ "kind": kind, "type": service_type });
    change.audit("plugin.unbound", Target::kind("plugin"), details);
    change.commit().await?;
    ctx.plugins.host().unbind(&caller.workspace_id, kind_parsed, service_type);
    Ok(())
}

/// Runs the connection test of whatever plugin the caller's workspace binds to `service_type`
/// (instance administrators only),
/// with `config` as the record's configuration (every http(s) URL in it counts as the record's
/// host, as it would for a stored record). Plugin failures become a failed report, so an
/// operator sees why (the `plugin` check carries the error code).
pub async fn test_binding(
    ctx: &PluginDeps,
    caller: &Caller,
    kind: &str,
    service_type: &str,
    config: serde_json::Value,
) -> Result<TestReport> {
    // Every URL in an ad-hoc configuration becomes a host the plugin may reach, so this
    // diagnostic is the operator's: a workspace owner (any signed-up user) must not be able to
    // point plugins at hosts of their choice and read part of the answer.
    caller.require(Scope::PluginsWrite)?;
    caller.require_instance_admin()?;
    let kind = PluginKind::parse(kind).ok_or_else(|| {
        Error::invalid_field("kind", "must be ca-connector, integration, attestation-verifier or issuance-policy")
    })?;
    // A plugin serving several types learns which one it is tested as, as in a record's calls.
    let config = match ctx.plugins.host().serving(&caller.workspace_id, kind, service_type) {
        Ok(info) => super::record_config::with_record_type(config, &info, service_type),
        Err(_) => config,
    };
    let mut target = CallTarget::new(&caller.workspace_id, PluginRef::Serving(service_type.to_owned()), config);
    target.context.request_id = caller.request_id.clone();
    let urls = urls_in(&target.config);
    let target = target.with_record_hosts(urls);
    let runtime = ctx.plugins.host();
    let outcome = async {
        runtime.validate_config(&target, kind).await?;
        match kind {
            PluginKind::Integration => runtime.integration_test(&target).await,
            PluginKind::CaConnector => runtime.ca_test_connection(&target).await,
            // Verifiers and policies have nothing to connect to: what was checked is that the
            // plugin's own validate-config accepted the configuration, and the report says so.
            PluginKind::AttestationVerifier | PluginKind::IssuancePolicy => Ok(TestReport {
                success: true,
                message: format!("the {kind} accepted the configuration; it has no connection to test"),
                checks: vec![Check {
                    name: "validate-config".into(),
                    status: CheckStatus::Pass,
                    message: "accepted by the plugin".into(),
                }],
                details: serde_json::json!({}),
            }),
        }
    }
    .await;
    match outcome {
        Ok(report) => Ok(report),
        Err(
            err @ (PluginError::NotFound { .. }
            | PluginError::NotBound { .. }
            | PluginError::AmbiguousBinding { .. }
            | PluginError::WrongKind { .. }),
        ) => Err(err.into()),
        Err(err) => Ok(TestReport::failed_call(&err)),
    }
}

pub(crate) fn urls_in(value: &serde_json::Value) -> Vec<String> {
    match value {
        serde_json::Value::String(s) if s.starts_with("https://") || s.starts_with("http://") => vec![s.clone()],
        serde_json::Value::Array(items) => items.iter().flat_map(urls_in).collect(),
        serde_json::Value::Object(map) => map.values().flat_map(urls_in).collect(),
        _ => Vec::new(),
    }
}

/// Drops the runtime's compiled code (after the first start's installs): a version is compiled
/// again, from the database, on its next call.
pub fn release_compiled(ctx: &PluginDeps) -> usize {
    ctx.plugins.host().release_compiled(Arc::new(StoredComponents(ctx.store.clone())))
}

/// Stored versions' component bytes, fetched when a deferred version is first called.
struct StoredComponents(Arc<dyn PluginStore>);

#[async_trait::async_trait]
impl ComponentSource for StoredComponents {
    async fn component(&self, sha256: &str) -> std::result::Result<Vec<u8>, PluginError> {
        match self.0.reads().plugin_component(sha256).await {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(PluginError::Internal(format!("the database holds no component {sha256}"))),
            Err(err) => Err(PluginError::Internal(format!("reading component {sha256}: {err}"))),
        }
    }
}

/// Brings this replica's runtime in line with the database: registers versions it does not
/// have (compiled on first call; the digest checked then), drops removed ones, applies
/// activation, grants and bindings.
pub async fn sync(ctx: &PluginDeps) -> Result<()> {
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let runtime = ctx.plugins.host();
    let stored_versions = ctx.store.reads().list_plugin_versions().await?;
    for stored in &stored_versions {
        let Ok(version) = semver::Version::parse(&stored.version) else { continue };
        let known =
            runtime.show(&stored.plugin_id).is_some_and(|s| s.versions.iter().any(|v| v.info.version == version));
        if known {
            continue;
        }
        let info = match serde_json::from_value::<PluginInfo>(stored.info.clone()) {
            Ok(info) if info.id == stored.plugin_id && info.version == version => info,
            Ok(_) | Err(_) => {
                tracing::error!(plugin = %stored.plugin_id, version = %stored.version, "stored plugin description does not match its version row; not serving it");
                continue;
            }
        };
        // Compiled on its first call, not here: a restart holds no code for plugins nobody calls.
        let deferred = DeferredVersion {
            info,
            sha256: stored.sha256.clone(),
            size_bytes: usize::try_from(stored.size_bytes).unwrap_or_default(),
            wit_version: stored.wit_version.clone(),
            source: Arc::new(StoredComponents(ctx.store.clone())),
            signer_key_id: stored.signer_key_id.clone(),
        };
        match runtime.install_deferred(deferred) {
            Ok(_) | Err(PluginError::Install(InstallError::DuplicateVersion { .. })) => {}
            Err(err) => {
                tracing::error!(plugin = %stored.plugin_id, version = %stored.version, code = err.code(), error = %err, "cannot load stored plugin")
            }
        }
    }
    let stored_plugins = ctx.store.reads().list_plugins().await?;
    for summary in runtime.list() {
        match stored_plugins.iter().find(|p| p.plugin_id == summary.id) {
            None => {
                logged(runtime.remove(&summary.id, None), &summary.id, "unload removed plugin");
            }
            Some(_) => {
                for v in &summary.versions {
                    let listed = stored_versions
                        .iter()
                        .any(|s| s.plugin_id == summary.id && s.version == v.info.version.to_string());
                    if !listed && summary.versions.len() > 1 {
                        logged(runtime.restore_activation(&summary.id, None, &[]), &summary.id, "clear activation");
                        logged(
                            runtime.remove(&summary.id, Some(&v.info.version)),
                            &summary.id,
                            "unload removed version",
                        );
                    }
                }
            }
        }
    }
    for plugin in &stored_plugins {
        let active = plugin.active_version.as_deref().and_then(|v| semver::Version::parse(v).ok());
        let history: Vec<semver::Version> =
            plugin.previous_versions.iter().filter_map(|v| semver::Version::parse(v).ok()).collect();
        logged(
            runtime.restore_activation(&plugin.plugin_id, active.as_ref(), &history),
            &plugin.plugin_id,
            "restore activation",
        );
        logged(
            runtime.grant_hosts(&plugin.plugin_id, plugin.granted_hosts.clone()),
            &plugin.plugin_id,
            "restore grants",
        );
    }
    let bindings = ctx.store.reads().list_plugin_bindings().await?;
    runtime.replace_bindings(
        bindings
            .into_iter()
            .filter_map(|b| PluginKind::parse(&b.kind).map(|kind| (b.workspace_id, kind, b.service_type, b.plugin_id)))
            .collect(),
    );
    Ok(())
}

/// `sync` carries on past one plugin's failure so that the others stay served; the failure
/// is logged with its code, never dropped.
fn logged<T>(result: std::result::Result<T, PluginError>, plugin: &str, step: &str) {
    if let Err(err) = result {
        tracing::warn!(plugin, step, code = err.code(), error = %err, "plugin sync step failed");
    }
}
