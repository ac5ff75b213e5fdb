//! The certificate inventory: register, list, read, annotate, revoke, delete, download;
//! usage records and machine identities. Issuance arrives with the PKI and CA areas.

#[cfg(test)]
mod fake;
pub mod inventory;
pub mod port;
pub mod revocation_requests;
mod service;

pub use self::service::*;

#[cfg(test)]
mod use_case_tests;
use trellis_pki::x509;
pub use trellis_pki::x509::{ParsedCertificate, UsageCategory};

use chrono::{DateTime, Utc};
use serde_json::Value;

/// Parses the first certificate of a PEM text ([`x509::parse_pem`]); an unreadable one is an
/// invalid `certificate` field.
pub fn parse_pem(text: &str) -> crate::error::Result<ParsedCertificate> {
    Ok(x509::parse_pem(text)?)
}

/// Certificates inside this window before `expiresAt` read as `expiring`.
pub const EXPIRING_WINDOW_MS: i64 = 30 * 24 * 3600 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Active,
    Expiring,
    Expired,
    Revoked,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Active, Status::Expiring, Status::Expired, Status::Revoked];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Expiring => "expiring",
            Status::Expired => "expired",
            Status::Revoked => "revoked",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Status is derived when read, never stored, so it is always right.
    pub fn at(revoked: bool, expires_at: i64, now: i64) -> Status {
        if revoked {
            Status::Revoked
        } else if expires_at <= now {
            Status::Expired
        } else if expires_at <= now + EXPIRING_WINDOW_MS {
            Status::Expiring
        } else {
            Status::Active
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssuanceSource {
    Internal,
    Agent,
    Vault,
    External,
}

impl IssuanceSource {
    pub const ALL: [IssuanceSource; 4] =
        [IssuanceSource::Internal, IssuanceSource::Agent, IssuanceSource::Vault, IssuanceSource::External];

    pub fn as_str(self) -> &'static str {
        match self {
            IssuanceSource::Internal => "internal",
            IssuanceSource::Agent => "agent",
            IssuanceSource::Vault => "vault",
            IssuanceSource::External => "external",
        }
    }

    pub fn parse(text: &str) -> Option<IssuanceSource> {
        IssuanceSource::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

#[derive(Debug, Clone)]
pub struct Certificate {
    pub id: i64,
    pub workspace_id: String,
    pub common_name: String,
    pub issuer: String,
    pub subject: String,
    pub serial_number: String,
    pub not_before: i64,
    pub expires_at: i64,
    pub signature_algorithm: String,
    pub signature_hash: Option<String>,
    pub key_algorithm: String,
    pub key_size: Option<i64>,
    pub fingerprint_sha256: String,
    pub usage_category: String,
    pub subject_alt_names: Vec<String>,
    pub is_ca: bool,
    pub issuance_source: IssuanceSource,
    pub auto_renewal: bool,
    pub location: Option<String>,
    pub metadata: serde_json::Value,
    pub ca_id: Option<i64>,
    pub machine_identity_id: Option<i64>,
    pub revoked: bool,
    pub revoked_at: Option<i64>,
    pub revocation_reason: Option<String>,
    pub certificate_pem: String,
    /// The issuing chain, PEM, for certificates issued through a CA of this service.
    pub chain_pem: Option<String>,
    /// Issued here: the template, the CSR of a caller-held key (single reads and renewal).
    pub issuance_template: Option<String>,
    pub csr_pem: Option<String>,
    /// The certificate that renewed this one, and the last renewal failure.
    pub renewed_by_id: Option<i64>,
    pub renewal_error: Option<String>,
    pub has_private_key: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Certificate {
    /// The issuing chain as one PEM string per certificate, issuing CA first; empty when unknown.
    pub fn chain(&self) -> Vec<String> {
        self.chain_pem
            .as_deref()
            .and_then(x509::pem_certificates)
            .map(|ders| ders.iter().map(|der| x509::to_pem(der)).collect())
            .unwrap_or_default()
    }

    pub fn status(&self, now: DateTime<Utc>) -> Status {
        Status::at(self.revoked, self.expires_at, now.timestamp_millis())
    }

    pub fn days_until_expiry(&self, now: DateTime<Utc>) -> i64 {
        (self.expires_at - now.timestamp_millis()).div_euclid(24 * 3600 * 1000)
    }
}

#[derive(Debug, Clone)]
pub struct UsageRecord {
    pub id: i64,
    pub workspace_id: String,
    pub certificate_id: i64,
    pub host: String,
    pub port: Option<i64>,
    pub service: Option<String>,
    pub location: Option<String>,
    pub metadata: serde_json::Value,
    pub created_at: i64,
}

#[derive(Debug, Clone)]
pub struct MachineIdentity {
    pub id: i64,
    pub workspace_id: String,
    pub name: String,
    pub kind: String,
    pub description: Option<String>,
    pub metadata: serde_json::Value,
    pub certificate_count: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Aggregated counts of a workspace's inventory.
#[derive(Debug, Clone, Default)]
pub struct Statistics {
    pub total: i64,
    pub by_status: Vec<(Status, i64)>,
    pub expiring_within_7_days: i64,
    pub auto_renewal_enabled: i64,
    pub by_usage_category: Vec<(String, i64)>,
    pub by_issuance_source: Vec<(String, i64)>,
    pub by_key_algorithm: Vec<(String, i64)>,
}

/// A certificate to insert.
pub struct NewCertificate<'a> {
    pub workspace_id: &'a str,
    pub parsed: &'a ParsedCertificate,
    pub issuance_source: IssuanceSource,
    pub auto_renewal: bool,
    pub location: Option<&'a str>,
    pub metadata: &'a Value,
    pub created_at: i64,
    /// Marks the expiry events as already announced (for certificates that arrive expired).
    pub expiry_announced: bool,
    /// The CA that issued it through this service.
    pub ca_id: Option<i64>,
    /// The issuing chain (PEM, issuing CA first), for certificates issued here.
    pub chain_pem: Option<&'a str>,
    /// The private key generated here, sealed under the master key.
    pub private_key_sealed: Option<&'a str>,
    /// The template it was issued under (renewal reuses it).
    pub issuance_template: Option<&'a str>,
    /// The CSR of a caller-held key (renewal signs it again).
    pub csr_pem: Option<&'a str>,
    /// How long before expiry auto-renewal renews it (the template's window).
    pub renew_before_ms: Option<i64>,
}

/// How a connector sees an inventory certificate (revoke, renewal info): its DER, serial and
/// validity; the CA's own reference is not kept in the inventory.
pub fn connector_ref(certificate: &Certificate) -> crate::plugins::CertificateRef {
    crate::plugins::CertificateRef {
        certificate_der: x509::pem_certificates(&certificate.certificate_pem)
            .and_then(|blocks| blocks.into_iter().next()),
        serial_number: certificate.serial_number.to_ascii_lowercase(),
        authority_key_id: None,
        not_before: certificate.not_before / 1000,
        not_after: certificate.expires_at / 1000,
        ca_reference: None,
    }
}

impl NewCertificate<'_> {
    /// The row as inserted under `id`: what a store returns without reading it back.
    pub fn inserted(&self, id: i64) -> Certificate {
        let parsed = self.parsed;
        Certificate {
            id,
            workspace_id: self.workspace_id.to_owned(),
            common_name: parsed.common_name.clone(),
            issuer: parsed.issuer.clone(),
            subject: parsed.subject.clone(),
            serial_number: parsed.serial_number.clone(),
            not_before: parsed.not_before,
            expires_at: parsed.expires_at,
            signature_algorithm: parsed.signature_algorithm.clone(),
            signature_hash: parsed.signature_hash.clone(),
            key_algorithm: parsed.key_algorithm.clone(),
            key_size: parsed.key_size,
            fingerprint_sha256: parsed.fingerprint_sha256.clone(),
            usage_category: parsed.usage_category.as_str().to_owned(),
            subject_alt_names: parsed.subject_alt_names.clone(),
            is_ca: parsed.is_ca,
            issuance_source: self.issuance_source,
            auto_renewal: self.auto_renewal,
            location: self.location.map(str::to_owned),
            metadata: self.metadata.clone(),
            ca_id: self.ca_id,
            machine_identity_id: None,
            revoked: false,
            revoked_at: None,
            revocation_reason: None,
            certificate_pem: parsed.pem.clone(),
            chain_pem: self.chain_pem.map(str::to_owned),
            issuance_template: self.issuance_template.map(str::to_owned),
            csr_pem: self.csr_pem.map(str::to_owned),
            renewed_by_id: None,
            renewal_error: None,
            has_private_key: self.private_key_sealed.is_some(),
            created_at: self.created_at,
            updated_at: self.created_at,
        }
    }
}

/// Fields to change; `None` leaves a column alone.
#[derive(Debug, Default)]
pub struct CertificateUpdate<'a> {
    pub auto_renewal: Option<bool>,
    pub location: Option<Option<&'a str>>,
    pub metadata: Option<&'a Value>,
    pub issuance_source: Option<IssuanceSource>,
    pub machine_identity_id: Option<i64>,
    /// Revocation time and reason.
    pub revoke: Option<(i64, &'a str)>,
}

#[derive(Debug, Default)]
pub struct CertificateFilter {
    pub status: Option<Status>,
    pub search: Option<String>,
    pub signature_algorithm: Option<String>,
    pub key_algorithm: Option<String>,
    pub usage_category: Option<String>,
    pub issuance_source: Option<IssuanceSource>,
    /// Only certificates issued through this CA (`ca_id`).
    pub ca_id: Option<i64>,
    pub order: CertificateOrder,
    /// The instant status filters are evaluated at.
    pub now: i64,
}

/// A list's order. Every order ends on the id, so it is total: offset paging over it neither
/// skips nor repeats a row while the inventory does not change.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum CertificateOrder {
    /// Creation order, newest first (id descending): the spec's default.
    #[default]
    Newest,
    /// Soonest expiry first (`expires_at`, then id, ascending).
    ExpiresSoonest,
    /// Latest expiry first (`expires_at`, then id, descending).
    ExpiresLatest,
}

impl CertificateOrder {
    /// The values of the lists' `sort` parameter.
    pub const VALUES: [&'static str; 3] = ["newest", "expiresAt", "-expiresAt"];

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "newest" => Some(Self::Newest),
            "expiresAt" => Some(Self::ExpiresSoonest),
            "-expiresAt" => Some(Self::ExpiresLatest),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Newest => "newest",
            Self::ExpiresSoonest => "expiresAt",
            Self::ExpiresLatest => "-expiresAt",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_derived_from_time_and_revocation() {
        let now = 1_000_000_000_000;
        assert_eq!(Status::at(false, now + EXPIRING_WINDOW_MS + 1, now), Status::Active);
        assert_eq!(Status::at(false, now + EXPIRING_WINDOW_MS, now), Status::Expiring);
        assert_eq!(Status::at(false, now, now), Status::Expired);
        assert_eq!(Status::at(true, now + EXPIRING_WINDOW_MS * 10, now), Status::Revoked);
    }
}
