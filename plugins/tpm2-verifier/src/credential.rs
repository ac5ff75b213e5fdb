//! TPM2_MakeCredential in pure Rust (TPM 2.0 Library Part 1, §24 "Credential Protection"), for
//! RSA and ECC endorsement keys, with every random value drawn from the host's entropy:
//!
//! - RSA EK: `seed` = nameAlg-sized random, `encryptedSecret` = RSA-OAEP(EK, nameAlg,
//!   label "IDENTITY\0", seed).
//! - ECC EK: an ephemeral key `d` on the EK's curve, `Z` = x(d·EK), `seed` = KDFe(nameAlg, Z,
//!   "IDENTITY", x(d·G), x(EK), bits(nameAlg)), `encryptedSecret` = TPMS_ECC_POINT(d·G).
//! - Then `symKey` = KDFa(nameAlg, seed, "STORAGE", Name(AK), "", EK symmetric key bits),
//!   `encIdentity` = AES-CFB(symKey, IV 0, TPM2B_DIGEST(secret)), `HMACkey` = KDFa(nameAlg,
//!   seed, "INTEGRITY", "", "", bits(nameAlg)), `outerHMAC` = HMAC(HMACkey, encIdentity ‖
//!   Name(AK)), and the credential blob is TPM2B(outerHMAC) ‖ encIdentity.

use aes::cipher::{AsyncStreamCipher, KeyIvInit};
use rand_core::{CryptoRng, RngCore};
use rsa::{BigUint, Oaep, RsaPublicKey};

use crate::crypto::{curve_size, left_pad, MIN_RSA_BITS};
use crate::tpm::{alg, attr, curve, HashAlg, KeyDetail, TpmPublic};

/// The least entropy the host must pass.
pub const MIN_ENTROPY: usize = 64;

/// TPM2_MakeCredential's output, without the TPM2B size prefixes of the two outer structures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// TPM2B_ID_OBJECT.credential: TPM2B_DIGEST(outerHMAC) ‖ encIdentity.
    pub credential_blob: Vec<u8>,
    /// TPM2B_ENCRYPTED_SECRET.secret: the OAEP ciphertext, or the marshalled TPMS_ECC_POINT.
    pub encrypted_secret: Vec<u8>,
}

/// Why no credential could be made for this EK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialError {
    /// The EK cannot protect a credential (not a restricted decryption key, no AES-CFB, an
    /// unsupported curve…).
    UnsupportedEk(String),
    /// The host's inputs break the contract (secret size, entropy length).
    BadInput(String),
}

/// KDFa (SP 800-108 counter mode with HMAC): `bits` bits of ∥ HMAC(key, [i]₃₂ ‖ label ‖ 00 ‖
/// contextU ‖ contextV ‖ [bits]₃₂) for i = 1, 2, …
pub fn kdfa(hash: HashAlg, key: &[u8], label: &str, context_u: &[u8], context_v: &[u8], bits: u32) -> Vec<u8> {
    let bytes = bits.div_ceil(8) as usize;
    let mut out = Vec::with_capacity(bytes + hash.size());
    let mut counter: u32 = 1;
    while out.len() < bytes {
        out.extend(
            hash.hmac(
                key,
                &[&counter.to_be_bytes(), label.as_bytes(), &[0], context_u, context_v, &bits.to_be_bytes()],
            ),
        );
        counter = counter.wrapping_add(1);
    }
    out.truncate(bytes);
    out
}

/// KDFe (SP 800-56A concatenation KDF): `bits` bits of ∥ H([i]₃₂ ‖ Z ‖ label ‖ 00 ‖ partyU ‖
/// partyV) for i = 1, 2, …
pub fn kdfe(hash: HashAlg, z: &[u8], label: &str, party_u: &[u8], party_v: &[u8], bits: u32) -> Vec<u8> {
    let bytes = bits.div_ceil(8) as usize;
    let mut out = Vec::with_capacity(bytes + hash.size());
    let mut counter: u32 = 1;
    while out.len() < bytes {
        out.extend(hash.digest(&[&counter.to_be_bytes(), z, label.as_bytes(), &[0], party_u, party_v]));
        counter = counter.wrapping_add(1);
    }
    out.truncate(bytes);
    out
}

/// A deterministic random stream from the host's entropy: block i of stream `label` is
/// HMAC-SHA256(entropy, "trellis-tpm2-verifier/v1" ‖ 00 ‖ label ‖ 00 ‖ [i]₃₂). Distinct labels
/// give independent streams (seed, OAEP padding, ECDH ephemeral key), and the same inputs give
/// the same challenge, as the contract asks.
pub struct EntropyStream<'a> {
    entropy: &'a [u8],
    label: &'static str,
    counter: u32,
    buffer: Vec<u8>,
}

impl<'a> EntropyStream<'a> {
    /// The stream `label` of `entropy`.
    pub fn new(entropy: &'a [u8], label: &'static str) -> EntropyStream<'a> {
        EntropyStream { entropy, label, counter: 0, buffer: Vec::new() }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        self.fill_bytes(&mut out);
        out
    }
}

impl RngCore for EntropyStream<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_be_bytes(b)
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_be_bytes(b)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for byte in dest.iter_mut() {
            if self.buffer.is_empty() {
                self.counter = self.counter.wrapping_add(1);
                let mut block = HashAlg::Sha256.hmac(
                    self.entropy,
                    &[b"trellis-tpm2-verifier/v1", &[0], self.label.as_bytes(), &[0], &self.counter.to_be_bytes()],
                );
                block.reverse();
                self.buffer = block;
            }
            *byte = self.buffer.pop().unwrap_or_default();
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// The stream stands for the host's CSPRNG.
impl CryptoRng for EntropyStream<'_> {}

/// Checks that an EK can protect a credential: a restricted decryption key with an AES-CFB
/// symmetric definition, RSA of at least 2048 bits or ECC on P-256/P-384.
pub fn check_ek(ek: &TpmPublic) -> Result<(), String> {
    if !ek.has(attr::RESTRICTED | attr::DECRYPT) || ek.has(attr::SIGN) {
        return Err(format!("not a restricted decryption key (attributes 0x{:08x})", ek.attributes));
    }
    match ek.symmetric {
        Some(sym) if sym.algorithm == alg::AES && sym.mode == alg::CFB && matches!(sym.key_bits, 128 | 192 | 256) => {}
        Some(sym) => {
            return Err(format!(
                "symmetric {}-{} {} unsupported (AES-CFB only)",
                alg::name(sym.algorithm),
                sym.key_bits,
                alg::name(sym.mode)
            ))
        }
        None => return Err("no symmetric algorithm".to_owned()),
    }
    match &ek.detail {
        KeyDetail::Rsa { key_bits, modulus, .. } => {
            if usize::from(*key_bits) < MIN_RSA_BITS || modulus.len() * 8 != usize::from(*key_bits) {
                return Err(format!("RSA key of {key_bits} bits with a {}-byte modulus", modulus.len()));
            }
        }
        KeyDetail::Ecc { curve, .. } => {
            if curve_size(*curve).is_none() {
                return Err(format!("ECC curve 0x{curve:04x} unsupported (P-256 and P-384 only)"));
            }
        }
    }
    Ok(())
}

/// TPM2_MakeCredential(ek, objectName, secret), drawing the seed, the OAEP padding and the ECDH
/// ephemeral key from `entropy` (at least [`MIN_ENTROPY`] bytes).
pub fn make_credential(
    ek: &TpmPublic,
    object_name: &[u8],
    secret: &[u8],
    entropy: &[u8],
) -> Result<Credential, CredentialError> {
    check_ek(ek).map_err(CredentialError::UnsupportedEk)?;
    let name_alg = ek.name_alg;
    if secret.is_empty() || secret.len() > name_alg.size() {
        return Err(CredentialError::BadInput(format!(
            "the secret must be 1 to {} bytes (the EK's name digest), got {}",
            name_alg.size(),
            secret.len()
        )));
    }
    if entropy.len() < MIN_ENTROPY {
        return Err(CredentialError::BadInput(format!(
            "at least {MIN_ENTROPY} bytes of entropy are needed, got {}",
            entropy.len()
        )));
    }
    let key_bits = ek.symmetric.map(|s| s.key_bits).unwrap_or(128);
    let (seed, encrypted_secret) = match &ek.detail {
        KeyDetail::Rsa { exponent, modulus, .. } => {
            let seed = EntropyStream::new(entropy, "seed").take(name_alg.size());
            let key = RsaPublicKey::new(BigUint::from_bytes_be(modulus), BigUint::from(*exponent))
                .map_err(|e| CredentialError::UnsupportedEk(format!("RSA key: {e}")))?;
            let padding = match name_alg {
                HashAlg::Sha1 => Oaep::new_with_label::<sha1::Sha1, _>("IDENTITY\0"),
                HashAlg::Sha256 => Oaep::new_with_label::<sha2::Sha256, _>("IDENTITY\0"),
                HashAlg::Sha384 => Oaep::new_with_label::<sha2::Sha384, _>("IDENTITY\0"),
                HashAlg::Sha512 => Oaep::new_with_label::<sha2::Sha512, _>("IDENTITY\0"),
            };
            let mut rng = EntropyStream::new(entropy, "oaep");
            let encrypted = key
                .encrypt(&mut rng, padding, &seed)
                .map_err(|e| CredentialError::UnsupportedEk(format!("RSA-OAEP: {e}")))?;
            (seed, encrypted)
        }
        KeyDetail::Ecc { curve: curve_id, x, y, .. } => {
            let mut rng = EntropyStream::new(entropy, "ecdh");
            let (z, ephemeral_x, ephemeral_y) = ecdh(*curve_id, x, y, &mut rng)?;
            let size = curve_size(*curve_id).unwrap_or_default();
            let ek_x = left_pad(x, size).ok_or_else(|| CredentialError::UnsupportedEk("EK x too long".to_owned()))?;
            let seed = kdfe(name_alg, &z, "IDENTITY", &ephemeral_x, &ek_x, 8 * name_alg.size() as u32);
            let mut point = Vec::with_capacity(4 + 2 * size);
            point.extend((ephemeral_x.len() as u16).to_be_bytes());
            point.extend(&ephemeral_x);
            point.extend((ephemeral_y.len() as u16).to_be_bytes());
            point.extend(&ephemeral_y);
            (seed, point)
        }
    };
    let credential_blob = wrap_secret(name_alg, key_bits, &seed, object_name, secret)?;
    Ok(Credential { credential_blob, encrypted_secret })
}

/// The symmetric part: encIdentity and the outer HMAC, for a given seed.
pub fn wrap_secret(
    name_alg: HashAlg,
    sym_key_bits: u16,
    seed: &[u8],
    object_name: &[u8],
    secret: &[u8],
) -> Result<Vec<u8>, CredentialError> {
    let sym_key = kdfa(name_alg, seed, "STORAGE", object_name, &[], u32::from(sym_key_bits));
    let mut enc_identity = (secret.len() as u16).to_be_bytes().to_vec();
    enc_identity.extend_from_slice(secret);
    let iv = [0u8; 16];
    let bad_key = |_| CredentialError::UnsupportedEk("AES key length".to_owned());
    match sym_key_bits {
        128 => cfb_mode::Encryptor::<aes::Aes128>::new_from_slices(&sym_key, &iv)
            .map_err(bad_key)?
            .encrypt(&mut enc_identity),
        192 => cfb_mode::Encryptor::<aes::Aes192>::new_from_slices(&sym_key, &iv)
            .map_err(bad_key)?
            .encrypt(&mut enc_identity),
        256 => cfb_mode::Encryptor::<aes::Aes256>::new_from_slices(&sym_key, &iv)
            .map_err(bad_key)?
            .encrypt(&mut enc_identity),
        other => return Err(CredentialError::UnsupportedEk(format!("AES-{other}"))),
    }
    let hmac_key = kdfa(name_alg, seed, "INTEGRITY", &[], &[], 8 * name_alg.size() as u32);
    let outer_hmac = name_alg.hmac(&hmac_key, &[&enc_identity, object_name]);
    let mut blob = (outer_hmac.len() as u16).to_be_bytes().to_vec();
    blob.extend(outer_hmac);
    blob.extend(enc_identity);
    Ok(blob)
}

/// x(d·EK), x(d·G), y(d·G).
type SharedPoint = (Vec<u8>, Vec<u8>, Vec<u8>);

/// An ephemeral ECDH with the EK: (x(d·EK), x(d·G), y(d·G)), fixed width.
fn ecdh(curve_id: u16, x: &[u8], y: &[u8], rng: &mut EntropyStream<'_>) -> Result<SharedPoint, CredentialError> {
    let bad = |what: &str| CredentialError::UnsupportedEk(what.to_owned());
    match curve_id {
        curve::NIST_P256 => {
            use p256::elliptic_curve::sec1::{FromEncodedPoint, ToEncodedPoint};
            let (x, y) = (left_pad(x, 32).ok_or_else(|| bad("EK x"))?, left_pad(y, 32).ok_or_else(|| bad("EK y"))?);
            let point = p256::EncodedPoint::from_affine_coordinates(
                p256::FieldBytes::from_slice(&x),
                p256::FieldBytes::from_slice(&y),
                false,
            );
            let ek = Option::<p256::PublicKey>::from(p256::PublicKey::from_encoded_point(&point))
                .ok_or_else(|| bad("EK point not on P-256"))?;
            let d = p256::NonZeroScalar::random(rng);
            let shared = (ek.to_projective() * *d).to_affine().to_encoded_point(false);
            let ephemeral = (p256::ProjectivePoint::GENERATOR * *d).to_affine().to_encoded_point(false);
            coordinates(shared.x(), ephemeral.x(), ephemeral.y())
        }
        curve::NIST_P384 => {
            use p384::elliptic_curve::sec1::{FromEncodedPoint, ToEncodedPoint};
            let (x, y) = (left_pad(x, 48).ok_or_else(|| bad("EK x"))?, left_pad(y, 48).ok_or_else(|| bad("EK y"))?);
            let point = p384::EncodedPoint::from_affine_coordinates(
                p384::FieldBytes::from_slice(&x),
                p384::FieldBytes::from_slice(&y),
                false,
            );
            let ek = Option::<p384::PublicKey>::from(p384::PublicKey::from_encoded_point(&point))
                .ok_or_else(|| bad("EK point not on P-384"))?;
            let d = p384::NonZeroScalar::random(rng);
            let shared = (ek.to_projective() * *d).to_affine().to_encoded_point(false);
            let ephemeral = (p384::ProjectivePoint::GENERATOR * *d).to_affine().to_encoded_point(false);
            coordinates(shared.x(), ephemeral.x(), ephemeral.y())
        }
        other => Err(CredentialError::UnsupportedEk(format!("ECC curve 0x{other:04x}"))),
    }
}

fn coordinates<T: AsRef<[u8]>>(z: Option<T>, x: Option<T>, y: Option<T>) -> Result<SharedPoint, CredentialError> {
    match (z, x, y) {
        (Some(z), Some(x), Some(y)) => Ok((z.as_ref().to_vec(), x.as_ref().to_vec(), y.as_ref().to_vec())),
        _ => Err(CredentialError::UnsupportedEk("point at infinity".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::hex;

    /// KDFa against the TPM 2.0 reference (Part 1 §11.4.10.2) shape: counter ‖ label ‖ 00 ‖ U ‖
    /// V ‖ bits, computed here by hand for one block.
    #[test]
    fn kdfa_is_hmac_counter_mode() {
        let key = [7u8; 32];
        let manual = HashAlg::Sha256.hmac(&key, &[&[0, 0, 0, 1], b"STORAGE", &[0], b"name", &[], &[0, 0, 0, 128]]);
        assert_eq!(kdfa(HashAlg::Sha256, &key, "STORAGE", b"name", &[], 128), manual[..16].to_vec());
        let long = kdfa(HashAlg::Sha256, &key, "X", &[], &[], 384);
        assert_eq!(long.len(), 48);
        let first = HashAlg::Sha256.hmac(&key, &[&[0, 0, 0, 1], b"X", &[0], &[0, 0, 1, 128]]);
        assert_eq!(long[..32], first[..]);
    }

    #[test]
    fn kdfe_is_concatenation_kdf() {
        let manual = HashAlg::Sha256.digest(&[&[0, 0, 0, 1], b"z", b"IDENTITY", &[0], b"u", b"v"]);
        assert_eq!(kdfe(HashAlg::Sha256, b"z", "IDENTITY", b"u", b"v", 256), manual);
    }

    #[test]
    fn entropy_streams_are_deterministic_and_independent() {
        let entropy = [1u8; 64];
        let a = EntropyStream::new(&entropy, "seed").take(40);
        let b = EntropyStream::new(&entropy, "seed").take(40);
        let c = EntropyStream::new(&entropy, "oaep").take(40);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            hex(&a[..32]),
            hex(&HashAlg::Sha256.hmac(&entropy, &[b"trellis-tpm2-verifier/v1\0seed\0", &[0, 0, 0, 1]]))
        );
    }

    /// A TPMT_PUBLIC like the TCG default EK templates: restricted decryption, AES-128-CFB.
    fn ek_public(detail: &[u8], object_type: u16) -> TpmPublic {
        let mut b = object_type.to_be_bytes().to_vec();
        b.extend([0x00, 0x0b, 0x00, 0x03, 0x00, 0xb2, 0x00, 0x20]);
        b.extend([0x83; 32]);
        b.extend([0x00, 0x06, 0x00, 0x80, 0x00, 0x43]);
        b.extend(detail);
        TpmPublic::parse(&b).unwrap()
    }

    fn tpm2b(bytes: &[u8]) -> Vec<u8> {
        let mut out = (bytes.len() as u16).to_be_bytes().to_vec();
        out.extend(bytes);
        out
    }

    /// TPM2_ActivateCredential's symmetric part, in software: check the outer HMAC, decrypt.
    fn unwrap(seed: &[u8], name: &[u8], blob: &[u8]) -> Result<Vec<u8>, &'static str> {
        use aes::cipher::{AsyncStreamCipher, KeyIvInit};
        let hmac_len = usize::from(u16::from_be_bytes([blob[0], blob[1]]));
        let (hmac, enc_identity) = blob[2..].split_at(hmac_len);
        let hmac_key = kdfa(HashAlg::Sha256, seed, "INTEGRITY", &[], &[], 256);
        if HashAlg::Sha256.hmac(&hmac_key, &[enc_identity, name]) != hmac {
            return Err("integrity");
        }
        let key = kdfa(HashAlg::Sha256, seed, "STORAGE", name, &[], 128);
        let mut plain = enc_identity.to_vec();
        cfb_mode::Decryptor::<aes::Aes128>::new_from_slices(&key, &[0; 16]).unwrap().decrypt(&mut plain);
        let len = usize::from(u16::from_be_bytes([plain[0], plain[1]]));
        assert_eq!(plain.len(), 2 + len);
        Ok(plain[2..].to_vec())
    }

    const NAME: [u8; 34] = {
        let mut n = [0x22u8; 34];
        n[0] = 0x00;
        n[1] = 0x0b;
        n
    };

    fn p256_ek() -> (p256::NonZeroScalar, Vec<u8>, TpmPublic) {
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        let d = p256::NonZeroScalar::try_from([0x11u8; 32].as_slice()).unwrap();
        let q = (p256::ProjectivePoint::GENERATOR * *d).to_affine().to_encoded_point(false);
        let (x, y) = (q.x().unwrap().to_vec(), q.y().unwrap().to_vec());
        let mut detail = vec![0x00, 0x10, 0x00, 0x03, 0x00, 0x10];
        detail.extend(tpm2b(&x));
        detail.extend(tpm2b(&y));
        (d, x, ek_public(&detail, alg::ECC))
    }

    #[test]
    fn an_ecc_credential_activates_in_software_and_matches_its_known_answer() {
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        let (d, x, ek) = p256_ek();
        let secret = [0x5a; 32];
        let entropy: Vec<u8> = (0..64).collect();
        let c = make_credential(&ek, &NAME, &secret, &entropy).unwrap();

        // The TPM's side: Z = d·R, the seed by KDFe, then the symmetric unwrap.
        assert_eq!(&c.encrypted_secret[..2], &[0, 32]);
        let (rx, ry) = (&c.encrypted_secret[2..34], &c.encrypted_secret[36..68]);
        let r = p256::PublicKey::from_sec1_bytes(&[&[4u8][..], rx, ry].concat()).unwrap();
        let z = (r.to_projective() * *d).to_affine().to_encoded_point(false);
        let seed = kdfe(HashAlg::Sha256, z.x().unwrap(), "IDENTITY", rx, &x, 256);
        assert_eq!(unwrap(&seed, &NAME, &c.credential_blob), Ok(secret.to_vec()));
        let mut other = NAME;
        other[5] ^= 1;
        assert_eq!(unwrap(&seed, &other, &c.credential_blob), Err("integrity"));

        // Known answer, computed once: pins how every random value derives from the entropy.
        assert_eq!(hex(&c.encrypted_secret), "00207daad858264d43d077859bfc4f69df3b51da1530b76d8eabedb1f110573101fa0020ca4e4e915fc0190ef28da526d71bf476a5ce332d64aa7517f59fb113f851769c");
        assert_eq!(hex(&c.credential_blob), "0020e8c9703061fa63b92465bd9e4bafb0bd205143715b5ba1da5f4f46e997c72bf69e8a11b3e939726a057c26542b0b45debb3a748f4e63765d874ed3db8554a141975c");
    }

    #[test]
    fn an_rsa_credential_activates_in_software() {
        use rsa::traits::PublicKeyParts;
        let mut rng = EntropyStream::new(&[9u8; 64], "test key");
        let private = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
        let mut detail = vec![0x00, 0x10, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00];
        detail.extend(tpm2b(&private.n().to_bytes_be()));
        let ek = ek_public(&detail, alg::RSA);
        let secret = [0xa5; 20];
        let c = make_credential(&ek, &NAME, &secret, &[3u8; 64]).unwrap();
        assert_eq!(c.encrypted_secret.len(), 256);
        let seed = private.decrypt(Oaep::new_with_label::<sha2::Sha256, _>("IDENTITY\0"), &c.encrypted_secret).unwrap();
        assert_eq!(seed.len(), 32);
        assert_eq!(unwrap(&seed, &NAME, &c.credential_blob), Ok(secret.to_vec()));
        // The label is part of the binding.
        assert!(private.decrypt(Oaep::new_with_label::<sha2::Sha256, _>("IDENTITY"), &c.encrypted_secret).is_err());
    }

    #[test]
    fn unusable_eks_and_inputs_are_refused() {
        let (_, _, ek) = p256_ek();
        assert!(matches!(make_credential(&ek, &NAME, &[1; 33], &[0; 64]), Err(CredentialError::BadInput(_))));
        assert!(matches!(make_credential(&ek, &NAME, &[], &[0; 64]), Err(CredentialError::BadInput(_))));
        assert!(matches!(make_credential(&ek, &NAME, &[1; 32], &[0; 63]), Err(CredentialError::BadInput(_))));
        let mut signing = ek.clone();
        signing.attributes |= attr::SIGN;
        assert!(matches!(make_credential(&signing, &NAME, &[1; 32], &[0; 64]), Err(CredentialError::UnsupportedEk(_))));
        let mut off_curve = ek.clone();
        if let KeyDetail::Ecc { y, .. } = &mut off_curve.detail {
            y[31] ^= 1;
        }
        assert!(matches!(
            make_credential(&off_curve, &NAME, &[1; 32], &[0; 64]),
            Err(CredentialError::UnsupportedEk(_))
        ));
        let mut no_sym = ek;
        no_sym.symmetric = None;
        assert!(matches!(make_credential(&no_sym, &NAME, &[1; 32], &[0; 64]), Err(CredentialError::UnsupportedEk(_))));
    }
}
