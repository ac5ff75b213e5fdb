//! A plugin written outside this repository, as a third party would: `scripts/out-of-tree-plugin.sh`
//! copies `examples/rest-ca-connector` to a temporary directory, points its SDK dependency
//! there by path, runs its native tests, builds it with the one documented command
//! (`scripts/build-plugins.sh <dir>`), then runs this test with the component it produced.

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trellis_tests::Server;

/// A REST CA's `/health`, answering 200 and reporting each request line it saw.
async fn rest_ca() -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = tcp.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_owned();
            let _ = tx.send(head);
            let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
        }
    });
    (port, rx)
}

#[tokio::test]
#[ignore = "run by scripts/out-of-tree-plugin.sh, which builds the component first"]
async fn a_plugin_built_outside_the_repository_installs_and_runs() {
    let Ok(path) = std::env::var("TRELLIS_OUT_OF_TREE_WASM") else {
        panic!("TRELLIS_OUT_OF_TREE_WASM is not set: run scripts/out-of-tree-plugin.sh");
    };
    let wasm = std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
    let (port, mut requests) = rest_ca().await;
    let server = Server::start_with(&[("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true")]);
    let admin = server.admin().await;

    let installed = admin.post_raw("/api/plugins", "application/wasm", wasm).await;
    assert_eq!(installed.status, 201, "{}", installed.body);
    let version = &installed.body["data"];
    assert_eq!(version["witVersion"], "0.2.0");
    assert_eq!(version["info"]["id"], "com.example.rest-ca");
    assert_eq!(version["info"]["capabilities"], json!(["issue"]));
    assert_eq!(version["info"]["secretFields"], json!([{"pointer": "/apiKey", "withheld": false}]));
    assert_eq!(version["info"]["configSchema"]["required"], json!(["url", "apiKey"]));

    let config = json!({ "url": format!("http://127.0.0.1:{port}"), "apiKey": "k-123" });
    let tested = admin.post("/api/plugin-bindings/ca-connector/rest-ca/test", json!({ "config": config })).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    assert_eq!(tested.body["data"]["success"], true, "{}", tested.body);
    assert_eq!(tested.body["data"]["checks"][0]["message"], "HTTP 200");
    assert_eq!(requests.recv().await.as_deref(), Some("GET /health HTTP/1.1"));

    // A configuration its Config type refuses is reported as such and never reaches the CA.
    let refused = admin.post("/api/plugin-bindings/ca-connector/rest-ca/test", json!({ "config": {"url": "x"} })).await;
    assert_eq!(refused.status, 200, "{}", refused.body);
    assert_eq!(refused.body["data"]["success"], false);
    assert!(refused.body["data"]["message"].as_str().unwrap_or_default().contains("missing field `apiKey`"));
    assert!(requests.try_recv().is_err(), "the CA was contacted with a refused configuration");
}
