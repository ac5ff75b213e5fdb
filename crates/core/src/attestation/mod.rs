//! TPM attestation (spec §2.3–2.6, §3.4, §4.3): devices and their enrolled attestation keys,
//! attestation policies, single-use nonces, per-workspace TPM vendor roots, AK enrollment by
//! credential activation, and attestation-gated issuance.
//!
//! - [`devices`]: device records (CRUD) and what enrollment binds to them.
//! - [`policies`]: attestation policies, validated as §2.3 says (digests sized per bank).
//! - [`nonces`]: challenges (32 random bytes, bound to a device and a purpose) and their
//!   exactly-once consumption with the four §3.4 refusals.
//! - [`trust`]: the workspace's TPM vendor roots, the anchors of EK certificate chains.
//! - [`enrollment`]: AK enrollment: the verifier plugin checks EK and AK and makes a
//!   TPM2_MakeCredential challenge; the AK is bound only once the device returns the secret.
//! - [`provision`]: attest-and-provision (nonce → policy → verifier plugin → issuance), the
//!   attestation history and the ungated record endpoints.
//!
//! The checks of evidence themselves run in an `attestation-verifier` plugin (first-party:
//! `plugins/tpm2-verifier`, type `tpm2`); this module only decides what goes in and records what
//! comes out.

mod deps;
pub mod devices;
pub mod enrollment;
pub mod nonces;
pub mod policies;
pub mod port;
pub mod provision;
pub mod trust;

pub use self::deps::AttestationDeps;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod provision_tests;

use base64::Engine as _;
use serde_json::Value;

/// The format attestation verifiers serve for TPM 2.0 evidence.
pub const TPM2: &str = "tpm2";

/// Refusals of the attestation endpoints. They answer in the attestation error form
/// `{ "error": "<code>", "details": … }` (spec §4.3, §7); the HTTP layer maps each variant to its
/// status once.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttestationError {
    #[error("Invalid policy")]
    InvalidPolicy(Value),
    #[error("Policy not found")]
    PolicyNotFound,
    #[error("Trust root not found")]
    TrustRootNotFound,
    #[error("nonce_not_found")]
    NonceNotFound,
    #[error("nonce_already_used")]
    NonceAlreadyUsed,
    #[error("nonce_expired")]
    NonceExpired,
    #[error("nonce_device_mismatch")]
    NonceDeviceMismatch,
    /// The nonce was issued for the other purpose (`attestation` vs `ak_enrollment`).
    #[error("nonce_purpose_mismatch")]
    NoncePurposeMismatch { expected: &'static str, actual: String },
    /// A required member is absent (its dotted path, e.g. `evidence.quoteBlob`).
    #[error("missing_field")]
    MissingField(String),
    /// A member is present but unusable.
    #[error("invalid_request")]
    InvalidRequest { field: String, message: String },
    /// The verifier (or the gate around it) refused: `code: detail` strings.
    #[error("attestation_failed")]
    Failed(Vec<String>),
    #[error("enrollment_failed")]
    EnrollmentFailed(Vec<String>),
    /// The device did not prove it recovered the activation secret.
    #[error("activation_failed")]
    ActivationFailed(String),
    /// A trust root with this certificate exists already.
    #[error("duplicate_trust_root")]
    DuplicateTrustRoot,
}

impl AttestationError {
    /// The `error` member of the response. Never change a value once shipped.
    pub fn code(&self) -> &'static str {
        match self {
            AttestationError::InvalidPolicy(_) => "Invalid policy",
            AttestationError::PolicyNotFound => "Policy not found",
            AttestationError::TrustRootNotFound => "Trust root not found",
            AttestationError::NonceNotFound => "nonce_not_found",
            AttestationError::NonceAlreadyUsed => "nonce_already_used",
            AttestationError::NonceExpired => "nonce_expired",
            AttestationError::NonceDeviceMismatch => "nonce_device_mismatch",
            AttestationError::NoncePurposeMismatch { .. } => "nonce_purpose_mismatch",
            AttestationError::MissingField(_) => "missing_field",
            AttestationError::InvalidRequest { .. } => "invalid_request",
            AttestationError::Failed(_) => "attestation_failed",
            AttestationError::EnrollmentFailed(_) => "enrollment_failed",
            AttestationError::ActivationFailed(_) => "activation_failed",
            AttestationError::DuplicateTrustRoot => "duplicate_trust_root",
        }
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> AttestationError {
        AttestationError::InvalidRequest { field: field.to_owned(), message: message.into() }
    }
}

impl crate::error::AreaError for AttestationError {
    fn code(&self) -> &'static str {
        AttestationError::code(self)
    }
}

/// Decodes base64 (standard or URL-safe, padded or not) of a named member.
pub(crate) fn base64_member(field: &str, text: &str) -> Result<Vec<u8>, AttestationError> {
    let text = text.trim();
    let engines = [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .ok_or_else(|| AttestationError::invalid(field, "must be base64"))
}

/// Standard base64 (how binary TPM structures travel in the API).
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A DER certificate as PEM.
pub fn certificate_pem(der: &[u8]) -> String {
    let encoded = b64(der);
    let lines: Vec<&str> = encoded.as_bytes().chunks(64).filter_map(|c| std::str::from_utf8(c).ok()).collect();
    format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n"))
}

/// A certificate given as PEM or as base64 DER, as DER.
pub(crate) fn certificate_der(field: &str, text: &str) -> Result<Vec<u8>, AttestationError> {
    let text = text.trim();
    if text.starts_with("-----BEGIN") {
        let (_, pem) = x509_parser::pem::parse_x509_pem(text.as_bytes())
            .map_err(|_| AttestationError::invalid(field, "is not a PEM certificate"))?;
        return Ok(pem.contents);
    }
    base64_member(field, text)
}
