//! Certificate templates: what a certificate of a kind contains and what keys it accepts. The
//! built-ins (the spec's "PKI core template" names) exist in every workspace and are read-only.

use serde::Serialize;

use crate::plugins::{KeyUsage, Subject};

pub const SERVER_AUTH: &str = "1.3.6.1.5.5.7.3.1";
pub const CLIENT_AUTH: &str = "1.3.6.1.5.5.7.3.2";
pub const CODE_SIGNING: &str = "1.3.6.1.5.5.7.3.3";
pub const EMAIL_PROTECTION: &str = "1.3.6.1.5.5.7.3.4";

/// Which kinds of subject alternative names a template accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SanRules {
    pub dns: bool,
    pub ip: bool,
    pub email: bool,
    pub uri: bool,
    /// At least one name is required.
    pub required: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    /// The built-in's name doubles as its id.
    pub id: String,
    pub name: String,
    pub description: String,
    pub built_in: bool,
    pub key_usages: Vec<KeyUsage>,
    pub extended_key_usages: Vec<String>,
    pub default_validity_days: u32,
    pub max_validity_days: u32,
    /// `ecdsa-p256`, `ecdsa-p384`, `ed25519`, `rsa`.
    pub allowed_key_algorithms: Vec<String>,
    pub min_rsa_bits: u32,
    pub san_rules: SanRules,
    pub subject_defaults: Subject,
    /// Days before expiry when auto-renewal renews.
    pub renewal_window_days: u32,
}

const ALL_KEYS: [&str; 4] = ["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa"];

fn built_in(
    name: &str,
    description: &str,
    key_usages: Vec<KeyUsage>,
    ekus: &[&str],
    default_validity_days: u32,
    max_validity_days: u32,
    san_rules: SanRules,
) -> Template {
    Template {
        id: name.into(),
        name: name.into(),
        description: description.into(),
        built_in: true,
        key_usages,
        extended_key_usages: ekus.iter().map(|s| s.to_string()).collect(),
        default_validity_days,
        max_validity_days,
        allowed_key_algorithms: ALL_KEYS.iter().map(|s| s.to_string()).collect(),
        min_rsa_bits: 2048,
        san_rules,
        subject_defaults: Subject::default(),
        renewal_window_days: 30,
    }
}

/// The read-only templates of every workspace.
pub fn built_ins() -> Vec<Template> {
    use KeyUsage::{DigitalSignature, KeyEncipherment};
    let names = |dns, ip, email, uri, required| SanRules { dns, ip, email, uri, required };
    vec![
        built_in(
            "web_server",
            "TLS server certificates (serverAuth) for DNS names and IP addresses",
            vec![DigitalSignature, KeyEncipherment],
            &[SERVER_AUTH],
            90,
            398,
            names(true, true, false, false, true),
        ),
        built_in(
            "client_auth",
            "TLS client certificates (clientAuth) for users and services",
            vec![DigitalSignature],
            &[CLIENT_AUTH],
            365,
            825,
            names(true, true, true, true, false),
        ),
        built_in(
            "code_signing",
            "Code signing (codeSigning)",
            vec![DigitalSignature],
            &[CODE_SIGNING],
            365,
            1095,
            names(false, false, true, true, false),
        ),
        built_in(
            "smime",
            "S/MIME e-mail signing and encryption (emailProtection)",
            vec![DigitalSignature, KeyEncipherment],
            &[EMAIL_PROTECTION],
            365,
            825,
            names(false, false, true, false, true),
        ),
        built_in(
            "device",
            "Device identity for mTLS (clientAuth and serverAuth), e.g. after TPM attestation",
            vec![DigitalSignature, KeyEncipherment],
            &[CLIENT_AUTH, SERVER_AUTH],
            365,
            1095,
            names(true, true, false, true, false),
        ),
    ]
}

/// A built-in template by name.
pub fn built_in_named(name: &str) -> Option<Template> {
    built_ins().into_iter().find(|t| t.id == name)
}
