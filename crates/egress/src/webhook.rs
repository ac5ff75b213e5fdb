//! The host's own outbound HTTP: webhook deliveries (`trellis_core::webhooks::transport`).
//! It applies the same rules as the plugins' egress ([`crate::check_address`]), so one address
//! policy governs every request the process makes: the host resolves names itself, refuses private, loopback and
//! link-local destinations unless the operator allows private networks, always refuses cloud
//! metadata addresses, and connects only to an address it has just vetted. Redirects are
//! never followed (a 3xx is an answer, and not a 2xx).
//!
//! Connections are kept alive and reused per (host, port, vetted address): a reused connection
//! goes to an address that passed the check when it was opened, while every delivery resolves
//! the name again, so a DNS answer that turns private refuses the delivery (DNS rebinding).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use trellis_core::webhooks::transport::{OutboundPost, OutboundResponse, TransportError, WebhookTransport};

use crate::{check_address, DenyReason};

/// Settings of the host's outbound client.
#[derive(Debug, Clone)]
pub struct OutboundConfig {
    /// Deliver to private, loopback and link-local addresses (`TRELLIS_WEBHOOK_ALLOW_PRIVATE_NETWORKS`).
    pub allow_private_networks: bool,
    /// Extra trusted roots (PEM), on top of the system's (`TRELLIS_WEBHOOK_CA_BUNDLE`).
    pub ca_bundle: Option<std::path::PathBuf>,
    pub use_system_roots: bool,
    pub connect_timeout: Duration,
    /// Largest response body read (the rest is dropped with the connection).
    pub max_response_bytes: usize,
    /// Idle connections kept per destination.
    pub max_idle_per_destination: usize,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig {
            allow_private_networks: false,
            ca_bundle: None,
            use_system_roots: true,
            connect_timeout: Duration::from_secs(10),
            max_response_bytes: 64 * 1024,
            max_idle_per_destination: 64,
        }
    }
}

type Sender = SendRequest<Full<Bytes>>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Destination {
    https: bool,
    host: String,
    port: u16,
}

/// The webhook transport.
pub struct HostOutbound {
    config: OutboundConfig,
    tls: Arc<rustls::ClientConfig>,
    idle: Mutex<HashMap<Destination, Vec<(SocketAddr, Sender)>>>,
}

impl std::fmt::Debug for HostOutbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostOutbound").field("config", &self.config).finish_non_exhaustive()
    }
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

impl HostOutbound {
    pub fn new(config: OutboundConfig) -> Result<HostOutbound, String> {
        let mut roots = rustls::RootCertStore::empty();
        if config.use_system_roots {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
        if let Some(path) = &config.ca_bundle {
            let pem = std::fs::read(path)
                .map_err(|err| format!("cannot read webhook CA bundle {}: {err}", path.display()))?;
            let mut added = 0usize;
            for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(&pem) {
                let cert: rustls_pki_types::CertificateDer<'static> =
                    cert.map_err(|err| format!("webhook CA bundle {}: {err}", path.display()))?;
                roots.add(cert).map_err(|err| format!("webhook CA bundle {}: {err}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                return Err(format!("webhook CA bundle {} holds no certificates", path.display()));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|err| format!("TLS setup: {err}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(HostOutbound { config, tls: Arc::new(tls), idle: Mutex::new(HashMap::new()) })
    }

    fn denied(reason: DenyReason, destination: &str) -> TransportError {
        metrics::counter!("trellis_webhook_egress_denied_total", "reason" => reason.code()).increment(1);
        tracing::warn!(target: "trellis::security", destination, reason = reason.code(), "webhook delivery refused by the egress policy");
        let message = match reason {
            DenyReason::PrivateAddress => format!(
                "{destination} resolves to a private, loopback or link-local address (an operator can allow private networks with TRELLIS_WEBHOOK_ALLOW_PRIVATE_NETWORKS)"
            ),
            DenyReason::MetadataAddress => format!("{destination} resolves to a cloud metadata address, which is never allowed"),
            DenyReason::Scheme => format!("{destination}: only https:// and http:// URLs can be delivered to"),
            DenyReason::HostNotAllowed => format!("{destination} is not allowed"),
        };
        TransportError::Denied { reason: reason.code(), message }
    }

    fn destination(url: &str) -> Result<(Destination, http::Uri), TransportError> {
        let uri: http::Uri = url.parse().map_err(|_| TransportError::Failed(format!("`{url}` is not a valid URL")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(Self::denied(DenyReason::Scheme, url)),
        };
        let host = uri
            .host()
            .ok_or_else(|| TransportError::Failed(format!("`{url}` names no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok((Destination { https, host, port }, uri))
    }

    /// The addresses `destination` may be reached at now, or why none.
    async fn vetted_addresses(&self, destination: &Destination) -> Result<Vec<SocketAddr>, TransportError> {
        let Destination { host, port, .. } = destination;
        let label = format!("{host}:{port}");
        let candidates: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, *port)],
            Err(_) => {
                match tokio::time::timeout(self.config.connect_timeout, tokio::net::lookup_host((host.as_str(), *port)))
                    .await
                {
                    Ok(Ok(addrs)) => addrs.collect(),
                    Ok(Err(err)) => return Err(TransportError::Failed(format!("cannot resolve {host}: {err}"))),
                    Err(_) => return Err(TransportError::Failed(format!("resolving {host} timed out"))),
                }
            }
        };
        if candidates.is_empty() {
            return Err(TransportError::Failed(format!("{host} resolves to no address")));
        }
        // Every address must pass: a name that resolves to one public and one private address
        // is refused, rather than delivered to whichever answers.
        for addr in &candidates {
            check_address(addr.ip(), self.config.allow_private_networks)
                .map_err(|reason| Self::denied(reason, &label))?;
        }
        Ok(candidates)
    }

    fn take_idle(&self, destination: &Destination, allowed: &[SocketAddr]) -> Option<(SocketAddr, Sender)> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let pool = idle.get_mut(destination)?;
        while let Some((addr, sender)) = pool.pop() {
            if allowed.contains(&addr) && !sender.is_closed() {
                return Some((addr, sender));
            }
        }
        None
    }

    fn put_idle(&self, destination: Destination, addr: SocketAddr, sender: Sender) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let pool = idle.entry(destination).or_default();
        if pool.len() < self.config.max_idle_per_destination {
            pool.push((addr, sender));
        }
    }

    async fn connect(
        &self,
        destination: &Destination,
        allowed: &[SocketAddr],
        deadline: Duration,
    ) -> Result<(SocketAddr, Sender), TransportError> {
        let timeout = self.config.connect_timeout.min(deadline);
        let mut last = TransportError::Failed("no address to connect to".into());
        for addr in allowed {
            let tcp = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                Ok(Ok(tcp)) => tcp,
                Ok(Err(err)) => {
                    last = TransportError::Failed(format!("cannot connect to {addr}: {err}"));
                    continue;
                }
                Err(_) => {
                    last = TransportError::Timeout(timeout);
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let stream: Box<dyn Stream> = if destination.https {
                let name = match destination.host.parse::<IpAddr>() {
                    Ok(ip) => rustls_pki_types::ServerName::IpAddress(ip.into()),
                    Err(_) => rustls_pki_types::ServerName::try_from(destination.host.clone()).map_err(|_| {
                        TransportError::Failed(format!("`{}` is not a valid host name", destination.host))
                    })?,
                };
                let connector = tokio_rustls::TlsConnector::from(self.tls.clone());
                match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
                    Ok(Ok(tls)) => Box::new(tls),
                    Ok(Err(err)) => {
                        return Err(TransportError::Failed(format!("TLS with {}: {err}", destination.host)));
                    }
                    Err(_) => return Err(TransportError::Timeout(timeout)),
                }
            } else {
                Box::new(tcp)
            };
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|err| TransportError::Failed(format!("HTTP handshake with {addr}: {err}")))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            return Ok((*addr, sender));
        }
        Err(last)
    }
}

#[async_trait]
impl WebhookTransport for HostOutbound {
    async fn vet(&self, url: &str) -> Result<(), TransportError> {
        let (destination, _) = Self::destination(url)?;
        self.vetted_addresses(&destination).await.map(|_| ())
    }

    async fn post(&self, request: OutboundPost) -> Result<OutboundResponse, TransportError> {
        let started = Instant::now();
        let (destination, uri) = Self::destination(&request.url)?;
        let allowed = self.vetted_addresses(&destination).await?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| destination.host.clone());
        let build = || {
            let mut builder = http::Request::post(path.as_str()).header(http::header::HOST, authority.as_str());
            for (name, value) in &request.headers {
                builder = builder.header(*name, value.as_str());
            }
            builder
                .body(Full::new(Bytes::from(request.body.clone())))
                .map_err(|err| TransportError::Failed(format!("cannot build the request: {err}")))
        };
        let attempt = async {
            // A pooled connection may have been closed by the server meanwhile: one fresh retry.
            let mut reused = self.take_idle(&destination, &allowed);
            loop {
                let from_pool = reused.is_some();
                let (addr, mut sender) = match reused.take() {
                    Some(pooled) => pooled,
                    None => self.connect(&destination, &allowed, request.timeout).await?,
                };
                if sender.ready().await.is_err() {
                    if from_pool {
                        continue;
                    }
                    return Err(TransportError::Failed("the connection closed before the request".into()));
                }
                match sender.send_request(build()?).await {
                    Ok(response) => return Ok((addr, sender, response)),
                    Err(err) if from_pool && err.is_canceled() => continue,
                    Err(err) => return Err(TransportError::Failed(format!("request to {}: {err}", destination.host))),
                }
            }
        };
        let (addr, sender, response) = match tokio::time::timeout(request.timeout, attempt).await {
            Ok(result) => result?,
            Err(_) => return Err(TransportError::Timeout(request.timeout)),
        };
        let latency_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let status = response.status().as_u16();
        // Read (and drop) a bounded body so the connection can be reused; a large or slow body
        // costs the connection, not the delivery.
        let remaining = request.timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(100));
        let mut body = response.into_body();
        let mut read = 0usize;
        let drained = tokio::time::timeout(remaining, async {
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { return false };
                if let Some(data) = frame.data_ref() {
                    read += data.len();
                    if read > self.config.max_response_bytes {
                        return false;
                    }
                }
            }
            true
        })
        .await
        .unwrap_or(false);
        if drained && !sender.is_closed() {
            self.put_idle(destination, addr, sender);
        }
        Ok(OutboundResponse { status, latency_ms })
    }
}
