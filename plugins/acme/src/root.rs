//! A bundled root certificate (`rootCertificate`) checked by the connection test, as spec §4.1
//! asks of every CA's test. Records of the commercial types created under `ca-probe` may carry
//! one; the checks and their names are `ca-probe`'s (`root-certificate`, `root-is-ca`,
//! `root-validity`), so such a record's test reports the same findings after the upgrade. Kept
//! here rather than shared: a plugin crate cannot link another plugin's exports.

use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// A root certificate expiring sooner than this is a warning.
const EXPIRY_WARNING_DAYS: i64 = 30;

/// What the checks read of the root.
pub struct RootFacts {
    pub subject: String,
    pub is_ca: bool,
    pub not_before: i64,
    pub not_after: i64,
}

/// Parses the first certificate of `pem`, or says why it cannot.
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

/// The root's checks at `now` (seconds) and the details they add.
pub fn checks(pem: &str, now: i64) -> (Vec<Check>, Value) {
    let facts = match parse(pem) {
        Ok(facts) => facts,
        Err(problem) => {
            return (vec![Check::fail("root-certificate", format!("rootCertificate {problem}"))], Value::Null)
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
    (checks, details)
}
