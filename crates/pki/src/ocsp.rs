//! OCSP (RFC 6960) for the internal CAs: requests parsed, responses signed by the CA key itself
//! (no delegated responder certificate). Pure functions: the HTTP layer takes the request off
//! the wire ([`parse_request`] for a POST body, [`parse_get_request`] for the GET path), checks
//! every [`CertId`] names the CA it serves ([`OcspIssuer::matches`]; [`error_response`] with
//! [`OcspErrorStatus::Unauthorized`] otherwise), looks the serials up ([`CertId::serial_hex`])
//! and answers with [`sign_response`].
//!
//! Requests are DER as RFC 6960 requires, at most [`MAX_REQUEST_BYTES`] and [`MAX_CERT_IDS`]
//! certificates; a request signature is accepted but never verified. Unsupported critical
//! extensions are refused (§4.4), others ignored.

use std::time::Duration;

use base64::Engine;
use der::asn1::{AnyRef, ContextSpecific, GeneralizedTime, ObjectIdentifier, OctetStringRef};
use der::{Decode, Encode, Header, Reader, SliceReader, Tag, TagNumber, Tagged};
use ring::rand::SystemRandom;
use ring::{digest, signature as sig};

use crate::authority::Signer;
use crate::vocabulary::RevocationReason;
use crate::PkiError;

/// The largest request accepted, DER octets (a GET path: 4/3 of it in base64, thrice that escaped).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// The most certificates one request may ask about.
pub const MAX_CERT_IDS: usize = 20;
/// The longest nonce accepted and echoed (RFC 9654: 1 to 128 octets).
pub const MAX_NONCE_BYTES: usize = 128;

const ID_PKIX_OCSP_BASIC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.1");
const ID_PKIX_OCSP_NONCE: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.2");
const ID_SHA1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.14.3.2.26");
const ID_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
const ID_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.2");
const ID_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.3");

/// The hash a [`CertId`] names its issuer by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlgorithm {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlgorithm {
    fn oid(self) -> ObjectIdentifier {
        match self {
            HashAlgorithm::Sha1 => ID_SHA1,
            HashAlgorithm::Sha256 => ID_SHA256,
            HashAlgorithm::Sha384 => ID_SHA384,
            HashAlgorithm::Sha512 => ID_SHA512,
        }
    }

    fn from_oid(oid: &ObjectIdentifier) -> Option<HashAlgorithm> {
        [HashAlgorithm::Sha1, HashAlgorithm::Sha256, HashAlgorithm::Sha384, HashAlgorithm::Sha512]
            .into_iter()
            .find(|algorithm| algorithm.oid() == *oid)
    }

    fn ring(self) -> &'static digest::Algorithm {
        match self {
            HashAlgorithm::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            HashAlgorithm::Sha256 => &digest::SHA256,
            HashAlgorithm::Sha384 => &digest::SHA384,
            HashAlgorithm::Sha512 => &digest::SHA512,
        }
    }

    /// The digest of `data`.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.ring(), data).as_ref().to_vec()
    }

    /// Octets of a digest.
    pub fn output_len(self) -> usize {
        self.ring().output_len()
    }
}

/// RFC 6960 CertID: which certificate a request asks about, named by its issuer's hashes and its
/// serial number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CertId {
    pub hash_algorithm: HashAlgorithm,
    /// Hash of the DER of the issuer's subject Name.
    pub issuer_name_hash: Vec<u8>,
    /// Hash of the issuer's subjectPublicKey BIT STRING value (no tag, length or unused-bits octet).
    pub issuer_key_hash: Vec<u8>,
    /// The INTEGER's content octets as the request carried them (a leading zero octet included).
    pub serial_number: Vec<u8>,
}

impl CertId {
    /// The serial as the ledger keys it ([`crate::Signed::serial_number`]): lowercase hex of the
    /// content octets, so a serial with its top bit set keeps its leading `00`.
    pub fn serial_hex(&self) -> String {
        hex::encode(&self.serial_number)
    }

    fn to_der(&self) -> Result<Vec<u8>, PkiError> {
        if self.serial_number.is_empty() {
            return Err(PkiError::InvalidProfile("a CertID's serial number has at least one octet".into()));
        }
        seq(&[
            &seq(&[&oid(self.hash_algorithm.oid())?, &tlv(Tag::Null, &[])?])?,
            &octet_string(&self.issuer_name_hash)?,
            &octet_string(&self.issuer_key_hash)?,
            &tlv(Tag::Integer, &[&self.serial_number])?,
        ])
    }
}

/// A parsed OCSP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OcspRequest {
    /// One to [`MAX_CERT_IDS`] certificates, in request order.
    pub cert_ids: Vec<CertId>,
    /// The id-pkix-ocsp-nonce value (the OCTET STRING's content, 1 to [`MAX_NONCE_BYTES`]
    /// octets), to pass back to [`sign_response`].
    pub nonce: Option<Vec<u8>>,
}

/// Where a certificate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertStatus {
    Good,
    /// `at` in seconds since the epoch. The reason is written as its RFC 5280 CRLReason, and
    /// left out when absent or unspecified, as the CRL does.
    Revoked {
        at: i64,
        reason: Option<RevocationReason>,
    },
    /// The CA does not know the serial.
    Unknown,
}

/// The answer for one [`CertId`] of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleStatus {
    /// Echoed as the request named it.
    pub cert_id: CertId,
    pub status: CertStatus,
    /// When the status was known correct (usually now), seconds since the epoch.
    pub this_update: i64,
    /// When newer information will be available (e.g. now + the responder's validity window);
    /// `None` says it always may be.
    pub next_update: Option<i64>,
}

/// The unsuccessful OCSPResponseStatus values a responder sends ([`error_response`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OcspErrorStatus {
    /// The request does not parse or breaks a rule ([`OcspError::status`]).
    MalformedRequest,
    /// The responder failed (storage, key).
    InternalError,
    /// The responder cannot answer now; try again later.
    TryLater,
    /// The request names a CA this responder does not serve.
    Unauthorized,
}

impl OcspErrorStatus {
    /// The RFC 6960 OCSPResponseStatus code.
    pub fn code(self) -> u8 {
        match self {
            OcspErrorStatus::MalformedRequest => 1,
            OcspErrorStatus::InternalError => 2,
            OcspErrorStatus::TryLater => 3,
            OcspErrorStatus::Unauthorized => 6,
        }
    }
}

/// Why a request was refused. Every variant is answered with
/// [`OcspErrorStatus::MalformedRequest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OcspError {
    #[error("an OCSP request is at most {MAX_REQUEST_BYTES} bytes")]
    TooLarge,
    #[error("the OCSP request is not a DER OCSPRequest: {0}")]
    Malformed(String),
    #[error("the OCSP request names no certificate")]
    NoCertificate,
    #[error("the OCSP request names {0} certificates; at most {MAX_CERT_IDS} are answered at once")]
    TooManyCertificates(usize),
    #[error("hash algorithm {0} is not supported (SHA-1, SHA-256, SHA-384, SHA-512)")]
    UnsupportedHashAlgorithm(String),
    #[error("the nonce must be a DER OCTET STRING of 1 to {MAX_NONCE_BYTES} octets")]
    InvalidNonce,
    #[error("critical extension {0} is not supported")]
    UnsupportedCriticalExtension(String),
}

impl OcspError {
    /// What the responder answers ([`error_response`]).
    pub fn status(&self) -> OcspErrorStatus {
        OcspErrorStatus::MalformedRequest
    }
}

impl From<der::Error> for OcspError {
    fn from(err: der::Error) -> Self {
        OcspError::Malformed(err.to_string())
    }
}

/// A CA as CertIDs name it: the DER of its subject Name and its subjectPublicKey bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OcspIssuer {
    name_der: Vec<u8>,
    public_key: Vec<u8>,
}

impl OcspIssuer {
    /// From the CA's certificate (DER), as relying parties hold it.
    pub fn from_certificate(certificate_der: &[u8]) -> Result<OcspIssuer, PkiError> {
        let (_, cert) =
            x509_parser::parse_x509_certificate(certificate_der).map_err(|_| PkiError::InvalidCertificate)?;
        Ok(OcspIssuer {
            name_der: cert.subject().as_raw().to_vec(),
            public_key: cert.public_key().subject_public_key.data.to_vec(),
        })
    }

    /// From a prepared CA: its name as it writes it into the issuer field of what it signs.
    pub fn from_signer(signer: &Signer) -> Result<OcspIssuer, PkiError> {
        let certificate = OcspIssuer::from_certificate(signer.issuer.der())?;
        Ok(OcspIssuer { public_key: signer.key.public_key_raw().to_vec(), ..certificate })
    }

    /// Whether `id` names this CA (both hashes, with the CertID's algorithm).
    pub fn matches(&self, id: &CertId) -> bool {
        let algorithm = id.hash_algorithm;
        id.issuer_key_hash == algorithm.digest(&self.public_key)
            && id.issuer_name_hash == algorithm.digest(&self.name_der)
    }

    /// The CertID of this CA's certificate with `serial_number` (content octets).
    pub fn cert_id(&self, hash_algorithm: HashAlgorithm, serial_number: &[u8]) -> CertId {
        CertId {
            hash_algorithm,
            issuer_name_hash: hash_algorithm.digest(&self.name_der),
            issuer_key_hash: hash_algorithm.digest(&self.public_key),
            serial_number: serial_number.to_vec(),
        }
    }
}

/// An OCSPRequest (DER, a POST body).
pub fn parse_request(der: &[u8]) -> Result<OcspRequest, OcspError> {
    if der.len() > MAX_REQUEST_BYTES {
        return Err(OcspError::TooLarge);
    }
    let raw = read_request(der)?;
    if raw.version.is_some_and(|version| version != 0) {
        return Err(OcspError::Malformed("only OCSP version 1 is supported".into()));
    }
    match raw.requests.len() {
        0 => return Err(OcspError::NoCertificate),
        n if n > MAX_CERT_IDS => return Err(OcspError::TooManyCertificates(n)),
        _ => {}
    }
    let mut cert_ids = Vec::with_capacity(raw.requests.len());
    for request in raw.requests {
        refuse_critical(&request.extensions, &[])?;
        cert_ids.push(cert_id(request)?);
    }
    refuse_critical(&raw.extensions, &[ID_PKIX_OCSP_NONCE])?;
    let mut nonces = raw.extensions.iter().filter(|extension| extension.id == ID_PKIX_OCSP_NONCE);
    let nonce = match (nonces.next(), nonces.next()) {
        (None, _) => None,
        (Some(extension), None) => Some(nonce(extension.value)?),
        (Some(_), Some(_)) => return Err(OcspError::Malformed("the nonce extension appears twice".into())),
    };
    Ok(OcspRequest { cert_ids, nonce })
}

/// An OCSPRequest from the path of a GET (RFC 6960 appendix A.1: the URL-encoded base64 of the
/// DER request, after the responder's URL). Percent-escapes are decoded here (decoding twice is
/// harmless: base64 has no `%`); padding may be omitted.
pub fn parse_get_request(encoded: &str) -> Result<OcspRequest, OcspError> {
    // Every request octet is 4/3 base64 characters, each at most a three-character escape.
    if encoded.len() > MAX_REQUEST_BYTES.div_ceil(3) * 4 * 3 {
        return Err(OcspError::TooLarge);
    }
    let base64 = percent_decode(encoded).ok_or_else(|| OcspError::Malformed("a bad percent-escape".into()))?;
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let der = engine.decode(base64).map_err(|err| OcspError::Malformed(format!("not base64: {err}")))?;
    parse_request(&der)
}

fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let hex = bytes.get(i + 1..i + 3).filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    Some(out)
}

/// An unsuccessful OCSPResponse: just the status, unsigned (RFC 6960 §4.2.1).
pub fn error_response(status: OcspErrorStatus) -> Vec<u8> {
    vec![0x30, 0x03, 0x0a, 0x01, status.code()]
}

/// A successful OCSPResponse: a BasicOCSPResponse answering `responses` (in that order), produced
/// at `produced_at` (seconds since the epoch), echoing `nonce` (a request's
/// [`OcspRequest::nonce`]), signed by the CA key and naming it by key hash (SHA-1 of its public
/// key). Every CertID must carry this CA's key hash: a CA never vouches for another's
/// certificates ([`OcspIssuer::matches`] checks both hashes first).
///
/// Each call loads the key for one signature (a PKCS#8 parse on top of the signature itself).
pub fn sign_response(
    signer: &Signer,
    responses: &[SingleStatus],
    produced_at: i64,
    nonce: Option<&[u8]>,
) -> Result<Vec<u8>, PkiError> {
    if responses.is_empty() {
        return Err(PkiError::InvalidProfile("an OCSP response answers at least one CertID".into()));
    }
    if nonce.is_some_and(|nonce| nonce.is_empty() || nonce.len() > MAX_NONCE_BYTES) {
        return Err(PkiError::InvalidProfile(format!("a nonce is 1 to {MAX_NONCE_BYTES} octets")));
    }
    let public_key = signer.key.public_key_raw();
    let mut singles = Vec::with_capacity(responses.len());
    for response in responses {
        let id = &response.cert_id;
        if id.issuer_key_hash != id.hash_algorithm.digest(public_key) {
            return Err(PkiError::InvalidProfile(format!(
                "CertID of serial {} names another CA's key; answer it unauthorized",
                id.serial_hex()
            )));
        }
        if response.next_update.is_some_and(|next| next <= response.this_update) {
            return Err(PkiError::InvalidProfile("nextUpdate must follow thisUpdate".into()));
        }
        singles.push(single_response(response)?);
    }
    let singles: Vec<&[u8]> = singles.iter().map(Vec::as_slice).collect();
    let extensions = match nonce {
        Some(nonce) => {
            let extension = seq(&[&oid(ID_PKIX_OCSP_NONCE)?, &octet_string(&octet_string(nonce)?)?])?;
            explicit(1, &seq(&[&extension])?)?
        }
        None => Vec::new(),
    };
    let responder_id = explicit(2, &octet_string(&HashAlgorithm::Sha1.digest(public_key))?)?;
    let tbs = seq(&[&responder_id, &time(produced_at)?, &seq(&singles)?, &extensions])?;
    let (algorithm, signature) = sign(signer, &tbs)?;
    let basic = seq(&[&tbs, algorithm, &tlv(Tag::BitString, &[&[0], &signature])?])?;
    let response_bytes = seq(&[&oid(ID_PKIX_OCSP_BASIC)?, &octet_string(&basic)?])?;
    seq(&[&tlv(Tag::Enumerated, &[&[0]])?, &explicit(0, &response_bytes)?])
}

fn encoding(err: der::Error) -> PkiError {
    PkiError::Signing(format!("encoding the OCSP response: {err}"))
}

fn single_response(response: &SingleStatus) -> Result<Vec<u8>, PkiError> {
    let status = match response.status {
        CertStatus::Good => implicit(0, false, &[])?,
        CertStatus::Revoked { at, reason } => {
            let reason = match reason.and_then(reason_code) {
                Some(code) => explicit(0, &tlv(Tag::Enumerated, &[&[code]])?)?,
                None => Vec::new(),
            };
            implicit(1, true, &[&time(at)?, &reason])?
        }
        CertStatus::Unknown => implicit(2, false, &[])?,
    };
    let next_update = match response.next_update {
        Some(next) => explicit(0, &time(next)?)?,
        None => Vec::new(),
    };
    seq(&[&response.cert_id.to_der()?, &status, &time(response.this_update)?, &next_update])
}

/// The RFC 5280 CRLReason code, none for unspecified (omitted, as in [`crate::sign_crl`]).
/// The RFC 5280 CRLReason code, as the CRL writes it (unspecified is omitted).
pub(crate) fn reason_code(reason: RevocationReason) -> Option<u8> {
    crate::crl::reason(reason).map(|r| r as u8)
}

/// GeneralizedTime of `seconds` since the epoch.
fn time(seconds: i64) -> Result<Vec<u8>, PkiError> {
    let out_of_range = || PkiError::InvalidProfile(format!("{seconds} is outside the representable time range"));
    let seconds = u64::try_from(seconds).map_err(|_| out_of_range())?;
    let time = GeneralizedTime::from_unix_duration(Duration::from_secs(seconds)).map_err(|_| out_of_range())?;
    time.to_der().map_err(encoding)
}

// AlgorithmIdentifiers of the signatures (RFC 5758, RFC 8410, RFC 4055: RSA with NULL parameters).
const ECDSA_SHA256: &[u8] = &[0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const ECDSA_SHA384: &[u8] = &[0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const ED25519: &[u8] = &[0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];
const RSA_SHA256: &[u8] = &[0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b, 0x05, 0x00];
const RSA_SHA384: &[u8] = &[0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c, 0x05, 0x00];
const RSA_SHA512: &[u8] = &[0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d, 0x05, 0x00];

enum Scheme {
    Ecdsa(&'static sig::EcdsaSigningAlgorithm),
    Ed25519,
    Rsa(&'static dyn sig::RsaEncoding),
}

/// How the CA key signs (as rcgen signs its certificates and CRLs) and the AlgorithmIdentifier.
fn scheme(algorithm: &rcgen::SignatureAlgorithm) -> Option<(Scheme, &'static [u8])> {
    let schemes: [(&rcgen::SignatureAlgorithm, Scheme, &'static [u8]); 6] = [
        (&rcgen::PKCS_ECDSA_P256_SHA256, Scheme::Ecdsa(&sig::ECDSA_P256_SHA256_ASN1_SIGNING), ECDSA_SHA256),
        (&rcgen::PKCS_ECDSA_P384_SHA384, Scheme::Ecdsa(&sig::ECDSA_P384_SHA384_ASN1_SIGNING), ECDSA_SHA384),
        (&rcgen::PKCS_ED25519, Scheme::Ed25519, ED25519),
        (&rcgen::PKCS_RSA_SHA256, Scheme::Rsa(&sig::RSA_PKCS1_SHA256), RSA_SHA256),
        (&rcgen::PKCS_RSA_SHA384, Scheme::Rsa(&sig::RSA_PKCS1_SHA384), RSA_SHA384),
        (&rcgen::PKCS_RSA_SHA512, Scheme::Rsa(&sig::RSA_PKCS1_SHA512), RSA_SHA512),
    ];
    schemes.into_iter().find(|(known, _, _)| *known == algorithm).map(|(_, scheme, identifier)| (scheme, identifier))
}

/// Signs `message` with the CA key: the AlgorithmIdentifier (DER) and the signature.
fn sign(signer: &Signer, message: &[u8]) -> Result<(&'static [u8], Vec<u8>), PkiError> {
    let key = &signer.key;
    let (scheme, identifier) = scheme(key.algorithm())
        .ok_or_else(|| PkiError::Signing(format!("OCSP signing with {:?} is not supported", key.algorithm())))?;
    let failed = |what: &str| PkiError::Signing(format!("OCSP signature: {what}"));
    if let Some(remote) = key.as_remote() {
        return Ok((identifier, remote.sign(message).map_err(|err| failed(&err.to_string()))?));
    }
    let pkcs8 = key.serialized_der();
    let rng = SystemRandom::new();
    let signature = match scheme {
        Scheme::Ecdsa(algorithm) => sig::EcdsaKeyPair::from_pkcs8(algorithm, pkcs8, &rng)
            .map_err(|_| failed("the key does not load"))?
            .sign(&rng, message)
            .map_err(|_| failed("signing failed"))?
            .as_ref()
            .to_vec(),
        Scheme::Ed25519 => sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8)
            .map_err(|_| failed("the key does not load"))?
            .sign(message)
            .as_ref()
            .to_vec(),
        Scheme::Rsa(padding) => {
            let pair = sig::RsaKeyPair::from_pkcs8(pkcs8).map_err(|_| failed("the key does not load"))?;
            let mut signature = vec![0; pair.public().modulus_len()];
            pair.sign(padding, &rng, message, &mut signature).map_err(|_| failed("signing failed"))?;
            signature
        }
    };
    Ok((identifier, signature))
}

// ---- DER writing --------------------------------------------------------------------------

fn tlv(tag: Tag, parts: &[&[u8]]) -> Result<Vec<u8>, PkiError> {
    let length: usize = parts.iter().map(|part| part.len()).sum();
    let mut out = Vec::with_capacity(length + 6);
    Header::new(tag, length).and_then(|header| header.encode_to_vec(&mut out)).map_err(encoding)?;
    for part in parts {
        out.extend_from_slice(part);
    }
    Ok(out)
}

fn seq(parts: &[&[u8]]) -> Result<Vec<u8>, PkiError> {
    tlv(Tag::Sequence, parts)
}

fn octet_string(bytes: &[u8]) -> Result<Vec<u8>, PkiError> {
    tlv(Tag::OctetString, &[bytes])
}

fn oid(oid: ObjectIdentifier) -> Result<Vec<u8>, PkiError> {
    oid.to_der().map_err(encoding)
}

fn explicit(number: u8, content: &[u8]) -> Result<Vec<u8>, PkiError> {
    tlv(Tag::ContextSpecific { constructed: true, number: TagNumber::new(number) }, &[content])
}

fn implicit(number: u8, constructed: bool, parts: &[&[u8]]) -> Result<Vec<u8>, PkiError> {
    tlv(Tag::ContextSpecific { constructed, number: TagNumber::new(number) }, parts)
}

// ---- DER reading --------------------------------------------------------------------------

/// A request's structure, before its values are checked.
struct RawRequest<'a> {
    version: Option<u8>,
    requests: Vec<RawSingle<'a>>,
    extensions: Vec<Extension<'a>>,
}

struct RawSingle<'a> {
    hash_algorithm: ObjectIdentifier,
    hash_parameters: Option<AnyRef<'a>>,
    issuer_name_hash: &'a [u8],
    issuer_key_hash: &'a [u8],
    serial_number: AnyRef<'a>,
    extensions: Vec<Extension<'a>>,
}

struct Extension<'a> {
    id: ObjectIdentifier,
    critical: bool,
    value: &'a [u8],
}

fn read_request(der: &[u8]) -> der::Result<RawRequest<'_>> {
    let mut reader = SliceReader::new(der)?;
    let request = reader.sequence(|ocsp_request| {
        let request = ocsp_request.sequence(|tbs| {
            let version = ContextSpecific::<u8>::decode_explicit(tbs, TagNumber::N0)?.map(|version| version.value);
            // requestorName [1]: who asks does not change the answer.
            ContextSpecific::<AnyRef<'_>>::decode_explicit(tbs, TagNumber::N1)?;
            let requests = tbs.sequence(|list| {
                let mut requests = Vec::new();
                while !list.is_finished() {
                    requests.push(list.sequence(read_single)?);
                }
                Ok(requests)
            })?;
            let extensions = read_extensions(ContextSpecific::decode_explicit(tbs, TagNumber::N2)?)?;
            Ok(RawRequest { version, requests, extensions })
        })?;
        // optionalSignature [0]: accepted, never verified (answers are public).
        ContextSpecific::<AnyRef<'_>>::decode_explicit(ocsp_request, TagNumber::N0)?;
        Ok(request)
    })?;
    reader.finish(request)
}

fn read_single<'a, R: Reader<'a>>(request: &mut R) -> der::Result<RawSingle<'a>> {
    let (hash_algorithm, hash_parameters, issuer_name_hash, issuer_key_hash, serial_number) =
        request.sequence(|cert_id| {
            let (oid, parameters) =
                cert_id.sequence(|algorithm| Ok((algorithm.decode()?, algorithm.decode::<Option<AnyRef<'a>>>()?)))?;
            let name = cert_id.decode::<OctetStringRef<'a>>()?.as_bytes();
            let key = cert_id.decode::<OctetStringRef<'a>>()?.as_bytes();
            let serial = cert_id.decode::<AnyRef<'a>>()?;
            Ok((oid, parameters, name, key, serial))
        })?;
    let extensions = read_extensions(ContextSpecific::decode_explicit(request, TagNumber::N0)?)?;
    Ok(RawSingle { hash_algorithm, hash_parameters, issuer_name_hash, issuer_key_hash, serial_number, extensions })
}

fn read_extensions<'a>(wrapped: Option<ContextSpecific<AnyRef<'a>>>) -> der::Result<Vec<Extension<'a>>> {
    let Some(wrapped) = wrapped else {
        return Ok(Vec::new());
    };
    wrapped.value.tag().assert_eq(Tag::Sequence)?;
    let mut reader = SliceReader::new(wrapped.value.value())?;
    let mut extensions = Vec::new();
    while !reader.is_finished() {
        extensions.push(reader.sequence(|extension| {
            Ok(Extension {
                id: extension.decode()?,
                critical: extension.decode::<Option<bool>>()?.unwrap_or(false),
                value: extension.decode::<OctetStringRef<'a>>()?.as_bytes(),
            })
        })?);
    }
    reader.finish(extensions)
}

fn cert_id(raw: RawSingle<'_>) -> Result<CertId, OcspError> {
    let hash_algorithm = HashAlgorithm::from_oid(&raw.hash_algorithm)
        .ok_or_else(|| OcspError::UnsupportedHashAlgorithm(raw.hash_algorithm.to_string()))?;
    // Parameters absent or NULL (RFC 5754 allows both).
    if raw.hash_parameters.is_some_and(|parameters| parameters.tag() != Tag::Null || !parameters.value().is_empty()) {
        return Err(OcspError::Malformed("hash algorithm parameters must be absent or NULL".into()));
    }
    let length = hash_algorithm.output_len();
    if raw.issuer_name_hash.len() != length || raw.issuer_key_hash.len() != length {
        return Err(OcspError::Malformed(format!("issuer hashes must be {length} octets")));
    }
    if raw.serial_number.tag() != Tag::Integer || raw.serial_number.value().is_empty() {
        return Err(OcspError::Malformed("the serial number must be an INTEGER".into()));
    }
    Ok(CertId {
        hash_algorithm,
        issuer_name_hash: raw.issuer_name_hash.to_vec(),
        issuer_key_hash: raw.issuer_key_hash.to_vec(),
        serial_number: raw.serial_number.value().to_vec(),
    })
}

fn refuse_critical(extensions: &[Extension<'_>], understood: &[ObjectIdentifier]) -> Result<(), OcspError> {
    match extensions.iter().find(|extension| extension.critical && !understood.contains(&extension.id)) {
        Some(extension) => Err(OcspError::UnsupportedCriticalExtension(extension.id.to_string())),
        None => Ok(()),
    }
}

/// The nonce inside an id-pkix-ocsp-nonce extnValue (RFC 9654: an OCTET STRING of 1 to 128).
fn nonce(value: &[u8]) -> Result<Vec<u8>, OcspError> {
    let nonce = OctetStringRef::from_der(value).map_err(|_| OcspError::InvalidNonce)?.as_bytes();
    if nonce.is_empty() || nonce.len() > MAX_NONCE_BYTES {
        return Err(OcspError::InvalidNonce);
    }
    Ok(nonce.to_vec())
}

#[cfg(test)]
#[path = "ocsp_tests.rs"]
mod tests;
