//! Issuance policies: [`IssuancePolicy`] decides about one issuance (allow, allow with a
//! shorter validity, deny with reasons, or hold for approval). The host runs every policy bound
//! to the workspace before any CA is called; any deny denies, then any approval holds, and the
//! shortest allowed validity applies. A policy that fails denies.
//!
//! ```ignore
//! #![forbid(unsafe_code)]
//! use trellis_plugin_sdk::policy::*;
//! use trellis_plugin_sdk::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Config { max_days: u32 }
//!
//! struct MaxValidity;
//! impl IssuancePolicy for MaxValidity {
//!     type Config = Config;
//!     fn describe() -> PluginInfo {
//!         PluginInfo::issuance_policy("com.example.max-validity", env!("CARGO_PKG_VERSION"), "Max validity", &["max-validity"])
//!     }
//!     fn evaluate(_: &CallContext, c: &Config, r: &EvaluationRequest) -> Result<Decision, PluginError> {
//!         Ok(Decision::allow_at_most(c.max_days))
//!     }
//! }
//! trellis_plugin_sdk::export_issuance_policy!(MaxValidity);
//! ```

// The subject type is shared with the connector's certificate profile; it stays nameable here.
pub use crate::Subject;
use crate::{CallContext, PluginError, PluginInfo, SubjectAltName};

/// An issuance policy. Pure computation: no HTTP, state or keys (the host refuses a policy
/// component that imports them).
pub trait IssuancePolicy {
    /// The binding's configuration. Its JSON Schema is derived from it.
    type Config: serde::de::DeserializeOwned + schemars::JsonSchema;

    /// Describe the plugin ([`PluginInfo::issuance_policy`]). No I/O.
    fn describe() -> PluginInfo;

    /// Check a configuration (JSON that does not parse into `Config` is refused first).
    fn validate_config(config: &Self::Config) -> Result<(), PluginError> {
        let _ = config;
        Ok(())
    }

    /// Decide about one issuance. Runs on every issuance: keep it fast.
    fn evaluate(ctx: &CallContext, config: &Self::Config, request: &EvaluationRequest)
        -> Result<Decision, PluginError>;
}

/// Where an issuance comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IssuanceSource {
    /// `POST /api/certificates/issue`.
    Api,
    /// An approved certificate request.
    RequestWorkflow,
    /// Attestation-gated issuance.
    Attestation,
    /// The renewal worker, or a renewal asked for through the API.
    Renewal,
}

/// What kind of principal asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequesterKind {
    /// A signed-in user.
    User,
    /// An API key.
    ApiKey,
    /// A device through the attestation flow.
    Agent,
    /// Trellis itself.
    System,
}

/// Who asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requester {
    /// What kind of principal.
    pub kind: RequesterKind,
    /// The principal's id.
    pub id: String,
    /// E-mail address, key name or device name, for messages.
    pub display_name: Option<String>,
}

/// The key the certificate will certify.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubjectKey {
    /// `rsa`, `ec`, `ed25519`, `ed448`, else the algorithm's OID.
    pub algorithm: String,
    /// RSA modulus bits; the curve's field size for `ec`; 256 for Ed25519.
    pub size_bits: u32,
    /// `p256`, `p384`, `p521` for `ec`.
    pub curve: Option<String>,
    /// True when the host generates the key (no CSR was given).
    pub server_generated: bool,
}

/// What is about to be issued.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EvaluationRequest {
    /// The CA type, e.g. `internal` or `acme`.
    pub ca_type: String,
    /// The CA record's id.
    pub ca_id: String,
    /// The template's name, if any.
    pub template: Option<String>,
    /// The subject.
    pub subject: Subject,
    /// Every name the certificate will cover.
    pub subject_alt_names: Vec<SubjectAltName>,
    /// The certified key.
    pub key: SubjectKey,
    /// The validity the host will ask for, in days.
    pub validity_days: u32,
    /// Who asked.
    pub requester: Requester,
    /// Which path the issuance comes through.
    pub source: IssuanceSource,
}

impl EvaluationRequest {
    /// An API request by a user for `dns_names` with an RSA key of `rsa_bits`, for tests.
    pub fn for_test(dns_names: &[&str], rsa_bits: u32, validity_days: u32) -> EvaluationRequest {
        EvaluationRequest {
            ca_type: "internal".into(),
            ca_id: "ca_test".into(),
            template: None,
            subject: Subject { common_name: dns_names.first().map(|n| (*n).to_owned()), ..Subject::default() },
            subject_alt_names: dns_names.iter().map(|n| SubjectAltName::Dns((*n).to_owned())).collect(),
            key: SubjectKey { algorithm: "rsa".into(), size_bits: rsa_bits, curve: None, server_generated: false },
            validity_days,
            requester: Requester { kind: RequesterKind::User, id: "usr_test".into(), display_name: None },
            source: IssuanceSource::Api,
        }
    }

    /// The DNS names among the subject alternative names.
    pub fn dns_names(&self) -> impl Iterator<Item = &str> {
        self.subject_alt_names.iter().filter_map(|name| match name {
            SubjectAltName::Dns(dns) => Some(dns.as_str()),
            _ => None,
        })
    }
}

/// One machine-readable reason, shown to the requester or the approver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// Stable code, e.g. `san-not-allowed`, `key-too-weak`.
    pub code: String,
    /// Explanation.
    pub message: String,
}

impl Reason {
    /// A reason.
    pub fn new(code: &str, message: impl Into<String>) -> Reason {
        Reason { code: code.to_owned(), message: message.into() }
    }
}

/// A policy's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead, optionally with validity shortened to this many days (never lengthened).
    Allow {
        /// The longest validity this policy accepts.
        max_validity_days: Option<u32>,
    },
    /// Refuse, with every reason.
    Deny(Vec<Reason>),
    /// Hold for a second person's approval.
    RequireApproval(Vec<Reason>),
}

impl Decision {
    /// Go ahead as requested.
    pub fn allow() -> Decision {
        Decision::Allow { max_validity_days: None }
    }

    /// Go ahead with at most `days` of validity.
    pub fn allow_at_most(days: u32) -> Decision {
        Decision::Allow { max_validity_days: Some(days) }
    }

    /// Deny for these reasons, or allow when there are none.
    pub fn deny_unless_empty(reasons: Vec<Reason>) -> Decision {
        if reasons.is_empty() {
            Decision::allow()
        } else {
            Decision::Deny(reasons)
        }
    }
}
