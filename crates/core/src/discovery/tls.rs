//! `tls_endpoints` scans: the targets a scan is given (`host:port`, `ip:port`, `[v6]:port`, a
//! CIDR range of at most 256 addresses with a port) and the port through which the domain reaches
//! them. The domain knows nothing of sockets or TLS libraries: `TlsProber` is implemented outside
//! the core (`trellis-plugin-host`'s `tls_probe`), under the same egress policy as plugins and
//! webhooks (names resolved by the implementation, private and metadata addresses refused unless
//! the operator allows them, checked on the resolved address).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::error::{Error, Result};

/// Most entries in one scan's `targets`.
pub const MAX_TARGETS: usize = 256;
/// Most endpoints one scan connects to, CIDR ranges expanded.
pub const MAX_ENDPOINTS: usize = 4096;
/// Widest range: a /24 (IPv4), 256 addresses (IPv6 /120).
pub const MIN_PREFIX_V4: u8 = 24;
pub const MIN_PREFIX_V6: u8 = 120;
const DEFAULT_PORT: u16 = 443;

/// One endpoint to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsTarget {
    /// A DNS name (sent as SNI) or an IP address (no SNI).
    pub host: String,
    pub port: u16,
}

impl TlsTarget {
    /// `host:port`, with IPv6 addresses bracketed.
    pub fn label(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn is_ip(&self) -> bool {
        self.host.parse::<IpAddr>().is_ok()
    }
}

/// What an endpoint served: its certificate chain, leaf first (DER), as sent (unverified:
/// discovery records what is served, it does not trust it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedChain {
    pub certificates: Vec<Vec<u8>>,
    /// The address connected to.
    pub address: String,
}

/// Why an endpoint yielded no chain. Messages name the endpoint's problem, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// Refused by the egress policy before connecting (`private_address`, `metadata_address`).
    #[error("refused by the egress policy ({reason}): {message}")]
    Denied { reason: &'static str, message: String },
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The host answered the connection attempt with a reset: it is up, nothing listens there.
    #[error("cannot connect to {address}: connection refused (the port is closed)")]
    Refused { address: String },
    /// No answer to the connection attempt at all: a firewall drops it, or the host is down.
    #[error("cannot connect to {address}: no answer within {after:?} (the port is filtered, or the host is down)")]
    Filtered { address: String, after: Duration },
    /// Connected, but the TLS handshake did not finish: not a TLS service, or a stalled one.
    #[error("connected to {address}, but no TLS handshake within {after:?} (not a TLS service, or a stalled one)")]
    HandshakeTimeout { address: String, after: Duration },
    #[error("{0}")]
    Failed(String),
}

#[async_trait]
pub trait TlsProber: Send + Sync + 'static {
    /// Resolves and vets `target`, connects, completes a TLS handshake (any certificate is
    /// accepted) and returns the chain served, all within `timeout`.
    async fn served_chain(&self, target: &TlsTarget, timeout: Duration)
        -> std::result::Result<ServedChain, ProbeError>;
}

/// A prober that reaches nothing: the default of contexts built without one.
#[derive(Debug, Default)]
pub struct NoProber;

#[async_trait]
impl TlsProber for NoProber {
    async fn served_chain(&self, _: &TlsTarget, _: Duration) -> std::result::Result<ServedChain, ProbeError> {
        Err(ProbeError::Failed("this process has no TLS prober".into()))
    }
}

/// How long and how widely a scan probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsScanSettings {
    /// Endpoints probed at once per scan (`TRELLIS_DISCOVERY_TLS_CONCURRENCY`).
    pub concurrency: usize,
    /// Per endpoint: resolution, connection and handshake (`TRELLIS_DISCOVERY_TLS_TIMEOUT_MS`).
    pub timeout: Duration,
}

impl Default for TlsScanSettings {
    fn default() -> Self {
        TlsScanSettings { concurrency: 16, timeout: Duration::from_secs(5) }
    }
}

/// Splits `text` into host and port: `host:port`, `[v6]:port`, a bare host (port 443), a bare
/// IPv6 address.
fn split_host_port(text: &str) -> std::result::Result<(String, u16), String> {
    let port_of = |p: &str| -> std::result::Result<u16, String> {
        match p.parse::<u16>() {
            Ok(0) | Err(_) => Err(format!("`{p}` is not a port (1-65535)")),
            Ok(port) => Ok(port),
        }
    };
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("an opening `[` without its `]`")?;
        let port = match after {
            "" => DEFAULT_PORT,
            _ => port_of(after.strip_prefix(':').ok_or("expected `:port` after `]`")?)?,
        };
        return Ok((host.to_owned(), port));
    }
    // A bare IPv6 address (more than one colon, no brackets) has no port.
    if text.matches(':').count() > 1 {
        return Ok((text.to_owned(), DEFAULT_PORT));
    }
    match text.rsplit_once(':') {
        Some((host, port)) => Ok((host.to_owned(), port_of(port)?)),
        None => Ok((text.to_owned(), DEFAULT_PORT)),
    }
}

fn check_name(host: &str) -> std::result::Result<String, String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!("`{host}` is neither a host name nor an IP address"));
    }
    Ok(host)
}

/// The endpoints of one `targets` entry.
fn expand(entry: &str) -> std::result::Result<Vec<TlsTarget>, String> {
    let entry = entry.trim();
    if entry.is_empty() {
        return Err("is empty".into());
    }
    if entry.len() > 300 || entry.chars().any(char::is_control) || entry.contains(char::is_whitespace) {
        return Err("is not of the form host:port or CIDR:port".into());
    }
    let (host, port) = split_host_port(entry)?;
    let Some((network, prefix)) = host.split_once('/') else {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![TlsTarget { host: ip.to_string(), port }]);
        }
        return Ok(vec![TlsTarget { host: check_name(&host)?, port }]);
    };
    let prefix: u8 = prefix.parse().map_err(|_| format!("`/{prefix}` is not a prefix length"))?;
    match network.parse::<IpAddr>() {
        Ok(IpAddr::V4(base)) => {
            if prefix > 32 {
                return Err(format!("`/{prefix}` is not an IPv4 prefix length"));
            }
            if prefix < MIN_PREFIX_V4 {
                return Err(format!(
                    "`/{prefix}` is wider than a /{MIN_PREFIX_V4}: scan at most 256 addresses per range"
                ));
            }
            let size = 1u32 << (32 - prefix);
            let start = u32::from(base) & !(size - 1);
            // Network and broadcast addresses are skipped where a range has them.
            let hosts: Vec<u32> =
                if size >= 4 { (start + 1..start + size - 1).collect() } else { (start..start + size).collect() };
            Ok(hosts.into_iter().map(|a| TlsTarget { host: Ipv4Addr::from(a).to_string(), port }).collect())
        }
        Ok(IpAddr::V6(base)) => {
            if prefix > 128 {
                return Err(format!("`/{prefix}` is not an IPv6 prefix length"));
            }
            if prefix < MIN_PREFIX_V6 {
                return Err(format!(
                    "`/{prefix}` is wider than a /{MIN_PREFIX_V6}: scan at most 256 addresses per range"
                ));
            }
            let size = 1u128 << (128 - prefix);
            let start = u128::from(base) & !(size - 1);
            Ok((start..start + size).map(|a| TlsTarget { host: Ipv6Addr::from(a).to_string(), port }).collect())
        }
        Err(_) => Err(format!("`{network}` is not an IP network (CIDR ranges take an IP address)")),
    }
}

/// Checks and expands a scan's `targets`: every problem is listed (400 `details.targets`), and
/// duplicates are probed once.
pub fn parse_targets(targets: &[String]) -> Result<Vec<TlsTarget>> {
    if targets.is_empty() {
        return Err(Error::invalid_field(
            "targets",
            "is required for a tls_endpoints scan (e.g. [\"example.com:443\"])",
        ));
    }
    if targets.len() > MAX_TARGETS {
        return Err(Error::invalid_field("targets", format!("at most {MAX_TARGETS} entries")));
    }
    let mut problems = Vec::new();
    let mut endpoints = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for entry in targets {
        match expand(entry) {
            Ok(expanded) => {
                for target in expanded {
                    if seen.insert(target.clone()) {
                        endpoints.push(target);
                    }
                }
            }
            Err(message) => problems.push(json!({ "target": entry, "message": message })),
        }
    }
    if !problems.is_empty() {
        let first = problems[0]["message"].as_str().unwrap_or_default().to_owned();
        let entry = problems[0]["target"].as_str().unwrap_or_default().to_owned();
        return Err(Error::validation_with(
            format!("targets: `{entry}` {first}"),
            json!({ "field": "targets", "targets": problems }),
        ));
    }
    if endpoints.len() > MAX_ENDPOINTS {
        return Err(Error::invalid_field(
            "targets",
            format!("{} endpoints after expanding ranges; at most {MAX_ENDPOINTS} per scan", endpoints.len()),
        ));
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &[&str]) -> Result<Vec<TlsTarget>> {
        parse_targets(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn forms_of_targets() {
        let got = parse(&["Example.COM:8443", "10.1.2.3:443", "[::1]:9443", "host.internal", "::2"]).unwrap();
        let labels: Vec<String> = got.iter().map(TlsTarget::label).collect();
        assert_eq!(labels, ["example.com:8443", "10.1.2.3:443", "[::1]:9443", "host.internal:443", "[::2]:443"]);
        assert!(!got[0].is_ip() && got[1].is_ip());
    }

    #[test]
    fn ranges_expand_without_network_and_broadcast() {
        let got = parse(&["10.0.0.0/24:443"]).unwrap();
        assert_eq!(got.len(), 254);
        assert_eq!(got[0].host, "10.0.0.1");
        assert_eq!(got[253].host, "10.0.0.254");
        assert_eq!(parse(&["10.0.0.7/32:1"]).unwrap().len(), 1);
        assert_eq!(parse(&["10.0.0.8/31:1"]).unwrap().len(), 2);
        assert_eq!(parse(&["[fd00::/120]:443"]).unwrap().len(), 256);
    }

    #[test]
    fn refusals_name_each_target() {
        let err = parse(&["10.0.0.0/23:443", "bad host:1", "a:0", "ok:443", "x:99999", "host:"]).unwrap_err();
        let Error::Validation { details: Some(details), .. } = &err else { panic!("{err:?}") };
        let problems = details["targets"].as_array().unwrap();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0]["message"].as_str().unwrap().contains("/24"));
        assert!(parse(&[]).is_err());
        assert!(parse(&["[fd00::/119]:443"]).is_err());
        assert!(parse(&["example.com/24:443"]).is_err());
    }

    #[test]
    fn duplicates_are_probed_once() {
        assert_eq!(parse(&["a.example:443", "A.example:443", "10.0.0.1/32:443", "10.0.0.1:443"]).unwrap().len(), 2);
    }
}
