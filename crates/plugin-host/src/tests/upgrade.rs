//! Hot upgrade and rollback under a stream of calls: no failed calls, in-flight calls finish
//! on the version they started with, later calls use the new active version.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::tests::{event, install, plugin_bytes, runtime, target, test_config};
use crate::{Activation, CallLimits, KindLimits, PluginHost, PluginRuntime};

struct Sample {
    started: Instant,
    finished: Instant,
    version: Result<String, String>,
}

async fn stream_calls(runtime: PluginRuntime, stop: Arc<AtomicBool>, hold_ms: u64) -> Vec<Sample> {
    let target = target("trellis.fixture.upgrade", json!({ "holdMs": hold_ms }));
    let mut samples = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let result = runtime.notify(&target, &event("certificate.issued")).await;
        samples.push(Sample {
            started,
            finished: Instant::now(),
            version: result.map(|d| d.reference.unwrap_or_default()).map_err(|e| format!("{} {e}", e.code())),
        });
    }
    samples
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_and_rollback_under_streaming_calls() {
    let mut config = test_config();
    config.limits = KindLimits::uniform(CallLimits { wall_time: Duration::from_secs(10), ..config.limits.integration });
    let runtime = runtime(config);
    install(&runtime, "fixture-upgrade-v1").await;

    let stop = Arc::new(AtomicBool::new(false));
    let streams: Vec<_> = (0..4).map(|_| tokio::spawn(stream_calls(runtime.clone(), stop.clone(), 20))).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A long call in flight across the upgrade.
    let long_v1 = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let result = runtime.notify(&target("trellis.fixture.upgrade", json!({"holdMs": 4000})), &event("x")).await;
            (Instant::now(), result)
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;

    let upgrade_started = Instant::now();
    let v2 = runtime.install(&plugin_bytes("fixture-upgrade-v2"), Activation::IfNewer).await.expect("install v2");
    let upgraded = Instant::now();
    assert!(v2.active);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let long_v2 = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            runtime.notify(&target("trellis.fixture.upgrade", json!({"holdMs": 1000})), &event("x")).await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let rollback_started = Instant::now();
    runtime.rollback("trellis.fixture.upgrade").expect("rollback");
    let rolled_back = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);

    let mut samples = Vec::new();
    for stream in streams {
        samples.extend(stream.await.expect("stream task"));
    }
    let failures: Vec<_> = samples.iter().filter_map(|s| s.version.as_ref().err()).collect();
    assert!(failures.is_empty(), "failed calls during upgrade: {failures:?}");
    assert!(samples.len() > 20, "too few calls streamed: {}", samples.len());

    for s in &samples {
        let version = s.version.as_deref().unwrap_or("");
        if s.finished < upgrade_started || s.started > rolled_back {
            assert_eq!(version, "v1", "call outside the upgrade window");
        } else if s.started > upgraded && s.finished < rollback_started {
            assert_eq!(version, "v2", "call after the upgrade");
        }
    }
    assert!(samples.iter().any(|s| s.started > upgraded && s.version.as_deref() == Ok("v2")));

    // In-flight calls finished on the version they started with.
    let (long_v1_finished, long_v1) = long_v1.await.expect("task");
    let long_v1 = long_v1.expect("long v1 call");
    assert!(long_v1_finished > upgraded, "the long call must span the upgrade");
    assert_eq!(long_v1.reference.as_deref(), Some("v1"), "call in flight during upgrade must finish on v1");
    let long_v2 = long_v2.await.expect("task").expect("long v2 call");
    assert_eq!(long_v2.reference.as_deref(), Some("v2"), "call in flight during rollback must finish on v2");
}
