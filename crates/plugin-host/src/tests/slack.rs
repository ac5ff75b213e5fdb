//! The Slack plugin end to end: install → bind → notify → a local HTTPS receiver gets the
//! formatted message; a webhook host that is not the record's is refused.

use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::tests::{event, install, runtime, test_config};
use crate::{CallTarget, PluginHost, PluginKind, PluginRef, ReportedError};

pub(crate) struct Received {
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

/// An HTTPS server with a fresh self-signed certificate for `localhost`; returns its port and
/// the PEM of its certificate (the "operator CA bundle" the runtime is given).
pub(crate) async fn https_receiver(status_line: &'static str) -> (u16, String, mpsc::UnboundedReceiver<Received>) {
    https_receiver_with(status_line, None).await
}

/// [`https_receiver`], requiring a client certificate issued by `client_ca` when given (mTLS).
pub(crate) async fn https_receiver_with(
    status_line: &'static str,
    client_ca: Option<rustls_pki_types::CertificateDer<'static>>,
) -> (u16, String, mpsc::UnboundedReceiver<Received>) {
    let reply: Responder = Arc::new(move |_| Reply { status_line, content_type: None, body: "ok".into() });
    https_server(client_ca, reply).await
}

/// What an HTTPS peer answers to one request.
pub(crate) struct Reply {
    pub(crate) status_line: &'static str,
    pub(crate) content_type: Option<&'static str>,
    pub(crate) body: String,
}

pub(crate) type Responder = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

/// [`https_receiver`] answering each request as `respond` says (a peer that speaks an API:
/// a webhook receiver's JSON, a CA's signing endpoint).
pub(crate) async fn https_responder(respond: Responder) -> (u16, String, mpsc::UnboundedReceiver<Received>) {
    https_server(None, respond).await
}

async fn https_server(
    client_ca: Option<rustls_pki_types::CertificateDer<'static>>,
    respond: Responder,
) -> (u16, String, mpsc::UnboundedReceiver<Received>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("cert");
    let cert_pem = certified.cert.pem();
    let cert_der = certified.cert.der().clone();
    let key_der = rustls_pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocols");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca).expect("client CA");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let server = builder.with_single_cert(vec![cert_der], key_der).expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            let respond = respond.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut data = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let n = tls.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    let Some(split) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&data[..split]).to_string();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if data.len() >= split + 4 + length {
                        break (head, data[split + 4..split + 4 + length].to_vec());
                    }
                };
                let received = Received { head, body };
                let reply = respond(&received);
                let _ = tx.send(received);
                let content_type =
                    reply.content_type.map(|value| format!("Content-Type: {value}\r\n")).unwrap_or_default();
                let response = format!(
                    "{}\r\n{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                    reply.status_line,
                    reply.body.len(),
                    reply.body
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, cert_pem, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_posts_formatted_event_to_https_webhook() {
    let (port, cert_pem, mut received) = https_receiver("HTTP/1.1 200 OK").await;
    let bundle = tempfile::NamedTempFile::new().expect("bundle");
    std::fs::write(bundle.path(), cert_pem).expect("write bundle");
    let mut config = test_config();
    config.egress.allow_private_networks = true;
    config.egress.ca_bundle = Some(bundle.path().to_owned());
    let runtime = runtime(config);

    let installed = install(&runtime, "slack").await;
    assert_eq!(installed.info.id, "io.trellis.slack");
    assert_eq!(installed.info.serves, ["slack"]);
    assert_eq!(installed.info.outbound_hosts, ["hooks.slack.com"]);
    runtime.bind("ws_test", PluginKind::Integration, "slack", "io.trellis.slack").expect("bind");

    let webhook = format!("https://localhost:{port}/services/T000/B000/XXXX");
    let target = CallTarget::new("ws_test", PluginRef::Serving("slack".into()), json!({ "webhookUrl": webhook }))
        .with_record_hosts([webhook.clone()]);
    runtime.validate_config(&target, PluginKind::Integration).await.expect("config valid");

    let delivery = runtime.notify(&target, &event("certificate.expiring")).await.expect("notify");
    assert_eq!(delivery.status, Some(200));

    let request = received.recv().await.expect("request arrived");
    let request_line = request.head.lines().next().unwrap_or_default().to_owned();
    assert_eq!(request_line, "POST /services/T000/B000/XXXX HTTP/1.1");
    assert!(request.head.to_ascii_lowercase().contains("content-type: application/json"), "{}", request.head);
    let body: serde_json::Value = serde_json::from_slice(&request.body).expect("JSON body");
    assert_eq!(body["text"], ":warning: Certificate api.example.com expires in 7 days");
    assert_eq!(body["blocks"][0]["text"]["text"], "*:warning: Certificate api.example.com expires in 7 days*");
    let context = body["blocks"][1]["elements"][0]["text"].as_str().unwrap_or_default();
    assert!(
        context.contains("`certificate.expiring`") && context.contains("Common name: `api.example.com`"),
        "{context}"
    );

    // The connection test posts a test message and reports its checks.
    let report = runtime.integration_test(&target).await.expect("test");
    assert!(report.success, "{report:?}");
    assert_eq!(report.checks.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["config", "webhook-delivery"]);
    received.recv().await.expect("test message arrived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_refuses_hosts_and_configs_that_are_not_allowed() {
    let (port, cert_pem, mut received) = https_receiver("HTTP/1.1 200 OK").await;
    let bundle = tempfile::NamedTempFile::new().expect("bundle");
    std::fs::write(bundle.path(), cert_pem).expect("write bundle");
    let mut config = test_config();
    config.egress.allow_private_networks = true;
    config.egress.ca_bundle = Some(bundle.path().to_owned());
    let runtime = runtime(config);
    install(&runtime, "slack").await;

    // The record is for hooks.slack.com; a webhook URL pointing anywhere else is refused.
    let target = CallTarget::new(
        "ws_test",
        PluginRef::Id("io.trellis.slack".into()),
        json!({ "webhookUrl": format!("https://localhost:{port}/services/x") }),
    )
    .with_record_hosts(["https://hooks.slack.com/services/T/B/X"]);
    let err = runtime.notify(&target, &event("certificate.revoked")).await.expect_err("denied");
    assert_eq!(err.code(), "plugin.capability_denied", "{err}");
    assert!(err.to_string().contains(&format!("localhost:{port}")), "{err}");
    assert!(received.try_recv().is_err(), "nothing may reach the receiver");

    // An http:// webhook is a configuration error the plugin reports itself.
    let insecure = CallTarget::new(
        "ws_test",
        PluginRef::Id("io.trellis.slack".into()),
        json!({ "webhookUrl": "http://hooks.slack.com/x" }),
    );
    let err = runtime.validate_config(&insecure, PluginKind::Integration).await.expect_err("invalid");
    match err {
        crate::PluginError::Reported { error: ReportedError::InvalidConfig { issues }, .. } => {
            assert_eq!(issues[0].field, "/webhookUrl");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_maps_webhook_rejection_to_unauthorized() {
    let (port, cert_pem, _received) = https_receiver("HTTP/1.1 404 Not Found").await;
    let bundle = tempfile::NamedTempFile::new().expect("bundle");
    std::fs::write(bundle.path(), cert_pem).expect("write bundle");
    let mut config = test_config();
    config.egress.allow_private_networks = true;
    config.egress.ca_bundle = Some(bundle.path().to_owned());
    let runtime = runtime(config);
    install(&runtime, "slack").await;
    let webhook = format!("https://localhost:{port}/services/gone");
    let target = CallTarget::new("ws_test", PluginRef::Id("io.trellis.slack".into()), json!({ "webhookUrl": webhook }))
        .with_record_hosts([webhook.clone()]);
    let err = runtime.notify(&target, &event("certificate.issued")).await.expect_err("rejected");
    match err {
        crate::PluginError::Reported { error: ReportedError::Unauthorized { .. }, .. } => {}
        other => panic!("unexpected {other:?}"),
    }
}
