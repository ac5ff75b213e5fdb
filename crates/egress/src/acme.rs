//! The ACME server's challenge validator (`trellis_core::acme::ChallengeValidator`): http-01
//! (RFC 8555 §8.3), dns-01 (§8.4) and tls-alpn-01 (RFC 8737), under the egress rules: a cloud
//! metadata address is never reached, public addresses are, and private ones (loopback, RFC
//! 1918, …) only inside the operator's allowlist (`TRELLIS_ACME_VALIDATION_ALLOW`): an internal
//! CA validates internal hosts when its operator says which. Names resolve through the
//! configured resolver (`TRELLIS_ACME_DNS_RESOLVER`) or the system's. Redirects are not followed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::TokioResolver;
use rustls::pki_types::ServerName;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trellis_core::acme::{ChallengeValidator, Identifier, ValidationFailure};

use crate::{classify_ip, AddressClass};

const TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an http-01 answer read (a key authorization is under 200 bytes).
const MAX_ANSWER: usize = 16 * 1024;

/// What the validator may do.
#[derive(Debug, Clone)]
pub struct ValidatorConfig {
    /// `TRELLIS_ACME_VALIDATION_HTTP_PORT` (80).
    pub http_port: u16,
    /// `TRELLIS_ACME_VALIDATION_TLS_PORT` (443).
    pub tls_port: u16,
    /// `TRELLIS_ACME_DNS_RESOLVER` (`host:port`); the system's resolver when none.
    pub dns_resolver: Option<SocketAddr>,
    /// `TRELLIS_ACME_VALIDATION_ALLOW`: networks (address, prefix length) of private addresses
    /// the validator may reach.
    pub allow: Vec<(IpAddr, u8)>,
}

impl Default for ValidatorConfig {
    fn default() -> Self {
        ValidatorConfig { http_port: 80, tls_port: 443, dns_resolver: None, allow: Vec::new() }
    }
}

/// Parses `cidr,cidr,…` (a bare address is a /32 or /128).
pub fn parse_networks(text: &str) -> Result<Vec<(IpAddr, u8)>, String> {
    let mut networks = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (address, prefix) = entry.split_once('/').unwrap_or((entry, ""));
        let ip: IpAddr = address.parse().map_err(|_| format!("`{entry}` is not a network like 10.0.0.0/8"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix.is_empty() {
            max
        } else {
            prefix.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| format!("`{entry}`: bad prefix length"))?
        };
        networks.push((ip, prefix));
    }
    Ok(networks)
}

fn in_network(address: IpAddr, network: IpAddr, prefix: u8) -> bool {
    match (address, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The validator.
pub struct HostValidator {
    config: ValidatorConfig,
    resolver: TokioResolver,
    tls: Arc<rustls::ClientConfig>,
}

impl HostValidator {
    pub fn new(config: ValidatorConfig) -> Result<HostValidator, String> {
        let mut options = ResolverOpts::default();
        options.timeout = Duration::from_secs(5);
        options.attempts = 2;
        // Validation must see the record as published now, not as cached.
        options.cache_size = 0;
        let resolver = match config.dns_resolver {
            Some(address) => {
                let mut resolvers = ResolverConfig::new();
                resolvers.add_name_server(NameServerConfig::new(address, Protocol::Udp));
                resolvers.add_name_server(NameServerConfig::new(address, Protocol::Tcp));
                TokioResolver::builder_with_config(resolvers, TokioConnectionProvider::default())
                    .with_options(options)
                    .build()
            }
            None => TokioResolver::builder_tokio()
                .map_err(|err| format!("the system's DNS configuration: {err}"))?
                .with_options(options)
                .build(),
        };
        // tls-alpn-01 checks the certificate itself (RFC 8737 §3: a self-signed one is expected).
        let mut tls = crate::tls_accepting_any_certificate()?;
        tls.alpn_protocols = vec![b"acme-tls/1".to_vec()];
        Ok(HostValidator { config, resolver, tls: Arc::new(tls) })
    }

    /// Whether the egress rules let the validator reach `ip`.
    fn allowed(&self, ip: IpAddr) -> Result<(), ValidationFailure> {
        match classify_ip(ip) {
            AddressClass::Public => Ok(()),
            AddressClass::Metadata => {
                Err(ValidationFailure::Connection(format!("{ip} is a cloud metadata address, which is never reached")))
            }
            AddressClass::Private if self.config.allow.iter().any(|(n, p)| in_network(ip, *n, *p)) => Ok(()),
            AddressClass::Private => Err(ValidationFailure::Connection(format!(
                "{ip} is a private address outside the networks the validator may reach \
                 (TRELLIS_ACME_VALIDATION_ALLOW)"
            ))),
        }
    }

    /// The addresses of the identifier the validator may connect to.
    async fn addresses(&self, identifier: &Identifier) -> Result<Vec<IpAddr>, ValidationFailure> {
        let candidates = match identifier.value.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => {
                let name = format!("{}.", identifier.value);
                let found = self
                    .resolver
                    .lookup_ip(name.as_str())
                    .await
                    .map_err(|err| ValidationFailure::Dns(format!("no address for {}: {err}", identifier.value)))?;
                found.iter().collect()
            }
        };
        if candidates.is_empty() {
            return Err(ValidationFailure::Dns(format!("{} has no address", identifier.value)));
        }
        let mut refused = None;
        let mut allowed = Vec::new();
        for ip in candidates {
            match self.allowed(ip) {
                Ok(()) => allowed.push(ip),
                Err(err) => refused = Some(err),
            }
        }
        match (allowed.is_empty(), refused) {
            (true, Some(err)) => Err(err),
            _ => Ok(allowed),
        }
    }

    async fn connect(&self, ip: IpAddr, port: u16) -> Result<TcpStream, ValidationFailure> {
        match tokio::time::timeout(TIMEOUT, TcpStream::connect(SocketAddr::new(ip, port))).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(err)) => Err(ValidationFailure::Connection(format!("connecting to {ip}:{port}: {err}"))),
            Err(_) => Err(ValidationFailure::Connection(format!("connecting to {ip}:{port} timed out"))),
        }
    }

    async fn http01_at(&self, ip: IpAddr, host: &str, token: &str, expected: &str) -> Result<(), ValidationFailure> {
        let port = self.config.http_port;
        let mut stream = self.connect(ip, port).await?;
        let host_header = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => host.to_owned(),
        };
        let request = format!(
            "GET /.well-known/acme-challenge/{token} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: Trellis-ACME-validator\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n"
        );
        let exchange = async {
            stream.write_all(request.as_bytes()).await?;
            let mut answer = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let read = stream.read(&mut chunk).await?;
                if read == 0 || answer.len() + read > MAX_ANSWER {
                    answer.extend_from_slice(&chunk[..read.min(MAX_ANSWER - answer.len().min(MAX_ANSWER))]);
                    break;
                }
                answer.extend_from_slice(&chunk[..read]);
            }
            Ok::<_, std::io::Error>(answer)
        };
        let answer = match tokio::time::timeout(TIMEOUT, exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(err)) => return Err(ValidationFailure::Connection(format!("{host} ({ip}:{port}): {err}"))),
            Err(_) => {
                return Err(ValidationFailure::Connection(format!("{host} ({ip}:{port}) did not answer in time")))
            }
        };
        let text = String::from_utf8_lossy(&answer);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.lines().next().unwrap_or_default();
        let code = status.split_whitespace().nth(1).unwrap_or_default();
        if code != "200" {
            return Err(ValidationFailure::IncorrectResponse(format!(
                "{host} ({ip}:{port}) answered `{status}` for the challenge (redirects are not followed)"
            )));
        }
        let chunked = head.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("transfer-encoding:") && l.contains("chunked")
        });
        let body = if chunked { dechunk(body) } else { body.to_owned() };
        if body.trim() == expected {
            Ok(())
        } else {
            let shown: String = body.trim().chars().take(100).collect();
            Err(ValidationFailure::IncorrectResponse(format!(
                "{host} ({ip}:{port}) answered `{shown}`, not the key authorization"
            )))
        }
    }

    async fn tls_alpn01_at(
        &self,
        ip: IpAddr,
        identifier: &Identifier,
        expected: &[u8],
    ) -> Result<(), ValidationFailure> {
        let port = self.config.tls_port;
        let stream = self.connect(ip, port).await?;
        let server_name = match identifier.value.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => ServerName::try_from(identifier.value.clone())
                .map_err(|_| ValidationFailure::Tls(format!("`{}` is not a server name", identifier.value)))?,
        };
        let connector = tokio_rustls::TlsConnector::from(self.tls.clone());
        let tls = match tokio::time::timeout(TIMEOUT, connector.connect(server_name, stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(err)) => return Err(ValidationFailure::Tls(format!("TLS with {ip}:{port}: {err}"))),
            Err(_) => return Err(ValidationFailure::Tls(format!("TLS with {ip}:{port} timed out"))),
        };
        let (_, session) = tls.get_ref();
        if session.alpn_protocol() != Some(b"acme-tls/1".as_slice()) {
            return Err(ValidationFailure::Tls(format!("{ip}:{port} did not negotiate acme-tls/1")));
        }
        let Some(leaf) = session.peer_certificates().and_then(|c| c.first()) else {
            return Err(ValidationFailure::Tls(format!("{ip}:{port} presented no certificate")));
        };
        check_alpn_certificate(leaf.as_ref(), identifier, expected)
    }
}

/// RFC 8737 §3: exactly the identifier in subjectAltName, and a critical acmeIdentifier
/// extension holding the SHA-256 of the key authorization.
fn check_alpn_certificate(der: &[u8], identifier: &Identifier, expected: &[u8]) -> Result<(), ValidationFailure> {
    use x509_parser::extensions::GeneralName;
    use x509_parser::prelude::{FromDer, X509Certificate};
    let wrong = |detail: String| ValidationFailure::IncorrectResponse(detail);
    let (_, certificate) =
        X509Certificate::from_der(der).map_err(|_| wrong("the tls-alpn-01 certificate does not parse".into()))?;
    let names: Vec<String> = match certificate.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::DNSName(dns) => dns.to_ascii_lowercase(),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => <[u8; 4]>::try_from(*bytes).map(|b| IpAddr::from(b).to_string()).unwrap_or_default(),
                    16 => <[u8; 16]>::try_from(*bytes).map(|b| IpAddr::from(b).to_string()).unwrap_or_default(),
                    _ => String::new(),
                },
                other => format!("{other:?}"),
            })
            .collect(),
        _ => Vec::new(),
    };
    if names != [identifier.value.clone()] {
        return Err(wrong(format!("the tls-alpn-01 certificate names {names:?}, not only {}", identifier.value)));
    }
    let oid = x509_parser::oid_registry::Oid::from(&[1, 3, 6, 1, 5, 5, 7, 1, 31])
        .map_err(|_| wrong("acmeIdentifier OID".into()))?;
    let extension = certificate
        .extensions()
        .iter()
        .find(|e| e.oid == oid)
        .ok_or_else(|| wrong("the tls-alpn-01 certificate has no acmeIdentifier extension".into()))?;
    if !extension.critical {
        return Err(wrong("the acmeIdentifier extension is not critical".into()));
    }
    // DER OCTET STRING of 32 bytes: 0x04 0x20 then the digest.
    let mut wanted = vec![0x04, 0x20];
    wanted.extend_from_slice(expected);
    if extension.value != wanted.as_slice() {
        return Err(wrong("the acmeIdentifier extension does not hold this key authorization's digest".into()));
    }
    Ok(())
}

/// A chunked body's data.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.split(';').next().unwrap_or_default().trim(), 16) else { break };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

#[async_trait]
impl ChallengeValidator for HostValidator {
    async fn http01(
        &self,
        identifier: &Identifier,
        token: &str,
        key_authorization: &str,
    ) -> Result<(), ValidationFailure> {
        let addresses = self.addresses(identifier).await?;
        let mut last = ValidationFailure::Connection(format!("{} has no reachable address", identifier.value));
        for ip in addresses {
            match self.http01_at(ip, &identifier.value, token, key_authorization).await {
                Ok(()) => return Ok(()),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    async fn dns01(&self, name: &str, digest: &str) -> Result<(), ValidationFailure> {
        let record = format!("_acme-challenge.{name}.");
        let found = self
            .resolver
            .txt_lookup(record.as_str())
            .await
            .map_err(|err| ValidationFailure::Dns(format!("TXT {record}: {err}")))?;
        let values: Vec<String> = found
            .iter()
            .map(|txt| txt.txt_data().iter().map(|part| String::from_utf8_lossy(part).into_owned()).collect())
            .collect();
        if values.iter().any(|v| v == digest) {
            Ok(())
        } else {
            Err(ValidationFailure::IncorrectResponse(format!(
                "TXT {record} holds {} value(s), none the expected digest",
                values.len()
            )))
        }
    }

    async fn tls_alpn01(&self, identifier: &Identifier, key_authorization: &str) -> Result<(), ValidationFailure> {
        let expected = Sha256::digest(key_authorization.as_bytes());
        let addresses = self.addresses(identifier).await?;
        let mut last = ValidationFailure::Connection(format!("{} has no reachable address", identifier.value));
        for ip in addresses {
            match self.tls_alpn01_at(ip, identifier, &expected).await {
                Ok(()) => return Ok(()),
                Err(err) => last = err,
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_parse_and_match() {
        let networks = parse_networks("127.0.0.0/8, 10.1.2.3, fd00::/8").unwrap_or_default();
        assert_eq!(networks.len(), 3);
        let inside = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
            networks.iter().any(|(n, p)| in_network(ip, *n, *p))
        };
        assert!(inside("127.0.0.1") && inside("10.1.2.3") && inside("fd12::1"));
        assert!(!inside("10.1.2.4") && !inside("192.168.1.1"));
        assert!(parse_networks("10.0.0.0/33").is_err() && parse_networks("nope").is_err());
    }

    #[test]
    fn metadata_is_never_reached_even_when_allowed() {
        let config = ValidatorConfig {
            allow: parse_networks("169.254.0.0/16,127.0.0.0/8").unwrap_or_default(),
            dns_resolver: Some(SocketAddr::from(([127, 0, 0, 1], 53))),
            ..ValidatorConfig::default()
        };
        let validator = HostValidator::new(config).map_err(|e| e.to_string());
        let Ok(validator) = validator else { panic!("validator builds") };
        assert!(validator.allowed("169.254.169.254".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))).is_err());
        assert!(validator.allowed("127.0.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))).is_ok());
        assert!(validator.allowed("192.168.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))).is_err());
    }

    #[test]
    fn chunked_bodies_are_read() {
        assert_eq!(dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"), "hello world");
    }
}
