//! The one reader of PKCS#10 certificate signing requests. Issuance, approval, renewal and
//! attestation all take a CSR through [`parse_pem`], so the bytes a verifier checks are the
//! bytes a CA signs: a text holding two requests (one bound to a TPM key, one to a software
//! key) is refused rather than read differently by two parsers.

use std::net::IpAddr;

use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509CertificationRequest};
use x509_parser::public_key::PublicKey;

use crate::vocabulary::{SubjectAltName, SubjectKey};

/// Larger CSR texts are refused before they are parsed.
pub const MAX_CSR_BYTES: usize = 64 * 1024;

/// The PEM labels a CSR may carry (`NEW CERTIFICATE REQUEST` is what older tools write).
const LABELS: [&str; 2] = ["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"];

/// A CSR whose self-signature was verified (proof of possession of its key).
#[derive(Debug, Clone, PartialEq)]
pub struct Csr {
    /// The request's DER, exactly as verified.
    pub der: Vec<u8>,
    /// The SubjectPublicKeyInfo's DER.
    pub public_key_info: Vec<u8>,
    pub key: SubjectKey,
    /// The subject's first common name.
    pub common_name: Option<String>,
    /// The subjectAltName extension's names.
    pub names: Vec<SubjectAltName>,
}

/// Why a CSR text was refused; each says what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    #[error("is larger than 64 KiB")]
    TooLarge,
    #[error("must be exactly one PEM `CERTIFICATE REQUEST` block and nothing else; found {0} PEM blocks")]
    BlockCount(usize),
    #[error("must be exactly one PEM `CERTIFICATE REQUEST` block and nothing else; found text outside the block")]
    TextOutsideBlock,
    #[error("must be a PEM `CERTIFICATE REQUEST` block, not `{0}`")]
    WrongLabel(String),
    #[error("is not valid PEM (the base64 between the BEGIN and END lines does not decode)")]
    NotPem,
    #[error("is not a DER PKCS#10 certificate request")]
    NotPkcs10,
    #[error("has bytes after the DER certificate request")]
    TrailingBytes,
    #[error("the RSA key has {0} bits; at least 2048 are required")]
    WeakRsaKey(u32),
    #[error("the key is not RSA, ECDSA (P-256/P-384/P-521) or Ed25519")]
    UnsupportedKey,
    #[error("asks for a subject alternative name of a type that cannot be judged ({0}); only DNS names, IP addresses, e-mail addresses and URIs are issued")]
    UnsupportedName(&'static str),
    #[error("its signature does not verify with its own key (the request was altered, or signed by another key)")]
    BadSignature,
}

/// Reads a CSR text: exactly one PEM block labelled `CERTIFICATE REQUEST` (or `NEW CERTIFICATE
/// REQUEST`), surrounded by nothing but whitespace, whose DER is one PKCS#10 request with a
/// valid self-signature and a supported key.
pub fn parse_pem(text: &str) -> Result<Csr, CsrError> {
    if text.len() > MAX_CSR_BYTES {
        return Err(CsrError::TooLarge);
    }
    let text = text.trim();
    let blocks = text.matches("-----BEGIN ").count();
    if blocks != 1 {
        return Err(CsrError::BlockCount(blocks));
    }
    let (rest, block) = x509_parser::pem::parse_x509_pem(text.as_bytes()).map_err(|_| CsrError::NotPem)?;
    // The reader skips lines before BEGIN and stops after END: both must be empty.
    if !text.starts_with("-----BEGIN ") || !rest.iter().all(u8::is_ascii_whitespace) {
        return Err(CsrError::TextOutsideBlock);
    }
    if !LABELS.contains(&block.label.as_str()) {
        return Err(CsrError::WrongLabel(block.label));
    }
    parse_der(&block.contents)
}

/// Reads a DER CSR (see [`parse_pem`]).
pub fn parse_der(der: &[u8]) -> Result<Csr, CsrError> {
    let (rest, csr) = X509CertificationRequest::from_der(der).map_err(|_| CsrError::NotPkcs10)?;
    if !rest.is_empty() {
        return Err(CsrError::TrailingBytes);
    }
    let info = &csr.certification_request_info;
    let key = subject_key(&csr)?;
    // Named before the signature check, which cannot verify RSA keys this small at all.
    if key.algorithm == "rsa" && key.size_bits < 2048 {
        return Err(CsrError::WeakRsaKey(key.size_bits));
    }
    csr.verify_signature().map_err(|_| CsrError::BadSignature)?;
    let common_name = info.subject.iter_common_name().next().and_then(|cn| cn.as_str().ok()).map(str::to_owned);
    let mut names = Vec::new();
    for extension in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = extension {
            for name in &san.general_names {
                names.push(alt_name(name)?);
            }
        }
    }
    Ok(Csr { der: der.to_vec(), public_key_info: info.subject_pki.raw.to_vec(), key, common_name, names })
}

/// A general name as the inventory and policies name it; types nobody judges are refused.
pub fn alt_name(name: &GeneralName<'_>) -> Result<SubjectAltName, CsrError> {
    Ok(match name {
        GeneralName::DNSName(dns) => SubjectAltName::Dns(dns.trim_end_matches('.').to_ascii_lowercase()),
        GeneralName::RFC822Name(mail) => SubjectAltName::Email((*mail).to_owned()),
        GeneralName::URI(uri) => SubjectAltName::Uri((*uri).to_owned()),
        GeneralName::IPAddress(bytes) => SubjectAltName::Ip(
            <[u8; 4]>::try_from(*bytes)
                .map(IpAddr::from)
                .or_else(|_| <[u8; 16]>::try_from(*bytes).map(IpAddr::from))
                .map_err(|_| CsrError::UnsupportedName("an IP address of neither 4 nor 16 octets"))?,
        ),
        GeneralName::OtherName(..) => return Err(CsrError::UnsupportedName("otherName")),
        GeneralName::X400Address(_) => return Err(CsrError::UnsupportedName("x400Address")),
        GeneralName::DirectoryName(_) => return Err(CsrError::UnsupportedName("directoryName")),
        GeneralName::EDIPartyName(_) => return Err(CsrError::UnsupportedName("ediPartyName")),
        GeneralName::RegisteredID(_) => return Err(CsrError::UnsupportedName("registeredID")),
        #[allow(unreachable_patterns)]
        _ => return Err(CsrError::UnsupportedName("an unreadable name")),
    })
}

fn subject_key(csr: &X509CertificationRequest<'_>) -> Result<SubjectKey, CsrError> {
    let info = &csr.certification_request_info;
    let key = |algorithm: &str, size_bits: u32, curve: Option<&str>| SubjectKey {
        algorithm: algorithm.into(),
        size_bits,
        curve: curve.map(Into::into),
        server_generated: false,
    };
    match info.subject_pki.parsed() {
        Ok(PublicKey::RSA(rsa)) => Ok(key("rsa", rsa.key_size() as u32, None)),
        Ok(PublicKey::EC(point)) => {
            let bits = point.key_size() as u32;
            let curve = match bits {
                256 => "p256",
                384 => "p384",
                521 => "p521",
                _ => return Err(CsrError::UnsupportedKey),
            };
            Ok(key("ec", bits, Some(curve)))
        }
        _ if info.subject_pki.algorithm.algorithm.to_id_string() == "1.3.101.112" => Ok(key("ed25519", 256, None)),
        _ => Err(CsrError::UnsupportedKey),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x509::pem_encode;

    fn der(names: &[&str]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        params.serialize_request(&key).expect("csr").der().to_vec()
    }

    #[test]
    fn one_block_is_read_with_its_names_and_key() {
        let bytes = der(&["a.example", "10.0.0.1"]);
        let csr = parse_pem(&format!("\n  {}\n", pem_encode("CERTIFICATE REQUEST", &bytes))).expect("parses");
        assert_eq!(csr.der, bytes);
        assert_eq!(
            csr.names,
            [SubjectAltName::Dns("a.example".into()), SubjectAltName::Ip("10.0.0.1".parse().expect("ip"))]
        );
        assert_eq!(csr.key.curve.as_deref(), Some("p256"));
        assert!(parse_pem(&pem_encode("NEW CERTIFICATE REQUEST", &bytes)).is_ok(), "the legacy label");
    }

    /// Finding 2 of issue 21: two requests in one text were read differently by the verifier
    /// (first block of any label) and the signer (first `CERTIFICATE REQUEST` block).
    #[test]
    fn anything_but_exactly_one_request_block_is_refused() {
        let (a, b) = (der(&["tpm.example"]), der(&["soft.example"]));
        let two = format!("{}{}", pem_encode("NEW CERTIFICATE REQUEST", &a), pem_encode("CERTIFICATE REQUEST", &b));
        assert_eq!(parse_pem(&two), Err(CsrError::BlockCount(2)));
        let same_label_twice =
            format!("{}{}", pem_encode("CERTIFICATE REQUEST", &a), pem_encode("CERTIFICATE REQUEST", &b));
        assert_eq!(parse_pem(&same_label_twice), Err(CsrError::BlockCount(2)));
        let before = format!("subject=CN=x\n{}", pem_encode("CERTIFICATE REQUEST", &a));
        assert_eq!(parse_pem(&before), Err(CsrError::TextOutsideBlock));
        let after = format!("{}trailing", pem_encode("CERTIFICATE REQUEST", &a));
        assert_eq!(parse_pem(&after), Err(CsrError::TextOutsideBlock));
        assert_eq!(parse_pem(&pem_encode("CERTIFICATE", &a)), Err(CsrError::WrongLabel("CERTIFICATE".into())));
        assert_eq!(parse_pem("no pem here"), Err(CsrError::BlockCount(0)));
        let mut trailing = a.clone();
        trailing.push(0);
        assert_eq!(parse_pem(&pem_encode("CERTIFICATE REQUEST", &trailing)), Err(CsrError::TrailingBytes));
        let mut tampered = a.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(parse_pem(&pem_encode("CERTIFICATE REQUEST", &tampered)), Err(CsrError::BadSignature));
        assert_eq!(parse_pem(&"A".repeat(MAX_CSR_BYTES + 1)), Err(CsrError::TooLarge));
    }

    proptest::proptest! {
        /// Whatever the text, the reader answers (never panics), and what it accepts is one
        /// request whose DER is the block's.
        #[test]
        fn any_text_is_answered(prefix in ".{0,40}", cut in 0usize..600, noise in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let pem = pem_encode("CERTIFICATE REQUEST", &der(&["p.example"]));
            let cut = cut.min(pem.len());
            let _ = parse_pem(&format!("{prefix}{}", &pem[..cut]));
            let _ = parse_der(&noise);
            let mut flipped = der(&["q.example"]);
            if let Some(byte) = flipped.get_mut(cut % 300) { *byte ^= 0x40; }
            if let Ok(csr) = parse_der(&flipped) { proptest::prop_assert_eq!(csr.der, flipped); }
        }
    }
}
