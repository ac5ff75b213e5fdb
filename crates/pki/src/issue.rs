//! Signing end-entity certificates under an internal CA.

use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, IsCa, SanType};

use crate::authority::{distinguished_name, Signer};
use crate::vocabulary::{CertificateProfile, KeyUsage, SubjectAltName};
use crate::Entropy;
use crate::{extensions, serial, time, PkiError};

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

/// What a key can do, as keyUsage may claim it: RFC 5480 (EC) and RFC 8410 (Ed25519) forbid
/// the encipherment usages an RSA key may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyFamily {
    Rsa,
    Ec,
    EdDsa,
}

impl KeyFamily {
    fn of(algorithm_oid: &str) -> KeyFamily {
        match algorithm_oid {
            "1.2.840.113549.1.1.1" => KeyFamily::Rsa,
            "1.3.101.112" | "1.3.101.113" => KeyFamily::EdDsa,
            _ => KeyFamily::Ec,
        }
    }

    fn permits(self, usage: KeyUsage) -> bool {
        match (self, usage) {
            (KeyFamily::Rsa, KeyUsage::KeyAgreement | KeyUsage::EncipherOnly | KeyUsage::DecipherOnly) => false,
            (KeyFamily::Rsa, _) => true,
            (KeyFamily::Ec, KeyUsage::KeyEncipherment | KeyUsage::DataEncipherment) => false,
            (KeyFamily::Ec, _) => true,
            (KeyFamily::EdDsa, usage) => {
                matches!(usage, KeyUsage::DigitalSignature | KeyUsage::ContentCommitment)
            }
        }
    }
}

/// The public key a CSR certifies, its subjectPublicKey bits (for the key identifier) and family.
fn csr_public_key(
    csr_der: &[u8],
    check: CsrCheck,
) -> Result<(rcgen::SubjectPublicKeyInfo, Vec<u8>, KeyFamily), PkiError> {
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
    Ok((key, info.subject_public_key.data.to_vec(), KeyFamily::of(&info.algorithm.algorithm.to_id_string())))
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
    let (public_key, public_key_bits, family) = csr_public_key(csr_der, check)?;
    // A template names usages for every key it accepts (web_server: digitalSignature and
    // keyEncipherment); each certificate carries those its key can have.
    let key_usages: Vec<KeyUsage> = profile.key_usages.iter().copied().filter(|usage| family.permits(*usage)).collect();
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
        extensions::key_usage(&key_usages)?,
        Some(extensions::authority_info_access(&urls.ocsp, &urls.ca_issuers)?),
    ]
    .into_iter()
    .flatten()
    .collect();
    let certificate =
        crate::guarded("certificate", || params.signed_by(&public_key, &authority.issuer, &authority.key))?;
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
    crate::oid_arcs(oid).map(ExtendedKeyUsagePurpose::Other)
}
