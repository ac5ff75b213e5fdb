//! The host's internal PKI (`pki-core`), for the connector that serves CA records of type
//! `internal`: create the record's CA, sign CSRs with it, revoke, and list what it issued.
//! The CA's private key never enters the plugin; the host holds it, adds serial numbers,
//! AKI/SKI, CRL and OCSP pointers, and signs only during an `issue` call, only that request's
//! CSR, under a profile no wider than the request's. Calls serving any other record fail with
//! [`PkiError::Unavailable`]. In native builds a fake in [`crate::testing`] answers (its
//! "certificates" are the CSR bytes, not cryptography).

use crate::{CertificateProfile, PageRequest, PluginError, RevocationReason};

pub use crate::keystore::KeyAlgorithm;
pub use crate::Subject;

/// How to create the record's internal CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthoritySpec {
    /// A self-signed root.
    Root(NewAuthority),
    /// An intermediate signed by another internal CA of the same workspace.
    Intermediate {
        /// The parent internal CA's record id (the host checks it is one, in this workspace).
        parent_record_id: String,
        /// The intermediate's subject, key and validity (capped at the parent's expiry).
        authority: NewAuthority,
    },
    /// An existing CA certificate and its key. The key never passes through the plugin: the
    /// host reads it from the record's configuration member at `private_key_field`, a JSON
    /// pointer such as `/privateKeyPem` that the plugin declares withheld.
    Imported {
        /// The CA certificate, PEM (its chain may follow).
        certificate_pem: String,
        /// JSON pointer of the withheld configuration member holding the PEM private key.
        private_key_field: String,
    },
}

/// A CA key and certificate the host creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuthority {
    /// The CA's subject (at least a common name).
    pub subject: Subject,
    /// The CA key's algorithm.
    pub key_algorithm: KeyAlgorithm,
    /// Validity of the CA certificate, in days.
    pub validity_days: u32,
    /// basicConstraints pathLenConstraint, if any.
    pub path_length: Option<u8>,
}

/// The record's internal CA.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthorityInfo {
    /// The CA certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Subject, RFC 4514 text.
    pub subject: String,
    /// Issuer, RFC 4514 text.
    pub issuer: String,
    /// Validity start, seconds since the epoch.
    pub not_before: i64,
    /// Validity end, seconds since the epoch.
    pub not_after: i64,
    /// The CA key's algorithm; `None` for an imported key of another kind.
    pub key_algorithm: Option<KeyAlgorithm>,
    /// The parent internal CA's record id, for an intermediate created here.
    pub parent_record_id: Option<String>,
}

/// A certificate the internal CA signed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Signed {
    /// The certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Intermediates up to (not including) the root, leaf-most first, DER.
    pub chain_der: Vec<Vec<u8>>,
    /// Its serial number, lowercase hex.
    pub serial_number: String,
}

/// When and why a certificate was revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RevocationInfo {
    /// When, seconds since the epoch.
    pub revoked_at: i64,
    /// Why.
    pub reason: RevocationReason,
}

/// Where a serial stands, as OCSP reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SerialStatus {
    /// Issued by this CA and not revoked.
    Good,
    /// Revoked.
    Revoked(RevocationInfo),
    /// Not issued by this CA.
    Unknown,
}

/// One certificate the CA issued.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IssuedEntry {
    /// The certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Its serial number, lowercase hex.
    pub serial_number: String,
    /// Its revocation, if revoked.
    pub revocation: Option<RevocationInfo>,
}

/// A page of issued certificates, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IssuedPage {
    /// Certificates on this page.
    pub items: Vec<IssuedEntry>,
    /// Cursor of the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// Why a `pki-core` operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PkiError {
    /// The CSR is malformed, its signature does not verify, or its key is refused.
    InvalidCsr(String),
    /// The profile or authority spec is unusable, or wider than this call's request allows.
    InvalidRequest(String),
    /// The record has no internal CA yet (`create_authority` was never called).
    NoAuthority,
    /// The record already has an internal CA; `create_authority` never replaces one.
    AuthorityExists(Box<AuthorityInfo>),
    /// Not an internal CA record, the CA cannot sign (expired), or the call may not sign.
    Unavailable(String),
    /// A serial this CA did not issue.
    UnknownSerial(String),
}

impl std::fmt::Display for PkiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PkiError::InvalidCsr(message) => write!(f, "invalid CSR: {message}"),
            PkiError::InvalidRequest(message) => write!(f, "invalid request: {message}"),
            PkiError::NoAuthority => f.write_str(
                "this internal CA has not been set up: it has no CA certificate and key yet \
                 (setup did not run or failed; save the CA's configuration again to retry)",
            ),
            PkiError::AuthorityExists(info) => write!(f, "this record already has an internal CA ({})", info.subject),
            PkiError::Unavailable(message) => write!(f, "internal CA unavailable: {message}"),
            PkiError::UnknownSerial(serial) => write!(f, "no certificate with serial {serial} was issued by this CA"),
        }
    }
}

impl std::error::Error for PkiError {}

impl From<PkiError> for PluginError {
    fn from(err: PkiError) -> PluginError {
        let message = err.to_string();
        match err {
            PkiError::InvalidCsr(_) | PkiError::InvalidRequest(_) => PluginError::invalid_input(message),
            PkiError::NoAuthority | PkiError::UnknownSerial(_) => PluginError::not_found(message),
            PkiError::AuthorityExists(_) => PluginError::Conflict(message),
            // Not a plugin bug: the record or the call cannot use the internal PKI.
            PkiError::Unavailable(_) => PluginError::not_supported(message),
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod backend {
    use super::*;
    use crate::bindings::imports::trellis::plugin::pki_core as raw;
    use crate::bindings::imports::trellis::plugin::types as w;
    use crate::{KeyUsage, SubjectAltName};

    fn subject(s: &Subject) -> w::Subject {
        w::Subject {
            common_name: s.common_name.clone(),
            organization: s.organization.clone(),
            organizational_unit: s.organizational_unit.clone(),
            country: s.country.clone(),
            state: s.state.clone(),
            locality: s.locality.clone(),
            other: s.other.iter().map(|a| w::NameAttribute { oid: a.oid.clone(), value: a.value.clone() }).collect(),
        }
    }

    fn san(name: &SubjectAltName) -> w::SubjectAltName {
        match name {
            SubjectAltName::Dns(dns) => w::SubjectAltName::Dns(dns.clone()),
            SubjectAltName::Email(mailbox) => w::SubjectAltName::Email(mailbox.clone()),
            SubjectAltName::Uri(uri) => w::SubjectAltName::Uri(uri.clone()),
            SubjectAltName::Ip(std::net::IpAddr::V4(ip)) => {
                let [a, b, c, d] = ip.octets();
                w::SubjectAltName::Ip(w::IpAddress::Ipv4((a, b, c, d)))
            }
            SubjectAltName::Ip(std::net::IpAddr::V6(ip)) => {
                let [a, b, c, d, e, f, g, h] = ip.segments();
                w::SubjectAltName::Ip(w::IpAddress::Ipv6((a, b, c, d, e, f, g, h)))
            }
        }
    }

    fn key_usage(usage: KeyUsage) -> w::KeyUsages {
        match usage {
            KeyUsage::DigitalSignature => w::KeyUsages::DIGITAL_SIGNATURE,
            KeyUsage::ContentCommitment => w::KeyUsages::CONTENT_COMMITMENT,
            KeyUsage::KeyEncipherment => w::KeyUsages::KEY_ENCIPHERMENT,
            KeyUsage::DataEncipherment => w::KeyUsages::DATA_ENCIPHERMENT,
            KeyUsage::KeyAgreement => w::KeyUsages::KEY_AGREEMENT,
            KeyUsage::KeyCertSign => w::KeyUsages::KEY_CERT_SIGN,
            KeyUsage::CrlSign => w::KeyUsages::CRL_SIGN,
            KeyUsage::EncipherOnly => w::KeyUsages::ENCIPHER_ONLY,
            KeyUsage::DecipherOnly => w::KeyUsages::DECIPHER_ONLY,
        }
    }

    /// The profile as the host resolved it: the host signs only a profile equal to or
    /// narrower than the request's, so nothing may be lost on the way back.
    fn profile(p: &CertificateProfile) -> w::CertificateProfile {
        let mut subject = subject(&p.subject);
        subject.common_name = p.common_name.clone();
        w::CertificateProfile {
            subject,
            subject_alt_names: p.subject_alt_names.iter().map(san).collect(),
            key_usages: p.key_usages.iter().fold(w::KeyUsages::empty(), |flags, u| flags | key_usage(*u)),
            extended_key_usages: p.extended_key_usages.clone(),
            validity_days: p.validity_days,
        }
    }

    fn new_authority(a: NewAuthority) -> raw::NewAuthority {
        raw::NewAuthority {
            subject: subject(&a.subject),
            key_algorithm: a.key_algorithm.into(),
            validity_days: a.validity_days,
            path_length: a.path_length,
        }
    }

    fn reason(r: RevocationReason) -> w::RevocationReason {
        match r {
            RevocationReason::Unspecified => w::RevocationReason::Unspecified,
            RevocationReason::KeyCompromise => w::RevocationReason::KeyCompromise,
            RevocationReason::CaCompromise => w::RevocationReason::CaCompromise,
            RevocationReason::AffiliationChanged => w::RevocationReason::AffiliationChanged,
            RevocationReason::Superseded => w::RevocationReason::Superseded,
            RevocationReason::CessationOfOperation => w::RevocationReason::CessationOfOperation,
            RevocationReason::CertificateHold => w::RevocationReason::CertificateHold,
            RevocationReason::RemoveFromCrl => w::RevocationReason::RemoveFromCrl,
            RevocationReason::PrivilegeWithdrawn => w::RevocationReason::PrivilegeWithdrawn,
            RevocationReason::AaCompromise => w::RevocationReason::AaCompromise,
        }
    }

    fn revocation(r: w::RevocationInfo) -> RevocationInfo {
        RevocationInfo { revoked_at: r.revoked_at, reason: crate::glue::reason(r.reason) }
    }

    fn info(i: raw::AuthorityInfo) -> AuthorityInfo {
        AuthorityInfo {
            certificate_der: i.certificate_der,
            subject: i.subject,
            issuer: i.issuer,
            not_before: i.not_before,
            not_after: i.not_after,
            key_algorithm: i.key_algorithm.map(Into::into),
            parent_record_id: i.parent_record_id,
        }
    }

    fn error(e: raw::PkiError) -> PkiError {
        match e {
            raw::PkiError::InvalidCsr(m) => PkiError::InvalidCsr(m),
            raw::PkiError::InvalidRequest(m) => PkiError::InvalidRequest(m),
            raw::PkiError::NoAuthority => PkiError::NoAuthority,
            raw::PkiError::AuthorityExists(i) => PkiError::AuthorityExists(Box::new(info(i))),
            raw::PkiError::Unavailable(m) => PkiError::Unavailable(m),
            raw::PkiError::UnknownSerial(s) => PkiError::UnknownSerial(s),
        }
    }

    pub(super) fn authority() -> Result<Option<AuthorityInfo>, PkiError> {
        raw::authority().map(|i| i.map(info)).map_err(error)
    }

    pub(super) fn create_authority(spec: AuthoritySpec) -> Result<AuthorityInfo, PkiError> {
        let spec = match spec {
            AuthoritySpec::Root(a) => raw::AuthoritySpec::Root(new_authority(a)),
            AuthoritySpec::Intermediate { parent_record_id, authority } => {
                raw::AuthoritySpec::Intermediate(raw::NewIntermediate {
                    parent_record_id,
                    authority: new_authority(authority),
                })
            }
            AuthoritySpec::Imported { certificate_pem, private_key_field } => {
                raw::AuthoritySpec::Imported(raw::ImportedAuthority { certificate_pem, private_key_field })
            }
        };
        raw::create_authority(&spec).map(info).map_err(error)
    }

    pub(super) fn sign_csr(csr_der: &[u8], p: &CertificateProfile) -> Result<Signed, PkiError> {
        raw::sign_csr(csr_der, &profile(p))
            .map(|s| Signed {
                certificate_der: s.certificate_der,
                chain_der: s.chain_der,
                serial_number: s.serial_number,
            })
            .map_err(error)
    }

    pub(super) fn ca_chain() -> Result<Vec<Vec<u8>>, PkiError> {
        raw::ca_chain().map_err(error)
    }

    pub(super) fn revoke(serial_hex: &str, r: RevocationReason) -> Result<(), PkiError> {
        raw::revoke(serial_hex, reason(r)).map_err(error)
    }

    pub(super) fn status(serial_hex: &str) -> Result<SerialStatus, PkiError> {
        raw::status(serial_hex)
            .map(|s| match s {
                raw::SerialStatus::Good => SerialStatus::Good,
                raw::SerialStatus::Revoked(r) => SerialStatus::Revoked(revocation(r)),
                raw::SerialStatus::Unknown => SerialStatus::Unknown,
            })
            .map_err(error)
    }

    pub(super) fn list_issued(page: &PageRequest) -> Result<IssuedPage, PkiError> {
        let page = w::PageRequest { cursor: page.cursor.clone(), limit: page.limit };
        raw::list_issued(&page)
            .map(|p| IssuedPage {
                items: p
                    .items
                    .into_iter()
                    .map(|e| IssuedEntry {
                        certificate_der: e.certificate_der,
                        serial_number: e.serial_number,
                        revocation: e.revocation.map(revocation),
                    })
                    .collect(),
                next_cursor: p.next_cursor,
            })
            .map_err(error)
    }
}

#[cfg(not(target_arch = "wasm32"))]
use crate::testing::pki as backend;

/// The record's internal CA; `None` until [`create_authority`] made one.
pub fn authority() -> Result<Option<AuthorityInfo>, PkiError> {
    backend::authority()
}

/// Creates the record's internal CA (from `setup`). Fails with
/// [`PkiError::AuthorityExists`] when there is one: it is never replaced.
pub fn create_authority(spec: AuthoritySpec) -> Result<AuthorityInfo, PkiError> {
    backend::create_authority(spec)
}

/// Signs a PKCS#10 CSR (DER) under `profile` (only during `issue`, only that request's CSR and
/// a profile no wider than the request's). The profile's names replace the CSR's.
pub fn sign_csr(csr_der: &[u8], profile: &CertificateProfile) -> Result<Signed, PkiError> {
    backend::sign_csr(csr_der, profile)
}

/// The CA's own chain, DER: its certificate first, then its issuers up to the root.
pub fn ca_chain() -> Result<Vec<Vec<u8>>, PkiError> {
    backend::ca_chain()
}

/// Revokes a serial (lowercase hex) this CA issued; revoking it again changes nothing.
pub fn revoke(serial_hex: &str, reason: RevocationReason) -> Result<(), PkiError> {
    backend::revoke(serial_hex, reason)
}

/// Where a serial (lowercase hex) stands.
pub fn status(serial_hex: &str) -> Result<SerialStatus, PkiError> {
    backend::status(serial_hex)
}

/// The certificates this CA issued, a page at a time, oldest first.
pub fn list_issued(page: &PageRequest) -> Result<IssuedPage, PkiError> {
    backend::list_issued(page)
}

/// A DER certificate as PEM text (what the connector's certificate outputs carry).
pub fn certificate_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::with_capacity(body.len() + body.len() / 64 + 60);
    pem.push_str("-----BEGIN CERTIFICATE-----\n");
    // RFC 7468: 64 characters a line. Base64 text is ASCII, so byte chunks are characters.
    for line in body.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}
