//! Load figures for the plugin runtime, printed as a table:
//! - call overhead p50/p99: Trellis path vs bare wasmtime, interleaved, same component, same run;
//! - compiled-cache load of one plugin (fresh runtime, install from a warm cache);
//! - start to ready with 10 cached plugins;
//! - 1,000 concurrent plugin calls: failures and RSS growth.
//!
//! Run: `make plugins && cargo bench -p trellis-plugin-host --bench plugin_load`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, missing_docs)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use trellis_plugin_host::bench_support::BareWasmtime;
use trellis_plugin_host::{
    Activation, CallTarget, Event, InMemoryStateStore, PluginHost, PluginKind, PluginRef, PluginRuntime, RuntimeConfig,
};

fn plugins_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/plugins"))
}

fn read(name: &str) -> Vec<u8> {
    let path = plugins_dir().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}; run `make plugins` first", path.display()))
}

fn new_runtime(config: RuntimeConfig) -> PluginRuntime {
    PluginRuntime::new(config, Arc::new(InMemoryStateStore::default()), trellis_core::plugins::Keystore::in_memory())
        .unwrap()
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let noop = read("fixture-noop");
    // Profiling aid: `PLUGIN_PROFILE_CALLS=200000 perf record … plugin_load-*` runs only the call path.
    if let Some(n) = std::env::var("PLUGIN_PROFILE_CALLS").ok().and_then(|v| v.parse::<u32>().ok()) {
        rt.block_on(async {
            let runtime = new_runtime(RuntimeConfig::without_cache());
            runtime.install(&noop, Activation::IfNewer).await.unwrap();
            let target = CallTarget::new("ws", PluginRef::Id("trellis.fixture.noop".into()), serde_json::json!({}));
            let t = Instant::now();
            for _ in 0..n {
                runtime.validate_config(&target, PluginKind::Integration).await.unwrap();
            }
            println!("{n} calls: mean {:.1} us", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
        });
        return;
    }
    println!(
        "plugin runtime load figures (wasmtime 48, {} CPUs)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // 1. Call overhead, interleaved so both paths see the same machine state.
    let (ours_p50, ours_p99, bare_p50, bare_p99) = rt.block_on(async {
        let runtime = new_runtime(RuntimeConfig::without_cache());
        runtime.install(&noop, Activation::IfNewer).await.unwrap();
        let target = CallTarget::new("ws", PluginRef::Id("trellis.fixture.noop".into()), serde_json::json!({}));
        let bare = BareWasmtime::new(&noop).unwrap();
        for _ in 0..2_000 {
            runtime.validate_config(&target, PluginKind::Integration).await.unwrap();
            bare.instantiate_and_validate().await.unwrap();
        }
        let (mut ours, mut theirs) = (Vec::with_capacity(20_000), Vec::with_capacity(20_000));
        for _ in 0..20_000 {
            let t = Instant::now();
            runtime.validate_config(&target, PluginKind::Integration).await.unwrap();
            ours.push(t.elapsed());
            let t = Instant::now();
            bare.instantiate_and_validate().await.unwrap();
            theirs.push(t.elapsed());
        }
        (
            percentile(&mut ours, 0.5),
            percentile(&mut ours, 0.99),
            percentile(&mut theirs, 0.5),
            percentile(&mut theirs, 0.99),
        )
    });
    println!(
        "call overhead      trellis p50 {:>8.1} us  p99 {:>8.1} us | bare wasmtime p50 {:>8.1} us  p99 {:>8.1} us | ratio p50 {:.2}x",
        ours_p50.as_secs_f64() * 1e6,
        ours_p99.as_secs_f64() * 1e6,
        bare_p50.as_secs_f64() * 1e6,
        bare_p99.as_secs_f64() * 1e6,
        ours_p50.as_secs_f64() / bare_p50.as_secs_f64()
    );

    // 2 and 3. Warm a cache with 10 plugins, then measure loads and start-to-ready.
    let cache = tempfile::tempdir().unwrap();
    let plugin_dir = tempfile::tempdir().unwrap();
    let mut names: Vec<String> = std::fs::read_dir(plugins_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".wasm")).map(str::to_owned))
        .collect();
    names.sort();
    names.truncate(10);
    assert_eq!(names.len(), 10, "need 10 built plugins, found {names:?}");
    for name in &names {
        std::fs::copy(plugins_dir().join(format!("{name}.wasm")), plugin_dir.path().join(format!("{name}.wasm")))
            .unwrap();
    }
    let mut config = RuntimeConfig::without_cache();
    config.cache_dir = Some(cache.path().to_owned());
    config.cache_key = Some(trellis_plugin_host::ArtefactKey::new([3; 32]));
    rt.block_on(async {
        let warm = new_runtime(config.clone());
        for (path, result) in warm.install_directory(plugin_dir.path()).await {
            result.unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        }
    });

    let slack = read("slack");
    // Slack is not among the ten; compile it into the cache before measuring loads.
    rt.block_on(new_runtime(config.clone()).install(&slack, Activation::IfNewer)).unwrap();
    let mut loads = Vec::new();
    let mut starts = Vec::new();
    for _ in 0..15 {
        let runtime = new_runtime(config.clone());
        let t = Instant::now();
        rt.block_on(runtime.install(&slack, Activation::IfNewer)).unwrap();
        loads.push(t.elapsed());
        drop(runtime);

        let t = Instant::now();
        let runtime = new_runtime(config.clone());
        let results = rt.block_on(runtime.install_directory(plugin_dir.path()));
        assert!(results.iter().all(|(_, r)| matches!(r, Ok(Some(_)))), "all 10 install");
        starts.push(t.elapsed());
        assert_eq!(runtime.cache_stats().map(|(_, misses)| misses), Some(0), "start must not compile");
    }
    println!(
        "cache load (1)     install from warm cache (load + InstancePre + describe): p50 {:>6.2} ms  max {:>6.2} ms",
        percentile(&mut loads, 0.5).as_secs_f64() * 1e3,
        percentile(&mut loads, 1.0).as_secs_f64() * 1e3
    );
    println!(
        "start, 10 cached   engine + pool + 10 installs from disk to ready: p50 {:>6.1} ms  max {:>6.1} ms",
        percentile(&mut starts, 0.5).as_secs_f64() * 1e3,
        percentile(&mut starts, 1.0).as_secs_f64() * 1e3
    );

    // 4. 1,000 concurrent calls.
    let (failures, rss_before, rss_peak, rss_after, elapsed) = rt.block_on(async {
        let runtime = new_runtime(RuntimeConfig::without_cache());
        runtime.install(&noop, Activation::IfNewer).await.unwrap();
        let target =
            Arc::new(CallTarget::new("ws", PluginRef::Id("trellis.fixture.noop".into()), serde_json::json!({})));
        let event = Arc::new(Event {
            id: "evt".into(),
            event_type: "certificate.issued".into(),
            occurred_at_ms: 0,
            workspace_id: "ws".into(),
            summary: "bench".into(),
            payload: serde_json::json!({}),
        });
        for _ in 0..200 {
            runtime.notify(&target, &event).await.unwrap();
        }
        let rss_before = rss_kib();
        let peak = Arc::new(AtomicU64::new(rss_before));
        let done = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (peak, done) = (peak.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_kib(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let t = Instant::now();
        let handles: Vec<_> = (0..1_000)
            .map(|_| {
                let (runtime, target, event) = (runtime.clone(), target.clone(), event.clone());
                tokio::spawn(async move { runtime.notify(&target, &event).await })
            })
            .collect();
        let mut failures = 0;
        for handle in handles {
            if !matches!(handle.await, Ok(Ok(_))) {
                failures += 1;
            }
        }
        let elapsed = t.elapsed();
        done.store(true, Ordering::Relaxed);
        sampler.join().unwrap();
        (failures, rss_before, peak.load(Ordering::Relaxed), rss_kib(), elapsed)
    });
    println!(
        "1,000 concurrent   failures {failures}  wall {:>6.1} ms  RSS before {:>7.1} MiB  peak {:>7.1} MiB (+{:.1} MiB)  after {:>7.1} MiB",
        elapsed.as_secs_f64() * 1e3,
        rss_before as f64 / 1024.0,
        rss_peak as f64 / 1024.0,
        (rss_peak.saturating_sub(rss_before)) as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
}
