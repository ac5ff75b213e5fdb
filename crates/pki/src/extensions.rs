//! The certificate extensions the internal CA writes itself rather than through rcgen.
//!
//! rcgen 0.13 writes KeyUsage as a 9-bit BIT STRING whatever bits are set (`03 03 07 86 00`
//! where DER wants `03 02 01 86`: X.690 §11.2.2 forbids trailing zero bits in a named bit
//! list) and a leaf's BasicConstraints as `SEQUENCE { BOOLEAN FALSE }` (an explicitly encoded
//! default, X.690 §11.5). Strict parsers (Python `cryptography`, pkilint) refuse both, so these
//! are encoded here with RustCrypto's `x509-cert` types and handed to rcgen as custom
//! extensions; rcgen's own fields for them stay empty.

use der::asn1::Ia5String;
use der::Encode;
use rcgen::CustomExtension;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{AccessDescription, AuthorityInfoAccessSyntax, BasicConstraints, KeyUsage, KeyUsages};

use crate::vocabulary::KeyUsage as Usage;
use crate::PkiError;

const KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const AUTHORITY_INFO_ACCESS: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 1, 1];
const SUBJECT_KEY_IDENTIFIER: &[u64] = &[2, 5, 29, 14];

fn encoded(what: &str, value: &impl Encode) -> Result<Vec<u8>, PkiError> {
    value.to_der().map_err(|err| PkiError::Signing(format!("cannot encode {what}: {err}")))
}

/// keyUsage, critical (RFC 5280 §4.2.1.3: "conforming CAs SHOULD mark this extension as
/// critical"); `None` for no usages (the extension is then absent, never empty).
pub(crate) fn key_usage(usages: &[Usage]) -> Result<Option<CustomExtension>, PkiError> {
    let flags = usages.iter().fold(flagset::FlagSet::<KeyUsages>::default(), |flags, usage| {
        flags
            | match usage {
                Usage::DigitalSignature => KeyUsages::DigitalSignature,
                Usage::ContentCommitment => KeyUsages::NonRepudiation,
                Usage::KeyEncipherment => KeyUsages::KeyEncipherment,
                Usage::DataEncipherment => KeyUsages::DataEncipherment,
                Usage::KeyAgreement => KeyUsages::KeyAgreement,
                Usage::KeyCertSign => KeyUsages::KeyCertSign,
                Usage::CrlSign => KeyUsages::CRLSign,
                Usage::EncipherOnly => KeyUsages::EncipherOnly,
                Usage::DecipherOnly => KeyUsages::DecipherOnly,
            }
    });
    if flags.is_empty() {
        return Ok(None);
    }
    let mut extension = CustomExtension::from_oid_content(KEY_USAGE, encoded("keyUsage", &KeyUsage(flags))?);
    extension.set_criticality(true);
    Ok(Some(extension))
}

/// basicConstraints of an end-entity certificate: `cA` FALSE is the default and so absent,
/// leaving an empty SEQUENCE (`30 00`), marked critical as the CA/Browser Forum profiles do.
pub(crate) fn end_entity_basic_constraints() -> Result<CustomExtension, PkiError> {
    let value = BasicConstraints { ca: false, path_len_constraint: None };
    let mut extension = CustomExtension::from_oid_content(BASIC_CONSTRAINTS, encoded("basicConstraints", &value)?);
    extension.set_criticality(true);
    Ok(extension)
}

/// subjectKeyIdentifier of an end-entity key by RFC 7093 §2 method 1: the leftmost 160 bits of
/// the SHA-256 of the subjectPublicKey BIT STRING's value. (rcgen writes one only beside the
/// basicConstraints it encodes wrongly.)
pub(crate) fn subject_key_identifier(subject_public_key: &[u8]) -> Result<CustomExtension, PkiError> {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(subject_public_key);
    let value = der::asn1::OctetString::new(&digest[..20])
        .map_err(|err| PkiError::Signing(format!("cannot encode subjectKeyIdentifier: {err}")))?;
    Ok(CustomExtension::from_oid_content(SUBJECT_KEY_IDENTIFIER, encoded("subjectKeyIdentifier", &value)?))
}

/// authorityInfoAccess (RFC 5280 §4.2.2.1): where the issuing CA's certificate is
/// (caIssuers, so clients can build the chain) and its OCSP responder.
pub(crate) fn authority_info_access(ocsp: &str, ca_issuers: &str) -> Result<CustomExtension, PkiError> {
    let uri = |url: &str| {
        Ia5String::new(url)
            .map(GeneralName::UniformResourceIdentifier)
            .map_err(|_| PkiError::InvalidProfile(format!("`{url}` is not an ASCII URL")))
    };
    let value = AuthorityInfoAccessSyntax(vec![
        AccessDescription { access_method: const_oid::db::rfc5280::ID_AD_OCSP, access_location: uri(ocsp)? },
        AccessDescription {
            access_method: const_oid::db::rfc5280::ID_AD_CA_ISSUERS,
            access_location: uri(ca_issuers)?,
        },
    ]);
    Ok(CustomExtension::from_oid_content(AUTHORITY_INFO_ACCESS, encoded("authorityInfoAccess", &value)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(extension: Option<CustomExtension>) -> Vec<u8> {
        extension.map(|e| e.content().to_vec()).unwrap_or_default()
    }

    #[test]
    fn key_usage_bit_strings_are_minimal() {
        // digitalSignature, keyCertSign, cRLSign: bits 0, 5, 6 → one octet 0x86, one unused bit.
        let ca = [Usage::DigitalSignature, Usage::KeyCertSign, Usage::CrlSign];
        assert_eq!(content(key_usage(&ca).expect("encodes")), [0x03, 0x02, 0x01, 0x86]);
        // digitalSignature alone: 0x80, seven unused bits.
        assert_eq!(content(key_usage(&[Usage::DigitalSignature]).expect("encodes")), [0x03, 0x02, 0x07, 0x80]);
        // digitalSignature + keyEncipherment: 0xa0, five unused bits.
        let tls = [Usage::DigitalSignature, Usage::KeyEncipherment];
        assert_eq!(content(key_usage(&tls).expect("encodes")), [0x03, 0x02, 0x05, 0xa0]);
        // decipherOnly is bit 8: a second octet, seven unused bits.
        assert_eq!(
            content(key_usage(&[Usage::KeyAgreement, Usage::DecipherOnly]).expect("encodes")),
            [0x03, 0x03, 0x07, 0x08, 0x80]
        );
        assert!(key_usage(&[]).expect("encodes").is_none());
    }

    #[test]
    fn an_end_entity_basic_constraints_is_an_empty_sequence() {
        let extension = end_entity_basic_constraints().expect("encodes");
        assert_eq!(extension.content(), [0x30, 0x00]);
        assert!(extension.criticality());
    }
}
