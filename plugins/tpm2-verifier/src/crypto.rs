//! Keys and signatures: TPM public areas and X.509 SubjectPublicKeyInfos to verifying keys and
//! comparable key material; TPMT_SIGNATURE and X.509 signature verification (RustCrypto).
//!
//! RSASSA-PKCS1-v1_5 and RSASSA-PSS are checked here rather than by the `rsa` crate: the public
//! operation is [`crate::montgomery`]'s (the `rsa` crate's `num-bigint-dig` modpow made the
//! four RSA checks of a `verify` nearly all of its cost); the encoding checks are RFC 8017's,
//! the DigestInfo prefixes the `rsa` crate's.

use p256::ecdsa::signature::hazmat::PrehashVerifier;
use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::traits::PublicKeyParts;
use rsa::{BigUint, Pkcs1v15Sign, RsaPublicKey};
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

use crate::montgomery::{Modulus, NativeLimb};
use crate::tpm::{alg, curve, HashAlg, KeyDetail, Signature, TpmPublic};

/// Public-key algorithm OIDs.
pub mod oid {
    pub const RSA_ENCRYPTION: &str = "1.2.840.113549.1.1.1";
    pub const RSAES_OAEP: &str = "1.2.840.113549.1.1.7";
    pub const RSASSA_PSS: &str = "1.2.840.113549.1.1.10";
    pub const SHA256_WITH_RSA: &str = "1.2.840.113549.1.1.11";
    pub const SHA384_WITH_RSA: &str = "1.2.840.113549.1.1.12";
    pub const SHA512_WITH_RSA: &str = "1.2.840.113549.1.1.13";
    pub const EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
    pub const SECP256R1: &str = "1.2.840.10045.3.1.7";
    pub const SECP384R1: &str = "1.3.132.0.34";
    pub const ECDSA_SHA256: &str = "1.2.840.10045.4.3.2";
    pub const ECDSA_SHA384: &str = "1.2.840.10045.4.3.3";
    pub const ECDSA_SHA512: &str = "1.2.840.10045.4.3.4";
}

/// The smallest RSA modulus accepted anywhere (EK, AK, certified key, certificate issuers).
pub const MIN_RSA_BITS: usize = 2048;

/// A key that can verify signatures.
#[derive(Debug, Clone)]
pub enum VerifyingKey {
    Rsa(RsaPublicKey),
    P256(p256::ecdsa::VerifyingKey),
    P384(p384::ecdsa::VerifyingKey),
}

/// A public key reduced to what identifies it, for equality checks across encodings: RSA
/// (modulus and exponent without leading zeros) or EC (curve and fixed-width coordinates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMaterial {
    Rsa { modulus: Vec<u8>, exponent: Vec<u8> },
    Ec { curve: u16, x: Vec<u8>, y: Vec<u8> },
}

impl KeyMaterial {
    /// A short description for details.
    pub fn describe(&self) -> String {
        match self {
            KeyMaterial::Rsa { modulus, .. } => format!("RSA-{}", modulus.len() * 8),
            KeyMaterial::Ec { curve, .. } => match *curve {
                curve::NIST_P256 => "ECC P-256".to_owned(),
                curve::NIST_P384 => "ECC P-384".to_owned(),
                other => format!("ECC curve 0x{other:04x}"),
            },
        }
    }
}

fn strip_zeros(bytes: &[u8]) -> Vec<u8> {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    bytes.get(first..).unwrap_or_default().to_vec()
}

/// Left-pads `bytes` to `width`; `None` when longer.
pub fn left_pad(bytes: &[u8], width: usize) -> Option<Vec<u8>> {
    let pad = width.checked_sub(bytes.len())?;
    let mut out = vec![0u8; pad];
    out.extend_from_slice(bytes);
    Some(out)
}

/// Field size of a supported curve.
pub fn curve_size(curve_id: u16) -> Option<usize> {
    match curve_id {
        curve::NIST_P256 => Some(32),
        curve::NIST_P384 => Some(48),
        _ => None,
    }
}

/// The key material of a TPM public area (RSA, or ECC on P-256/P-384).
pub fn material_from_public(public: &TpmPublic) -> Result<KeyMaterial, String> {
    match &public.detail {
        KeyDetail::Rsa { exponent, modulus, .. } => {
            Ok(KeyMaterial::Rsa { modulus: strip_zeros(modulus), exponent: strip_zeros(&exponent.to_be_bytes()) })
        }
        KeyDetail::Ecc { curve, x, y, .. } => {
            let size = curve_size(*curve).ok_or_else(|| format!("ECC curve 0x{curve:04x} unsupported"))?;
            let x = left_pad(x, size).ok_or("ECC x coordinate longer than the curve")?;
            let y = left_pad(y, size).ok_or("ECC y coordinate longer than the curve")?;
            Ok(KeyMaterial::Ec { curve: *curve, x, y })
        }
    }
}

/// The key material of a DER SubjectPublicKeyInfo (rsaEncryption, RSAES-OAEP and RSASSA-PSS
/// keys alike; id-ecPublicKey on P-256/P-384). The whole buffer must be the SPKI.
pub fn material_from_spki(der: &[u8]) -> Result<KeyMaterial, String> {
    let (rest, spki) = SubjectPublicKeyInfo::from_der(der).map_err(|e| format!("SubjectPublicKeyInfo: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("SubjectPublicKeyInfo: {} trailing bytes", rest.len()));
    }
    material_from_parsed_spki(&spki)
}

/// As [`material_from_spki`], for an already parsed SPKI.
pub fn material_from_parsed_spki(spki: &SubjectPublicKeyInfo<'_>) -> Result<KeyMaterial, String> {
    let algorithm = spki.algorithm.algorithm.to_id_string();
    let bits: &[u8] = &spki.subject_public_key.data;
    match algorithm.as_str() {
        oid::RSA_ENCRYPTION | oid::RSAES_OAEP | oid::RSASSA_PSS => {
            let key = RsaPublicKey::from_pkcs1_der(bits).map_err(|e| format!("RSA public key: {e}"))?;
            Ok(KeyMaterial::Rsa { modulus: key.n().to_bytes_be(), exponent: key.e().to_bytes_be() })
        }
        oid::EC_PUBLIC_KEY => {
            let curve_oid = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .map(|o| o.to_id_string())
                .ok_or("EC public key without a named curve")?;
            let (curve_id, x, y) = match curve_oid.as_str() {
                oid::SECP256R1 => {
                    use p256::elliptic_curve::sec1::ToEncodedPoint;
                    let key = p256::PublicKey::from_sec1_bytes(bits).map_err(|_| "invalid P-256 point")?;
                    let point = key.to_encoded_point(false);
                    let (x, y) = point.x().zip(point.y()).ok_or("EC point without coordinates")?;
                    (curve::NIST_P256, x.to_vec(), y.to_vec())
                }
                oid::SECP384R1 => {
                    use p384::elliptic_curve::sec1::ToEncodedPoint;
                    let key = p384::PublicKey::from_sec1_bytes(bits).map_err(|_| "invalid P-384 point")?;
                    let point = key.to_encoded_point(false);
                    let (x, y) = point.x().zip(point.y()).ok_or("EC point without coordinates")?;
                    (curve::NIST_P384, x.to_vec(), y.to_vec())
                }
                other => return Err(format!("EC curve {other} unsupported")),
            };
            Ok(KeyMaterial::Ec { curve: curve_id, x, y })
        }
        other => Err(format!("public key algorithm {other} unsupported")),
    }
}

/// A verifying key from key material (RSA of at least [`MIN_RSA_BITS`], P-256, P-384).
pub fn verifying_key(material: &KeyMaterial) -> Result<VerifyingKey, String> {
    match material {
        KeyMaterial::Rsa { modulus, exponent } => {
            let key = RsaPublicKey::new(BigUint::from_bytes_be(modulus), BigUint::from_bytes_be(exponent))
                .map_err(|e| format!("RSA public key: {e}"))?;
            if key.n().bits() < MIN_RSA_BITS {
                return Err(format!("RSA key of {} bits is below {MIN_RSA_BITS}", key.n().bits()));
            }
            Ok(VerifyingKey::Rsa(key))
        }
        KeyMaterial::Ec { curve: curve::NIST_P256, x, y } => {
            let point = p256::EncodedPoint::from_affine_coordinates(
                p256::FieldBytes::from_slice(fixed(x, 32)?),
                p256::FieldBytes::from_slice(fixed(y, 32)?),
                false,
            );
            p256::ecdsa::VerifyingKey::from_encoded_point(&point)
                .map(VerifyingKey::P256)
                .map_err(|_| "P-256 point not on the curve".to_owned())
        }
        KeyMaterial::Ec { curve: curve::NIST_P384, x, y } => {
            let point = p384::EncodedPoint::from_affine_coordinates(
                p384::FieldBytes::from_slice(fixed(x, 48)?),
                p384::FieldBytes::from_slice(fixed(y, 48)?),
                false,
            );
            p384::ecdsa::VerifyingKey::from_encoded_point(&point)
                .map(VerifyingKey::P384)
                .map_err(|_| "P-384 point not on the curve".to_owned())
        }
        KeyMaterial::Ec { curve, .. } => Err(format!("ECC curve 0x{curve:04x} unsupported")),
    }
}

fn fixed(bytes: &[u8], width: usize) -> Result<&[u8], String> {
    if bytes.len() == width {
        Ok(bytes)
    } else {
        Err(format!("coordinate of {} bytes, expected {width}", bytes.len()))
    }
}

/// Verifies a TPMT_SIGNATURE over `message` (the raw TPMS_ATTEST bytes) with `key`. The caller
/// has already required the signature's scheme to be the key's.
pub fn verify_tpm_signature(key: &VerifyingKey, signature: &Signature, message: &[u8]) -> Result<(), String> {
    let (scheme, hash_id) = signature.scheme();
    let hash = HashAlg::from_id(hash_id).ok_or_else(|| format!("hash {} unsupported", alg::name(hash_id)))?;
    let digest = hash.digest(&[message]);
    match (key, signature) {
        (VerifyingKey::Rsa(key), Signature::Rsa { signature, .. }) => {
            if signature.len() != key.size() {
                return Err(format!("RSA signature of {} bytes for a {}-byte modulus", signature.len(), key.size()));
            }
            match scheme {
                alg::RSASSA => verify_pkcs1v15(key, hash, &digest, signature),
                alg::RSAPSS => {
                    // TPM 2.0 library specifications since 1.38 use a salt as long as the
                    // digest; earlier TPMs use the largest salt the key allows. Both are PSS.
                    let max_salt = key.size().saturating_sub(hash.size() + 2);
                    verify_pss(key, hash, &digest, signature, &[hash.size(), max_salt])
                }
                other => Err(format!("RSA scheme {} unsupported", alg::name(other))),
            }
        }
        (VerifyingKey::P256(key), Signature::Ecdsa { r, s, .. }) => {
            let sig = p256::ecdsa::Signature::from_scalars(
                *p256::FieldBytes::from_slice(&left_pad(r, 32).ok_or("ECDSA r longer than the curve")?),
                *p256::FieldBytes::from_slice(&left_pad(s, 32).ok_or("ECDSA s longer than the curve")?),
            )
            .map_err(|_| "ECDSA r or s out of range".to_owned())?;
            key.verify_prehash(&digest, &sig).map_err(|_| "ECDSA signature does not verify".to_owned())
        }
        (VerifyingKey::P384(key), Signature::Ecdsa { r, s, .. }) => {
            let sig = p384::ecdsa::Signature::from_scalars(
                *p384::FieldBytes::from_slice(&left_pad(r, 48).ok_or("ECDSA r longer than the curve")?),
                *p384::FieldBytes::from_slice(&left_pad(s, 48).ok_or("ECDSA s longer than the curve")?),
            )
            .map_err(|_| "ECDSA r or s out of range".to_owned())?;
            key.verify_prehash(&digest, &sig).map_err(|_| "ECDSA signature does not verify".to_owned())
        }
        _ => Err("signature type does not match the key type".to_owned()),
    }
}

/// RSASSA-PKCS1-v1_5 verification (RFC 8017 §8.2.2): the signature as long as the modulus and
/// below it, and the whole encoded message compared with the expected one.
fn verify_pkcs1v15(key: &RsaPublicKey, hash: HashAlg, digest: &[u8], signature: &[u8]) -> Result<(), String> {
    let scheme = match hash {
        HashAlg::Sha1 => Pkcs1v15Sign::new::<sha1::Sha1>(),
        HashAlg::Sha256 => Pkcs1v15Sign::new::<sha2::Sha256>(),
        HashAlg::Sha384 => Pkcs1v15Sign::new::<sha2::Sha384>(),
        HashAlg::Sha512 => Pkcs1v15Sign::new::<sha2::Sha512>(),
    };
    let refused = || "RSASSA-PKCS1-v1_5 signature does not verify".to_owned();
    let k = key.size();
    let t_len = scheme.prefix.len() + digest.len();
    if scheme.hash_len.is_some_and(|len| len != digest.len()) || signature.len() != k || k < t_len + 11 {
        return Err(refused());
    }
    // RSAVP1: s < n (refused by `pow`), m = s^e mod n as k bytes.
    let modulus = Modulus::<NativeLimb>::from_be_bytes(&key.n().to_bytes_be()).map_err(|e| format!("RSA key: {e}"))?;
    let em = modulus.pow(signature, &key.e().to_bytes_be()).map_err(|_| refused())?;
    // EM = 0x00 || 0x01 || PS (0xff, k - tLen - 3 bytes) || 0x00 || DigestInfo prefix || H
    let mut expected = Vec::with_capacity(k);
    expected.extend_from_slice(&[0, 1]);
    expected.resize(k - t_len - 1, 0xff);
    expected.push(0);
    expected.extend_from_slice(&scheme.prefix);
    expected.extend_from_slice(digest);
    if em == expected {
        Ok(())
    } else {
        Err(refused())
    }
}

/// RSASSA-PSS verification (RFC 8017 §8.1.2 with EMSA-PSS-VERIFY, §9.1.2; MGF1 with the
/// message's hash), accepting any of `salt_lengths`: one public operation, then the encoding
/// checked for each length. The checks are the `rsa` crate's, plus two RFC 8017 requires and it
/// skipped: s < n, and a zero leading byte when the encoding is a byte shorter than the modulus.
fn verify_pss(
    key: &RsaPublicKey,
    hash: HashAlg,
    digest: &[u8],
    signature: &[u8],
    salt_lengths: &[usize],
) -> Result<(), String> {
    let refused = || "RSASSA-PSS signature does not verify".to_owned();
    let h_len = hash.size();
    if signature.len() != key.size() || digest.len() != h_len {
        return Err(refused());
    }
    let modulus = Modulus::<NativeLimb>::from_be_bytes(&key.n().to_bytes_be()).map_err(|e| format!("RSA key: {e}"))?;
    let m = modulus.pow(signature, &key.e().to_bytes_be()).map_err(|_| refused())?;
    // EM = I2OSP(m, emLen) with emBits = modBits - 1.
    let em_bits = key.n().bits() - 1;
    let em_len = em_bits.div_ceil(8);
    let (leading, em) = m.split_at_checked(m.len().saturating_sub(em_len)).ok_or_else(refused)?;
    if leading.iter().any(|b| *b != 0) || em_len < h_len + 2 {
        return Err(refused());
    }
    // EM = maskedDB || H || 0xbc
    let Some((&0xbc, masked_db_and_h)) = em.split_last() else {
        return Err(refused());
    };
    let (masked_db, h) = masked_db_and_h.split_at_checked(em_len - h_len - 1).ok_or_else(refused)?;
    // The leftmost 8·emLen - emBits bits of maskedDB are zero, and cleared in DB.
    let top_mask = 0xffu8 >> (8 * em_len - em_bits);
    if masked_db.first().is_some_and(|b| b & !top_mask != 0) {
        return Err(refused());
    }
    let mut db = mgf1(hash, h, masked_db.len());
    for (d, m) in db.iter_mut().zip(masked_db) {
        *d ^= m;
    }
    if let Some(first) = db.first_mut() {
        *first &= top_mask;
    }
    for &salt_len in salt_lengths {
        // DB = PS (zeros) || 0x01 || salt
        let Some(padding_len) = (em_len - h_len - 2).checked_sub(salt_len) else { continue };
        let Some((padding, [0x01, salt @ ..])) = db.split_at_checked(padding_len) else { continue };
        if padding.iter().any(|b| *b != 0) {
            continue;
        }
        // H = Hash(0x00 × 8 || mHash || salt)
        if hash.digest(&[&[0u8; 8], digest, salt]) == h {
            return Ok(());
        }
    }
    Err(refused())
}

/// MGF1 (RFC 8017 §B.2.1): `len` bytes of Hash(seed || counter), counter from 0.
fn mgf1(hash: HashAlg, seed: &[u8], len: usize) -> Vec<u8> {
    let mut mask = Vec::with_capacity(len + hash.size());
    let mut counter = 0u32;
    while mask.len() < len {
        mask.extend(hash.digest(&[seed, &counter.to_be_bytes()]));
        counter = counter.wrapping_add(1);
    }
    mask.truncate(len);
    mask
}

/// Verifies an X.509 signature (`algorithm` OID, over the raw `tbs` bytes) with the issuer's
/// SPKI: RSASSA-PKCS1-v1_5 with SHA-256/384/512 and ECDSA with SHA-256/384/512 on P-256/P-384.
/// SHA-1 signatures are refused.
pub fn verify_x509_signature(
    algorithm: &str,
    tbs: &[u8],
    signature: &[u8],
    issuer: &SubjectPublicKeyInfo<'_>,
) -> Result<(), String> {
    let key = verifying_key(&material_from_parsed_spki(issuer)?)?;
    let (hash, rsa) = match algorithm {
        oid::SHA256_WITH_RSA => (HashAlg::Sha256, true),
        oid::SHA384_WITH_RSA => (HashAlg::Sha384, true),
        oid::SHA512_WITH_RSA => (HashAlg::Sha512, true),
        oid::ECDSA_SHA256 => (HashAlg::Sha256, false),
        oid::ECDSA_SHA384 => (HashAlg::Sha384, false),
        oid::ECDSA_SHA512 => (HashAlg::Sha512, false),
        other => return Err(format!("signature algorithm {other} unsupported")),
    };
    let digest = hash.digest(&[tbs]);
    match (key, rsa) {
        (VerifyingKey::Rsa(key), true) => verify_pkcs1v15(&key, hash, &digest, signature),
        (VerifyingKey::P256(key), false) => {
            let sig = p256::ecdsa::Signature::from_der(signature).map_err(|_| "malformed ECDSA signature")?;
            key.verify_prehash(&digest, &sig).map_err(|_| "ECDSA signature does not verify".to_owned())
        }
        (VerifyingKey::P384(key), false) => {
            let sig = p384::ecdsa::Signature::from_der(signature).map_err(|_| "malformed ECDSA signature")?;
            key.verify_prehash(&digest, &sig).map_err(|_| "ECDSA signature does not verify".to_owned())
        }
        _ => Err("signature algorithm does not match the issuer's key".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use rsa::signature::SignatureEncoding;
    use rsa::traits::PublicKeyParts;
    use sha2::Digest;

    use super::*;

    #[test]
    fn pkcs1v15_signatures_verify_and_tampered_ones_do_not() {
        let mut rng = rand_core::OsRng;
        let private = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
        let public = private.to_public_key();
        let digest = sha2::Sha256::digest(b"quoted");
        let signing = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(private);
        let signature = rsa::signature::hazmat::PrehashSigner::sign_prehash(&signing, &digest).unwrap().to_vec();
        assert_eq!(signature.len(), public.size());
        verify_pkcs1v15(&public, HashAlg::Sha256, &digest, &signature).unwrap();
        // What the rsa crate accepts, this accepts, and the reverse.
        public.verify(Pkcs1v15Sign::new::<sha2::Sha256>(), &digest, &signature).unwrap();

        let mut flipped = signature.clone();
        flipped[100] ^= 1;
        assert!(verify_pkcs1v15(&public, HashAlg::Sha256, &digest, &flipped).is_err());
        assert!(verify_pkcs1v15(&public, HashAlg::Sha384, &digest, &signature).is_err(), "wrong hash");
        let other = sha2::Sha256::digest(b"other");
        assert!(verify_pkcs1v15(&public, HashAlg::Sha256, &other, &signature).is_err());
        assert!(verify_pkcs1v15(&public, HashAlg::Sha256, &digest, &signature[1..]).is_err(), "short");
        let too_big = public.n().to_bytes_be();
        assert!(verify_pkcs1v15(&public, HashAlg::Sha256, &digest, &too_big).is_err(), "s >= n");
    }

    #[test]
    fn pss_signatures_verify_as_the_rsa_crate_verifies_them_and_tampered_ones_do_not() {
        let mut rng = rand_core::OsRng;
        // 2049 bits: the encoded message is a byte shorter than the modulus.
        for bits in [2048, 2049] {
            let private = rsa::RsaPrivateKey::new(&mut rng, bits).unwrap();
            let public = private.to_public_key();
            let k = public.size();
            for hash in [HashAlg::Sha1, HashAlg::Sha256, HashAlg::Sha384, HashAlg::Sha512] {
                let digest = hash.digest(&[b"quoted"]);
                let h_len = hash.size();
                let em_len = (bits - 1).div_ceil(8);
                let salts = [h_len, k - h_len - 2];
                for salt in [h_len, em_len - h_len - 2, 0, 10] {
                    let scheme = |salt| match hash {
                        HashAlg::Sha1 => rsa::Pss::new_with_salt::<sha1::Sha1>(salt),
                        HashAlg::Sha256 => rsa::Pss::new_with_salt::<sha2::Sha256>(salt),
                        HashAlg::Sha384 => rsa::Pss::new_with_salt::<sha2::Sha384>(salt),
                        HashAlg::Sha512 => rsa::Pss::new_with_salt::<sha2::Sha512>(salt),
                    };
                    let signature = private.sign_with_rng(&mut rng, scheme(salt), &digest).unwrap();
                    let label = format!("RSA-{bits}, {}, salt {salt}", hash.name());
                    public.verify(scheme(salt), &digest, &signature).unwrap();
                    verify_pss(&public, hash, &digest, &signature, &[salt]).expect(&label);
                    // The salt lengths a TPM uses: accepted exactly when the rsa crate accepts.
                    let theirs = salts.iter().any(|s| public.verify(scheme(*s), &digest, &signature).is_ok());
                    assert_eq!(verify_pss(&public, hash, &digest, &signature, &salts).is_ok(), theirs, "{label}");
                    assert_eq!(theirs, salt == h_len || (salt == k - h_len - 2 && em_len == k), "{label}");

                    for byte in [0, 1, k / 2, k - 1] {
                        let mut flipped = signature.clone();
                        flipped[byte] ^= 0x10;
                        assert!(verify_pss(&public, hash, &digest, &flipped, &[salt]).is_err(), "{label}: {byte}");
                    }
                    let other = hash.digest(&[b"other"]);
                    assert!(verify_pss(&public, hash, &other, &signature, &[salt]).is_err(), "{label}");
                    assert!(verify_pss(&public, hash, &digest, &signature, &[salt + 1]).is_err(), "{label}");
                    assert!(verify_pss(&public, hash, &digest, &signature[1..], &[salt]).is_err(), "{label}");
                    let beyond = (public.n() + BigUint::from_bytes_be(&signature)).to_bytes_be();
                    if beyond.len() == k {
                        assert!(verify_pss(&public, hash, &digest, &beyond, &[salt]).is_err(), "{label}: s + n");
                    }
                }
            }
        }
    }
}
