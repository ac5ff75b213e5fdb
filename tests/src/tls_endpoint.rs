//! Local TLS endpoints for discovery tests: each serves a chain (any certificate: discovery does
//! not trust what it finds) and counts the handshakes it completed; a hanging endpoint accepts
//! connections and never answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::certs::Served;

pub struct TlsEndpoint {
    pub port: u16,
    handshakes: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsEndpoint {
    /// Serves `served` on 127.0.0.1 (an ephemeral port): completes the handshake, then closes.
    pub async fn start(served: &Served) -> TlsEndpoint {
        let chain: Vec<rustls::pki_types::CertificateDer<'static>> =
            served.chain.iter().map(|der| der.clone().into()).collect();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(served.key_pkcs8.clone().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (handshakes, accepted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (h, a) = (handshakes.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let (acceptor, h) = (acceptor.clone(), h.clone());
                tokio::spawn(async move {
                    if acceptor.accept(tcp).await.is_ok() {
                        h.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        TlsEndpoint { port, handshakes, accepted, task }
    }

    /// Accepts TCP connections and never answers them (a probe waits for its timeout).
    pub async fn hanging() -> TlsEndpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (handshakes, accepted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let a = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                held.push(tcp);
            }
        });
        TlsEndpoint { port, handshakes, accepted, task }
    }

    /// Handshakes completed so far.
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Stops listening (and drops held connections): the port then refuses connections.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for TlsEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}
