//! The domain error type. Every variant has one stable code and one HTTP status,
//! mapped in exactly one place (`api::error`). Domain code never mentions HTTP.
//!
//! A leaf of core: an area with a vocabulary of refusals of its own (the plugin runtime, the
//! attestation endpoints, OpenID Connect sign-in) keeps its error type at home, implements
//! [`AreaError`] for it, and it travels inside [`Error::Area`]; [`Error::area`] gives it back.

use crate::store_error::StoreError;

/// An area's own error type, carried whole inside [`Error`]: the layers that answer it (the
/// HTTP layer's status per variant, a retry schedule) take it back with [`Error::area`].
pub trait AreaError: std::error::Error + Send + Sync + 'static {
    /// Stable machine-readable code. Never change a value once shipped.
    fn code(&self) -> &'static str;
}

/// Every area error converts into the domain error with `?`.
impl<E: AreaError> From<E> for Error {
    fn from(err: E) -> Self {
        Error::Area(Box::new(err))
    }
}

/// What a resource lookup was about, for `NotFound` messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    ApiKey,
    AuditLog,
    Certificate,
    CertificateAuthority,
    CertificateRequest,
    CertificateTemplate,
    DiscoveryScan,
    IssuancePolicy,
    RevocationRequest,
    CertificateUsage,
    MachineIdentity,
    Plugin,
    PrivateKey,
    Workspace,
    WebhookEndpoint,
    WebhookDelivery,
    ExternalIntegration,
    Device,
    DomainClaim,
    Member,
    Invitation,
    AcmeEabKey,
    AcmeAccount,
    PluginSigningKey,
}

impl Entity {
    pub fn label(self) -> &'static str {
        match self {
            Entity::ApiKey => "API key",
            Entity::AuditLog => "Audit log entry",
            Entity::Certificate => "Certificate",
            Entity::CertificateAuthority => "Certificate authority",
            Entity::CertificateRequest => "Certificate request",
            Entity::CertificateTemplate => "Certificate template",
            Entity::IssuancePolicy => "Issuance policy",
            Entity::DiscoveryScan => "Discovery scan",
            Entity::RevocationRequest => "Revocation request",
            Entity::CertificateUsage => "Certificate usage record",
            Entity::MachineIdentity => "Machine identity",
            Entity::WebhookEndpoint => "Webhook endpoint",
            Entity::WebhookDelivery => "Webhook delivery",
            Entity::ExternalIntegration => "External integration",
            Entity::Device => "Device",
            Entity::DomainClaim => "Domain claim",
            Entity::Member => "Member",
            Entity::Invitation => "Invitation",
            Entity::AcmeEabKey => "EAB key",
            Entity::AcmeAccount => "ACME account",
            Entity::Plugin => "Plugin",
            Entity::PluginSigningKey => "Plugin signing key",
            Entity::PrivateKey => "Private key",
            Entity::Workspace => "Workspace",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Absent, or present in another workspace: the two are indistinguishable on purpose.
    #[error("{} not found", .0.label())]
    NotFound(Entity),
    /// The request is well-formed but its content is not acceptable.
    #[error("{message}")]
    Validation { message: String, details: Option<serde_json::Value> },
    #[error("{0}")]
    Conflict(String),
    /// The change would leave a workspace without an owner: nobody could manage it any more.
    #[error("A workspace keeps at least one owner: make another member owner first")]
    LastOwner,
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("This credential lacks the scope {0}")]
    MissingScope(&'static str),
    #[error("The private key is only available for certificates issued by the internal PKI")]
    PrivateKeyNotAvailable,
    /// The CA's type cannot do what was asked (issue, renew, revoke).
    #[error("{0}")]
    UnsupportedCa(String),
    /// An issuance policy denied the request; the reasons are machine-readable.
    #[error("An issuance policy denied the request")]
    PolicyDenied(serde_json::Value),
    /// An issuance policy requires approval before issuance.
    #[error("An issuance policy requires approval for this request")]
    ApprovalRequired(serde_json::Value),
    /// The CA accepted the order but has not issued yet, and the caller cannot wait for it.
    #[error("{0}")]
    Pending(String),
    /// A connector returned a certificate whose public key is not the CSR's (a CA fault, or a
    /// connector slipping in a certificate for someone else's key): nothing is stored.
    #[error("{0}")]
    CertificateKeyMismatch(String),
    /// A connector returned a certificate naming what was not requested (a CA that signs the
    /// CSR's names or adds its own): nothing is stored, and it is revoked at the CA.
    #[error("{0}")]
    CertificateNameMismatch(String),
    #[error("Too many attempts; retry in {retry_after_secs} seconds")]
    RateLimited { retry_after_secs: u64 },
    /// A per-workspace cap (e.g. discovery scans at once, endpoints per hour) is reached; the
    /// message names the cap, its setting and when to retry.
    #[error("{message}")]
    QuotaExceeded { message: String, retry_after_secs: u64 },
    /// An area's own refusal: a plugin call or lifecycle operation that failed (`PluginError`),
    /// an attestation endpoint's refusal (`AttestationError`, spec §4.3's own error form), an
    /// OpenID Connect sign-in that failed (`OidcError`).
    #[error("{0}")]
    Area(Box<dyn AreaError>),
    #[error("storage failure: {0}")]
    Store(#[from] StoreError),
    #[error("internal error: {0}")]
    Internal(String),
}

/// A certificate that does not parse is an invalid `certificate` field.
impl From<trellis_pki::x509::CertificateError> for Error {
    fn from(err: trellis_pki::x509::CertificateError) -> Self {
        Error::invalid_field("certificate", err.problem)
    }
}

impl Error {
    /// The area error of type `E` this is, if it is one.
    pub fn area<E: AreaError>(&self) -> Option<&E> {
        match self {
            Error::Area(err) => (err.as_ref() as &(dyn std::error::Error + 'static)).downcast_ref::<E>(),
            _ => None,
        }
    }

    pub fn validation(message: impl Into<String>) -> Self {
        Error::Validation { message: message.into(), details: None }
    }

    pub fn validation_with(message: impl Into<String>, details: serde_json::Value) -> Self {
        Error::Validation { message: message.into(), details: Some(details) }
    }

    /// A validation error about one named field.
    pub fn invalid_field(field: &str, problem: impl Into<String>) -> Self {
        let problem = problem.into();
        Error::validation_with(
            format!("Invalid field `{field}`: {problem}"),
            serde_json::json!({ "field": field, "problem": problem }),
        )
    }

    /// Stable machine-readable code. Never change a value once shipped.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "NOT_FOUND",
            Error::Validation { .. } => "VALIDATION_ERROR",
            Error::Conflict(_) => "CONFLICT",
            Error::LastOwner => "LAST_OWNER",
            Error::Unauthorized => "UNAUTHORIZED",
            Error::Forbidden(_) => "FORBIDDEN",
            Error::MissingScope(_) => "INSUFFICIENT_SCOPE",
            Error::PrivateKeyNotAvailable => "PRIVATE_KEY_NOT_AVAILABLE",
            Error::RateLimited { .. } => "RATE_LIMITED",
            Error::QuotaExceeded { .. } => "RATE_LIMITED",
            Error::UnsupportedCa(_) => "UNSUPPORTED_CA",
            Error::PolicyDenied(_) => "POLICY_DENIED",
            Error::ApprovalRequired(_) => "APPROVAL_REQUIRED",
            Error::Pending(_) => "ISSUANCE_PENDING",
            Error::CertificateKeyMismatch(_) => "CA_KEY_MISMATCH",
            Error::CertificateNameMismatch(_) => "CA_NAME_MISMATCH",
            Error::Area(err) => err.code(),
            Error::Store(_) => "INTERNAL_ERROR",
            Error::Internal(_) => "INTERNAL_ERROR",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs one item of background work (a renewal, a poll, a job's tick). A panic in it fails
/// that item only, logged with the stable code `WORKER_PANIC`, never the worker that runs
/// every workspace's items.
pub async fn contain_panic<T>(what: &str, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use futures_util::FutureExt;
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(code = "WORKER_PANIC", what, panic = %message, "background work panicked; only this item failed");
            Err(Error::Internal(format!("{what} failed unexpectedly (see the log, code WORKER_PANIC)")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attestation::AttestationError;
    use crate::plugins::PluginError;

    #[test]
    fn an_area_error_keeps_its_code_and_comes_back_as_its_own_type_only() {
        let err = Error::from(AttestationError::NonceExpired);
        assert_eq!(err.code(), "nonce_expired");
        assert_eq!(err.to_string(), "nonce_expired");
        assert_eq!(err.area::<AttestationError>(), Some(&AttestationError::NonceExpired));
        assert!(err.area::<PluginError>().is_none(), "not another area's");
        let plugin = Error::from(PluginError::Overloaded { waited_ms: 5 });
        assert_eq!(plugin.code(), "SERVICE_UNAVAILABLE", "the code clients see, api_code");
        assert!(Error::Conflict("x".into()).area::<AttestationError>().is_none());
    }
}
