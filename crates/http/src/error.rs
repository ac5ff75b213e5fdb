//! The one place where errors become HTTP responses (spec §7 shape):
//! `{"error": {"code", "message", "details"?}}`. Each domain error variant gets its status
//! here and nowhere else; HTTP-only failures (no route, wrong method, body too large) are
//! this layer's own variants, not the domain's.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use trellis_core::attestation::AttestationError;
use trellis_core::auth::oidc::OidcError;
use trellis_core::error::Error;
use trellis_core::plugins::{PluginError, ReportedError};

/// An error on its way to the client.
#[derive(Debug)]
pub enum ApiError {
    /// A use case refused or failed.
    Domain(Error),
    /// No route matches the path.
    RouteNotFound,
    MethodNotAllowed,
    /// The body is larger than `TRELLIS_BODY_LIMIT_BYTES`.
    PayloadTooLarge,
    /// The dependency the response needs (the database) does not answer.
    Unavailable(&'static str),
    /// A cookie-authenticated change sent from another origin (cross-site request forgery).
    CrossOrigin,
    /// The request took longer than the configured timeout (seconds).
    Timeout(u64),
    /// Every request slot is taken.
    Busy,
}

impl<E: Into<Error>> From<E> for ApiError {
    fn from(err: E) -> Self {
        ApiError::Domain(err.into())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// The status of a domain error.
pub fn status_of(err: &Error) -> StatusCode {
    match err {
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Validation { .. } => StatusCode::BAD_REQUEST,
        Error::Conflict(_) | Error::LastOwner => StatusCode::CONFLICT,
        Error::Unauthorized => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) | Error::MissingScope(_) | Error::PrivateKeyNotAvailable => StatusCode::FORBIDDEN,
        Error::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        Error::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
        Error::UnsupportedCa(_) => StatusCode::BAD_REQUEST,
        Error::PolicyDenied(_) | Error::ApprovalRequired(_) => StatusCode::FORBIDDEN,
        Error::Pending(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::CertificateKeyMismatch(_) | Error::CertificateNameMismatch(_) => StatusCode::BAD_GATEWAY,
        Error::Area(_) => area_status(err),
        Error::Store(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An area's own error, by its type. Every type core carries in `Error::Area` is named here; an
/// unnamed one would be a fault of this table, answered 500.
fn area_status(err: &Error) -> StatusCode {
    if let Some(err) = err.area::<PluginError>() {
        plugin_status(err)
    } else if let Some(err) = err.area::<AttestationError>() {
        attestation_status(err)
    } else if let Some(err) = err.area::<OidcError>() {
        oidc_status(err)
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// OpenID Connect sign-in failures: the browser's request or the IdP's answer was refused
/// (400/401), the IdP could not be used (502), or the feature is off (404). Never a 500.
pub fn oidc_status(err: &OidcError) -> StatusCode {
    match err {
        OidcError::NotConfigured => StatusCode::NOT_FOUND,
        OidcError::BadRedirect
        | OidcError::MissingState
        | OidcError::UnknownState
        | OidcError::StateFromAnotherBrowser
        | OidcError::MissingCode
        | OidcError::IssuerParameterMismatch
        | OidcError::IssuerParameterMissing => StatusCode::BAD_REQUEST,
        OidcError::Denied(_)
        | OidcError::CodeRejected(_)
        | OidcError::TokenMalformed(_)
        | OidcError::TokenAlgorithm(_)
        | OidcError::UnknownKey(_)
        | OidcError::BadSignature
        | OidcError::WrongIssuer
        | OidcError::WrongAudience
        | OidcError::MissingAzp
        | OidcError::WrongAzp
        | OidcError::Expired
        | OidcError::BadIssuedAt
        | OidcError::WrongNonce
        | OidcError::UserinfoMismatch => StatusCode::UNAUTHORIZED,
        OidcError::MissingEmail => StatusCode::FORBIDDEN,
        OidcError::EmailInUse => StatusCode::CONFLICT,
        OidcError::PasswordLoginDisabled => StatusCode::FORBIDDEN,
        OidcError::ProviderUnavailable(_) | OidcError::ProviderInvalid(_) => StatusCode::BAD_GATEWAY,
    }
}

/// Attestation refusals (spec §4.3, §7).
pub fn attestation_status(err: &AttestationError) -> StatusCode {
    match err {
        AttestationError::PolicyNotFound | AttestationError::TrustRootNotFound => StatusCode::NOT_FOUND,
        AttestationError::InvalidPolicy(_)
        | AttestationError::NonceNotFound
        | AttestationError::NonceAlreadyUsed
        | AttestationError::NonceExpired
        | AttestationError::NonceDeviceMismatch
        | AttestationError::NoncePurposeMismatch { .. }
        | AttestationError::MissingField(_)
        | AttestationError::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
        AttestationError::Failed(_) | AttestationError::EnrollmentFailed(_) | AttestationError::ActivationFailed(_) => {
            StatusCode::FORBIDDEN
        }
        AttestationError::DuplicateTrustRoot => StatusCode::CONFLICT,
    }
}

/// Plugin failures: the caller's input → 4xx; the plugin misbehaving → 502 (504 for time);
/// the system behind it unavailable or throttling → 503, so clients know a retry may work.
fn plugin_status(err: &PluginError) -> StatusCode {
    match err {
        PluginError::Reported { error, .. } => match error {
            ReportedError::InvalidConfig { .. } | ReportedError::InvalidInput { .. } => StatusCode::BAD_REQUEST,
            ReportedError::NotSupported { .. } | ReportedError::Rejected { .. } => StatusCode::BAD_REQUEST,
            ReportedError::Conflict { .. } => StatusCode::CONFLICT,
            ReportedError::NotFound { .. } => StatusCode::NOT_FOUND,
            ReportedError::Upstream { retryable: true, .. } | ReportedError::RateLimited { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ReportedError::Unauthorized { .. }
            | ReportedError::Upstream { retryable: false, .. }
            | ReportedError::Internal { .. } => StatusCode::BAD_GATEWAY,
        },
        PluginError::Trapped { .. }
        | PluginError::MemoryLimitExceeded { .. }
        | PluginError::CapabilityDenied { .. }
        | PluginError::HttpResponseTooLarge { .. } => StatusCode::BAD_GATEWAY,
        PluginError::CpuTimeExceeded { .. } | PluginError::WallTimeExceeded { .. } => StatusCode::GATEWAY_TIMEOUT,
        PluginError::Overloaded { .. } | PluginError::Unloadable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        PluginError::NotFound { .. } => StatusCode::NOT_FOUND,
        PluginError::Install(trellis_core::plugins::InstallError::DuplicateVersion { .. })
        | PluginError::VersionActive { .. }
        | PluginError::NoPreviousVersion { .. } => StatusCode::CONFLICT,
        PluginError::Install(_)
        | PluginError::NotBound { .. }
        | PluginError::AmbiguousBinding { .. }
        | PluginError::WrongKind { .. } => StatusCode::BAD_REQUEST,
        PluginError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Domain(err) => (status_of(err), err.code()),
            ApiError::RouteNotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            ApiError::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE"),
            ApiError::CrossOrigin => (StatusCode::FORBIDDEN, "CSRF_REJECTED"),
            ApiError::Timeout(_) => (StatusCode::REQUEST_TIMEOUT, "REQUEST_TIMEOUT"),
            ApiError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "SERVICE_UNAVAILABLE"),
        }
    }

    pub fn message(&self) -> String {
        match self {
            ApiError::Domain(err) => err.to_string(),
            ApiError::RouteNotFound => "Route not found".into(),
            ApiError::MethodNotAllowed => "Method not allowed".into(),
            ApiError::PayloadTooLarge => {
                "Request body exceeds the configured size limit (TRELLIS_BODY_LIMIT_BYTES)".into()
            }
            ApiError::Unavailable(what) => format!("{what} unreachable; retry later"),
            ApiError::Timeout(secs) => {
                format!("The request took longer than {secs} s (TRELLIS_REQUEST_TIMEOUT_SECS); send it again")
            }
            ApiError::Busy => "The server is handling as many requests as it accepts; retry shortly".into(),
            ApiError::CrossOrigin => "A change authenticated by the session cookie must come from this origin \
                 (Origin / Sec-Fetch-Site); scripts should use an API key"
                .into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        // Server faults are logged once, here, with their cause; the client gets a stable
        // code and a generic message, never internals.
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(code, error = ?self, "request failed");
            "Internal server error; the request id identifies it in the logs".to_string()
        } else {
            if status.is_server_error() {
                tracing::warn!(code, error = %self.message(), "request failed upstream");
            }
            self.message()
        };
        let mut body = json!({ "error": { "code": code, "message": message } });
        let retry_after = match &self {
            ApiError::Domain(Error::Validation { details: Some(details), .. }) => {
                body["error"]["details"] = details.clone();
                None
            }
            ApiError::Domain(Error::RateLimited { retry_after_secs }) => Some(*retry_after_secs),
            ApiError::Domain(Error::QuotaExceeded { retry_after_secs, .. }) => {
                body["error"]["details"] = json!({ "retryAfterSeconds": retry_after_secs });
                Some(*retry_after_secs)
            }
            ApiError::Domain(Error::PolicyDenied(reasons) | Error::ApprovalRequired(reasons)) => {
                body["error"]["details"] = json!({ "reasons": reasons });
                None
            }
            ApiError::Domain(Error::Pending(_)) => Some(30),
            ApiError::Busy => Some(1),
            ApiError::Domain(err) if let Some(err) = err.area::<PluginError>() => {
                body["error"]["details"] = json!({ "code": err.code() });
                err.retry_after_secs()
            }
            _ => None,
        };
        let mut response = (status, Json(body)).into_response();
        if let Some(secs) = retry_after {
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use trellis_core::error::Error;
    use trellis_core::plugins::{InstallError, PluginError, ReportedError};

    use super::ApiError;

    fn answer(err: PluginError) -> (StatusCode, &'static str) {
        ApiError::Domain(Error::from(err)).status_and_code()
    }

    fn plugin() -> String {
        "io.example.p".into()
    }

    /// Each plugin failure has its own status and code: the caller's input 4xx, a misbehaving
    /// plugin 502/504, an unavailable upstream 503; never an anonymous 500.
    #[test]
    fn plugin_failures_map_to_their_own_status_and_code() {
        let reported = |error| PluginError::Reported { plugin: plugin(), error };
        let cases = [
            (PluginError::Trapped { plugin: plugin(), message: "unreachable".into() }, 502, "PLUGIN_TRAPPED"),
            (PluginError::CpuTimeExceeded { plugin: plugin(), budget_ms: 1 }, 504, "PLUGIN_TIMEOUT"),
            (PluginError::WallTimeExceeded { plugin: plugin(), timeout_ms: 1 }, 504, "PLUGIN_TIMEOUT"),
            (PluginError::MemoryLimitExceeded { plugin: plugin(), limit_bytes: 1 }, 502, "PLUGIN_MEMORY_EXCEEDED"),
            (
                PluginError::CapabilityDenied {
                    plugin: plugin(),
                    capability: "http".into(),
                    reason: "10.0.0.1".into(),
                },
                502,
                "PLUGIN_EGRESS_DENIED",
            ),
            (PluginError::HttpResponseTooLarge { plugin: plugin(), limit_bytes: 1 }, 502, "PLUGIN_RESPONSE_TOO_LARGE"),
            (PluginError::Overloaded { waited_ms: 1 }, 503, "SERVICE_UNAVAILABLE"),
            (PluginError::Unloadable { plugin: plugin(), reason: "gone".into() }, 503, "SERVICE_UNAVAILABLE"),
            (
                reported(ReportedError::Upstream { status: Some(503), message: "down".into(), retryable: true }),
                503,
                "SERVICE_UNAVAILABLE",
            ),
            (
                reported(ReportedError::Upstream { status: Some(400), message: "no".into(), retryable: false }),
                502,
                "UPSTREAM_ERROR",
            ),
            (reported(ReportedError::RateLimited { retry_after_secs: Some(5) }), 503, "SERVICE_UNAVAILABLE"),
            (reported(ReportedError::InvalidInput { message: "csr".into() }), 400, "VALIDATION_ERROR"),
            (reported(ReportedError::NotSupported { message: "revoke".into() }), 400, "UNSUPPORTED_OPERATION"),
            (reported(ReportedError::Unauthorized { message: "key".into() }), 502, "UPSTREAM_UNAUTHORIZED"),
            (reported(ReportedError::Rejected { message: "CAA forbids".into() }), 400, "CA_REJECTED"),
            (reported(ReportedError::Conflict { message: "same key".into() }), 409, "CONFLICT"),
            (
                PluginError::Install(InstallError::DuplicateVersion { id: plugin(), version: "1.0.0".into() }),
                409,
                "CONFLICT",
            ),
            (PluginError::Install(InstallError::NotAComponent { detail: String::new() }), 400, "VALIDATION_ERROR"),
            (PluginError::NotFound { id: plugin() }, 404, "NOT_FOUND"),
        ];
        for (err, status, code) in cases {
            let text = err.to_string();
            assert_eq!(answer(err), (StatusCode::from_u16(status).unwrap_or_default(), code), "{text}");
        }
    }

    /// Every area error core carries in `Error::Area` reaches its own table, not the 500 this
    /// layer answers for a type it does not name.
    #[test]
    fn attestation_and_sign_in_refusals_keep_their_statuses_through_the_domain_error() {
        use trellis_core::attestation::AttestationError;
        use trellis_core::auth::oidc::OidcError;
        let cases = [
            (Error::from(AttestationError::NonceExpired), 400, "nonce_expired"),
            (Error::from(AttestationError::PolicyNotFound), 404, "Policy not found"),
            (Error::from(OidcError::NotConfigured), 404, "OIDC_NOT_CONFIGURED"),
            (Error::from(OidcError::WrongAudience), 401, "OIDC_WRONG_AUDIENCE"),
            (Error::from(OidcError::ProviderUnavailable("down".into())), 502, "OIDC_PROVIDER_UNAVAILABLE"),
        ];
        for (err, status, code) in cases {
            let text = err.to_string();
            assert_eq!(
                ApiError::Domain(err).status_and_code(),
                (StatusCode::from_u16(status).unwrap_or_default(), code),
                "{text}"
            );
        }
    }
}
