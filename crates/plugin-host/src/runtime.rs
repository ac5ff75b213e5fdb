//! [`PluginRuntime`]: the engine, the registry and the shared services calls need, and the
//! [`PluginHost`] port implemented on them. Lifecycle operations go to the registry; calls
//! resolve the serving plugin, build a typed call in its world module and run it through
//! `invoke`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::Semaphore;
use trellis_core::clock::SharedClock;
use trellis_core::plugins::challenges::ChallengeAnswers;
use trellis_core::plugins::{ComponentSource, DeferredVersion, Keystore, PkiCore, PluginInfo, PluginRef};
use wasmtime::component::Linker;
use wasmtime::Engine;

use crate::artefacts::{Artefacts, CacheStats};
use crate::call::{CallState, CallUsage};
use crate::config::RuntimeConfig;
use crate::egress::EgressPolicy;
use crate::engine::{build_engine, build_linker, spawn_epoch_ticker};
use crate::invoke::Invoked;
use crate::registry::{LoadedPlugin, Registry};
use crate::worlds::{Call, Ctx};
use crate::{
    Activation, CallTarget, CertificatePage, CertificateRef, Decision, Delivery, EnrollmentRequest, EnrollmentVerdict,
    EvaluationRequest, Event, InstalledVersion, IssueOutcome, IssueRequest, IssuedCertificate, PluginError, PluginHost,
    PluginKind, PluginStateStore, PluginSummary, RenewalWindow, RevokeRequest, TestReport, Verdict, VerifyRequest,
};

/// The newest WIT package version this host implements; every `0.1.x` and `0.2.x` component loads.
pub const WIT_PACKAGE_VERSION: &str = "0.2.0";

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
    keystore: Keystore,
    http01: Option<(Arc<dyn ChallengeAnswers>, SharedClock)>,
    /// Which names each workspace may have challenge answers presented for; none: no answers.
    domain_claims: Option<Arc<dyn trellis_core::domain_claims::DomainClaims>>,
    pki_core: Option<Arc<dyn PkiCore>>,
    admission: Arc<Semaphore>,
    /// Per-workspace shares of the admission slots (see `RuntimeConfig::max_calls_per_workspace`).
    workspace_slots: std::sync::Mutex<HashMap<String, Arc<Semaphore>>>,
    registry: RwLock<Registry>,
    /// Compiled components on disk (`artefacts`); none without a cache directory and key.
    artefacts: Option<Artefacts>,
    /// The most each plugin's calls used since start (memory peak, CPU), by plugin id.
    usage: std::sync::Mutex<HashMap<String, CallUsage>>,
}

impl PluginRuntime {
    /// Starts the runtime: builds the engine (pooling allocator when the address space allows),
    /// the epoch ticker, the linker and the egress policy. Plugin state and keystore keys go to
    /// `state_store` and `keystore`.
    pub fn new(
        config: RuntimeConfig,
        state_store: Arc<dyn PluginStateStore>,
        keystore: Keystore,
    ) -> Result<PluginRuntime, PluginError> {
        let engine = build_engine(&config)?;
        let artefacts = match (&config.cache_dir, &config.cache_key) {
            (Some(dir), Some(key)) => Some(Artefacts::new(&engine, dir.clone(), key)?),
            (Some(dir), None) => {
                tracing::warn!(dir = %dir.display(), "plugin cache directory without a key; compiled plugins are not cached");
                None
            }
            (None, _) => None,
        };
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
                keystore,
                http01: None,
                domain_claims: None,
                pki_core: None,
                registry: RwLock::new(Registry::default()),
                artefacts,
                usage: std::sync::Mutex::default(),
            }),
        })
    }

    /// Lets connectors present ACME HTTP-01 answers (`challenge-solver`) into `answers`, which
    /// the host's challenge listener serves. Call before cloning the runtime.
    pub fn with_http01_answers(mut self, answers: Arc<dyn ChallengeAnswers>, clock: SharedClock) -> PluginRuntime {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.http01 = Some((answers, clock)),
            None => tracing::error!("with_http01_answers called on a shared runtime; HTTP-01 stays unsupported"),
        }
        self
    }

    /// Presents challenge answers (HTTP-01 and DNS-01) only for names a verified claim of the
    /// call's workspace covers. Without it every answer is refused. Call before cloning the
    /// runtime.
    pub fn with_domain_claims(mut self, claims: Arc<dyn trellis_core::domain_claims::DomainClaims>) -> PluginRuntime {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.domain_claims = Some(claims),
            None => tracing::error!("with_domain_claims called on a shared runtime; challenge answers stay refused"),
        }
        self
    }

    /// Serves `pki-core` to calls the domain grants it (internal CA records). Call before
    /// cloning the runtime.
    pub fn with_pki_core(mut self, pki: Arc<dyn PkiCore>) -> PluginRuntime {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.pki_core = Some(pki),
            None => tracing::error!("with_pki_core called on a shared runtime; pki-core stays unavailable"),
        }
        self
    }

    /// The runtime's configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Outbound requests denied since start, all plugins.
    pub fn egress_denied_total(&self) -> u64 {
        self.inner.egress.denied_total()
    }

    /// The most one call of the plugin used since start (memory peak over all its linear
    /// memories, CPU in wasm): what its kind's limits must leave room for.
    pub fn call_usage(&self, plugin_id: &str) -> Option<CallUsage> {
        self.inner.usage.lock().ok()?.get(plugin_id).copied()
    }

    pub(crate) fn record_usage(&self, plugin: &LoadedPlugin, used: CallUsage) {
        let Ok(mut usage) = self.inner.usage.lock() else { return };
        // Every call passes here: allocate and touch the gauge only when a figure grows.
        let most = match usage.get_mut(plugin.info.id.as_str()) {
            Some(most) => most,
            None => usage.entry(plugin.info.id.clone()).or_default(),
        };
        let grown = most.max(used);
        if grown == *most {
            return;
        }
        *most = grown;
        metrics::gauge!("trellis_plugin_call_memory_peak_bytes", "plugin" => plugin.info.id.clone())
            .set(grown.memory_peak_bytes as f64);
        // The CPU the budget charged (whole epoch ticks), beside the kind's `_CPU_MS`.
        metrics::gauge!("trellis_plugin_call_cpu_peak_seconds", "plugin" => plugin.info.id.clone())
            .set(grown.cpu_ms as f64 / 1000.0);
    }

    /// Compiled-code cache hits and misses since start (`None` without a cache).
    pub fn cache_stats(&self) -> Option<(usize, usize)> {
        self.artefact_stats().map(|s| (s.hits as usize, s.misses as usize))
    }

    /// The compiled-code cache's counters, refused artefacts included (`None` without a cache).
    pub fn artefact_stats(&self) -> Option<CacheStats> {
        self.inner.artefacts.as_ref().map(Artefacts::stats)
    }

    pub(crate) fn artefacts(&self) -> Option<&Artefacts> {
        self.inner.artefacts.as_ref()
    }

    /// Calls currently running (not queued).
    pub fn calls_in_flight(&self) -> usize {
        self.inner.config.max_concurrent_calls.max(1) - self.inner.admission.available_permits()
    }

    // ---- what the other modules of the crate share -------------------------------------

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn linker(&self) -> &Linker<CallState> {
        &self.inner.linker
    }

    pub(crate) fn egress_policy(&self) -> Arc<EgressPolicy> {
        self.inner.egress.clone()
    }

    pub(crate) fn state_store(&self) -> Arc<dyn PluginStateStore> {
        self.inner.state_store.clone()
    }

    pub(crate) fn keystore(&self) -> Keystore {
        self.inner.keystore.clone()
    }

    pub(crate) fn http01(&self) -> Option<(Arc<dyn ChallengeAnswers>, SharedClock)> {
        self.inner.http01.clone()
    }

    pub(crate) fn domain_claims(&self) -> Option<Arc<dyn trellis_core::domain_claims::DomainClaims>> {
        self.inner.domain_claims.clone()
    }

    pub(crate) fn pki_core(&self) -> Option<Arc<dyn PkiCore>> {
        self.inner.pki_core.clone()
    }

    pub(crate) fn admission(&self) -> Arc<Semaphore> {
        self.inner.admission.clone()
    }

    pub(crate) fn grants(&self, plugin_id: &str) -> Vec<String> {
        self.read_registry().grants(plugin_id)
    }

    /// The semaphore of a workspace's share of call slots, created on its first call.
    pub(crate) fn workspace_share(&self, workspace_id: &str) -> Arc<Semaphore> {
        let mut slots = self.inner.workspace_slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .entry(workspace_id.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.inner.config.workspace_share())))
            .clone()
    }

    pub(crate) fn read_registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        // Registry updates are single assignments; a panic mid-update cannot leave it torn.
        self.inner.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write_registry(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.inner.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The version serving `target`, compiled (a deferred version is compiled now).
    async fn resolve(&self, target: &CallTarget, kind: PluginKind) -> Result<Arc<LoadedPlugin>, PluginError> {
        let plugin = self.read_registry().resolve(target, kind)?;
        self.compiled(&plugin).await?;
        Ok(plugin)
    }

    /// Resolves the plugin serving `target` as a connector, builds the call, runs it.
    async fn connector_call<T: Send + 'static>(
        &self,
        target: &CallTarget,
        build: impl FnOnce(&crate::worlds::ConnectorPre, &Ctx<'_>) -> Call<T>,
    ) -> Result<Invoked<T>, PluginError> {
        let plugin = self.resolve(target, PluginKind::CaConnector).await?;
        let ctx = Ctx { target, time_budget_ms: self.time_budget_ms(&plugin) };
        let call = build(plugin.connector()?, &ctx);
        self.invoke(&plugin, target, call).await
    }

    async fn notifier_call<T: Send + 'static>(
        &self,
        target: &CallTarget,
        build: impl FnOnce(&crate::worlds::NotifierPre, &Ctx<'_>) -> Call<T>,
    ) -> Result<Invoked<T>, PluginError> {
        let plugin = self.resolve(target, PluginKind::Integration).await?;
        let ctx = Ctx { target, time_budget_ms: self.time_budget_ms(&plugin) };
        let call = build(plugin.notifier()?, &ctx);
        self.invoke(&plugin, target, call).await
    }
}

#[async_trait::async_trait]
impl PluginHost for PluginRuntime {
    async fn install(&self, wasm: &[u8], activation: Activation) -> Result<InstalledVersion, PluginError> {
        self.install_component(wasm, activation).await
    }

    fn install_deferred(&self, version: DeferredVersion) -> Result<InstalledVersion, PluginError> {
        self.install_deferred_version(version)
    }

    async fn precompile(&self) -> usize {
        self.precompile_deferred().await
    }

    fn set_signer(&self, id: &str, version: &semver::Version, signer: Option<String>) -> Result<(), PluginError> {
        self.write_registry().set_signer(id, version, signer)
    }

    fn release_compiled(&self, source: Arc<dyn ComponentSource>) -> usize {
        self.write_registry().release_compiled(&source)
    }

    /// Makes `version` the active version of `id`. Calls already running finish on the version
    /// they started with; calls starting afterwards use `version`.
    fn activate(&self, id: &str, version: &semver::Version) -> Result<(), PluginError> {
        if self.write_registry().activate(id, version)? {
            tracing::info!(plugin = id, %version, "plugin version activated");
        }
        Ok(())
    }

    fn rollback(&self, id: &str) -> Result<semver::Version, PluginError> {
        let version = self.write_registry().rollback(id)?;
        tracing::info!(plugin = id, %version, "plugin rolled back");
        Ok(version)
    }

    /// Calls in flight keep their loaded version alive.
    fn remove(&self, id: &str, version: Option<&semver::Version>) -> Result<(), PluginError> {
        self.write_registry().remove(id, version)?;
        tracing::info!(plugin = id, version = ?version.map(ToString::to_string), "plugin removed");
        Ok(())
    }

    fn list(&self) -> Vec<PluginSummary> {
        self.read_registry().list()
    }

    fn serving(
        &self,
        workspace_id: &str,
        kind: PluginKind,
        service_type: &str,
    ) -> Result<Arc<PluginInfo>, PluginError> {
        let target =
            CallTarget::new(workspace_id, PluginRef::Serving(service_type.to_owned()), serde_json::Value::Null);
        Ok(self.read_registry().resolve(&target, kind)?.info.clone())
    }

    fn served_types(&self, kind: PluginKind) -> Vec<String> {
        let mut types: Vec<String> = self
            .read_registry()
            .list()
            .into_iter()
            .filter(|summary| summary.kind == kind)
            .flat_map(|summary| {
                let active = summary.active_version.clone();
                summary.versions.into_iter().filter(move |v| Some(v.info.version.to_string()) == active)
            })
            .flat_map(|version| version.info.serves)
            .collect();
        types.sort();
        types.dedup();
        types
    }

    fn show(&self, id: &str) -> Option<PluginSummary> {
        self.read_registry().show(id)
    }

    fn bind(
        &self,
        workspace_id: &str,
        kind: PluginKind,
        service_type: &str,
        plugin_id: &str,
    ) -> Result<(), PluginError> {
        self.write_registry().bind(workspace_id, kind, service_type, plugin_id)
    }

    fn unbind(&self, workspace_id: &str, kind: PluginKind, service_type: &str) {
        self.write_registry().unbind(workspace_id, kind, service_type)
    }

    /// Replaces the operator-granted outbound hosts of a plugin (`host`, `host:port`, `*.domain`).
    fn grant_hosts(&self, plugin_id: &str, hosts: Vec<String>) -> Result<(), PluginError> {
        self.write_registry().grant_hosts(plugin_id, hosts)
    }

    /// Loading from the database, following another replica. Unknown versions are skipped.
    fn restore_activation(
        &self,
        id: &str,
        active: Option<&semver::Version>,
        history: &[semver::Version],
    ) -> Result<(), PluginError> {
        self.write_registry().restore_activation(id, active, history)
    }

    fn replace_bindings(&self, bindings: Vec<(String, PluginKind, String, String)>) {
        self.write_registry().replace_bindings(bindings)
    }

    async fn validate_config(&self, target: &CallTarget, kind: PluginKind) -> Result<(), PluginError> {
        let plugin = self.resolve(target, kind).await?;
        if plugin.kind != kind {
            return Err(PluginError::WrongKind { plugin: plugin.info.id.clone(), expected: kind, actual: plugin.kind });
        }
        let call = plugin.world()?.validate_config(target.config.to_string());
        self.invoke(&plugin, target, call).await.map(|invoked| invoked.value)
    }

    async fn integration_test(&self, target: &CallTarget) -> Result<TestReport, PluginError> {
        Ok(self.notifier_call(target, |pre, ctx| pre.test(ctx)).await?.with_host_policy())
    }

    async fn notify(&self, target: &CallTarget, event: &Event) -> Result<Delivery, PluginError> {
        Ok(self.notifier_call(target, |pre, ctx| pre.notify(ctx, event)).await?.value)
    }

    async fn ca_setup(&self, target: &CallTarget) -> Result<(), PluginError> {
        self.connector_call(target, |pre, ctx| pre.setup(ctx)).await.map(|invoked| invoked.value)
    }

    async fn ca_test_connection(&self, target: &CallTarget) -> Result<TestReport, PluginError> {
        Ok(self.connector_call(target, |pre, ctx| pre.test_connection(ctx)).await?.with_host_policy())
    }

    async fn ca_issue(&self, target: &CallTarget, request: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        Ok(self.connector_call(target, |pre, ctx| pre.issue(ctx, request)).await?.value)
    }

    async fn ca_poll_issue(
        &self,
        target: &CallTarget,
        reference: &str,
        request: &IssueRequest,
    ) -> Result<IssueOutcome, PluginError> {
        Ok(self.connector_call(target, |pre, ctx| pre.poll_issue(ctx, reference, request)).await?.value)
    }

    async fn ca_fetch_certificate(
        &self,
        target: &CallTarget,
        ca_reference: &str,
    ) -> Result<IssuedCertificate, PluginError> {
        Ok(self.connector_call(target, |pre, ctx| pre.fetch_certificate(ctx, ca_reference)).await?.value)
    }

    async fn ca_chain(&self, target: &CallTarget) -> Result<Vec<Vec<u8>>, PluginError> {
        Ok(self.connector_call(target, |pre, ctx| pre.ca_chain(ctx)).await?.value)
    }

    async fn ca_revoke(&self, target: &CallTarget, request: &RevokeRequest) -> Result<(), PluginError> {
        self.connector_call(target, |pre, ctx| pre.revoke(ctx, request)).await.map(|invoked| invoked.value)
    }

    async fn ca_list_certificates(
        &self,
        target: &CallTarget,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<CertificatePage, PluginError> {
        Ok(self.connector_call(target, |pre, ctx| pre.list_certificates(ctx, cursor, limit)).await?.value)
    }

    async fn ca_renewal_info(
        &self,
        target: &CallTarget,
        certificate: &CertificateRef,
    ) -> Result<Option<RenewalWindow>, PluginError> {
        Ok(self.connector_call(target, |pre, ctx| pre.renewal_info(ctx, certificate)).await?.value)
    }

    async fn verifier_enroll(
        &self,
        target: &CallTarget,
        request: &EnrollmentRequest,
    ) -> Result<EnrollmentVerdict, PluginError> {
        let plugin = self.resolve(target, PluginKind::AttestationVerifier).await?;
        let ctx = Ctx { target, time_budget_ms: self.time_budget_ms(&plugin) };
        let call = plugin.verifier()?.enroll(&ctx, request);
        Ok(self.invoke(&plugin, target, call).await?.value)
    }

    async fn verify(&self, target: &CallTarget, request: &VerifyRequest) -> Result<Verdict, PluginError> {
        let plugin = self.resolve(target, PluginKind::AttestationVerifier).await?;
        let ctx = Ctx { target, time_budget_ms: self.time_budget_ms(&plugin) };
        let call = plugin.verifier()?.verify(&ctx, request);
        Ok(self.invoke(&plugin, target, call).await?.value)
    }

    async fn policy_evaluate(&self, target: &CallTarget, request: &EvaluationRequest) -> Result<Decision, PluginError> {
        let plugin = self.resolve(target, PluginKind::IssuancePolicy).await?;
        let ctx = Ctx { target, time_budget_ms: self.time_budget_ms(&plugin) };
        let call = plugin.policy()?.evaluate(&ctx, request);
        Ok(self.invoke(&plugin, target, call).await?.value)
    }
}
