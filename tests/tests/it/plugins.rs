//! Plugin lifecycle through the real binary: first-start install, API install/activate/
//! rollback/remove (instance admins only), refusals, CLI install picked up by the server,
//! the watched directory, and workspace bindings.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use trellis_tests::{Client, Server};

fn plugin_path(name: &str) -> PathBuf {
    trellis_tests::plugin_file(name)
}

fn plugin_bytes(name: &str) -> Vec<u8> {
    std::fs::read(plugin_path(name)).expect("read plugin")
}

async fn wait_for_plugin(admin: &Client, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let res = admin.get(&format!("/api/plugins/{id}")).await;
        if res.status == 200 {
            return res.body["data"].clone();
        }
        assert!(Instant::now() < deadline, "plugin {id} never appeared: {}", res.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn first_start_installs_first_party_plugins() {
    plugin_path("slack");
    let server = Server::start();
    let admin = server.admin().await;
    let res = admin.get("/api/plugins").await;
    assert_eq!(res.status, 200, "{}", res.body);
    let slack = res.body["data"].as_array().and_then(|all| all.iter().find(|p| p["id"] == "io.trellis.slack")).cloned();
    let slack = slack.unwrap_or_else(|| panic!("slack not installed on first start: {}", res.body));
    assert_eq!(slack["kind"], "integration");
    assert_eq!(slack["activeVersion"], "0.2.0");
    let info = &slack["versions"][0]["info"];
    assert_eq!(info["secretFields"], serde_json::json!([{"pointer": "/webhookUrl", "withheld": false}]));
    assert_eq!(info["configSchema"]["required"], serde_json::json!(["webhookUrl"]));
    assert_eq!(slack["versions"][0]["sha256"].as_str().map(str::len), Some(64));

    let doc = admin.get("/api/openapi.json").await;
    for path in ["/api/plugins", "/api/plugins/{id}/rollback", "/api/plugin-bindings"] {
        assert!(doc.body["paths"].get(path).is_some(), "{path} missing from the OpenAPI document");
    }
}

#[tokio::test]
async fn install_upgrade_rollback_and_remove_over_the_api() {
    let server = Server::start();
    let admin = server.admin().await;

    let v1 = admin.post_raw("/api/plugins", "application/wasm", plugin_bytes("fixture-upgrade-v1")).await;
    assert_eq!(v1.status, 201, "{}", v1.body);
    assert_eq!(v1.body["data"]["info"]["id"], "trellis.fixture.upgrade");
    assert_eq!(v1.body["data"]["active"], true);
    let v2 = admin.post_raw("/api/plugins", "application/wasm", plugin_bytes("fixture-upgrade-v2")).await;
    assert_eq!(v2.status, 201, "{}", v2.body);

    let shown = admin.get("/api/plugins/trellis.fixture.upgrade").await;
    assert_eq!(shown.body["data"]["activeVersion"], "2.0.0");
    assert_eq!(shown.body["data"]["previousVersions"], json!(["1.0.0"]));

    let rolled = admin.post("/api/plugins/trellis.fixture.upgrade/rollback", json!({})).await;
    assert_eq!(rolled.status, 200, "{}", rolled.body);
    assert_eq!(rolled.body["data"]["activeVersion"], "1.0.0");
    let activated = admin.post("/api/plugins/trellis.fixture.upgrade/versions/2.0.0/activate", json!({})).await;
    assert_eq!(activated.body["data"]["activeVersion"], "2.0.0");

    let busy = admin.delete("/api/plugins/trellis.fixture.upgrade/versions/2.0.0").await;
    assert_eq!(busy.status, 409, "{}", busy.body);
    assert_eq!(admin.delete("/api/plugins/trellis.fixture.upgrade/versions/1.0.0").await.status, 204);
    assert_eq!(admin.delete("/api/plugins/trellis.fixture.upgrade").await.status, 204);
    assert_eq!(admin.get("/api/plugins/trellis.fixture.upgrade").await.status, 404);

    // Every lifecycle step is audited.
    let audit = admin.get("/api/audit-logs?targetType=plugin").await;
    let actions: Vec<&str> = audit.body["data"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["action"].as_str()).collect())
        .unwrap_or_default();
    for action in ["plugin.installed", "plugin.rolled_back", "plugin.activated", "plugin.removed"] {
        assert!(actions.contains(&action), "{action} missing from {actions:?}");
    }
}

#[tokio::test]
async fn install_refusals_are_clear_and_only_admins_install() {
    let server = Server::start();
    let admin = server.admin().await;

    let junk = admin.post_raw("/api/plugins", "application/wasm", b"not a component".to_vec()).await;
    assert_eq!(junk.status, 400, "{}", junk.body);
    assert_eq!(junk.error_code(), "VALIDATION_ERROR");
    assert!(junk.body.to_string().contains("plugin.not_a_component"), "{}", junk.body);

    let first = admin.post_raw("/api/plugins", "application/wasm", plugin_bytes("fixture-noop")).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let again = admin.post_raw("/api/plugins", "application/wasm", plugin_bytes("fixture-noop")).await;
    assert_eq!(again.status, 409, "{}", again.body);

    let (member, _) = server.new_user("member@example.com").await;
    let refused = member.post_raw("/api/plugins", "application/wasm", plugin_bytes("fixture-trap")).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(member.get("/api/plugins").await.status, 403);
    // Testing a binding makes every URL of the given config reachable: operators only.
    let probe = member
        .post(
            "/api/plugin-bindings/integration/slack/test",
            json!({ "config": { "webhookUrl": "https://example.com/x" } }),
        )
        .await;
    assert_eq!(probe.status, 403, "{}", probe.body);
}

#[tokio::test]
async fn a_large_upload_from_a_non_administrator_is_refused_unread() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start();
    server.cli(&["user", "create", "--email", "uploader@example.com", "--password", "password-123"]).expect("user");
    let login = trellis_tests::Client::new(&server, None)
        .post("/api/auth/login", json!({ "email": "uploader@example.com", "password": "password-123" }))
        .await;
    let cookie = login.header("set-cookie").unwrap_or_default().split(';').next().unwrap_or_default().to_string();
    // Announce 40 MiB but send only 1 KiB: a server that reads the body before authorizing
    // waits for the rest (and would answer 413 at 32 MiB); one that authorizes first answers
    // 403 at once.
    let address = server.base_url.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let head = format!(
        "POST /api/plugins HTTP/1.1\r\nHost: {address}\r\nCookie: {cookie}\r\nContent-Type: application/wasm\r\nContent-Length: {}\r\n\r\n",
        40 << 20
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&[0u8; 1024]).await.expect("some body");
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("the server answered without waiting for the body")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("FORBIDDEN"), "{answer}");
}

#[tokio::test]
async fn cli_install_is_served_by_the_running_server() {
    let server = Server::start();
    let admin = server.admin().await;
    let path = plugin_path("fixture-noop");
    let installed = server.cli(&["plugin", "install", path.to_str().unwrap_or_default()]).expect("cli install");
    assert_eq!(installed["info"]["id"], "trellis.fixture.noop");
    // The server follows the database (sync every few seconds).
    let shown = wait_for_plugin(&admin, "trellis.fixture.noop").await;
    assert_eq!(shown["activeVersion"], "0.1.0");
    let listed = server.cli(&["plugin", "list"]).expect("cli list");
    assert!(listed.as_array().is_some_and(|all| all.iter().any(|p| p["id"] == "trellis.fixture.noop")), "{listed}");
}

#[tokio::test]
async fn dropping_a_component_into_the_plugin_dir_installs_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(&[("TRELLIS_PLUGIN_DIR", dir.path().to_str().unwrap_or_default())]);
    let admin = server.admin().await;
    std::fs::write(dir.path().join("verifier.wasm"), plugin_bytes("fixture-verifier")).expect("drop");
    let shown = wait_for_plugin(&admin, "trellis.fixture.verifier").await;
    assert_eq!(shown["kind"], "attestation-verifier");
}

#[tokio::test]
async fn workspaces_bind_types_to_plugins() {
    let server = Server::start();
    let admin = server.admin().await;
    let bound = admin
        .put("/api/plugin-bindings", json!({ "kind": "integration", "type": "slack", "pluginId": "io.trellis.slack" }))
        .await;
    assert_eq!(bound.status, 200, "{}", bound.body);
    let listed = admin.get("/api/plugin-bindings").await;
    assert_eq!(
        listed.body["data"],
        json!([{ "kind": "integration", "type": "slack", "pluginId": "io.trellis.slack" }])
    );

    let wrong_kind = admin
        .put("/api/plugin-bindings", json!({ "kind": "ca-connector", "type": "acme", "pluginId": "io.trellis.slack" }))
        .await;
    assert_eq!(wrong_kind.status, 400, "{}", wrong_kind.body);
    assert_eq!(admin.delete("/api/plugin-bindings/integration/slack").await.status, 204);
    assert_eq!(admin.get("/api/plugin-bindings").await.body["data"], json!([]));
}

#[tokio::test]
async fn issuance_policies_install_bind_and_check_their_configuration() {
    let server = Server::start();
    let admin = server.admin().await;
    let installed = admin.post_raw("/api/plugins", "application/wasm", plugin_bytes("fixture-policy")).await;
    assert_eq!(installed.status, 201, "{}", installed.body);
    assert_eq!(installed.body["data"]["info"]["kind"], "issuance-policy");
    let binding = json!({ "kind": "issuance-policy", "type": "fixture-policy", "pluginId": "trellis.fixture.policy" });
    let bound = admin.put("/api/plugin-bindings", binding.clone()).await;
    assert_eq!(bound.status, 200, "{}", bound.body);
    assert_eq!(admin.get("/api/plugin-bindings").await.body["data"], json!([binding]));

    let path = "/api/plugin-bindings/issuance-policy/fixture-policy/test";
    let good =
        admin.post(path, json!({ "config": { "allowedSuffixes": [".example.com"], "maxValidityDays": 90 } })).await;
    assert_eq!(good.status, 200, "{}", good.body);
    assert_eq!(good.body["data"]["success"], true, "{}", good.body);
    let bad = admin.post(path, json!({ "config": { "maxValidityDays": 0 } })).await;
    assert_eq!(bad.status, 200, "{}", bad.body);
    assert_eq!(bad.body["data"]["success"], false, "{}", bad.body);
    assert!(bad.body["data"]["message"].as_str().unwrap_or_default().contains("maxValidityDays"), "{}", bad.body);
}

/// The lines of `log` saying a plugin was compiled for its first call.
fn first_call_loads(log: &str) -> Vec<String> {
    log.lines().filter(|line| line.contains("plugin loaded on its first call")).map(str::to_owned).collect()
}

async fn create_slack_integration(admin: &Client, name: &str) {
    let res = admin
        .post(
            "/api/integrations/external",
            json!({
                "name": name,
                "type": "slack",
                "configuration": { "webhookUrl": "https://hooks.slack.com/services/T0001/B0001/secret" }
            }),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
}

/// Neither the first start (which installs the first-party plugins) nor a restart keeps
/// compiled code: a plugin is compiled, or loaded from the compiled-code cache, on its first
/// call, and only the plugin called.
#[tokio::test]
async fn plugins_are_compiled_on_their_first_call_not_at_start() {
    let mut server = Server::start();
    let admin = server.admin().await;
    assert!(first_call_loads(&server.flushed_log().await).is_empty());
    // Creating a Slack integration has the Slack plugin validate its configuration: a call.
    create_slack_integration(&admin, "first").await;
    let loads = first_call_loads(&server.flushed_log().await);
    assert_eq!(loads.len(), 1, "{loads:?}");
    assert!(loads[0].contains("io.trellis.slack@0.2.0"), "{loads:?}");
    create_slack_integration(&admin, "second").await;
    assert_eq!(first_call_loads(&server.flushed_log().await).len(), 1, "compiled once");

    let listed = admin.get("/api/plugins").await.body["data"].clone();
    assert!(listed.as_array().is_some_and(|all| all.len() >= 10), "{listed}");
    server.kill_and_restart();
    let admin = server.admin().await;
    let relisted = admin.get("/api/plugins").await.body["data"].clone();
    assert_eq!(relisted, listed, "the same versions, descriptions and activations after a restart");
    assert!(first_call_loads(&server.flushed_log().await).is_empty(), "nothing compiled at start");
    create_slack_integration(&admin, "third").await;
    let loads = first_call_loads(&server.flushed_log().await);
    assert_eq!(loads.len(), 1, "{loads:?}");
    assert!(loads[0].contains("io.trellis.slack@0.2.0"), "{loads:?}");
}

/// A version whose stored bytes no longer match their digest is registered at start (from its
/// description) but never run: its calls fail with 503 saying why, and other plugins work.
#[tokio::test]
async fn a_stored_component_not_matching_its_digest_fails_its_calls_not_the_start() {
    let mut server = Server::start();
    let admin = server.admin().await;
    let plugins = admin.get("/api/plugins").await.body["data"].clone();
    let sha256 = |id: &str| {
        let plugin = plugins.as_array().and_then(|all| all.iter().find(|p| p["id"] == id)).cloned();
        let plugin = plugin.unwrap_or_else(|| panic!("{id} not installed: {plugins}"));
        plugin["versions"][0]["sha256"].as_str().expect("sha256").to_owned()
    };
    let (slack, teams) = (sha256("io.trellis.slack"), sha256("io.trellis.msteams"));
    server.sql(&format!(
        "UPDATE plugin_components SET bytes = (SELECT bytes FROM plugin_components WHERE sha256 = '{teams}') \
         WHERE sha256 = '{slack}'"
    ));
    server.kill_and_restart();
    let admin = server.admin().await;
    let res = admin
        .post(
            "/api/integrations/external",
            json!({ "name": "chat", "type": "slack", "configuration": { "webhookUrl": "https://hooks.slack.com/services/T0/B0/x" } }),
        )
        .await;
    assert_eq!((res.status, res.error_code()), (503, "SERVICE_UNAVAILABLE"), "{}", res.body);
    assert_eq!(res.body["error"]["details"]["code"], "plugin.unloadable", "{}", res.body);
    let message = res.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("does not match its digest"), "{message}");
    let res = admin
        .post(
            "/api/integrations/external",
            json!({ "name": "teams", "type": "msteams", "configuration": { "webhookUrl": "https://example.webhook.office.com/webhookb2/x" } }),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
}
