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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
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
    /// Revoking a certificate of this template waits for someone else's approval.
    pub revocation_requires_approval: bool,
}

/// More would say nothing a relying party checks.
const MAX_EXTENDED_KEY_USAGES: usize = 32;

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
        revocation_requires_approval: false,
    }
}

/// The read-only templates of every workspace.
pub fn built_ins() -> Vec<Template> {
    built_in_list().to_vec()
}

/// The built-in templates, made once: every issuance resolves one by name.
fn built_in_list() -> &'static [Template] {
    static BUILT_INS: std::sync::LazyLock<Vec<Template>> = std::sync::LazyLock::new(make_built_ins);
    &BUILT_INS
}

fn make_built_ins() -> Vec<Template> {
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
    built_in_list().iter().find(|t| t.id == name).cloned()
}

/// A workspace's own template as stored: its settings as the API sent them (validated).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTemplate {
    pub id: i64,
    pub workspace_id: String,
    pub name: String,
    pub body: serde_json::Value,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The settings of a custom template, camelCase as the API takes them. Absent members take
/// the values of the template named by `basedOn` (default `web_server`).
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateSettings {
    pub based_on: Option<String>,
    pub description: Option<String>,
    pub key_usages: Option<Vec<String>>,
    pub extended_key_usages: Option<Vec<String>>,
    pub default_validity_days: Option<u32>,
    pub max_validity_days: Option<u32>,
    pub allowed_key_algorithms: Option<Vec<String>>,
    pub min_rsa_bits: Option<u32>,
    pub san_rules: Option<SanRules>,
    pub subject_defaults: Option<SubjectDefaults>,
    pub renewal_window_days: Option<u32>,
    pub revocation_requires_approval: Option<bool>,
}

#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubjectDefaults {
    pub organization: Option<String>,
    pub organizational_unit: Option<String>,
    pub country: Option<String>,
    pub state: Option<String>,
    pub locality: Option<String>,
}

impl<'de> serde::Deserialize<'de> for SanRules {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Rules {
            #[serde(default)]
            dns: bool,
            #[serde(default)]
            ip: bool,
            #[serde(default)]
            email: bool,
            #[serde(default)]
            uri: bool,
            #[serde(default)]
            required: bool,
        }
        let r = Rules::deserialize(d)?;
        Ok(SanRules { dns: r.dns, ip: r.ip, email: r.email, uri: r.uri, required: r.required })
    }
}

fn parse_key_usage(name: &str) -> Option<KeyUsage> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

/// A custom template's effective settings, checked. Errors name the member.
pub fn resolve_settings(name: &str, id: String, settings: &TemplateSettings) -> crate::Result<Template> {
    use crate::error::Error;
    let base_name = settings.based_on.as_deref().unwrap_or("web_server");
    let mut template = built_in_named(base_name).ok_or_else(|| {
        Error::invalid_field(
            "basedOn",
            "must name a built-in template (web_server, client_auth, code_signing, smime, device)",
        )
    })?;
    template.id = id;
    template.name = name.to_owned();
    template.built_in = false;
    if let Some(usages) = &settings.key_usages {
        template.key_usages = usages
            .iter()
            .map(|u| {
                parse_key_usage(u).filter(|k| !matches!(k, KeyUsage::KeyCertSign | KeyUsage::CrlSign)).ok_or_else(
                    || {
                        Error::invalid_field(
                            "keyUsages",
                            format!("`{u}` is not a key usage of an end-entity certificate"),
                        )
                    },
                )
            })
            .collect::<crate::Result<_>>()?;
    }
    if let Some(description) = &settings.description {
        template.description =
            crate::validation::optional_text("description", Some(description), 1000)?.unwrap_or_default();
    }
    if let Some(ekus) = &settings.extended_key_usages {
        // Checked as DER will encode them, so nothing reaches the signer that it cannot sign.
        if ekus.len() > MAX_EXTENDED_KEY_USAGES {
            return Err(Error::invalid_field(
                "extendedKeyUsages",
                format!("at most {MAX_EXTENDED_KEY_USAGES} object identifiers"),
            ));
        }
        for (index, oid) in ekus.iter().enumerate() {
            crate::pki::oid_arcs(oid).map_err(|err| Error::invalid_field("extendedKeyUsages", err.to_string()))?;
            if ekus[..index].contains(oid) {
                return Err(Error::invalid_field("extendedKeyUsages", format!("`{oid}` is listed twice")));
            }
        }
        template.extended_key_usages = ekus.clone();
    }
    if let Some(max) = settings.max_validity_days {
        template.max_validity_days = max;
    }
    if let Some(days) = settings.default_validity_days {
        template.default_validity_days = days;
    }
    if template.max_validity_days == 0 || template.max_validity_days > 3650 {
        return Err(Error::invalid_field("maxValidityDays", "must be between 1 and 3650"));
    }
    if template.default_validity_days == 0 || template.default_validity_days > template.max_validity_days {
        template.default_validity_days = template.default_validity_days.clamp(1, template.max_validity_days);
        if settings.default_validity_days.is_some() {
            return Err(Error::invalid_field("defaultValidityDays", "must be between 1 and maxValidityDays"));
        }
    }
    if let Some(algorithms) = &settings.allowed_key_algorithms {
        if algorithms.is_empty() || algorithms.iter().any(|a| !ALL_KEYS.contains(&a.as_str())) {
            return Err(Error::invalid_field(
                "allowedKeyAlgorithms",
                format!("a non-empty list of {}", ALL_KEYS.join(", ")),
            ));
        }
        template.allowed_key_algorithms = algorithms.clone();
    }
    if let Some(bits) = settings.min_rsa_bits {
        if !(2048..=8192).contains(&bits) {
            return Err(Error::invalid_field("minRsaBits", "must be between 2048 and 8192"));
        }
        template.min_rsa_bits = bits;
    }
    if let Some(rules) = settings.san_rules {
        template.san_rules = rules;
    }
    if let Some(days) = settings.renewal_window_days {
        if days == 0 || days > 365 {
            return Err(Error::invalid_field("renewalWindowDays", "must be between 1 and 365"));
        }
        template.renewal_window_days = days;
    }
    if let Some(required) = settings.revocation_requires_approval {
        template.revocation_requires_approval = required;
    }
    if let Some(defaults) = &settings.subject_defaults {
        if defaults.country.as_deref().is_some_and(|c| c.len() != 2 || !c.chars().all(|ch| ch.is_ascii_alphabetic())) {
            return Err(Error::invalid_field("subjectDefaults.country", "must be a two-letter code"));
        }
        // RFC 5280's upper bounds (ub-organization-name 64, ub-state-name 128, …).
        let text = |field: &str, value: &Option<String>, max: usize| {
            crate::validation::optional_text(&format!("subjectDefaults.{field}"), value.as_deref(), max)
        };
        template.subject_defaults = Subject {
            common_name: None,
            organization: text("organization", &defaults.organization, 64)?,
            organizational_unit: text("organizationalUnit", &defaults.organizational_unit, 64)?,
            country: defaults.country.as_deref().map(str::to_ascii_uppercase),
            state: text("state", &defaults.state, 128)?,
            locality: text("locality", &defaults.locality, 128)?,
            other: Vec::new(),
        };
    }
    Ok(template)
}

/// A stored template's effective settings.
pub fn from_stored(stored: &StoredTemplate) -> crate::Result<Template> {
    let settings: TemplateSettings = serde_json::from_value(stored.body.clone())
        .map_err(|err| crate::Error::Internal(format!("stored template {} is unreadable: {err}", stored.id)))?;
    resolve_settings(&stored.name, stored.id.to_string(), &settings)
}

// ---- use cases ----------------------------------------------------------------------------

use super::IssuanceDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::{Entity, Error};
use crate::unit_of_work::Target;

/// The template `id_or_name` names in the workspace: a built-in name, or a custom template's id
/// or name. None named: `web_server`.
pub async fn resolve(ctx: &IssuanceDeps, workspace_id: &str, id_or_name: Option<&str>) -> crate::Result<Template> {
    let wanted = id_or_name.map(str::trim).filter(|t| !t.is_empty()).unwrap_or("web_server");
    if let Some(template) = built_in_named(wanted) {
        return Ok(template);
    }
    match ctx.store.find_template(workspace_id, wanted).await? {
        Some(stored) => from_stored(&stored),
        None => {
            let names: Vec<String> = built_ins().into_iter().map(|t| t.id).collect();
            Err(Error::invalid_field(
                "templateId",
                format!(
                    "unknown template `{wanted}`; built-ins: {} (or the id of a workspace template)",
                    names.join(", ")
                ),
            ))
        }
    }
}

/// Built-ins first, then the workspace's own, oldest first.
pub async fn list(ctx: &IssuanceDeps, caller: &Caller) -> crate::Result<Vec<Template>> {
    caller.require(Scope::CertificatesRead)?;
    let mut templates = built_ins();
    for stored in ctx.store.list_templates(&caller.workspace_id).await? {
        // A template stored before a check it fails was added is left out (and logged); a GET
        // of it says why, and it can still be updated or deleted.
        match from_stored(&stored) {
            Ok(template) => templates.push(template),
            Err(err) => {
                tracing::warn!(template_id = stored.id, error = %err, code = "TEMPLATE_INVALID", "a stored template no longer validates");
            }
        }
    }
    Ok(templates)
}

pub async fn get(ctx: &IssuanceDeps, caller: &Caller, id: &str) -> crate::Result<Template> {
    caller.require(Scope::CertificatesRead)?;
    if let Some(template) = built_in_named(id) {
        return Ok(template);
    }
    if id.parse::<i64>().is_err() {
        return Err(Error::NotFound(Entity::CertificateTemplate));
    }
    let stored =
        ctx.store.find_template(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::CertificateTemplate))?;
    from_stored(&stored)
}

fn check_name(name: &str) -> crate::Result<String> {
    let name = name.trim();
    let valid = !name.is_empty()
        && name.len() <= 100
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' '));
    if !valid {
        return Err(Error::invalid_field("name", "1 to 100 letters, digits, spaces, `_`, `-` or `.`"));
    }
    if built_in_named(name).is_some() || name.parse::<i64>().is_ok() {
        return Err(Error::invalid_field("name", "is a built-in template's name or a number; choose another"));
    }
    Ok(name.to_owned())
}

/// Creates a workspace template.
pub async fn create(
    ctx: &IssuanceDeps,
    caller: &Caller,
    name: &str,
    settings: TemplateSettings,
) -> crate::Result<Template> {
    save(ctx, caller, None, name, settings).await
}

/// Replaces workspace template `id`. Built-ins are read-only (403); a name that is neither a
/// built-in's nor a number names no template (404).
pub async fn update(
    ctx: &IssuanceDeps,
    caller: &Caller,
    id: &str,
    name: &str,
    settings: TemplateSettings,
) -> crate::Result<Template> {
    let id = id.trim();
    if built_in_named(id).is_some() {
        return Err(Error::Forbidden(format!("`{id}` is a built-in template and cannot be changed")));
    }
    let id: i64 = id.parse().map_err(|_| Error::NotFound(Entity::CertificateTemplate))?;
    save(ctx, caller, Some(id), name, settings).await
}

/// Creates (`id` none) or replaces a workspace template.
async fn save(
    ctx: &IssuanceDeps,
    caller: &Caller,
    id: Option<i64>,
    name: &str,
    settings: TemplateSettings,
) -> crate::Result<Template> {
    caller.require(Scope::CertificatesWrite)?;
    let name = check_name(name)?;
    resolve_settings(&name, id.unwrap_or_default().to_string(), &settings)?;
    let body = serde_json::to_value(&settings).map_err(|err| Error::Internal(err.to_string()))?;
    let workspace_id = caller.workspace_id.to_string();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let at = change.at();
    let row = StoredTemplate {
        id: id.unwrap_or_default(),
        workspace_id: workspace_id.clone(),
        name,
        body,
        created_at: at,
        updated_at: at,
    };
    let unique = |err: crate::store_error::StoreError| match err {
        crate::store_error::StoreError::Unique(_) => Error::Conflict(format!("a template named `{}` exists", row.name)),
        other => other.into(),
    };
    let stored = match id {
        None => change.tx().insert_template(&row).await.map_err(unique)?,
        Some(_) => change
            .tx()
            .update_template(&row)
            .await
            .map_err(unique)?
            .ok_or(Error::NotFound(Entity::CertificateTemplate))?,
    };
    let action = if id.is_none() { "certificate_template.created" } else { "certificate_template.updated" };
    change.audit(action, Target::new("certificate_template", stored.id), serde_json::json!({ "name": stored.name }));
    change.commit().await?;
    from_stored(&stored)
}

pub async fn delete(ctx: &IssuanceDeps, caller: &Caller, id: &str) -> crate::Result<()> {
    caller.require(Scope::CertificatesWrite)?;
    if built_in_named(id).is_some() {
        return Err(Error::Forbidden(format!("`{id}` is a built-in template and cannot be deleted")));
    }
    let id: i64 = id.parse().map_err(|_| Error::NotFound(Entity::CertificateTemplate))?;
    let workspace_id = caller.workspace_id.to_string();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    if !change.tx().delete_template(&workspace_id, id).await? {
        return Err(Error::NotFound(Entity::CertificateTemplate));
    }
    change.audit("certificate_template.deleted", Target::new("certificate_template", id), serde_json::json!({}));
    change.commit().await
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::clock::OsEntropy;
    use crate::pki::{sign_csr, Authority, CsrCheck, IssuerUrls, NewAuthority};
    use crate::plugins::{CertificateProfile, KeyAlgorithm, SubjectAltName};

    /// Object identifiers as people mistype them, and some DER cannot encode.
    fn oid() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (0u64..4, 0u64..60, proptest::collection::vec(0u64..100_000, 0..5)).prop_map(|(a, b, rest)| {
                [a, b].iter().chain(&rest).map(u64::to_string).collect::<Vec<_>>().join(".")
            }),
            1 => "[0-9.]{0,12}",
            1 => ".{0,8}",
        ]
    }

    fn settings() -> impl Strategy<Value = TemplateSettings> {
        (
            proptest::collection::vec(oid(), 0..3),
            proptest::option::of(proptest::collection::vec(
                prop_oneof![Just("digitalSignature".to_string()), Just("keyCertSign".to_string()), ".{0,6}"],
                0..3,
            )),
            proptest::option::of(prop_oneof![4 => 1u32..400, 1 => 0u32..5000]),
            proptest::option::of(prop_oneof![4 => 1u32..90, 1 => 0u32..5000]),
            proptest::option::of(".{0,80}"),
            proptest::option::of("[A-Za-z]{0,3}"),
        )
            .prop_map(|(ekus, key_usages, max, default, organization, country)| TemplateSettings {
                extended_key_usages: Some(ekus),
                key_usages,
                max_validity_days: max,
                default_validity_days: default,
                subject_defaults: Some(SubjectDefaults { organization, country, ..SubjectDefaults::default() }),
                ..TemplateSettings::default()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
        /// Whatever a client writes, the validator answers, and a template it accepts never makes
        /// the signer fail (let alone panic): finding 8 of issue 21 stored `5.1` and then
        /// panicked in the signer.
        #[test]
        fn an_accepted_template_always_signs(settings in settings()) {
            let Ok(template) = resolve_settings("t", "1".into(), &settings) else { return Ok(()) };
            let root = Authority::create_root(
                &NewAuthority {
                    subject: Subject { common_name: Some("Root".into()), ..Subject::default() },
                    key_algorithm: KeyAlgorithm::EcdsaP256,
                    validity_days: 3650,
                    path_length: None,
                },
                1_767_225_600,
                &OsEntropy,
            )
            .map_err(|err| TestCaseError::fail(err.to_string()))?;
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                .map_err(|err| TestCaseError::fail(err.to_string()))?;
            let csr = rcgen::CertificateParams::default()
                .serialize_request(&key)
                .map_err(|err| TestCaseError::fail(err.to_string()))?;
            let profile = CertificateProfile {
                subject: Subject { common_name: Some("a.example".into()), ..template.subject_defaults.clone() },
                subject_alt_names: vec![SubjectAltName::Dns("a.example".into())],
                key_usages: template.key_usages.clone(),
                extended_key_usages: template.extended_key_usages.clone(),
                validity_days: template.default_validity_days,
            };
            let urls = IssuerUrls { crl: "http://x/crl".into(), ocsp: "http://x/ocsp".into(), ca_issuers: "http://x/ca".into() };
            let signer = root.signer().map_err(|err| TestCaseError::fail(err.to_string()))?;
            let signed = sign_csr(&signer, csr.der(), CsrCheck::Verify, &profile, &urls, 1_767_225_600, &OsEntropy);
            prop_assert!(signed.is_ok(), "{settings:?} was accepted but does not sign: {signed:?}");
        }
    }
}
