//! Trellis's internal PKI, the pure part: everything that decides what a CA signs and how,
//! with no storage, no clock and no I/O of its own (the service over the store is
//! `trellis_core::pki`). Nothing here depends on any other Trellis crate.
//!
//! - [`authority`]: a new root, an intermediate under another internal CA, or an imported CA
//!   (certificate and matching key); [`Signer`]: an authority prepared once and reused.
//! - [`issue`]: signs a verified CSR under a host-resolved profile: 16 random serial bytes,
//!   SKI/AKI, a CRL distribution point and an OCSP URL of this service.
//! - [`crl`]: the CA's signed CRL (number, thisUpdate, nextUpdate, reasons).
//! - [`ocsp`]: OCSP requests parsed and responses signed by the CA key (RFC 6960).
//! - [`x509`] and [`csr`]: the one reader of certificates (the facts the inventory keeps, PEM
//!   in and out) and of PKCS#10 requests.
//! - [`vocabulary`]: subjects, names, key usages, profiles, revocation reasons, key algorithms.
//! - [`keys`]: new CA and keystore keys.
//!
//! Randomness comes in through [`Entropy`] (Trellis core's `clock::Entropy` is this trait), so
//! tests fix serials; time comes in as seconds since the epoch.

pub mod authority;
pub mod crl;
pub mod csr;
mod extensions;
pub mod issue;
pub mod keys;
pub mod ocsp;
pub mod vocabulary;
pub mod x509;

pub use self::authority::{Authority, NewAuthority, Signer};
pub use self::crl::{sign_crl, RevokedEntry};
pub use self::issue::{sign_csr, CsrCheck, IssuerUrls, Signed};
pub use self::keys::{generate_pkcs8, rsa_bits, KeyGenerationFailed};
pub use self::ocsp::{
    error_response, parse_get_request, parse_request, sign_response, CertId, CertStatus, HashAlgorithm, OcspError,
    OcspErrorStatus, OcspIssuer, OcspRequest, SingleStatus,
};
pub use self::vocabulary::{
    CertificateProfile, KeyAlgorithm, KeyUsage, RevocationInfo, RevocationReason, Subject, SubjectAltName, SubjectKey,
};

/// A source of cryptographically secure random bytes (serials, and whatever else the caller
/// seals). Injected so that tests can fix it.
pub trait Entropy: Send + Sync + 'static {
    fn fill(&self, buf: &mut [u8]);
}

/// Why a PKI operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PkiError {
    #[error("the CSR is not a valid PKCS#10 request with a correct signature")]
    InvalidCsr,
    #[error("the certificate is not a parsable X.509 certificate")]
    InvalidCertificate,
    #[error("the certificate is not a CA certificate (basicConstraints CA:TRUE is missing)")]
    NotACa,
    #[error("the private key is not a PKCS#8 key of a supported algorithm")]
    InvalidKey,
    #[error("the private key does not match the certificate")]
    KeyMismatch,
    #[error("{0}")]
    InvalidProfile(String),
    #[error("the CA expired at {0}; renew or replace it")]
    AuthorityExpired(i64),
    #[error("signing failed: {0}")]
    Signing(String),
}

/// The arcs of a dotted object identifier, refused unless DER can encode it (X.660: the first
/// arc is 0, 1 or 2, and under 0 and 1 the second is below 40; at least two arcs). rcgen's
/// encoder asserts these instead of returning an error, so nothing reaches it unchecked.
pub fn oid_arcs(text: &str) -> Result<Vec<u64>, PkiError> {
    let invalid = |why: &str| PkiError::InvalidProfile(format!("`{text}` is not an object identifier: {why}"));
    if text.len() > 200 {
        return Err(invalid("longer than 200 characters"));
    }
    let arcs = text
        .split('.')
        .map(|arc| match arc.parse::<u64>() {
            Ok(value) if !arc.starts_with('+') && (arc == "0" || !arc.starts_with('0')) => Ok(value),
            _ => Err(invalid("arcs are decimal numbers separated by dots, e.g. 1.3.6.1.5.5.7.3.1")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    match arcs.as_slice() {
        [first, second, ..] if *first <= 1 && *second >= 40 => {
            Err(invalid("under arcs 0 and 1 the second arc is below 40"))
        }
        [first, _, ..] if *first > 2 => Err(invalid("the first arc is 0, 1 or 2")),
        [_, _, ..] => Ok(arcs),
        _ => Err(invalid("it needs at least two arcs")),
    }
}

/// Runs an rcgen encoding or signature. rcgen asserts on some inputs (yasna panics on an
/// object identifier DER cannot encode) instead of returning an error; the inputs are validated
/// before they get here, and this keeps any that slip through to a refusal of this one
/// signature, never a panic through a host call or a worker.
fn guarded<T>(what: &str, sign: impl FnOnce() -> Result<T, rcgen::Error>) -> Result<T, PkiError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(sign)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(PkiError::Signing(err.to_string())),
        Err(_) => {
            tracing::error!(code = "PKI_SIGNER_PANIC", what, "the signer panicked on its input; refused");
            Err(PkiError::Signing(format!("the {what} could not be encoded from the given profile")))
        }
    }
}

/// Seconds since the epoch as rcgen's time type.
fn time(seconds: i64) -> Result<time::OffsetDateTime, PkiError> {
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .map_err(|_| PkiError::InvalidProfile(format!("{seconds} is outside the representable time range")))
}

/// A positive serial of 16 random bytes, minimally encoded (RFC 5280 §4.1.2.2: positive, at
/// most 20 octets; CA/B Forum: at least 64 bits of entropy).
fn serial(entropy: &dyn Entropy) -> rcgen::SerialNumber {
    let mut bytes = [0u8; 16];
    entropy.fill(&mut bytes);
    // Top bit clear keeps it positive; a non-zero first byte keeps the encoding at 16 octets.
    bytes[0] = (bytes[0] & 0x7f).max(1);
    rcgen::SerialNumber::from_slice(&bytes)
}

#[cfg(test)]
mod tests;

/// The operating system's generator, for tests.
#[cfg(test)]
pub(crate) struct OsEntropy;

#[cfg(test)]
impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) {
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, buf);
    }
}
