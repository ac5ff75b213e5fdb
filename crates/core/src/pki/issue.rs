//! Signing end-entity certificates under an internal CA.

use rcgen::{CertificateParams, CustomExtension, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose, SanType};

use super::authority::{distinguished_name, Signer};
use super::{serial, time, PkiError};
use crate::clock::Entropy;
use crate::plugins::{CertificateProfile, KeyUsage, SubjectAltName};

/// Where relying parties find this CA's revocation status (this service's public URLs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerUrls {
    pub crl: String,
    pub ocsp: String,
}

/// A signed certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub certificate_der: Vec<u8>,
    /// Lowercase hex, as the inventory stores serials.
    pub serial_number: String,
}

/// Whether [`sign_csr`] checks the CSR's self-signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsrCheck {
    /// Verify it (proof of possession of the key).
    Verify,
    /// The caller verified exactly these bytes already (the issuance use case does, and
    /// `pki-core` signs only the bytes of that request): one ECDSA/RSA verification per
    /// issuance instead of two.
    AlreadyVerified,
}

/// The public key a CSR certifies.
fn csr_public_key(csr_der: &[u8], check: CsrCheck) -> Result<rcgen::SubjectPublicKeyInfo, PkiError> {
    use x509_parser::prelude::{FromDer, X509CertificationRequest};
    let (rest, csr) = X509CertificationRequest::from_der(csr_der).map_err(|_| PkiError::InvalidCsr)?;
    if !rest.is_empty() {
        return Err(PkiError::InvalidCsr);
    }
    if check == CsrCheck::Verify {
        csr.verify_signature().map_err(|_| PkiError::InvalidCsr)?;
    }
    rcgen::SubjectPublicKeyInfo::from_der(csr.certification_request_info.subject_pki.raw)
        .map_err(|_| PkiError::InvalidCsr)
}

/// Signs the key of `csr_der` under `profile`, which the host resolved (template, request,
/// policies): the CSR's own names and extensions are not copied. Validity starts at `now` and
/// never outlasts the CA.
pub fn sign_csr(
    authority: &Signer,
    csr_der: &[u8],
    check: CsrCheck,
    profile: &CertificateProfile,
    urls: &IssuerUrls,
    now: i64,
    entropy: &dyn Entropy,
) -> Result<Signed, PkiError> {
    let public_key = csr_public_key(csr_der, check)?;
    let ca_not_after = authority.not_after();
    if ca_not_after <= now {
        return Err(PkiError::AuthorityExpired(ca_not_after));
    }
    if profile.validity_days == 0 {
        return Err(PkiError::InvalidProfile("the validity must be at least one day".into()));
    }
    if profile.subject.common_name.is_none() && profile.subject_alt_names.is_empty() {
        return Err(PkiError::InvalidProfile("a certificate needs a common name or a subject alternative name".into()));
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(&profile.subject)?;
    params.subject_alt_names = profile.subject_alt_names.iter().map(san).collect::<Result<_, _>>()?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = profile.key_usages.iter().map(|usage| key_usage(*usage)).collect();
    params.extended_key_usages =
        profile.extended_key_usages.iter().map(|oid| extended_key_usage(oid)).collect::<Result<_, _>>()?;
    params.not_before = time(now)?;
    params.not_after = time((now + i64::from(profile.validity_days) * 86_400).min(ca_not_after))?;
    let serial = serial(entropy);
    let serial_number = hex::encode(serial.to_bytes());
    params.serial_number = Some(serial);
    params.use_authority_key_identifier_extension = true;
    params.crl_distribution_points = vec![rcgen::CrlDistributionPoint { uris: vec![urls.crl.clone()] }];
    params.custom_extensions = vec![ocsp_access(&urls.ocsp)];
    let certificate = params
        .signed_by(&public_key, &authority.issuer, &authority.key)
        .map_err(|err| PkiError::Signing(err.to_string()))?;
    Ok(Signed { certificate_der: certificate.der().to_vec(), serial_number })
}

fn ia5(text: &str) -> Result<rcgen::Ia5String, PkiError> {
    rcgen::Ia5String::try_from(text).map_err(|_| PkiError::InvalidProfile(format!("`{text}` is not ASCII")))
}

fn san(name: &SubjectAltName) -> Result<SanType, PkiError> {
    Ok(match name {
        SubjectAltName::Dns(dns) => SanType::DnsName(ia5(dns)?),
        SubjectAltName::Ip(ip) => SanType::IpAddress(*ip),
        SubjectAltName::Email(mailbox) => SanType::Rfc822Name(ia5(mailbox)?),
        SubjectAltName::Uri(uri) => SanType::URI(ia5(uri)?),
    })
}

fn key_usage(usage: KeyUsage) -> KeyUsagePurpose {
    match usage {
        KeyUsage::DigitalSignature => KeyUsagePurpose::DigitalSignature,
        KeyUsage::ContentCommitment => KeyUsagePurpose::ContentCommitment,
        KeyUsage::KeyEncipherment => KeyUsagePurpose::KeyEncipherment,
        KeyUsage::DataEncipherment => KeyUsagePurpose::DataEncipherment,
        KeyUsage::KeyAgreement => KeyUsagePurpose::KeyAgreement,
        KeyUsage::KeyCertSign => KeyUsagePurpose::KeyCertSign,
        KeyUsage::CrlSign => KeyUsagePurpose::CrlSign,
        KeyUsage::EncipherOnly => KeyUsagePurpose::EncipherOnly,
        KeyUsage::DecipherOnly => KeyUsagePurpose::DecipherOnly,
    }
}

fn extended_key_usage(oid: &str) -> Result<ExtendedKeyUsagePurpose, PkiError> {
    let arcs = oid
        .split('.')
        .map(str::parse::<u64>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| PkiError::InvalidProfile(format!("`{oid}` is not a dotted OID")))?;
    Ok(ExtendedKeyUsagePurpose::Other(arcs))
}

/// DER length octets.
fn der_length(length: usize) -> Vec<u8> {
    match length {
        0..=0x7f => vec![length as u8],
        0x80..=0xff => vec![0x81, length as u8],
        _ => vec![0x82, (length >> 8) as u8, length as u8],
    }
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    [&[tag][..], &der_length(content.len()), content].concat()
}

/// authorityInfoAccess (RFC 5280 §4.2.2.1) with one OCSP access description.
fn ocsp_access(url: &str) -> CustomExtension {
    const ID_AD_OCSP: &[u8] = &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01];
    // accessLocation is a GeneralName: uniformResourceIdentifier is [6] IMPLICIT IA5String.
    let description = der(0x30, &[ID_AD_OCSP, &der(0x86, url.as_bytes())].concat());
    let content = der(0x30, &description);
    CustomExtension::from_oid_content(&[1, 3, 6, 1, 5, 5, 7, 1, 1], content)
}
