//! A CA's bundled root certificate (configuration member `rootCertificate`, PEM), checked as
//! spec §4.1 asks of every CA's test: it parses, it is a CA (basicConstraints CA:TRUE), and it
//! is within its validity (a warning inside [`EXPIRY_WARNING_DAYS`] of expiry).
//!
//! Here, not in a plugin, because two connectors check it the same way (`plugins/ca-probe`, and
//! `plugins/acme` for the commercial types that moved to it from `ca-probe`) and one plugin
//! crate cannot link another's exports. The check names (`root-certificate`, `root-is-ca`,
//! `root-validity`) and messages are part of what users see in test reports: a record keeps
//! the same findings whichever of the two serves it.
//!
//! ```ignore
//! fn validate_config(config: &Config) -> Result<(), PluginError> {
//!     let issues: Vec<ConfigIssue> = root_certificate::config_issue(config.root_certificate.as_deref()).into_iter().collect();
//!     if issues.is_empty() { Ok(()) } else { Err(PluginError::InvalidConfig(issues)) }
//! }
//! // In test_connection:
//! if let Some((root_checks, root_details)) = root_certificate::checks(config.root_certificate.as_deref(), clock::unix_seconds()) {
//!     checks.extend(root_checks);
//!     details["rootCertificate"] = root_details;
//! }
//! ```

use serde_json::{json, Value};

use crate::{util, Check, ConfigIssue};

/// A root certificate expiring sooner than this (days) is a warning.
pub const EXPIRY_WARNING_DAYS: i64 = 30;

/// The JSON pointer of the member these helpers check.
pub const FIELD: &str = "/rootCertificate";

/// What the checks read of the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootFacts {
    /// The subject, as an RFC 4514 string.
    pub subject: String,
    /// basicConstraints CA:TRUE.
    pub is_ca: bool,
    /// Start of validity, Unix seconds.
    pub not_before: i64,
    /// End of validity, Unix seconds.
    pub not_after: i64,
}

/// The member's text when a root is bundled at all: absent and blank members are no root.
fn bundled(root: Option<&str>) -> Option<&str> {
    root.filter(|pem| !pem.trim().is_empty())
}

/// Parses the first certificate of `pem`, or says why it cannot (a phrase that follows
/// "rootCertificate ...").
pub fn parse(pem: &str) -> Result<RootFacts, String> {
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem.trim().as_bytes()).map_err(|_| "is not a PEM certificate".to_owned())?;
    if block.label != "CERTIFICATE" {
        return Err(format!("is a PEM `{}` block, not a CERTIFICATE", block.label));
    }
    let (_, certificate) = x509_parser::parse_x509_certificate(&block.contents)
        .map_err(|err| format!("does not parse as an X.509 certificate: {err}"))?;
    let is_ca = certificate.basic_constraints().ok().flatten().is_some_and(|bc| bc.value.ca);
    Ok(RootFacts {
        subject: certificate.subject().to_string(),
        is_ca,
        not_before: certificate.validity().not_before.timestamp(),
        not_after: certificate.validity().not_after.timestamp(),
    })
}

/// For `validate_config`: the issue with a bundled root that cannot serve (it does not parse,
/// or is not a CA), at [`FIELD`]. An expired root is not refused here: expiry is the test's
/// finding, since a record may be saved before its operator replaces the root.
pub fn config_issue(root: Option<&str>) -> Option<ConfigIssue> {
    match parse(bundled(root)?) {
        Ok(facts) if !facts.is_ca => {
            Some(ConfigIssue::new(FIELD, "is not a CA certificate (basicConstraints CA:TRUE is missing)"))
        }
        Ok(_) => None,
        Err(problem) => Some(ConfigIssue::new(FIELD, problem)),
    }
}

/// For `test_connection`: the root's checks at `now` (Unix seconds) and the details they add
/// (`{subject, notAfter, daysUntilExpiry}`, `null` when it does not parse); `None` when no root
/// is bundled.
pub fn checks(root: Option<&str>, now: i64) -> Option<(Vec<Check>, Value)> {
    let facts = match parse(bundled(root)?) {
        Ok(facts) => facts,
        Err(problem) => {
            return Some((vec![Check::fail("root-certificate", format!("rootCertificate {problem}"))], Value::Null))
        }
    };
    let mut checks = vec![Check::pass("root-certificate", format!("parses: {}", facts.subject))];
    checks.push(if facts.is_ca {
        Check::pass("root-is-ca", "basicConstraints CA:TRUE")
    } else {
        Check::fail("root-is-ca", "rootCertificate is not a CA certificate (basicConstraints CA:TRUE is missing)")
    });
    let days_left = (facts.not_after - now).div_euclid(86_400);
    checks.push(if facts.not_after <= now {
        Check::fail("root-validity", format!("rootCertificate expired {} days ago", -days_left))
    } else if facts.not_before > now {
        Check::fail("root-validity", "rootCertificate is not valid yet")
    } else if days_left < EXPIRY_WARNING_DAYS {
        Check::warn("root-validity", format!("rootCertificate expires in {days_left} days"))
    } else {
        Check::pass("root-validity", format!("valid for {days_left} more days"))
    });
    let details = json!({ "subject": facts.subject, "notAfter": util::rfc3339(facts.not_after * 1000),
        "daysUntilExpiry": days_left });
    Some((checks, details))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::CheckStatus;

    const NOW: i64 = 1_800_000_000;

    /// A self-signed certificate valid from `not_before` to `not_after` (Unix seconds).
    fn certificate(is_ca: bool, not_before: i64, not_after: i64) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "SDK Test Root");
        if is_ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_before as u64);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_after as u64);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    fn status(checks: &[Check], name: &str) -> Option<CheckStatus> {
        checks.iter().find(|c| c.name == name).map(|c| c.status)
    }

    #[test]
    fn no_root_is_no_finding() {
        assert_eq!(checks(None, NOW), None);
        assert_eq!(checks(Some("  \n"), NOW), None);
        assert_eq!(config_issue(None), None);
        assert_eq!(config_issue(Some("")), None);
    }

    #[test]
    fn each_check_reports_on_its_own() {
        let (good, details) = checks(Some(&certificate(true, 0, NOW + 400 * 86_400)), NOW).unwrap();
        assert!(good.iter().all(|c| c.status == CheckStatus::Pass), "{good:?}");
        assert_eq!(details["daysUntilExpiry"], 400);
        assert!(details["subject"].as_str().unwrap().contains("SDK Test Root"));
        let (expired, _) = checks(Some(&certificate(true, 0, NOW - 86_400)), NOW).unwrap();
        assert_eq!(status(&expired, "root-validity"), Some(CheckStatus::Fail));
        let (soon, _) = checks(Some(&certificate(true, 0, NOW + 10 * 86_400)), NOW).unwrap();
        assert_eq!(status(&soon, "root-validity"), Some(CheckStatus::Warn));
        let (early, _) = checks(Some(&certificate(true, NOW + 86_400, NOW + 400 * 86_400)), NOW).unwrap();
        assert_eq!(status(&early, "root-validity"), Some(CheckStatus::Fail));
        let (leaf, _) = checks(Some(&certificate(false, 0, NOW + 400 * 86_400)), NOW).unwrap();
        assert_eq!(status(&leaf, "root-is-ca"), Some(CheckStatus::Fail));
        let (garbage, details) = checks(Some("not a certificate"), NOW).unwrap();
        assert_eq!(garbage.len(), 1);
        assert_eq!(status(&garbage, "root-certificate"), Some(CheckStatus::Fail));
        assert_eq!(details, Value::Null);
    }

    #[test]
    fn config_refuses_unusable_roots_but_not_expired_ones() {
        let leaf = config_issue(Some(&certificate(false, 0, NOW))).unwrap();
        assert_eq!(leaf.field, FIELD);
        let key = config_issue(Some("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")).unwrap();
        assert!(key.message.contains("PRIVATE KEY"), "{key:?}");
        assert!(config_issue(Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")).is_some());
        assert_eq!(config_issue(Some(&certificate(true, 0, 100))), None);
    }
}
