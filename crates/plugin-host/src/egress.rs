//! Outbound HTTP policy, enforced in the host for every request a plugin makes through
//! `wasi:http`: host allowlist (deny by default), DNS resolved by the host with private and
//! metadata addresses refused, the connection pinned to the vetted address, TLS with system
//! roots plus the operator bundle, timeouts and a response size cap. Every denial is logged
//! on the `trellis::security` target and counted.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use trellis_core::plugins::RecordNetwork;
use trellis_egress::{classify_ip, AddressClass, DenyReason, EgressGrant};

use crate::config::EgressConfig;

fn tls_builder(
    roots: Arc<rustls::RootCertStore>,
) -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS setup: {err}"))?
        .with_root_certificates(roots))
}

/// Shared, process-wide part of the policy: knobs, TLS roots and counters.
pub(crate) struct EgressPolicy {
    config: EgressConfig,
    /// System and operator roots, the base of every record's own TLS configuration.
    roots: Arc<rustls::RootCertStore>,
    tls: Arc<rustls::ClientConfig>,
    denied: AtomicU64,
}

impl std::fmt::Debug for EgressPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressPolicy").field("config", &self.config).finish_non_exhaustive()
    }
}

impl EgressPolicy {
    pub(crate) fn new(config: EgressConfig) -> Result<EgressPolicy, String> {
        let mut roots = rustls::RootCertStore::empty();
        if config.use_system_roots {
            // Unreadable individual system certificates are skipped, as every TLS client does.
            let native = rustls_native_certs::load_native_certs();
            for cert in native.certs {
                let _ = roots.add(cert);
            }
        }
        if let Some(path) = &config.ca_bundle {
            let pem =
                std::fs::read(path).map_err(|err| format!("cannot read plugin CA bundle {}: {err}", path.display()))?;
            let mut added = 0usize;
            for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(&pem) {
                let cert: rustls_pki_types::CertificateDer<'static> =
                    cert.map_err(|err| format!("plugin CA bundle {}: {err}", path.display()))?;
                roots.add(cert).map_err(|err| format!("plugin CA bundle {}: {err}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                return Err(format!("plugin CA bundle {} holds no certificates", path.display()));
            }
        }
        let roots = Arc::new(roots);
        let tls = tls_builder(roots.clone())?.with_no_client_auth();
        Ok(EgressPolicy { config, roots, tls: Arc::new(tls), denied: AtomicU64::new(0) })
    }

    /// What a call's requests may do under the record's own settings: whether private
    /// destinations are allowed, and the TLS configuration when the record brings roots or a
    /// client certificate. Fails with an operator-readable message on unusable PEM.
    pub(crate) fn for_record(&self, network: &RecordNetwork) -> Result<RecordEgress, String> {
        use rustls_pki_types::pem::PemObject;
        let private_networks = self.config.allow_private_networks
            || (network.allow_private_networks && self.config.allow_record_private_networks);
        if network.ca_bundle_pem.is_none() && network.client_certificate.is_none() {
            return Ok(RecordEgress { private_networks, tls: None });
        }
        let mut roots = (*self.roots).clone();
        if let Some(bundle) = &network.ca_bundle_pem {
            let mut added = 0usize;
            for cert in rustls_pki_types::CertificateDer::pem_slice_iter(bundle.as_bytes()) {
                let cert = cert.map_err(|err| format!("the record's CA bundle is not PEM: {err}"))?;
                roots.add(cert).map_err(|err| format!("the record's CA bundle: {err}"))?;
                added += 1;
            }
            if added == 0 {
                return Err("the record's CA bundle holds no certificate".into());
            }
        }
        let builder = tls_builder(Arc::new(roots))?;
        let tls = match &network.client_certificate {
            None => builder.with_no_client_auth(),
            Some(client) => {
                let chain = rustls_pki_types::CertificateDer::pem_slice_iter(client.chain_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|err| format!("the record's client certificate is not PEM: {err}"))?;
                if chain.is_empty() {
                    return Err("the record's client certificate holds no certificate".into());
                }
                let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(client.private_key_pem.as_bytes())
                    .map_err(|_| "the record's client key is not a PEM private key".to_owned())?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|err| format!("the record's client certificate and key: {err}"))?
            }
        };
        Ok(RecordEgress { private_networks, tls: Some(Arc::new(tls)) })
    }

    /// Denied requests since start (all plugins).
    pub(crate) fn denied_total(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }

    fn deny(&self, call: &EgressCall, reason: DenyReason, target: &str) -> HttpError {
        self.denied.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("trellis_plugin_egress_denied_total", "plugin" => call.plugin.to_string(), "reason" => reason.code())
            .increment(1);
        tracing::warn!(
            target: "trellis::security",
            plugin = %call.plugin,
            workspace = %call.workspace,
            destination = %target,
            reason = reason.code(),
            "plugin outbound request denied"
        );
        call.record.push(EgressIncident::Denied { destination: target.to_owned(), reason });
        HttpError::HttpRequestDenied
    }

    pub(crate) async fn send(
        self: Arc<Self>,
        call: Arc<EgressCall>,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let uri = request.uri().clone();
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(self.deny(&call, DenyReason::Scheme, &uri.to_string())),
        };
        let Some(raw_host) = uri.host() else {
            return Err(HttpError::HttpRequestUriInvalid);
        };
        let host = raw_host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let destination = format!("{host}:{port}");

        if !call.grant.allows(&host, port) {
            return Err(self.deny(&call, DenyReason::HostNotAllowed, &destination));
        }

        // Resolve here, not in a resolver the guest can influence, and connect only to an
        // address that passed the check, so DNS rebinding cannot slip a private address in.
        let candidates: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let lookup = tokio::net::lookup_host((host.as_str(), port));
                match tokio::time::timeout(self.config.connect_timeout, lookup).await {
                    Ok(Ok(addrs)) => addrs.collect(),
                    Ok(Err(_)) => {
                        return Err(HttpError::DnsError { rcode: Some("lookup failed".into()), info_code: None })
                    }
                    Err(_) => return Err(HttpError::DnsTimeout),
                }
            }
        };
        let mut refused = None;
        let mut allowed = Vec::new();
        for addr in candidates {
            match classify_ip(addr.ip()) {
                AddressClass::Public => allowed.push(addr),
                AddressClass::Private if call.network.private_networks => allowed.push(addr),
                AddressClass::Private => refused = Some(DenyReason::PrivateAddress),
                AddressClass::Metadata => refused = Some(DenyReason::MetadataAddress),
            }
        }
        if allowed.is_empty() {
            let reason = refused.unwrap_or(DenyReason::PrivateAddress);
            return Err(self.deny(&call, reason, &destination));
        }

        let connect_timeout = clamp(options.and_then(|o| o.connect_timeout), self.config.connect_timeout);
        let first_byte_timeout = clamp(options.and_then(|o| o.first_byte_timeout), self.config.first_byte_timeout);

        let mut last_error = HttpError::ConnectionRefused;
        let mut tcp = None;
        for addr in allowed {
            match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    tcp = Some(stream);
                    break;
                }
                Ok(Err(err)) => last_error = HttpError::Connect(err),
                Err(_) => last_error = HttpError::ConnectionTimeout,
            }
        }
        let Some(tcp) = tcp else {
            return Err(last_error);
        };

        let stream: Box<dyn Stream> = if https {
            let server_name = match host.parse::<IpAddr>() {
                Ok(ip) => rustls_pki_types::ServerName::IpAddress(ip.into()),
                Err(_) => rustls_pki_types::ServerName::try_from(host.clone())
                    .map_err(|_| HttpError::HttpRequestUriInvalid)?,
            };
            let tls = call.network.tls.clone().unwrap_or_else(|| self.tls.clone());
            let connector = tokio_rustls::TlsConnector::from(tls);
            match tokio::time::timeout(connect_timeout, connector.connect(server_name, tcp)).await {
                Ok(Ok(tls)) => Box::new(tls),
                // An untrusted server certificate is its own error, so the plugin (and the
                // operator reading its message) learns that trust, not the protocol, failed.
                Ok(Err(err)) if untrusted_certificate(&err) => return Err(HttpError::TlsCertificateError),
                Ok(Err(err)) => return Err(HttpError::Tls(err)),
                Err(_) => return Err(HttpError::ConnectionTimeout),
            }
        } else {
            Box::new(tcp)
        };

        let (mut sender, connection) =
            match tokio::time::timeout(connect_timeout, hyper::client::conn::http1::handshake(TokioIo::new(stream)))
                .await
            {
                Ok(Ok(pair)) => pair,
                Ok(Err(err)) => return Err(HttpError::from(err)),
                Err(_) => return Err(HttpError::ConnectionTimeout),
            };
        // The connection task ends when the response body is consumed or dropped; the cap
        // bounds it if a server keeps it open.
        let lifetime = first_byte_timeout.saturating_mul(4);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(lifetime, connection).await;
        });

        // Origin-form on the wire: the absolute URI was only for policy and routing.
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;

        let response = match tokio::time::timeout(first_byte_timeout, sender.send_request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(err)) => return Err(HttpError::from(err)),
            Err(_) => return Err(HttpError::HttpResponseTimeout),
        };

        let limit = self.config.max_response_bytes;
        let declared = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit) {
            call.record.push(EgressIncident::ResponseTooLarge { limit });
            return Err(HttpError::HttpResponseBodySize(declared));
        }
        Ok(response.map(|incoming| {
            CappedBody { inner: incoming, remaining: limit, limit, record: call.clone() }.boxed_unsync()
        }))
    }
}

fn untrusted_certificate(err: &std::io::Error) -> bool {
    err.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)))
}

fn clamp(requested: Option<std::time::Duration>, ceiling: std::time::Duration) -> std::time::Duration {
    requested.map_or(ceiling, |r| r.min(ceiling))
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Something the policy did during one call; the runtime uses it to classify the call's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EgressIncident {
    Denied { destination: String, reason: DenyReason },
    ResponseTooLarge { limit: u64 },
}

/// Per-call identity, grant and incident record, shared with the request futures.
#[derive(Debug)]
pub(crate) struct EgressCall {
    pub(crate) plugin: String,
    pub(crate) workspace: String,
    pub(crate) grant: EgressGrant,
    pub(crate) network: RecordEgress,
    pub(crate) record: EgressRecord,
}

/// The record's network settings as the policy resolved them for one call.
#[derive(Debug, Default)]
pub(crate) struct RecordEgress {
    /// Private destinations allowed (operator-wide, or the record's delegated allowance).
    pub(crate) private_networks: bool,
    /// The record's TLS configuration (extra roots, client certificate); `None`: the default.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

/// Incidents of one call.
#[derive(Debug, Default)]
pub(crate) struct EgressRecord {
    incidents: Mutex<Vec<EgressIncident>>,
}

impl EgressRecord {
    fn push(&self, incident: EgressIncident) {
        self.incidents.lock().unwrap_or_else(|p| p.into_inner()).push(incident);
    }

    pub(crate) fn take(&self) -> Vec<EgressIncident> {
        std::mem::take(&mut *self.incidents.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The `wasi:http` hooks of one call's store.
pub(crate) struct EgressHooks {
    pub(crate) policy: Arc<EgressPolicy>,
    pub(crate) call: Arc<EgressCall>,
}

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>),
                    HttpError,
                >,
            > + Send,
    > {
        // Response-processing errors are surfaced to the guest by wasmtime itself.
        drop(fut);
        let policy = self.policy.clone();
        let call = self.call.clone();
        Box::new(async move {
            let response = policy.send(call, request, options).await?;
            let io: Box<dyn Future<Output = Result<(), HttpError>> + Send> = Box::new(async { Ok(()) });
            Ok((response, io))
        })
    }
}

/// Response body that fails once more than `limit` bytes arrive.
struct CappedBody {
    inner: hyper::body::Incoming,
    remaining: u64,
    limit: u64,
    record: Arc<EgressCall>,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let len = data.len() as u64;
                    if len > this.remaining {
                        this.remaining = 0;
                        this.record.record.push(EgressIncident::ResponseTooLarge { limit: this.limit });
                        tracing::warn!(target: "trellis::security", plugin = %this.record.plugin, limit = this.limit, "plugin HTTP response over size limit");
                        return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(None))));
                    }
                    this.remaining -= len;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(HttpError::from(err)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}
