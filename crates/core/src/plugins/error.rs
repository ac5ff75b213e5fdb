//! Errors of the plugin runtime. Every variant has a stable code (`plugin.*`).

use crate::plugins::types::{PluginKind, ReportedError};

/// Why a plugin call, install or lifecycle operation failed.
///
/// The call-failure variants separate what the operator must look at (trap, limits,
/// denied capability) from what the plugin reported on purpose (`Reported`).
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin returned its WIT `plugin-error`: expected, reportable to the caller.
    #[error("plugin {plugin} reported: {error}")]
    Reported { plugin: String, error: ReportedError },

    /// The guest trapped (panic, `unreachable`, out-of-bounds access, …).
    #[error("plugin {plugin} trapped: {message}")]
    Trapped { plugin: String, message: String },

    /// The guest exceeded its CPU budget (epoch deadline) while running wasm code.
    #[error("plugin {plugin} exceeded its CPU time budget of {budget_ms} ms")]
    CpuTimeExceeded { plugin: String, budget_ms: u64 },

    /// The call exceeded its wall-clock timeout (for example blocked in a host call).
    #[error("plugin {plugin} exceeded its wall-clock timeout of {timeout_ms} ms")]
    WallTimeExceeded { plugin: String, timeout_ms: u64 },

    /// The guest tried to grow its memory beyond the per-call limit.
    #[error("plugin {plugin} exceeded its memory limit of {limit_bytes} bytes")]
    MemoryLimitExceeded { plugin: String, limit_bytes: usize },

    /// The guest asked for something the host's policy refuses (an unlisted host, a private address).
    #[error("plugin {plugin} was denied {capability}: {reason}")]
    CapabilityDenied { plugin: String, capability: String, reason: String },

    /// A response to the plugin's outbound request was larger than the host allows.
    #[error("plugin {plugin} received an HTTP response over the {limit_bytes}-byte limit")]
    HttpResponseTooLarge { plugin: String, limit_bytes: u64 },

    /// Too many calls queued for longer than the admission timeout.
    #[error("plugin runtime overloaded: no call slot within {waited_ms} ms")]
    Overloaded { waited_ms: u64 },

    /// No installed plugin with this id (or no such version).
    #[error("plugin {id} not found")]
    NotFound { id: String },

    /// No plugin serves this type in this workspace.
    #[error("no {kind} plugin serves type {service_type}")]
    NotBound { kind: PluginKind, service_type: String },

    /// Several plugins serve the type and the workspace has not chosen one.
    #[error("several {kind} plugins serve type {service_type} ({candidates}); bind one for this workspace")]
    AmbiguousBinding { kind: PluginKind, service_type: String, candidates: String },

    /// The plugin is of a different kind than the operation needs.
    #[error("plugin {plugin} is a {actual} plugin, not a {expected} plugin")]
    WrongKind { plugin: String, expected: PluginKind, actual: PluginKind },

    /// The version cannot be removed while it is active.
    #[error("plugin {id} version {version} is active; activate another version first")]
    VersionActive { id: String, version: String },

    /// Nothing to roll back to.
    #[error("plugin {id} has no previous version to roll back to")]
    NoPreviousVersion { id: String },

    /// The bytes were refused at install time.
    #[error(transparent)]
    Install(#[from] InstallError),

    /// A stored version could not be compiled for its first call: its bytes unreadable, not
    /// matching their digest, or no longer accepted by this host.
    #[error(
        "plugin {plugin} cannot be loaded: {reason}; install a version built for this Trellis or activate another"
    )]
    Unloadable { plugin: String, reason: String },

    /// A failure of the runtime itself (engine, instantiation); not the plugin's fault.
    #[error("plugin runtime failure: {0}")]
    Internal(String),
}

impl PluginError {
    /// Stable identifier exposed to clients and written to the audit log. Never change a value.
    pub fn code(&self) -> &'static str {
        match self {
            PluginError::Reported { .. } => "plugin.reported",
            PluginError::Trapped { .. } => "plugin.trapped",
            PluginError::CpuTimeExceeded { .. } => "plugin.cpu_time_exceeded",
            PluginError::WallTimeExceeded { .. } => "plugin.wall_time_exceeded",
            PluginError::MemoryLimitExceeded { .. } => "plugin.memory_limit_exceeded",
            PluginError::CapabilityDenied { .. } => "plugin.capability_denied",
            PluginError::HttpResponseTooLarge { .. } => "plugin.http_response_too_large",
            PluginError::Overloaded { .. } => "plugin.overloaded",
            PluginError::NotFound { .. } => "plugin.not_found",
            PluginError::NotBound { .. } => "plugin.not_bound",
            PluginError::AmbiguousBinding { .. } => "plugin.ambiguous_binding",
            PluginError::WrongKind { .. } => "plugin.wrong_kind",
            PluginError::VersionActive { .. } => "plugin.version_active",
            PluginError::NoPreviousVersion { .. } => "plugin.no_previous_version",
            PluginError::Install(err) => err.code(),
            PluginError::Unloadable { .. } => "plugin.unloadable",
            PluginError::Internal(_) => "plugin.internal",
        }
    }

    /// The code clients see in the error body (`error.code`); [`PluginError::code`] goes into
    /// `error.details.code`. Lifecycle refusals keep the generic codes of their class; call
    /// failures get their own. Never change a value once shipped.
    pub fn api_code(&self) -> &'static str {
        match self {
            PluginError::Reported { error, .. } => match error {
                ReportedError::InvalidConfig { .. } | ReportedError::InvalidInput { .. } => "VALIDATION_ERROR",
                ReportedError::Unauthorized { .. } => "UPSTREAM_UNAUTHORIZED",
                ReportedError::NotFound { .. } => "UPSTREAM_NOT_FOUND",
                ReportedError::NotSupported { .. } => "UNSUPPORTED_OPERATION",
                ReportedError::Upstream { retryable: true, .. } | ReportedError::RateLimited { .. } => {
                    "SERVICE_UNAVAILABLE"
                }
                ReportedError::Upstream { retryable: false, .. } => "UPSTREAM_ERROR",
                ReportedError::Conflict { .. } => "CONFLICT",
                ReportedError::Rejected { .. } => "CA_REJECTED",
                ReportedError::Internal { .. } => "PLUGIN_FAILED",
            },
            PluginError::Trapped { .. } => "PLUGIN_TRAPPED",
            PluginError::CpuTimeExceeded { .. } | PluginError::WallTimeExceeded { .. } => "PLUGIN_TIMEOUT",
            PluginError::MemoryLimitExceeded { .. } => "PLUGIN_MEMORY_EXCEEDED",
            PluginError::CapabilityDenied { .. } => "PLUGIN_EGRESS_DENIED",
            PluginError::HttpResponseTooLarge { .. } => "PLUGIN_RESPONSE_TOO_LARGE",
            PluginError::Overloaded { .. } | PluginError::Unloadable { .. } => "SERVICE_UNAVAILABLE",
            PluginError::NotFound { .. } => "NOT_FOUND",
            PluginError::Install(InstallError::DuplicateVersion { .. })
            | PluginError::VersionActive { .. }
            | PluginError::NoPreviousVersion { .. } => "CONFLICT",
            PluginError::Install(err) if err.is_signature_refusal() => "PLUGIN_SIGNATURE_REFUSED",
            PluginError::Install(_)
            | PluginError::NotBound { .. }
            | PluginError::AmbiguousBinding { .. }
            | PluginError::WrongKind { .. } => "VALIDATION_ERROR",
            PluginError::Internal(_) => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status the external system answered, when the plugin reported one.
    pub fn upstream_status(&self) -> Option<u16> {
        match self {
            PluginError::Reported { error: ReportedError::Upstream { status, .. }, .. } => *status,
            PluginError::Reported { error: ReportedError::RateLimited { .. }, .. } => Some(429),
            _ => None,
        }
    }

    /// Failures that the same call may not meet later: the plugin or the system behind it
    /// unavailable, slow or rate limiting, or the plugin not installed for the moment. Everything
    /// else (a reported refusal, bad configuration, a trap, a denied capability) fails the same
    /// way until something changes.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            PluginError::Overloaded { .. }
                | PluginError::Unloadable { .. }
                | PluginError::WallTimeExceeded { .. }
                | PluginError::NotBound { .. }
                | PluginError::NotFound { .. }
                | PluginError::Reported {
                    error: ReportedError::Upstream { retryable: true, .. } | ReportedError::RateLimited { .. },
                    ..
                }
        )
    }

    /// Seconds after which a retry may succeed, for failures that say so.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            PluginError::Overloaded { .. } => Some(1),
            PluginError::Reported { error: ReportedError::RateLimited { retry_after_secs }, .. } => {
                Some(retry_after_secs.map_or(60, u64::from))
            }
            _ => None,
        }
    }

    /// True for failures that are the plugin misbehaving (operator-visible incidents),
    /// as opposed to errors it reported or lifecycle/lookup errors.
    pub fn is_sandbox_violation(&self) -> bool {
        matches!(
            self,
            PluginError::Trapped { .. }
                | PluginError::CpuTimeExceeded { .. }
                | PluginError::WallTimeExceeded { .. }
                | PluginError::MemoryLimitExceeded { .. }
                | PluginError::CapabilityDenied { .. }
                | PluginError::HttpResponseTooLarge { .. }
        )
    }
}

/// Why a component was refused at install time.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The bytes are not a WebAssembly component (a core module, or not wasm at all).
    #[error("not a WebAssembly component{detail}: build plugins for wasm32-wasip2 (see docs/plugins.md)")]
    NotAComponent { detail: String },

    /// The component imports interfaces the host does not provide.
    #[error("component imports what the host does not provide: {imports}")]
    UnsupportedImports { imports: String },

    /// The component exports no known Trellis world.
    #[error("component exports none of trellis:plugin/connector, notifier or verifier (exports: {exports})")]
    UnknownWorld { exports: String },

    /// The component was built against an incompatible version of the WIT package.
    #[error("component targets {found}; this host supports trellis:plugin@{supported}")]
    IncompatibleWitVersion { found: String, supported: String },

    /// The same plugin id and version is already installed.
    #[error("plugin {id} version {version} is already installed")]
    DuplicateVersion { id: String, version: String },

    /// `describe()` returned something unusable (bad id, bad semver, wrong kind, bad schema).
    #[error("plugin metadata invalid: {0}")]
    InvalidMetadata(String),

    /// `describe()` itself failed.
    #[error("describe() failed: {0}")]
    DescribeFailed(Box<PluginError>),

    /// Compilation failed (the component is malformed or uses disabled wasm features).
    #[error("component failed to compile: {0}")]
    CompileFailed(String),

    /// `TRELLIS_PLUGIN_SIGNATURES=require` and the component carries no signature (embedded or
    /// detached).
    #[error("the component is not signed; sign it with a key of the instance's trust store (docs/plugin-authors.md)")]
    Unsigned,

    /// Signed, but by no key of the trust store.
    #[error("the component is signed by a key the trust store does not hold (key ids: {key_ids})")]
    UnknownSigningKey { key_ids: String },

    /// Signed by a key the administrators revoked.
    #[error("the component is signed by key {key_id}, which is revoked")]
    SigningKeyRevoked { key_id: String },

    /// The signature does not verify: unreadable, or the bytes changed after signing.
    #[error("the signature is invalid: {detail}")]
    SignatureInvalid { detail: String },

    /// Signed by a trusted key whose scope does not cover this plugin id or kind.
    #[error("key {key_id} may not sign {kind} plugin {plugin} (outside its id prefixes or kinds)")]
    SigningKeyOutOfScope { key_id: String, plugin: String, kind: PluginKind },
}

impl InstallError {
    /// The refusals of `TRELLIS_PLUGIN_SIGNATURES=require` (and of activating a version whose
    /// signing key is revoked).
    pub fn is_signature_refusal(&self) -> bool {
        matches!(
            self,
            InstallError::Unsigned
                | InstallError::UnknownSigningKey { .. }
                | InstallError::SigningKeyRevoked { .. }
                | InstallError::SignatureInvalid { .. }
                | InstallError::SigningKeyOutOfScope { .. }
        )
    }

    /// Stable identifier. Never change a value.
    pub fn code(&self) -> &'static str {
        match self {
            InstallError::NotAComponent { .. } => "plugin.not_a_component",
            InstallError::UnsupportedImports { .. } => "plugin.unsupported_import",
            InstallError::UnknownWorld { .. } => "plugin.unknown_world",
            InstallError::IncompatibleWitVersion { .. } => "plugin.incompatible_wit_version",
            InstallError::DuplicateVersion { .. } => "plugin.duplicate_version",
            InstallError::InvalidMetadata(_) => "plugin.invalid_metadata",
            InstallError::DescribeFailed(_) => "plugin.describe_failed",
            InstallError::CompileFailed(_) => "plugin.compile_failed",
            InstallError::Unsigned => "plugin.unsigned",
            InstallError::UnknownSigningKey { .. } => "plugin.signature_unknown_key",
            InstallError::SigningKeyRevoked { .. } => "plugin.signature_key_revoked",
            InstallError::SignatureInvalid { .. } => "plugin.signature_invalid",
            InstallError::SigningKeyOutOfScope { .. } => "plugin.signature_out_of_scope",
        }
    }
}

/// Carried in the domain error with the code clients see in `error.code`
/// ([`PluginError::api_code`]).
impl crate::error::AreaError for PluginError {
    fn code(&self) -> &'static str {
        self.api_code()
    }
}
