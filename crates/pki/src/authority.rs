//! Internal CAs: created here as a root or an intermediate, or imported.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls_pki_types::{CertificateDer, PrivatePkcs8KeyDer};

use crate::vocabulary::{KeyAlgorithm, KeyUsage, Subject};
use crate::Entropy;
use crate::{extensions, serial, time, PkiError};

/// What a new root or intermediate is to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuthority {
    pub subject: Subject,
    pub key_algorithm: KeyAlgorithm,
    pub validity_days: u32,
    /// basicConstraints pathLenConstraint.
    pub path_length: Option<u8>,
}

/// An internal CA: its certificate and its private key (PKCS#8 DER). Seal the key before it is
/// stored; never return it.
#[derive(Clone)]
pub struct Authority {
    pub certificate_der: Vec<u8>,
    pub key_pkcs8: Vec<u8>,
    /// `None` for an imported key whose algorithm has no [`KeyAlgorithm`] name.
    pub key_algorithm: Option<KeyAlgorithm>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("certificate_der", &format_args!("{} bytes", self.certificate_der.len()))
            .field("key_pkcs8", &"<withheld>")
            .field("key_algorithm", &self.key_algorithm)
            .finish()
    }
}

pub(crate) fn signature_algorithm(algorithm: KeyAlgorithm) -> &'static rcgen::SignatureAlgorithm {
    match algorithm {
        KeyAlgorithm::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        KeyAlgorithm::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
        KeyAlgorithm::Ed25519 => &rcgen::PKCS_ED25519,
        KeyAlgorithm::Rsa2048 | KeyAlgorithm::Rsa3072 | KeyAlgorithm::Rsa4096 => &rcgen::PKCS_RSA_SHA256,
    }
}

pub(crate) fn distinguished_name(subject: &Subject) -> Result<rcgen::DistinguishedName, PkiError> {
    let mut name = rcgen::DistinguishedName::new();
    let parts = [
        (DnType::CountryName, &subject.country),
        (DnType::StateOrProvinceName, &subject.state),
        (DnType::LocalityName, &subject.locality),
        (DnType::OrganizationName, &subject.organization),
        (DnType::OrganizationalUnitName, &subject.organizational_unit),
        (DnType::CommonName, &subject.common_name),
    ];
    for (kind, value) in parts {
        let Some(value) = value else { continue };
        if kind == DnType::CountryName {
            // X.520: countryName is a PrintableString (two letters), never a UTF8String.
            let printable = rcgen::PrintableString::try_from(value.as_str())
                .map_err(|_| PkiError::InvalidProfile(format!("country `{value}` is not a two-letter code")))?;
            name.push(kind, rcgen::DnValue::PrintableString(printable));
        } else {
            name.push(kind, value.as_str());
        }
    }
    for (oid, value) in &subject.other {
        name.push(DnType::CustomDnType(crate::oid_arcs(oid)?), value.as_str());
    }
    Ok(name)
}

impl Authority {
    /// The key as rcgen signs with it.
    pub(crate) fn key_pair(&self) -> Result<KeyPair, PkiError> {
        let der = PrivatePkcs8KeyDer::from(self.key_pkcs8.as_slice());
        match self.key_algorithm {
            Some(algorithm) => KeyPair::from_pkcs8_der_and_sign_algo(&der, signature_algorithm(algorithm)),
            None => KeyPair::try_from(self.key_pkcs8.as_slice()),
        }
        .map_err(|_| PkiError::InvalidKey)
    }

    /// The CA ready to sign: certificate parsed and key loaded once. Keep it for as many
    /// certificates and CRLs as it signs; preparing costs a parse and a signature.
    pub fn signer(&self) -> Result<Signer, PkiError> {
        let key = self.key_pair()?;
        let params = CertificateParams::from_ca_cert_der(&CertificateDer::from(self.certificate_der.as_slice()))
            .map_err(|_| PkiError::InvalidCertificate)?;
        let not_after = params.not_after.unix_timestamp();
        // rcgen names an issuer by a certificate value; re-signing the parsed parameters builds
        // one with the CA's name and key identifier. The stored certificate is unchanged.
        let issuer = crate::guarded("CA certificate", || params.self_signed(&key))?;
        Ok(Signer { issuer, key, not_after })
    }

    /// A new self-signed root.
    pub fn create_root(spec: &NewAuthority, now: i64, entropy: &dyn Entropy) -> Result<Authority, PkiError> {
        let key_pkcs8 = new_key(spec.key_algorithm)?;
        let authority = Authority { certificate_der: Vec::new(), key_pkcs8, key_algorithm: Some(spec.key_algorithm) };
        let key = authority.key_pair()?;
        let params = ca_params(spec, now, now + days(spec.validity_days), entropy)?;
        let certificate = crate::guarded("CA certificate", || params.self_signed(&key))?;
        Ok(Authority { certificate_der: certificate.der().to_vec(), ..authority })
    }

    /// A new intermediate signed by `parent`; its validity never outlasts the parent's.
    pub fn create_intermediate(
        spec: &NewAuthority,
        parent: &Authority,
        now: i64,
        entropy: &dyn Entropy,
    ) -> Result<Authority, PkiError> {
        let parent = parent.signer()?;
        let parent_not_after = parent.not_after();
        if parent_not_after <= now {
            return Err(PkiError::AuthorityExpired(parent_not_after));
        }
        let key_pkcs8 = new_key(spec.key_algorithm)?;
        let authority = Authority { certificate_der: Vec::new(), key_pkcs8, key_algorithm: Some(spec.key_algorithm) };
        let key = authority.key_pair()?;
        let mut params = ca_params(spec, now, (now + days(spec.validity_days)).min(parent_not_after), entropy)?;
        params.use_authority_key_identifier_extension = true;
        let certificate = crate::guarded("CA certificate", || params.signed_by(&key, &parent.issuer, &parent.key))?;
        Ok(Authority { certificate_der: certificate.der().to_vec(), ..authority })
    }

    /// An existing CA: its certificate (the first PEM block) must say CA:TRUE and its public
    /// key must be the private key's.
    pub fn import(certificate_pem: &str, private_key_pem: &str) -> Result<Authority, PkiError> {
        let certificate_der = crate::x509::pem_certificates(certificate_pem)
            .and_then(|blocks| blocks.into_iter().next())
            .ok_or(PkiError::InvalidCertificate)?;
        let (_, parsed) =
            x509_parser::parse_x509_certificate(&certificate_der).map_err(|_| PkiError::InvalidCertificate)?;
        let is_ca = parsed.basic_constraints().ok().flatten().is_some_and(|bc| bc.value.ca);
        if !is_ca {
            return Err(PkiError::NotACa);
        }
        let key = KeyPair::from_pem(private_key_pem).map_err(|_| PkiError::InvalidKey)?;
        if key.public_key_der() != parsed.public_key().raw {
            return Err(PkiError::KeyMismatch);
        }
        let key_algorithm = [KeyAlgorithm::EcdsaP256, KeyAlgorithm::EcdsaP384, KeyAlgorithm::Ed25519]
            .into_iter()
            .find(|algorithm| key.is_compatible(signature_algorithm(*algorithm)))
            .or_else(|| rsa_size(&key));
        Ok(Authority { certificate_der, key_pkcs8: key.serialize_der(), key_algorithm })
    }
}

/// An internal CA prepared for signing ([`Authority::signer`]).
pub struct Signer {
    pub(crate) issuer: rcgen::Certificate,
    pub(crate) key: KeyPair,
    not_after: i64,
}

impl Signer {
    /// The CA certificate's validity end, seconds since the epoch.
    pub fn not_after(&self) -> i64 {
        self.not_after
    }
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("not_after", &self.not_after).field("key", &"<withheld>").finish()
    }
}

fn rsa_size(key: &KeyPair) -> Option<KeyAlgorithm> {
    use rsa::pkcs8::DecodePublicKey;
    use rsa::traits::PublicKeyParts;
    if !key.is_compatible(&rcgen::PKCS_RSA_SHA256) {
        return None;
    }
    let public = rsa::RsaPublicKey::from_public_key_der(&key.public_key_der()).ok()?;
    match public.size() * 8 {
        2048 => Some(KeyAlgorithm::Rsa2048),
        3072 => Some(KeyAlgorithm::Rsa3072),
        4096 => Some(KeyAlgorithm::Rsa4096),
        _ => None,
    }
}

fn days(n: u32) -> i64 {
    i64::from(n) * 86_400
}

fn new_key(algorithm: KeyAlgorithm) -> Result<Vec<u8>, PkiError> {
    crate::keys::generate_pkcs8(algorithm).map_err(|_| PkiError::InvalidKey)
}

fn ca_params(
    spec: &NewAuthority,
    not_before: i64,
    not_after: i64,
    entropy: &dyn Entropy,
) -> Result<CertificateParams, PkiError> {
    if spec.subject.common_name.as_deref().is_none_or(str::is_empty) {
        return Err(PkiError::InvalidProfile("a CA needs a subject common name".into()));
    }
    if spec.validity_days == 0 {
        return Err(PkiError::InvalidProfile("validityDays must be at least 1".into()));
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(&spec.subject)?;
    params.is_ca = IsCa::Ca(match spec.path_length {
        Some(length) => BasicConstraints::Constrained(length),
        None => BasicConstraints::Unconstrained,
    });
    // keyUsage through `extensions`: rcgen's encoding of it is not DER.
    params.custom_extensions =
        extensions::key_usage(&[KeyUsage::DigitalSignature, KeyUsage::KeyCertSign, KeyUsage::CrlSign])?
            .into_iter()
            .collect();
    params.not_before = time(not_before)?;
    params.not_after = time(not_after)?;
    params.serial_number = Some(serial(entropy));
    Ok(params)
}
