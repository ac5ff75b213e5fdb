//! Criterion: per-call overhead of the Trellis plugin path (admission, fresh store with limits,
//! instantiate from `InstancePre`, no-op export, result classification) against bare wasmtime
//! (`Linker::instantiate_async` + the same export) on the same component, in the same run.
//!
//! Run: `make plugins && cargo bench -p trellis-plugin-host --bench plugin_call`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use trellis_plugin_host::bench_support::BareWasmtime;
use trellis_plugin_host::{CallTarget, PluginHost, PluginKind, PluginRef};

fn noop_component() -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/plugins/fixture-noop.wasm");
    std::fs::read(path).unwrap_or_else(|err| panic!("{path}: {err}; run `make plugins` first"))
}

fn call_overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let wasm = noop_component();
    let runtime = rt.block_on(trellis_plugin_host::bench_support::runtime_with(&wasm)).unwrap();
    let target = CallTarget::new("ws", PluginRef::Id("trellis.fixture.noop".into()), serde_json::json!({}));
    let bare = BareWasmtime::new(&wasm).unwrap();
    let bare_pooling = BareWasmtime::with_pooling(&wasm).unwrap();

    let mut group = c.benchmark_group("plugin_call");
    group.bench_function("bare_wasmtime_instantiate_and_call", |b| {
        b.iter(|| assert!(rt.block_on(bare.instantiate_and_validate()).unwrap()))
    });
    group.bench_function("bare_wasmtime_pooling_instantiate_and_call", |b| {
        b.iter(|| assert!(rt.block_on(bare_pooling.instantiate_and_validate()).unwrap()))
    });
    group.bench_function("trellis_instance_pre_and_call", |b| {
        b.iter(|| rt.block_on(runtime.validate_config(&target, PluginKind::Integration)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, call_overhead);
criterion_main!(benches);
