//! The certificate vocabulary the PKI signs with and the rest of Trellis speaks: subjects,
//! names, key usages, a resolved profile, revocation reasons, key algorithms. Plain data; the
//! plugin contract's types (`trellis_core::plugins`) re-export these.

use serde::Serialize;

/// RFC 5280 CRLReason, the full set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RevocationReason {
    Unspecified,
    KeyCompromise,
    CaCompromise,
    AffiliationChanged,
    Superseded,
    CessationOfOperation,
    CertificateHold,
    RemoveFromCrl,
    PrivilegeWithdrawn,
    AaCompromise,
}

impl RevocationReason {
    pub const ALL: [RevocationReason; 10] = [
        RevocationReason::Unspecified,
        RevocationReason::KeyCompromise,
        RevocationReason::CaCompromise,
        RevocationReason::AffiliationChanged,
        RevocationReason::Superseded,
        RevocationReason::CessationOfOperation,
        RevocationReason::CertificateHold,
        RevocationReason::RemoveFromCrl,
        RevocationReason::PrivilegeWithdrawn,
        RevocationReason::AaCompromise,
    ];

    /// The camelCase name (as serde writes it), as APIs and the store spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RevocationReason::Unspecified => "unspecified",
            RevocationReason::KeyCompromise => "keyCompromise",
            RevocationReason::CaCompromise => "caCompromise",
            RevocationReason::AffiliationChanged => "affiliationChanged",
            RevocationReason::Superseded => "superseded",
            RevocationReason::CessationOfOperation => "cessationOfOperation",
            RevocationReason::CertificateHold => "certificateHold",
            RevocationReason::RemoveFromCrl => "removeFromCrl",
            RevocationReason::PrivilegeWithdrawn => "privilegeWithdrawn",
            RevocationReason::AaCompromise => "aaCompromise",
        }
    }

    /// Parses a name case-insensitively, also in snake_case (`key_compromise`).
    pub fn parse(text: &str) -> Option<RevocationReason> {
        let wanted: String = text.chars().filter(|c| *c != '_' && *c != '-').collect::<String>().to_ascii_lowercase();
        RevocationReason::ALL.into_iter().find(|r| r.as_str().to_ascii_lowercase() == wanted)
    }
}

/// When and why a certificate was revoked (`revoked_at` in seconds, when the CA said).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevocationInfo {
    pub revoked_at: Option<i64>,
    pub reason: RevocationReason,
}

/// A subject alternative name, classified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum SubjectAltName {
    Dns(String),
    Ip(std::net::IpAddr),
    Email(String),
    Uri(String),
}

impl std::fmt::Display for SubjectAltName {
    /// The text form 0.1 plugins receive: the bare name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubjectAltName::Dns(name) | SubjectAltName::Email(name) | SubjectAltName::Uri(name) => f.write_str(name),
            SubjectAltName::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Distinguished-name parts of a certificate's subject; `None` members are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    pub common_name: Option<String>,
    pub organization: Option<String>,
    pub organizational_unit: Option<String>,
    pub country: Option<String>,
    pub state: Option<String>,
    pub locality: Option<String>,
    /// Every other attribute as (dotted OID, value), in order.
    pub other: Vec<(String, String)>,
}

/// RFC 5280 key usages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KeyUsage {
    DigitalSignature,
    ContentCommitment,
    KeyEncipherment,
    DataEncipherment,
    KeyAgreement,
    KeyCertSign,
    CrlSign,
    EncipherOnly,
    DecipherOnly,
}

/// What a certificate is to contain, as the host resolved it from the request, the template
/// and the issuance policies. A connector must not widen it. (Serialized only into a pending
/// order, sealed: `issuance::pending`.)
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateProfile {
    pub subject: Subject,
    pub subject_alt_names: Vec<SubjectAltName>,
    pub key_usages: Vec<KeyUsage>,
    /// Dotted OIDs, e.g. `1.3.6.1.5.5.7.3.1`.
    pub extended_key_usages: Vec<String>,
    pub validity_days: u32,
}

/// The key the certificate will certify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectKey {
    /// `rsa`, `ec`, `ed25519`, `ed448`, else the algorithm OID.
    pub algorithm: String,
    pub size_bits: u32,
    /// `p256`, `p384`, `p521` for `ec`.
    pub curve: Option<String>,
    pub server_generated: bool,
}

/// Key algorithms of the CA keys the PKI creates and of the keys the plugin keystore generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyAlgorithm {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    Rsa2048,
    Rsa3072,
    Rsa4096,
}

impl KeyAlgorithm {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyAlgorithm::EcdsaP256 => "ecdsa-p256",
            KeyAlgorithm::EcdsaP384 => "ecdsa-p384",
            KeyAlgorithm::Ed25519 => "ed25519",
            KeyAlgorithm::Rsa2048 => "rsa2048",
            KeyAlgorithm::Rsa3072 => "rsa3072",
            KeyAlgorithm::Rsa4096 => "rsa4096",
        }
    }

    pub fn parse(text: &str) -> Option<KeyAlgorithm> {
        [
            KeyAlgorithm::EcdsaP256,
            KeyAlgorithm::EcdsaP384,
            KeyAlgorithm::Ed25519,
            KeyAlgorithm::Rsa2048,
            KeyAlgorithm::Rsa3072,
            KeyAlgorithm::Rsa4096,
        ]
        .into_iter()
        .find(|alg| alg.as_str() == text)
    }

    /// The JWS `alg` a signature with this key carries (the keystore signs this way).
    pub fn jws_algorithm(self) -> &'static str {
        match self {
            KeyAlgorithm::EcdsaP256 => "ES256",
            KeyAlgorithm::EcdsaP384 => "ES384",
            KeyAlgorithm::Ed25519 => "EdDSA",
            KeyAlgorithm::Rsa2048 | KeyAlgorithm::Rsa3072 | KeyAlgorithm::Rsa4096 => "RS256",
        }
    }
}
