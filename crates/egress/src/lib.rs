//! The egress rules of every outbound connection Trellis makes: plugins' `wasi:http` requests
//! and DNS-01 providers (`trellis-plugin-host`'s `egress`), webhook deliveries ([`webhook`]) and
//! TLS discovery probes (`trellis-plugin-host`'s `tls_probe`).
//!
//! - [`classify_ip`]: public, private (loopback, RFC 1918, link-local, CGNAT, reserved, and the
//!   IPv6 forms and tunnels that carry such an IPv4 address) or cloud metadata.
//! - [`check_address`]: the one decision on a resolved address: public passes, private only with
//!   the operator's leave, metadata never.
//! - [`EgressGrant`]: allow-lists of `host`, `host:port`, `*.domain` or URL entries.
//! - [`DenyReason`]: why a destination was refused, with stable codes (metrics labels, logs).
//!
//! The rules are pure (no I/O); each caller resolves names itself and checks every address it
//! is about to connect to, so a DNS answer cannot turn a vetted name into a private address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub mod acme;
pub mod oidc;
pub mod webhook;

/// Why a request was refused. Codes are stable (metrics label, logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    HostNotAllowed,
    PrivateAddress,
    MetadataAddress,
    Scheme,
}

impl DenyReason {
    pub fn code(self) -> &'static str {
        match self {
            DenyReason::HostNotAllowed => "host_not_allowed",
            DenyReason::PrivateAddress => "private_address",
            DenyReason::MetadataAddress => "metadata_address",
            DenyReason::Scheme => "scheme_not_allowed",
        }
    }
}

/// Which hosts one call may reach: the record's hosts plus the operator's grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressGrant {
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
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> EgressGrant {
        EgressGrant { patterns: entries.into_iter().filter_map(HostPattern::parse).collect() }
    }

    pub fn allows(&self, host: &str, port: u16) -> bool {
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

/// How an address is treated by the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    Public,
    /// Loopback, private, link-local, CGNAT, unspecified, multicast, documentation, reserved.
    Private,
    /// Cloud instance-metadata endpoints: refused even when private networks are allowed,
    /// because they hand out the host's own credentials.
    Metadata,
}

pub fn classify_ip(ip: IpAddr) -> AddressClass {
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

/// Whether a connection to `ip` may be made: public addresses always, private ones only when the
/// operator allows private networks, metadata addresses never.
pub fn check_address(ip: IpAddr, allow_private_networks: bool) -> Result<(), DenyReason> {
    match classify_ip(ip) {
        AddressClass::Public => Ok(()),
        AddressClass::Private if allow_private_networks => Ok(()),
        AddressClass::Private => Err(DenyReason::PrivateAddress),
        AddressClass::Metadata => Err(DenyReason::MetadataAddress),
    }
}

/// A TLS client configuration that accepts whatever certificate the server presents, for the
/// two callers that inspect the certificate themselves instead of trusting it: the discovery
/// prober (records what is served) and the ACME tls-alpn-01 validator (RFC 8737 §3 expects a
/// self-signed certificate). Handshake signatures are not checked either; nothing sent over such
/// a connection may be secret.
pub fn tls_accepting_any_certificate() -> Result<rustls::ClientConfig, String> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let schemes = provider.signature_verification_algorithms.supported_schemes();
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS setup: {err}"))?
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AcceptAnything(schemes)))
        .with_no_client_auth())
}

#[derive(Debug)]
struct AcceptAnything(Vec<rustls::SignatureScheme>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{check_address, classify_ip, AddressClass, DenyReason, EgressGrant};

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

    #[test]
    fn private_addresses_pass_only_with_the_operators_leave_and_metadata_never() {
        let ip = |text: &str| text.parse::<IpAddr>().expect("ip");
        assert_eq!(check_address(ip("8.8.8.8"), false), Ok(()));
        assert_eq!(check_address(ip("10.0.0.1"), false), Err(DenyReason::PrivateAddress));
        assert_eq!(check_address(ip("10.0.0.1"), true), Ok(()));
        assert_eq!(check_address(ip("169.254.169.254"), true), Err(DenyReason::MetadataAddress));
        assert_eq!(DenyReason::MetadataAddress.code(), "metadata_address");
    }
}
