//! Signing end-entity certificates under an internal CA.

use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, IsCa, SanType};

use super::authority::{distinguished_name, Signer};
use super::{extensions, serial, time, PkiError};
use crate::clock::Entropy;
use crate::plugins::{CertificateProfile, SubjectAltName};

/// Where relying parties find this CA's certificate and revocation status (this service's
/// public URLs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerUrls {
    pub crl: String,
    pub ocsp: String,
    /// The issuing CA's certificate (authorityInfoAccess caIssuers).
    pub ca_issuers: String,
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

/// The public key a CSR certifies, and its subjectPublicKey bits (for the key identifier).
fn csr_public_key(csr_der: &[u8], check: CsrCheck) -> Result<(rcgen::SubjectPublicKeyInfo, Vec<u8>), PkiError> {
    use x509_parser::prelude::{FromDer, X509CertificationRequest};
    let (rest, csr) = X509CertificationRequest::from_der(csr_der).map_err(|_| PkiError::InvalidCsr)?;
    if !rest.is_empty() {
        return Err(PkiError::InvalidCsr);
    }
    if check == CsrCheck::Verify {
        csr.verify_signature().map_err(|_| PkiError::InvalidCsr)?;
    }
    let info = &csr.certification_request_info.subject_pki;
    let key = rcgen::SubjectPublicKeyInfo::from_der(info.raw).map_err(|_| PkiError::InvalidCsr)?;
    Ok((key, info.subject_public_key.data.to_vec()))
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
    let (public_key, public_key_bits) = csr_public_key(csr_der, check)?;
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
    // basicConstraints and keyUsage are written by `extensions` (rcgen's encodings are not DER).
    params.is_ca = IsCa::NoCa;
    params.extended_key_usages =
        profile.extended_key_usages.iter().map(|oid| extended_key_usage(oid)).collect::<Result<_, _>>()?;
    params.not_before = time(now)?;
    params.not_after = time((now + i64::from(profile.validity_days) * 86_400).min(ca_not_after))?;
    let serial = serial(entropy);
    let serial_number = hex::encode(serial.to_bytes());
    params.serial_number = Some(serial);
    params.use_authority_key_identifier_extension = true;
    params.crl_distribution_points = vec![rcgen::CrlDistributionPoint { uris: vec![urls.crl.clone()] }];
    params.custom_extensions = [
        Some(extensions::end_entity_basic_constraints()?),
        Some(extensions::subject_key_identifier(&public_key_bits)?),
        extensions::key_usage(&profile.key_usages)?,
        Some(extensions::authority_info_access(&urls.ocsp, &urls.ca_issuers)?),
    ]
    .into_iter()
    .flatten()
    .collect();
    let certificate =
        super::guarded("certificate", || params.signed_by(&public_key, &authority.issuer, &authority.key))?;
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

fn extended_key_usage(oid: &str) -> Result<ExtendedKeyUsagePurpose, PkiError> {
    super::oid_arcs(oid).map(ExtendedKeyUsagePurpose::Other)
}
