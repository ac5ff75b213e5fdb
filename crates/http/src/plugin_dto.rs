//! What `/api/plugins` and `/api/plugin-bindings` return. The HTTP shape is declared here,
//! apart from the domain types, so that a change to the domain does not silently change the
//! API (and the OpenAPI document describes exactly what is sent).

use serde::Serialize;
use trellis_core::plugins::signatures::{Revocation, SigningKey};
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
    /// Id of the trust-store key that signed the component (`GET /api/plugin-keys`); null when
    /// unsigned or installed without a trusted signature (`TRELLIS_PLUGIN_SIGNATURES` warn/off).
    pub signer_key_id: Option<String>,
    /// In an install's answer under `TRELLIS_PLUGIN_SIGNATURES=warn`: why `require` would have
    /// refused the component. Null otherwise.
    pub signature_warning: Option<SignatureWarningDto>,
}

/// A signature problem an install in `warn` mode let through.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignatureWarningDto {
    /// The refusal code `require` would give: `plugin.unsigned`, `plugin.signature_unknown_key`,
    /// `plugin.signature_key_revoked`, `plugin.signature_invalid` or `plugin.signature_out_of_scope`.
    pub code: String,
    pub message: String,
}

impl From<InstalledVersion> for PluginVersionDto {
    fn from(version: InstalledVersion) -> Self {
        PluginVersionDto {
            info: version.info.into(),
            sha256: version.sha256,
            size_bytes: version.size_bytes,
            wit_version: version.wit_version,
            active: version.active,
            signer_key_id: version.signer_key_id,
            signature_warning: version.signature_warning.map(|(code, message)| SignatureWarningDto { code, message }),
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

/// A publisher key of the instance's plugin trust store.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginKeyDto {
    /// wasmsign2's default key id of the public key (24 hex characters).
    pub key_id: String,
    pub name: String,
    /// The ed25519 public key, PEM.
    pub public_key: String,
    /// Plugin ids the key may sign start with one of these.
    pub id_prefixes: Vec<String>,
    /// Kinds the key may sign; empty: every kind.
    pub kinds: Vec<String>,
    /// RFC 3339.
    pub created_at: String,
    pub created_by: String,
    /// RFC 3339; null while the key is trusted.
    pub revoked_at: Option<String>,
}

fn rfc3339(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

impl From<SigningKey> for PluginKeyDto {
    fn from(key: SigningKey) -> Self {
        PluginKeyDto {
            key_id: key.key_id,
            name: key.name,
            public_key: key.public_key_pem,
            id_prefixes: key.id_prefixes,
            kinds: key.kinds.iter().map(|k| k.as_str().to_owned()).collect(),
            created_at: rfc3339(key.created_at),
            created_by: key.created_by,
            revoked_at: key.revoked_at.map(rfc3339),
        }
    }
}

/// A version a revocation deactivated.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeactivatedVersionDto {
    pub plugin_id: String,
    pub version: String,
}

/// What `POST /api/plugin-keys/{keyId}/revoke` did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevocationDto {
    pub key: PluginKeyDto,
    /// Every version the key signed: none of them is active any more or can be activated.
    pub deactivated_versions: Vec<DeactivatedVersionDto>,
}

impl From<Revocation> for RevocationDto {
    fn from(revocation: Revocation) -> Self {
        RevocationDto {
            key: revocation.key.into(),
            deactivated_versions: revocation
                .deactivated
                .into_iter()
                .map(|(plugin_id, version)| DeactivatedVersionDto { plugin_id, version })
                .collect(),
        }
    }
}
