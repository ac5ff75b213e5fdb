//! CIDR ranges (IPv4 and IPv6), parsed strictly: a range whose address has bits set beyond
//! its prefix is refused rather than guessed at.

use std::fmt;
use std::net::IpAddr;

/// An address range: `addr/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    network: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Parses `10.0.0.0/8`, `2001:db8::/32`, or a bare address (that one address).
    pub fn parse(text: &str) -> Result<IpRange, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address
            .parse()
            .map_err(|_| format!("`{text}` is not a CIDR range: `{address}` is not an IPv4 or IPv6 address"))?;
        let width = width(network);
        let prefix = match prefix {
            None => width,
            // Digits only, no leading zero: `/08` and `/+8` are typos, not prefixes.
            Some(prefix) => match prefix.parse::<u8>() {
                Ok(length) if length <= width && prefix == length.to_string() => length,
                _ => {
                    return Err(format!(
                        "`{text}` is not a CIDR range: the prefix length must be a number from 0 to {width}"
                    ))
                }
            },
        };
        let range = IpRange { network, prefix };
        if bits(network) & !mask(prefix, width) != 0 {
            let canonical = IpRange { network: from_bits(network, bits(network) & mask(prefix, width)), prefix };
            return Err(format!("`{text}` has bits set beyond its /{prefix} prefix; did you mean `{canonical}`?"));
        }
        Ok(range)
    }

    /// Whether `ip` is in the range. An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`) is also
    /// judged as the IPv4 address it stands for.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.contains_exactly(ip)
            || match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| self.contains_exactly(IpAddr::V4(v4))),
                IpAddr::V4(_) => false,
            }
    }

    fn contains_exactly(&self, ip: IpAddr) -> bool {
        if self.network.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        let mask = mask(self.prefix, width(ip));
        bits(ip) & mask == bits(self.network)
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn width(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_bits(like: IpAddr, bits: u128) -> IpAddr {
    match like {
        // Only called with bits of an IPv4 address masked: they fit.
        IpAddr::V4(_) => IpAddr::V4(u32::try_from(bits).unwrap_or(0).into()),
        IpAddr::V6(_) => IpAddr::V6(bits.into()),
    }
}

/// The network mask of a `/prefix` among `width` bits.
fn mask(prefix: u8, width: u8) -> u128 {
    let all = if width == 32 { u128::from(u32::MAX) } else { u128::MAX };
    // A shift by the whole width (a /128) overflows: nothing is left of `all` then.
    all & !all.checked_shr(u32::from(prefix)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ipv4_ranges() {
        let range = IpRange::parse("10.0.0.0/8").unwrap();
        assert!(range.contains(ip("10.0.0.0")));
        assert!(range.contains(ip("10.255.255.255")));
        assert!(!range.contains(ip("11.0.0.0")));
        assert!(!range.contains(ip("9.255.255.255")));
        assert!(!range.contains(ip("::a00:1")), "an IPv6 address is never in an IPv4 range");
        assert!(range.contains(ip("::ffff:10.1.2.3")), "an IPv4-mapped address is its IPv4 address");
        let host = IpRange::parse("192.0.2.7").unwrap();
        assert_eq!(host.to_string(), "192.0.2.7/32");
        assert!(host.contains(ip("192.0.2.7")));
        assert!(!host.contains(ip("192.0.2.8")));
        let everything = IpRange::parse("0.0.0.0/0").unwrap();
        assert!(everything.contains(ip("203.0.113.1")));
        assert!(!everything.contains(ip("2001:db8::1")));
        assert!(IpRange::parse("172.16.0.0/12").unwrap().contains(ip("172.31.255.1")));
        assert!(!IpRange::parse("172.16.0.0/12").unwrap().contains(ip("172.32.0.1")));
    }

    #[test]
    fn ipv6_ranges() {
        let range = IpRange::parse("2001:db8::/32").unwrap();
        assert!(range.contains(ip("2001:db8::1")));
        assert!(range.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(range.contains(ip("2001:DB8::abcd")));
        assert!(!range.contains(ip("2001:db9::1")));
        assert!(!range.contains(ip("10.0.0.1")));
        let host = IpRange::parse("2001:db8::7/128").unwrap();
        assert!(host.contains(ip("2001:db8::7")));
        assert!(!host.contains(ip("2001:db8::8")));
        assert!(IpRange::parse("::/0").unwrap().contains(ip("fe80::1")));
        assert!(IpRange::parse("fd00::/8").unwrap().contains(ip("fdff::1")));
    }

    #[test]
    fn malformed_ranges_are_refused_with_the_reason() {
        for bad in [
            "10.0.0.0/33",
            "2001:db8::/129",
            "10.0.0/8",
            "10.0.0.0/",
            "10.0.0.0/x",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            "10.0.0.0/8/8",
            "",
            " 10.0.0.0/8",
            "example.com/24",
            "10.0.0.256/32",
        ] {
            assert!(IpRange::parse(bad).is_err(), "{bad:?} must be refused");
        }
        let err = IpRange::parse("10.1.0.0/8").unwrap_err();
        assert!(err.contains("did you mean `10.0.0.0/8`"), "{err}");
        let err = IpRange::parse("2001:db8::1/32").unwrap_err();
        assert!(err.contains("did you mean `2001:db8::/32`"), "{err}");
    }
}
