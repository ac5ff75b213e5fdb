//! Install-time refusals, lifecycle operations and bindings.

use serde_json::json;

use crate::tests::{event, install, plugin_bytes, runtime, test_config};
use crate::{Activation, CallTarget, PluginError, PluginHost, PluginKind, PluginRef};

async fn refusal(wasm: &[u8]) -> (String, String) {
    let runtime = runtime(test_config());
    let err = runtime.install(wasm, Activation::IfNewer).await.expect_err("refused");
    (err.code().to_owned(), err.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_what_is_not_a_component() {
    let (code, message) = refusal(b"definitely not wasm").await;
    assert_eq!(code, "plugin.not_a_component");
    assert!(message.contains("wasm32-wasip2"), "{message}");

    let core_module = wat::parse_str("(module (func (export \"f\")))").expect("wat");
    let (code, message) = refusal(&core_module).await;
    assert_eq!(code, "plugin.not_a_component");
    assert!(message.contains("core wasm module"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_imports_the_host_does_not_provide() {
    let component = wat::parse_str(r#"(component (import "evil:escape/filesystem@1.0.0" (instance)))"#).expect("wat");
    let (code, message) = refusal(&component).await;
    assert_eq!(code, "plugin.unsupported_import");
    assert!(message.contains("evil:escape/filesystem@1.0.0"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_incompatible_wit_versions_and_unknown_worlds() {
    let newer = wat::parse_str(r#"(component (instance $i) (export "trellis:plugin/notifier@0.2.0" (instance $i)))"#)
        .expect("wat");
    let (code, message) = refusal(&newer).await;
    assert_eq!(code, "plugin.incompatible_wit_version");
    assert!(message.contains("trellis:plugin/notifier@0.2.0") && message.contains("0.1.x"), "{message}");

    let nothing = wat::parse_str("(component)").expect("wat");
    let (code, _) = refusal(&nothing).await;
    assert_eq!(code, "plugin.unknown_world");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_duplicate_id_and_version() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-noop").await;
    let err = runtime.install(&plugin_bytes("fixture-noop"), Activation::IfNewer).await.expect_err("duplicate");
    assert_eq!(err.code(), "plugin.duplicate_version");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_activate_rollback_remove() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-upgrade-v2").await;
    // An older version installed later does not take over.
    let v1 = install(&runtime, "fixture-upgrade-v1").await;
    assert!(!v1.active);

    let shown = runtime.show("trellis.fixture.upgrade").expect("installed");
    assert_eq!(shown.active_version.as_deref(), Some("2.0.0"));
    assert_eq!(shown.versions.iter().map(|v| v.info.version.to_string()).collect::<Vec<_>>(), ["2.0.0", "1.0.0"]);
    assert_eq!(runtime.list().len(), 1);

    let one = semver::Version::new(1, 0, 0);
    let two = semver::Version::new(2, 0, 0);
    runtime.activate("trellis.fixture.upgrade", &one).expect("activate v1");
    assert_eq!(runtime.rollback("trellis.fixture.upgrade").expect("rollback"), two);
    assert_eq!(
        runtime.remove("trellis.fixture.upgrade", Some(&two)).expect_err("active").code(),
        "plugin.version_active"
    );
    runtime.remove("trellis.fixture.upgrade", Some(&one)).expect("remove inactive v1");
    assert_eq!(
        runtime.rollback("trellis.fixture.upgrade").expect_err("nothing left").code(),
        "plugin.no_previous_version"
    );
    runtime.remove("trellis.fixture.upgrade", None).expect("remove plugin");
    assert!(runtime.list().is_empty());
    // Removed bytes can be installed again.
    install(&runtime, "fixture-upgrade-v1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_type_resolves_by_default_and_by_workspace_binding() {
    let runtime = runtime(test_config());
    install(&runtime, "fixture-noop").await;
    let by_type =
        |ws: &str, service_type: &str| CallTarget::new(ws, PluginRef::Serving(service_type.into()), json!({}));

    // Only one plugin serves the type: it is the default.
    let delivery = runtime.notify(&by_type("ws_a", "fixture-noop"), &event("x")).await.expect("default binding");
    assert_eq!(delivery.reference.as_deref(), Some("noop"));
    let err = runtime.notify(&by_type("ws_a", "pagerduty"), &event("x")).await.expect_err("nothing serves it");
    assert_eq!(err.code(), "plugin.not_bound");

    // A binding is per workspace. One naming a plugin whose active version does not serve the
    // type (the type moved to another plugin in an upgrade) resolves as if unbound.
    install(&runtime, "fixture-upgrade-v1").await;
    runtime.bind("ws_b", PluginKind::Integration, "fixture-upgrade", "trellis.fixture.upgrade").expect("bind");
    let bound = runtime.notify(&by_type("ws_b", "fixture-upgrade"), &event("x")).await.expect("bound");
    assert_eq!(bound.reference.as_deref(), Some("v1"));
    runtime.bind("ws_b", PluginKind::Integration, "fixture-noop", "trellis.fixture.upgrade").expect("bind");
    let moved = runtime.notify(&by_type("ws_b", "fixture-noop"), &event("x")).await.expect("the serving plugin");
    assert_eq!(moved.reference.as_deref(), Some("noop"));
    let unbound = runtime.notify(&by_type("ws_a", "fixture-noop"), &event("x")).await.expect("default");
    assert_eq!(unbound.reference.as_deref(), Some("noop"));
    // Binding the wrong kind is refused.
    let err = runtime.bind("ws_b", PluginKind::CaConnector, "acme", "trellis.fixture.noop").expect_err("wrong kind");
    assert!(matches!(err, PluginError::WrongKind { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_directory_installs_dropped_components() {
    let runtime = runtime(test_config());
    let dir = tempfile::tempdir().expect("tempdir");
    let watcher = runtime.spawn_directory_watcher(dir.path().to_owned(), std::time::Duration::from_millis(50));
    std::fs::write(dir.path().join("noop.wasm"), plugin_bytes("fixture-noop")).expect("drop file");
    std::fs::write(dir.path().join("junk.wasm"), b"junk").expect("drop junk");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while runtime.show("trellis.fixture.noop").is_none() {
        assert!(tokio::time::Instant::now() < deadline, "watched directory never installed the plugin");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    watcher.abort();
    assert_eq!(runtime.list().len(), 1, "junk is refused, not installed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_are_refused_in_a_policy_naming_the_import_and_the_build_flag() {
    let component = wat::parse_str(
        r#"(component
            (import "wasi:sockets/tcp@0.2.0" (instance))
            (instance $i)
            (export "trellis:plugin/policy@0.2.0" (instance $i)))"#,
    )
    .expect("wat");
    let (code, message) = refusal(&component).await;
    assert_eq!(code, "plugin.unsupported_import");
    assert!(message.contains("wasi:sockets/tcp@0.2.0"), "{message}");
    assert!(message.contains("--stub-wasi") && message.contains("--disable http"), "{message}");
}

#[test]
fn what_each_world_may_import() {
    use crate::install::forbidden_imports;
    let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    // What every Rust std guest imports passes in every world.
    let rust_std = names(&["wasi:cli/environment@0.2.6", "wasi:filesystem/preopens@0.2.6", "wasi:io/streams@0.2.6"]);
    for kind in
        [PluginKind::CaConnector, PluginKind::Integration, PluginKind::IssuancePolicy, PluginKind::AttestationVerifier]
    {
        assert!(forbidden_imports(kind, &rust_std).is_none(), "{kind}");
    }
    // wasi:http: connectors and integrations only.
    let http = names(&["wasi:http/outgoing-handler@0.2.0"]);
    assert!(forbidden_imports(PluginKind::Integration, &http).is_none());
    let refused = forbidden_imports(PluginKind::IssuancePolicy, &http).expect("a policy may not reach out");
    assert!(
        refused.to_string().contains("wasi:http/outgoing-handler@0.2.0 (a issuance-policy is pure computation"),
        "{refused}"
    );
    // Sockets: linked but granted nothing where the world may reach out (componentize-py cannot
    // drop them without dropping wasi:http); refused in the pure worlds.
    let sockets = names(&["wasi:sockets/udp@0.2.0"]);
    assert!(forbidden_imports(PluginKind::Integration, &sockets).is_none());
    assert!(forbidden_imports(PluginKind::CaConnector, &sockets).is_none());
    assert!(forbidden_imports(PluginKind::IssuancePolicy, &sockets).is_some());
    assert!(forbidden_imports(PluginKind::AttestationVerifier, &sockets).is_some());
}
