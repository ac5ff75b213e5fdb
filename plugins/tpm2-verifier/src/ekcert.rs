//! EK certificates: lenient parsing (vendor padding, NV headers), the TPM manufacturer from the
//! subject alternative name, and path building to a workspace trust anchor through untrusted
//! intermediates, verifying every signature over the certificate's original TBS bytes.

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;
use x509_parser::time::ASN1Time;

use crate::crypto;

/// tcg-at-tpmManufacturer.
pub const TPM_MANUFACTURER_OID: &str = "2.23.133.2.1";

/// Longest path tried: leaf, up to this many intermediates, anchor.
const MAX_INTERMEDIATES: usize = 6;
/// Signature verifications one path search may spend: the intermediates are the device's, and
/// many certificates with one subject must not make the search exponential.
const MAX_SIGNATURE_CHECKS: usize = 64;
/// Reasons named in an `ek_cert_untrusted` detail.
const MAX_REASONS: usize = 4;

/// A certificate with the exact DER bytes it was parsed from.
pub struct Cert<'a> {
    pub der: &'a [u8],
    pub x509: X509Certificate<'a>,
}

/// A trust anchor: a certificate and the manufacturer it is restricted to, normalised.
pub struct Anchor<'a> {
    pub cert: Cert<'a>,
    pub manufacturer: Option<String>,
}

/// Parses one certificate at the start of `bytes`. The NV header some TPMs store before the
/// DER (`10 01 00 <u16 length>`) is skipped; whatever follows the DER (vendor padding to the
/// NV index size) is ignored: it is not covered by the signature.
pub fn parse_ek_certificate(bytes: &[u8]) -> Result<Cert<'_>, String> {
    let bytes = match bytes {
        [0x10, 0x01, 0x00, _, _, rest @ ..] => rest,
        _ => bytes,
    };
    let (rest, x509) = X509Certificate::from_der(bytes).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let len = bytes.len() - rest.len();
    let der = bytes.get(..len).ok_or("certificate length")?;
    Ok(Cert { der, x509 })
}

/// Parses every certificate in `bytes`: one DER certificate, or several concatenated (an NV
/// chain index), then optional padding (0x00 or 0xFF bytes).
pub fn parse_certificates(bytes: &[u8]) -> Result<Vec<Cert<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() && !rest.iter().all(|b| *b == 0xff || *b == 0x00) {
        let (next, x509) = X509Certificate::from_der(rest).map_err(|e| format!("not an X.509 certificate: {e}"))?;
        let len = rest.len() - next.len();
        let der = rest.get(..len).ok_or("certificate length")?;
        out.push(Cert { der, x509 });
        rest = next;
    }
    if out.is_empty() {
        return Err("no certificate".to_owned());
    }
    Ok(out)
}

/// Normalises a TCG manufacturer id: `id:` (any case, optional) and eight hex digits, to
/// `id:XXXXXXXX` in uppercase. `None` for anything else.
pub fn normalize_manufacturer(text: &str) -> Option<String> {
    let text = text.trim();
    let digits = match text.get(..3) {
        Some(prefix) if prefix.eq_ignore_ascii_case("id:") => text.get(3..)?,
        _ => text,
    };
    if digits.len() == 8 && digits.chars().all(|c| c.is_ascii_hexdigit()) {
        Some(format!("id:{}", digits.to_ascii_uppercase()))
    } else {
        None
    }
}

/// The manufacturer named by the certificate's subject alternative name (a directoryName
/// holding tcg-at-tpmManufacturer), normalised; `Ok(None)` when there is none.
pub fn manufacturer(cert: &X509Certificate<'_>) -> Result<Option<String>, String> {
    let san = cert.subject_alternative_name().map_err(|e| format!("subject alternative name: {e}"))?;
    let mut found: Option<String> = None;
    for name in san.iter().flat_map(|ext| ext.value.general_names.iter()) {
        let GeneralName::DirectoryName(dn) = name else { continue };
        for attribute in dn.iter_attributes() {
            if attribute.attr_type().to_id_string() != TPM_MANUFACTURER_OID {
                continue;
            }
            let value = attribute.as_str().map_err(|_| "tpmManufacturer is not a string".to_owned())?;
            let normalised =
                normalize_manufacturer(value).ok_or_else(|| format!("tpmManufacturer {value:?} is not id:XXXXXXXX"))?;
            match &found {
                Some(previous) if *previous != normalised => {
                    return Err(format!("two tpmManufacturer values: {previous} and {normalised}"));
                }
                _ => found = Some(normalised),
            }
        }
    }
    Ok(found)
}

/// A certificate's subject, for details.
pub fn subject(cert: &X509Certificate<'_>) -> String {
    let s = cert.subject().to_string();
    if s.is_empty() {
        "(empty subject)".to_owned()
    } else {
        s
    }
}

/// Whether `cert` is valid at `now` (seconds since the epoch).
pub fn valid_at(cert: &X509Certificate<'_>, now: i64) -> bool {
    ASN1Time::from_timestamp(now).map(|t| cert.validity().is_valid_at(t)).unwrap_or(false)
}

/// Whether `issuer` signed `cert`: names chain and the signature verifies over the raw TBS.
fn signed_by(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> Result<(), String> {
    if cert.issuer().as_raw() != issuer.subject().as_raw() {
        return Err("issuer name differs".to_owned());
    }
    let outer = cert.signature_algorithm.algorithm.to_id_string();
    let inner = cert.tbs_certificate.signature.algorithm.to_id_string();
    if outer != inner {
        return Err(format!("signature algorithm {outer} differs from the TBS's {inner}"));
    }
    crypto::verify_x509_signature(
        &outer,
        cert.tbs_certificate.as_ref(),
        &cert.signature_value.data,
        issuer.public_key(),
    )
}

/// Whether `cert` may issue certificates: basicConstraints cA, and keyCertSign when a key
/// usage is present.
fn is_issuing_ca(cert: &X509Certificate<'_>) -> bool {
    let ca = matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
    let usage_ok = match cert.key_usage() {
        Ok(Some(ku)) => ku.value.key_cert_sign(),
        Ok(None) => true,
        Err(_) => false,
    };
    ca && usage_ok
}

/// Builds a path from `leaf` to one of `anchors` through `intermediates`. An anchor restricted
/// to a manufacturer only vouches for leaves naming that manufacturer. Intermediates must be
/// CAs and, when `now` is given, valid then (anchors are trusted as configured). Returns the
/// subjects from the leaf's issuer up to the anchor, or why no path was found.
pub fn build_path(
    leaf: &Cert<'_>,
    leaf_manufacturer: Option<&str>,
    intermediates: &[Cert<'_>],
    anchors: &[Anchor<'_>],
    now: Option<i64>,
) -> Result<Vec<String>, String> {
    if anchors.is_empty() {
        return Err("the workspace has no trust anchors".to_owned());
    }
    let mut search = Search {
        intermediates,
        anchors,
        now,
        used: Vec::new(),
        path: Vec::new(),
        reasons: Vec::new(),
        budget: MAX_SIGNATURE_CHECKS,
    };
    if search.from(leaf, leaf_manufacturer) {
        return Ok(search.path);
    }
    // Distinct reasons, the first few: the detail stays readable whatever the device sent.
    let mut reasons: Vec<String> = Vec::new();
    let mut more = 0usize;
    for reason in search.reasons {
        if reasons.contains(&reason) {
            continue;
        }
        if reasons.len() < MAX_REASONS {
            reasons.push(reason);
        } else {
            more += 1;
        }
    }
    if reasons.is_empty() {
        reasons.push(format!("no anchor or intermediate issued {}", subject(&leaf.x509)));
    }
    if more > 0 {
        reasons.push(format!("{more} more"));
    }
    Err(reasons.join("; "))
}

struct Search<'s, 'a> {
    intermediates: &'s [Cert<'a>],
    anchors: &'s [Anchor<'a>],
    now: Option<i64>,
    used: Vec<usize>,
    path: Vec<String>,
    reasons: Vec<String>,
    budget: usize,
}

impl Search<'_, '_> {
    /// Spends one signature verification of the budget.
    fn signed_by(&mut self, cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> Result<(), String> {
        if self.budget == 0 {
            return Err("too many candidate issuers".to_owned());
        }
        self.budget -= 1;
        signed_by(cert, issuer)
    }

    /// Whether a path leads from `cert` to an anchor.
    fn from(&mut self, cert: &Cert<'_>, manufacturer: Option<&str>) -> bool {
        let anchors = self.anchors;
        for anchor in anchors {
            let allowed = match &anchor.manufacturer {
                None => true,
                Some(only) => manufacturer == Some(only.as_str()),
            };
            let is_anchor = anchor.cert.der == cert.der;
            let names_chain = cert.x509.issuer().as_raw() == anchor.cert.x509.subject().as_raw();
            if !is_anchor && !names_chain {
                continue;
            }
            if !allowed {
                self.reasons.push(format!(
                    "anchor {} only vouches for {}, the EK certificate names {}",
                    subject(&anchor.cert.x509),
                    anchor.manufacturer.as_deref().unwrap_or_default(),
                    manufacturer.unwrap_or("no manufacturer")
                ));
                continue;
            }
            if is_anchor {
                self.path.push(subject(&anchor.cert.x509));
                return true;
            }
            match self.signed_by(&cert.x509, &anchor.cert.x509) {
                Ok(()) => {
                    self.path.push(subject(&anchor.cert.x509));
                    return true;
                }
                Err(e) => self.reasons.push(format!(
                    "{} not verified by anchor {}: {e}",
                    subject(&cert.x509),
                    subject(&anchor.cert.x509)
                )),
            }
        }
        if self.used.len() >= MAX_INTERMEDIATES {
            self.reasons.push("path too long".to_owned());
            return false;
        }
        let intermediates = self.intermediates;
        for (index, candidate) in intermediates.iter().enumerate() {
            if self.used.contains(&index) || cert.x509.issuer().as_raw() != candidate.x509.subject().as_raw() {
                continue;
            }
            if !is_issuing_ca(&candidate.x509) {
                self.reasons.push(format!("intermediate {} is not a CA", subject(&candidate.x509)));
                continue;
            }
            if let Some(now) = self.now {
                if !valid_at(&candidate.x509, now) {
                    self.reasons.push(format!("intermediate {} is not valid now", subject(&candidate.x509)));
                    continue;
                }
            }
            if let Err(e) = self.signed_by(&cert.x509, &candidate.x509) {
                self.reasons.push(format!("{} not verified by {}: {e}", subject(&cert.x509), subject(&candidate.x509)));
                continue;
            }
            self.used.push(index);
            self.path.push(subject(&candidate.x509));
            if self.from(candidate, manufacturer) {
                return true;
            }
            self.path.pop();
            self.used.pop();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manufacturers_normalise() {
        assert_eq!(normalize_manufacturer("id:00001014").as_deref(), Some("id:00001014"));
        assert_eq!(normalize_manufacturer("ID:4e544300").as_deref(), Some("id:4E544300"));
        assert_eq!(normalize_manufacturer("49465800").as_deref(), Some("id:49465800"));
        assert_eq!(normalize_manufacturer("id:IFX"), None);
        assert_eq!(normalize_manufacturer("id:123456789"), None);
        assert_eq!(normalize_manufacturer(""), None);
    }
}
