//! The "bare wasmtime" baseline for `host/benches/plugin_call.rs`: the same component and the
//! same export, instantiated with `Linker::instantiate_async` (no `InstancePre`) in a minimal
//! store with a plain engine — no pooling, epochs, limits, admission or result classification.
//! Not part of the service API. Also the runtime the benches measure, set up the one way.

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::bindings::v0_2::{integration_world, logging, state, wit_types};
use crate::{Activation, InMemoryStateStore, PluginRuntime, RuntimeConfig};
use trellis_core::plugins::{Keystore, PluginError, PluginHost as _};

/// A runtime as the benches measure it (no compile cache, state and keystore in memory) with
/// `wasm` installed and active.
pub async fn runtime_with(wasm: &[u8]) -> Result<PluginRuntime, PluginError> {
    let runtime = PluginRuntime::new(
        RuntimeConfig::without_cache(),
        std::sync::Arc::new(InMemoryStateStore::default()),
        Keystore::in_memory(),
    )?;
    runtime.install(wasm, Activation::IfNewer).await?;
    Ok(runtime)
}

/// A compiled component plus a linker, ready for bare instantiate-and-call rounds.
pub struct BareWasmtime {
    engine: Engine,
    linker: Linker<BareState>,
    component: Component,
}

pub struct BareState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: DenyAll,
}

pub struct DenyAll;

impl WasiHttpHooks for DenyAll {
    fn send_request(
        &mut self,
        _request: http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn std::future::Future<
                Output = Result<
                    (
                        http::Response<wasmtime_wasi_http::WasiBody>,
                        Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                    ),
                    wasmtime_wasi_http::Error,
                >,
            > + Send,
    > {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

impl WasiView for BareState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for BareState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

impl wit_types::Host for BareState {}

impl logging::Host for BareState {
    async fn log(
        &mut self,
        _level: logging::Level,
        _message: String,
        _fields: Vec<logging::Field>,
    ) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl state::Host for BareState {
    async fn get(&mut self, _key: String) -> wasmtime::Result<Result<Option<Vec<u8>>, state::StateError>> {
        Ok(Ok(None))
    }
    async fn set(&mut self, _key: String, _value: Vec<u8>) -> wasmtime::Result<Result<(), state::StateError>> {
        Ok(Ok(()))
    }
    async fn delete(&mut self, _key: String) -> wasmtime::Result<Result<(), state::StateError>> {
        Ok(Ok(()))
    }

    async fn list_keys(
        &mut self,
        _prefix: String,
        _after: Option<String>,
        _limit: u32,
    ) -> wasmtime::Result<Result<Vec<String>, state::StateError>> {
        Ok(Ok(Vec::new()))
    }

    async fn compare_and_swap(
        &mut self,
        _key: String,
        _expected: Option<Vec<u8>>,
        _new: Option<Vec<u8>>,
    ) -> wasmtime::Result<Result<bool, state::StateError>> {
        Ok(Ok(false))
    }
}

impl BareWasmtime {
    /// Compiles `wasm` (an integration component) with a default engine (on-demand allocator).
    pub fn new(wasm: &[u8]) -> wasmtime::Result<BareWasmtime> {
        BareWasmtime::with_config(wasm, &Config::new())
    }

    /// The same, but with a pooling allocator configured like the runtime's, to separate
    /// what pooling buys from what the runtime's own layers cost.
    pub fn with_pooling(wasm: &[u8]) -> wasmtime::Result<BareWasmtime> {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(64)
            .total_core_instances(512)
            .total_memories(128)
            .total_tables(512)
            .total_stacks(64)
            .max_memory_size(128 << 20)
            .decommit_batch_size(32)
            .linear_memory_keep_resident(0)
            .table_keep_resident(0);
        let mut config = Config::new();
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        BareWasmtime::with_config(wasm, &config)
    }

    fn with_config(wasm: &[u8], config: &Config) -> wasmtime::Result<BareWasmtime> {
        let engine = Engine::new(config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        wit_types::add_to_linker::<BareState, HasSelf<BareState>>(&mut linker, |s| s)?;
        logging::add_to_linker::<BareState, HasSelf<BareState>>(&mut linker, |s| s)?;
        state::add_to_linker::<BareState, HasSelf<BareState>>(&mut linker, |s| s)?;
        let component = Component::new(&engine, wasm)?;
        Ok(BareWasmtime { engine, linker, component })
    }

    /// One round: fresh store, `Linker::instantiate_async`, call `validate-config("{}")`.
    pub async fn instantiate_and_validate(&self) -> wasmtime::Result<bool> {
        let state = BareState {
            wasi: WasiCtx::builder().build(),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            hooks: DenyAll,
        };
        let mut store = Store::new(&self.engine, state);
        let instance =
            integration_world::Integration::instantiate_async(&mut store, &self.component, &self.linker).await?;
        let result = instance.trellis_plugin_notifier().call_validate_config(&mut store, "{}").await?;
        Ok(result.is_ok())
    }
}
