//! Private keys the host holds for this plugin and the call's record: generate one, read its
//! public key, sign with it. The key never enters the plugin. Typical use: an ACME account
//! key signing JWS requests (`KeyInfo::jwk` for the header, `jws_algorithm` for `alg`).
//! In native builds keys come from [`crate::testing`]'s fake (not real cryptography).

use crate::PluginError;

/// Key algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyAlgorithm {
    /// ECDSA P-256, signs ES256.
    EcdsaP256,
    /// ECDSA P-384, signs ES384.
    EcdsaP384,
    /// Ed25519, signs EdDSA.
    Ed25519,
    /// RSA 2048, signs RS256.
    Rsa2048,
    /// RSA 3072, signs RS256.
    Rsa3072,
    /// RSA 4096, signs RS256.
    Rsa4096,
}

/// A public key in the forms protocols need.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyInfo {
    /// The algorithm.
    pub algorithm: KeyAlgorithm,
    /// SubjectPublicKeyInfo, DER.
    pub spki_der: Vec<u8>,
    /// The RFC 7638 canonical public JWK.
    pub jwk: String,
    /// base64url SHA-256 of `jwk` (ACME key authorizations use it).
    pub jwk_thumbprint: String,
    /// The JWS `alg` of `sign`'s signatures.
    pub jws_algorithm: String,
}

/// Why a keystore operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeystoreError {
    /// No key under this label.
    NotFound(String),
    /// A key under this label exists; `generate` never replaces one.
    AlreadyExists(String),
    /// Labels are 1-128 ASCII letters, digits, `.`, `-`, `_`.
    InvalidLabel(String),
    /// Messages to sign are at most this many bytes.
    MessageTooLarge(u32),
    /// The record holds this many keys already.
    QuotaExceeded(u32),
    /// The host's key storage is temporarily unavailable.
    Unavailable(String),
}

impl std::fmt::Display for KeystoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeystoreError::NotFound(label) => write!(f, "no key labelled {label:?}"),
            KeystoreError::AlreadyExists(label) => write!(f, "a key labelled {label:?} already exists"),
            KeystoreError::InvalidLabel(label) => write!(f, "invalid key label {label:?}"),
            KeystoreError::MessageTooLarge(limit) => write!(f, "messages to sign are at most {limit} bytes"),
            KeystoreError::QuotaExceeded(limit) => write!(f, "at most {limit} keys per record"),
            KeystoreError::Unavailable(message) => write!(f, "keystore unavailable: {message}"),
        }
    }
}

impl std::error::Error for KeystoreError {}

impl From<KeystoreError> for PluginError {
    fn from(err: KeystoreError) -> PluginError {
        match err {
            KeystoreError::Unavailable(_) => PluginError::upstream(None, err.to_string(), true),
            _ => PluginError::internal(err.to_string()),
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod backend {
    use super::{KeyAlgorithm, KeyInfo, KeystoreError};
    use crate::bindings::imports::trellis::plugin::keystore as raw;
    use crate::bindings::imports::trellis::plugin::types::KeyAlgorithm as WitAlgorithm;

    // Also what `pki` converts the CA key's algorithm with.
    impl From<KeyAlgorithm> for WitAlgorithm {
        fn from(a: KeyAlgorithm) -> WitAlgorithm {
            match a {
                KeyAlgorithm::EcdsaP256 => WitAlgorithm::EcdsaP256,
                KeyAlgorithm::EcdsaP384 => WitAlgorithm::EcdsaP384,
                KeyAlgorithm::Ed25519 => WitAlgorithm::Ed25519,
                KeyAlgorithm::Rsa2048 => WitAlgorithm::Rsa2048,
                KeyAlgorithm::Rsa3072 => WitAlgorithm::Rsa3072,
                KeyAlgorithm::Rsa4096 => WitAlgorithm::Rsa4096,
            }
        }
    }

    impl From<WitAlgorithm> for KeyAlgorithm {
        fn from(a: WitAlgorithm) -> KeyAlgorithm {
            match a {
                WitAlgorithm::EcdsaP256 => KeyAlgorithm::EcdsaP256,
                WitAlgorithm::EcdsaP384 => KeyAlgorithm::EcdsaP384,
                WitAlgorithm::Ed25519 => KeyAlgorithm::Ed25519,
                WitAlgorithm::Rsa2048 => KeyAlgorithm::Rsa2048,
                WitAlgorithm::Rsa3072 => KeyAlgorithm::Rsa3072,
                WitAlgorithm::Rsa4096 => KeyAlgorithm::Rsa4096,
            }
        }
    }

    fn info(i: raw::KeyInfo) -> KeyInfo {
        KeyInfo {
            algorithm: i.algorithm.into(),
            spki_der: i.spki_der,
            jwk: i.jwk,
            jwk_thumbprint: i.jwk_thumbprint,
            jws_algorithm: i.jws_algorithm,
        }
    }

    fn error(e: raw::KeystoreError) -> KeystoreError {
        match e {
            raw::KeystoreError::NotFound(l) => KeystoreError::NotFound(l),
            raw::KeystoreError::AlreadyExists(l) => KeystoreError::AlreadyExists(l),
            raw::KeystoreError::InvalidLabel(l) => KeystoreError::InvalidLabel(l),
            raw::KeystoreError::MessageTooLarge(n) => KeystoreError::MessageTooLarge(n),
            raw::KeystoreError::QuotaExceeded(n) => KeystoreError::QuotaExceeded(n),
            raw::KeystoreError::Unavailable(m) => KeystoreError::Unavailable(m),
        }
    }

    pub(super) fn generate(label: &str, a: KeyAlgorithm) -> Result<KeyInfo, KeystoreError> {
        raw::generate(label, a.into()).map(info).map_err(error)
    }
    pub(super) fn public_key(label: &str) -> Result<KeyInfo, KeystoreError> {
        raw::public_key(label).map(info).map_err(error)
    }
    pub(super) fn labels() -> Result<Vec<String>, KeystoreError> {
        raw::labels().map_err(error)
    }
    pub(super) fn sign(label: &str, message: &[u8]) -> Result<Vec<u8>, KeystoreError> {
        raw::sign(label, message).map_err(error)
    }
    pub(super) fn delete(label: &str) -> Result<(), KeystoreError> {
        raw::delete(label).map_err(error)
    }
}

#[cfg(not(target_arch = "wasm32"))]
use crate::testing::keystore as backend;

/// Generates a key under `label`; fails with `AlreadyExists` rather than replacing one.
pub fn generate(label: &str, algorithm: KeyAlgorithm) -> Result<KeyInfo, KeystoreError> {
    backend::generate(label, algorithm)
}

/// The key under `label`, generated first if there is none (races resolve to one key).
pub fn get_or_generate(label: &str, algorithm: KeyAlgorithm) -> Result<KeyInfo, KeystoreError> {
    match backend::public_key(label) {
        Err(KeystoreError::NotFound(_)) => match backend::generate(label, algorithm) {
            Err(KeystoreError::AlreadyExists(_)) => backend::public_key(label),
            other => other,
        },
        other => other,
    }
}

/// The public key under `label`.
pub fn public_key(label: &str) -> Result<KeyInfo, KeystoreError> {
    backend::public_key(label)
}

/// The record's key labels, sorted.
pub fn labels() -> Result<Vec<String>, KeystoreError> {
    backend::labels()
}

/// Signs the whole `message` (JWS encoding: raw r‖s for ECDSA).
pub fn sign(label: &str, message: &[u8]) -> Result<Vec<u8>, KeystoreError> {
    backend::sign(label, message)
}

/// Destroys the key under `label`.
pub fn delete(label: &str) -> Result<(), KeystoreError> {
    backend::delete(label)
}
