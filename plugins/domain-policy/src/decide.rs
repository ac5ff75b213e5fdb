//! How compiled [`Rules`] judge one request: every violation becomes one reason, and any
//! violation denies; otherwise an approval pattern holds the request; otherwise it is allowed,
//! its validity shortened to the cap when it asks for more.

use std::net::IpAddr;

use trellis_plugin_sdk::policy::{Decision, EvaluationRequest, Reason, SubjectKey};
use trellis_plugin_sdk::SubjectAltName;

use crate::config::{AppliesTo, KeyAlgorithm, Rules};

/// Reason codes, stable: callers and approvers match on them.
pub mod codes {
    /// A DNS name (or DNS-looking common name) is outside every allowed suffix.
    pub const DNS_SUFFIX_NOT_ALLOWED: &str = "dns_suffix_not_allowed";
    /// A well-formed `*.name` wildcard while `allowWildcards` is false.
    pub const WILDCARD_NOT_ALLOWED: &str = "wildcard_not_allowed";
    /// A `*` anywhere but as the whole left-most label (`foo*.example.com`, `a.*.example.com`).
    pub const INVALID_WILDCARD: &str = "invalid_wildcard";
    /// An IP address (or IP-address common name) outside every allowed range.
    pub const IP_NOT_ALLOWED: &str = "ip_not_allowed";
    /// The key's algorithm (or curve) is not among `allowedKeyAlgorithms`.
    pub const KEY_ALGORITHM_NOT_ALLOWED: &str = "key_algorithm_not_allowed";
    /// An RSA key smaller than `minRsaBits`.
    pub const RSA_KEY_TOO_SMALL: &str = "rsa_key_too_small";
    /// A name matched a `requireApprovalFor` pattern (in a require-approval decision).
    pub const APPROVAL_REQUIRED: &str = "approval_required";
    /// Beside approval reasons: the validity will be shortened to `maxValidityDays`.
    pub const VALIDITY_SHORTENED: &str = "validity_shortened";
}

/// A name the certificate will carry, and where it comes from.
struct Name<'a> {
    /// As the request carries it, for messages.
    shown: &'a str,
    /// Lowercase, without a trailing dot.
    normalized: String,
    /// `DNS name` or `common name`, for messages.
    what: &'static str,
}

fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Whether a common name reads as a DNS name: DNS characters only, at least one dot, and not
/// an IP address. `Alice Smith` or `build-agent` are not judged as DNS names.
fn dns_looking(normalized: &str) -> bool {
    normalized.contains('.')
        && normalized.parse::<IpAddr>().is_err()
        && normalized.split('.').all(|label| !label.is_empty())
        && normalized.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*'))
}

impl AppliesTo {
    /// Whether this policy judges the request.
    fn covers(&self, request: &EvaluationRequest) -> bool {
        let ca_type =
            self.ca_types.as_ref().is_none_or(|types| types.iter().any(|t| t.eq_ignore_ascii_case(&request.ca_type)));
        let template = self
            .templates
            .as_ref()
            .is_none_or(|templates| request.template.as_ref().is_some_and(|name| templates.contains(name)));
        ca_type && template
    }
}

impl Rules {
    /// Decides about one request.
    pub fn decide(&self, request: &EvaluationRequest) -> Decision {
        if !self.applies_to.covers(request) {
            return Decision::allow();
        }
        let common_name = request.subject.common_name.as_deref().filter(|cn| !cn.is_empty());

        // The DNS names: every DNS SAN, then a DNS-looking common name the SANs do not repeat.
        let mut dns: Vec<Name<'_>> = Vec::new();
        for name in request.dns_names() {
            let normalized = normalize(name);
            if !dns.iter().any(|seen| seen.normalized == normalized) {
                dns.push(Name { shown: name, normalized, what: "DNS name" });
            }
        }
        if let Some(cn) = common_name {
            let normalized = normalize(cn);
            if dns_looking(&normalized) && !dns.iter().any(|seen| seen.normalized == normalized) {
                dns.push(Name { shown: cn, normalized, what: "common name" });
            }
        }

        // The IP addresses: every IP SAN, then a common name that is an IP address.
        let mut ips: Vec<(IpAddr, &'static str)> = Vec::new();
        for san in &request.subject_alt_names {
            if let SubjectAltName::Ip(ip) = san {
                if !ips.iter().any(|(seen, _)| seen == ip) {
                    ips.push((*ip, "IP address"));
                }
            }
        }
        if let Some(ip) = common_name.and_then(|cn| cn.parse::<IpAddr>().ok()) {
            if !ips.iter().any(|(seen, _)| *seen == ip) {
                ips.push((ip, "common name"));
            }
        }

        let mut denied = Vec::new();
        for name in &dns {
            self.judge_wildcard(name, &mut denied);
            self.judge_suffix(name, &mut denied);
        }
        for (ip, what) in &ips {
            self.judge_ip(*ip, what, &mut denied);
        }
        self.judge_key(&request.key, &mut denied);
        if !denied.is_empty() {
            return Decision::Deny(denied);
        }

        let shortened = self.max_validity_days.filter(|max| request.validity_days > *max);
        let mut approval = self.approvals(&dns, common_name);
        if !approval.is_empty() {
            if let Some(max) = shortened {
                approval.push(Reason::new(
                    codes::VALIDITY_SHORTENED,
                    format!(
                        "{} days were requested; this policy caps the validity at {max} days (maxValidityDays)",
                        request.validity_days
                    ),
                ));
            }
            return Decision::RequireApproval(approval);
        }
        match shortened {
            Some(max) => Decision::allow_at_most(max),
            None => Decision::allow(),
        }
    }

    fn judge_wildcard(&self, name: &Name<'_>, denied: &mut Vec<Reason>) {
        if !name.normalized.contains('*') {
            return;
        }
        let well_formed =
            name.normalized.strip_prefix("*.").is_some_and(|rest| !rest.is_empty() && !rest.contains('*'));
        if !well_formed {
            denied.push(Reason::new(
                codes::INVALID_WILDCARD,
                format!(
                    "{} {} has a wildcard that is not the whole left-most label (only `*.name` is allowed)",
                    name.what, name.shown
                ),
            ));
        } else if !self.allow_wildcards {
            denied.push(Reason::new(
                codes::WILDCARD_NOT_ALLOWED,
                format!("{} {} is a wildcard, and this policy allows no wildcards", name.what, name.shown),
            ));
        }
    }

    fn judge_suffix(&self, name: &Name<'_>, denied: &mut Vec<Reason>) {
        let Some(suffixes) = &self.dns_suffixes else { return };
        let under = |bare: &str| {
            name.normalized == bare || name.normalized.strip_suffix(bare).is_some_and(|head| head.ends_with('.'))
        };
        if suffixes.iter().any(|suffix| under(&suffix.bare)) {
            return;
        }
        let message = if suffixes.is_empty() {
            format!("{} {} is not allowed: this policy allows no DNS names", name.what, name.shown)
        } else {
            let allowed: Vec<&str> = suffixes.iter().map(|s| s.written.as_str()).collect();
            format!("{} {} is not under an allowed DNS suffix ({})", name.what, name.shown, allowed.join(", "))
        };
        denied.push(Reason::new(codes::DNS_SUFFIX_NOT_ALLOWED, message));
    }

    fn judge_ip(&self, ip: IpAddr, what: &str, denied: &mut Vec<Reason>) {
        let Some(ranges) = &self.ip_ranges else { return };
        if ranges.iter().any(|range| range.contains(ip)) {
            return;
        }
        let message = if ranges.is_empty() {
            format!("{what} {ip} is not allowed: this policy allows no IP addresses")
        } else {
            let allowed: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            format!("{what} {ip} is outside the allowed IP ranges ({})", allowed.join(", "))
        };
        denied.push(Reason::new(codes::IP_NOT_ALLOWED, message));
    }

    fn judge_key(&self, key: &SubjectKey, denied: &mut Vec<Reason>) {
        let algorithm = key_algorithm(key);
        if let Some(allowed) = &self.key_algorithms {
            if !algorithm.as_ref().is_ok_and(|algorithm| allowed.contains(algorithm)) {
                let shown = match &algorithm {
                    Ok(algorithm) => algorithm.name().to_owned(),
                    Err(described) => described.clone(),
                };
                let allowed: Vec<&str> = allowed.iter().map(|a| a.name()).collect();
                denied.push(Reason::new(
                    codes::KEY_ALGORITHM_NOT_ALLOWED,
                    format!("the key ({shown}) is not an allowed algorithm (allowed: {})", allowed.join(", ")),
                ));
                // Its size is moot.
                return;
            }
        }
        if algorithm == Ok(KeyAlgorithm::Rsa) && key.size_bits < self.min_rsa_bits {
            denied.push(Reason::new(
                codes::RSA_KEY_TOO_SMALL,
                format!("the RSA key has {} bits, below the minimum of {} bits", key.size_bits, self.min_rsa_bits),
            ));
        }
    }

    /// One reason per approval pattern that matches a DNS name or the common name.
    fn approvals(&self, dns: &[Name<'_>], common_name: Option<&str>) -> Vec<Reason> {
        let mut candidates: Vec<(&str, String)> = dns.iter().map(|n| (n.shown, n.normalized.clone())).collect();
        if let Some(cn) = common_name {
            let normalized = normalize(cn);
            if !candidates.iter().any(|(_, seen)| *seen == normalized) {
                candidates.push((cn, normalized));
            }
        }
        self.approval_patterns
            .iter()
            .filter_map(|pattern| {
                let matched: Vec<&str> = candidates
                    .iter()
                    .filter(|(_, normalized)| glob_match(&pattern.glob, normalized))
                    .map(|(shown, _)| *shown)
                    .collect();
                if matched.is_empty() {
                    return None;
                }
                Some(Reason::new(
                    codes::APPROVAL_REQUIRED,
                    format!(
                        "{} {} the pattern `{}`, which requires a second person's approval",
                        matched.join(", "),
                        if matched.len() == 1 { "matches" } else { "match" },
                        pattern.written
                    ),
                ))
            })
            .collect()
    }
}

/// The key's algorithm in the configuration's vocabulary, or a description of a key it has
/// no name for.
fn key_algorithm(key: &SubjectKey) -> Result<KeyAlgorithm, String> {
    let family = key.algorithm.to_ascii_lowercase();
    match family.as_str() {
        "rsa" => Ok(KeyAlgorithm::Rsa),
        "ed25519" => Ok(KeyAlgorithm::Ed25519),
        "ed448" => Ok(KeyAlgorithm::Ed448),
        "ec" => {
            let Some(curve) = &key.curve else { return Err("ecdsa on an unnamed curve".to_owned()) };
            match curve.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
                "p256" | "secp256r1" | "prime256v1" => Ok(KeyAlgorithm::EcdsaP256),
                "p384" | "secp384r1" => Ok(KeyAlgorithm::EcdsaP384),
                "p521" | "secp521r1" => Ok(KeyAlgorithm::EcdsaP521),
                _ => Err(format!("ecdsa on curve {curve}")),
            }
        }
        _ => Err(format!("algorithm {}", key.algorithm)),
    }
}

/// `*` matches any run of characters (dots included); everything else matches itself.
fn glob_match(pattern: &str, text: &str) -> bool {
    let (pattern, text) = (pattern.as_bytes(), text.as_bytes());
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it currently stands for up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            // Let the last `*` swallow one more character.
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*.prod.example.com", "api.prod.example.com"));
        assert!(glob_match("*.prod.example.com", "a.b.prod.example.com"));
        assert!(glob_match("*.prod.example.com", "*.prod.example.com"));
        assert!(!glob_match("*.prod.example.com", "prod.example.com"));
        assert!(!glob_match("*.prod.example.com", "api.prod.example.com.evil.net"));
        assert!(glob_match("payments.*", "payments.example.com"));
        assert!(!glob_match("payments.*", "mypayments.example.com"));
        assert!(glob_match("*payments*", "eu-payments-1.example.com"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("exact.example.com", "exact.example.com"));
        assert!(!glob_match("exact.example.com", "exact.example.co"));
        assert!(glob_match("**.x", "a.x"));
    }

    #[test]
    fn dns_looking_common_names() {
        for yes in ["www.example.com", "*.example.com", "_acme.example.com", "a-b.c"] {
            assert!(dns_looking(yes), "{yes}");
        }
        for no in ["alice smith", "build-agent", "10.0.0.1", "2001:db8::1", "a..b", "user@example.com", ""] {
            assert!(!dns_looking(no), "{no}");
        }
    }
}
