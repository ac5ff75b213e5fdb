//! The plugin runtime: one engine, a registry of installed versions, and the call path
//! (admission → fresh store with limits → instantiate from `InstancePre` → call → classify).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi_http::WasiHttpCtx;

use crate::bindings::{
    ca, ca_world, integration, integration_world, logging, state, verifier, verifier_world, wit_types as w,
    CONNECTOR_EXPORT, NOTIFIER_EXPORT, VERIFIER_EXPORT,
};
use crate::call::{CallIdentity, CallState, GuestOutput, MemoryLimitHit, MemoryLimiter};
use crate::config::{CallLimits, RuntimeConfig};
use crate::convert::plugin_kind_from_wit;
use crate::egress::{EgressCall, EgressGrant, EgressHooks, EgressIncident, EgressPolicy, EgressRecord};
use crate::{
    Activation, CallTarget, CertificatePage, Delivery, Event, InstallError, InstalledVersion, IssueRequest,
    IssuedCertificate, PluginError, PluginHost, PluginInfo, PluginKind, PluginRef, PluginStateStore, PluginSummary,
    ReportedError, RevokeRequest, StateScope, TestReport, Verdict, VerifyRequest,
};

/// The WIT package version this host implements. Components built against any `0.1.x` load.
pub const WIT_PACKAGE_VERSION: &str = "0.1.0";

/// The plugin runtime. Cheap to clone; all clones share one engine and registry.
#[derive(Clone)]
pub struct PluginRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PluginRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRuntime").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

struct Inner {
    engine: Engine,
    linker: Linker<CallState>,
    config: RuntimeConfig,
    egress: Arc<EgressPolicy>,
    state_store: Arc<dyn PluginStateStore>,
    admission: Arc<Semaphore>,
    /// Per-workspace shares of the admission slots (see `RuntimeConfig::max_calls_per_workspace`).
    workspace_slots: std::sync::Mutex<HashMap<String, Arc<Semaphore>>>,
    registry: RwLock<Registry>,
    cache: Option<wasmtime::Cache>,
}

#[derive(Default)]
struct Registry {
    plugins: BTreeMap<String, PluginEntry>,
    /// (workspace, kind, served type) → plugin id.
    bindings: HashMap<(String, PluginKind, String), String>,
    /// Operator-granted outbound hosts per plugin id.
    grants: HashMap<String, Vec<String>>,
    /// sha256 of every installed component, for fast duplicate refusal.
    digests: HashMap<String, (String, semver::Version)>,
}

struct PluginEntry {
    versions: BTreeMap<semver::Version, Arc<LoadedPlugin>>,
    active: Option<semver::Version>,
    /// Previously active versions, most recent last, for rollback.
    history: Vec<semver::Version>,
}

pub(crate) struct LoadedPlugin {
    info: PluginInfo,
    sha256: String,
    size: usize,
    wit_version: semver::Version,
    pre: PluginPre,
    label: Arc<str>,
}

enum PluginPre {
    Ca(ca_world::CaConnectorPre<CallState>),
    Integration(integration_world::IntegrationPre<CallState>),
    Verifier(verifier_world::AttestationVerifierPre<CallState>),
}

impl PluginPre {
    fn kind(&self) -> PluginKind {
        match self {
            PluginPre::Ca(_) => PluginKind::CaConnector,
            PluginPre::Integration(_) => PluginKind::Integration,
            PluginPre::Verifier(_) => PluginKind::AttestationVerifier,
        }
    }
}

enum Op {
    Describe,
    ValidateConfig(String),
    IntegrationTest(w::CallContext, String),
    Notify(w::CallContext, String, integration::Event),
    CaTest(w::CallContext, String),
    Issue(w::CallContext, String, ca::IssueRequest),
    Revoke(w::CallContext, String, ca::RevokeRequest),
    List(w::CallContext, String, ca::PageRequest),
    Verify(String, verifier::VerifyRequest),
}

enum Output {
    Info(w::PluginInfo),
    Unit,
    Report(w::TestReport),
    Delivery(integration::Delivery),
    Issued(ca::IssuedCertificate),
    Page(ca::CertificatePage),
    Verdict(verifier::Verdict),
}

/// Marker for "the operation does not exist in this world"; guarded before every call.
#[derive(Debug, thiserror::Error)]
#[error("operation not exported by this plugin kind")]
struct OpMismatch;

impl PluginRuntime {
    /// Starts the runtime: builds the engine (pooling allocator when the address space allows),
    /// the epoch ticker, the linker and the egress policy.
    pub fn new(config: RuntimeConfig, state_store: Arc<dyn PluginStateStore>) -> Result<PluginRuntime, PluginError> {
        let (engine, cache) = build_engine(&config)?;
        let linker = build_linker(&engine).map_err(|err| PluginError::Internal(format!("linker: {err:#}")))?;
        let egress = Arc::new(EgressPolicy::new(config.egress.clone()).map_err(PluginError::Internal)?);
        spawn_epoch_ticker(&engine, config.epoch_tick);
        if config.egress.allow_private_networks {
            tracing::warn!(target: "trellis::security", "plugins may reach private networks (TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS)");
        }
        Ok(PluginRuntime {
            inner: Arc::new(Inner {
                engine,
                linker,
                admission: Arc::new(Semaphore::new(config.max_concurrent_calls.max(1))),
                workspace_slots: std::sync::Mutex::new(HashMap::new()),
                config,
                egress,
                state_store,
                registry: RwLock::new(Registry::default()),
                cache,
            }),
        })
    }

    /// The runtime's configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Outbound requests denied since start, all plugins.
    pub fn egress_denied_total(&self) -> u64 {
        self.inner.egress.denied_total()
    }

    /// Compiled-code cache hits and misses since start (`None` without a cache).
    pub fn cache_stats(&self) -> Option<(usize, usize)> {
        self.inner.cache.as_ref().map(|c| (c.cache_hits(), c.cache_misses()))
    }

    /// Calls currently running (not queued).
    pub fn calls_in_flight(&self) -> usize {
        self.inner.config.max_concurrent_calls.max(1) - self.inner.admission.available_permits()
    }

    // ---- lifecycle ---------------------------------------------------------------------

    /// Installs every `*.wasm` file in `dir` (sorted by name). Already-installed bytes and
    /// versions count as success. Returns one result per file.
    pub async fn install_directory(&self, dir: &Path) -> Vec<(PathBuf, Result<Option<InstalledVersion>, PluginError>)> {
        let mut files = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
                .collect::<Vec<_>>(),
            Err(err) => {
                return vec![(
                    dir.to_owned(),
                    Err(PluginError::Internal(format!("cannot read {}: {err}", dir.display()))),
                )];
            }
        };
        files.sort();
        let mut results = Vec::with_capacity(files.len());
        for path in files {
            let result = match tokio::fs::read(&path).await {
                Ok(bytes) => match self.install(&bytes, Activation::IfNewer).await {
                    Ok(installed) => Ok(Some(installed)),
                    Err(PluginError::Install(InstallError::DuplicateVersion { .. })) => Ok(None),
                    Err(err) => Err(err),
                },
                Err(err) => Err(PluginError::Internal(format!("cannot read {}: {err}", path.display()))),
            };
            results.push((path, result));
        }
        results
    }

    /// Watches `dir` (`TRELLIS_PLUGIN_DIR`): a `*.wasm` file dropped or replaced there is
    /// installed within `interval`. Refusals are logged once per file version.
    pub fn spawn_directory_watcher(&self, dir: PathBuf, interval: Duration) -> tokio::task::JoinHandle<()> {
        let runtime = self.clone();
        tokio::spawn(async move {
            let mut seen: HashMap<PathBuf, (SystemTime, u64)> = HashMap::new();
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.filter_map(Result::ok) {
                    let path = entry.path();
                    if path.extension().is_none_or(|e| e != "wasm") {
                        continue;
                    }
                    let Ok(meta) = entry.metadata() else { continue };
                    let stamp = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
                    if seen.get(&path) == Some(&stamp) {
                        continue;
                    }
                    seen.insert(path.clone(), stamp);
                    let Ok(bytes) = tokio::fs::read(&path).await else {
                        continue;
                    };
                    match runtime.install(&bytes, Activation::IfNewer).await {
                        Ok(v) => {
                            tracing::info!(file = %path.display(), plugin = %v.info.id, version = %v.info.version, "installed plugin from watched directory")
                        }
                        Err(PluginError::Install(InstallError::DuplicateVersion { .. })) => {}
                        Err(err) => {
                            tracing::warn!(file = %path.display(), code = err.code(), error = %err, "plugin in watched directory refused")
                        }
                    }
                }
            }
        })
    }

    // ---- calls -------------------------------------------------------------------------

    // ---- internals ---------------------------------------------------------------------

    /// The semaphore of a workspace's share of call slots, created on its first call.
    fn workspace_share(&self, workspace_id: &str) -> Arc<Semaphore> {
        let mut slots = self.inner.workspace_slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .entry(workspace_id.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.inner.config.workspace_share())))
            .clone()
    }

    fn read_registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        // Registry updates are single assignments; a panic mid-update cannot leave it torn.
        self.inner.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_registry(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.inner.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Picks the active version serving `target`. The `Arc` keeps that version alive for the
    /// whole call even if it is deactivated or removed meanwhile.
    fn resolve(&self, target: &CallTarget, kind: PluginKind) -> Result<Arc<LoadedPlugin>, PluginError> {
        let registry = self.read_registry();
        let id = match &target.plugin {
            PluginRef::Id(id) => id.clone(),
            PluginRef::Serving(service_type) => {
                let key = (target.context.workspace_id.clone(), kind, service_type.clone());
                match registry.bindings.get(&key) {
                    Some(id) => id.clone(),
                    None => {
                        let candidates: Vec<&String> = registry
                            .plugins
                            .iter()
                            .filter(|(_, e)| {
                                e.active.as_ref().and_then(|v| e.versions.get(v)).is_some_and(|p| {
                                    p.info.kind == kind && p.info.serves.iter().any(|s| s == service_type)
                                })
                            })
                            .map(|(id, _)| id)
                            .collect();
                        match candidates.as_slice() {
                            [only] => (*only).clone(),
                            [] => return Err(PluginError::NotBound { kind, service_type: service_type.clone() }),
                            many => {
                                return Err(PluginError::AmbiguousBinding {
                                    kind,
                                    service_type: service_type.clone(),
                                    candidates: many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                                })
                            }
                        }
                    }
                }
            }
        };
        let entry = registry.plugins.get(&id).ok_or_else(|| PluginError::NotFound { id: id.clone() })?;
        let plugin = entry
            .active
            .as_ref()
            .and_then(|v| entry.versions.get(v))
            .ok_or_else(|| PluginError::NotFound { id: format!("{id} (no active version)") })?;
        if plugin.info.kind != kind {
            return Err(PluginError::WrongKind { plugin: id, expected: kind, actual: plugin.info.kind });
        }
        Ok(plugin.clone())
    }

    async fn call(&self, plugin: &LoadedPlugin, target: &CallTarget, op: Op) -> Result<Output, PluginError> {
        match self.invoke(plugin, target, op).await? {
            Ok(output) => Ok(output),
            Err(never) => match never {},
        }
    }

    /// Runs one operation in a fresh store and turns every failure into a distinct `PluginError`.
    async fn invoke(
        &self,
        plugin: &LoadedPlugin,
        target: &CallTarget,
        op: Op,
    ) -> Result<Result<Output, std::convert::Infallible>, PluginError> {
        let waited = Instant::now();
        // The workspace's share first, then a global slot, both within one admission timeout:
        // a tenant at its share waits on its own queue and leaves the other slots to others.
        let deadline = tokio::time::Instant::now() + self.inner.config.admission_timeout;
        let overloaded = || PluginError::Overloaded { waited_ms: waited.elapsed().as_millis() as u64 };
        let share = self.workspace_share(&target.context.workspace_id);
        let share_permit = tokio::time::timeout_at(deadline, share.acquire_owned())
            .await
            .map_err(|_| overloaded())?
            .map_err(|_| PluginError::Internal("workspace admission semaphore closed".into()))?;
        let permit = tokio::time::timeout_at(deadline, self.inner.admission.clone().acquire_owned())
            .await
            .map_err(|_| overloaded())?
            .map_err(|_| PluginError::Internal("admission semaphore closed".into()))?;
        let permit = (permit, share_permit);

        let kind = plugin.pre.kind();
        let limits = self.inner.config.limits.for_kind(kind);
        let granted = self.read_registry().grants.get(&plugin.info.id).cloned().unwrap_or_default();
        let grant = EgressGrant::from_entries(
            target.record_hosts.iter().map(String::as_str).chain(granted.iter().map(String::as_str)),
        );
        let egress_call = Arc::new(EgressCall {
            plugin: plugin.label.to_string(),
            workspace: target.context.workspace_id.clone(),
            grant,
            record: EgressRecord::default(),
        });
        let mut store = self.new_store(plugin, target, &limits, egress_call.clone());

        let started = Instant::now();
        let outcome = tokio::time::timeout(limits.wall_time, run(&plugin.pre, &mut store, op)).await;
        let elapsed = started.elapsed();
        drop(permit);

        let state = store.data();
        let incidents = egress_call.record.take();
        let label = plugin.label.to_string();
        let noted = incidents.clone();
        let mut result = classify(&label, &limits, outcome, state, incidents);
        // A connection test the plugin "passed" around a refused request must still tell the
        // operator what the host refused and why.
        if let Ok(Output::Report(report)) = &mut result {
            for incident in noted {
                report.success = false;
                report.checks.push(w::Check {
                    name: "host-policy".into(),
                    status: w::CheckStatus::Fail,
                    message: match incident {
                        EgressIncident::Denied { destination, reason } => {
                            format!("outbound request to {destination} refused: {}", reason.code())
                        }
                        EgressIncident::ResponseTooLarge { limit } => {
                            format!("response over the {limit}-byte limit cut off")
                        }
                    },
                });
            }
        }
        match &result {
            Ok(_) => {
                tracing::debug!(plugin = %label, elapsed_us = elapsed.as_micros() as u64, "plugin call ok")
            }
            Err(err) if err.is_sandbox_violation() => {
                metrics::counter!("trellis_plugin_call_failures_total", "plugin" => label.clone(), "code" => err.code()).increment(1);
                tracing::warn!(plugin = %label, code = err.code(), error = %err, "plugin call failed")
            }
            Err(err) => {
                tracing::info!(plugin = %label, code = err.code(), error = %err, "plugin reported an error")
            }
        }
        result.map(Ok)
    }

    fn new_store(
        &self,
        plugin: &LoadedPlugin,
        target: &CallTarget,
        limits: &CallLimits,
        egress_call: Arc<EgressCall>,
    ) -> Store<CallState> {
        let identity =
            CallIdentity { plugin: plugin.label.clone(), workspace: Arc::from(target.context.workspace_id.as_str()) };
        let log_budget = Arc::new(AtomicU32::new(limits.max_log_lines));
        // Nothing is granted: no preopens, no environment, no arguments, no sockets.
        // stdout/stderr go to tracing; clocks and random are the harmless WASI defaults.
        let wasi = WasiCtx::builder()
            .stdout(GuestOutput { stream: "stdout", identity: identity.clone(), budget: log_budget.clone() })
            .stderr(GuestOutput { stream: "stderr", identity: identity.clone(), budget: log_budget.clone() })
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .max_random_size(64 << 10)
            .build();
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(64 << 10);
        let mut table = ResourceTable::new();
        table.set_max_capacity(10_000);
        let tick = self.inner.config.epoch_tick.as_nanos().max(1);
        let tick_budget = (limits.cpu_time.as_nanos().div_ceil(tick)).max(1) as u64;
        let state = CallState {
            wasi,
            http,
            table,
            hooks: EgressHooks { policy: self.inner.egress.clone(), call: egress_call },
            limiter: MemoryLimiter { limit_bytes: limits.memory_bytes, exceeded: false },
            identity,
            log_budget,
            state_store: self.inner.state_store.clone(),
            state_scope: StateScope {
                plugin_id: plugin.info.id.clone(),
                workspace_id: target.context.workspace_id.clone(),
            },
            state_quota: self.inner.config.state_quota_bytes,
            ticks: 0,
            tick_budget,
            cpu_exhausted: false,
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(16 << 20);
        store.set_epoch_deadline(1);
        // Yield at every tick so a spinning guest never monopolizes a tokio worker, and
        // interrupt once its CPU budget (ticks spent running wasm) is used up.
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            state.ticks += 1;
            if state.ticks > state.tick_budget {
                state.cpu_exhausted = true;
                return Ok(UpdateDeadline::Interrupt);
            }
            Ok(UpdateDeadline::Yield(1))
        });
        store
    }

    fn exported_world(&self, component: &Component) -> Result<(PluginKind, semver::Version), InstallError> {
        let ty = component.component_type();
        let mut names = Vec::new();
        let mut found = None;
        for (name, _) in ty.exports(&self.inner.engine) {
            names.push(name.to_owned());
            let (interface, version) = name.split_once('@').unwrap_or((name, ""));
            let kind = match interface {
                CONNECTOR_EXPORT => PluginKind::CaConnector,
                NOTIFIER_EXPORT => PluginKind::Integration,
                VERIFIER_EXPORT => PluginKind::AttestationVerifier,
                _ => continue,
            };
            let version = semver::Version::parse(version).map_err(|_| InstallError::IncompatibleWitVersion {
                found: name.to_owned(),
                supported: format!("{WIT_PACKAGE_VERSION} compatible"),
            })?;
            if let Some((_, _, first)) = &found {
                return Err(InstallError::InvalidMetadata(format!(
                    "component exports both {first} and {name}; a component implements exactly one Trellis world"
                )));
            }
            found = Some((kind, version, name.to_owned()));
        }
        let Some((kind, version, name)) = found else {
            return Err(InstallError::UnknownWorld {
                exports: if names.is_empty() { "none".into() } else { names.join(", ") },
            });
        };
        let supported = semver::Version::parse(WIT_PACKAGE_VERSION).unwrap_or(semver::Version::new(0, 1, 0));
        // Semver compatibility as the component model canonicalizes it: 0.x.* by minor, else by major.
        let compatible = if supported.major == 0 {
            version.major == 0 && version.minor == supported.minor
        } else {
            version.major == supported.major
        };
        if !compatible {
            return Err(InstallError::IncompatibleWitVersion {
                found: name,
                supported: format!("{}.{}.x", supported.major, supported.minor),
            });
        }
        Ok((kind, version))
    }

    fn unsupported_imports(&self, component: &Component) -> Vec<String> {
        component
            .component_type()
            .imports(&self.inner.engine)
            .map(|(name, _)| name.to_owned())
            .filter(|name| {
                let known = [
                    "wasi:cli/",
                    "wasi:io/",
                    "wasi:clocks/",
                    "wasi:random/",
                    "wasi:filesystem/",
                    "wasi:sockets/",
                    "wasi:http/",
                    "trellis:plugin/",
                ];
                !known.iter().any(|prefix| name.starts_with(prefix))
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl PluginHost for PluginRuntime {
    /// Validates, compiles (or loads from the cache) and registers a component.
    ///
    /// Refuses non-components, components importing what the host does not provide,
    /// incompatible WIT versions, bad metadata and duplicate id+version.
    async fn install(&self, wasm: &[u8], activation: Activation) -> Result<InstalledVersion, PluginError> {
        if wasm.len() < 8 || wasm.get(..4) != Some(b"\0asm") {
            return Err(InstallError::NotAComponent { detail: " (no wasm header)".into() }.into());
        }
        // Components carry version 0x0d and layer 1; core modules version 1, layer 0.
        if wasm.get(6..8) != Some(&[0x01, 0x00]) {
            return Err(InstallError::NotAComponent { detail: " (this is a core wasm module)".into() }.into());
        }
        let sha256 = hex::encode(Sha256::digest(wasm));
        if let Some((id, version)) = self.read_registry().digests.get(&sha256).cloned() {
            return Err(InstallError::DuplicateVersion { id, version: version.to_string() }.into());
        }

        let engine = self.inner.engine.clone();
        let bytes = wasm.to_vec();
        // Compilation is CPU-bound (hundreds of ms per MB); keep it off the async workers.
        let component = tokio::task::spawn_blocking(move || Component::new(&engine, &bytes))
            .await
            .map_err(|err| PluginError::Internal(format!("compile task: {err}")))?
            .map_err(|err| InstallError::CompileFailed(format!("{err:#}")))?;

        let unsupported = self.unsupported_imports(&component);
        if !unsupported.is_empty() {
            return Err(InstallError::UnsupportedImports { imports: unsupported.join(", ") }.into());
        }
        let (kind, wit_version) = self.exported_world(&component)?;
        let instance_pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|err| InstallError::UnsupportedImports { imports: format!("{err:#}") })?;
        let incompatible = |err: wasmtime::Error| InstallError::IncompatibleWitVersion {
            found: format!("{wit_version} with mismatching types ({err:#})"),
            supported: format!("{WIT_PACKAGE_VERSION} compatible"),
        };
        let pre = match kind {
            PluginKind::CaConnector => {
                PluginPre::Ca(ca_world::CaConnectorPre::new(instance_pre).map_err(incompatible)?)
            }
            PluginKind::Integration => {
                PluginPre::Integration(integration_world::IntegrationPre::new(instance_pre).map_err(incompatible)?)
            }
            PluginKind::AttestationVerifier => {
                PluginPre::Verifier(verifier_world::AttestationVerifierPre::new(instance_pre).map_err(incompatible)?)
            }
        };

        let mut loaded = LoadedPlugin {
            info: placeholder_info(kind),
            sha256: sha256.clone(),
            size: wasm.len(),
            wit_version,
            pre,
            label: Arc::from(format!("(installing {})", &sha256[..12])),
        };
        let target = CallTarget::new("", PluginRef::Id(String::new()), serde_json::Value::Null);
        let described = match self.invoke(&loaded, &target, Op::Describe).await {
            Ok(Ok(Output::Info(info))) => info,
            Ok(Ok(_)) => return Err(PluginError::Internal("describe returned the wrong type".into())),
            Ok(Err(never)) => match never {},
            Err(err) => return Err(InstallError::DescribeFailed(Box::new(err)).into()),
        };
        let info = validate_info(described, kind)?;
        loaded.label = Arc::from(format!("{}@{}", info.id, info.version));
        loaded.info = info;
        let loaded = Arc::new(loaded);

        let mut registry = self.write_registry();
        let entry = registry.plugins.entry(loaded.info.id.clone()).or_insert_with(|| PluginEntry {
            versions: BTreeMap::new(),
            active: None,
            history: Vec::new(),
        });
        if entry.versions.contains_key(&loaded.info.version) {
            return Err(InstallError::DuplicateVersion {
                id: loaded.info.id.clone(),
                version: loaded.info.version.to_string(),
            }
            .into());
        }
        if let Some(existing) = entry.versions.values().next() {
            if existing.info.kind != loaded.info.kind {
                return Err(InstallError::InvalidMetadata(format!(
                    "plugin {} is installed as a {} plugin; this component is a {}",
                    loaded.info.id, existing.info.kind, loaded.info.kind
                ))
                .into());
            }
        }
        entry.versions.insert(loaded.info.version.clone(), loaded.clone());
        let activate = match activation {
            Activation::Always => true,
            Activation::Never => false,
            Activation::IfNewer => entry.active.as_ref().is_none_or(|active| loaded.info.version > *active),
        };
        if activate {
            if let Some(previous) = entry.active.replace(loaded.info.version.clone()) {
                entry.history.push(previous);
            }
        }
        let active = entry.active.as_ref() == Some(&loaded.info.version);
        registry.digests.insert(sha256, (loaded.info.id.clone(), loaded.info.version.clone()));
        drop(registry);
        tracing::info!(plugin = %loaded.label, sha256 = %loaded.sha256, active, "plugin installed");
        Ok(describe_version(&loaded, active))
    }

    /// Makes `version` the active version of `id`. Calls already running finish on the version
    /// they started with; calls starting afterwards use `version`.
    fn activate(&self, id: &str, version: &semver::Version) -> Result<(), PluginError> {
        let mut registry = self.write_registry();
        let entry = registry.plugins.get_mut(id).ok_or_else(|| PluginError::NotFound { id: id.to_owned() })?;
        if !entry.versions.contains_key(version) {
            return Err(PluginError::NotFound { id: format!("{id}@{version}") });
        }
        if entry.active.as_ref() == Some(version) {
            return Ok(());
        }
        if let Some(previous) = entry.active.replace(version.clone()) {
            entry.history.push(previous);
        }
        tracing::info!(plugin = id, %version, "plugin version activated");
        Ok(())
    }

    /// Re-activates the version that was active before the current one; returns it.
    fn rollback(&self, id: &str) -> Result<semver::Version, PluginError> {
        let mut registry = self.write_registry();
        let entry = registry.plugins.get_mut(id).ok_or_else(|| PluginError::NotFound { id: id.to_owned() })?;
        // Skip history entries whose version has since been removed.
        while let Some(previous) = entry.history.pop() {
            if entry.versions.contains_key(&previous) && entry.active.as_ref() != Some(&previous) {
                entry.active = Some(previous.clone());
                tracing::info!(plugin = id, version = %previous, "plugin rolled back");
                return Ok(previous);
            }
        }
        Err(PluginError::NoPreviousVersion { id: id.to_owned() })
    }

    /// Removes one version (not the active one, unless it is the last) or, with `None`, the whole
    /// plugin with its bindings and grants. Calls in flight keep their loaded version alive.
    fn remove(&self, id: &str, version: Option<&semver::Version>) -> Result<(), PluginError> {
        let mut registry = self.write_registry();
        let entry = registry.plugins.get_mut(id).ok_or_else(|| PluginError::NotFound { id: id.to_owned() })?;
        let removed: Vec<Arc<LoadedPlugin>> = match version {
            Some(version) => {
                if entry.active.as_ref() == Some(version) && entry.versions.len() > 1 {
                    return Err(PluginError::VersionActive { id: id.to_owned(), version: version.to_string() });
                }
                let removed = entry
                    .versions
                    .remove(version)
                    .ok_or_else(|| PluginError::NotFound { id: format!("{id}@{version}") })?;
                if entry.active.as_ref() == Some(version) {
                    entry.active = None;
                }
                entry.history.retain(|v| v != version);
                vec![removed]
            }
            None => entry.versions.values().cloned().collect(),
        };
        let now_empty = version.is_none() || entry.versions.is_empty();
        for plugin in &removed {
            registry.digests.remove(&plugin.sha256);
        }
        if now_empty {
            registry.plugins.remove(id);
            registry.bindings.retain(|_, bound| bound != id);
            registry.grants.remove(id);
        }
        tracing::info!(plugin = id, version = ?version.map(ToString::to_string), "plugin removed");
        Ok(())
    }

    /// All installed plugins.
    fn list(&self) -> Vec<PluginSummary> {
        let registry = self.read_registry();
        registry.plugins.iter().map(|(id, entry)| summarize(id, entry, &registry)).collect()
    }

    /// One installed plugin with its versions.
    fn show(&self, id: &str) -> Option<PluginSummary> {
        let registry = self.read_registry();
        registry.plugins.get(id).map(|entry| summarize(id, entry, &registry))
    }

    /// Chooses which plugin serves `service_type` of `kind` in `workspace_id`.
    fn bind(
        &self,
        workspace_id: &str,
        kind: PluginKind,
        service_type: &str,
        plugin_id: &str,
    ) -> Result<(), PluginError> {
        let mut registry = self.write_registry();
        let entry =
            registry.plugins.get(plugin_id).ok_or_else(|| PluginError::NotFound { id: plugin_id.to_owned() })?;
        let actual = entry.versions.values().next().map(|p| p.info.kind);
        if actual != Some(kind) {
            return Err(PluginError::WrongKind {
                plugin: plugin_id.to_owned(),
                expected: kind,
                actual: actual.unwrap_or(kind),
            });
        }
        registry.bindings.insert((workspace_id.to_owned(), kind, service_type.to_owned()), plugin_id.to_owned());
        Ok(())
    }

    /// Removes a workspace binding, going back to the default choice.
    fn unbind(&self, workspace_id: &str, kind: PluginKind, service_type: &str) {
        self.write_registry().bindings.remove(&(workspace_id.to_owned(), kind, service_type.to_owned()));
    }

    /// Replaces the operator-granted outbound hosts of a plugin (`host`, `host:port`, `*.domain`).
    fn grant_hosts(&self, plugin_id: &str, hosts: Vec<String>) -> Result<(), PluginError> {
        let mut registry = self.write_registry();
        if !registry.plugins.contains_key(plugin_id) {
            return Err(PluginError::NotFound { id: plugin_id.to_owned() });
        }
        registry.grants.insert(plugin_id.to_owned(), hosts);
        Ok(())
    }

    /// Sets the active version and rollback history as persisted elsewhere (loading from the
    /// database, following another replica). Unknown versions are skipped.
    fn restore_activation(
        &self,
        id: &str,
        active: Option<&semver::Version>,
        history: &[semver::Version],
    ) -> Result<(), PluginError> {
        let mut registry = self.write_registry();
        let entry = registry.plugins.get_mut(id).ok_or_else(|| PluginError::NotFound { id: id.to_owned() })?;
        entry.active = active.filter(|v| entry.versions.contains_key(*v)).cloned();
        entry.history = history.iter().filter(|v| entry.versions.contains_key(*v)).cloned().collect();
        Ok(())
    }

    /// Replaces every workspace binding at once (loading from the database).
    fn replace_bindings(&self, bindings: Vec<(String, PluginKind, String, String)>) {
        let mut registry = self.write_registry();
        registry.bindings =
            bindings.into_iter().map(|(ws, kind, service_type, id)| ((ws, kind, service_type), id)).collect();
    }

    /// Checks a configuration object with the plugin serving `target`.
    async fn validate_config(&self, target: &CallTarget, kind: PluginKind) -> Result<(), PluginError> {
        let plugin = self.resolve(target, kind)?;
        let config = target.config.to_string();
        match self.call(&plugin, target, Op::ValidateConfig(config)).await? {
            Output::Unit => Ok(()),
            _ => Err(unexpected()),
        }
    }

    /// `integration.test`.
    async fn integration_test(&self, target: &CallTarget) -> Result<TestReport, PluginError> {
        let plugin = self.resolve(target, PluginKind::Integration)?;
        let op = Op::IntegrationTest((&target.context).into(), target.config.to_string());
        match self.call(&plugin, target, op).await? {
            Output::Report(report) => Ok(report.into()),
            _ => Err(unexpected()),
        }
    }

    /// `integration.notify`.
    async fn notify(&self, target: &CallTarget, event: &Event) -> Result<Delivery, PluginError> {
        let plugin = self.resolve(target, PluginKind::Integration)?;
        let op = Op::Notify((&target.context).into(), target.config.to_string(), event.into());
        match self.call(&plugin, target, op).await? {
            Output::Delivery(delivery) => Ok(delivery.into()),
            _ => Err(unexpected()),
        }
    }

    /// `ca-connector.test-connection`.
    async fn ca_test_connection(&self, target: &CallTarget) -> Result<TestReport, PluginError> {
        let plugin = self.resolve(target, PluginKind::CaConnector)?;
        let op = Op::CaTest((&target.context).into(), target.config.to_string());
        match self.call(&plugin, target, op).await? {
            Output::Report(report) => Ok(report.into()),
            _ => Err(unexpected()),
        }
    }

    /// `ca-connector.issue`.
    async fn ca_issue(&self, target: &CallTarget, request: &IssueRequest) -> Result<IssuedCertificate, PluginError> {
        let plugin = self.resolve(target, PluginKind::CaConnector)?;
        let op = Op::Issue((&target.context).into(), target.config.to_string(), request.into());
        match self.call(&plugin, target, op).await? {
            Output::Issued(cert) => Ok(cert.into()),
            _ => Err(unexpected()),
        }
    }

    /// `ca-connector.revoke`.
    async fn ca_revoke(&self, target: &CallTarget, request: &RevokeRequest) -> Result<(), PluginError> {
        let plugin = self.resolve(target, PluginKind::CaConnector)?;
        let op = Op::Revoke((&target.context).into(), target.config.to_string(), request.into());
        match self.call(&plugin, target, op).await? {
            Output::Unit => Ok(()),
            _ => Err(unexpected()),
        }
    }

    /// `ca-connector.list-certificates`, one page.
    async fn ca_list_certificates(
        &self,
        target: &CallTarget,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<CertificatePage, PluginError> {
        let plugin = self.resolve(target, PluginKind::CaConnector)?;
        let op = Op::List((&target.context).into(), target.config.to_string(), ca::PageRequest { cursor, limit });
        match self.call(&plugin, target, op).await? {
            Output::Page(page) => Ok(page.into()),
            _ => Err(unexpected()),
        }
    }

    /// `attestation-verifier.verify`.
    async fn verify(&self, target: &CallTarget, request: &VerifyRequest) -> Result<Verdict, PluginError> {
        let plugin = self.resolve(target, PluginKind::AttestationVerifier)?;
        let op = Op::Verify(target.config.to_string(), request.into());
        match self.call(&plugin, target, op).await? {
            Output::Verdict(verdict) => Ok(verdict.into()),
            _ => Err(unexpected()),
        }
    }
}

fn unexpected() -> PluginError {
    PluginError::Internal("plugin returned a value of the wrong type".into())
}

async fn run(
    pre: &PluginPre,
    store: &mut Store<CallState>,
    op: Op,
) -> wasmtime::Result<Result<Output, w::PluginError>> {
    match pre {
        PluginPre::Integration(pre) => {
            let instance = pre.instantiate_async(&mut *store).await?;
            let api = instance.trellis_plugin_notifier();
            Ok(match op {
                Op::Describe => Ok(Output::Info(api.call_describe(&mut *store).await?)),
                Op::ValidateConfig(config) => {
                    api.call_validate_config(&mut *store, &config).await?.map(|()| Output::Unit)
                }
                Op::IntegrationTest(ctx, config) => {
                    api.call_test(&mut *store, &ctx, &config).await?.map(Output::Report)
                }
                Op::Notify(ctx, config, event) => {
                    api.call_notify(&mut *store, &ctx, &config, &event).await?.map(Output::Delivery)
                }
                _ => return Err(wasmtime::Error::new(OpMismatch)),
            })
        }
        PluginPre::Ca(pre) => {
            let instance = pre.instantiate_async(&mut *store).await?;
            let api = instance.trellis_plugin_connector();
            Ok(match op {
                Op::Describe => Ok(Output::Info(api.call_describe(&mut *store).await?)),
                Op::ValidateConfig(config) => {
                    api.call_validate_config(&mut *store, &config).await?.map(|()| Output::Unit)
                }
                Op::CaTest(ctx, config) => {
                    api.call_test_connection(&mut *store, &ctx, &config).await?.map(Output::Report)
                }
                Op::Issue(ctx, config, req) => {
                    api.call_issue(&mut *store, &ctx, &config, &req).await?.map(Output::Issued)
                }
                Op::Revoke(ctx, config, req) => {
                    api.call_revoke(&mut *store, &ctx, &config, &req).await?.map(|()| Output::Unit)
                }
                Op::List(ctx, config, page) => {
                    api.call_list_certificates(&mut *store, &ctx, &config, &page).await?.map(Output::Page)
                }
                _ => return Err(wasmtime::Error::new(OpMismatch)),
            })
        }
        PluginPre::Verifier(pre) => {
            let instance = pre.instantiate_async(&mut *store).await?;
            let api = instance.trellis_plugin_verifier();
            Ok(match op {
                Op::Describe => Ok(Output::Info(api.call_describe(&mut *store).await?)),
                Op::ValidateConfig(config) => {
                    api.call_validate_config(&mut *store, &config).await?.map(|()| Output::Unit)
                }
                Op::Verify(config, req) => api.call_verify(&mut *store, &config, &req).await?.map(Output::Verdict),
                _ => return Err(wasmtime::Error::new(OpMismatch)),
            })
        }
    }
}

fn classify(
    plugin: &str,
    limits: &CallLimits,
    outcome: Result<wasmtime::Result<Result<Output, w::PluginError>>, tokio::time::error::Elapsed>,
    state: &CallState,
    incidents: Vec<EgressIncident>,
) -> Result<Output, PluginError> {
    let plugin = plugin.to_owned();
    // A denied request or an oversized response explains whatever failure followed it.
    let incident_error = |incidents: &[EgressIncident]| {
        incidents
            .iter()
            .find_map(|incident| match incident {
                EgressIncident::Denied { destination, reason } => Some(PluginError::CapabilityDenied {
                    plugin: plugin.clone(),
                    capability: format!("outbound HTTP to {destination}"),
                    reason: reason.code().to_owned(),
                }),
                EgressIncident::ResponseTooLarge { .. } => None,
            })
            .or_else(|| {
                incidents.iter().find_map(|incident| match incident {
                    EgressIncident::ResponseTooLarge { limit } => {
                        Some(PluginError::HttpResponseTooLarge { plugin: plugin.clone(), limit_bytes: *limit })
                    }
                    EgressIncident::Denied { .. } => None,
                })
            })
    };
    match outcome {
        Err(_elapsed) => Err(PluginError::WallTimeExceeded { plugin, timeout_ms: limits.wall_time.as_millis() as u64 }),
        Ok(Err(err)) => {
            if state.limiter.exceeded || err.is::<MemoryLimitHit>() {
                return Err(PluginError::MemoryLimitExceeded { plugin, limit_bytes: limits.memory_bytes });
            }
            if state.cpu_exhausted || err.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                return Err(PluginError::CpuTimeExceeded { plugin, budget_ms: limits.cpu_time.as_millis() as u64 });
            }
            if err.is::<OpMismatch>() {
                return Err(PluginError::Internal(format!("{plugin}: {err}")));
            }
            if let Some(denied) = incident_error(&incidents) {
                return Err(denied);
            }
            let mut message = format!("{err:#}");
            message.truncate(2000);
            Err(PluginError::Trapped { plugin, message })
        }
        Ok(Ok(Err(reported))) => {
            if let Some(denied) = incident_error(&incidents) {
                return Err(denied);
            }
            Err(PluginError::Reported { plugin, error: ReportedError::from(reported) })
        }
        Ok(Ok(Ok(output))) => Ok(output),
    }
}

fn placeholder_info(kind: PluginKind) -> PluginInfo {
    PluginInfo {
        id: String::new(),
        version: semver::Version::new(0, 0, 0),
        kind,
        name: String::new(),
        description: String::new(),
        serves: Vec::new(),
        config_schema: serde_json::Value::Null,
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

fn validate_info(info: w::PluginInfo, world: PluginKind) -> Result<PluginInfo, InstallError> {
    let id_ok = (3..=64).contains(&info.id.len())
        && info.id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_'))
        && info.id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !id_ok {
        return Err(InstallError::InvalidMetadata(format!(
            "id {:?} must be 3-64 characters of a-z, 0-9, '.', '-', '_'",
            info.id
        )));
    }
    let version = semver::Version::parse(&info.version)
        .map_err(|err| InstallError::InvalidMetadata(format!("version {:?} is not semver: {err}", info.version)))?;
    let kind = plugin_kind_from_wit(info.kind);
    if kind != world {
        return Err(InstallError::InvalidMetadata(format!(
            "describe() says {kind} but the component exports the {world} world"
        )));
    }
    let config_schema: serde_json::Value = serde_json::from_str(&info.config_schema)
        .map_err(|err| InstallError::InvalidMetadata(format!("config-schema is not JSON: {err}")))?;
    if !config_schema.is_object() {
        return Err(InstallError::InvalidMetadata("config-schema must be a JSON object".into()));
    }
    if info.serves.is_empty() {
        return Err(InstallError::InvalidMetadata("serves must name at least one type".into()));
    }
    Ok(PluginInfo {
        id: info.id,
        version,
        kind,
        name: info.name,
        description: info.description,
        serves: info.serves,
        config_schema,
        default_issuer_patterns: info.default_issuer_patterns,
        outbound_hosts: info.outbound_hosts,
    })
}

fn describe_version(plugin: &LoadedPlugin, active: bool) -> InstalledVersion {
    InstalledVersion {
        info: plugin.info.clone(),
        sha256: plugin.sha256.clone(),
        size_bytes: plugin.size,
        wit_version: plugin.wit_version.to_string(),
        active,
    }
}

fn summarize(id: &str, entry: &PluginEntry, registry: &Registry) -> PluginSummary {
    let newest = entry.versions.values().next_back();
    PluginSummary {
        id: id.to_owned(),
        kind: newest.map_or(PluginKind::Integration, |p| p.info.kind),
        name: newest.map(|p| p.info.name.clone()).unwrap_or_default(),
        active_version: entry.active.as_ref().map(ToString::to_string),
        versions: entry
            .versions
            .values()
            .rev()
            .map(|p| describe_version(p, entry.active.as_ref() == Some(&p.info.version)))
            .collect(),
        granted_hosts: registry.grants.get(id).cloned().unwrap_or_default(),
        previous_versions: entry.history.iter().map(ToString::to_string).collect(),
    }
}

fn build_engine(config: &RuntimeConfig) -> Result<(Engine, Option<wasmtime::Cache>), PluginError> {
    let cache = match &config.cache_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|err| PluginError::Internal(format!("cannot create plugin cache {}: {err}", dir.display())))?;
            let mut cache_config = wasmtime::CacheConfig::new();
            cache_config.with_directory(dir.clone());
            Some(
                wasmtime::Cache::new(cache_config)
                    .map_err(|err| PluginError::Internal(format!("plugin cache: {err:#}")))?,
            )
        }
        None => None,
    };
    let base = |cache: Option<wasmtime::Cache>| {
        let mut c = Config::new();
        c.epoch_interruption(true)
            .wasm_component_model(true)
            .parallel_compilation(true)
            .memory_init_cow(true)
            .cache(cache);
        c
    };

    let slots = config.max_concurrent_calls.max(1) as u32 + 8;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots * 8)
        .total_memories(slots * 2)
        .total_tables(slots * 8)
        .total_stacks(slots)
        .max_memory_size(config.max_memory_bytes())
        .max_unused_warm_slots(slots.min(64))
        // Decommitting slots in batches amortizes madvise and TLB shootdowns (measured: the
        // largest per-call cost after the guest itself).
        .decommit_batch_size(32)
        .linear_memory_keep_resident(0)
        .table_keep_resident(0);
    let mut pooled = base(cache.clone());
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    match Engine::new(&pooled) {
        Ok(engine) => Ok((engine, cache)),
        Err(err) => {
            // Small address spaces (39-bit VA, strict overcommit) cannot reserve the pool.
            tracing::warn!(error = %format!("{err:#}"), "pooling allocator unavailable; using on-demand allocation");
            let engine = Engine::new(&base(cache.clone()))
                .map_err(|err| PluginError::Internal(format!("wasm engine: {err:#}")))?;
            Ok((engine, cache))
        }
    }
}

fn build_linker(engine: &Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    // Rust std guests import cli/filesystem/sockets/clocks/random; the per-call WasiCtx grants nothing.
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    w::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    logging::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    state::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    Ok(linker)
}

fn spawn_epoch_ticker(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new().name("plugin-epoch".into()).spawn(move || {
        // Ends with the engine: the weak handle stops upgrading once the runtime is dropped.
        while let Some(engine) = weak.upgrade() {
            engine.increment_epoch();
            drop(engine);
            std::thread::sleep(tick);
        }
    });
    if let Err(err) = spawned {
        tracing::error!(error = %err, "cannot start the plugin epoch ticker; CPU limits will not be enforced");
    }
}
