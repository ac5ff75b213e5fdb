//! Roots, intermediates, imports and end-entity signing, checked by parsing what was produced.

use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::*;

use super::*;
use crate::vocabulary::{CertificateProfile, KeyAlgorithm, KeyUsage, Subject, SubjectAltName};
use crate::OsEntropy;

const NOW: i64 = 1_767_225_600; // 2026-01-01

fn spec(name: &str, key_algorithm: KeyAlgorithm, validity_days: u32) -> NewAuthority {
    NewAuthority {
        subject: Subject { common_name: Some(name.into()), organization: Some("Trellis".into()), ..Subject::default() },
        key_algorithm,
        validity_days,
        path_length: None,
    }
}

fn urls() -> IssuerUrls {
    IssuerUrls {
        crl: "http://pki.example/crl/ca_1.crl".into(),
        ocsp: "http://pki.example/ocsp/ca_1".into(),
        ca_issuers: "http://pki.example/ca/ca_1".into(),
    }
}

fn csr(name: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let params = rcgen::CertificateParams::new(vec![format!("ignored.{name}")]).expect("params");
    params.serialize_request(&key).expect("csr").der().to_vec()
}

fn profile(name: &str, validity_days: u32) -> CertificateProfile {
    CertificateProfile {
        subject: Subject { common_name: Some(name.into()), ..Subject::default() },
        subject_alt_names: vec![SubjectAltName::Dns(name.into()), SubjectAltName::Ip("10.0.0.7".parse().expect("ip"))],
        key_usages: vec![KeyUsage::DigitalSignature],
        extended_key_usages: vec!["1.3.6.1.5.5.7.3.1".into()],
        validity_days,
    }
}

fn parsed(der: &[u8]) -> X509Certificate<'_> {
    parse_x509_certificate(der).expect("certificate parses").1
}

fn key_ids(cert: &X509Certificate<'_>) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let mut ski = None;
    let mut aki = None;
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => ski = Some(id.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(id) => aki = id.key_identifier.as_ref().map(|k| k.0.to_vec()),
            _ => {}
        }
    }
    (ski, aki)
}

#[test]
fn roots_of_every_algorithm_are_self_signed_cas() {
    for algorithm in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::EcdsaP384, KeyAlgorithm::Ed25519, KeyAlgorithm::Rsa2048] {
        let root = Authority::create_root(&spec("Root", algorithm, 3650), NOW, &OsEntropy).expect("root");
        let cert = parsed(&root.certificate_der);
        assert!(cert.is_ca(), "{algorithm:?}");
        assert_eq!(cert.subject(), cert.issuer());
        cert.verify_signature(None).unwrap_or_else(|err| panic!("{algorithm:?}: {err}"));
        assert_eq!(cert.validity().not_after.timestamp() - NOW, 3650 * 86_400);
        assert!(format!("{root:?}").contains("<withheld>"), "Debug never prints the key");
    }
    let err = Authority::create_root(&spec("", KeyAlgorithm::EcdsaP256, 10), NOW, &OsEntropy).expect_err("no name");
    assert!(matches!(err, PkiError::InvalidProfile(_)));
}

#[test]
fn intermediates_chain_to_their_parent_and_never_outlive_it() {
    let root = Authority::create_root(&spec("Root", KeyAlgorithm::EcdsaP384, 365), NOW, &OsEntropy).expect("root");
    let intermediate =
        Authority::create_intermediate(&spec("Issuing", KeyAlgorithm::EcdsaP256, 3650), &root, NOW, &OsEntropy)
            .expect("intermediate");
    let (root_cert, cert) = (parsed(&root.certificate_der), parsed(&intermediate.certificate_der));
    assert!(cert.is_ca());
    assert_eq!(cert.issuer(), root_cert.subject());
    cert.verify_signature(Some(root_cert.public_key())).expect("signed by the root");
    assert_eq!(key_ids(&cert).1, key_ids(&root_cert).0, "AKI is the root's SKI");
    assert_eq!(cert.validity().not_after, root_cert.validity().not_after, "capped at the parent's expiry");

    let expired = Authority::create_intermediate(
        &spec("Late", KeyAlgorithm::EcdsaP256, 10),
        &root,
        NOW + 400 * 86_400,
        &OsEntropy,
    );
    assert!(matches!(expired, Err(PkiError::AuthorityExpired(_))));
}

#[test]
fn leaves_carry_the_profile_a_random_serial_and_revocation_pointers() {
    let root = Authority::create_root(&spec("Root", KeyAlgorithm::EcdsaP256, 3650), NOW, &OsEntropy).expect("root");
    let signed = sign_csr(
        &root.signer().expect("signer"),
        &csr("www.example.com"),
        CsrCheck::Verify,
        &profile("www.example.com", 90),
        &urls(),
        NOW,
        &OsEntropy,
    )
    .expect("signed");
    let (root_cert, cert) = (parsed(&root.certificate_der), parsed(&signed.certificate_der));
    cert.verify_signature(Some(root_cert.public_key())).expect("signed by the CA");
    assert!(!cert.is_ca());
    assert_eq!(cert.subject().to_string(), "CN=www.example.com", "the profile's subject, not the CSR's");
    let serial = cert.raw_serial();
    assert_eq!(serial.len(), 16);
    assert!(serial[0] & 0x80 == 0 && serial[0] != 0, "positive, minimally encoded");
    assert_eq!(signed.serial_number, hex::encode(serial));
    assert_eq!(cert.validity().not_after.timestamp() - NOW, 90 * 86_400);
    let (ski, aki) = key_ids(&cert);
    assert!(ski.is_some());
    assert_eq!(aki, key_ids(&root_cert).0);

    let mut names = Vec::new();
    let mut crl = Vec::new();
    let mut ocsp = Vec::new();
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    names.push(match name {
                        GeneralName::DNSName(dns) => (*dns).to_owned(),
                        GeneralName::IPAddress(ip) => format!("{ip:?}"),
                        other => format!("{other:?}"),
                    });
                }
            }
            ParsedExtension::CRLDistributionPoints(points) => {
                for point in points.iter() {
                    if let Some(x509_parser::extensions::DistributionPointName::FullName(full)) =
                        &point.distribution_point
                    {
                        crl.extend(full.iter().filter_map(|n| match n {
                            GeneralName::URI(uri) => Some((*uri).to_owned()),
                            _ => None,
                        }));
                    }
                }
            }
            ParsedExtension::AuthorityInfoAccess(aia) => {
                for description in &aia.accessdescs {
                    if let GeneralName::URI(uri) = description.access_location {
                        ocsp.push((description.access_method.to_id_string(), uri.to_owned()));
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!(names, ["www.example.com", "[10, 0, 0, 7]"], "the profile's names, not the CSR's");
    assert_eq!(crl, [urls().crl]);
    assert_eq!(
        ocsp,
        [("1.3.6.1.5.5.7.48.1".to_owned(), urls().ocsp), ("1.3.6.1.5.5.7.48.2".to_owned(), urls().ca_issuers)],
        "the OCSP responder and the issuing CA's certificate (caIssuers)"
    );

    // Validity never outlasts the CA; a tampered CSR is refused.
    let long = sign_csr(
        &root.signer().expect("signer"),
        &csr("a"),
        CsrCheck::Verify,
        &profile("a.example", 40_000),
        &urls(),
        NOW,
        &OsEntropy,
    )
    .expect("signed");
    assert_eq!(parsed(&long.certificate_der).validity().not_after, root_cert.validity().not_after);
    let mut tampered = csr("b");
    let last = tampered.len() - 1;
    tampered[last] ^= 0x01;
    let refused = sign_csr(
        &root.signer().expect("signer"),
        &tampered,
        CsrCheck::Verify,
        &profile("b.example", 30),
        &urls(),
        NOW,
        &OsEntropy,
    );
    assert_eq!(refused.expect_err("bad signature"), PkiError::InvalidCsr);
}

#[test]
fn imports_need_a_ca_certificate_and_its_own_key() {
    let root = Authority::create_root(&spec("Imported", KeyAlgorithm::EcdsaP256, 365), NOW, &OsEntropy).expect("root");
    let certificate_pem = crate::x509::pem_encode("CERTIFICATE", &root.certificate_der);
    let key_pem = crate::x509::pem_encode("PRIVATE KEY", &root.key_pkcs8);
    let imported = Authority::import(&certificate_pem, &key_pem).expect("import");
    assert_eq!(imported.key_algorithm, Some(KeyAlgorithm::EcdsaP256));
    let leaf = sign_csr(
        &imported.signer().expect("signer"),
        &csr("c"),
        CsrCheck::Verify,
        &profile("c.example", 30),
        &urls(),
        NOW,
        &OsEntropy,
    )
    .expect("signs");
    parsed(&leaf.certificate_der).verify_signature(Some(parsed(&root.certificate_der).public_key())).expect("chains");

    let other = Authority::create_root(&spec("Other", KeyAlgorithm::EcdsaP256, 365), NOW, &OsEntropy).expect("root");
    let other_key = crate::x509::pem_encode("PRIVATE KEY", &other.key_pkcs8);
    assert_eq!(Authority::import(&certificate_pem, &other_key).expect_err("mismatch"), PkiError::KeyMismatch);
    let leaf_pem = crate::x509::pem_encode("CERTIFICATE", &leaf.certificate_der);
    assert_eq!(Authority::import(&leaf_pem, &key_pem).expect_err("not a CA"), PkiError::NotACa);
    assert_eq!(Authority::import(&certificate_pem, "junk").expect_err("no key"), PkiError::InvalidKey);
}

#[test]
fn crls_are_signed_by_the_ca_and_list_every_revocation() {
    use crate::vocabulary::RevocationReason;
    let root = Authority::create_root(&spec("Root", KeyAlgorithm::EcdsaP256, 3650), NOW, &OsEntropy).expect("root");
    let a = sign_csr(
        &root.signer().expect("signer"),
        &csr("a"),
        CsrCheck::Verify,
        &profile("a.example", 30),
        &urls(),
        NOW,
        &OsEntropy,
    )
    .expect("a");
    let b = sign_csr(
        &root.signer().expect("signer"),
        &csr("b"),
        CsrCheck::Verify,
        &profile("b.example", 30),
        &urls(),
        NOW,
        &OsEntropy,
    )
    .expect("b");
    let entries = [
        RevokedEntry {
            serial_number: a.serial_number.clone(),
            revoked_at: NOW + 60,
            reason: RevocationReason::KeyCompromise,
        },
        RevokedEntry {
            serial_number: b.serial_number.clone(),
            revoked_at: NOW + 120,
            reason: RevocationReason::Unspecified,
        },
    ];
    let der = sign_crl(&root.signer().expect("signer"), &entries, 7, NOW + 180, NOW + 180 + 86_400).expect("crl");
    let (_, crl) = x509_parser::revocation_list::CertificateRevocationList::from_der(&der).expect("CRL parses");
    crl.verify_signature(parsed(&root.certificate_der).public_key()).expect("signed by the CA");
    assert_eq!(crl.crl_number().map(|n| n.to_string()), Some("7".into()));
    assert_eq!(crl.next_update().map(|t| t.timestamp()), Some(NOW + 180 + 86_400));
    let listed: Vec<_> = crl
        .iter_revoked_certificates()
        .map(|r| (hex::encode(r.raw_serial()), r.revocation_date.timestamp(), r.reason_code().map(|(_, c)| c.0)))
        .collect();
    assert_eq!(
        listed,
        [(a.serial_number, NOW + 60, Some(1)), (b.serial_number, NOW + 120, None)],
        "reasons as RFC 5280 codes; unspecified is omitted"
    );
    assert!(matches!(
        sign_crl(&root.signer().expect("signer"), &entries, 8, NOW, NOW),
        Err(PkiError::InvalidProfile(_))
    ));
}

/// The DER of the extension `oid` (its extnValue contents) in `cert`, and whether it is critical.
fn extension_value(cert: &X509Certificate<'_>, oid: &str) -> Option<(Vec<u8>, bool)> {
    cert.extensions().iter().find(|e| e.oid.to_id_string() == oid).map(|e| (e.value.to_vec(), e.critical))
}

/// Finding 10 of issue 21: rcgen wrote KeyUsage with a trailing zero octet and a leaf's
/// BasicConstraints with an explicit `cA FALSE`, which strict parsers refuse.
#[test]
fn key_usage_and_basic_constraints_are_der() {
    let root = Authority::create_root(&spec("Root", KeyAlgorithm::EcdsaP256, 3650), NOW, &OsEntropy).expect("root");
    let intermediate = Authority::create_intermediate(
        &NewAuthority { path_length: Some(0), ..spec("Issuing", KeyAlgorithm::EcdsaP384, 1000) },
        &root,
        NOW,
        &OsEntropy,
    )
    .expect("intermediate");
    for ca in [&root, &intermediate] {
        let cert = parsed(&ca.certificate_der);
        assert_eq!(extension_value(&cert, "2.5.29.15"), Some((vec![0x03, 0x02, 0x01, 0x86], true)), "keyUsage");
    }
    assert_eq!(
        extension_value(&parsed(&intermediate.certificate_der), "2.5.29.19"),
        Some((vec![0x30, 0x06, 0x01, 0x01, 0xff, 0x02, 0x01, 0x00], true)),
        "cA TRUE, pathLenConstraint 0"
    );
    let leaf = sign_csr(
        &intermediate.signer().expect("signer"),
        &csr("d"),
        CsrCheck::Verify,
        &profile("d.example", 30),
        &urls(),
        NOW,
        &OsEntropy,
    )
    .expect("signed");
    let cert = parsed(&leaf.certificate_der);
    assert_eq!(extension_value(&cert, "2.5.29.19"), Some((vec![0x30, 0x00], true)), "cA FALSE is the default");
    assert_eq!(extension_value(&cert, "2.5.29.15"), Some((vec![0x03, 0x02, 0x07, 0x80], true)), "digitalSignature");
    let no_usages = CertificateProfile { key_usages: Vec::new(), ..profile("e.example", 30) };
    let leaf =
        sign_csr(&root.signer().expect("signer"), &csr("e"), CsrCheck::Verify, &no_usages, &urls(), NOW, &OsEntropy)
            .expect("signed");
    assert_eq!(extension_value(&parsed(&leaf.certificate_der), "2.5.29.15"), None, "absent, never empty");
}

/// Finding 8 of issue 21: an OID DER cannot encode made rcgen panic inside the signer.
#[test]
fn object_identifiers_der_cannot_encode_are_refused_not_signed() {
    let root = Authority::create_root(&spec("Root", KeyAlgorithm::EcdsaP256, 3650), NOW, &OsEntropy).expect("root");
    for oid in ["5.1", "1.40", "0.99.1", "1", "", "1..2", "1.3.-6", "1.3.06", "1.3.6.1.5.5.7.3.1 "] {
        let bad = CertificateProfile { extended_key_usages: vec![oid.into()], ..profile("f.example", 30) };
        let refused =
            sign_csr(&root.signer().expect("signer"), &csr("f"), CsrCheck::Verify, &bad, &urls(), NOW, &OsEntropy);
        assert!(matches!(refused, Err(PkiError::InvalidProfile(_))), "{oid:?}: {refused:?}");
    }
    for oid in ["2.999.1", "1.39.7", "0.0", "1.3.6.1.5.5.7.3.2"] {
        assert!(oid_arcs(oid).is_ok(), "{oid}");
    }
}

/// Finding 9 of issue 21: a CRL's authorityKeyIdentifier is the CA certificate's own SKI,
/// also for an imported CA whose SKI was not derived by SHA-256 (openssl uses SHA-1).
#[test]
fn an_imported_cas_crl_names_the_cas_own_key_identifier() {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(rcgen::DnType::CommonName, "Imported with its own SKI");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(vec![0x5a; 20]);
    let certificate = params.self_signed(&key).expect("CA");
    let imported = Authority::import(&certificate.pem(), &key.serialize_pem()).expect("import");
    let der = sign_crl(&imported.signer().expect("signer"), &[], 1, NOW, NOW + 86_400).expect("crl");
    let (_, crl) = x509_parser::revocation_list::CertificateRevocationList::from_der(&der).expect("CRL parses");
    let aki = crl.extensions().iter().find_map(|e| match e.parsed_extension() {
        ParsedExtension::AuthorityKeyIdentifier(id) => id.key_identifier.as_ref().map(|k| k.0.to_vec()),
        _ => None,
    });
    assert_eq!(aki, Some(vec![0x5a; 20]));
}
