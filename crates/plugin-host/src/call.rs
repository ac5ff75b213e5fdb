//! The data of one call's `Store`: WASI context that grants nothing, wasi:http with the egress
//! hooks, the memory limiter, the guest log, and what the host imports need (state, keystore).
//! The imports themselves are implemented per contract version in `host_v0_1` and `host_v0_2`.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use trellis_core::clock::SharedClock;
use trellis_core::plugins::challenges::ChallengeAnswers;
use trellis_core::plugins::{Keystore, PkiCore, PkiGrant};

use crate::egress::EgressHooks;
use crate::{PluginStateStore, StateScope};

/// Who is running: used for log attribution.
#[derive(Debug, Clone)]
pub(crate) struct CallIdentity {
    /// `id@version`.
    pub(crate) plugin: Arc<str>,
    pub(crate) workspace: Arc<str>,
}

pub(crate) struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) table: ResourceTable,
    pub(crate) hooks: EgressHooks,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) identity: CallIdentity,
    pub(crate) log_budget: Arc<AtomicU32>,
    pub(crate) state_store: Arc<dyn PluginStateStore>,
    pub(crate) keystore: Keystore,
    /// Where HTTP-01 answers go, when the host runs a challenge listener.
    pub(crate) http01: Option<(Arc<dyn ChallengeAnswers>, SharedClock)>,
    /// The workspaces' domain claims: an answer is presented only for a name the call's
    /// workspace holds.
    pub(crate) domain_claims: Option<Arc<dyn trellis_core::domain_claims::DomainClaims>>,
    /// The internal PKI, when the call serves an internal CA record.
    pub(crate) pki: Option<PkiAccess>,
    /// The (plugin, workspace, record) that state and keystore calls are bound to.
    pub(crate) scope: StateScope,
    pub(crate) state_quota: u64,
    /// Epoch ticks observed while running wasm, and the budget in ticks.
    pub(crate) ticks: u64,
    pub(crate) tick_budget: u64,
    pub(crate) cpu_exhausted: bool,
}

/// A call's access to `pki-core`: the PKI, what the domain granted, and whether the call has
/// signed its one certificate.
pub(crate) struct PkiAccess {
    pub(crate) core: Arc<dyn PkiCore>,
    pub(crate) grant: PkiGrant,
    pub(crate) signed: bool,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

/// Per-call memory limit over all the call's linear memories together: a component of several
/// core modules (CPython's and SpiderMonkey's builds have a few) must not get the limit once
/// per memory. Growth past the limit is an error (not a failed `memory.grow`), so the call ends
/// with a distinct memory-limit failure instead of a generic allocator abort. The peak is what
/// the call needed: the figure an operator sets the limit from (`trellis_plugin_call_memory_peak_bytes`).
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    pub(crate) limit_bytes: usize,
    pub(crate) exceeded: bool,
    /// Bytes of all linear memories now, and the most they held during the call.
    pub(crate) used_bytes: usize,
    pub(crate) peak_bytes: usize,
}

impl MemoryLimiter {
    pub(crate) fn new(limit_bytes: usize) -> MemoryLimiter {
        MemoryLimiter { limit_bytes, exceeded: false, used_bytes: 0, peak_bytes: 0 }
    }
}

/// What one call used: the peak of its linear memories and the CPU it spent in wasm (counted
/// in epoch ticks, so to the tick: 10 ms by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallUsage {
    pub memory_peak_bytes: u64,
    pub cpu_ms: u64,
}

impl CallUsage {
    pub(crate) fn of(state: &CallState, epoch_tick: std::time::Duration) -> CallUsage {
        CallUsage {
            memory_peak_bytes: state.limiter.peak_bytes as u64,
            cpu_ms: (epoch_tick.as_millis() as u64).saturating_mul(state.ticks),
        }
    }

    /// The larger of each figure.
    pub(crate) fn max(self, other: CallUsage) -> CallUsage {
        CallUsage {
            memory_peak_bytes: self.memory_peak_bytes.max(other.memory_peak_bytes),
            cpu_ms: self.cpu_ms.max(other.cpu_ms),
        }
    }
}

/// Marker error returned by the limiter; found again in the error chain when classifying.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {0} bytes exceeded")]
pub(crate) struct MemoryLimitHit(pub(crate) usize);

impl wasmtime::ResourceLimiter for MemoryLimiter {
    // Called for each memory's initial size too (current 0), so `used_bytes` counts them all.
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let used = self.used_bytes.saturating_sub(current).saturating_add(desired);
        if used > self.limit_bytes {
            self.exceeded = true;
            return Err(wasmtime::Error::new(MemoryLimitHit(self.limit_bytes)));
        }
        self.used_bytes = used;
        self.peak_bytes = self.peak_bytes.max(used);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

impl CallState {
    fn take_log_budget(&self) -> bool {
        self.log_budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(1)).is_ok()
    }

    /// One guest log line into tracing, attributed to the plugin, workspace and record, within
    /// the call's budget; message and fields are truncated so a plugin cannot flood the log.
    pub(crate) fn log(&self, level: tracing::Level, message: &str, fields: impl Iterator<Item = (String, String)>) {
        if !self.take_log_budget() {
            return;
        }
        let message: String = message.chars().take(4096).collect();
        let fields = fields
            .take(32)
            .map(|(key, value)| {
                format!("{}={}", key.chars().take(64).collect::<String>(), value.chars().take(512).collect::<String>())
            })
            .collect::<Vec<_>>()
            .join(" ");
        let plugin = &*self.identity.plugin;
        let workspace = &*self.identity.workspace;
        let record = self.scope.record_id.as_str();
        match level {
            tracing::Level::TRACE => {
                tracing::trace!(target: "trellis::plugin", plugin, workspace, record, fields, "{message}")
            }
            tracing::Level::DEBUG => {
                tracing::debug!(target: "trellis::plugin", plugin, workspace, record, fields, "{message}")
            }
            tracing::Level::INFO => {
                tracing::info!(target: "trellis::plugin", plugin, workspace, record, fields, "{message}")
            }
            tracing::Level::WARN => {
                tracing::warn!(target: "trellis::plugin", plugin, workspace, record, fields, "{message}")
            }
            tracing::Level::ERROR => {
                tracing::error!(target: "trellis::plugin", plugin, workspace, record, fields, "{message}")
            }
        }
    }
}

/// The `logging` import, the same in every contract version: expands where `logging` names the
/// version's generated interface.
macro_rules! impl_logging_host {
    () => {
        impl logging::Host for CallState {
            async fn log(
                &mut self,
                level: logging::Level,
                message: String,
                fields: Vec<logging::Field>,
            ) -> wasmtime::Result<()> {
                let level = match level {
                    logging::Level::Trace => tracing::Level::TRACE,
                    logging::Level::Debug => tracing::Level::DEBUG,
                    logging::Level::Info => tracing::Level::INFO,
                    logging::Level::Warn => tracing::Level::WARN,
                    logging::Level::Error => tracing::Level::ERROR,
                };
                CallState::log(self, level, &message, fields.into_iter().map(|f| (f.key, f.value)));
                Ok(())
            }
        }
    };
}
pub(crate) use impl_logging_host;

/// Longest state key a plugin may use.
pub(crate) const MAX_STATE_KEY: usize = 256;

/// Guest stdout/stderr: each line becomes a tracing event attributed to the plugin, within the
/// call's log budget; beyond it lines are dropped silently (never an error, which would make a
/// chatty plugin trap).
#[derive(Clone)]
pub(crate) struct GuestOutput {
    pub(crate) stream: &'static str,
    pub(crate) identity: CallIdentity,
    pub(crate) budget: Arc<AtomicU32>,
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(GuestLineWriter { out: self.clone(), line: Vec::new() })
    }
}

struct GuestLineWriter {
    out: GuestOutput,
    line: Vec<u8>,
}

impl GuestLineWriter {
    fn emit(&mut self) {
        let line = String::from_utf8_lossy(&self.line).trim_end().to_owned();
        self.line.clear();
        if line.is_empty() {
            return;
        }
        let permitted =
            self.out.budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(1)).is_ok();
        if permitted {
            tracing::info!(
                target: "trellis::plugin",
                plugin = &*self.out.identity.plugin,
                workspace = &*self.out.identity.workspace,
                stream = self.out.stream,
                "{line}"
            );
        }
    }
}

impl tokio::io::AsyncWrite for GuestLineWriter {
    fn poll_write(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        for &byte in buf {
            if byte == b'\n' || self.line.len() >= 4096 {
                self.emit();
            }
            if byte != b'\n' {
                self.line.push(byte);
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.emit();
        Poll::Ready(Ok(()))
    }
}

impl Drop for GuestLineWriter {
    fn drop(&mut self) {
        self.emit();
    }
}
