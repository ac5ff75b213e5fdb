//! TPM 2.0 structures as the TPM marshals them (big-endian), parsed strictly: every length is
//! checked against its type's maximum, unions are read by their selector, unknown selectors are
//! refused, and the whole buffer must be consumed.

use digest::Digest;
use hmac::{Hmac, Mac};

use crate::wire::{ParseError, Reader};

/// TPM_GENERATED_VALUE: the first field of every TPMS_ATTEST the TPM produces.
pub const TPM_GENERATED_VALUE: u32 = 0xff54_4347;
/// TPM_ST_ATTEST_CERTIFY.
pub const TPM_ST_ATTEST_CERTIFY: u16 = 0x8017;
/// TPM_ST_ATTEST_QUOTE.
pub const TPM_ST_ATTEST_QUOTE: u16 = 0x8018;

/// TPM_ALG_ID values used here.
pub mod alg {
    pub const RSA: u16 = 0x0001;
    pub const SHA1: u16 = 0x0004;
    pub const HMAC: u16 = 0x0005;
    pub const AES: u16 = 0x0006;
    pub const MGF1: u16 = 0x0007;
    pub const KEYEDHASH: u16 = 0x0008;
    pub const XOR: u16 = 0x000a;
    pub const SHA256: u16 = 0x000b;
    pub const SHA384: u16 = 0x000c;
    pub const SHA512: u16 = 0x000d;
    pub const NULL: u16 = 0x0010;
    pub const SM3_256: u16 = 0x0012;
    pub const SM4: u16 = 0x0013;
    pub const RSASSA: u16 = 0x0014;
    pub const RSAES: u16 = 0x0015;
    pub const RSAPSS: u16 = 0x0016;
    pub const OAEP: u16 = 0x0017;
    pub const ECDSA: u16 = 0x0018;
    pub const ECDH: u16 = 0x0019;
    pub const ECDAA: u16 = 0x001a;
    pub const SM2: u16 = 0x001b;
    pub const ECSCHNORR: u16 = 0x001c;
    pub const ECMQV: u16 = 0x001d;
    pub const KDF1_SP800_56A: u16 = 0x0020;
    pub const KDF2: u16 = 0x0021;
    pub const KDF1_SP800_108: u16 = 0x0022;
    pub const ECC: u16 = 0x0023;
    pub const SYMCIPHER: u16 = 0x0025;
    pub const CAMELLIA: u16 = 0x0026;
    pub const CFB: u16 = 0x0043;

    /// A readable name for details.
    pub fn name(id: u16) -> String {
        let known = match id {
            RSA => "RSA",
            SHA1 => "SHA1",
            HMAC => "HMAC",
            AES => "AES",
            KEYEDHASH => "KEYEDHASH",
            SHA256 => "SHA256",
            SHA384 => "SHA384",
            SHA512 => "SHA512",
            NULL => "NULL",
            SM3_256 => "SM3_256",
            RSASSA => "RSASSA",
            RSAES => "RSAES",
            RSAPSS => "RSAPSS",
            OAEP => "OAEP",
            ECDSA => "ECDSA",
            ECDH => "ECDH",
            ECDAA => "ECDAA",
            SM2 => "SM2",
            ECSCHNORR => "ECSCHNORR",
            ECC => "ECC",
            CFB => "CFB",
            _ => return format!("0x{id:04x}"),
        };
        known.to_owned()
    }
}

/// TPM_ECC_CURVE values.
pub mod curve {
    pub const NIST_P256: u16 = 0x0003;
    pub const NIST_P384: u16 = 0x0004;
    pub const NIST_P521: u16 = 0x0005;
}

/// TPMA_OBJECT bits.
pub mod attr {
    pub const FIXED_TPM: u32 = 0x0000_0002;
    pub const ST_CLEAR: u32 = 0x0000_0004;
    pub const FIXED_PARENT: u32 = 0x0000_0010;
    pub const SENSITIVE_DATA_ORIGIN: u32 = 0x0000_0020;
    pub const USER_WITH_AUTH: u32 = 0x0000_0040;
    pub const ADMIN_WITH_POLICY: u32 = 0x0000_0080;
    pub const NO_DA: u32 = 0x0000_0400;
    pub const ENCRYPTED_DUPLICATION: u32 = 0x0000_0800;
    pub const RESTRICTED: u32 = 0x0001_0000;
    pub const DECRYPT: u32 = 0x0002_0000;
    pub const SIGN: u32 = 0x0004_0000;
}

/// Largest digest (SHA-512).
const MAX_DIGEST: usize = 64;
/// sizeof(TPMU_NAME): a TPMT_HA (2 + 64) or a handle.
const MAX_NAME: usize = 2 + MAX_DIGEST;
/// sizeof(TPMT_HA), the bound of TPM2B_DATA.
const MAX_DATA: usize = 2 + MAX_DIGEST;
/// Largest RSA modulus a TPM handles here (4096 bits).
const MAX_RSA_BYTES: usize = 512;
/// Largest ECC parameter (P-521 rounds to 66; allow the spec's 128).
const MAX_ECC_BYTES: usize = 128;
/// Largest PCR bitmap (sizeofSelect) accepted: PC Client TPMs have 24 PCRs (3 bytes).
const MAX_PCR_SELECT: usize = 4;
/// Banks a TPM can have at once (generous).
const MAX_BANKS: u32 = 16;
/// PCR indexes are 0..=23.
pub const PCR_COUNT: u32 = 24;

/// A hash the verifier can compute (signing schemes, names, KDFs, event-log replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HashAlg {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlg {
    /// From a TPM_ALG_ID.
    pub fn from_id(id: u16) -> Option<HashAlg> {
        match id {
            alg::SHA1 => Some(HashAlg::Sha1),
            alg::SHA256 => Some(HashAlg::Sha256),
            alg::SHA384 => Some(HashAlg::Sha384),
            alg::SHA512 => Some(HashAlg::Sha512),
            _ => None,
        }
    }

    /// Its TPM_ALG_ID.
    pub fn id(self) -> u16 {
        match self {
            HashAlg::Sha1 => alg::SHA1,
            HashAlg::Sha256 => alg::SHA256,
            HashAlg::Sha384 => alg::SHA384,
            HashAlg::Sha512 => alg::SHA512,
        }
    }

    /// Digest size in bytes.
    pub fn size(self) -> usize {
        match self {
            HashAlg::Sha1 => 20,
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
            HashAlg::Sha512 => 64,
        }
    }

    /// `SHA256` etc.
    pub fn name(self) -> &'static str {
        match self {
            HashAlg::Sha1 => "SHA1",
            HashAlg::Sha256 => "SHA256",
            HashAlg::Sha384 => "SHA384",
            HashAlg::Sha512 => "SHA512",
        }
    }

    /// H(parts[0] ‖ parts[1] ‖ …).
    pub fn digest(self, parts: &[&[u8]]) -> Vec<u8> {
        fn run<D: Digest>(parts: &[&[u8]]) -> Vec<u8> {
            let mut h = D::new();
            for p in parts {
                h.update(p);
            }
            h.finalize().to_vec()
        }
        match self {
            HashAlg::Sha1 => run::<sha1::Sha1>(parts),
            HashAlg::Sha256 => run::<sha2::Sha256>(parts),
            HashAlg::Sha384 => run::<sha2::Sha384>(parts),
            HashAlg::Sha512 => run::<sha2::Sha512>(parts),
        }
    }

    /// HMAC_H(key, parts[0] ‖ parts[1] ‖ …).
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC accepts keys of any length, so this never fails.
            match <M as hmac::digest::KeyInit>::new_from_slice(key) {
                Ok(mut mac) => {
                    for p in parts {
                        mac.update(p);
                    }
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        }
        match self {
            HashAlg::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts),
            HashAlg::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
            HashAlg::Sha384 => run::<Hmac<sha2::Sha384>>(key, parts),
            HashAlg::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts),
        }
    }
}

/// A PCR bank (its values can be checked even when the verifier cannot compute its hash).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bank {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
    Sm3_256,
}

impl Bank {
    /// From a TPM_ALG_ID.
    pub fn from_id(id: u16) -> Option<Bank> {
        match id {
            alg::SHA1 => Some(Bank::Sha1),
            alg::SHA256 => Some(Bank::Sha256),
            alg::SHA384 => Some(Bank::Sha384),
            alg::SHA512 => Some(Bank::Sha512),
            alg::SM3_256 => Some(Bank::Sm3_256),
            _ => None,
        }
    }

    /// From the policy's and the contract's names (`SHA256`; case and a dash ignored).
    pub fn from_name(name: &str) -> Option<Bank> {
        let normalised: String = name.chars().filter(|c| *c != '-').collect::<String>().to_ascii_uppercase();
        match normalised.as_str() {
            "SHA1" => Some(Bank::Sha1),
            "SHA256" => Some(Bank::Sha256),
            "SHA384" => Some(Bank::Sha384),
            "SHA512" => Some(Bank::Sha512),
            "SM3_256" | "SM3256" => Some(Bank::Sm3_256),
            _ => None,
        }
    }

    /// Its TPM_ALG_ID.
    pub fn id(self) -> u16 {
        match self {
            Bank::Sha1 => alg::SHA1,
            Bank::Sha256 => alg::SHA256,
            Bank::Sha384 => alg::SHA384,
            Bank::Sha512 => alg::SHA512,
            Bank::Sm3_256 => alg::SM3_256,
        }
    }

    /// The contract's name.
    pub fn name(self) -> &'static str {
        match self {
            Bank::Sha1 => "SHA1",
            Bank::Sha256 => "SHA256",
            Bank::Sha384 => "SHA384",
            Bank::Sha512 => "SHA512",
            Bank::Sm3_256 => "SM3_256",
        }
    }

    /// A register's size in bytes.
    pub fn size(self) -> usize {
        match self {
            Bank::Sha1 => 20,
            Bank::Sha256 | Bank::Sm3_256 => 32,
            Bank::Sha384 => 48,
            Bank::Sha512 => 64,
        }
    }

    /// The hash, when the verifier can compute it (not SM3).
    pub fn hash(self) -> Option<HashAlg> {
        HashAlg::from_id(self.id())
    }
}

/// TPMT_SYM_DEF_OBJECT (not NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymDef {
    pub algorithm: u16,
    pub key_bits: u16,
    pub mode: u16,
}

/// A signing/encryption scheme: TPMT_RSA_SCHEME or TPMT_ECC_SCHEME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    /// The scheme's TPM_ALG_ID (NULL when none).
    pub scheme: u16,
    /// Its hash, when the scheme has one.
    pub hash: Option<u16>,
}

/// The key-type specific part of TPMT_PUBLIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDetail {
    Rsa {
        key_bits: u16,
        /// The public exponent; 0 in the structure means 65537, reported here as 65537.
        exponent: u32,
        /// The modulus, big-endian, as marshalled.
        modulus: Vec<u8>,
    },
    Ecc {
        curve: u16,
        kdf: Scheme,
        x: Vec<u8>,
        y: Vec<u8>,
    },
}

/// A parsed TPMT_PUBLIC, with the bytes it was parsed from (its Name hashes those).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmPublic {
    pub raw: Vec<u8>,
    pub object_type: u16,
    /// The nameAlg, when the verifier can compute it.
    pub name_alg: HashAlg,
    pub attributes: u32,
    pub auth_policy: Vec<u8>,
    /// `None` when the symmetric algorithm is TPM_ALG_NULL.
    pub symmetric: Option<SymDef>,
    pub scheme: Scheme,
    pub detail: KeyDetail,
}

impl TpmPublic {
    /// Parses a TPMT_PUBLIC (no TPM2B size prefix), consuming every byte.
    pub fn parse(bytes: &[u8]) -> Result<TpmPublic, ParseError> {
        let mut r = Reader::new(bytes);
        let object_type = r.u16("type")?;
        if object_type != alg::RSA && object_type != alg::ECC {
            return Err(ParseError::new(format!(
                "type {}: only RSA and ECC keys are supported",
                alg::name(object_type)
            )));
        }
        let name_alg_id = r.u16("nameAlg")?;
        let name_alg = HashAlg::from_id(name_alg_id)
            .ok_or_else(|| ParseError::new(format!("nameAlg {} unsupported", alg::name(name_alg_id))))?;
        let attributes = r.u32("objectAttributes")?;
        let auth_policy = r.tpm2b(MAX_DIGEST, "authPolicy")?.to_vec();
        let symmetric = read_sym_def_object(&mut r)?;
        let (scheme, detail) = if object_type == alg::RSA {
            let scheme = read_rsa_scheme(&mut r)?;
            let key_bits = r.u16("keyBits")?;
            let exponent = match r.u32("exponent")? {
                0 => 65537,
                e => e,
            };
            let modulus = r.tpm2b(MAX_RSA_BYTES, "unique.rsa")?.to_vec();
            (scheme, KeyDetail::Rsa { key_bits, exponent, modulus })
        } else {
            let scheme = read_ecc_scheme(&mut r)?;
            let curve = r.u16("curveID")?;
            let kdf = read_kdf_scheme(&mut r)?;
            let x = r.tpm2b(MAX_ECC_BYTES, "unique.ecc.x")?.to_vec();
            let y = r.tpm2b(MAX_ECC_BYTES, "unique.ecc.y")?.to_vec();
            (scheme, KeyDetail::Ecc { curve, kdf, x, y })
        };
        r.finish("TPMT_PUBLIC")?;
        Ok(TpmPublic { raw: bytes.to_vec(), object_type, name_alg, attributes, auth_policy, symmetric, scheme, detail })
    }

    /// The object's Name: nameAlg (u16) ‖ H_nameAlg(TPMT_PUBLIC as received).
    pub fn name(&self) -> Vec<u8> {
        let mut name = self.name_alg.id().to_be_bytes().to_vec();
        name.extend(self.name_alg.digest(&[&self.raw]));
        name
    }

    /// Whether every bit of `bits` is set.
    pub fn has(&self, bits: u32) -> bool {
        self.attributes & bits == bits
    }
}

fn read_sym_def_object(r: &mut Reader<'_>) -> Result<Option<SymDef>, ParseError> {
    let algorithm = r.u16("symmetric.algorithm")?;
    match algorithm {
        alg::NULL => Ok(None),
        alg::AES | alg::SM4 | alg::CAMELLIA => {
            let key_bits = r.u16("symmetric.keyBits")?;
            let mode = r.u16("symmetric.mode")?;
            Ok(Some(SymDef { algorithm, key_bits, mode }))
        }
        other => Err(ParseError::new(format!("symmetric algorithm {} unsupported", alg::name(other)))),
    }
}

fn read_rsa_scheme(r: &mut Reader<'_>) -> Result<Scheme, ParseError> {
    let scheme = r.u16("scheme")?;
    match scheme {
        alg::NULL | alg::RSAES => Ok(Scheme { scheme, hash: None }),
        alg::RSASSA | alg::RSAPSS | alg::OAEP => Ok(Scheme { scheme, hash: Some(r.u16("scheme.hashAlg")?) }),
        other => Err(ParseError::new(format!("RSA scheme {} unsupported", alg::name(other)))),
    }
}

fn read_ecc_scheme(r: &mut Reader<'_>) -> Result<Scheme, ParseError> {
    let scheme = r.u16("scheme")?;
    match scheme {
        alg::NULL => Ok(Scheme { scheme, hash: None }),
        alg::ECDSA | alg::ECDH | alg::SM2 | alg::ECSCHNORR | alg::ECMQV => {
            Ok(Scheme { scheme, hash: Some(r.u16("scheme.hashAlg")?) })
        }
        alg::ECDAA => {
            let hash = r.u16("scheme.hashAlg")?;
            r.u16("scheme.count")?;
            Ok(Scheme { scheme, hash: Some(hash) })
        }
        other => Err(ParseError::new(format!("ECC scheme {} unsupported", alg::name(other)))),
    }
}

fn read_kdf_scheme(r: &mut Reader<'_>) -> Result<Scheme, ParseError> {
    let scheme = r.u16("kdf")?;
    match scheme {
        alg::NULL => Ok(Scheme { scheme, hash: None }),
        alg::MGF1 | alg::KDF1_SP800_56A | alg::KDF2 | alg::KDF1_SP800_108 => {
            Ok(Scheme { scheme, hash: Some(r.u16("kdf.hashAlg")?) })
        }
        other => Err(ParseError::new(format!("KDF scheme {} unsupported", alg::name(other)))),
    }
}

/// TPML_PCR_SELECTION: banks in the order the TPM listed them, each with its selected indexes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PcrSelection {
    pub banks: Vec<(Bank, Vec<u32>)>,
}

impl PcrSelection {
    /// Reads a TPML_PCR_SELECTION: at most 16 banks, each a known bank at most once, bitmaps of
    /// at most 4 bytes, no PCR above 23.
    pub fn read(r: &mut Reader<'_>) -> Result<PcrSelection, ParseError> {
        let count = r.u32("pcrSelect.count")?;
        if count > MAX_BANKS {
            return Err(ParseError::new(format!("pcrSelect.count {count} exceeds {MAX_BANKS}")));
        }
        let mut banks: Vec<(Bank, Vec<u32>)> = Vec::new();
        for _ in 0..count {
            let hash = r.u16("pcrSelect.hash")?;
            let bank = Bank::from_id(hash)
                .ok_or_else(|| ParseError::new(format!("pcrSelect: unknown bank {}", alg::name(hash))))?;
            if banks.iter().any(|(b, _)| *b == bank) {
                return Err(ParseError::new(format!("pcrSelect: bank {} listed twice", bank.name())));
            }
            let size = usize::from(r.u8("pcrSelect.sizeofSelect")?);
            if size > MAX_PCR_SELECT {
                return Err(ParseError::new(format!("pcrSelect.sizeofSelect {size} exceeds {MAX_PCR_SELECT}")));
            }
            let bitmap = r.bytes(size, "pcrSelect.pcrSelect")?;
            let mut indexes = Vec::new();
            for (byte_index, byte) in (0u32..).zip(bitmap) {
                for bit in 0..8u32 {
                    if byte & (1 << bit) != 0 {
                        let index = byte_index * 8 + bit;
                        if index >= PCR_COUNT {
                            return Err(ParseError::new(format!("pcrSelect: PCR {index} out of range")));
                        }
                        indexes.push(index);
                    }
                }
            }
            banks.push((bank, indexes));
        }
        Ok(PcrSelection { banks })
    }

    /// Parses a whole buffer holding one TPML_PCR_SELECTION.
    pub fn parse(bytes: &[u8]) -> Result<PcrSelection, ParseError> {
        let mut r = Reader::new(bytes);
        let selection = PcrSelection::read(&mut r)?;
        r.finish("TPML_PCR_SELECTION")?;
        Ok(selection)
    }

    /// The selected indexes of `bank` (empty when absent).
    pub fn indexes(&self, bank: Bank) -> &[u32] {
        self.banks.iter().find(|(b, _)| *b == bank).map(|(_, i)| i.as_slice()).unwrap_or(&[])
    }

    /// Every (bank, index) selected, in composite order.
    pub fn pairs(&self) -> impl Iterator<Item = (Bank, u32)> + '_ {
        self.banks.iter().flat_map(|(bank, indexes)| indexes.iter().map(move |i| (*bank, *i)))
    }
}

/// TPMS_CLOCK_INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockInfo {
    pub clock: u64,
    pub reset_count: u32,
    pub restart_count: u32,
    pub safe: bool,
}

/// The attested part of a TPMS_ATTEST, for the two types the verifier accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attested {
    /// TPMS_QUOTE_INFO.
    Quote { selection: PcrSelection, pcr_digest: Vec<u8> },
    /// TPMS_CERTIFY_INFO.
    Certify { name: Vec<u8>, qualified_name: Vec<u8> },
}

/// A parsed TPMS_ATTEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attest {
    pub attest_type: u16,
    pub qualified_signer: Vec<u8>,
    pub extra_data: Vec<u8>,
    pub clock_info: ClockInfo,
    pub firmware_version: u64,
    pub attested: Attested,
}

/// Why a TPMS_ATTEST was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttestError {
    /// Not TPM_GENERATED_VALUE: not produced by a TPM's attestation command.
    Magic(u32),
    /// Another attestation type than the one expected.
    Type(u16),
    /// Truncated, oversized, trailing bytes, a bad union selector.
    Malformed(ParseError),
}

impl From<ParseError> for AttestError {
    fn from(e: ParseError) -> AttestError {
        AttestError::Malformed(e)
    }
}

impl Attest {
    /// Parses a TPMS_ATTEST (no TPM2B size prefix) that must be of `expected_type`
    /// ([`TPM_ST_ATTEST_QUOTE`] or [`TPM_ST_ATTEST_CERTIFY`]): the magic first, then the type,
    /// then the rest, consuming every byte.
    pub fn parse(bytes: &[u8], expected_type: u16) -> Result<Attest, AttestError> {
        let mut r = Reader::new(bytes);
        let magic = r.u32("magic")?;
        if magic != TPM_GENERATED_VALUE {
            return Err(AttestError::Magic(magic));
        }
        let attest_type = r.u16("type")?;
        if attest_type != expected_type {
            return Err(AttestError::Type(attest_type));
        }
        let qualified_signer = r.tpm2b(MAX_NAME, "qualifiedSigner")?.to_vec();
        let extra_data = r.tpm2b(MAX_DATA, "extraData")?.to_vec();
        let clock = r.u64("clockInfo.clock")?;
        let reset_count = r.u32("clockInfo.resetCount")?;
        let restart_count = r.u32("clockInfo.restartCount")?;
        let safe = match r.u8("clockInfo.safe")? {
            0 => false,
            1 => true,
            other => return Err(ParseError::new(format!("clockInfo.safe {other} is not a TPMI_YES_NO")).into()),
        };
        let firmware_version = r.u64("firmwareVersion")?;
        let attested = match attest_type {
            TPM_ST_ATTEST_QUOTE => {
                let selection = PcrSelection::read(&mut r)?;
                let pcr_digest = r.tpm2b(MAX_DIGEST, "pcrDigest")?.to_vec();
                Attested::Quote { selection, pcr_digest }
            }
            TPM_ST_ATTEST_CERTIFY => {
                let name = r.tpm2b(MAX_NAME, "certifyInfo.name")?.to_vec();
                let qualified_name = r.tpm2b(MAX_NAME, "certifyInfo.qualifiedName")?.to_vec();
                Attested::Certify { name, qualified_name }
            }
            other => return Err(AttestError::Type(other)),
        };
        r.finish("TPMS_ATTEST")?;
        Ok(Attest {
            attest_type,
            qualified_signer,
            extra_data,
            clock_info: ClockInfo { clock, reset_count, restart_count, safe },
            firmware_version,
            attested,
        })
    }
}

/// A parsed TPMT_SIGNATURE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    /// TPMS_SIGNATURE_RSA under RSASSA or RSAPSS.
    Rsa { scheme: u16, hash: u16, signature: Vec<u8> },
    /// TPMS_SIGNATURE_ECC under ECDSA.
    Ecdsa { hash: u16, r: Vec<u8>, s: Vec<u8> },
}

/// Why a TPMT_SIGNATURE was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureError {
    /// A signature algorithm this verifier does not accept at all (ECDAA, SM2, Schnorr, HMAC,
    /// NULL…).
    Unsupported(u16),
    /// Truncated, oversized or trailing bytes.
    Malformed(ParseError),
}

impl From<ParseError> for SignatureError {
    fn from(e: ParseError) -> SignatureError {
        SignatureError::Malformed(e)
    }
}

impl Signature {
    /// Parses a TPMT_SIGNATURE (RSASSA, RSAPSS or ECDSA), consuming every byte.
    pub fn parse(bytes: &[u8]) -> Result<Signature, SignatureError> {
        let mut r = Reader::new(bytes);
        let sig_alg = r.u16("sigAlg")?;
        let signature = match sig_alg {
            alg::RSASSA | alg::RSAPSS => {
                let hash = r.u16("signature.hash")?;
                let signature = r.tpm2b(MAX_RSA_BYTES, "signature.sig")?.to_vec();
                Signature::Rsa { scheme: sig_alg, hash, signature }
            }
            alg::ECDSA => {
                let hash = r.u16("signature.hash")?;
                let sr = r.tpm2b(MAX_ECC_BYTES, "signature.signatureR")?.to_vec();
                let ss = r.tpm2b(MAX_ECC_BYTES, "signature.signatureS")?.to_vec();
                Signature::Ecdsa { hash, r: sr, s: ss }
            }
            other => return Err(SignatureError::Unsupported(other)),
        };
        r.finish("TPMT_SIGNATURE")?;
        Ok(signature)
    }

    /// (sigAlg, hashAlg).
    pub fn scheme(&self) -> (u16, u16) {
        match self {
            Signature::Rsa { scheme, hash, .. } => (*scheme, *hash),
            Signature::Ecdsa { hash, .. } => (alg::ECDSA, *hash),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_are_read_in_order_and_refuse_duplicates_and_out_of_range() {
        let sel = PcrSelection::parse(&[0, 0, 0, 2, 0, 4, 3, 0x81, 0, 0, 0, 0x0b, 3, 0x9f, 0, 0x80]).unwrap();
        assert_eq!(sel.banks, vec![(Bank::Sha1, vec![0, 7]), (Bank::Sha256, vec![0, 1, 2, 3, 4, 7, 23])]);
        assert!(PcrSelection::parse(&[0, 0, 0, 2, 0, 4, 3, 1, 0, 0, 0, 4, 3, 1, 0, 0]).is_err());
        assert!(PcrSelection::parse(&[0, 0, 0, 1, 0, 4, 4, 0, 0, 0, 1]).is_err());
        assert!(PcrSelection::parse(&[0, 0, 0, 1, 0, 4, 5, 0, 0, 0, 0, 0]).is_err());
        assert!(PcrSelection::parse(&[0, 0, 0, 1, 0, 0x99, 3, 0, 0, 0]).is_err());
        assert!(PcrSelection::parse(&[0, 0, 0, 1, 0, 4, 3, 0, 0, 0, 0]).is_err());
        assert!(PcrSelection::parse(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn attest_checks_magic_before_type_before_body() {
        assert_eq!(Attest::parse(&[0, 0, 0, 0, 0x80, 0x18], TPM_ST_ATTEST_QUOTE), Err(AttestError::Magic(0)));
        assert_eq!(
            Attest::parse(&[0xff, 0x54, 0x43, 0x47, 0x80, 0x17], TPM_ST_ATTEST_QUOTE),
            Err(AttestError::Type(0x8017))
        );
        assert!(matches!(
            Attest::parse(&[0xff, 0x54, 0x43, 0x47, 0x80, 0x18], TPM_ST_ATTEST_QUOTE),
            Err(AttestError::Malformed(_))
        ));
    }

    #[test]
    fn signatures_of_other_algorithms_are_unsupported() {
        assert_eq!(Signature::parse(&[0, 0x1a, 0, 0x0b]), Err(SignatureError::Unsupported(alg::ECDAA)));
        assert!(matches!(Signature::parse(&[0, 0x14, 0, 0x0b, 0, 1]), Err(SignatureError::Malformed(_))));
        assert_eq!(
            Signature::parse(&[0, 0x14, 0, 0x0b, 0, 1, 7]),
            Ok(Signature::Rsa { scheme: alg::RSASSA, hash: alg::SHA256, signature: vec![7] })
        );
    }
}
