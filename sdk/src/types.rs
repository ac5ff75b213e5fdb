//! Plain Rust types of the plugin contract, with constructors for the common cases.

pub use crate::bindings::attestation_verifier::exports::trellis::plugin::verifier::{
    Evidence, Failure, PcrValue, Verdict, VerifyRequest,
};
pub use crate::bindings::ca_connector::exports::trellis::plugin::connector::{
    CertificatePage, DiscoveredCertificate, IssueRequest, IssuedCertificate, PageRequest, RevocationReason,
    RevokeRequest,
};
pub use crate::bindings::imports::trellis::plugin::types::{
    CallContext, Check, CheckStatus, ConfigIssue, PluginError, PluginInfo, PluginKind, TestReport, UpstreamFailure,
};
pub use crate::bindings::integration::exports::trellis::plugin::notifier::{Delivery, Event};

impl PluginInfo {
    fn new(kind: PluginKind, id: &str, version: &str, name: &str, serves: &[&str]) -> PluginInfo {
        PluginInfo {
            id: id.to_owned(),
            version: version.to_owned(),
            kind,
            name: name.to_owned(),
            description: String::new(),
            serves: serves.iter().map(|s| (*s).to_owned()).collect(),
            config_schema: r#"{"type":"object"}"#.to_owned(),
            default_issuer_patterns: Vec::new(),
            outbound_hosts: Vec::new(),
        }
    }

    /// Describes a CA connector serving the given CA types.
    pub fn ca_connector(id: &str, version: &str, name: &str, ca_types: &[&str]) -> PluginInfo {
        PluginInfo::new(PluginKind::CaConnector, id, version, name, ca_types)
    }

    /// Describes an integration serving the given integration types.
    pub fn integration(id: &str, version: &str, name: &str, integration_types: &[&str]) -> PluginInfo {
        PluginInfo::new(PluginKind::Integration, id, version, name, integration_types)
    }

    /// Describes an attestation verifier serving the given attestation checks.
    pub fn attestation_verifier(id: &str, version: &str, name: &str, checks: &[&str]) -> PluginInfo {
        PluginInfo::new(PluginKind::AttestationVerifier, id, version, name, checks)
    }

    /// Sets the description shown in the UI.
    pub fn with_description(mut self, description: &str) -> PluginInfo {
        self.description = description.to_owned();
        self
    }

    /// Sets the JSON Schema of the configuration object.
    pub fn with_config_schema(mut self, schema: serde_json::Value) -> PluginInfo {
        self.config_schema = schema.to_string();
        self
    }

    /// Asks for outbound access to these hosts (`host` or `host:port`).
    pub fn with_outbound_hosts(mut self, hosts: &[&str]) -> PluginInfo {
        self.outbound_hosts = hosts.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Sets the issuer name patterns this connector claims during discovery.
    pub fn with_default_issuer_patterns(mut self, patterns: &[&str]) -> PluginInfo {
        self.default_issuer_patterns = patterns.iter().map(|s| (*s).to_owned()).collect();
        self
    }
}

impl PluginError {
    /// The configuration has one problem at `field` (a JSON pointer such as `/webhookUrl`).
    pub fn invalid_config(field: &str, message: impl Into<String>) -> PluginError {
        PluginError::InvalidConfig(vec![ConfigIssue { field: field.to_owned(), message: message.into() }])
    }

    /// The call's arguments are unusable.
    pub fn invalid_input(message: impl Into<String>) -> PluginError {
        PluginError::InvalidInput(message.into())
    }

    /// The remote system rejected the configured credentials.
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

    /// The remote system failed; `retryable` says whether trying again later may help.
    pub fn upstream(status: Option<u16>, message: impl Into<String>, retryable: bool) -> PluginError {
        PluginError::Upstream(UpstreamFailure { status, message: message.into(), retryable })
    }

    /// A bug in the plugin.
    pub fn internal(message: impl Into<String>) -> PluginError {
        PluginError::Internal(message.into())
    }
}

impl Check {
    /// A check that passed.
    pub fn pass(name: &str, message: impl Into<String>) -> Check {
        Check { name: name.to_owned(), status: CheckStatus::Pass, message: message.into() }
    }

    /// A check that failed.
    pub fn fail(name: &str, message: impl Into<String>) -> Check {
        Check { name: name.to_owned(), status: CheckStatus::Fail, message: message.into() }
    }

    /// A check that passed with a caveat.
    pub fn warn(name: &str, message: impl Into<String>) -> Check {
        Check { name: name.to_owned(), status: CheckStatus::Warn, message: message.into() }
    }
}

impl TestReport {
    /// Builds a report whose `success` is derived from the checks: true unless one failed.
    pub fn from_checks(message: impl Into<String>, checks: Vec<Check>) -> TestReport {
        let success = !checks.iter().any(|c| matches!(c.status, CheckStatus::Fail));
        TestReport { success, message: message.into(), checks, details: "{}".to_owned() }
    }

    /// A successful report.
    pub fn passed(message: impl Into<String>, checks: Vec<Check>) -> TestReport {
        TestReport { success: true, message: message.into(), checks, details: "{}".to_owned() }
    }

    /// Attaches type-specific details (a JSON object).
    pub fn with_details(mut self, details: serde_json::Value) -> TestReport {
        self.details = details.to_string();
        self
    }
}

impl Event {
    /// Parses the event payload.
    pub fn payload_json(&self) -> Result<serde_json::Value, PluginError> {
        serde_json::from_str(&self.payload)
            .map_err(|err| PluginError::invalid_input(format!("event payload is not JSON: {err}")))
    }
}
