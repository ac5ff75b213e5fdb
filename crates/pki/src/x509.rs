//! Facts extracted from an X.509 certificate: everything the inventory stores and filters on.

use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::oid_registry::Oid;
use x509_parser::pem::Pem;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Why a text or DER is not a readable certificate. `problem` completes "the certificate …"
/// (e.g. "contains no PEM CERTIFICATE block"): Trellis answers it as an invalid `certificate` field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct CertificateError {
    pub problem: String,
}

type Result<T> = std::result::Result<T, CertificateError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageCategory {
    Tls,
    SMime,
    CodeSigning,
    ClientAuth,
}

impl UsageCategory {
    pub const ALL: [UsageCategory; 4] =
        [UsageCategory::Tls, UsageCategory::SMime, UsageCategory::CodeSigning, UsageCategory::ClientAuth];

    pub fn as_str(self) -> &'static str {
        match self {
            UsageCategory::Tls => "TLS",
            UsageCategory::SMime => "S/MIME",
            UsageCategory::CodeSigning => "Code Signing",
            UsageCategory::ClientAuth => "Client Auth",
        }
    }

    /// Accepts the display name or a loose spelling (`tls`, `smime`, `code_signing`, `client-auth`).
    pub fn parse(text: &str) -> Option<UsageCategory> {
        let key: String = text.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_lowercase();
        match key.as_str() {
            "tls" => Some(UsageCategory::Tls),
            "smime" => Some(UsageCategory::SMime),
            "codesigning" => Some(UsageCategory::CodeSigning),
            "clientauth" => Some(UsageCategory::ClientAuth),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ParsedCertificate {
    pub common_name: String,
    pub subject: String,
    pub issuer: String,
    /// Upper-case hex without separators.
    pub serial_number: String,
    pub not_before: i64,
    pub expires_at: i64,
    /// e.g. `SHA256-RSA`, `SHA384-ECDSA`, `ED25519`.
    pub signature_algorithm: String,
    /// e.g. `SHA-256`; none for pure EdDSA.
    pub signature_hash: Option<String>,
    /// `RSA`, `ECDSA`, `ED25519`, `ED448`, `DSA` or `UNKNOWN`.
    pub key_algorithm: String,
    pub key_size: Option<i64>,
    /// Lower-case hex SHA-256 of the DER encoding.
    pub fingerprint_sha256: String,
    pub usage_category: UsageCategory,
    pub subject_alt_names: Vec<String>,
    pub is_ca: bool,
    pub der: Vec<u8>,
    /// Canonical PEM of the leaf certificate.
    pub pem: String,
}

/// Parses the first certificate of a PEM text. Later certificates (a chain pasted
/// after the leaf) are ignored; anything unparsable is a validation error.
pub fn parse_pem(text: &str) -> Result<ParsedCertificate> {
    let bad = |problem: &str| CertificateError { problem: problem.to_string() };
    let mut blocks = Pem::iter_from_buffer(text.as_bytes());
    let pem = loop {
        match blocks.next() {
            Some(Ok(pem)) if pem.label == "CERTIFICATE" => break pem,
            Some(Ok(_)) => continue,
            Some(Err(_)) => return Err(bad("is not valid PEM (expected -----BEGIN CERTIFICATE-----)")),
            None => return Err(bad("contains no PEM CERTIFICATE block")),
        }
    };
    parse_der(&pem.contents)
}

pub fn parse_der(der: &[u8]) -> Result<ParsedCertificate> {
    parse_der_inspecting(der, |_| ()).map(|(parsed, ())| parsed)
}

/// As [`parse_der`], also handing the parsed certificate to `inspect`: a caller that checks
/// more than [`ParsedCertificate`] holds (an issued certificate's key and names) parses once.
pub fn parse_der_inspecting<T>(
    der: &[u8],
    inspect: impl FnOnce(&X509Certificate<'_>) -> T,
) -> Result<(ParsedCertificate, T)> {
    let bad = |problem: String| CertificateError { problem };
    let (rest, cert) =
        X509Certificate::from_der(der).map_err(|err| bad(format!("is not a valid X.509 certificate: {err}")))?;
    if !rest.is_empty() {
        return Err(bad("has trailing bytes after the DER certificate".into()));
    }
    let inspected = inspect(&cert);
    let der = der.to_vec();
    let subject_alt_names = subject_alt_names(&cert);
    let subject = cert.subject().to_string();
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
        .or_else(|| {
            subject_alt_names.first().map(|san| san.split_once(':').map_or(san.as_str(), |(_, v)| v).to_string())
        })
        .unwrap_or_else(|| subject.clone());
    let (signature_algorithm, signature_hash) = signature_algorithm(&cert.signature_algorithm.algorithm);
    let (key_algorithm, key_size) = key_algorithm(&cert);
    let is_ca = cert.basic_constraints().ok().flatten().is_some_and(|bc| bc.value.ca);
    let usage_category = usage_category(&cert, &subject_alt_names);
    let not_before = cert.validity().not_before.timestamp().saturating_mul(1000);
    let expires_at = cert.validity().not_after.timestamp().saturating_mul(1000);
    let parsed = ParsedCertificate {
        common_name,
        issuer: cert.issuer().to_string(),
        subject,
        serial_number: hex::encode_upper(cert.raw_serial()),
        not_before,
        expires_at,
        signature_algorithm,
        signature_hash,
        key_algorithm,
        key_size,
        fingerprint_sha256: hex::encode(Sha256::digest(&der)),
        usage_category,
        subject_alt_names,
        is_ca,
        pem: to_pem(&der),
        der,
    };
    Ok((parsed, inspected))
}

pub fn to_pem(der: &[u8]) -> String {
    pem_encode("CERTIFICATE", der)
}

/// PEM text of `der` under `label` (`CERTIFICATE`, `CERTIFICATE REQUEST`, …).
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::with_capacity(body.len() + body.len() / 64 + 2 * label.len() + 40);
    pem.push_str("-----BEGIN ");
    pem.push_str(label);
    pem.push_str("-----\n");
    // Base64 is ASCII, so every 64-byte cut falls on a character boundary.
    let mut rest = body.as_str();
    while !rest.is_empty() {
        let (line, tail) = rest.split_at(rest.len().min(64));
        pem.push_str(line);
        pem.push('\n');
        rest = tail;
    }
    pem.push_str("-----END ");
    pem.push_str(label);
    pem.push_str("-----\n");
    pem
}

/// The DER of every `CERTIFICATE` block of a PEM text, in order (other blocks skipped).
/// `None` when the text is not PEM or holds no certificate.
pub fn pem_certificates(text: &str) -> Option<Vec<Vec<u8>>> {
    let mut certificates = Vec::new();
    for block in Pem::iter_from_buffer(text.as_bytes()) {
        let block = block.ok()?;
        if block.label == "CERTIFICATE" {
            certificates.push(block.contents);
        }
    }
    (!certificates.is_empty()).then_some(certificates)
}

/// SANs as `DNS:…`, `IP:…`, `email:…`, `URI:…`.
fn subject_alt_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(format!("DNS:{dns}")),
            GeneralName::RFC822Name(email) => Some(format!("email:{email}")),
            GeneralName::URI(uri) => Some(format!("URI:{uri}")),
            GeneralName::IPAddress(bytes) => ip_text(bytes).map(|ip| format!("IP:{ip}")),
            _ => None,
        })
        .collect()
}

fn ip_text(bytes: &[u8]) -> Option<String> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Some(std::net::Ipv4Addr::from(v4).to_string());
    }
    <[u8; 16]>::try_from(bytes).ok().map(|v6| std::net::Ipv6Addr::from(v6).to_string())
}

fn signature_algorithm(oid: &Oid<'_>) -> (String, Option<String>) {
    let (name, hash) = match oid.to_id_string().as_str() {
        "1.2.840.113549.1.1.5" => ("SHA1-RSA", Some("SHA-1")),
        "1.2.840.113549.1.1.11" => ("SHA256-RSA", Some("SHA-256")),
        "1.2.840.113549.1.1.12" => ("SHA384-RSA", Some("SHA-384")),
        "1.2.840.113549.1.1.13" => ("SHA512-RSA", Some("SHA-512")),
        "1.2.840.113549.1.1.10" => ("RSA-PSS", None),
        "1.2.840.10045.4.1" => ("SHA1-ECDSA", Some("SHA-1")),
        "1.2.840.10045.4.3.2" => ("SHA256-ECDSA", Some("SHA-256")),
        "1.2.840.10045.4.3.3" => ("SHA384-ECDSA", Some("SHA-384")),
        "1.2.840.10045.4.3.4" => ("SHA512-ECDSA", Some("SHA-512")),
        "1.3.101.112" => ("ED25519", None),
        "1.3.101.113" => ("ED448", None),
        other => return (other.to_string(), None),
    };
    (name.to_string(), hash.map(str::to_string))
}

fn key_algorithm(cert: &X509Certificate<'_>) -> (String, Option<i64>) {
    let spki = cert.public_key();
    let (name, size) = match spki.algorithm.algorithm.to_id_string().as_str() {
        "1.2.840.113549.1.1.1" | "1.2.840.113549.1.1.10" => {
            let bits = match spki.parsed() {
                Ok(x509_parser::public_key::PublicKey::RSA(rsa)) => Some(rsa.key_size() as i64),
                _ => None,
            };
            ("RSA", bits)
        }
        "1.2.840.10045.2.1" => {
            let curve = spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok()).map(|oid| oid.to_id_string());
            let bits = match curve.as_deref() {
                Some("1.2.840.10045.3.1.7") => Some(256),
                Some("1.3.132.0.34") => Some(384),
                Some("1.3.132.0.35") => Some(521),
                Some("1.3.132.0.10") => Some(256),
                _ => match spki.parsed() {
                    Ok(x509_parser::public_key::PublicKey::EC(point)) => Some(point.key_size() as i64),
                    _ => None,
                },
            };
            ("ECDSA", bits)
        }
        "1.3.101.112" => ("ED25519", Some(256)),
        "1.3.101.113" => ("ED448", Some(456)),
        "1.2.840.10040.4.1" => ("DSA", None),
        _ => ("UNKNOWN", None),
    };
    (name.to_string(), size)
}

/// Derived from Extended Key Usage first (server auth wins, as a TLS server
/// certificate often also allows client auth), then from the SANs.
fn usage_category(cert: &X509Certificate<'_>, sans: &[String]) -> UsageCategory {
    if let Ok(Some(eku)) = cert.extended_key_usage() {
        let eku = eku.value;
        if eku.server_auth || eku.any {
            return UsageCategory::Tls;
        }
        if eku.code_signing {
            return UsageCategory::CodeSigning;
        }
        if eku.email_protection {
            return UsageCategory::SMime;
        }
        if eku.client_auth {
            return UsageCategory::ClientAuth;
        }
    }
    let has_email = sans.iter().any(|s| s.starts_with("email:"));
    let has_dns_or_ip = sans.iter().any(|s| s.starts_with("DNS:") || s.starts_with("IP:"));
    if has_email && !has_dns_or_ip {
        UsageCategory::SMime
    } else {
        UsageCategory::Tls
    }
}

#[cfg(test)]
mod pem_tests {
    use super::pem_encode;
    use proptest::prelude::*;

    proptest! {
        /// Lines of 64 characters but the last, the label on both fences, and the bytes back
        /// from an independent PEM reader.
        #[test]
        fn pem_encode_writes_rfc7468_text(der in proptest::collection::vec(any::<u8>(), 0..400)) {
            let pem = pem_encode("CERTIFICATE REQUEST", &der);
            let lines: Vec<&str> = pem.lines().collect();
            prop_assert_eq!(lines[0], "-----BEGIN CERTIFICATE REQUEST-----");
            prop_assert_eq!(lines[lines.len() - 1], "-----END CERTIFICATE REQUEST-----");
            let body = &lines[1..lines.len() - 1];
            for (i, line) in body.iter().enumerate() {
                prop_assert!(line.len() == 64 || (i + 1 == body.len() && !line.is_empty() && line.len() < 64));
            }
            prop_assert!(pem.ends_with("-----\n"));
            let read = x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()).next();
            if !der.is_empty() {
                let read = read.expect("one block").expect("readable");
                prop_assert_eq!(read.label, "CERTIFICATE REQUEST");
                prop_assert_eq!(read.contents, der);
            }
        }
    }
}
