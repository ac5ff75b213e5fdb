//! The plugin service: the runtime plus persistence, authorization and audit.
//!
//! The database is the source of truth (every replica runs the same bytes); each replica's
//! runtime follows it: at start ([`load`]) and every few seconds ([`spawn_sync`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::audit::{self, Audit};
use crate::auth::{Caller, Scope};
use crate::context::{Context, SharedContext};
use crate::error::{Entity, Error, Result};
use crate::plugins::{
    Activation, CallTarget, Check, CheckStatus, InstallError, InstalledVersion, PluginError, PluginKind, PluginRef,
    PluginRuntime, PluginSummary, RuntimeConfig, TestReport, FIRST_PARTY_PLUGINS,
};
use crate::store::{DbPluginState, NewPluginVersion, Store, StoredBinding};

/// The process's plugin runtime, as the service holds it.
#[derive(Clone, Debug)]
pub struct PluginService {
    runtime: PluginRuntime,
    /// Serializes lifecycle changes with `sync`, so a sync never sees a version that is
    /// installed in the runtime but not yet committed (and drops it).
    lifecycle: Arc<tokio::sync::Mutex<()>>,
}

impl PluginService {
    /// Starts the runtime with the service configuration; plugin state lives in `store`.
    pub fn start(
        config: &crate::config::Config,
        store: &Store,
        clock: crate::clock::SharedClock,
    ) -> std::result::Result<PluginService, PluginError> {
        let mut runtime_config = RuntimeConfig::with_data_dir(&config.data_dir);
        // Running from a cargo build tree (development, tests): share one compiled-code cache
        // across every server started from it, so only the first start compiles.
        if let Some(target_dir) = build_tree_target_dir() {
            runtime_config.cache_dir = Some(target_dir.join("plugin-cache"));
        }
        let mut runtime_config = runtime_config.apply_env();
        runtime_config.egress.allow_private_networks = config.plugin_allow_private_networks;
        let runtime = PluginRuntime::new(runtime_config, Arc::new(DbPluginState { store: store.clone(), clock }))?;
        Ok(PluginService { runtime, lifecycle: Arc::new(tokio::sync::Mutex::new(())) })
    }

    /// The runtime, for domain services that call plugins (CA issuance, integrations).
    pub fn runtime(&self) -> &PluginRuntime {
        &self.runtime
    }
}

/// Maps runtime errors onto the service's error type (codes stay visible in `details`).
pub fn service_error(err: PluginError) -> Error {
    let code = err.code();
    let message = err.to_string();
    match err {
        PluginError::NotFound { .. } => Error::NotFound(Entity::Plugin),
        PluginError::Install(InstallError::DuplicateVersion { .. })
        | PluginError::VersionActive { .. }
        | PluginError::NoPreviousVersion { .. } => Error::Conflict(message),
        PluginError::Install(_)
        | PluginError::NotBound { .. }
        | PluginError::AmbiguousBinding { .. }
        | PluginError::WrongKind { .. } => Error::validation_with(message, serde_json::json!({ "code": code })),
        PluginError::Overloaded { .. } => Error::RateLimited { retry_after_secs: 1 },
        _ => Error::Internal(format!("{code}: {message}")),
    }
}

fn parse_version(text: &str) -> Result<semver::Version> {
    semver::Version::parse(text).map_err(|_| Error::invalid_field("version", "must be a semantic version like 1.2.0"))
}

async fn persist_activation(tx: &mut crate::store::Tx, runtime: &PluginRuntime, id: &str, at: i64) -> Result<()> {
    let summary = runtime.show(id).ok_or(Error::NotFound(Entity::Plugin))?;
    tx.set_plugin_activation(id, summary.active_version.as_deref(), &summary.previous_versions, at).await?;
    Ok(())
}

/// Installs a component (instance administrators only).
pub async fn install(ctx: &Context, caller: &Caller, wasm: &[u8], activation: Activation) -> Result<InstalledVersion> {
    caller.require_instance_admin()?;
    install_as(ctx, &Audit::of(caller), Some(&caller.workspace_id), wasm, activation).await
}

/// Installs a component on behalf of `actor`: validates it in the runtime, then stores bytes,
/// version and activation in one transaction with the audit row. Plugins are instance-wide;
/// the audit row goes to the acting administrator's workspace (`None` for system actors).
pub async fn install_as(
    ctx: &Context,
    actor: &Audit,
    audit_workspace: Option<&str>,
    wasm: &[u8],
    activation: Activation,
) -> Result<InstalledVersion> {
    let runtime = ctx.plugins.runtime();
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let installed = runtime.install(wasm, activation).await.map_err(service_error)?;
    let id = installed.info.id.clone();
    let version = installed.info.version.clone();
    let at = ctx.now_millis();
    let persisted: Result<()> = async {
        let info = serde_json::to_value(&installed.info).map_err(|err| Error::Internal(err.to_string()))?;
        let mut tx = ctx.store.begin().await?;
        tx.insert_plugin_version(&NewPluginVersion {
            plugin_id: &id,
            kind: installed.info.kind.as_str(),
            version: &version.to_string(),
            sha256: &installed.sha256,
            bytes: wasm,
            wit_version: &installed.wit_version,
            info: &info,
            installed_by: &actor.actor_id,
            at,
        })
        .await?;
        persist_activation(&mut tx, runtime, &id, at).await?;
        let details = serde_json::json!({ "version": version.to_string(), "sha256": installed.sha256, "active": installed.active });
        audit::record(&mut tx, actor, audit_workspace, "plugin.installed", "plugin", Some(&id), details, at).await?;
        tx.commit().await?;
        Ok(())
    }
    .await;
    if let Err(err) = persisted {
        // Keep runtime and database in agreement: what was not stored is not served.
        let _ = runtime.remove(&id, Some(&version));
        return Err(err);
    }
    Ok(installed)
}

/// Makes a version active.
pub async fn activate(ctx: &Context, caller: &Caller, id: &str, version: &str) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let version = parse_version(version)?;
    let runtime = ctx.plugins.runtime();
    runtime.activate(id, &version).map_err(service_error)?;
    record_activation(ctx, caller, id, "plugin.activated", &version).await
}

/// Persists the runtime's new activation of `id` with its audit row, and returns the summary.
async fn record_activation(
    ctx: &Context,
    caller: &Caller,
    id: &str,
    action: &str,
    version: &semver::Version,
) -> Result<PluginSummary> {
    let runtime = ctx.plugins.runtime();
    let at = ctx.now_millis();
    let mut tx = ctx.store.begin().await?;
    persist_activation(&mut tx, runtime, id, at).await?;
    let details = serde_json::json!({ "version": version.to_string() });
    audit::record(&mut tx, &Audit::of(caller), Some(&caller.workspace_id), action, "plugin", Some(id), details, at)
        .await?;
    tx.commit().await?;
    runtime.show(id).ok_or(Error::NotFound(Entity::Plugin))
}

/// Re-activates the previously active version.
pub async fn rollback(ctx: &Context, caller: &Caller, id: &str) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let runtime = ctx.plugins.runtime();
    let version = runtime.rollback(id).map_err(service_error)?;
    record_activation(ctx, caller, id, "plugin.rolled_back", &version).await
}

/// Removes one version or (without `version`) the whole plugin.
pub async fn remove(ctx: &Context, caller: &Caller, id: &str, version: Option<&str>) -> Result<()> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let version = version.map(parse_version).transpose()?;
    let runtime = ctx.plugins.runtime();
    runtime.remove(id, version.as_ref()).map_err(service_error)?;
    let at = ctx.now_millis();
    let version_text = version.as_ref().map(ToString::to_string);
    let mut tx = ctx.store.begin().await?;
    tx.delete_plugin(id, version_text.as_deref()).await?;
    if version.is_some() && runtime.show(id).is_some() {
        persist_activation(&mut tx, runtime, id, at).await?;
    }
    let details = serde_json::json!({ "version": version_text });
    audit::record(
        &mut tx,
        &Audit::of(caller),
        Some(&caller.workspace_id),
        "plugin.removed",
        "plugin",
        Some(id),
        details,
        at,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Replaces the outbound hosts the operator grants a plugin.
pub async fn grant_hosts(ctx: &Context, caller: &Caller, id: &str, hosts: Vec<String>) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    if hosts.iter().any(|h| h.trim().is_empty() || h.contains('/') && !h.contains("://")) {
        return Err(Error::invalid_field("hosts", "entries are host, host:port, *.domain or an http(s) URL"));
    }
    let runtime = ctx.plugins.runtime();
    runtime.grant_hosts(id, hosts.clone()).map_err(service_error)?;
    let at = ctx.now_millis();
    let mut tx = ctx.store.begin().await?;
    tx.set_plugin_grants(id, &hosts, at).await?;
    audit::record(
        &mut tx,
        &Audit::of(caller),
        Some(&caller.workspace_id),
        "plugin.hosts_granted",
        "plugin",
        Some(id),
        serde_json::json!({ "hosts": hosts }),
        at,
    )
    .await?;
    tx.commit().await?;
    runtime.show(id).ok_or(Error::NotFound(Entity::Plugin))
}

/// Every installed plugin.
pub fn list(ctx: &Context, caller: &Caller) -> Result<Vec<PluginSummary>> {
    caller.require_instance_admin()?;
    Ok(ctx.plugins.runtime().list())
}

/// One plugin with its versions.
pub fn show(ctx: &Context, caller: &Caller, id: &str) -> Result<PluginSummary> {
    caller.require_instance_admin()?;
    ctx.plugins.runtime().show(id).ok_or(Error::NotFound(Entity::Plugin))
}

/// The caller's workspace bindings.
pub async fn list_bindings(ctx: &Context, caller: &Caller) -> Result<Vec<StoredBinding>> {
    caller.require(Scope::PluginsRead)?;
    let all = ctx.store.list_plugin_bindings().await?;
    Ok(all.into_iter().filter(|b| b.workspace_id == caller.workspace_id).collect())
}

/// Chooses which plugin serves a type in the caller's workspace.
pub async fn bind(
    ctx: &Context,
    caller: &Caller,
    kind: &str,
    service_type: &str,
    plugin_id: &str,
) -> Result<StoredBinding> {
    caller.require(Scope::PluginsWrite)?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let kind_parsed = PluginKind::parse(kind)
        .ok_or_else(|| Error::invalid_field("kind", "must be ca-connector, integration or attestation-verifier"))?;
    if service_type.trim().is_empty() {
        return Err(Error::invalid_field("type", "must not be empty"));
    }
    let runtime = ctx.plugins.runtime();
    runtime.bind(&caller.workspace_id, kind_parsed, service_type, plugin_id).map_err(service_error)?;
    let binding = StoredBinding {
        workspace_id: caller.workspace_id.clone(),
        kind: kind.to_owned(),
        service_type: service_type.to_owned(),
        plugin_id: plugin_id.to_owned(),
    };
    let at = ctx.now_millis();
    let mut tx = ctx.store.begin().await?;
    tx.upsert_plugin_binding(&binding, at).await?;
    let details = serde_json::json!({ "kind": kind, "type": service_type, "pluginId": plugin_id });
    audit::record(
        &mut tx,
        &Audit::of(caller),
        Some(&caller.workspace_id),
        "plugin.bound",
        "plugin",
        Some(plugin_id),
        details,
        at,
    )
    .await?;
    tx.commit().await?;
    Ok(binding)
}

/// Removes a binding of the caller's workspace.
pub async fn unbind(ctx: &Context, caller: &Caller, kind: &str, service_type: &str) -> Result<()> {
    caller.require(Scope::PluginsWrite)?;
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let kind_parsed = PluginKind::parse(kind)
        .ok_or_else(|| Error::invalid_field("kind", "must be ca-connector, integration or attestation-verifier"))?;
    let at = ctx.now_millis();
    let mut tx = ctx.store.begin().await?;
    if !tx.delete_plugin_binding(&caller.workspace_id, kind, service_type).await? {
        return Err(Error::NotFound(Entity::Plugin));
    }
    let details = serde_json::json!({ "kind": kind, "type": service_type });
    audit::record(
        &mut tx,
        &Audit::of(caller),
        Some(&caller.workspace_id),
        "plugin.unbound",
        "plugin",
        None,
        details,
        at,
    )
    .await?;
    tx.commit().await?;
    ctx.plugins.runtime().unbind(&caller.workspace_id, kind_parsed, service_type);
    Ok(())
}

/// Runs the connection test of whatever plugin the caller's workspace binds to `service_type`,
/// with `config` as the record's configuration (every http(s) URL in it counts as the record's
/// host, as it would for a stored record). Plugin failures become a failed report, so an
/// operator sees why (the `plugin` check carries the error code).
pub async fn test_binding(
    ctx: &Context,
    caller: &Caller,
    kind: &str,
    service_type: &str,
    config: serde_json::Value,
) -> Result<TestReport> {
    caller.require(Scope::PluginsWrite)?;
    let kind = PluginKind::parse(kind)
        .ok_or_else(|| Error::invalid_field("kind", "must be ca-connector, integration or attestation-verifier"))?;
    let mut target = CallTarget::new(&caller.workspace_id, PluginRef::Serving(service_type.to_owned()), config);
    target.context.request_id = caller.request_id.clone();
    let urls = urls_in(&target.config);
    let target = target.with_record_hosts(urls);
    let runtime = ctx.plugins.runtime();
    let outcome = async {
        runtime.validate_config(&target, kind).await?;
        match kind {
            PluginKind::Integration => runtime.integration_test(&target).await,
            PluginKind::CaConnector => runtime.ca_test_connection(&target).await,
            PluginKind::AttestationVerifier => Ok(TestReport {
                success: true,
                message: "configuration is valid".into(),
                checks: vec![Check { name: "config".into(), status: CheckStatus::Pass, message: "valid".into() }],
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
        ) => Err(service_error(err)),
        Err(err) => Ok(TestReport {
            success: false,
            message: err.to_string(),
            checks: vec![Check { name: "plugin".into(), status: CheckStatus::Fail, message: err.code().into() }],
            details: serde_json::json!({ "code": err.code() }),
        }),
    }
}

fn urls_in(value: &serde_json::Value) -> Vec<String> {
    match value {
        serde_json::Value::String(s) if s.starts_with("https://") || s.starts_with("http://") => vec![s.clone()],
        serde_json::Value::Array(items) => items.iter().flat_map(urls_in).collect(),
        serde_json::Value::Object(map) => map.values().flat_map(urls_in).collect(),
        _ => Vec::new(),
    }
}

/// Brings this replica's runtime in line with the database: loads versions it does not have
/// (verifying their digest), drops removed ones, applies activation, grants and bindings.
pub async fn sync(ctx: &Context) -> Result<()> {
    let _lifecycle = ctx.plugins.lifecycle.lock().await;
    let runtime = ctx.plugins.runtime();
    let stored_versions = ctx.store.list_plugin_versions().await?;
    for stored in &stored_versions {
        let Ok(version) = semver::Version::parse(&stored.version) else { continue };
        let known =
            runtime.show(&stored.plugin_id).is_some_and(|s| s.versions.iter().any(|v| v.info.version == version));
        if known {
            continue;
        }
        let Some(bytes) = ctx.store.plugin_component(&stored.sha256).await? else {
            tracing::error!(plugin = %stored.plugin_id, version = %stored.version, "stored plugin version has no component bytes");
            continue;
        };
        match runtime.install(&bytes, Activation::Never).await {
            Ok(installed) if installed.sha256 == stored.sha256 && installed.info.id == stored.plugin_id => {}
            Ok(installed) => {
                tracing::error!(plugin = %stored.plugin_id, "stored component does not match its digest or id; not serving it");
                let _ = runtime.remove(&installed.info.id, Some(&installed.info.version));
            }
            Err(PluginError::Install(InstallError::DuplicateVersion { .. })) => {}
            Err(err) => {
                tracing::error!(plugin = %stored.plugin_id, version = %stored.version, code = err.code(), error = %err, "cannot load stored plugin")
            }
        }
    }
    let stored_plugins = ctx.store.list_plugins().await?;
    for summary in runtime.list() {
        match stored_plugins.iter().find(|p| p.plugin_id == summary.id) {
            None => {
                let _ = runtime.remove(&summary.id, None);
            }
            Some(_) => {
                for v in &summary.versions {
                    let listed = stored_versions
                        .iter()
                        .any(|s| s.plugin_id == summary.id && s.version == v.info.version.to_string());
                    if !listed && summary.versions.len() > 1 {
                        let _ = runtime.restore_activation(&summary.id, None, &[]);
                        let _ = runtime.remove(&summary.id, Some(&v.info.version));
                    }
                }
            }
        }
    }
    for plugin in &stored_plugins {
        let active = plugin.active_version.as_deref().and_then(|v| semver::Version::parse(v).ok());
        let history: Vec<semver::Version> =
            plugin.previous_versions.iter().filter_map(|v| semver::Version::parse(v).ok()).collect();
        let _ = runtime.restore_activation(&plugin.plugin_id, active.as_ref(), &history);
        let _ = runtime.grant_hosts(&plugin.plugin_id, plugin.granted_hosts.clone());
    }
    let bindings = ctx.store.list_plugin_bindings().await?;
    runtime.replace_bindings(
        bindings
            .into_iter()
            .filter_map(|b| PluginKind::parse(&b.kind).map(|kind| (b.workspace_id, kind, b.service_type, b.plugin_id))),
    );
    Ok(())
}

/// `target/` when the binary runs from `target/<profile>/` next to built plugins.
fn build_tree_target_dir() -> Option<PathBuf> {
    let target = std::env::current_exe().ok()?.parent()?.parent()?.to_path_buf();
    target.join("plugins").is_dir().then_some(target)
}

/// Where the first-party plugin components are: `TRELLIS_FIRST_PARTY_PLUGIN_DIR`, else
/// `target/plugins` next to the binary's `target/<profile>/`, else `./target/plugins`.
pub fn first_party_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("TRELLIS_FIRST_PARTY_PLUGIN_DIR") {
        return Some(PathBuf::from(dir));
    }
    let beside_binary = build_tree_target_dir().map(|t| t.join("plugins"));
    [beside_binary, Some(PathBuf::from(crate::plugins::BUILT_PLUGINS_DIR))]
        .into_iter()
        .flatten()
        .find(|dir| dir.is_dir())
}

/// Start-up: load what the database holds; on the very first start, install the first-party
/// plugins. Missing first-party components are logged (run `make plugins`), not fatal.
pub async fn load(ctx: &Context) -> Result<()> {
    sync(ctx).await?;
    if ctx.store.any_plugin_installed().await? {
        return Ok(());
    }
    let Some(dir) = first_party_dir() else {
        tracing::warn!("first start: no first-party plugin directory found; run `make plugins`");
        return Ok(());
    };
    for name in FIRST_PARTY_PLUGINS {
        let path = dir.join(format!("{name}.wasm"));
        match tokio::fs::read(&path).await {
            Ok(bytes) => {
                match install_as(ctx, &Audit::system("first-start"), None, &bytes, Activation::IfNewer).await {
                    Ok(v) => {
                        tracing::info!(plugin = %v.info.id, version = %v.info.version, "installed first-party plugin")
                    }
                    Err(err) => {
                        tracing::error!(file = %path.display(), error = %err, "cannot install first-party plugin")
                    }
                }
            }
            Err(err) => {
                tracing::warn!(file = %path.display(), error = %err, "first-party plugin missing; run `make plugins`")
            }
        }
    }
    Ok(())
}

/// Follows the database every `interval` (installs made by other replicas or the CLI).
pub fn spawn_sync(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            if let Err(err) = sync(&ctx).await {
                tracing::warn!(error = %err, "plugin sync failed");
            }
        }
    })
}

/// Watches `TRELLIS_PLUGIN_DIR`: a `*.wasm` dropped or replaced there is installed (and
/// stored) within `interval`; refusals are logged once per file version.
pub fn spawn_directory_watcher(ctx: SharedContext, dir: PathBuf, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut seen = std::collections::HashMap::<PathBuf, (SystemTime, u64)>::new();
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            for path in changed_wasm_files(&dir, &mut seen) {
                let Ok(bytes) = tokio::fs::read(&path).await else { continue };
                match install_as(&ctx, &Audit::system("plugin-dir"), None, &bytes, Activation::IfNewer).await {
                    Ok(v) => {
                        tracing::info!(file = %path.display(), plugin = %v.info.id, version = %v.info.version, "installed plugin from TRELLIS_PLUGIN_DIR")
                    }
                    Err(Error::Conflict(_)) => {}
                    Err(err) => {
                        tracing::warn!(file = %path.display(), error = %err, "plugin in TRELLIS_PLUGIN_DIR refused")
                    }
                }
            }
        }
    })
}

fn changed_wasm_files(dir: &Path, seen: &mut std::collections::HashMap<PathBuf, (SystemTime, u64)>) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut changed = Vec::new();
    for entry in entries.filter_map(std::result::Result::ok) {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "wasm") {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let stamp = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
        if seen.insert(path.clone(), stamp) != Some(stamp) {
            changed.push(path);
        }
    }
    changed.sort();
    changed
}
