//! From an issue request body to what is signed: the template, the CSR (given and verified, or
//! made here around a generated key), the names, and the profile.

use std::net::IpAddr;

use super::templates::Template;
use crate::cas::CertificateAuthority;
use crate::error::{Error, Result};
use crate::plugins::{
    generate_pkcs8, CertificateProfile, EvaluationRequest, IssuanceSource, KeyAlgorithm, Requester, Subject,
    SubjectAltName, SubjectKey,
};
use crate::validation::optional_text;
use serde_json::Value;
use trellis_pki::csr;

const MAX_SANS: usize = 100;

/// The issue body as the API received it (stored as is by approval requests).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssueInput {
    pub ca_id: Option<i64>,
    pub ca_type: Option<String>,
    pub csr: Option<String>,
    pub common_name: Option<String>,
    pub subject_alt_names: Vec<String>,
    pub template_id: Option<String>,
    pub subject: SubjectInput,
    pub validity_days: Option<u32>,
    pub key_algorithm: Option<String>,
    pub auto_renewal: Option<bool>,
    pub metadata: Option<Value>,
}

#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectInput {
    pub organization: Option<String>,
    pub organizational_unit: Option<String>,
    pub country: Option<String>,
    pub state: Option<String>,
    pub locality: Option<String>,
}

/// Everything decided before policies and the CA see the request.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub template: String,
    pub csr_der: Vec<u8>,
    pub key: SubjectKey,
    /// PKCS#8 PEM of the key generated here (none when the caller sent a CSR).
    pub private_key_pem: Option<String>,
    pub profile: CertificateProfile,
    pub auto_renewal: bool,
    /// The template's renewal window.
    pub renewal_window_days: u32,
    pub metadata: Option<Value>,
}

impl PreparedRequest {
    pub fn evaluation(
        &self,
        ca: &CertificateAuthority,
        requester: &Requester,
        source: IssuanceSource,
    ) -> EvaluationRequest {
        EvaluationRequest {
            ca_type: ca.ca_type.clone(),
            ca_id: ca.id.to_string(),
            template: Some(self.template.clone()),
            subject: self.profile.subject.clone(),
            subject_alt_names: self.profile.subject_alt_names.clone(),
            key: self.key.clone(),
            validity_days: self.profile.validity_days,
            requester: requester.clone(),
            source,
        }
    }
}

/// A name as the API sends it, classified: IP addresses, e-mail addresses, URIs, DNS names.
pub fn classify(name: &str) -> Result<SubjectAltName> {
    let name = name.trim();
    if let Ok(ip) = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(SubjectAltName::Ip(ip));
    }
    if name.contains("://") || name.starts_with("urn:") {
        return match url::Url::parse(name) {
            Ok(_) if name.is_ascii() => Ok(SubjectAltName::Uri(name.to_owned())),
            _ => Err(Error::invalid_field("subjectAltNames", format!("`{name}` is not a valid URI"))),
        };
    }
    if let Some((local, domain)) = name.split_once('@') {
        if !local.is_empty() && dns_name(domain) && name.is_ascii() && !name.chars().any(char::is_whitespace) {
            return Ok(SubjectAltName::Email(name.to_owned()));
        }
        return Err(Error::invalid_field("subjectAltNames", format!("`{name}` is not a valid e-mail address")));
    }
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    if dns_name(lower.strip_prefix("*.").unwrap_or(&lower)) {
        return Ok(SubjectAltName::Dns(lower));
    }
    Err(Error::invalid_field(
        "subjectAltNames",
        format!("`{name}` is neither a DNS name, an IP address, an e-mail address nor a URI"),
    ))
}

fn dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

/// The template's name for a key, as `allowedKeyAlgorithms` lists them.
fn key_family(key: &SubjectKey) -> String {
    match (key.algorithm.as_str(), key.curve.as_deref()) {
        ("ec", Some(curve)) => format!("ecdsa-{curve}"),
        (other, _) => other.to_owned(),
    }
}

fn check_key(template: &Template, key: &SubjectKey) -> Result<()> {
    let family = key_family(key);
    if !template.allowed_key_algorithms.contains(&family) {
        return Err(Error::invalid_field(
            "csr",
            format!(
                "template {} does not accept {family} keys; allowed: {}",
                template.id,
                template.allowed_key_algorithms.join(", ")
            ),
        ));
    }
    if key.algorithm == "rsa" && key.size_bits < template.min_rsa_bits {
        return Err(Error::invalid_field(
            "csr",
            format!(
                "the RSA key has {} bits; template {} requires at least {}",
                key.size_bits, template.id, template.min_rsa_bits
            ),
        ));
    }
    Ok(())
}

fn parse_key_algorithm(text: Option<&str>) -> Result<KeyAlgorithm> {
    let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else { return Ok(KeyAlgorithm::EcdsaP256) };
    let normalized = text.to_ascii_lowercase().replace('_', "-");
    let canonical = match normalized.as_str() {
        "ecdsa-p256" | "p256" | "p-256" | "ec-p256" | "ecdsa" => "ecdsa-p256",
        "ecdsa-p384" | "p384" | "p-384" | "ec-p384" => "ecdsa-p384",
        "ed25519" => "ed25519",
        "rsa-2048" | "rsa2048" | "rsa" => "rsa2048",
        "rsa-3072" | "rsa3072" => "rsa3072",
        "rsa-4096" | "rsa4096" => "rsa4096",
        _ => "",
    };
    KeyAlgorithm::parse(canonical).ok_or_else(|| {
        Error::invalid_field(
            "keyAlgorithm",
            "must be one of ecdsa-p256, ecdsa-p384, ed25519, rsa-2048, rsa-3072, rsa-4096",
        )
    })
}

fn generated_key(algorithm: KeyAlgorithm) -> SubjectKey {
    let (family, bits, curve) = match algorithm {
        KeyAlgorithm::EcdsaP256 => ("ec", 256, Some("p256")),
        KeyAlgorithm::EcdsaP384 => ("ec", 384, Some("p384")),
        KeyAlgorithm::Ed25519 => ("ed25519", 256, None),
        KeyAlgorithm::Rsa2048 => ("rsa", 2048, None),
        KeyAlgorithm::Rsa3072 => ("rsa", 3072, None),
        KeyAlgorithm::Rsa4096 => ("rsa", 4096, None),
    };
    SubjectKey { algorithm: family.into(), size_bits: bits, curve: curve.map(Into::into), server_generated: true }
}

/// The CSR of a server-generated key, naming the certificate's common name and SANs.
fn generated_csr(pkcs8: &[u8], common_name: Option<&str>, names: &[SubjectAltName]) -> Result<Vec<u8>> {
    let internal = |err: rcgen::Error| Error::Internal(format!("cannot build the CSR: {err}"));
    let key_pair = rcgen::KeyPair::try_from(pkcs8).map_err(internal)?;
    let mut params = rcgen::CertificateParams::default();
    if let Some(cn) = common_name {
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    }
    for name in names {
        params.subject_alt_names.push(match name {
            SubjectAltName::Dns(dns) => rcgen::SanType::DnsName(dns.as_str().try_into().map_err(internal)?),
            SubjectAltName::Ip(ip) => rcgen::SanType::IpAddress(*ip),
            SubjectAltName::Email(mail) => rcgen::SanType::Rfc822Name(mail.as_str().try_into().map_err(internal)?),
            SubjectAltName::Uri(uri) => rcgen::SanType::URI(uri.as_str().try_into().map_err(internal)?),
        });
    }
    Ok(params.serialize_request(&key_pair).map_err(internal)?.der().to_vec())
}

/// Checks the input against the template and builds the CSR and profile.
pub fn prepare(input: &IssueInput, template: &Template) -> Result<PreparedRequest> {
    let common_name = optional_text("commonName", input.common_name.as_deref(), 64)?;
    if input.subject_alt_names.len() > MAX_SANS {
        return Err(Error::invalid_field("subjectAltNames", format!("at most {MAX_SANS} names")));
    }
    let mut names = input.subject_alt_names.iter().map(|n| classify(n)).collect::<Result<Vec<_>>>()?;
    // What a caller's CSR asks for: checked below against the names policies will judge.
    let mut csr_names = None;

    let (csr_der, key, private_key_pem, csr_common_name) =
        match input.csr.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
            Some(pem) => {
                if input.key_algorithm.is_some() {
                    return Err(Error::invalid_field(
                        "keyAlgorithm",
                        "applies only when the server generates the key (no csr)",
                    ));
                }
                let csr = csr::parse_pem(pem).map_err(|err| Error::invalid_field("csr", err.to_string()))?;
                if names.is_empty() {
                    names = csr.names.clone();
                }
                csr_names = Some((csr.common_name.clone(), csr.names));
                (csr.der, csr.key, None, csr.common_name)
            }
            None => {
                if common_name.is_none() {
                    return Err(Error::validation_with(
                        "Either `csr` or `commonName` is required",
                        serde_json::json!({ "field": "commonName", "problem": "required when csr is omitted" }),
                    ));
                }
                let algorithm = parse_key_algorithm(input.key_algorithm.as_deref())?;
                let pkcs8 = generate_pkcs8(algorithm).map_err(|err| Error::Internal(err.to_string()))?;
                // The CSR is made once the names are final (below): external CAs (ACME)
                // issue what the CSR names, so it must carry the certificate's names.
                (Vec::new(), generated_key(algorithm), Some(pkcs8), None)
            }
        };
    check_key(template, &key)?;
    let common_name = common_name.or(csr_common_name);
    // A DNS common name of a TLS certificate must also be a SAN (RFC 6125 clients ignore the CN).
    if let Some(cn) = &common_name {
        if template.san_rules.dns {
            if let Ok(SubjectAltName::Dns(dns)) = classify(cn) {
                if !names.contains(&SubjectAltName::Dns(dns.clone())) {
                    names.insert(0, SubjectAltName::Dns(dns));
                }
            }
        }
    }
    names.dedup();
    check_names(template, &names)?;
    if let Some((csr_common_name, csr_alt_names)) = &csr_names {
        check_csr_asks_only_for(common_name.as_deref(), &names, csr_common_name.as_deref(), csr_alt_names)?;
    }
    let (csr_der, private_key_pem) = match private_key_pem {
        Some(pkcs8) => (generated_csr(&pkcs8, common_name.as_deref(), &names)?, Some(super::private_key_pem(&pkcs8))),
        None => (csr_der, None),
    };
    if common_name.is_none() && names.is_empty() {
        return Err(Error::invalid_field(
            "commonName",
            "a certificate needs a common name or a subject alternative name",
        ));
    }
    let validity_days = input.validity_days.unwrap_or(template.default_validity_days);
    if validity_days == 0 || validity_days > template.max_validity_days {
        return Err(Error::invalid_field(
            "validityDays",
            format!("must be between 1 and {} for template {}", template.max_validity_days, template.id),
        ));
    }
    let defaults = &template.subject_defaults;
    let subject = Subject {
        common_name,
        organization: optional_text("subject.organization", input.subject.organization.as_deref(), 64)?
            .or(defaults.organization.clone()),
        organizational_unit: optional_text(
            "subject.organizationalUnit",
            input.subject.organizational_unit.as_deref(),
            64,
        )?
        .or(defaults.organizational_unit.clone()),
        country: country(&input.subject.country)?.or(defaults.country.clone()),
        state: optional_text("subject.state", input.subject.state.as_deref(), 128)?.or(defaults.state.clone()),
        locality: optional_text("subject.locality", input.subject.locality.as_deref(), 128)?
            .or(defaults.locality.clone()),
        other: Vec::new(),
    };
    let metadata = match &input.metadata {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) if Value::Object(map.clone()).to_string().len() <= 64 * 1024 => {
            Some(Value::Object(map.clone()))
        }
        Some(_) => return Err(Error::invalid_field("metadata", "must be an object of at most 64 KiB")),
    };
    Ok(PreparedRequest {
        template: template.id.clone(),
        csr_der,
        key,
        private_key_pem,
        profile: CertificateProfile {
            subject,
            subject_alt_names: names,
            key_usages: template.key_usages.clone(),
            extended_key_usages: template.extended_key_usages.clone(),
            validity_days,
        },
        auto_renewal: input.auto_renewal.unwrap_or(false),
        renewal_window_days: template.renewal_window_days,
        metadata,
    })
}

fn country(value: &Option<String>) -> Result<Option<String>> {
    match value.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(c) if c.len() == 2 && c.chars().all(|ch| ch.is_ascii_alphabetic()) => Ok(Some(c.to_ascii_uppercase())),
        Some(_) => Err(Error::invalid_field("subject.country", "must be a two-letter ISO 3166 code")),
    }
}

fn check_names(template: &Template, names: &[SubjectAltName]) -> Result<()> {
    let rules = template.san_rules;
    for name in names {
        let allowed = match name {
            SubjectAltName::Dns(_) => rules.dns,
            SubjectAltName::Ip(_) => rules.ip,
            SubjectAltName::Email(_) => rules.email,
            SubjectAltName::Uri(_) => rules.uri,
        };
        if !allowed {
            return Err(Error::invalid_field(
                "subjectAltNames",
                format!("template {} does not allow the name {name}", template.id),
            ));
        }
    }
    if rules.required && names.is_empty() {
        return Err(Error::invalid_field(
            "subjectAltNames",
            format!("template {} needs at least one name", template.id),
        ));
    }
    Ok(())
}

/// Policies, templates and approvers judge the request's names; a connector that sends the CSR
/// as it is (ACME, AWS Private CA) gets the CSR's names signed. So a CSR may ask only for names
/// the request names: its common name is the request's or one of its alternative names, and
/// each of its alternative names is one of the request's.
fn check_csr_asks_only_for(
    common_name: Option<&str>,
    names: &[SubjectAltName],
    csr_common_name: Option<&str>,
    csr_names: &[SubjectAltName],
) -> Result<()> {
    let judged = |name: &SubjectAltName| names.contains(name);
    let mut unjudged: Vec<String> = csr_names.iter().filter(|name| !judged(name)).map(ToString::to_string).collect();
    if let Some(cn) = csr_common_name {
        let named = common_name.is_some_and(|judged_cn| judged_cn.eq_ignore_ascii_case(cn))
            || classify(cn).is_ok_and(|name| judged(&name));
        if !named {
            unjudged.insert(0, format!("CN={cn}"));
        }
    }
    if unjudged.is_empty() {
        return Ok(());
    }
    Err(Error::invalid_field(
        "csr",
        format!(
            "asks for names the request does not name ({}); send a CSR for exactly the requested names, or \
             omit commonName/subjectAltNames to take the CSR's",
            unjudged.join(", ")
        ),
    ))
}
