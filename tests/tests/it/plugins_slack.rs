//! The Slack plugin end to end through the real binary: installed on first start, bound in a
//! workspace, tested through the binding; the message reaches a local HTTPS receiver (trusted via
//! TRELLIS_PLUGIN_CA_BUNDLE), and a host that is not the record's is refused.

use serde_json::json;
use trellis_tests::receiver::Receiver;
use trellis_tests::Server;

#[tokio::test]
async fn slack_bound_in_a_workspace_posts_to_the_webhook_and_nowhere_else() {
    let receiver = Receiver::start().await;
    let bundle = receiver.bundle_path();
    let server = Server::start_with(&[
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
        ("TRELLIS_PLUGIN_CA_BUNDLE", bundle.as_str()),
    ]);
    let admin = server.admin().await;

    let bound = admin
        .put("/api/plugin-bindings", json!({ "kind": "integration", "type": "slack", "pluginId": "io.trellis.slack" }))
        .await;
    assert_eq!(bound.status, 200, "is target/plugins/slack.wasm built (`make plugins`)? {}", bound.body);

    let webhook = receiver.url("/services/T000/B000/XXXX");
    let report =
        admin.post("/api/plugin-bindings/integration/slack/test", json!({ "config": { "webhookUrl": webhook } })).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.body["data"]["success"], true, "{}", report.body);
    assert_eq!(report.body["data"]["checks"][1]["name"], "webhook-delivery");

    let got = receiver.wait_for(1, std::time::Duration::from_secs(20)).await;
    let request = got.first().expect("the webhook received a request");
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/services/T000/B000/XXXX"));
    let body: serde_json::Value = serde_json::from_slice(&request.body).expect("JSON body");
    assert_eq!(body["text"], ":white_check_mark: Trellis connection test");
    assert_eq!(body["blocks"][0]["type"], "section");

    // A config whose URL is not https is the plugin's own validation error.
    let insecure = admin
        .post(
            "/api/plugin-bindings/integration/slack/test",
            json!({ "config": { "webhookUrl": "http://localhost/x" } }),
        )
        .await;
    assert_eq!(insecure.body["data"]["success"], false, "{}", insecure.body);
    assert_eq!(insecure.body["data"]["details"]["code"], "plugin.reported");

    // Cloud metadata stays unreachable even with private networks allowed.
    let metadata = admin
        .post(
            "/api/plugin-bindings/integration/slack/test",
            json!({ "config": { "webhookUrl": "https://169.254.169.254/latest/meta-data" } }),
        )
        .await;
    assert_eq!(metadata.body["data"]["success"], false, "{}", metadata.body);
    let checks = metadata.body["data"]["checks"].as_array().cloned().unwrap_or_default();
    assert!(
        checks.iter().any(
            |c| c["name"] == "host-policy" && c["message"].as_str().is_some_and(|m| m.contains("metadata_address"))
        ),
        "{}",
        metadata.body
    );
    assert_eq!(receiver.requests().len(), 1, "nothing else reached the receiver");
}
