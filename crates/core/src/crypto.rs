//! Secrets at rest, password and token hashing, constant-time comparison.

use std::path::Path;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

use crate::clock::Entropy;

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("master key must be 32 bytes, given as 64 hex characters or base64")]
    BadMasterKey,
    #[error("cannot read or create the master key file {path}: {source}")]
    KeyFile { path: String, source: std::io::Error },
    #[error("ciphertext is malformed or was encrypted under another master key")]
    Decrypt,
    #[error("password hashing failed")]
    PasswordHash,
}

/// The 256-bit key that encrypts secrets at rest (CA credentials, private keys,
/// webhook secrets). Its `Debug` never shows the bytes.
#[derive(Clone)]
pub struct MasterKey([u8; 32]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

impl MasterKey {
    /// A key from raw bytes (tests, tools).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        MasterKey(bytes)
    }

    pub fn parse(text: &str) -> Result<Self, CryptoError> {
        let text = text.trim();
        let bytes = hex::decode(text).ok().or_else(|| B64.decode(text).ok()).ok_or(CryptoError::BadMasterKey)?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| CryptoError::BadMasterKey)?;
        Ok(MasterKey(key))
    }

    /// Reads the key file, creating it (mode 0600) with fresh random bytes when absent.
    pub fn load_or_create(path: &Path, entropy: &dyn Entropy) -> Result<Self, CryptoError> {
        let io_err = |source| CryptoError::KeyFile { path: path.display().to_string(), source };
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                entropy.fill(&mut key);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(io_err)?;
                }
                write_private_file(path, hex::encode(key).as_bytes()).map_err(io_err)?;
                Ok(MasterKey(key))
            }
            Err(err) => Err(io_err(err)),
        }
    }

    /// Encrypts with XChaCha20-Poly1305; the output is `base64(nonce || ciphertext)`.
    pub fn seal(&self, plaintext: &[u8], entropy: &dyn Entropy) -> String {
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        let mut nonce = [0u8; 24];
        entropy.fill(&mut nonce);
        // Encryption with a valid key and nonce length cannot fail; an empty output
        // would still fail to open, so no secret is ever silently lost.
        let sealed = cipher.encrypt(XNonce::from_slice(&nonce), plaintext).unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        B64.encode(out)
    }

    /// Like [`MasterKey::seal`], bound to `context` (associated data): the result opens only
    /// with the same context, so a sealed value copied to another row (another plugin, record
    /// or key) does not open there.
    pub fn seal_bound(&self, plaintext: &[u8], context: &[u8], entropy: &dyn Entropy) -> String {
        use chacha20poly1305::aead::Payload;
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        let mut nonce = [0u8; 24];
        entropy.fill(&mut nonce);
        let sealed =
            cipher.encrypt(XNonce::from_slice(&nonce), Payload { msg: plaintext, aad: context }).unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        B64.encode(out)
    }

    /// Opens what [`MasterKey::seal_bound`] sealed under the same `context`.
    pub fn open_bound(&self, sealed: &str, context: &[u8]) -> Result<Vec<u8>, CryptoError> {
        use chacha20poly1305::aead::Payload;
        let raw = B64.decode(sealed).map_err(|_| CryptoError::Decrypt)?;
        if raw.len() < 24 {
            return Err(CryptoError::Decrypt);
        }
        let (nonce, ciphertext) = raw.split_at(24);
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ciphertext, aad: context })
            .map_err(|_| CryptoError::Decrypt)
    }

    /// A 256-bit key for one purpose, derived from the master key (HMAC-SHA256 of `label`):
    /// whoever holds a derived key learns nothing of the master key or of other purposes' keys.
    pub fn derive_key(&self, label: &str) -> [u8; 32] {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0);
        let tag = ring::hmac::sign(&key, label.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, CryptoError> {
        let raw = B64.decode(sealed).map_err(|_| CryptoError::Decrypt)?;
        if raw.len() < 24 {
            return Err(CryptoError::Decrypt);
        }
        let (nonce, ciphertext) = raw.split_at(24);
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        cipher.decrypt(XNonce::from_slice(nonce), ciphertext).map_err(|_| CryptoError::Decrypt)
    }
}

#[cfg(unix)]
fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(contents)
}

#[cfg(not(unix))]
fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, contents)
}

/// Argon2id PHC string for a password.
pub fn hash_password(password: &str, entropy: &dyn Entropy) -> Result<String, CryptoError> {
    let mut salt = [0u8; 16];
    entropy.fill(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|_| CryptoError::PasswordHash)?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|_| CryptoError::PasswordHash)
}

/// Checks a password against a stored PHC string. Argon2's verifier compares in constant time.
pub fn verify_password(password: &str, phc: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok()
}

/// Argon2id runs for tens of milliseconds of CPU: off the async workers, on the blocking
/// pool, and on at most half the cores at a time (at least one), so a burst of logins queues
/// here and the other half keeps serving every other request.
pub async fn verify_password_off_thread(password: &str, phc: &str) -> bool {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        tokio::sync::Semaphore::new((std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2) / 2).max(1))
    });
    let Ok(_slot) = slots.acquire().await else { return false };
    let (password, phc) = (password.to_owned(), phc.to_owned());
    tokio::task::spawn_blocking(move || verify_password(&password, &phc)).await.unwrap_or(false)
}

/// SHA-256 of a high-entropy token (API key, session token), hex-encoded. Tokens carry
/// 256 bits of entropy, so a fast hash is enough; a slow KDF would only cost latency.
pub fn token_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}
