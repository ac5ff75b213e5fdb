//! What `/api/plugins` and `/api/plugin-bindings` return. The HTTP shape is declared here,
//! apart from the domain types, so that a change to the domain does not silently change the
//! API (and the OpenAPI document describes exactly what is sent).

use serde::Serialize;
use trellis_core::plugins::{Check, CheckStatus, InstalledVersion, PluginInfo, PluginSummary, TestReport};
use utoipa::ToSchema;

/// What a plugin says about itself (`describe()`), validated at install.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginInfoDto {
    /// Reverse-DNS id, e.g. `io.trellis.slack`.
    pub id: String,
    /// Semantic version.
    pub version: String,
    /// `ca-connector`, `integration`, `attestation-verifier` or `issuance-policy`.
    pub kind: String,
    pub name: String,
    pub description: String,
    /// CA types, integration types or attestation checks served.
    pub serves: Vec<String>,
    /// JSON Schema of the configuration the plugin accepts.
    #[schema(value_type = Object)]
    pub config_schema: serde_json::Value,
    /// Configuration members holding secrets: encrypted at rest, masked in responses.
    pub secret_fields: Vec<SecretFieldDto>,
    /// Operations a connector declares: `issue`, `revoke`, `discover`, `renew`, `renewalInfo`
    /// (empty for other kinds).
    pub capabilities: Vec<String>,
    pub default_issuer_patterns: Vec<String>,
    /// Hosts the plugin asks to reach (granted by the operator, not by installing).
    pub outbound_hosts: Vec<String>,
}

/// A secret configuration member.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretFieldDto {
    /// JSON pointer to the member, e.g. `/apiKey`.
    pub pointer: String,
    /// True when the value never enters the sandbox (only host imports read it).
    pub withheld: bool,
}

impl From<PluginInfo> for PluginInfoDto {
    fn from(info: PluginInfo) -> Self {
        PluginInfoDto {
            id: info.id,
            version: info.version.to_string(),
            kind: info.kind.as_str().to_owned(),
            name: info.name,
            description: info.description,
            serves: info.serves,
            config_schema: info.config_schema,
            secret_fields: info
                .secret_fields
                .into_iter()
                .map(|f| SecretFieldDto { pointer: f.pointer, withheld: f.withheld })
                .collect(),
            capabilities: [
                (info.capabilities.issue, "issue"),
                (info.capabilities.revoke, "revoke"),
                (info.capabilities.discover, "discover"),
                (info.capabilities.renew, "renew"),
                (info.capabilities.renewal_info, "renewalInfo"),
            ]
            .into_iter()
            .filter(|(declared, _)| *declared)
            .map(|(_, name)| name.to_owned())
            .collect(),
            default_issuer_patterns: info.default_issuer_patterns,
            outbound_hosts: info.outbound_hosts,
        }
    }
}

/// One installed version of a plugin.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginVersionDto {
    pub info: PluginInfoDto,
    /// Lowercase hex SHA-256 of the component bytes.
    pub sha256: String,
    pub size_bytes: usize,
    /// The `trellis:plugin` WIT version the component was built against.
    pub wit_version: String,
    pub active: bool,
}

impl From<InstalledVersion> for PluginVersionDto {
    fn from(version: InstalledVersion) -> Self {
        PluginVersionDto {
            info: version.info.into(),
            sha256: version.sha256,
            size_bytes: version.size_bytes,
            wit_version: version.wit_version,
            active: version.active,
        }
    }
}

/// An installed plugin with its versions, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginDto {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub active_version: Option<String>,
    pub versions: Vec<PluginVersionDto>,
    /// Outbound hosts the operator granted.
    pub granted_hosts: Vec<String>,
    /// Previously active versions, most recent last (what rollback walks back through).
    pub previous_versions: Vec<String>,
}

impl From<PluginSummary> for PluginDto {
    fn from(summary: PluginSummary) -> Self {
        PluginDto {
            id: summary.id,
            kind: summary.kind.as_str().to_owned(),
            name: summary.name,
            active_version: summary.active_version,
            versions: summary.versions.into_iter().map(Into::into).collect(),
            granted_hosts: summary.granted_hosts,
            previous_versions: summary.previous_versions,
        }
    }
}

/// One check of a connection test.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckDto {
    pub name: String,
    /// `pass`, `warn`, `fail` or `skip`.
    pub status: &'static str,
    pub message: String,
}

impl From<Check> for CheckDto {
    fn from(check: Check) -> Self {
        let status = match check.status {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skip => "skip",
        };
        CheckDto { name: check.name, status, message: check.message }
    }
}

/// A connection test result (the shape of the CA test response, spec §4.1).
#[derive(Debug, Serialize, ToSchema)]
pub struct TestReportDto {
    pub success: bool,
    pub message: String,
    pub checks: Vec<CheckDto>,
    /// Type-specific extras.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

impl From<TestReport> for TestReportDto {
    fn from(report: TestReport) -> Self {
        TestReportDto {
            success: report.success,
            message: report.message,
            checks: report.checks.into_iter().map(Into::into).collect(),
            details: report.details,
        }
    }
}
