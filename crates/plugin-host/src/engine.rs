//! The one wasmtime engine (pooling allocator when the address space allows, epoch
//! interruption), the linker serving every contract version, and the
//! epoch ticker that enforces CPU budgets.

use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::call::CallState;
use crate::config::RuntimeConfig;
use crate::PluginError;

/// Bytes a pooled memory, table or stack keeps mapped between calls: at most this much per
/// slot used, counting only the pages a call dirtied (a Rust connector dirties about 24 KiB).
const KEEP_RESIDENT: usize = 64 * 1024;

/// The engine. Compiled code is cached by `artefacts` (authenticated files), not by wasmtime's
/// own cache, whose files are loaded without any check of who wrote them.
pub(crate) fn build_engine(config: &RuntimeConfig) -> Result<Engine, PluginError> {
    let base = || {
        let mut c = Config::new();
        c.epoch_interruption(true).wasm_component_model(true).parallel_compilation(true).memory_init_cow(true);
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
        // A call's first touch of its memory image, heap and stack took 8 page faults, most a
        // read then a copy-on-write whose TLB flush interrupts the other cores (the flushes alone
        // were 5 % of the server's samples under issuance load). With `PAGEMAP_SCAN` (Linux 6.7+; otherwise the lowest bytes are reset)
        // the pages a call dirtied are reset in place, up to `KEEP_RESIDENT` per memory, table
        // and stack, and the next call in the slot finds them mapped: 0.14 faults per issuance
        // (docs/benchmarks.md, issue 24). Isolation is unchanged: what is kept is reset first.
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .async_stack_keep_resident(KEEP_RESIDENT);
    let mut pooled = base();
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    match Engine::new(&pooled) {
        Ok(engine) => Ok(engine),
        Err(err) => {
            // Small address spaces (39-bit VA, strict overcommit) cannot reserve the pool.
            tracing::warn!(error = %format!("{err:#}"), "pooling allocator unavailable; using on-demand allocation");
            Engine::new(&base()).map_err(|err| PluginError::Internal(format!("wasm engine: {err:#}")))
        }
    }
}

/// One linker for every contract version: `trellis:plugin/*@0.1.0` and `@0.2.0` imports sit
/// side by side, each served by its version's host implementation.
pub(crate) fn build_linker(engine: &Engine) -> wasmtime::Result<Linker<CallState>> {
    use crate::bindings::{v0_1, v0_2};
    let mut linker = Linker::new(engine);
    // Rust std guests import cli/filesystem/sockets/clocks/random; the per-call WasiCtx grants nothing.
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    v0_1::wit_types::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_1::logging::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_1::state::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_2::wit_types::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_2::logging::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_2::state::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_2::keystore::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_2::challenge_solver::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    v0_2::pki_core::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)?;
    Ok(linker)
}

pub(crate) fn spawn_epoch_ticker(engine: &Engine, tick: Duration) {
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
