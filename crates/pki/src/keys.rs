//! New private keys (PKCS#8) for CAs the PKI creates and for the plugin keystore.

use ring::rand::SystemRandom;
use ring::signature as sig;

use crate::KeyAlgorithm;

/// The operating system's generator refused, or the encoder failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("key generation failed")]
pub struct KeyGenerationFailed;

/// The RSA modulus size of `algorithm`, none for the others.
pub fn rsa_bits(algorithm: KeyAlgorithm) -> Option<usize> {
    match algorithm {
        KeyAlgorithm::Rsa2048 => Some(2048),
        KeyAlgorithm::Rsa3072 => Some(3072),
        KeyAlgorithm::Rsa4096 => Some(4096),
        _ => None,
    }
}

/// A new private key of `algorithm`, PKCS#8 DER. RSA generation takes seconds unoptimised:
/// async callers run this on the blocking pool.
pub fn generate_pkcs8(algorithm: KeyAlgorithm) -> Result<Vec<u8>, KeyGenerationFailed> {
    let rng = SystemRandom::new();
    let ecdsa = match algorithm {
        KeyAlgorithm::EcdsaP256 => Some(&sig::ECDSA_P256_SHA256_FIXED_SIGNING),
        KeyAlgorithm::EcdsaP384 => Some(&sig::ECDSA_P384_SHA384_FIXED_SIGNING),
        _ => None,
    };
    if let Some(ecdsa) = ecdsa {
        return Ok(sig::EcdsaKeyPair::generate_pkcs8(ecdsa, &rng).map_err(|_| KeyGenerationFailed)?.as_ref().to_vec());
    }
    if let Some(bits) = rsa_bits(algorithm) {
        use rsa::pkcs8::EncodePrivateKey;
        let key = rsa::RsaPrivateKey::new(&mut rand::rngs::OsRng, bits).map_err(|_| KeyGenerationFailed)?;
        return Ok(key.to_pkcs8_der().map_err(|_| KeyGenerationFailed)?.as_bytes().to_vec());
    }
    Ok(sig::Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| KeyGenerationFailed)?.as_ref().to_vec())
}
