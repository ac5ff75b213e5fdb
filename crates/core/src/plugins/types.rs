//! Domain-side plugin types. WIT-generated types never leave `plugins`; these do.

use serde::Serialize;

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

/// Which plugin serves a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginRef {
    /// A specific plugin id (its active version).
    Id(String),
    /// Whatever plugin the workspace binds to this CA type / integration type / attestation check;
    /// by default the only installed plugin serving it.
    Serving(String),
}

/// Everything about one call except its operation-specific input.
#[derive(Debug, Clone)]
pub struct CallTarget {
    pub context: CallContext,
    pub plugin: PluginRef,
    /// The record's configuration (secrets already decrypted).
    pub config: serde_json::Value,
    /// Hosts of the record the plugin serves (CA URL, integration endpoint), as URLs or `host[:port]`.
    /// Together with the operator's grants for the plugin they form the outbound allowlist.
    pub record_hosts: Vec<String>,
}

impl CallTarget {
    /// A target in `workspace_id` for `plugin`, with configuration `config`.
    pub fn new(workspace_id: &str, plugin: PluginRef, config: serde_json::Value) -> CallTarget {
        CallTarget {
            context: CallContext { workspace_id: workspace_id.to_owned(), request_id: String::new() },
            plugin,
            config,
            record_hosts: Vec::new(),
        }
    }

    /// Adds the record's hosts (for example the integration's webhook URL).
    pub fn with_record_hosts<I: IntoIterator<Item = S>, S: Into<String>>(mut self, hosts: I) -> CallTarget {
        self.record_hosts.extend(hosts.into_iter().map(Into::into));
        self
    }
}

/// How an install affects the active version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Activate if there is no active version or the new version is higher (upgrades).
    IfNewer,
    /// Always activate the installed version.
    Always,
    /// Only install (loading stored versions, staging).
    Never,
}

/// One installed version.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstalledVersion {
    pub info: PluginInfo,
    /// Lowercase hex sha256 of the component bytes (its content address).
    pub sha256: String,
    pub size_bytes: usize,
    /// The `trellis:plugin` version the component was built against.
    pub wit_version: String,
    pub active: bool,
}

/// One installed plugin with all its versions, newest first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginSummary {
    pub id: String,
    pub kind: PluginKind,
    pub name: String,
    pub active_version: Option<String>,
    pub versions: Vec<InstalledVersion>,
    pub granted_hosts: Vec<String>,
    /// Previously active versions, most recent last (what `rollback` walks back through).
    pub previous_versions: Vec<String>,
}
