//! Domain-side plugin types. WIT-generated types never leave `plugins`; these do.

use serde::Serialize;

use crate::plugins::bindings::{ca, integration as int, verifier, wit_types as w};

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    CaConnector,
    Integration,
    AttestationVerifier,
}

impl PluginKind {
    /// The kebab-case name used in WIT, APIs and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::CaConnector => "ca-connector",
            PluginKind::Integration => "integration",
            PluginKind::AttestationVerifier => "attestation-verifier",
        }
    }

    /// Parses the kebab-case name.
    pub fn parse(text: &str) -> Option<PluginKind> {
        match text {
            "ca-connector" => Some(PluginKind::CaConnector),
            "integration" => Some(PluginKind::Integration),
            "attestation-verifier" => Some(PluginKind::AttestationVerifier),
            _ => None,
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a plugin says about itself (`describe()`), validated at install.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginInfo {
    pub id: String,
    #[serde(serialize_with = "serialize_display")]
    pub version: semver::Version,
    pub kind: PluginKind,
    pub name: String,
    pub description: String,
    pub serves: Vec<String>,
    pub config_schema: serde_json::Value,
    pub default_issuer_patterns: Vec<String>,
    pub outbound_hosts: Vec<String>,
}

fn serialize_display<S: serde::Serializer>(value: &semver::Version, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// An error the plugin reported on purpose (the WIT `plugin-error` variant).
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReportedError {
    #[error("invalid configuration: {}", format_issues(.issues))]
    InvalidConfig { issues: Vec<ConfigIssue> },
    #[error("invalid input: {message}")]
    InvalidInput { message: String },
    #[error("unauthorized: {message}")]
    Unauthorized { message: String },
    #[error("not found: {message}")]
    NotFound { message: String },
    #[error("not supported: {message}")]
    NotSupported { message: String },
    #[error("upstream failure (status {status:?}, retryable {retryable}): {message}")]
    Upstream { status: Option<u16>, message: String, retryable: bool },
    #[error("rate limited (retry after {retry_after_secs:?} s)")]
    RateLimited { retry_after_secs: Option<u32> },
    #[error("internal plugin error: {message}")]
    Internal { message: String },
}

fn format_issues(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(|i| if i.field.is_empty() { i.message.clone() } else { format!("{}: {}", i.field, i.message) })
        .collect::<Vec<_>>()
        .join("; ")
}

impl ReportedError {
    /// Stable sub-code of a reported error (`invalid_config`, `upstream`, …).
    pub fn code(&self) -> &'static str {
        match self {
            ReportedError::InvalidConfig { .. } => "invalid_config",
            ReportedError::InvalidInput { .. } => "invalid_input",
            ReportedError::Unauthorized { .. } => "unauthorized",
            ReportedError::NotFound { .. } => "not_found",
            ReportedError::NotSupported { .. } => "not_supported",
            ReportedError::Upstream { .. } => "upstream",
            ReportedError::RateLimited { .. } => "rate_limited",
            ReportedError::Internal { .. } => "internal",
        }
    }
}

/// One problem in a configuration object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigIssue {
    pub field: String,
    pub message: String,
}

/// Outcome of one check of a connection test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    Warn,
    Fail,
    Skip,
}

/// One check of a connection test (REST `checks[]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub name: String,
    pub status: CheckStatus,
    pub message: String,
}

/// A connection test result, shaped like the REST test response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestReport {
    pub success: bool,
    pub message: String,
    pub checks: Vec<Check>,
    pub details: serde_json::Value,
}

/// Who a call is made for and with which record.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub workspace_id: String,
    pub request_id: String,
}

/// A lifecycle event for an integration.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub event_type: String,
    pub occurred_at_ms: i64,
    pub workspace_id: String,
    pub summary: String,
    pub payload: serde_json::Value,
}

/// What the external system said about a delivery.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delivery {
    pub status: Option<u16>,
    pub reference: Option<String>,
}

/// RFC 5280 revocation reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RevocationReason {
    Unspecified,
    KeyCompromise,
    CaCompromise,
    AffiliationChanged,
    Superseded,
    CessationOfOperation,
    CertificateHold,
    PrivilegeWithdrawn,
}

/// What to issue.
#[derive(Debug, Clone, PartialEq)]
pub struct IssueRequest {
    pub csr_pem: String,
    pub subject_alt_names: Vec<String>,
    pub validity_days: Option<u32>,
    pub profile: Option<String>,
    pub metadata: serde_json::Value,
}

/// A certificate the CA issued.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IssuedCertificate {
    pub certificate_pem: String,
    pub chain_pem: Vec<String>,
    pub serial_number: String,
    pub not_before: i64,
    pub not_after: i64,
    pub ca_reference: Option<String>,
}

/// What to revoke.
#[derive(Debug, Clone, PartialEq)]
pub struct RevokeRequest {
    pub serial_number: String,
    pub certificate_pem: Option<String>,
    pub reason: RevocationReason,
}

/// A page of discovery results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CertificatePage {
    pub items: Vec<DiscoveredCertificate>,
    pub next_cursor: Option<String>,
}

/// One certificate found on a CA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiscoveredCertificate {
    pub certificate_pem: String,
    pub ca_reference: Option<String>,
    pub revoked: bool,
}

/// A PCR value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcrValue {
    pub bank: String,
    pub index: u32,
    pub digest: Vec<u8>,
}

/// Evidence a device presented.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub format: String,
    pub quote: Vec<u8>,
    pub signature: Vec<u8>,
    pub ak_public: Vec<u8>,
    pub pcrs: Vec<PcrValue>,
    pub ek_certificate: Option<Vec<u8>>,
    pub event_log: Option<Vec<u8>>,
}

/// Input of an attestation verification.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyRequest {
    pub evidence: Evidence,
    pub policy: serde_json::Value,
    pub csr_public_key: Vec<u8>,
    pub expected_nonce: Vec<u8>,
}

/// One failed attestation check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    pub code: String,
    pub message: String,
}

/// An attestation verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub verified: bool,
    pub failures: Vec<Failure>,
    pub verified_pcrs: Vec<PcrValue>,
    pub ek_manufacturer: Option<String>,
    pub trust_score: u8,
}

// ---- conversions at the WIT boundary -------------------------------------------------

pub(crate) fn plugin_kind_from_wit(kind: w::PluginKind) -> PluginKind {
    match kind {
        w::PluginKind::CaConnector => PluginKind::CaConnector,
        w::PluginKind::Integration => PluginKind::Integration,
        w::PluginKind::AttestationVerifier => PluginKind::AttestationVerifier,
    }
}

impl From<w::PluginError> for ReportedError {
    fn from(err: w::PluginError) -> ReportedError {
        match err {
            w::PluginError::InvalidConfig(issues) => ReportedError::InvalidConfig {
                issues: issues.into_iter().map(|i| ConfigIssue { field: i.field, message: i.message }).collect(),
            },
            w::PluginError::InvalidInput(message) => ReportedError::InvalidInput { message },
            w::PluginError::Unauthorized(message) => ReportedError::Unauthorized { message },
            w::PluginError::NotFound(message) => ReportedError::NotFound { message },
            w::PluginError::NotSupported(message) => ReportedError::NotSupported { message },
            w::PluginError::Upstream(f) => {
                ReportedError::Upstream { status: f.status, message: f.message, retryable: f.retryable }
            }
            w::PluginError::RateLimited(retry_after_secs) => ReportedError::RateLimited { retry_after_secs },
            w::PluginError::Internal(message) => ReportedError::Internal { message },
        }
    }
}

impl From<w::TestReport> for TestReport {
    fn from(r: w::TestReport) -> TestReport {
        TestReport {
            success: r.success,
            message: r.message,
            checks: r
                .checks
                .into_iter()
                .map(|c| Check {
                    name: c.name,
                    status: match c.status {
                        w::CheckStatus::Pass => CheckStatus::Pass,
                        w::CheckStatus::Warn => CheckStatus::Warn,
                        w::CheckStatus::Fail => CheckStatus::Fail,
                        w::CheckStatus::Skip => CheckStatus::Skip,
                    },
                    message: c.message,
                })
                .collect(),
            // A plugin handing back malformed JSON must not fail the whole test.
            details: serde_json::from_str(&r.details).unwrap_or_else(|_| serde_json::json!({ "raw": r.details })),
        }
    }
}

impl From<&CallContext> for w::CallContext {
    fn from(c: &CallContext) -> w::CallContext {
        w::CallContext { workspace_id: c.workspace_id.clone(), request_id: c.request_id.clone() }
    }
}

impl From<&Event> for int::Event {
    fn from(e: &Event) -> int::Event {
        int::Event {
            id: e.id.clone(),
            event_type: e.event_type.clone(),
            occurred_at: e.occurred_at_ms,
            workspace_id: e.workspace_id.clone(),
            summary: e.summary.clone(),
            payload: e.payload.to_string(),
        }
    }
}

impl From<int::Delivery> for Delivery {
    fn from(d: int::Delivery) -> Delivery {
        Delivery { status: d.status, reference: d.reference }
    }
}

impl From<&IssueRequest> for ca::IssueRequest {
    fn from(r: &IssueRequest) -> ca::IssueRequest {
        ca::IssueRequest {
            csr_pem: r.csr_pem.clone(),
            subject_alt_names: r.subject_alt_names.clone(),
            validity_days: r.validity_days,
            profile: r.profile.clone(),
            metadata: r.metadata.to_string(),
        }
    }
}

impl From<ca::IssuedCertificate> for IssuedCertificate {
    fn from(c: ca::IssuedCertificate) -> IssuedCertificate {
        IssuedCertificate {
            certificate_pem: c.certificate_pem,
            chain_pem: c.chain_pem,
            serial_number: c.serial_number,
            not_before: c.not_before,
            not_after: c.not_after,
            ca_reference: c.ca_reference,
        }
    }
}

impl From<&RevokeRequest> for ca::RevokeRequest {
    fn from(r: &RevokeRequest) -> ca::RevokeRequest {
        ca::RevokeRequest {
            serial_number: r.serial_number.clone(),
            certificate_pem: r.certificate_pem.clone(),
            reason: match r.reason {
                RevocationReason::Unspecified => ca::RevocationReason::Unspecified,
                RevocationReason::KeyCompromise => ca::RevocationReason::KeyCompromise,
                RevocationReason::CaCompromise => ca::RevocationReason::CaCompromise,
                RevocationReason::AffiliationChanged => ca::RevocationReason::AffiliationChanged,
                RevocationReason::Superseded => ca::RevocationReason::Superseded,
                RevocationReason::CessationOfOperation => ca::RevocationReason::CessationOfOperation,
                RevocationReason::CertificateHold => ca::RevocationReason::CertificateHold,
                RevocationReason::PrivilegeWithdrawn => ca::RevocationReason::PrivilegeWithdrawn,
            },
        }
    }
}

impl From<ca::CertificatePage> for CertificatePage {
    fn from(p: ca::CertificatePage) -> CertificatePage {
        CertificatePage {
            items: p
                .items
                .into_iter()
                .map(|d| DiscoveredCertificate {
                    certificate_pem: d.certificate_pem,
                    ca_reference: d.ca_reference,
                    revoked: d.revoked,
                })
                .collect(),
            next_cursor: p.next_cursor,
        }
    }
}

fn pcr_to_wit(p: &PcrValue) -> verifier::PcrValue {
    verifier::PcrValue { bank: p.bank.clone(), index: p.index, digest: p.digest.clone() }
}

impl From<&VerifyRequest> for verifier::VerifyRequest {
    fn from(r: &VerifyRequest) -> verifier::VerifyRequest {
        let e = &r.evidence;
        verifier::VerifyRequest {
            evidence: verifier::Evidence {
                format: e.format.clone(),
                quote: e.quote.clone(),
                signature: e.signature.clone(),
                ak_public: e.ak_public.clone(),
                pcrs: e.pcrs.iter().map(pcr_to_wit).collect(),
                ek_certificate: e.ek_certificate.clone(),
                event_log: e.event_log.clone(),
            },
            policy: r.policy.to_string(),
            csr_public_key: r.csr_public_key.clone(),
            expected_nonce: r.expected_nonce.clone(),
        }
    }
}

impl From<verifier::Verdict> for Verdict {
    fn from(v: verifier::Verdict) -> Verdict {
        Verdict {
            verified: v.verified,
            failures: v.failures.into_iter().map(|f| Failure { code: f.code, message: f.message }).collect(),
            verified_pcrs: v
                .verified_pcrs
                .into_iter()
                .map(|p| PcrValue { bank: p.bank, index: p.index, digest: p.digest })
                .collect(),
            ek_manufacturer: v.ek_manufacturer,
            trust_score: v.trust_score.min(100),
        }
    }
}
