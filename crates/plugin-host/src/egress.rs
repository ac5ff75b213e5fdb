//! Outbound HTTP policy, enforced in the host for every request a plugin makes through
//! `wasi:http`: host allowlist (deny by default), DNS resolved by the host with private and
//! metadata addresses refused, the connection pinned to the vetted address, TLS with system
//! roots plus the operator bundle, timeouts and a response size cap. Every denial is logged
//! on the `trellis::security` target and counted.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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

/// Why a request was refused. Codes are stable (metrics label, logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DenyReason {
    HostNotAllowed,
    PrivateAddress,
    MetadataAddress,
    Scheme,
}

impl DenyReason {
    pub(crate) fn code(self) -> &'static str {
        match self {
            DenyReason::HostNotAllowed => "host_not_allowed",
            DenyReason::PrivateAddress => "private_address",
            DenyReason::MetadataAddress => "metadata_address",
            DenyReason::Scheme => "scheme_not_allowed",
        }
    }
}

/// Something the policy did during one call; the runtime uses it to classify the call's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EgressIncident {
    Denied { destination: String, reason: DenyReason },
    ResponseTooLarge { limit: u64 },
}

/// Which hosts one call may reach: the record's hosts plus the operator's grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EgressGrant {
    patterns: Vec<HostPattern>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPattern {
    /// Lowercase host; a leading `*.` matches any subdomain (not the apex).
    host: String,
    /// `None` means the default ports 443 and 80.
    port: Option<u16>,
}

impl EgressGrant {
    /// Builds a grant from `host`, `host:port`, `*.domain` or full `https://host:port/…` entries.
    /// Unparsable entries grant nothing.
    pub(crate) fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> EgressGrant {
        EgressGrant { patterns: entries.into_iter().filter_map(HostPattern::parse).collect() }
    }

    pub(crate) fn allows(&self, host: &str, port: u16) -> bool {
        self.patterns.iter().any(|p| p.matches(host, port))
    }
}

impl HostPattern {
    fn parse(entry: &str) -> Option<HostPattern> {
        let entry = entry.trim();
        let (default_port, rest) = if let Some(rest) = entry.strip_prefix("https://") {
            (Some(443), rest)
        } else if let Some(rest) = entry.strip_prefix("http://") {
            (Some(80), rest)
        } else {
            (None, entry)
        };
        let authority = rest.split(['/', '?', '#']).next()?;
        let authority = authority.rsplit('@').next()?;
        if authority.is_empty() {
            return None;
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, tail) = v6.split_once(']')?;
            let port = match tail.strip_prefix(':') {
                Some(p) => Some(p.parse().ok()?),
                None => default_port,
            };
            (host.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port.parse().ok()?)),
                None => (authority.to_owned(), default_port),
            }
        };
        Some(HostPattern { host: host.to_ascii_lowercase(), port })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => port == 443 || port == 80,
        };
        if !port_ok {
            return false;
        }
        match self.host.strip_prefix("*.") {
            Some(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix)
                    && host[..host.len() - suffix.len()].ends_with('.')
            }
            None => self.host == host,
        }
    }
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

/// How an address is treated by the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddressClass {
    Public,
    /// Loopback, private, link-local, CGNAT, unspecified, multicast, documentation, reserved.
    Private,
    /// Cloud instance-metadata endpoints: refused even when private networks are allowed,
    /// because they hand out the host's own credentials.
    Metadata,
}

pub(crate) fn classify_ip(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            // IPv4-mapped, IPv4-compatible and NAT64 forms carry an IPv4 address that must be
            // judged as such, or `::ffff:169.254.169.254` would bypass the check.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return classify_v4(v4);
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                return classify_v4(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8));
            }
            let low_v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
            if s[..6] == [0, 0, 0, 0, 0, 0] && !v6.is_loopback() && !v6.is_unspecified() {
                return classify_v4(low_v4);
            }
            // IPv4-translated `::ffff:0:a.b.c.d` (RFC 2765): judged by the IPv4 address it carries.
            if s[..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0 {
                return classify_v4(low_v4);
            }
            // Tunnels and translators whose far end the host cannot judge, refused like private
            // ranges (metadata stays metadata): NAT64 local-use 64:ff9b:1::/48 (RFC 8215), 6to4
            // 2002::/16 (its IPv4 in bits 16-47) and Teredo 2001::/32.
            let nat64_local = s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1;
            let six_to_four = s[0] == 0x2002;
            let teredo = s[0] == 0x2001 && s[1] == 0;
            if nat64_local || six_to_four || teredo {
                let embedded = if six_to_four {
                    Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8)
                } else {
                    low_v4
                };
                return match classify_v4(embedded) {
                    AddressClass::Metadata => AddressClass::Metadata,
                    _ => AddressClass::Private,
                };
            }
            if v6 == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
                return AddressClass::Metadata;
            }
            let non_global = v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]); // discard-only
            if non_global {
                AddressClass::Private
            } else {
                AddressClass::Public
            }
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let o = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254)
        || ip == Ipv4Addr::new(100, 100, 100, 200)
        || ip == Ipv4Addr::new(169, 254, 170, 2)
    {
        return AddressClass::Metadata;
    }
    let non_global = ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || o[0] == 0 // "this network"
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // CGNAT 100.64/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || o[0] >= 240; // reserved
    if non_global {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{classify_ip, AddressClass, EgressGrant};

    #[track_caller]
    fn class(ip: &str) -> AddressClass {
        classify_ip(ip.parse::<IpAddr>().expect("ip"))
    }

    #[test]
    fn private_loopback_link_local_and_reserved_addresses_are_private() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            // Tunnels and translators (issue 12): NAT64 local-use, 6to4, Teredo, IPv4-translated.
            "64:ff9b:1::a00:1",
            "64:ff9b:1::808:808",
            "2002:0a00:0001::1",
            "2002:0808:0808::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "::ffff:0:10.0.0.1",
            "::ffff:0:127.0.0.1",
        ] {
            assert_eq!(class(ip), AddressClass::Private, "{ip}");
        }
    }

    #[test]
    fn metadata_addresses_are_recognized_in_every_spelling() {
        for ip in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:0:169.254.169.254",
            "2002:a9fe:a9fe::1",
            "64:ff9b:1::a9fe:a9fe",
        ] {
            assert_eq!(class(ip), AddressClass::Metadata, "{ip}");
        }
    }

    #[test]
    fn global_addresses_are_public() {
        for ip in ["1.1.1.1", "8.8.8.8", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
            assert_eq!(class(ip), AddressClass::Public, "{ip}");
        }
    }

    #[test]
    fn grants_match_host_port_and_wildcards_only() {
        let grant = EgressGrant::from_entries([
            "hooks.slack.com",
            "https://acme.example:8443/directory",
            "*.pagerduty.com",
            "[2001:db8::5]:9000",
        ]);
        assert!(grant.allows("hooks.slack.com", 443));
        assert!(grant.allows("hooks.slack.com", 80));
        assert!(!grant.allows("hooks.slack.com", 8443), "a bare host grants only the default ports");
        assert!(!grant.allows("evilhooks.slack.com", 443));
        assert!(grant.allows("acme.example", 8443));
        assert!(!grant.allows("acme.example", 443));
        assert!(grant.allows("events.pagerduty.com", 443));
        assert!(!grant.allows("pagerduty.com", 443), "a wildcard does not match the apex");
        assert!(!grant.allows("evilpagerduty.com", 443));
        assert!(grant.allows("2001:db8::5", 9000));
        assert!(!EgressGrant::from_entries([]).allows("hooks.slack.com", 443), "empty means deny");
        assert!(!EgressGrant::from_entries(["https://user@"]).allows("user", 443));
    }
}
