//! Domain-side plugin types. WIT-generated types never leave `plugins`; these do.

use serde::{Deserialize, Serialize};
use trellis_pki::{CertificateProfile, RevocationInfo, RevocationReason};

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    CaConnector,
    Integration,
    AttestationVerifier,
    IssuancePolicy,
}

impl PluginKind {
    /// The kebab-case name used in WIT, APIs and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::CaConnector => "ca-connector",
            PluginKind::Integration => "integration",
            PluginKind::AttestationVerifier => "attestation-verifier",
            PluginKind::IssuancePolicy => "issuance-policy",
        }
    }

    /// Parses the kebab-case name.
    pub fn parse(text: &str) -> Option<PluginKind> {
        match text {
            "ca-connector" => Some(PluginKind::CaConnector),
            "integration" => Some(PluginKind::Integration),
            "attestation-verifier" => Some(PluginKind::AttestationVerifier),
            "issuance-policy" => Some(PluginKind::IssuancePolicy),
            _ => None,
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a plugin says about itself (`describe()`), validated at install. Stored as JSON with
/// the version, and read back at start so a stored version needs no call to describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginInfo {
    pub id: String,
    #[serde(serialize_with = "serialize_display", deserialize_with = "deserialize_version")]
    pub version: semver::Version,
    pub kind: PluginKind,
    pub name: String,
    pub description: String,
    pub serves: Vec<String>,
    pub config_schema: serde_json::Value,
    /// Configuration members that hold secrets (contract 0.2; empty for 0.1 plugins).
    pub secret_fields: Vec<SecretField>,
    /// What a connector can do (contract 0.2; a 0.1 connector is taken to issue, revoke and discover).
    pub capabilities: Capabilities,
    pub default_issuer_patterns: Vec<String>,
    pub outbound_hosts: Vec<String>,
}

/// A configuration member that holds a secret: encrypted at rest and masked in responses;
/// `withheld` ones never enter the sandbox at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretField {
    /// RFC 6901 JSON pointer to an object member, e.g. `/apiKey`.
    pub pointer: String,
    pub withheld: bool,
}

/// The operations a connector declares; the host calls only those.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub issue: bool,
    pub revoke: bool,
    pub discover: bool,
    pub renew: bool,
    pub renewal_info: bool,
}

fn serialize_display<S: serde::Serializer>(value: &semver::Version, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

fn deserialize_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<semver::Version, D::Error> {
    let text = String::deserialize(d)?;
    semver::Version::parse(&text).map_err(serde::de::Error::custom)
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
    #[error("upstream failure{}{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default(), if *retryable { ", retryable" } else { "" })]
    Upstream { status: Option<u16>, message: String, retryable: bool },
    #[error("rate limited{}", retry_after_secs.map(|s| format!(" (retry after {s} s)")).unwrap_or_default())]
    RateLimited { retry_after_secs: Option<u32> },
    #[error("conflict: {message}")]
    Conflict { message: String },
    #[error("rejected by the CA: {message}")]
    Rejected { message: String },
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
            ReportedError::Conflict { .. } => "conflict",
            ReportedError::Rejected { .. } => "rejected",
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

impl TestReport {
    /// A failed report for a call that failed before the plugin could report (trap, timeout,
    /// denial, plugin error): the `plugin` check carries the error code.
    pub fn failed_call(err: &super::PluginError) -> TestReport {
        TestReport {
            success: false,
            message: err.to_string(),
            checks: vec![Check { name: "plugin".into(), status: CheckStatus::Fail, message: err.code().into() }],
            details: serde_json::json!({ "code": err.code() }),
        }
    }
}

/// Who a call is made for and with which record.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    pub workspace_id: String,
    /// The record the plugin serves (CA, integration, device). Plugin state and keystore keys
    /// are scoped to (plugin, workspace, record); empty for calls that serve no record.
    pub record_id: String,
    pub request_id: String,
    /// The record's endpoint URL, when it has one (a CA's `url`); its host is always reachable.
    pub endpoint: Option<String>,
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

/// A certificate the host already holds, with what the host derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CertificateRef {
    pub certificate_der: Option<Vec<u8>>,
    /// Content octets of the DER INTEGER, lowercase hex.
    pub serial_number: String,
    pub authority_key_id: Option<Vec<u8>>,
    pub not_before: i64,
    pub not_after: i64,
    pub ca_reference: Option<String>,
}

/// What to issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueRequest {
    /// Stable across retries of one logical issuance, never reused for another.
    pub idempotency_key: String,
    /// PKCS#10 CSR, DER, its signature verified by the host.
    pub csr_der: Vec<u8>,
    pub template: Option<String>,
    pub profile: CertificateProfile,
    pub replaces: Option<CertificateRef>,
    pub metadata: serde_json::Value,
}

/// A certificate the CA issued, as DER. Serial and validity are not taken from the plugin:
/// the domain reads them from the certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedCertificate {
    #[serde(skip)]
    pub certificate_der: Vec<u8>,
    /// Intermediates, leaf-most first.
    #[serde(skip)]
    pub chain_der: Vec<Vec<u8>>,
    pub ca_reference: Option<String>,
}

/// An order the CA accepted but has not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingIssue {
    pub reference: String,
    pub retry_after_secs: Option<u32>,
    pub status_message: String,
}

/// The outcome of `issue` and `poll-issue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueOutcome {
    Issued(IssuedCertificate),
    Pending(PendingIssue),
}

/// What to revoke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokeRequest {
    pub certificate: CertificateRef,
    pub reason: RevocationReason,
}

/// A page of discovery results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificatePage {
    pub items: Vec<DiscoveredCertificate>,
    pub next_cursor: Option<String>,
}

/// One certificate found on a CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredCertificate {
    pub certificate_der: Vec<u8>,
    pub chain_der: Vec<Vec<u8>>,
    pub ca_reference: Option<String>,
    pub revocation: Option<RevocationInfo>,
}

/// A renewal window the CA suggests (ACME ARI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalWindow {
    pub start: i64,
    pub end: i64,
    pub explanation_url: Option<String>,
    pub retry_after_secs: Option<u32>,
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
    /// The record's own network settings, applied by the host to the plugin's requests.
    pub network: RecordNetwork,
    /// Access to the host's internal PKI (`pki-core`): only for internal CA records.
    pub pki: Option<crate::pki::PkiGrant>,
}

/// Per-record network settings (a CA on the LAN, a private root, mutual TLS). The plugin never
/// sees them: the host applies them to the plugin's outbound requests for that record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordNetwork {
    /// The record asks to reach private addresses. Honoured only where the operator lets records
    /// ask (`TRELLIS_PLUGIN_RECORD_PRIVATE_NETWORKS`); metadata addresses stay refused.
    pub allow_private_networks: bool,
    /// Extra roots (PEM) trusted for this record's requests, beside the system and operator roots.
    pub ca_bundle_pem: Option<String>,
    /// A client certificate presented to servers that ask for one (mTLS).
    pub client_certificate: Option<ClientCertificate>,
}

/// A TLS client certificate: its chain and private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The certificate, then any intermediates.
    pub chain_pem: String,
    /// PKCS#8, SEC1 or PKCS#1 private key.
    pub private_key_pem: String,
}

impl std::fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertificate").field("private_key_pem", &"<redacted>").finish_non_exhaustive()
    }
}

impl CallTarget {
    /// A target in `workspace_id` for `plugin`, with configuration `config`.
    pub fn new(workspace_id: &str, plugin: PluginRef, config: serde_json::Value) -> CallTarget {
        CallTarget {
            context: CallContext { workspace_id: workspace_id.to_owned(), ..CallContext::default() },
            plugin,
            config,
            record_hosts: Vec::new(),
            network: RecordNetwork::default(),
            pki: None,
        }
    }

    /// Applies the record's network settings.
    pub fn with_network(mut self, network: RecordNetwork) -> CallTarget {
        self.network = network;
        self
    }

    /// Names the record the call serves (state and keystore are scoped to it).
    pub fn for_record(mut self, record_id: &str) -> CallTarget {
        self.context.record_id = record_id.to_owned();
        self
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
    /// The trust-store key that signed the component (see `signatures`).
    pub signer_key_id: Option<String>,
    /// Why an install in `warn` mode would have been refused in `require` mode (the refusal's
    /// code and message); only in the install's answer.
    pub signature_warning: Option<(String, String)>,
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
