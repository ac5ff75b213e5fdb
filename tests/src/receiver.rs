//! A local HTTPS receiver for webhook and integration tests: records every request (keep-alive
//! connections included) and answers what the test says. Its self-signed certificate for
//! `localhost` / 127.0.0.1 is written to a PEM file the service trusts through its CA-bundle
//! settings.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What to answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Status and JSON (or text) body.
    Status(u16, String),
    /// Status with extra headers.
    WithHeaders(u16, Vec<(String, String)>, String),
    /// Never answer (the connection stays open until the client gives up).
    Hang,
}

type Responder = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

pub struct Receiver {
    pub port: u16,
    /// PEM of the receiver's certificate (its own trust anchor).
    pub cert_pem: String,
    bundle: tempfile::NamedTempFile,
    requests: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<tokio::sync::Notify>,
    responder: Arc<Mutex<Responder>>,
}

impl Receiver {
    /// Starts a receiver answering 200 `{"ok":true}` to everything.
    pub async fn start() -> Receiver {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("cert");
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
        let bundle = tempfile::NamedTempFile::new().expect("bundle");
        std::fs::write(bundle.path(), &cert_pem).expect("write bundle");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let default: Responder = Arc::new(|_| Reply::Status(200, "{\"ok\":true}".into()));
        let responder = Arc::new(Mutex::new(default));
        let (r, a, resp) = (requests.clone(), arrived.clone(), responder.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, r, a, resp) = (acceptor.clone(), r.clone(), a.clone(), resp.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    serve_connection(tls, r, a, resp).await;
                });
            }
        });
        Receiver { port, cert_pem, bundle, requests, arrived, responder }
    }

    /// Path of a PEM file holding the receiver's certificate.
    pub fn bundle_path(&self) -> String {
        self.bundle.path().display().to_string()
    }

    /// `https://localhost:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    pub fn respond_with(&self, f: impl Fn(&Received) -> Reply + Send + Sync + 'static) {
        *self.responder.lock().expect("responder") = Arc::new(f);
    }

    pub fn requests(&self) -> Vec<Received> {
        self.requests.lock().expect("requests").clone()
    }

    /// Waits until at least `n` requests arrived (or `timeout` passed) and returns them all.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.arrived.notified();
            let seen = self.requests();
            if seen.len() >= n || tokio::time::Instant::now() >= deadline {
                return seen;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }
}

async fn serve_connection<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    requests: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<tokio::sync::Notify>,
    responder: Arc<Mutex<Responder>>,
) {
    let mut data: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        // One request: head, then Content-Length bytes of body.
        let split = loop {
            if let Some(split) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break split;
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => data.extend_from_slice(&buf[..n]),
            }
        };
        let head = String::from_utf8_lossy(&data[..split]).to_string();
        let mut lines = head.lines();
        let request_line = lines.next().unwrap_or_default().to_owned();
        let mut parts = request_line.split(' ');
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let length =
            headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse::<usize>().ok()).unwrap_or(0);
        while data.len() < split + 4 + length {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => data.extend_from_slice(&buf[..n]),
            }
        }
        let body = data[split + 4..split + 4 + length].to_vec();
        data.drain(..split + 4 + length);
        let received = Received { method, path, headers, body };
        let respond: Option<Responder> = responder.lock().ok().map(|r| r.clone());
        let reply = match respond {
            Some(respond) => respond(&received),
            None => Reply::Status(500, String::new()),
        };
        requests.lock().expect("requests").push(received);
        arrived.notify_waiters();
        let (status, extra, body) = match reply {
            Reply::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Reply::Status(status, body) => (status, Vec::new(), body),
            Reply::WithHeaders(status, headers, body) => (status, headers, body),
        };
        let mut response =
            format!("HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", body.len());
        for (name, value) in extra {
            response.push_str(&format!("{name}: {value}\r\n"));
        }
        response.push_str("\r\n");
        response.push_str(&body);
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
        let _ = stream.flush().await;
    }
}
