//! Proving control of identifiers to a CA (ACME challenges) through the host's
//! `challenge-solver`: HTTP-01 answers served on the host's challenge listener, DNS-01 TXT
//! records published through a DNS provider the host implements (chosen by the `provider`
//! settings, normally the record's DNS-provider configuration section), TLS-ALPN-01 when the
//! host offers it. Answers are scoped to the call's record; [`cleanup`] removes them.
//! In native builds the solver is [`crate::testing::challenges`]'s fake.

use crate::PluginError;

/// The challenge types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChallengeType {
    /// HTTP-01.
    Http01,
    /// DNS-01.
    Dns01,
    /// TLS-ALPN-01.
    TlsAlpn01,
}

/// A challenge to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Challenge {
    /// Serve `key_authorization` at `http://<domain>/.well-known/acme-challenge/<token>`.
    Http01 {
        /// The identifier validated.
        domain: String,
        /// The CA's token.
        token: String,
        /// `token.thumbprint`.
        key_authorization: String,
    },
    /// Publish TXT `value` at `_acme-challenge.<domain>`.
    Dns01 {
        /// The DNS name validated, without `*.` and trailing dot.
        domain: String,
        /// base64url(SHA-256(key authorization)): see [`dns01_value`].
        value: String,
        /// DNS provider settings, a JSON object with a `type` member (e.g.
        /// `{"type":"challtestsrv","url":"http://127.0.0.1:8055"}`); `None`: the operator's.
        provider: Option<String>,
    },
    /// Answer ALPN `acme-tls/1` for `domain`.
    TlsAlpn01 {
        /// The identifier validated.
        domain: String,
        /// The key authorization.
        key_authorization: String,
    },
}

impl Challenge {
    /// The challenge's type.
    pub fn kind(&self) -> ChallengeType {
        match self {
            Challenge::Http01 { .. } => ChallengeType::Http01,
            Challenge::Dns01 { .. } => ChallengeType::Dns01,
            Challenge::TlsAlpn01 { .. } => ChallengeType::TlsAlpn01,
        }
    }

    /// An HTTP-01 challenge.
    pub fn http01(domain: &str, token: &str, key_authorization: &str) -> Challenge {
        Challenge::Http01 {
            domain: domain.to_owned(),
            token: token.to_owned(),
            key_authorization: key_authorization.to_owned(),
        }
    }

    /// A DNS-01 challenge for `domain` (a leading `*.` is dropped) with the TXT value of
    /// `key_authorization`, published through `provider`.
    pub fn dns01(domain: &str, key_authorization: &str, provider: Option<&serde_json::Value>) -> Challenge {
        Challenge::Dns01 {
            domain: domain.trim_start_matches("*.").trim_end_matches('.').to_owned(),
            value: dns01_value(key_authorization),
            provider: provider.map(serde_json::Value::to_string),
        }
    }
}

/// The DNS-01 TXT value of a key authorization: base64url(SHA-256(key authorization)).
pub fn dns01_value(key_authorization: &str) -> String {
    crate::jws::base64url(&crate::jws::sha256(key_authorization.as_bytes()))
}

/// What the host did with a presented challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Presented {
    /// Seconds to wait before asking the CA to validate (DNS propagation).
    pub settle_seconds: u32,
}

/// Why a challenge could not be handled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SolverError {
    /// The host cannot answer this type (no listener, no such DNS provider).
    Unsupported(String),
    /// The challenge or provider settings are malformed.
    Invalid(String),
    /// The answer could not be put in place or removed.
    Failed(String),
    /// Too many challenges presented at once for the record.
    QuotaExceeded(u32),
}

impl std::fmt::Display for SolverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SolverError::Unsupported(m) => write!(f, "challenge type not supported by the host: {m}"),
            SolverError::Invalid(m) => write!(f, "invalid challenge: {m}"),
            SolverError::Failed(m) => write!(f, "challenge answer failed: {m}"),
            SolverError::QuotaExceeded(n) => write!(f, "at most {n} challenges at once"),
        }
    }
}

impl std::error::Error for SolverError {}

impl From<SolverError> for PluginError {
    fn from(err: SolverError) -> PluginError {
        match err {
            SolverError::Unsupported(_) => PluginError::not_supported(err.to_string()),
            SolverError::Invalid(_) => PluginError::invalid_input(err.to_string()),
            SolverError::Failed(_) | SolverError::QuotaExceeded(_) => {
                PluginError::upstream(None, err.to_string(), true)
            }
        }
    }
}

/// The challenge types the host can answer for this record now.
pub fn supported() -> Vec<ChallengeType> {
    backend::supported()
}

/// Puts the answer in place (presenting twice is harmless).
pub fn present(challenge: &Challenge) -> Result<Presented, SolverError> {
    backend::present(challenge)
}

/// Removes the answer (removing a missing one is harmless).
pub fn cleanup(challenge: &Challenge) -> Result<(), SolverError> {
    backend::cleanup(challenge)
}

#[cfg(target_arch = "wasm32")]
mod backend {
    use super::{Challenge, ChallengeType, Presented, SolverError};
    use crate::bindings::imports::trellis::plugin::challenge_solver as raw;

    fn to_raw(c: &Challenge) -> raw::Challenge {
        match c {
            Challenge::Http01 { domain, token, key_authorization } => raw::Challenge::Http01(raw::Http01Challenge {
                domain: domain.clone(),
                token: token.clone(),
                key_authorization: key_authorization.clone(),
            }),
            Challenge::Dns01 { domain, value, provider } => raw::Challenge::Dns01(raw::Dns01Challenge {
                domain: domain.clone(),
                value: value.clone(),
                provider: provider.clone(),
            }),
            Challenge::TlsAlpn01 { domain, key_authorization } => raw::Challenge::TlsAlpn01(raw::TlsAlpn01Challenge {
                domain: domain.clone(),
                key_authorization: key_authorization.clone(),
            }),
        }
    }

    fn error(e: raw::SolverError) -> SolverError {
        match e {
            raw::SolverError::Unsupported(m) => SolverError::Unsupported(m),
            raw::SolverError::Invalid(m) => SolverError::Invalid(m),
            raw::SolverError::Failed(m) => SolverError::Failed(m),
            raw::SolverError::QuotaExceeded(n) => SolverError::QuotaExceeded(n),
        }
    }

    pub(super) fn supported() -> Vec<ChallengeType> {
        raw::supported()
            .into_iter()
            .map(|t| match t {
                raw::ChallengeType::Http01 => ChallengeType::Http01,
                raw::ChallengeType::Dns01 => ChallengeType::Dns01,
                raw::ChallengeType::TlsAlpn01 => ChallengeType::TlsAlpn01,
            })
            .collect()
    }

    pub(super) fn present(c: &Challenge) -> Result<Presented, SolverError> {
        raw::present(&to_raw(c)).map(|p| Presented { settle_seconds: p.settle_seconds }).map_err(error)
    }

    pub(super) fn cleanup(c: &Challenge) -> Result<(), SolverError> {
        raw::cleanup(&to_raw(c)).map_err(error)
    }
}

#[cfg(not(target_arch = "wasm32"))]
use crate::testing::challenges as backend;
