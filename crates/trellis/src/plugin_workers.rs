//! The plugin runtime's place in the process: starting it with the configuration, loading
//! what the database holds (and the first-party plugins on the very first start), following
//! the database, and watching the operator's plugin directory. The use cases themselves
//! (install, activate, sync, …) are `trellis_core::plugins::service`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use trellis_core::audit::Audit;
use trellis_core::clock::SharedClock;
use trellis_core::crypto::MasterKey;
use trellis_core::plugins::challenges::ChallengeAnswers;
use trellis_core::plugins::service::{install_as, sync, PluginService};
use trellis_core::plugins::{Activation, Keystore, PkiCore, PluginError, BUILT_PLUGINS_DIR, FIRST_PARTY_PLUGINS};
use trellis_core::{Context, Error, Result, SharedContext};
use trellis_plugin_host::{ArtefactKey, PluginRuntime, RuntimeConfig};
use trellis_store::{DbPluginKeys, DbPluginState, Store};

use crate::config::Config;

/// Starts this process's plugin runtime; plugin state lives (sealed) in `store`.
pub fn start_runtime(
    config: &Config,
    store: &Store,
    clock: SharedClock,
    master_key: MasterKey,
    http01_answers: Option<Arc<dyn ChallengeAnswers>>,
    pki: Arc<dyn PkiCore>,
) -> std::result::Result<PluginService, PluginError> {
    let mut runtime_config = RuntimeConfig::with_data_dir(&config.data_dir);
    // Compiled artefacts are authenticated with a key derived from the master key: replicas
    // (which share the master key) share them; a file anyone else wrote is recompiled.
    runtime_config.cache_key = Some(ArtefactKey::new(master_key.derive_key("trellis plugin artefact cache v1")));
    // Running from a cargo build tree (development, tests): share one compiled-code cache
    // across every server started from it, so only the first start compiles. Each of those
    // servers has its own master key, so the build tree's cache has its own key file instead.
    if let Some(target_dir) = build_tree_target_dir().filter(|_| config.plugin_cache_dir.is_none()) {
        let dir = target_dir.join("plugin-cache");
        match ArtefactKey::from_key_file(&dir, &trellis_core::clock::OsEntropy) {
            Ok(key) => {
                runtime_config.cache_dir = Some(dir);
                runtime_config.cache_key = Some(key);
            }
            Err(err) => {
                tracing::warn!(dir = %dir.display(), error = %err, "cannot use the build tree's plugin cache; using the data directory's")
            }
        }
    }
    if let Some(dir) = &config.plugin_cache_dir {
        runtime_config.cache_dir = Some(dir.clone());
    }
    runtime_config.egress.allow_private_networks = config.plugin_allow_private_networks;
    runtime_config.egress.allow_record_private_networks = config.plugin_record_private_networks;
    runtime_config.egress.ca_bundle = config.plugin_ca_bundle.clone();
    if let Some(calls) = config.plugin_max_concurrent_calls {
        runtime_config.max_concurrent_calls = calls;
    }
    runtime_config.max_calls_per_workspace = config.plugin_max_calls_per_workspace;
    let kinds = [
        &mut runtime_config.limits.ca_connector,
        &mut runtime_config.limits.integration,
        &mut runtime_config.limits.attestation_verifier,
        &mut runtime_config.limits.issuance_policy,
    ];
    for (limits, overrides) in kinds.into_iter().zip(config.plugin_limits) {
        if let Some(mb) = overrides.memory_mb {
            limits.memory_bytes = usize::try_from(mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        }
        if let Some(ms) = overrides.cpu_ms {
            limits.cpu_time = Duration::from_millis(ms);
        }
        if let Some(ms) = overrides.wall_ms {
            limits.wall_time = Duration::from_millis(ms);
        }
    }
    let state = DbPluginState::new(store.clone(), clock.clone(), master_key.clone());
    let keystore = Keystore::new(Arc::new(DbPluginKeys::new(store.clone(), clock.clone())), master_key);
    let mut runtime = PluginRuntime::new(runtime_config, Arc::new(state), keystore)?
        .with_pki_core(pki)
        .with_domain_claims(Arc::new(trellis_store::DbDomainClaims::new(store.clone())));
    if let Some(answers) = http01_answers {
        runtime = runtime.with_http01_answers(answers, clock);
    }
    if config.plugin_signatures != trellis_core::plugins::signatures::SignatureMode::Require {
        tracing::warn!(target: "trellis::security", mode = config.plugin_signatures.as_str(), "plugins are installed without requiring a trusted signature; set TRELLIS_PLUGIN_SIGNATURES=require in production");
    }
    Ok(PluginService::new(Arc::new(runtime)).with_signature_mode(config.plugin_signatures))
}

/// `target/` when the binary runs from `target/<profile>/` next to built plugins.
fn build_tree_target_dir() -> Option<PathBuf> {
    let target = std::env::current_exe().ok()?.parent()?.parent()?.to_path_buf();
    target.join("plugins").is_dir().then_some(target)
}

/// Where the first-party plugin components are: `TRELLIS_FIRST_PARTY_PLUGIN_DIR`, else
/// `target/plugins` next to the binary's `target/<profile>/`, else `./target/plugins`.
pub fn first_party_dir(configured: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = configured {
        return Some(dir.to_path_buf());
    }
    let beside_binary = build_tree_target_dir().map(|t| t.join("plugins"));
    [beside_binary, Some(PathBuf::from(BUILT_PLUGINS_DIR))].into_iter().flatten().find(|dir| dir.is_dir())
}

/// Start-up: register what the database holds (compiled on first call); on the very first
/// start, install the first-party plugins. They are installed by a child process (`trellis
/// plugin install-first-party`): compiling and describing them churns tens of MiB of heap that
/// the allocator keeps, and the service would carry it idle forever. Missing first-party
/// components are logged (run `make plugins`), not fatal.
pub async fn load(ctx: &Context, config_file: Option<&Path>, first_party: Option<&Path>) -> Result<()> {
    sync(&ctx.plugin_deps()).await?;
    if ctx.store.any_plugin_installed().await? {
        return Ok(());
    }
    match install_first_party_in_child(config_file).await {
        Ok(installed) => tracing::info!(installed, "first start: installed the first-party plugins"),
        Err(reason) => {
            tracing::warn!(%reason, "first start: cannot install the first-party plugins in a child process; installing them here");
            install_first_party(ctx, first_party).await;
            trellis_core::plugins::service::release_compiled(&ctx.plugin_deps());
        }
    }
    sync(&ctx.plugin_deps()).await
}

/// Compiles what the database holds into the on-disk cache, in the background, so that no
/// request pays a compile (a large Python or JavaScript guest takes seconds). Runs after the
/// start's load and after every sync; with everything cached it only checks that the files exist.
pub async fn precompile(ctx: &Context) {
    let compiled = ctx.plugins.host().precompile().await;
    if compiled > 0 {
        tracing::info!(compiled, "plugin cache warmed");
    }
}

/// Runs `<this binary> plugin install-first-party` with this process's settings; its count.
async fn install_first_party_in_child(config_file: Option<&Path>) -> std::result::Result<u64, String> {
    let exe = std::env::current_exe().map_err(|err| format!("cannot find this binary: {err}"))?;
    let mut command = tokio::process::Command::new(&exe);
    command.args(["plugin", "install-first-party"]).stdin(std::process::Stdio::null()).kill_on_drop(true);
    if let Some(file) = config_file {
        command.env("TRELLIS_CONFIG", file);
    }
    let output = command.output().await.map_err(|err| format!("cannot run {}: {err}", exe.display()))?;
    // The child logs as the service does (stderr); pass its lines on.
    for line in String::from_utf8_lossy(&output.stderr).lines() {
        eprintln!("{line}");
    }
    if !output.status.success() {
        return Err(format!("{} plugin install-first-party exited with {}", exe.display(), output.status));
    }
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|err| format!("plugin install-first-party printed no JSON: {err}"))?;
    summary["installed"].as_u64().ok_or_else(|| format!("plugin install-first-party printed {summary}"))
}

/// Installs every first-party plugin found in the first-party directory; returns how many.
pub async fn install_first_party(ctx: &Context, first_party: Option<&Path>) -> u64 {
    let Some(dir) = first_party_dir(first_party) else {
        tracing::warn!("first start: no first-party plugin directory found; run `make plugins`");
        return 0;
    };
    let mut installed = 0;
    for name in FIRST_PARTY_PLUGINS {
        let path = dir.join(format!("{name}.wasm"));
        match tokio::fs::read(&path).await {
            Ok(bytes) => {
                let signature = detached_signature_beside(&path).await;
                let outcome = install_as(
                    &ctx.plugin_deps(),
                    &Audit::system("first-start"),
                    None,
                    &bytes,
                    signature.as_deref(),
                    Activation::IfNewer,
                )
                .await;
                match outcome {
                    Ok(v) => {
                        installed += 1;
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
    installed
}

/// The detached signature `FILE.sig` beside a component `FILE`, if there is one.
pub async fn detached_signature_beside(component: &Path) -> Option<Vec<u8>> {
    let mut name = component.as_os_str().to_owned();
    name.push(".sig");
    tokio::fs::read(PathBuf::from(name)).await.ok()
}

/// Follows the database every `interval` (installs made by other replicas or the CLI).
pub fn spawn_sync(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.tick().await;
        // What the start loaded, compiled into the cache before the first sync.
        precompile(&ctx).await;
        loop {
            ticker.tick().await;
            if let Err(err) = sync(&ctx.plugin_deps()).await {
                tracing::warn!(error = %err, "plugin sync failed");
            }
            precompile(&ctx).await;
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
                let signature = detached_signature_beside(&path).await;
                let installed = install_as(
                    &ctx.plugin_deps(),
                    &Audit::system("plugin-dir"),
                    None,
                    &bytes,
                    signature.as_deref(),
                    Activation::IfNewer,
                )
                .await;
                match installed {
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
