//! The call path: admission (the workspace's share, then a global slot) → a fresh store with
//! memory, CPU and wall-clock limits → the typed [`Call`] → every failure classified into a
//! distinct [`PluginError`].

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;

use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi_http::WasiHttpCtx;

use crate::call::{CallIdentity, CallState, CallUsage, GuestOutput, MemoryLimitHit, MemoryLimiter, PkiAccess};
use crate::config::CallLimits;
use trellis_egress::EgressGrant;

use crate::egress::{EgressCall, EgressHooks, EgressIncident, EgressRecord};
use crate::registry::LoadedPlugin;
use crate::runtime::PluginRuntime;
use crate::worlds::Call;
use crate::{CallTarget, Check, CheckStatus, PluginError, ReportedError, StateScope, TestReport};

/// What a call returned, with what the egress policy refused or cut off along the way.
pub(crate) struct Invoked<T> {
    pub(crate) value: T,
    pub(crate) incidents: Vec<EgressIncident>,
}

impl Invoked<TestReport> {
    /// A connection test the plugin "passed" around a refused request must still tell the
    /// operator what the host refused and why.
    pub(crate) fn with_host_policy(self) -> TestReport {
        let mut report = self.value;
        for incident in self.incidents {
            report.success = false;
            report.checks.push(Check {
                name: "host-policy".into(),
                status: CheckStatus::Fail,
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
        report
    }
}

impl PluginRuntime {
    /// Milliseconds a plugin is told it has (`call-context.time-budget-ms`): the wall-clock
    /// limit less a fifth, so a plugin that honours it returns before the host's hard timeout.
    pub(crate) fn time_budget_ms(&self, plugin: &LoadedPlugin) -> u32 {
        let wall = self.config().limits.for_kind(plugin.kind).wall_time;
        u32::try_from(wall.as_millis() * 4 / 5).unwrap_or(u32::MAX)
    }

    /// Runs one call in a fresh store and turns every failure into a distinct `PluginError`.
    pub(crate) async fn invoke<T: Send + 'static>(
        &self,
        plugin: &LoadedPlugin,
        target: &CallTarget,
        call: Call<T>,
    ) -> Result<Invoked<T>, PluginError> {
        let waited = Instant::now();
        // The workspace's share first, then a global slot, both within one admission timeout:
        // a tenant at its share waits on its own queue and leaves the other slots to others.
        let config = self.config();
        let deadline = tokio::time::Instant::now() + config.admission_timeout;
        let overloaded = || PluginError::Overloaded { waited_ms: waited.elapsed().as_millis() as u64 };
        let share = self.workspace_share(&target.context.workspace_id);
        let share_permit = tokio::time::timeout_at(deadline, share.acquire_owned())
            .await
            .map_err(|_| overloaded())?
            .map_err(|_| PluginError::Internal("workspace admission semaphore closed".into()))?;
        let permit = tokio::time::timeout_at(deadline, self.admission().acquire_owned())
            .await
            .map_err(|_| overloaded())?
            .map_err(|_| PluginError::Internal("admission semaphore closed".into()))?;
        let permit = (permit, share_permit);

        let limits = config.limits.for_kind(plugin.kind);
        let granted = self.grants(&plugin.info.id);
        let grant = EgressGrant::from_entries(
            target.record_hosts.iter().map(String::as_str).chain(granted.iter().map(String::as_str)),
        );
        let network = self.egress_policy().for_record(&target.network).map_err(|message| {
            PluginError::Internal(format!("network settings of record {}: {message}", target.context.record_id))
        })?;
        let egress_call = Arc::new(EgressCall {
            plugin: plugin.label.to_string(),
            workspace: target.context.workspace_id.clone(),
            grant,
            network,
            record: EgressRecord::default(),
        });
        let mut store = self.new_store(plugin, target, &limits, egress_call.clone());

        let started = Instant::now();
        // A host function that panics (a bug of ours, never the guest's) fails this call only.
        let outcome = match std::panic::AssertUnwindSafe(tokio::time::timeout(limits.wall_time, call(&mut store)))
            .catch_unwind()
            .await
        {
            Ok(outcome) => outcome,
            Err(_) => {
                drop(permit);
                tracing::error!(plugin = %plugin.label, code = "HOST_CALL_PANIC", "a host function panicked during the call; only this call failed");
                return Err(PluginError::Internal(format!(
                    "a host function failed during a call of plugin {} (see the log, code HOST_CALL_PANIC)",
                    plugin.label
                )));
            }
        };
        let elapsed = started.elapsed();
        drop(permit);

        let incidents = egress_call.record.take();
        let label = plugin.label.to_string();
        let used = CallUsage::of(store.data(), config.epoch_tick);
        self.record_usage(plugin, used);
        let result = classify(&label, &limits, outcome, store.data(), &incidents);
        match &result {
            Ok(_) => tracing::debug!(
                plugin = %label,
                elapsed_us = elapsed.as_micros() as u64,
                memory_peak_bytes = used.memory_peak_bytes,
                cpu_ms = used.cpu_ms,
                "plugin call ok"
            ),
            Err(err) if err.is_sandbox_violation() => {
                metrics::counter!("trellis_plugin_call_failures_total", "plugin" => label.clone(), "code" => err.code()).increment(1);
                tracing::warn!(plugin = %label, code = err.code(), error = %err, "plugin call failed")
            }
            Err(err) => {
                tracing::info!(plugin = %label, code = err.code(), error = %err, "plugin reported an error")
            }
        }
        result.map(|value| Invoked { value, incidents })
    }

    fn new_store(
        &self,
        plugin: &LoadedPlugin,
        target: &CallTarget,
        limits: &CallLimits,
        egress_call: Arc<EgressCall>,
    ) -> Store<CallState> {
        let config = self.config();
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
        let tick = config.epoch_tick.as_nanos().max(1);
        let tick_budget = (limits.cpu_time.as_nanos().div_ceil(tick)).max(1) as u64;
        let record_id = if plugin.scopes_by_record() { target.context.record_id.clone() } else { String::new() };
        let state = CallState {
            wasi,
            http,
            table,
            hooks: EgressHooks { policy: self.egress_policy(), call: egress_call },
            limiter: MemoryLimiter::new(limits.memory_bytes),
            identity,
            log_budget,
            state_store: self.state_store(),
            keystore: self.keystore(),
            http01: self.http01(),
            domain_claims: self.domain_claims(),
            pki: match (self.pki_core(), &target.pki) {
                (Some(core), Some(grant)) => Some(PkiAccess { core, grant: grant.clone(), signed: false }),
                _ => None,
            },
            scope: StateScope {
                plugin_id: plugin.info.id.clone(),
                workspace_id: target.context.workspace_id.clone(),
                record_id,
            },
            state_quota: config.state_quota_bytes,
            ticks: 0,
            tick_budget,
            cpu_exhausted: false,
        };
        let mut store = Store::new(self.engine(), state);
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
}

fn classify<T>(
    plugin: &str,
    limits: &CallLimits,
    outcome: Result<wasmtime::Result<Result<T, ReportedError>>, tokio::time::error::Elapsed>,
    state: &CallState,
    incidents: &[EgressIncident],
) -> Result<T, PluginError> {
    let plugin = plugin.to_owned();
    // A denied request or an oversized response explains whatever failure followed it.
    let incident_error = || {
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
            if let Some(denied) = incident_error() {
                return Err(denied);
            }
            let mut message = format!("{err:#}");
            message.truncate(2000);
            Err(PluginError::Trapped { plugin, message })
        }
        Ok(Ok(Err(reported))) => {
            if let Some(denied) = incident_error() {
                return Err(denied);
            }
            Err(PluginError::Reported { plugin, error: reported })
        }
        Ok(Ok(Ok(value))) => Ok(value),
    }
}
