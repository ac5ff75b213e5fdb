//! Test certificates made with rcgen: any name, validity, key type and usage.

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, SanType, SerialNumber};
use time::{Duration, OffsetDateTime};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    P256,
    P384,
    Ed25519,
}

/// A certificate as a TLS server serves it.
#[derive(Debug, Clone)]
pub struct Served {
    /// The leaf, PEM.
    pub pem: String,
    /// Leaf first, DER.
    pub chain: Vec<Vec<u8>>,
    pub key_pkcs8: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub common_name: String,
    pub dns_names: Vec<String>,
    pub emails: Vec<String>,
    /// Days from now; negative means in the past.
    pub not_before_days: i64,
    pub not_after_days: i64,
    pub key: Key,
    pub usages: Vec<ExtendedKeyUsagePurpose>,
    pub issuer_cn: Option<String>,
}

impl Spec {
    pub fn tls(common_name: &str) -> Spec {
        Spec {
            common_name: common_name.to_string(),
            dns_names: vec![common_name.to_string()],
            emails: Vec::new(),
            not_before_days: -1,
            not_after_days: 365,
            key: Key::P256,
            usages: vec![ExtendedKeyUsagePurpose::ServerAuth],
            issuer_cn: None,
        }
    }

    pub fn expiring_in(mut self, days: i64) -> Spec {
        self.not_after_days = days;
        self.not_before_days = self.not_before_days.min(days - 1);
        self
    }

    pub fn key(mut self, key: Key) -> Spec {
        self.key = key;
        self
    }

    pub fn usages(mut self, usages: Vec<ExtendedKeyUsagePurpose>) -> Spec {
        self.usages = usages;
        self
    }

    pub fn issued_by(mut self, issuer_cn: &str) -> Spec {
        self.issuer_cn = Some(issuer_cn.to_string());
        self
    }

    pub fn emails(mut self, emails: &[&str]) -> Spec {
        self.emails = emails.iter().map(|e| e.to_string()).collect();
        self.dns_names.clear();
        self
    }

    /// The certificate as (PEM, DER).
    pub fn build(&self) -> (String, Vec<u8>) {
        let served = self.build_served();
        (served.pem, served.chain[0].clone())
    }

    /// The certificate with what a TLS server needs to serve it: the chain (leaf, then its
    /// issuer when `issued_by`), DER, and the leaf's PKCS#8 key.
    pub fn build_served(&self) -> Served {
        let algorithm = match self.key {
            Key::P256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Key::P384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            Key::Ed25519 => &rcgen::PKCS_ED25519,
        };
        let key = KeyPair::generate_for(algorithm).expect("key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, self.common_name.clone());
        params.distinguished_name.push(DnType::OrganizationName, "Trellis Tests");
        params.subject_alt_names = self
            .dns_names
            .iter()
            .map(|d| SanType::DnsName(d.clone().try_into().expect("dns")))
            .chain(self.emails.iter().map(|e| SanType::Rfc822Name(e.clone().try_into().expect("email"))))
            .collect();
        let now = OffsetDateTime::now_utc();
        params.not_before = now + Duration::days(self.not_before_days);
        params.not_after = now + Duration::days(self.not_after_days);
        params.extended_key_usages = self.usages.clone();
        let mut serial = [0u8; 16];
        let nanos = now.unix_timestamp_nanos().to_be_bytes();
        serial.copy_from_slice(&nanos[..16]);
        serial[0] &= 0x7f;
        let cn_hash = sha2_digest(self.common_name.as_bytes());
        for (s, h) in serial.iter_mut().zip(cn_hash.iter()) {
            *s ^= h & 0x7f;
        }
        params.serial_number = Some(SerialNumber::from(serial.to_vec()));
        let (cert, issuer) = match &self.issuer_cn {
            None => (params.self_signed(&key).expect("self-signed"), None),
            Some(issuer_cn) => {
                let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("ca key");
                let mut ca_params = CertificateParams::default();
                ca_params.distinguished_name.push(DnType::CommonName, issuer_cn.clone());
                ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                let ca = ca_params.self_signed(&ca_key).expect("ca");
                (params.signed_by(&key, &ca, &ca_key).expect("signed"), Some(ca))
            }
        };
        let mut chain = vec![cert.der().to_vec()];
        chain.extend(issuer.map(|ca| ca.der().to_vec()));
        Served { pem: cert.pem(), chain, key_pkcs8: key.serialize_der() }
    }

    pub fn pem(&self) -> String {
        self.build().0
    }
}

fn sha2_digest(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}

/// An RSA certificate made with the openssl command line (rcgen cannot generate RSA keys).
pub fn rsa_pem(common_name: &str, bits: u32) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    let status = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", &format!("rsa:{bits}"), "-nodes", "-days", "90", "-subj"])
        .arg(format!("/CN={common_name}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl is installed (apt-get install openssl)");
    assert!(status.success(), "openssl failed");
    std::fs::read_to_string(cert).expect("cert")
}

/// A self-signed CA certificate (basicConstraints CA:TRUE), PEM, valid from `not_before_days`
/// to `not_after_days` from now.
pub fn ca_pem(common_name: &str, not_before_days: i64, not_after_days: i64) -> String {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, common_name.to_string());
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let now = OffsetDateTime::now_utc();
    params.not_before = now + Duration::days(not_before_days);
    params.not_after = now + Duration::days(not_after_days);
    params.self_signed(&key).expect("self-signed CA").pem()
}
