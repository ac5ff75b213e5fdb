//! The Slack plugin end to end through the real binary: installed on first start, bound in a
//! workspace, tested through the binding; the message reaches a local HTTPS receiver (trusted via
//! TRELLIS_PLUGIN_CA_BUNDLE), and a host that is not the record's is refused.

use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use trellis_tests::Server;

struct Received {
    head: String,
    body: Vec<u8>,
}

/// An HTTPS receiver with a fresh self-signed certificate for `localhost`.
async fn https_receiver() -> (u16, String, mpsc::UnboundedReceiver<Received>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    let cert_pem = certified.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut data = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = tls.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    let Some(split) = data.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                    let head = String::from_utf8_lossy(&data[..split]).to_string();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if data.len() >= split + 4 + length {
                        let _ = tx.send(Received { head, body: data[split + 4..split + 4 + length].to_vec() });
                        let _ =
                            tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
                        let _ = tls.shutdown().await;
                        return;
                    }
                }
            });
        }
    });
    (port, cert_pem, rx)
}

#[tokio::test]
async fn slack_bound_in_a_workspace_posts_to_the_webhook_and_nowhere_else() {
    let (port, cert_pem, mut received) = https_receiver().await;
    let bundle = tempfile::NamedTempFile::new().expect("bundle");
    std::fs::write(bundle.path(), cert_pem).expect("write bundle");
    let server = Server::start_with(&[
        ("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true"),
        ("TRELLIS_PLUGIN_CA_BUNDLE", bundle.path().to_str().unwrap_or_default()),
    ]);
    let admin = server.admin().await;

    let bound = admin
        .put("/api/plugin-bindings", json!({ "kind": "integration", "type": "slack", "pluginId": "io.trellis.slack" }))
        .await;
    assert_eq!(bound.status, 200, "is target/plugins/slack.wasm built (`make plugins`)? {}", bound.body);

    let webhook = format!("https://localhost:{port}/services/T000/B000/XXXX");
    let report =
        admin.post("/api/plugin-bindings/integration/slack/test", json!({ "config": { "webhookUrl": webhook } })).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.body["data"]["success"], true, "{}", report.body);
    assert_eq!(report.body["data"]["checks"][1]["name"], "webhook-delivery");

    let request = received.recv().await.expect("the webhook received a request");
    assert!(request.head.starts_with("POST /services/T000/B000/XXXX HTTP/1.1"), "{}", request.head);
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
    assert!(received.try_recv().is_err(), "nothing else reached the receiver");
}
