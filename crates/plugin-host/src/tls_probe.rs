//! The TLS prober of `tls_endpoints` discovery scans (`trellis_core::discovery::tls`). It lives
//! beside the plugins' [`crate::egress`] and the webhooks' [`crate::outbound`] so that one address
//! policy governs every connection the process makes: the name is resolved here, every address it
//! resolves to must pass (private, loopback, link-local, CGNAT and reserved ranges only when the
//! operator allows private networks; cloud metadata addresses never), and the connection goes only
//! to a vetted address.
//!
//! Any certificate is accepted: discovery records what an endpoint serves, it does not trust it,
//! and nothing but the handshake is sent. SNI carries the target's name (none for IP targets).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::Instant;

use trellis_core::discovery::tls::{ProbeError, ServedChain, TlsProber, TlsTarget};

use trellis_egress::{classify_ip, AddressClass, DenyReason};

/// Settings of the prober.
#[derive(Debug, Clone, Default)]
pub struct TlsProbeConfig {
    /// Probe private, loopback and link-local addresses (`TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS`).
    pub allow_private_networks: bool,
}

/// The prober.
pub struct HostTlsProber {
    config: TlsProbeConfig,
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for HostTlsProber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTlsProber").field("config", &self.config).finish_non_exhaustive()
    }
}

impl HostTlsProber {
    pub fn new(config: TlsProbeConfig) -> Result<HostTlsProber, String> {
        // Records whatever certificate is served.
        let tls = trellis_egress::tls_accepting_any_certificate()?;
        Ok(HostTlsProber { config, tls: Arc::new(tls) })
    }

    fn denied(reason: DenyReason, target: &str) -> ProbeError {
        metrics::counter!("trellis_discovery_egress_denied_total", "reason" => reason.code()).increment(1);
        tracing::warn!(target: "trellis::security", destination = target, reason = reason.code(), "discovery probe refused by the egress policy");
        let message = match reason {
            DenyReason::MetadataAddress => format!("{target} is a cloud metadata address, which is never probed"),
            _ => format!(
                "{target} is a private, loopback or link-local address (an operator can allow private networks with TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS)"
            ),
        };
        ProbeError::Denied { reason: reason.code(), message }
    }

    /// The addresses `target` may be probed at, or why none.
    async fn vetted(&self, target: &TlsTarget) -> Result<Vec<SocketAddr>, ProbeError> {
        let label = target.label();
        let candidates: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, target.port)],
            Err(_) => match tokio::net::lookup_host((target.host.as_str(), target.port)).await {
                Ok(addresses) => addresses.collect(),
                Err(err) => return Err(ProbeError::Failed(format!("cannot resolve {}: {err}", target.host))),
            },
        };
        if candidates.is_empty() {
            return Err(ProbeError::Failed(format!("{} resolves to no address", target.host)));
        }
        // Every address must pass: a name resolving to one public and one private address is
        // refused rather than probed at whichever answers.
        for address in &candidates {
            match classify_ip(address.ip()) {
                AddressClass::Public => {}
                AddressClass::Private if self.config.allow_private_networks => {}
                AddressClass::Private => {
                    return Err(Self::denied(DenyReason::PrivateAddress, &format!("{label} ({})", address.ip())))
                }
                AddressClass::Metadata => {
                    return Err(Self::denied(DenyReason::MetadataAddress, &format!("{label} ({})", address.ip())))
                }
            }
        }
        Ok(candidates)
    }

    /// Probes `target` by `deadline`. Each stage has its own outcome, so a scan's failures tell
    /// a closed port (refused) from a filtered one (no answer) from a port that is not TLS.
    async fn probe(&self, target: &TlsTarget, deadline: Instant, timeout: Duration) -> Result<ServedChain, ProbeError> {
        let addresses = tokio::time::timeout_at(deadline, self.vetted(target))
            .await
            .map_err(|_| ProbeError::Failed(format!("resolving {} timed out after {timeout:?}", target.host)))??;
        let name = match target.host.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => ServerName::try_from(target.host.clone())
                .map_err(|_| ProbeError::Failed(format!("`{}` is not a valid host name", target.host)))?,
        };
        let mut last = ProbeError::Failed("no address to connect to".into());
        for address in addresses {
            let tcp = match tokio::time::timeout_at(deadline, TcpStream::connect(address)).await {
                Ok(Ok(tcp)) => tcp,
                Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                    last = ProbeError::Refused { address: address.to_string() };
                    continue;
                }
                Ok(Err(err)) => {
                    last = ProbeError::Failed(format!("cannot connect to {address}: {err}"));
                    continue;
                }
                // The time is spent: no other address can be tried.
                Err(_) => return Err(ProbeError::Filtered { address: address.to_string(), after: timeout }),
            };
            let connector = tokio_rustls::TlsConnector::from(self.tls.clone());
            let tls = tokio::time::timeout_at(deadline, connector.connect(name.clone(), tcp))
                .await
                .map_err(|_| ProbeError::HandshakeTimeout { address: address.to_string(), after: timeout })?
                .map_err(|err| ProbeError::Failed(format!("TLS handshake with {address} failed: {err}")))?;
            let certificates: Vec<Vec<u8>> = tls
                .get_ref()
                .1
                .peer_certificates()
                .map(|chain| chain.iter().map(|c| c.as_ref().to_vec()).collect())
                .unwrap_or_default();
            return Ok(ServedChain { certificates, address: address.to_string() });
        }
        Err(last)
    }
}

#[async_trait]
impl TlsProber for HostTlsProber {
    async fn served_chain(&self, target: &TlsTarget, timeout: Duration) -> Result<ServedChain, ProbeError> {
        self.probe(target, Instant::now() + timeout, timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16) -> TlsTarget {
        TlsTarget { host: host.into(), port }
    }

    #[tokio::test]
    async fn private_and_metadata_addresses_are_refused_before_connecting() {
        let strict = HostTlsProber::new(TlsProbeConfig::default()).unwrap();
        let err = strict.served_chain(&target("127.0.0.1", 443), Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(err, ProbeError::Denied { reason: "private_address", .. }), "{err:?}");
        let open = HostTlsProber::new(TlsProbeConfig { allow_private_networks: true }).unwrap();
        let err = open.served_chain(&target("169.254.169.254", 443), Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(err, ProbeError::Denied { reason: "metadata_address", .. }), "{err:?}");
    }

    /// A closed port (the host resets the connection) reads as refused; a listener that never
    /// answers the handshake reads as such; neither as a bare timeout.
    #[tokio::test]
    async fn refused_and_silent_ports_are_told_apart() {
        let open = HostTlsProber::new(TlsProbeConfig { allow_private_networks: true }).unwrap();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let err = open.served_chain(&target("127.0.0.1", closed), Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(err, ProbeError::Refused { .. }), "{err:?}");
        assert!(err.to_string().contains("refused"), "{err}");
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let err = open.served_chain(&target("127.0.0.1", port), Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(err, ProbeError::HandshakeTimeout { .. }), "{err:?}");
        drop(silent);
    }
}
