//! Plugin runtime tests against real components built from `plugins/` (`make plugins`).

mod adversarial;
mod contract_v0_2;
mod install;
mod languages;
mod pure_worlds;
mod record_network;
mod slack;
mod upgrade;
mod worlds;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    Activation, CallLimits, CallTarget, Event, InMemoryStateStore, InstalledVersion, KindLimits, PluginHost, PluginRef,
    PluginRuntime, RuntimeConfig,
};

/// Bytes of a built plugin (`target/plugins/<name>.wasm`).
#[track_caller]
pub(crate) fn plugin_bytes(name: &str) -> Vec<u8> {
    let path = built_plugins_dir().join(format!("{name}.wasm"));
    match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) => panic!(
            "{} is missing ({err}): run `make plugins` (scripts/build-plugins.sh) to build the plugin components first",
            path.display()
        ),
    }
}

pub(crate) fn built_plugins_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("..").join(trellis_core::plugins::BUILT_PLUGINS_DIR)
}

/// Tight limits so adversarial calls end quickly.
pub(crate) fn test_limits() -> CallLimits {
    CallLimits {
        memory_bytes: 32 << 20,
        cpu_time: Duration::from_millis(300),
        wall_time: Duration::from_millis(1500),
        max_log_lines: 50,
    }
}

pub(crate) fn test_config() -> RuntimeConfig {
    let mut config = RuntimeConfig::without_cache();
    config.limits = KindLimits::uniform(test_limits());
    config.max_concurrent_calls = 64;
    config.egress.use_system_roots = false;
    config
}

pub(crate) fn runtime(config: RuntimeConfig) -> PluginRuntime {
    PluginRuntime::new(config, Arc::new(InMemoryStateStore::default()), trellis_core::plugins::Keystore::in_memory())
        .expect("runtime starts")
}

pub(crate) async fn install(runtime: &PluginRuntime, name: &str) -> InstalledVersion {
    runtime
        .install(&plugin_bytes(name), Activation::IfNewer)
        .await
        .unwrap_or_else(|err| panic!("install {name}: {err} ({})", err.code()))
}

pub(crate) fn event(event_type: &str) -> Event {
    Event {
        id: "evt_1".into(),
        event_type: event_type.into(),
        occurred_at_ms: 1_767_225_600_000,
        workspace_id: "ws_test".into(),
        summary: "Certificate api.example.com expires in 7 days".into(),
        payload: serde_json::json!({"commonName": "api.example.com", "notAfter": "2026-01-08T00:00:00Z"}),
    }
}

pub(crate) fn target(plugin_id: &str, config: serde_json::Value) -> CallTarget {
    CallTarget::new("ws_test", PluginRef::Id(plugin_id.into()), config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_plugin_describes_itself_and_answers() {
    let runtime = runtime(test_config());
    let installed = install(&runtime, "fixture-noop").await;
    assert_eq!(installed.info.id, "trellis.fixture.noop");
    assert_eq!(installed.wit_version, "0.2.0");
    assert!(installed.active);
    assert_eq!(installed.sha256.len(), 64);

    let delivery =
        runtime.notify(&target("trellis.fixture.noop", serde_json::json!({})), &event("certificate.expiring")).await;
    assert_eq!(delivery.expect("noop notify").reference.as_deref(), Some("noop"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_reported_error_is_not_a_sandbox_violation() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-noop").await;
    let err = runtime
        .notify(&target("trellis.fixture.noop", serde_json::json!({})), &event("fixture.reject"))
        .await
        .expect_err("fixture rejects");
    assert_eq!(err.code(), "plugin.reported");
    assert!(!err.is_sandbox_violation());
    match err {
        crate::PluginError::Reported { error, .. } => {
            assert_eq!(error.code(), "invalid_input")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_private_to_plugin_and_workspace() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-noop").await;
    let bump = |ws: &str| {
        let runtime = runtime.clone();
        let target = CallTarget::new(ws, PluginRef::Id("trellis.fixture.noop".into()), serde_json::json!({}));
        async move { runtime.notify(&target, &event("fixture.state")).await.expect("state call").reference }
    };
    assert_eq!(bump("ws_a").await.as_deref(), Some("1"));
    assert_eq!(bump("ws_a").await.as_deref(), Some("2"));
    assert_eq!(bump("ws_b").await.as_deref(), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_calls_queue_instead_of_failing() {
    let mut config = test_config();
    config.max_concurrent_calls = 32;
    let runtime = runtime(config);
    install(&runtime, "fixture-noop").await;
    let target = Arc::new(target("trellis.fixture.noop", serde_json::json!({})));
    let calls = (0..1000).map(|_| {
        let runtime = runtime.clone();
        let target = target.clone();
        tokio::spawn(async move { runtime.notify(&target, &event("certificate.issued")).await })
    });
    let results = futures_join_all(calls).await;
    let failures: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
    assert!(failures.is_empty(), "{} of 1000 calls failed: {:?}", failures.len(), failures.first());
    assert_eq!(runtime.calls_in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_start_loads_compiled_code_from_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = test_config();
    config.cache_dir = Some(dir.path().to_owned());
    config.cache_key = Some(crate::ArtefactKey::new([3; 32]));
    {
        let first = runtime(config.clone());
        install(&first, "fixture-noop").await;
        let (hits, misses) = first.cache_stats().expect("cache on");
        assert_eq!((hits, misses), (0, 1));
    }
    let second = runtime(config);
    install(&second, "fixture-noop").await;
    let (hits, misses) = second.cache_stats().expect("cache on");
    assert_eq!((hits, misses), (1, 0), "second start must load, not compile");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_precompiles_in_the_background_and_the_first_call_loads_the_artefact() {
    use trellis_core::plugins::{ComponentSource, DeferredVersion};
    struct Bytes(Vec<u8>);
    #[async_trait::async_trait]
    impl ComponentSource for Bytes {
        async fn component(&self, _: &str) -> Result<Vec<u8>, crate::PluginError> {
            Ok(self.0.clone())
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = test_config();
    config.cache_dir = Some(dir.path().to_owned());
    config.cache_key = Some(crate::ArtefactKey::new([5; 32]));
    // What an earlier install stored: its description and bytes (no artefact yet).
    let described = install(&runtime(test_config()), "fixture-noop").await;
    let deferred = |source: Vec<u8>| DeferredVersion {
        info: described.info.clone(),
        sha256: described.sha256.clone(),
        size_bytes: described.size_bytes,
        wit_version: described.wit_version.clone(),
        source: Arc::new(Bytes(source)),
        signer_key_id: None,
    };

    let restarted = runtime(config.clone());
    restarted.install_deferred(deferred(plugin_bytes("fixture-noop"))).expect("registered");
    restarted.activate("trellis.fixture.noop", &described.info.version).expect("active");
    assert_eq!(restarted.precompile().await, 1, "compiled into the cache off the request path");
    assert_eq!(restarted.precompile().await, 0, "nothing left to compile");
    let target = target("trellis.fixture.noop", serde_json::json!({}));
    restarted.notify(&target, &event("certificate.expiring")).await.expect("first call");
    let stats = restarted.artefact_stats().expect("cache on");
    assert_eq!((stats.hits, stats.rejected), (1, 0), "the first call loads the artefact: {stats:?}");

    // A tampered artefact is refused and the component compiled again, never loaded.
    for entry in std::fs::read_dir(dir.path()).expect("cache dir") {
        let path = entry.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("artefact");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&path, bytes).expect("tamper");
    }
    let again = runtime(config);
    again.install_deferred(deferred(plugin_bytes("fixture-noop"))).expect("registered");
    again.activate("trellis.fixture.noop", &described.info.version).expect("active");
    again.notify(&target, &event("certificate.expiring")).await.expect("call after tampering");
    let stats = again.artefact_stats().expect("cache on");
    assert_eq!((stats.hits, stats.rejected), (0, 1), "{stats:?}");
}

/// Awaits spawned tasks, turning a panicked task into a failed call.
pub(crate) async fn futures_join_all<T>(
    handles: impl IntoIterator<Item = tokio::task::JoinHandle<Result<T, crate::PluginError>>>,
) -> Vec<Result<T, crate::PluginError>> {
    let mut out = Vec::new();
    for handle in handles {
        out.push(match handle.await {
            Ok(result) => result,
            Err(err) => Err(crate::PluginError::Internal(format!("task panicked: {err}"))),
        });
    }
    out
}

/// State lives in the state store, not in the runtime: a fresh runtime over the same store
/// continues the count. (The database-backed store and its quota are tested in trellis-store.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_runtimes() {
    let state = Arc::new(crate::InMemoryStateStore::default());
    let bump = |runtime: PluginRuntime| async move {
        let target = CallTarget::new("ws_a", PluginRef::Id("trellis.fixture.noop".into()), serde_json::json!({}));
        runtime.notify(&target, &event("fixture.state")).await.expect("state call").reference
    };
    for expected in ["1", "2"] {
        // A fresh runtime each time: the count lives in the store, not in the process.
        let runtime = PluginRuntime::new(test_config(), state.clone(), trellis_core::plugins::Keystore::in_memory())
            .expect("runtime");
        install(&runtime, "fixture-noop").await;
        assert_eq!(bump(runtime).await.as_deref(), Some(expected));
    }
}

/// Collects formatted tracing output of the current thread.
#[derive(Clone, Default)]
struct LogBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn guest_logs_and_stderr_reach_tracing_attributed_to_the_plugin() {
    let buffer = LogBuffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let runtime = runtime(test_config());
    install(&runtime, "fixture-noop").await;
    install(&runtime, "fixture-trap").await;
    let noop = CallTarget::new("ws_logs", PluginRef::Id("trellis.fixture.noop".into()), serde_json::json!({}));
    runtime.notify(&noop, &event("fixture.state")).await.expect("state call");
    let err = runtime
        .notify(&target("trellis.fixture.trap", serde_json::json!({})), &event("certificate.issued"))
        .await
        .expect_err("trap");
    assert_eq!(err.code(), "plugin.trapped");

    let logs = String::from_utf8_lossy(&buffer.0.lock().expect("log buffer")).to_string();
    // The structured `logging` import, with the plugin and workspace attached by the host.
    assert!(
        logs.lines()
            .any(|l| l.contains("state bumped") && l.contains("trellis.fixture.noop@0.1.0") && l.contains("ws_logs")),
        "{logs}"
    );
    // A flood of output succeeds but only the call's log budget reaches the logs.
    let flooded = runtime.notify(&noop, &event("fixture.flood")).await.expect("flood call");
    assert_eq!(flooded.reference.as_deref(), Some("flooded"));
    let logs_after = String::from_utf8_lossy(&buffer.0.lock().expect("log buffer")).to_string();
    let flood_lines = logs_after.lines().filter(|l| l.contains("flood")).count();
    assert!(flood_lines > 0 && flood_lines <= test_limits().max_log_lines as usize, "{flood_lines} flood lines logged");
    // The guest's panic message went to its stderr, which the host captured.
    assert!(logs.lines().any(|l| l.contains("fixture trap: deliberate panic") && l.contains("stderr")), "{logs}");
}
