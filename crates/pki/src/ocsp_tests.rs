//! OCSP requests and responses: parsed and checked here, and against `openssl ocsp` when it is on
//! the PATH.

use std::path::{Path, PathBuf};
use std::process::Command;

use der::asn1::BitStringRef;

use super::*;
use crate::vocabulary::{CertificateProfile, KeyAlgorithm, KeyUsage, Subject, SubjectAltName};
use crate::OsEntropy;
use crate::{sign_csr, Authority, CsrCheck, IssuerUrls, NewAuthority, Signed};

const NONCE_OID: &str = "1.3.6.1.5.5.7.48.1.2";

fn now() -> i64 {
    let elapsed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
    i64::try_from(elapsed.as_secs()).expect("seconds fit")
}

fn root(name: &str, key_algorithm: KeyAlgorithm, at: i64) -> Authority {
    let spec = NewAuthority {
        subject: Subject { common_name: Some(name.into()), organization: Some("Trellis".into()), ..Subject::default() },
        key_algorithm,
        validity_days: 365,
        path_length: None,
    };
    Authority::create_root(&spec, at, &OsEntropy).expect("root")
}

fn leaf(signer: &Signer, name: &str, at: i64) -> Signed {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let csr =
        rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params").serialize_request(&key).expect("csr");
    let profile = CertificateProfile {
        subject: Subject { common_name: Some(name.into()), ..Subject::default() },
        subject_alt_names: vec![SubjectAltName::Dns(name.into())],
        key_usages: vec![KeyUsage::DigitalSignature],
        extended_key_usages: vec!["1.3.6.1.5.5.7.3.1".into()],
        validity_days: 30,
    };
    let urls = IssuerUrls {
        crl: "http://pki.example/pki/1/crl".into(),
        ocsp: "http://pki.example/pki/1/ocsp".into(),
        ca_issuers: "http://pki.example/pki/1/ca".into(),
    };
    sign_csr(signer, csr.der(), CsrCheck::Verify, &profile, &urls, at, &OsEntropy).expect("leaf")
}

fn single(cert_id: &CertId, status: CertStatus, at: i64) -> SingleStatus {
    SingleStatus { cert_id: cert_id.clone(), status, this_update: at, next_update: Some(at + 3600) }
}

// ---- requests as clients encode them ------------------------------------------------------

fn extension(oid: &str, critical: bool, value: &[u8]) -> Vec<u8> {
    let oid = super::oid(ObjectIdentifier::new(oid).expect("oid")).expect("oid");
    let critical = if critical { vec![0x01, 0x01, 0xff] } else { Vec::new() };
    seq(&[&oid, &critical, &octet_string(value).expect("value")]).expect("extension")
}

fn nonce_extension(nonce: &[u8]) -> Vec<u8> {
    extension(NONCE_OID, false, &octet_string(nonce).expect("nonce"))
}

/// An OCSPRequest of `cert_ids` (DER CertIDs) with `extensions` as requestExtensions.
fn request(cert_ids: &[Vec<u8>], extensions: &[Vec<u8>]) -> Vec<u8> {
    let requests: Vec<Vec<u8>> = cert_ids.iter().map(|id| seq(&[id]).expect("request")).collect();
    let requests: Vec<&[u8]> = requests.iter().map(Vec::as_slice).collect();
    let extensions: Vec<&[u8]> = extensions.iter().map(Vec::as_slice).collect();
    let extensions =
        if extensions.is_empty() { Vec::new() } else { explicit(2, &seq(&extensions).expect("exts")).expect("[2]") };
    seq(&[&seq(&[&seq(&requests).expect("list"), &extensions]).expect("tbs")]).expect("request")
}

fn sample_id() -> CertId {
    CertId {
        hash_algorithm: HashAlgorithm::Sha1,
        issuer_name_hash: vec![0x11; 20],
        issuer_key_hash: vec![0x22; 20],
        serial_number: vec![0x00, 0x80, 0x01],
    }
}

// ---- responses, read back -----------------------------------------------------------------

struct Basic {
    tbs: Vec<u8>,
    algorithm: Vec<u8>,
    signature: Vec<u8>,
}

/// The BasicOCSPResponse of a successful OCSPResponse.
fn basic(response: &[u8]) -> Basic {
    let mut reader = SliceReader::new(response).expect("reader");
    let basic = reader
        .sequence(|outer| {
            let status = outer.decode::<AnyRef<'_>>()?;
            assert_eq!((status.tag(), status.value()), (der::Tag::Enumerated, &[0u8][..]), "successful");
            let bytes = ContextSpecific::<AnyRef<'_>>::decode_explicit(outer, TagNumber::N0)?.expect("responseBytes");
            let mut bytes_reader = SliceReader::new(bytes.value.value())?;
            let oid = bytes_reader.decode::<ObjectIdentifier>()?;
            assert_eq!(oid, ID_PKIX_OCSP_BASIC);
            let basic = bytes_reader.decode::<OctetStringRef<'_>>()?.as_bytes().to_vec();
            Ok(basic)
        })
        .expect("OCSPResponse");
    let mut reader = SliceReader::new(&basic).expect("reader");
    reader
        .sequence(|basic| {
            let tbs = basic.tlv_bytes()?.to_vec();
            let algorithm = basic.tlv_bytes()?.to_vec();
            let signature = basic.decode::<BitStringRef<'_>>()?.raw_bytes().to_vec();
            assert!(basic.is_finished(), "no certs: the CA signs itself");
            Ok(Basic { tbs, algorithm, signature })
        })
        .expect("BasicOCSPResponse")
}

/// The signatureAlgorithm of a certificate, DER.
fn certificate_signature_algorithm(certificate: &[u8]) -> Vec<u8> {
    let mut reader = SliceReader::new(certificate).expect("reader");
    reader
        .sequence(|cert| {
            cert.tlv_bytes()?;
            let algorithm = cert.tlv_bytes()?.to_vec();
            cert.tlv_bytes()?;
            Ok(algorithm)
        })
        .expect("certificate")
}

fn verify(key_algorithm: KeyAlgorithm, ca_der: &[u8], basic: &Basic) {
    use ring::signature as s;
    let algorithm: &dyn s::VerificationAlgorithm = match key_algorithm {
        KeyAlgorithm::EcdsaP256 => &s::ECDSA_P256_SHA256_ASN1,
        KeyAlgorithm::EcdsaP384 => &s::ECDSA_P384_SHA384_ASN1,
        KeyAlgorithm::Ed25519 => &s::ED25519,
        _ => &s::RSA_PKCS1_2048_8192_SHA256,
    };
    let (_, ca) = x509_parser::parse_x509_certificate(ca_der).expect("CA");
    s::UnparsedPublicKey::new(algorithm, &ca.public_key().subject_public_key.data)
        .verify(&basic.tbs, &basic.signature)
        .unwrap_or_else(|_| panic!("{key_algorithm:?}: the response is signed by the CA key"));
    assert_eq!(basic.algorithm, certificate_signature_algorithm(ca_der), "the algorithm rcgen signs the CA with");
}

const ALGORITHMS: [KeyAlgorithm; 4] =
    [KeyAlgorithm::EcdsaP256, KeyAlgorithm::EcdsaP384, KeyAlgorithm::Rsa2048, KeyAlgorithm::Ed25519];

#[test]
fn responses_are_signed_by_the_ca_key_and_name_it_by_key_hash() {
    let at = now();
    for key_algorithm in ALGORITHMS {
        let ca = root("Root", key_algorithm, at - 60);
        let signer = ca.signer().expect("signer");
        let issued = leaf(&signer, "www.example.com", at - 60);
        let issuer = OcspIssuer::from_certificate(&ca.certificate_der).expect("issuer");
        assert_eq!(issuer, OcspIssuer::from_signer(&signer).expect("issuer"), "the stored and prepared CA agree");
        let serial = hex::decode(&issued.serial_number).expect("hex");
        let id = issuer.cert_id(HashAlgorithm::Sha256, &serial);
        assert_eq!(id.serial_hex(), issued.serial_number);
        let nonce = [0x5a; 32];
        let response =
            sign_response(&signer, &[single(&id, CertStatus::Good, at)], at, Some(&nonce)).expect("response");
        let basic = basic(&response);
        verify(key_algorithm, &ca.certificate_der, &basic);

        let (_, cert) = x509_parser::parse_x509_certificate(&ca.certificate_der).expect("CA");
        let key_hash = HashAlgorithm::Sha1.digest(&cert.public_key().subject_public_key.data);
        let responder_id = explicit(2, &octet_string(&key_hash).expect("hash")).expect("byKey");
        let fields = SliceReader::new(&basic.tbs).and_then(|mut tbs| {
            tbs.sequence(|tbs| {
                let mut fields = Vec::new();
                while !tbs.is_finished() {
                    fields.push(tbs.tlv_bytes()?.to_vec());
                }
                Ok(fields)
            })
        });
        let first = fields.expect("tbs").into_iter().next();
        assert_eq!(first, Some(responder_id), "responderID byKey comes first (v1 is implicit)");
        let echoed = nonce_extension(&nonce);
        assert!(basic.tbs.ends_with(&explicit(1, &seq(&[&echoed]).expect("exts")).expect("[1]")), "nonce echoed");
        assert!(basic.tbs.windows(id.to_der().expect("id").len()).any(|w| w == id.to_der().expect("id")));
    }
}

#[test]
fn statuses_reasons_and_times_are_encoded_as_rfc_6960_says() {
    let id = sample_id();
    let at = 1_767_225_600; // 2026-01-01T00:00:00Z
    let encoded = |status| single_response(&single(&id, status, at)).expect("single");
    let good = encoded(CertStatus::Good);
    assert!(good.windows(2).any(|w| w == [0x80, 0x00]), "good is [0] IMPLICIT NULL");
    assert!(good.windows(17).any(|w| w == b"\x18\x0f20260101000000Z"), "thisUpdate GeneralizedTime");
    assert!(good.windows(19).any(|w| w == b"\xa0\x11\x18\x0f20260101010000Z"), "nextUpdate [0] EXPLICIT");
    assert!(encoded(CertStatus::Unknown).windows(2).any(|w| w == [0x82, 0x00]), "unknown is [2] IMPLICIT NULL");
    let revoked = encoded(CertStatus::Revoked { at, reason: Some(RevocationReason::KeyCompromise) });
    assert!(
        revoked.windows(24).any(|w| w == b"\xa1\x16\x18\x0f20260101000000Z\xa0\x03\x0a\x01\x01"),
        "revoked is [1] IMPLICIT RevokedInfo with [0] EXPLICIT CRLReason"
    );
    assert_eq!(
        encoded(CertStatus::Revoked { at, reason: Some(RevocationReason::Unspecified) }),
        encoded(CertStatus::Revoked { at, reason: None }),
        "unspecified is left out, as in the CRL"
    );
    // The codes are rcgen's, which the CRL writes.
    use rcgen::RevocationReason as R;
    let pairs = [
        (RevocationReason::KeyCompromise, R::KeyCompromise),
        (RevocationReason::CaCompromise, R::CaCompromise),
        (RevocationReason::AffiliationChanged, R::AffiliationChanged),
        (RevocationReason::Superseded, R::Superseded),
        (RevocationReason::CessationOfOperation, R::CessationOfOperation),
        (RevocationReason::CertificateHold, R::CertificateHold),
        (RevocationReason::RemoveFromCrl, R::RemoveFromCrl),
        (RevocationReason::PrivilegeWithdrawn, R::PrivilegeWithdrawn),
        (RevocationReason::AaCompromise, R::AaCompromise),
    ];
    for (ours, crl) in pairs {
        assert_eq!(reason_code(ours), Some(crl as u8), "{ours:?}");
    }
    assert_eq!(id.serial_hex(), "008001", "content octets, leading zero kept, lowercase");
}

#[test]
fn signing_refuses_what_it_must_not_vouch_for() {
    let at = now();
    let ca = root("Root", KeyAlgorithm::EcdsaP256, at);
    let signer = ca.signer().expect("signer");
    let issuer = OcspIssuer::from_signer(&signer).expect("issuer");
    let id = issuer.cert_id(HashAlgorithm::Sha1, &[0x01]);
    let refused = |responses: &[SingleStatus], nonce: Option<&[u8]>| {
        matches!(sign_response(&signer, responses, at, nonce), Err(PkiError::InvalidProfile(_)))
    };
    assert!(refused(&[], None), "nothing to answer");
    assert!(refused(&[single(&sample_id(), CertStatus::Good, at)], None), "another CA's CertID");
    assert!(refused(&[SingleStatus { next_update: Some(at), ..single(&id, CertStatus::Good, at) }], None));
    assert!(refused(&[single(&id, CertStatus::Good, -1)], None), "before 1970");
    assert!(refused(&[single(&id, CertStatus::Good, at)], Some(&[])), "empty nonce");
    assert!(refused(&[single(&id, CertStatus::Good, at)], Some(&[0; 129])), "nonce too long");
    let no_serial = CertId { serial_number: Vec::new(), ..id.clone() };
    assert!(refused(&[single(&no_serial, CertStatus::Good, at)], None), "a serial has an octet");
    let forever = SingleStatus { next_update: None, ..single(&id, CertStatus::Good, at) };
    assert!(sign_response(&signer, &[forever], at, None).is_ok(), "nextUpdate is optional");
}

#[test]
fn cert_ids_of_another_ca_are_foreign() {
    let at = now();
    let (a, b) = (root("Root A", KeyAlgorithm::EcdsaP256, at), root("Root B", KeyAlgorithm::EcdsaP256, at));
    let same_name = root("Root A", KeyAlgorithm::EcdsaP256, at);
    let (issuer_a, issuer_b, issuer_same_name) = (
        OcspIssuer::from_certificate(&a.certificate_der).expect("a"),
        OcspIssuer::from_certificate(&b.certificate_der).expect("b"),
        OcspIssuer::from_certificate(&same_name.certificate_der).expect("same name"),
    );
    let issued = leaf(&b.signer().expect("signer"), "b.example", at);
    let serial = hex::decode(&issued.serial_number).expect("hex");
    for algorithm in [HashAlgorithm::Sha1, HashAlgorithm::Sha256, HashAlgorithm::Sha384, HashAlgorithm::Sha512] {
        let id = issuer_b.cert_id(algorithm, &serial);
        assert!(issuer_b.matches(&id), "{algorithm:?}");
        assert!(!issuer_a.matches(&id), "{algorithm:?}: another CA");
        let of_a = issuer_a.cert_id(algorithm, &serial);
        assert!(!issuer_same_name.matches(&of_a), "{algorithm:?}: same name, another key");
        let request = parse_request(&request(&[id.to_der().expect("id")], &[])).expect("parses");
        assert!(!issuer_a.matches(&request.cert_ids[0]));
    }
    let id_b = issuer_b.cert_id(HashAlgorithm::Sha1, &serial);
    let signer_a = a.signer().expect("signer");
    assert!(
        matches!(
            sign_response(&signer_a, &[single(&id_b, CertStatus::Good, at)], at, None),
            Err(PkiError::InvalidProfile(_))
        ),
        "CA A never signs a status for CA B's certificate"
    );
    assert_eq!(error_response(OcspErrorStatus::Unauthorized), [0x30, 0x03, 0x0a, 0x01, 0x06]);

    // An imported CA is named as its certificate names it.
    let certificate_pem = crate::x509::pem_encode("CERTIFICATE", &a.certificate_der);
    let key_pem = crate::x509::pem_encode("PRIVATE KEY", &a.key_pkcs8);
    let imported = Authority::import(&certificate_pem, &key_pem).expect("import");
    assert_eq!(OcspIssuer::from_signer(&imported.signer().expect("signer")).expect("issuer"), issuer_a);
}

#[test]
fn requests_parse_with_their_nonce_and_get_encoding() {
    let id = sample_id();
    let nonce = [0xabu8; 16];
    let der = request(&[id.to_der().expect("id")], &[nonce_extension(&nonce)]);
    let parsed = parse_request(&der).expect("parses");
    assert_eq!(parsed, OcspRequest { cert_ids: vec![id.clone()], nonce: Some(nonce.to_vec()) });

    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(&der);
    let escaped = text.replace('/', "%2F").replace('+', "%2b").replace('=', "%3D");
    assert_eq!(parse_get_request(&text).expect("plain"), parsed);
    assert_eq!(parse_get_request(&escaped).expect("escaped"), parsed);
    assert_eq!(parse_get_request(text.trim_end_matches('=')).expect("unpadded"), parsed);
    assert!(matches!(parse_get_request("MA%G0"), Err(OcspError::Malformed(_))));
    assert!(matches!(parse_get_request("MA%0"), Err(OcspError::Malformed(_))));
    assert!(matches!(parse_get_request("MA%+f"), Err(OcspError::Malformed(_))));
    assert!(matches!(parse_get_request("not base64!"), Err(OcspError::Malformed(_))));
    assert_eq!(parse_get_request(&"A".repeat(MAX_REQUEST_BYTES.div_ceil(3) * 12 + 1)), Err(OcspError::TooLarge));
    assert_eq!(parse_get_request(&"AAAA".repeat(MAX_REQUEST_BYTES / 3 + 1)), Err(OcspError::TooLarge));

    // Extras a client may send: version 0 said explicitly, a requestor name, a signature, a
    // non-critical extension per certificate and per request, SHA-256 with absent parameters.
    let sha256 = CertId {
        hash_algorithm: HashAlgorithm::Sha256,
        issuer_name_hash: vec![1; 32],
        issuer_key_hash: vec![2; 32],
        serial_number: vec![0x7f],
    };
    let absent_parameters = seq(&[
        &seq(&[&super::oid(ID_SHA256).expect("oid")]).expect("algorithm"),
        &octet_string(&[1; 32]).expect("name hash"),
        &octet_string(&[2; 32]).expect("key hash"),
        &tlv(Tag::Integer, &[&[0x7f]]).expect("serial"),
    ])
    .expect("CertID");
    let single_extensions = explicit(0, &seq(&[&extension("1.2.3.4", false, b"x")]).expect("exts")).expect("[0]");
    let tbs = seq(&[
        &explicit(0, &[0x02, 0x01, 0x00]).expect("version"),
        &explicit(1, &[0x82, 0x03, b'a', b'.', b'b']).expect("requestorName dNSName"),
        &seq(&[&seq(&[&absent_parameters, &single_extensions]).expect("request")]).expect("list"),
        &explicit(2, &seq(&[&extension("1.3.6.1.5.5.7.48.1.4", false, &[0x30, 0x00])]).expect("exts")).expect("[2]"),
    ])
    .expect("tbs");
    let signature = explicit(0, &seq(&[&[0x30, 0x03, 0x06, 0x01, 0x2a][..], &[0x03, 0x01, 0x00]]).expect("sig"))
        .expect("optionalSignature");
    let parsed = parse_request(&seq(&[&tbs, &signature]).expect("request")).expect("extras are accepted");
    assert_eq!(parsed, OcspRequest { cert_ids: vec![sha256], nonce: None });
}

#[test]
fn malformed_requests_are_refused_without_panicking() {
    let id = sample_id().to_der().expect("id");
    let one = std::slice::from_ref(&id);
    let valid = request(one, &[nonce_extension(&[7; 32])]);
    assert!(parse_request(&valid).is_ok());
    let refused = |der: &[u8]| {
        let err = parse_request(der).expect_err("refused");
        assert_eq!(err.status(), OcspErrorStatus::MalformedRequest);
        err
    };

    refused(&[]);
    for length in 0..valid.len() {
        refused(&valid[..length]);
    }
    refused(&[valid.as_slice(), &[0x00]].concat());
    assert_eq!(refused(&vec![0x30; MAX_REQUEST_BYTES + 1]), OcspError::TooLarge);
    refused(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]);
    refused(&[0x30, 0x88, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    refused(&[0x30, 0x80, 0x00, 0x00]);
    refused(&[0x3f, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00]);
    // Nesting deep inside a field that is skipped, not parsed.
    let mut deep = vec![0x05, 0x00];
    for _ in 0..2_000 {
        deep = seq(&[&deep]).expect("nest");
    }
    let nested =
        seq(&[&seq(&[&explicit(1, &deep).expect("[1]"), &seq(&[&seq(&[&id]).expect("r")]).expect("l")]).expect("tbs")])
            .expect("request");
    assert!(nested.len() < MAX_REQUEST_BYTES);
    assert!(parse_request(&nested).is_ok(), "a requestorName is skipped however deep");

    // Every octet changed: an answer or an error, never a panic.
    for position in 0..valid.len() {
        for value in [0x00, 0x01, 0x7f, 0x80, 0x81, 0x84, 0xff, valid[position] ^ 0x20] {
            let mut mutated = valid.clone();
            mutated[position] = value;
            let _ = parse_request(&mutated);
        }
    }
    // Noise.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..5_000 {
        let length = (next() % 400) as usize;
        let mut noise: Vec<u8> = (0..length).map(|_| next() as u8).collect();
        if let Some(first) = noise.first_mut() {
            *first = 0x30;
        }
        let _ = parse_request(&noise);
    }

    // Rules beyond the syntax.
    assert_eq!(refused(&request(&[], &[])), OcspError::NoCertificate);
    assert!(parse_request(&request(&vec![id.clone(); MAX_CERT_IDS], &[])).is_ok());
    assert_eq!(
        refused(&request(&vec![id.clone(); MAX_CERT_IDS + 1], &[])),
        OcspError::TooManyCertificates(MAX_CERT_IDS + 1)
    );
    assert_eq!(refused(&request(one, &[nonce_extension(&[])])), OcspError::InvalidNonce);
    assert_eq!(refused(&request(one, &[nonce_extension(&[1; 129])])), OcspError::InvalidNonce);
    assert_eq!(
        parse_request(&request(one, &[nonce_extension(&[1; 128])])).expect("128").nonce.map(|n| n.len()),
        Some(128)
    );
    assert_eq!(refused(&request(one, &[extension(NONCE_OID, false, b"raw")])), OcspError::InvalidNonce);
    assert!(matches!(refused(&request(one, &[nonce_extension(&[1]), nonce_extension(&[2])])), OcspError::Malformed(_)));
    assert_eq!(
        refused(&request(one, &[extension("1.2.3.4", true, b"x")])),
        OcspError::UnsupportedCriticalExtension("1.2.3.4".into())
    );
    assert!(parse_request(&request(one, &[extension("1.2.3.4", false, b"x")])).is_ok());
    let md5 = ObjectIdentifier::new_unwrap("1.2.840.113549.2.5");
    let md5 = seq(&[
        &seq(&[&super::oid(md5).expect("oid"), &tlv(Tag::Null, &[]).expect("null")]).expect("algorithm"),
        &octet_string(&[0; 16]).expect("name hash"),
        &octet_string(&[0; 16]).expect("key hash"),
        &tlv(Tag::Integer, &[&[0x01]]).expect("serial"),
    ])
    .expect("CertID");
    assert_eq!(refused(&request(&[md5], &[])), OcspError::UnsupportedHashAlgorithm("1.2.840.113549.2.5".into()));
    let short_hash = CertId { issuer_name_hash: vec![0; 19], ..sample_id() }.to_der().expect("id");
    assert!(matches!(refused(&request(&[short_hash], &[])), OcspError::Malformed(_)));
    let version_2 =
        seq(&[&seq(&[&explicit(0, &[0x02, 0x01, 0x01]).expect("v2"), &seq(&[&seq(&[&id]).expect("r")]).expect("l")])
            .expect("tbs")])
        .expect("request");
    assert!(matches!(refused(&version_2), OcspError::Malformed(_)));
}

// ---- against openssl ----------------------------------------------------------------------

struct Scratch(PathBuf);

impl Scratch {
    fn new(label: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("trellis-ocsp-{}-{label}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.0.join(name), bytes).expect("write");
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.0.join(name)).expect("read")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `openssl ocsp …` in `dir`: whether it succeeded, and its stdout and stderr; `None` when
/// openssl is not installed.
fn try_openssl_ocsp(dir: &Path, args: &[&str]) -> Option<(bool, String)> {
    let output = match Command::new("openssl").arg("ocsp").args(args).current_dir(dir).output() {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => panic!("openssl: {err}"),
    };
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    Some((output.status.success(), text))
}

/// `openssl ocsp …` that must succeed.
fn openssl_ocsp(dir: &Path, args: &[&str]) -> Option<String> {
    let (success, text) = try_openssl_ocsp(dir, args)?;
    assert!(success, "openssl ocsp {args:?} failed:\n{text}");
    Some(text)
}

#[test]
fn openssl_verifies_good_revoked_and_unknown_for_every_ca_key() {
    let at = now();
    for key_algorithm in ALGORITHMS {
        let scratch = Scratch::new(key_algorithm.as_str());
        let ca = root("Trellis OCSP Test Root", key_algorithm, at - 60);
        let signer = ca.signer().expect("signer");
        let issued = leaf(&signer, "www.example.com", at - 60);
        scratch.write("ca.pem", crate::x509::pem_encode("CERTIFICATE", &ca.certificate_der).as_bytes());
        scratch.write("leaf.pem", crate::x509::pem_encode("CERTIFICATE", &issued.certificate_der).as_bytes());
        let issuer = OcspIssuer::from_certificate(&ca.certificate_der).expect("issuer");

        let Some(_) =
            openssl_ocsp(&scratch.0, &["-issuer", "ca.pem", "-cert", "leaf.pem", "-reqout", "req.der", "-no_nonce"])
        else {
            eprintln!("openssl is not installed: OCSP interoperability not checked");
            return;
        };
        let request = parse_request(&scratch.read("req.der")).expect("openssl's request parses");
        assert_eq!(request.nonce, None);
        let [id] = request.cert_ids.as_slice() else { panic!("one CertID: {request:?}") };
        assert_eq!(id.hash_algorithm, HashAlgorithm::Sha1);
        assert_eq!(id.serial_hex(), issued.serial_number);
        assert!(issuer.matches(id), "{key_algorithm:?}: openssl names the CA as we do");

        let revoked = CertStatus::Revoked { at: at - 30, reason: Some(RevocationReason::KeyCompromise) };
        for (status, expected) in [
            (CertStatus::Good, vec!["leaf.pem: good"]),
            (revoked, vec!["leaf.pem: revoked", "Reason: keyCompromise"]),
            (CertStatus::Unknown, vec!["leaf.pem: unknown"]),
        ] {
            let response = sign_response(&signer, &[single(id, status, at)], at, None).expect("response");
            scratch.write("resp.der", &response);
            let text = openssl_ocsp(
                &scratch.0,
                &[
                    "-respin",
                    "resp.der",
                    "-issuer",
                    "ca.pem",
                    "-CAfile",
                    "ca.pem",
                    "-cert",
                    "leaf.pem",
                    "-no_nonce",
                    "-resp_text",
                ],
            )
            .expect("openssl");
            for line in expected.iter().chain(&["Response verify OK"]) {
                assert!(text.contains(line), "{key_algorithm:?} {status:?}: `{line}` missing in\n{text}");
            }
            assert!(!text.contains("WARNING"), "{key_algorithm:?} {status:?}:\n{text}");
        }

        // SHA-256 CertID and openssl's nonce, echoed; another nonce is caught.
        openssl_ocsp(&scratch.0, &["-sha256", "-issuer", "ca.pem", "-cert", "leaf.pem", "-reqout", "req256.der"])
            .expect("openssl");
        let request = parse_request(&scratch.read("req256.der")).expect("parses");
        let nonce = request.nonce.clone().expect("openssl sends a nonce");
        let [id] = request.cert_ids.as_slice() else { panic!("one CertID: {request:?}") };
        assert_eq!(id.hash_algorithm, HashAlgorithm::Sha256);
        assert!(issuer.matches(id));
        let verify_args =
            ["-reqin", "req256.der", "-respin", "resp.der", "-issuer", "ca.pem", "-CAfile", "ca.pem", "-resp_text"];
        let response = sign_response(&signer, &[single(id, CertStatus::Good, at)], at, Some(&nonce)).expect("response");
        scratch.write("resp.der", &response);
        let text = openssl_ocsp(&scratch.0, &verify_args).expect("openssl");
        assert!(
            text.contains("Response verify OK") && text.contains("Cert Status: good"),
            "{key_algorithm:?}:\n{text}"
        );
        assert!(
            !text.contains("WARNING") && !text.contains("Nonce Verify error"),
            "{key_algorithm:?}: nonce echoed:\n{text}"
        );
        let response =
            sign_response(&signer, &[single(id, CertStatus::Good, at)], at, Some(b"other")).expect("response");
        scratch.write("resp.der", &response);
        let (success, text) = try_openssl_ocsp(&scratch.0, &verify_args).expect("openssl");
        assert!(
            !success && text.contains("Nonce Verify error"),
            "{key_algorithm:?}: openssl checks the nonce:\n{text}"
        );
    }
}

#[test]
fn openssl_reads_error_responses() {
    let scratch = Scratch::new("errors");
    for (status, text) in [
        (OcspErrorStatus::MalformedRequest, "malformedrequest (1)"),
        (OcspErrorStatus::InternalError, "internalerror (2)"),
        (OcspErrorStatus::TryLater, "trylater (3)"),
        (OcspErrorStatus::Unauthorized, "unauthorized (6)"),
    ] {
        scratch.write("err.der", &error_response(status));
        let Some((_, output)) = try_openssl_ocsp(&scratch.0, &["-respin", "err.der", "-resp_text"]) else {
            eprintln!("openssl is not installed: error responses not checked");
            return;
        };
        assert!(output.contains(&format!("Responder Error: {text}")), "{status:?}:\n{output}");
    }
}
