//! The SDK's own plain Rust types of the plugin contract. They are not the generated WIT
//! types: when the contract grows a field, the SDK maps it and plugin source keeps compiling.
//! Types a plugin receives are `#[non_exhaustive]` (read their fields, never build them);
//! types a plugin returns have constructors.

use std::fmt;
use std::net::IpAddr;

/// Who a call is made for and which record it serves.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CallContext {
    /// Workspace the record belongs to.
    pub workspace_id: String,
    /// The record served (the CA, the integration). State and keystore are scoped to it.
    pub record_id: String,
    /// Correlation id of the request or job behind the call, for logs.
    pub request_id: String,
    /// The record's endpoint URL, if it has one (its host is always reachable).
    pub endpoint: Option<String>,
    /// Milliseconds to return within; return `pending` rather than wait longer.
    pub time_budget_ms: u32,
}

impl CallContext {
    /// A context for `record_id`, for tests.
    pub fn for_record(record_id: &str) -> CallContext {
        CallContext {
            workspace_id: "ws_test".into(),
            record_id: record_id.into(),
            request_id: "req_test".into(),
            endpoint: None,
            time_budget_ms: 10_000,
        }
    }

    /// The same context with an endpoint, for tests.
    pub fn with_endpoint(mut self, endpoint: &str) -> CallContext {
        self.endpoint = Some(endpoint.into());
        self
    }
}

/// The kind of plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginKind {
    /// A certificate-authority connector.
    CaConnector,
    /// An integration delivering lifecycle events.
    Integration,
    /// An issuance policy ([`crate::policy`]).
    IssuancePolicy,
    /// A two-step attestation verifier ([`crate::verifier`]).
    AttestationVerifier,
}

/// What a connector can do; the host calls only the operations declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Capability {
    /// `issue` (and `poll_issue`, `fetch_certificate`).
    Issue,
    /// `revoke`.
    Revoke,
    /// `list_certificates`, for discovery scans.
    Discover,
    /// Certificates may be renewed automatically.
    Renew,
    /// `renewal_info` (ACME ARI).
    RenewalInfo,
}

/// What a plugin says about itself. The configuration schema and its secret members are
/// derived by the SDK from the plugin's `Config` type; see [`crate::CaConnector::Config`].
#[derive(Debug, Clone, PartialEq)]
pub struct PluginInfo {
    pub(crate) id: String,
    pub(crate) version: String,
    pub(crate) kind: PluginKind,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) serves: Vec<String>,
    pub(crate) capabilities: Vec<Capability>,
    pub(crate) default_issuer_patterns: Vec<String>,
    pub(crate) outbound_hosts: Vec<String>,
}

impl PluginInfo {
    fn new(kind: PluginKind, id: &str, version: &str, name: &str, serves: &[&str]) -> PluginInfo {
        PluginInfo {
            id: id.to_owned(),
            version: version.to_owned(),
            kind,
            name: name.to_owned(),
            description: String::new(),
            serves: serves.iter().map(|s| (*s).to_owned()).collect(),
            capabilities: if kind == PluginKind::CaConnector { vec![Capability::Issue] } else { Vec::new() },
            default_issuer_patterns: Vec::new(),
            outbound_hosts: Vec::new(),
        }
    }

    /// A CA connector serving these CA types. It declares [`Capability::Issue`]; add others
    /// with [`PluginInfo::with_capabilities`].
    pub fn ca_connector(id: &str, version: &str, name: &str, ca_types: &[&str]) -> PluginInfo {
        PluginInfo::new(PluginKind::CaConnector, id, version, name, ca_types)
    }

    /// An integration serving these integration types.
    pub fn integration(id: &str, version: &str, name: &str, integration_types: &[&str]) -> PluginInfo {
        PluginInfo::new(PluginKind::Integration, id, version, name, integration_types)
    }

    /// An issuance policy serving these policy types.
    pub fn issuance_policy(id: &str, version: &str, name: &str, policy_types: &[&str]) -> PluginInfo {
        PluginInfo::new(PluginKind::IssuancePolicy, id, version, name, policy_types)
    }

    /// An attestation verifier serving these evidence formats / attestation checks.
    pub fn attestation_verifier(id: &str, version: &str, name: &str, formats: &[&str]) -> PluginInfo {
        PluginInfo::new(PluginKind::AttestationVerifier, id, version, name, formats)
    }

    /// Sets the description shown to operators.
    pub fn with_description(mut self, description: &str) -> PluginInfo {
        self.description = description.to_owned();
        self
    }

    /// Declares what the connector can do (replaces the default `[Issue]`).
    pub fn with_capabilities(mut self, capabilities: &[Capability]) -> PluginInfo {
        self.capabilities = capabilities.to_vec();
        self
    }

    /// Asks for outbound access to these hosts (`host` or `host:port`); the operator grants
    /// them. The host of the record's own endpoint needs no asking.
    pub fn with_outbound_hosts(mut self, hosts: &[&str]) -> PluginInfo {
        self.outbound_hosts = hosts.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Issuer-name substrings this connector claims during discovery.
    pub fn with_default_issuer_patterns(mut self, patterns: &[&str]) -> PluginInfo {
        self.default_issuer_patterns = patterns.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// The plugin's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// One problem in a configuration object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// JSON pointer to the member, or empty for the whole object.
    pub field: String,
    /// What is wrong, for an operator.
    pub message: String,
}

impl ConfigIssue {
    /// A problem with the member at `field` (a JSON pointer).
    pub fn new(field: &str, message: impl Into<String>) -> ConfigIssue {
        ConfigIssue { field: field.to_owned(), message: message.into() }
    }
}

/// An error a plugin reports. Traps, timeouts and refused requests are the host's to report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginError {
    /// The configuration is unusable (every problem listed).
    InvalidConfig(Vec<ConfigIssue>),
    /// The call's arguments are unusable.
    InvalidInput(String),
    /// The remote system rejected the configured credentials.
    Unauthorized(String),
    /// The thing asked about does not exist remotely.
    NotFound(String),
    /// This plugin does not implement the operation.
    NotSupported(String),
    /// The remote system failed; `retryable` says whether a retry may help.
    Upstream {
        /// HTTP status, if the remote system answered.
        status: Option<u16>,
        /// What went wrong, never a secret.
        message: String,
        /// Whether the same call may succeed later.
        retryable: bool,
    },
    /// The remote system asked to slow down (seconds to wait, if known).
    RateLimited(Option<u32>),
    /// Another call with the same idempotency key is in progress, or the key was reused.
    Conflict(String),
    /// The CA refused on its own grounds; retrying will not help.
    Rejected(String),
    /// A bug in the plugin.
    Internal(String),
}

impl PluginError {
    /// The configuration has one problem at `field` (a JSON pointer such as `/url`).
    pub fn invalid_config(field: &str, message: impl Into<String>) -> PluginError {
        PluginError::InvalidConfig(vec![ConfigIssue { field: field.to_owned(), message: message.into() }])
    }

    /// The call's arguments are unusable.
    pub fn invalid_input(message: impl Into<String>) -> PluginError {
        PluginError::InvalidInput(message.into())
    }

    /// The remote system rejected the credentials.
    pub fn unauthorized(message: impl Into<String>) -> PluginError {
        PluginError::Unauthorized(message.into())
    }

    /// The remote system does not know the thing asked about.
    pub fn not_found(message: impl Into<String>) -> PluginError {
        PluginError::NotFound(message.into())
    }

    /// This plugin does not implement the operation.
    pub fn not_supported(message: impl Into<String>) -> PluginError {
        PluginError::NotSupported(message.into())
    }

    /// The remote system failed.
    pub fn upstream(status: Option<u16>, message: impl Into<String>, retryable: bool) -> PluginError {
        PluginError::Upstream { status, message: message.into(), retryable }
    }

    /// The CA refused the request for good.
    pub fn rejected(message: impl Into<String>) -> PluginError {
        PluginError::Rejected(message.into())
    }

    /// A bug in the plugin.
    pub fn internal(message: impl Into<String>) -> PluginError {
        PluginError::Internal(message.into())
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginError::InvalidConfig(issues) => {
                f.write_str("invalid configuration: ")?;
                let issues: Vec<String> = issues
                    .iter()
                    .map(|i| if i.field.is_empty() { i.message.clone() } else { format!("{}: {}", i.field, i.message) })
                    .collect();
                f.write_str(&issues.join("; "))
            }
            PluginError::InvalidInput(message) => write!(f, "invalid input: {message}"),
            PluginError::Unauthorized(message) => write!(f, "unauthorized: {message}"),
            PluginError::NotFound(message) => write!(f, "not found: {message}"),
            PluginError::NotSupported(message) => write!(f, "not supported: {message}"),
            PluginError::Upstream { status: Some(status), message, .. } => {
                write!(f, "upstream answered {status}: {message}")
            }
            PluginError::Upstream { status: None, message, .. } => write!(f, "upstream failure: {message}"),
            PluginError::RateLimited(Some(secs)) => write!(f, "rate limited; retry after {secs} s"),
            PluginError::RateLimited(None) => f.write_str("rate limited"),
            PluginError::Conflict(message) => write!(f, "conflict: {message}"),
            PluginError::Rejected(message) => write!(f, "rejected: {message}"),
            PluginError::Internal(message) => write!(f, "internal error: {message}"),
        }
    }
}

impl std::error::Error for PluginError {}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// Succeeded.
    Pass,
    /// Succeeded with a caveat.
    Warn,
    /// Failed.
    Fail,
    /// Not run.
    Skip,
}

/// One named check of a test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Short machine-friendly name, e.g. `reachable`.
    pub name: String,
    /// Outcome.
    pub status: CheckStatus,
    /// Explanation for an operator.
    pub message: String,
}

impl Check {
    fn new(name: &str, status: CheckStatus, message: impl Into<String>) -> Check {
        Check { name: name.to_owned(), status, message: message.into() }
    }

    /// A check that passed.
    pub fn pass(name: &str, message: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Pass, message)
    }

    /// A check that passed with a caveat.
    pub fn warn(name: &str, message: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Warn, message)
    }

    /// A check that failed.
    pub fn fail(name: &str, message: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Fail, message)
    }

    /// A check that was not run.
    pub fn skip(name: &str, message: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Skip, message)
    }
}

/// Result of a connection test. `success` always follows the checks: true unless one failed.
#[derive(Debug, Clone, PartialEq)]
pub struct TestReport {
    pub(crate) message: String,
    pub(crate) checks: Vec<Check>,
    pub(crate) details: serde_json::Value,
}

impl TestReport {
    /// A report of these checks.
    pub fn from_checks(message: impl Into<String>, checks: Vec<Check>) -> TestReport {
        TestReport { message: message.into(), checks, details: serde_json::json!({}) }
    }

    /// Attaches type-specific details (a JSON object).
    pub fn with_details(mut self, details: serde_json::Value) -> TestReport {
        self.details = details;
        self
    }

    /// True unless a check failed.
    pub fn success(&self) -> bool {
        !self.checks.iter().any(|c| c.status == CheckStatus::Fail)
    }

    /// The checks, in order.
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// The details object.
    pub fn details(&self) -> &serde_json::Value {
        &self.details
    }
}

/// A subject alternative name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubjectAltName {
    /// A DNS name (A-labels, lowercase, maybe `*.`-prefixed).
    Dns(String),
    /// An IP address.
    Ip(IpAddr),
    /// An email address.
    Email(String),
    /// A URI.
    Uri(String),
}

impl fmt::Display for SubjectAltName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubjectAltName::Dns(name) | SubjectAltName::Email(name) | SubjectAltName::Uri(name) => f.write_str(name),
            SubjectAltName::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// One distinguished-name attribute beyond the named members of [`Subject`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAttribute {
    /// Attribute type OID, dotted, e.g. `2.5.4.5` (serialNumber).
    pub oid: String,
    /// The value as text.
    pub value: String,
}

/// A distinguished name's parts; `None` members are absent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Subject {
    /// CN.
    pub common_name: Option<String>,
    /// O.
    pub organization: Option<String>,
    /// OU.
    pub organizational_unit: Option<String>,
    /// C.
    pub country: Option<String>,
    /// ST.
    pub state: Option<String>,
    /// L.
    pub locality: Option<String>,
    /// Every other attribute, in order.
    pub other: Vec<NameAttribute>,
}

impl Subject {
    /// A subject with just a common name; set the other members on the result.
    pub fn new(common_name: impl Into<String>) -> Subject {
        Subject { common_name: Some(common_name.into()), ..Subject::default() }
    }
}

/// A key usage (RFC 5280 §4.2.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyUsage {
    /// digitalSignature.
    DigitalSignature,
    /// contentCommitment (nonRepudiation).
    ContentCommitment,
    /// keyEncipherment.
    KeyEncipherment,
    /// dataEncipherment.
    DataEncipherment,
    /// keyAgreement.
    KeyAgreement,
    /// keyCertSign (CA certificates only).
    KeyCertSign,
    /// cRLSign (CA certificates only).
    CrlSign,
    /// encipherOnly.
    EncipherOnly,
    /// decipherOnly.
    DecipherOnly,
}

/// What the certificate is to contain, resolved and approved by the host. Never widen it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CertificateProfile {
    /// Subject common name, if set: the same as `subject.common_name`. Where the profile goes
    /// back to the host ([`crate::pki::sign_csr`]) this member decides the common name.
    pub common_name: Option<String>,
    /// The whole subject (template defaults applied).
    pub subject: Subject,
    /// Every name the certificate must cover, and no others.
    pub subject_alt_names: Vec<SubjectAltName>,
    /// Key usages (from the template).
    pub key_usages: Vec<KeyUsage>,
    /// Extended key usage OIDs, dotted.
    pub extended_key_usages: Vec<String>,
    /// Validity in days.
    pub validity_days: u32,
}

/// A certificate the host holds, with what it derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CertificateRef {
    /// PEM, when the inventory has the certificate.
    pub pem: Option<String>,
    /// Serial number, lowercase hex.
    pub serial_number: String,
    /// The authorityKeyIdentifier's key identifier, when the certificate has one (ACME
    /// renewal information names certificates by it and the serial).
    pub authority_key_id: Option<Vec<u8>>,
    /// Validity start, seconds since the epoch.
    pub not_before: i64,
    /// Validity end, seconds since the epoch.
    pub not_after: i64,
    /// What this connector returned as `ca_reference` at issuance.
    pub ca_reference: Option<String>,
}

/// What to issue.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct IssueRequest {
    /// Stable across retries of one issuance: make `issue` idempotent under it.
    pub idempotency_key: String,
    /// The CSR, PEM.
    pub csr_pem: String,
    /// The CSR, DER.
    pub csr_der: Vec<u8>,
    /// The certificate template's name, if one applies.
    pub template: Option<String>,
    /// What the certificate is to contain.
    pub profile: CertificateProfile,
    /// The certificate this issuance renews, if any.
    pub replaces: Option<CertificateRef>,
    /// Extra request metadata.
    pub metadata: serde_json::Value,
}

impl IssueRequest {
    /// A request for `csr_pem` covering `dns_names`, for tests.
    pub fn for_test(csr_pem: &str, dns_names: &[&str], validity_days: u32) -> IssueRequest {
        IssueRequest {
            idempotency_key: "req_test".into(),
            csr_pem: csr_pem.into(),
            csr_der: Vec::new(),
            template: None,
            profile: CertificateProfile {
                common_name: dns_names.first().map(|n| (*n).to_owned()),
                subject: Subject { common_name: dns_names.first().map(|n| (*n).to_owned()), ..Subject::default() },
                subject_alt_names: dns_names.iter().map(|n| SubjectAltName::Dns((*n).to_owned())).collect(),
                key_usages: Vec::new(),
                extended_key_usages: Vec::new(),
                validity_days,
            },
            replaces: None,
            metadata: serde_json::json!({}),
        }
    }
}

/// A certificate the CA issued. The host reads serial and validity from the certificate.
/// Hand it over as the CA gave it: PEM text ([`IssuedCertificate::pem`]) or DER
/// ([`IssuedCertificate::der`]); a connector that holds DER saves encoding it here and the
/// host parsing the text back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    pub(crate) certificate: Encoded,
    pub(crate) chain: Vec<Encoded>,
    pub(crate) ca_reference: Option<String>,
}

/// One certificate as a connector hands it to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Encoded {
    /// PEM text, which may hold several blocks (the certificate, then chain certificates).
    Pem(String),
    Der(Vec<u8>),
}

impl IssuedCertificate {
    /// From PEM text: the certificate, optionally followed by its chain.
    pub fn pem(text: impl Into<String>) -> IssuedCertificate {
        IssuedCertificate { certificate: Encoded::Pem(text.into()), chain: Vec::new(), ca_reference: None }
    }

    /// From the certificate's DER.
    pub fn der(der: Vec<u8>) -> IssuedCertificate {
        IssuedCertificate { certificate: Encoded::Der(der), chain: Vec::new(), ca_reference: None }
    }

    /// Adds chain certificates (PEM), leaf-most first.
    pub fn with_chain(mut self, chain_pem: Vec<String>) -> IssuedCertificate {
        self.chain = chain_pem.into_iter().map(Encoded::Pem).collect();
        self
    }

    /// Adds chain certificates (DER), leaf-most first.
    pub fn with_chain_der(mut self, chain_der: Vec<Vec<u8>>) -> IssuedCertificate {
        self.chain = chain_der.into_iter().map(Encoded::Der).collect();
        self
    }

    /// The CA's own identifier of the certificate, handed back for revoke and renewal.
    pub fn with_ca_reference(mut self, reference: impl Into<String>) -> IssuedCertificate {
        self.ca_reference = Some(reference.into());
        self
    }

    /// The certificate as PEM text (encoded here when it was handed over as DER).
    pub fn certificate_pem(&self) -> std::borrow::Cow<'_, str> {
        match &self.certificate {
            Encoded::Pem(text) => std::borrow::Cow::Borrowed(text),
            Encoded::Der(der) => std::borrow::Cow::Owned(crate::pki::certificate_pem(der)),
        }
    }

    /// The CA reference.
    pub fn ca_reference(&self) -> Option<&str> {
        self.ca_reference.as_deref()
    }
}

/// The outcome of `issue` and `poll_issue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueOutcome {
    /// Issued.
    Issued(IssuedCertificate),
    /// Not yet: the host calls `poll_issue` with `reference` later.
    Pending {
        /// Opaque to the host, at most 1 KiB.
        reference: String,
        /// When to poll again, if the CA said.
        retry_after_secs: Option<u32>,
        /// What the CA is waiting for, for operators.
        status_message: String,
    },
}

/// Why a certificate is revoked (RFC 5280).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RevocationReason {
    /// 0.
    Unspecified,
    /// 1.
    KeyCompromise,
    /// 2.
    CaCompromise,
    /// 3.
    AffiliationChanged,
    /// 4.
    Superseded,
    /// 5.
    CessationOfOperation,
    /// 6.
    CertificateHold,
    /// 8.
    RemoveFromCrl,
    /// 9.
    PrivilegeWithdrawn,
    /// 10.
    AaCompromise,
}

/// What to revoke.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RevokeRequest {
    /// The certificate.
    pub certificate: CertificateRef,
    /// Why.
    pub reason: RevocationReason,
}

impl RevokeRequest {
    /// A request to revoke the certificate with `serial_number` (lowercase hex), for tests.
    pub fn for_test(serial_number: &str, reason: RevocationReason) -> RevokeRequest {
        RevokeRequest {
            certificate: CertificateRef { serial_number: serial_number.into(), ..CertificateRef::default() },
            reason,
        }
    }
}

/// Which page of a listing to return.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PageRequest {
    /// The previous page's cursor; `None` first.
    pub cursor: Option<String>,
    /// Most items to return.
    pub limit: u32,
}

impl PageRequest {
    /// A page of at most `limit` items after `cursor` (`None`: the first page).
    pub fn new(cursor: Option<String>, limit: u32) -> PageRequest {
        PageRequest { cursor, limit }
    }
}

/// One certificate found during discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredCertificate {
    /// PEM (may carry the chain after it).
    pub certificate_pem: String,
    /// The CA's identifier for it.
    pub ca_reference: Option<String>,
    /// Revoked, and when (seconds since the epoch), if the CA says so.
    pub revoked_at: Option<i64>,
}

/// A page of discovery results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificatePage {
    /// Certificates on this page.
    pub items: Vec<DiscoveredCertificate>,
    /// Cursor of the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// A renewal window the CA suggests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalWindow {
    /// Start, seconds since the epoch.
    pub start: i64,
    /// End, seconds since the epoch.
    pub end: i64,
    /// A page explaining the window (e.g. a mass-revocation notice).
    pub explanation_url: Option<String>,
    /// When to ask again, in seconds (the CA's `Retry-After`).
    pub retry_after_secs: Option<u32>,
}

impl RenewalWindow {
    /// A window from `start` to `end` (seconds since the epoch).
    pub fn new(start: i64, end: i64) -> RenewalWindow {
        RenewalWindow { start, end, explanation_url: None, retry_after_secs: None }
    }
}

/// A lifecycle event to deliver.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Event {
    /// Unique id: the same event may arrive twice; deduplicate on it.
    pub id: String,
    /// Event type, e.g. `certificate.expiring`.
    pub event_type: String,
    /// When it happened, milliseconds since the epoch.
    pub occurred_at_ms: i64,
    /// One-line summary.
    pub summary: String,
    /// The full payload, as webhooks receive it.
    pub payload: serde_json::Value,
}

impl Event {
    /// The event's `data` object (`payload.data`), or the payload itself when it has none.
    pub fn data(&self) -> &serde_json::Value {
        match self.payload.get("data") {
            Some(data) if data.is_object() => data,
            _ => &self.payload,
        }
    }

    /// A member of [`Event::data`] as text (strings, numbers, booleans).
    pub fn field(&self, key: &str) -> Option<String> {
        crate::util::text(self.data(), key)
    }

    /// The workspace the event belongs to (`payload.workspaceId`, else the call's).
    pub fn workspace_id<'a>(&'a self, ctx: &'a CallContext) -> &'a str {
        self.payload
            .get("workspaceId")
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(&ctx.workspace_id)
    }

    /// `payload.occurredAt`, else the event's time, as RFC 3339.
    pub fn occurred_at(&self) -> String {
        crate::util::text(&self.payload, "occurredAt").unwrap_or_else(|| crate::util::rfc3339(self.occurred_at_ms))
    }

    /// The CA health a `ca.*` event reports (`healthStatus`, or `current` of a health change).
    pub fn health(&self) -> Option<String> {
        self.field("healthStatus").or_else(|| self.field("current"))
    }

    /// What the event is about: the certificate (the replaced one for `certificate.renewed`) or
    /// the CA; `None` for other events.
    pub fn subject_id(&self) -> Option<String> {
        if self.event_type.starts_with("certificate.") {
            self.field("certificateId").or_else(|| self.field("oldCertificateId"))
        } else if self.event_type.starts_with("ca.") {
            self.field("caId")
        } else {
            None
        }
    }

    /// An event for tests.
    pub fn for_test(event_type: &str, summary: &str, payload: serde_json::Value) -> Event {
        Event {
            id: "evt_test".into(),
            event_type: event_type.into(),
            occurred_at_ms: 1_767_225_600_000,
            summary: summary.into(),
            payload,
        }
    }
}

/// What the external system said about a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delivery {
    pub(crate) status: Option<u16>,
    pub(crate) reference: Option<String>,
}

impl Delivery {
    /// Delivered; `status` is the HTTP status of the final request, if over HTTP.
    pub fn delivered(status: Option<u16>) -> Delivery {
        Delivery { status, reference: None }
    }

    /// The external system's id of what was created (message, ticket).
    pub fn with_reference(mut self, reference: impl Into<String>) -> Delivery {
        self.reference = Some(reference.into());
        self
    }

    /// The status.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The reference.
    pub fn reference(&self) -> Option<&str> {
        self.reference.as_deref()
    }
}
