//! Private keys plugins use without holding them (`trellis:plugin/keystore`, contract 0.2).
//!
//! The host generates a key, seals its PKCS#8 form under the master key bound to its scope and
//! label, and signs with it on the plugin's behalf; the plugin only ever sees public keys and
//! signatures. Typical use: an ACME account key signing JWS requests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, KeyPair};
use sha2::{Digest, Sha256};

use trellis_pki::{rsa_bits, KeyAlgorithm};

use super::state::{StateFuture, StateScope};
use crate::clock::OsEntropy;
use crate::crypto::MasterKey;

/// A public key in the forms protocols need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKeyInfo {
    pub algorithm: KeyAlgorithm,
    /// SubjectPublicKeyInfo, DER.
    pub spki_der: Vec<u8>,
    /// RFC 7638 canonical JWK (required members, sorted, no whitespace).
    pub jwk: String,
    /// base64url SHA-256 of `jwk`.
    pub jwk_thumbprint: String,
    pub jws_algorithm: String,
}

/// Why a keystore operation failed (the WIT `keystore-error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeystoreError {
    #[error("no key labelled {0:?}")]
    NotFound(String),
    #[error("a key labelled {0:?} already exists")]
    AlreadyExists(String),
    #[error("invalid key label {0:?}: 1-128 ASCII letters, digits, '.', '-', '_'")]
    InvalidLabel(String),
    #[error("messages to sign are at most {0} bytes")]
    MessageTooLarge(u32),
    #[error("at most {0} keys per record")]
    QuotaExceeded(u32),
    #[error("key storage unavailable: {0}")]
    Unavailable(String),
}

/// Largest message `sign` accepts.
pub const MAX_SIGNED_MESSAGE: u32 = 64 << 10;
/// Keys one record may hold.
pub const MAX_KEYS_PER_RECORD: u32 = 32;

/// A sealed key as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedKey {
    pub algorithm: String,
    pub sealed: String,
}

/// Whether `insert` stored the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyInsert {
    Inserted,
    AlreadyExists,
    QuotaExceeded,
}

/// Storage of sealed keys, scoped like plugin state. The store implements it.
pub trait PluginKeyRecords: Send + Sync + 'static {
    /// Stores a key unless the label exists or the scope holds `max_keys` already.
    fn insert<'a>(
        &'a self,
        scope: &'a StateScope,
        label: &'a str,
        key: SealedKey,
        max_keys: u32,
    ) -> StateFuture<'a, KeyInsert>;
    fn get<'a>(&'a self, scope: &'a StateScope, label: &'a str) -> StateFuture<'a, Option<SealedKey>>;
    /// Labels in the scope, sorted.
    fn labels<'a>(&'a self, scope: &'a StateScope) -> StateFuture<'a, Vec<String>>;
    fn delete<'a>(&'a self, scope: &'a StateScope, label: &'a str) -> StateFuture<'a, ()>;
}

/// Keys generated, sealed and used by the host on plugins' behalf.
#[derive(Clone)]
pub struct Keystore {
    records: Arc<dyn PluginKeyRecords>,
    master_key: MasterKey,
}

impl std::fmt::Debug for Keystore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keystore").finish_non_exhaustive()
    }
}

fn unavailable(err: super::StateError) -> KeystoreError {
    KeystoreError::Unavailable(err.to_string())
}

fn check_label(label: &str) -> Result<(), KeystoreError> {
    let ok = (1..=128).contains(&label.len())
        && label.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(KeystoreError::InvalidLabel(label.chars().take(140).collect()))
    }
}

/// Associated data binding a sealed key to its plugin, workspace, record and label.
fn binding(scope: &StateScope, label: &str) -> Vec<u8> {
    scope.sealing_context("trellis-keystore-v1", label)
}

impl Keystore {
    pub fn new(records: Arc<dyn PluginKeyRecords>, master_key: MasterKey) -> Keystore {
        Keystore { records, master_key }
    }

    /// Keys in process memory, for tests and tools.
    pub fn in_memory() -> Keystore {
        Keystore::new(Arc::new(InMemoryKeyRecords::default()), MasterKey::from_bytes([7; 32]))
    }

    /// Generates a key under `label`; never replaces one.
    pub async fn generate(
        &self,
        scope: &StateScope,
        label: &str,
        algorithm: KeyAlgorithm,
    ) -> Result<PublicKeyInfo, KeystoreError> {
        check_label(label)?;
        if self.records.get(scope, label).await.map_err(unavailable)?.is_some() {
            return Err(KeystoreError::AlreadyExists(label.to_owned()));
        }
        // RSA generation takes up to seconds: off the async workers.
        let pkcs8 = tokio::task::spawn_blocking(move || generate_pkcs8(algorithm))
            .await
            .map_err(|err| KeystoreError::Unavailable(format!("key generation task: {err}")))??;
        let info = public_info(algorithm, &pkcs8)?;
        let sealed = self.master_key.seal_bound(&pkcs8, &binding(scope, label), &OsEntropy);
        let key = SealedKey { algorithm: algorithm.as_str().to_owned(), sealed };
        match self.records.insert(scope, label, key, MAX_KEYS_PER_RECORD).await.map_err(unavailable)? {
            KeyInsert::Inserted => Ok(info),
            KeyInsert::AlreadyExists => Err(KeystoreError::AlreadyExists(label.to_owned())),
            KeyInsert::QuotaExceeded => Err(KeystoreError::QuotaExceeded(MAX_KEYS_PER_RECORD)),
        }
    }

    async fn open(&self, scope: &StateScope, label: &str) -> Result<(KeyAlgorithm, Vec<u8>), KeystoreError> {
        check_label(label)?;
        let stored = self
            .records
            .get(scope, label)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| KeystoreError::NotFound(label.to_owned()))?;
        let algorithm = KeyAlgorithm::parse(&stored.algorithm).ok_or_else(|| {
            KeystoreError::Unavailable(format!("stored key of unknown algorithm {}", stored.algorithm))
        })?;
        let pkcs8 = self
            .master_key
            .open_bound(&stored.sealed, &binding(scope, label))
            .map_err(|_| KeystoreError::Unavailable("a stored key does not open with this master key".into()))?;
        Ok((algorithm, pkcs8))
    }

    /// The public key under `label`.
    pub async fn public_key(&self, scope: &StateScope, label: &str) -> Result<PublicKeyInfo, KeystoreError> {
        let (algorithm, pkcs8) = self.open(scope, label).await?;
        public_info(algorithm, &pkcs8)
    }

    /// The scope's labels, sorted.
    pub async fn labels(&self, scope: &StateScope) -> Result<Vec<String>, KeystoreError> {
        self.records.labels(scope).await.map_err(unavailable)
    }

    /// Signs the whole `message` with the JWS scheme of the key's algorithm.
    pub async fn sign(&self, scope: &StateScope, label: &str, message: &[u8]) -> Result<Vec<u8>, KeystoreError> {
        if message.len() > MAX_SIGNED_MESSAGE as usize {
            return Err(KeystoreError::MessageTooLarge(MAX_SIGNED_MESSAGE));
        }
        let (algorithm, pkcs8) = self.open(scope, label).await?;
        sign(algorithm, &pkcs8, message)
    }

    /// Destroys the key under `label`; a missing key is not an error.
    pub async fn delete(&self, scope: &StateScope, label: &str) -> Result<(), KeystoreError> {
        check_label(label)?;
        self.records.delete(scope, label).await.map_err(unavailable)
    }
}

fn corrupt() -> KeystoreError {
    KeystoreError::Unavailable("a stored key is corrupt".into())
}

fn ecdsa_signing(algorithm: KeyAlgorithm) -> Option<&'static sig::EcdsaSigningAlgorithm> {
    match algorithm {
        KeyAlgorithm::EcdsaP256 => Some(&sig::ECDSA_P256_SHA256_FIXED_SIGNING),
        KeyAlgorithm::EcdsaP384 => Some(&sig::ECDSA_P384_SHA384_FIXED_SIGNING),
        _ => None,
    }
}

pub(crate) fn generate_pkcs8(algorithm: KeyAlgorithm) -> Result<Vec<u8>, KeystoreError> {
    trellis_pki::generate_pkcs8(algorithm).map_err(|_| KeystoreError::Unavailable("key generation failed".into()))
}

/// SubjectPublicKeyInfo prefixes of the fixed-size key types (everything before the key bits).
const P256_SPKI_PREFIX: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
const P384_SPKI_PREFIX: &[u8] = &[
    0x30, 0x76, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00,
    0x22, 0x03, 0x62, 0x00,
];
const ED25519_SPKI_PREFIX: &[u8] = &[0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];

fn info(algorithm: KeyAlgorithm, spki_der: Vec<u8>, jwk: String) -> PublicKeyInfo {
    let jwk_thumbprint = B64URL.encode(Sha256::digest(jwk.as_bytes()));
    PublicKeyInfo { algorithm, spki_der, jwk, jwk_thumbprint, jws_algorithm: algorithm.jws_algorithm().to_owned() }
}

fn public_info(algorithm: KeyAlgorithm, pkcs8: &[u8]) -> Result<PublicKeyInfo, KeystoreError> {
    if let Some(ecdsa) = ecdsa_signing(algorithm) {
        let pair = sig::EcdsaKeyPair::from_pkcs8(ecdsa, pkcs8, &SystemRandom::new()).map_err(|_| corrupt())?;
        let point = pair.public_key().as_ref();
        let (crv, prefix) = if algorithm == KeyAlgorithm::EcdsaP256 {
            ("P-256", P256_SPKI_PREFIX)
        } else {
            ("P-384", P384_SPKI_PREFIX)
        };
        let coordinates = point.get(1..).ok_or_else(corrupt)?;
        let (x, y) = coordinates.split_at(coordinates.len() / 2);
        let jwk = format!(r#"{{"crv":"{crv}","kty":"EC","x":"{}","y":"{}"}}"#, B64URL.encode(x), B64URL.encode(y));
        return Ok(info(algorithm, [prefix, point].concat(), jwk));
    }
    if rsa_bits(algorithm).is_some() {
        use rsa::pkcs8::{DecodePrivateKey, EncodePublicKey};
        use rsa::traits::PublicKeyParts;
        let key = rsa::RsaPrivateKey::from_pkcs8_der(pkcs8).map_err(|_| corrupt())?;
        let public = key.to_public_key();
        let spki = public.to_public_key_der().map_err(|_| corrupt())?.as_bytes().to_vec();
        let jwk = format!(
            r#"{{"e":"{}","kty":"RSA","n":"{}"}}"#,
            B64URL.encode(public.e().to_bytes_be()),
            B64URL.encode(public.n().to_bytes_be())
        );
        return Ok(info(algorithm, spki, jwk));
    }
    let pair = sig::Ed25519KeyPair::from_pkcs8(pkcs8).map_err(|_| corrupt())?;
    let x = pair.public_key().as_ref();
    let jwk = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, B64URL.encode(x));
    Ok(info(algorithm, [ED25519_SPKI_PREFIX, x].concat(), jwk))
}

fn sign(algorithm: KeyAlgorithm, pkcs8: &[u8], message: &[u8]) -> Result<Vec<u8>, KeystoreError> {
    let rng = SystemRandom::new();
    let failed = || KeystoreError::Unavailable("signing failed".into());
    if let Some(ecdsa) = ecdsa_signing(algorithm) {
        let pair = sig::EcdsaKeyPair::from_pkcs8(ecdsa, pkcs8, &rng).map_err(|_| corrupt())?;
        return Ok(pair.sign(&rng, message).map_err(|_| failed())?.as_ref().to_vec());
    }
    if rsa_bits(algorithm).is_some() {
        let pair = sig::RsaKeyPair::from_pkcs8(pkcs8).map_err(|_| corrupt())?;
        let mut signature = vec![0; pair.public().modulus_len()];
        pair.sign(&sig::RSA_PKCS1_SHA256, &rng, message, &mut signature).map_err(|_| failed())?;
        return Ok(signature);
    }
    let pair = sig::Ed25519KeyPair::from_pkcs8(pkcs8).map_err(|_| corrupt())?;
    Ok(pair.sign(message).as_ref().to_vec())
}

/// Sealed keys in process memory.
#[derive(Debug, Default)]
pub struct InMemoryKeyRecords {
    keys: Mutex<BTreeMap<(StateScope, String), SealedKey>>,
}

impl InMemoryKeyRecords {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<(StateScope, String), SealedKey>) -> T) -> T {
        f(&mut self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

impl PluginKeyRecords for InMemoryKeyRecords {
    fn insert<'a>(
        &'a self,
        scope: &'a StateScope,
        label: &'a str,
        key: SealedKey,
        max_keys: u32,
    ) -> StateFuture<'a, KeyInsert> {
        let outcome = self.with(|keys| {
            let entry = (scope.clone(), label.to_owned());
            if keys.contains_key(&entry) {
                return KeyInsert::AlreadyExists;
            }
            if keys.keys().filter(|(s, _)| s == scope).count() >= max_keys as usize {
                return KeyInsert::QuotaExceeded;
            }
            keys.insert(entry, key);
            KeyInsert::Inserted
        });
        Box::pin(async move { Ok(outcome) })
    }

    fn get<'a>(&'a self, scope: &'a StateScope, label: &'a str) -> StateFuture<'a, Option<SealedKey>> {
        let key = self.with(|keys| keys.get(&(scope.clone(), label.to_owned())).cloned());
        Box::pin(async move { Ok(key) })
    }

    fn labels<'a>(&'a self, scope: &'a StateScope) -> StateFuture<'a, Vec<String>> {
        let labels = self.with(|keys| keys.keys().filter(|(s, _)| s == scope).map(|(_, l)| l.clone()).collect());
        Box::pin(async move { Ok(labels) })
    }

    fn delete<'a>(&'a self, scope: &'a StateScope, label: &'a str) -> StateFuture<'a, ()> {
        self.with(|keys| keys.remove(&(scope.clone(), label.to_owned())));
        Box::pin(async move { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(record: &str) -> StateScope {
        StateScope { plugin_id: "io.example.acme".into(), workspace_id: "ws".into(), record_id: record.into() }
    }

    fn verify(info: &PublicKeyInfo, message: &[u8], signature: &[u8]) -> bool {
        let algorithm: &dyn sig::VerificationAlgorithm = match info.algorithm {
            KeyAlgorithm::EcdsaP256 => &sig::ECDSA_P256_SHA256_FIXED,
            KeyAlgorithm::EcdsaP384 => &sig::ECDSA_P384_SHA384_FIXED,
            KeyAlgorithm::Ed25519 => &sig::ED25519,
            _ => &sig::RSA_PKCS1_2048_8192_SHA256,
        };
        // ring verifies against the key bits inside the SPKI.
        let key_bits = match info.algorithm {
            KeyAlgorithm::EcdsaP256 => &info.spki_der[P256_SPKI_PREFIX.len()..],
            KeyAlgorithm::EcdsaP384 => &info.spki_der[P384_SPKI_PREFIX.len()..],
            KeyAlgorithm::Ed25519 => &info.spki_der[ED25519_SPKI_PREFIX.len()..],
            _ => &info.spki_der[24..],
        };
        sig::UnparsedPublicKey::new(algorithm, key_bits).verify(message, signature).is_ok()
    }

    #[tokio::test]
    async fn keys_sign_verifiably_and_stay_in_their_record() {
        let keystore = Keystore::in_memory();
        for (label, algorithm, signature_len) in [
            ("p256", KeyAlgorithm::EcdsaP256, 64),
            ("p384", KeyAlgorithm::EcdsaP384, 96),
            ("ed", KeyAlgorithm::Ed25519, 64),
        ] {
            let info = keystore.generate(&scope("ca_1"), label, algorithm).await.unwrap();
            assert_eq!(keystore.public_key(&scope("ca_1"), label).await.unwrap(), info);
            let signature = keystore.sign(&scope("ca_1"), label, b"protected.payload").await.unwrap();
            assert_eq!(signature.len(), signature_len, "{label}");
            assert!(verify(&info, b"protected.payload", &signature), "{label}");
            assert!(!verify(&info, b"other", &signature), "{label}");
            let thumbprint = B64URL.encode(Sha256::digest(info.jwk.as_bytes()));
            assert_eq!(info.jwk_thumbprint, thumbprint);
        }
        assert_eq!(keystore.labels(&scope("ca_1")).await.unwrap(), ["ed", "p256", "p384"]);
        // Another record of the same plugin sees none of them.
        assert_eq!(keystore.labels(&scope("ca_2")).await.unwrap(), Vec::<String>::new());
        assert_eq!(keystore.sign(&scope("ca_2"), "p256", b"x").await, Err(KeystoreError::NotFound("p256".into())));
        assert_eq!(
            keystore.generate(&scope("ca_1"), "p256", KeyAlgorithm::EcdsaP256).await,
            Err(KeystoreError::AlreadyExists("p256".into()))
        );
        assert!(matches!(
            keystore.generate(&scope("ca_1"), "bad label", KeyAlgorithm::EcdsaP256).await,
            Err(KeystoreError::InvalidLabel(_))
        ));
        let too_large = vec![0; MAX_SIGNED_MESSAGE as usize + 1];
        assert_eq!(
            keystore.sign(&scope("ca_1"), "p256", &too_large).await,
            Err(KeystoreError::MessageTooLarge(MAX_SIGNED_MESSAGE))
        );
        keystore.delete(&scope("ca_1"), "p256").await.unwrap();
        keystore.delete(&scope("ca_1"), "p256").await.unwrap();
        assert_eq!(keystore.labels(&scope("ca_1")).await.unwrap(), ["ed", "p384"]);
    }

    #[tokio::test]
    async fn rsa_keys_give_rs256_and_a_canonical_jwk() {
        let keystore = Keystore::in_memory();
        let info = keystore.generate(&scope("ca_1"), "rsa", KeyAlgorithm::Rsa2048).await.unwrap();
        assert_eq!(info.jws_algorithm, "RS256");
        assert!(info.jwk.starts_with(r#"{"e":"AQAB","kty":"RSA","n":""#), "{}", info.jwk);
        let signature = keystore.sign(&scope("ca_1"), "rsa", b"payload").await.unwrap();
        assert_eq!(signature.len(), 256);
        assert!(verify(&info, b"payload", &signature));
    }

    #[tokio::test]
    async fn a_sealed_key_moved_to_another_record_does_not_open() {
        let records = Arc::new(InMemoryKeyRecords::default());
        let keystore = Keystore::new(records.clone(), MasterKey::from_bytes([9; 32]));
        keystore.generate(&scope("ca_1"), "account", KeyAlgorithm::EcdsaP256).await.unwrap();
        let sealed = records.get(&scope("ca_1"), "account").await.unwrap().unwrap();
        assert!(!sealed.sealed.contains("PRIVATE"));
        records.insert(&scope("ca_2"), "account", sealed, 32).await.unwrap();
        assert!(matches!(keystore.sign(&scope("ca_2"), "account", b"x").await, Err(KeystoreError::Unavailable(_))));
    }

    #[tokio::test]
    async fn a_record_holds_a_bounded_number_of_keys() {
        let keystore = Keystore::in_memory();
        for n in 0..MAX_KEYS_PER_RECORD {
            keystore.generate(&scope("ca_1"), &format!("k{n}"), KeyAlgorithm::Ed25519).await.unwrap();
        }
        assert_eq!(
            keystore.generate(&scope("ca_1"), "one-more", KeyAlgorithm::Ed25519).await,
            Err(KeystoreError::QuotaExceeded(MAX_KEYS_PER_RECORD))
        );
    }
}
