//! The internal CA connector (CA type `internal`): a thin plugin over the host's PKI
//! (`pki-core`, [`trellis_plugin_sdk::pki`]). The host creates and keeps the CA's key, signs
//! and revokes; this plugin turns the record's configuration into the CA to create and maps
//! the connector operations onto `pki-core`. The CA's private key never enters the sandbox:
//! an imported key (`privateKeyPem`) is declared withheld, and the host reads it itself.

#![forbid(unsafe_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use trellis_plugin_sdk::pki::{AuthorityInfo, AuthoritySpec, KeyAlgorithm, NewAuthority, PkiError, SerialStatus};
use trellis_plugin_sdk::prelude::*;
use trellis_plugin_sdk::{ConfigIssue, Subject};

/// Where the host finds an imported CA's private key in the record's configuration.
const PRIVATE_KEY_FIELD: &str = "/privateKeyPem";

/// Configuration names of the CA key algorithms, as the schema lists them.
const KEY_ALGORITHMS: [(&str, KeyAlgorithm); 6] = [
    ("ecdsa-p256", KeyAlgorithm::EcdsaP256),
    ("ecdsa-p384", KeyAlgorithm::EcdsaP384),
    ("ed25519", KeyAlgorithm::Ed25519),
    ("rsa-2048", KeyAlgorithm::Rsa2048),
    ("rsa-3072", KeyAlgorithm::Rsa3072),
    ("rsa-4096", KeyAlgorithm::Rsa4096),
];

const DEFAULT_VALIDITY_DAYS: i64 = 3650;
const MAX_VALIDITY_DAYS: i64 = 36_500;
/// The connection test warns when the CA has fewer days left than this.
const EXPIRY_WARNING_DAYS: i64 = 30;

/// An internal CA record's configuration, one of three shapes:
/// a new root (`subject`, optionally `keyAlgorithm`, `validityDays`, `pathLength`); an
/// intermediate (the same plus `parentCaId`); or an imported CA (`certificatePem` and
/// `privateKeyPem`). The CA is created once, when the record is set up; later changes of
/// the configuration do not replace it.
// The members are all optional so that `validate_config` can name every problem with its field
// rather than fail on the first one serde meets.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The new CA's subject (a root, or an intermediate with `parentCaId`).
    subject: Option<SubjectConfig>,
    /// The new CA's key algorithm; default `ecdsa-p256`.
    #[schemars(extend("enum" = ["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa-2048", "rsa-3072", "rsa-4096"]))]
    key_algorithm: Option<String>,
    /// Validity of the new CA certificate in days (1 to 36500); default 3650. An intermediate
    /// never outlives its parent.
    #[schemars(range(min = 1, max = 36500))]
    validity_days: Option<i64>,
    /// basicConstraints pathLenConstraint of the new CA.
    path_length: Option<u8>,
    /// Id of the internal CA that signs this one as an intermediate (same workspace).
    parent_ca_id: Option<RecordId>,
    /// An existing CA certificate to import, PEM (its chain may follow).
    certificate_pem: Option<String>,
    /// The imported CA's private key, PEM. Encrypted at rest and never sent to the plugin: the
    /// host reads it when it imports the CA.
    #[schemars(extend("writeOnly" = true, "x-trellis-withheld" = true))]
    #[allow(dead_code, reason = "declared for the schema and the host; the plugin never receives it")]
    private_key_pem: Option<String>,
}

/// A new CA's distinguished name.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubjectConfig {
    /// CN (required).
    common_name: Option<String>,
    /// O.
    organization: Option<String>,
    /// OU.
    organizational_unit: Option<String>,
    /// C: two letters.
    country: Option<String>,
    /// ST.
    state: Option<String>,
    /// L.
    locality: Option<String>,
}

/// A CA record id: the API's ids are integers, but a string is accepted too.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
enum RecordId {
    Number(u64),
    Text(String),
}

/// The problems found so far, each with the JSON pointer of its member.
#[derive(Default)]
struct Issues(Vec<ConfigIssue>);

impl Issues {
    fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(ConfigIssue { field: field.to_owned(), message: message.into() });
    }

    fn into_result<T>(self, value: T) -> Result<T, PluginError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(PluginError::InvalidConfig(self.0))
        }
    }
}

impl Config {
    /// The CA this configuration describes, or every problem with it. One function serves
    /// `validate_config` and `setup`, so what validates is exactly what gets created.
    fn authority_spec(&self) -> Result<AuthoritySpec, PluginError> {
        let mut issues = Issues::default();
        if let Some(pem) = &self.certificate_pem {
            let new_ca_members = [
                ("/subject", self.subject.is_some()),
                ("/keyAlgorithm", self.key_algorithm.is_some()),
                ("/validityDays", self.validity_days.is_some()),
                ("/pathLength", self.path_length.is_some()),
                ("/parentCaId", self.parent_ca_id.is_some()),
            ];
            for (field, _) in new_ca_members.iter().filter(|(_, given)| *given) {
                issues.add(field, "not allowed with certificatePem: an imported CA brings its own certificate");
            }
            if !is_pem_certificate(pem) {
                issues.add("/certificatePem", "must be a PEM certificate (-----BEGIN CERTIFICATE----- …)");
            }
            // `privateKeyPem` is withheld, so it is absent here even when given: the host checks
            // that it is there and matches the certificate when it imports the CA.
            return issues.into_result(AuthoritySpec::Imported {
                certificate_pem: pem.clone(),
                private_key_field: PRIVATE_KEY_FIELD.to_owned(),
            });
        }

        let subject = self.subject(&mut issues);
        let key_algorithm = match self.key_algorithm.as_deref() {
            None => Some(KeyAlgorithm::EcdsaP256),
            Some(name) => {
                let found = KEY_ALGORITHMS.iter().find(|(known, _)| *known == name).map(|(_, algorithm)| *algorithm);
                if found.is_none() {
                    let names: Vec<&str> = KEY_ALGORITHMS.iter().map(|(known, _)| *known).collect();
                    issues.add("/keyAlgorithm", format!("unknown key algorithm {name:?}; one of {}", names.join(", ")));
                }
                found
            }
        };
        let validity_days = self.validity_days.unwrap_or(DEFAULT_VALIDITY_DAYS);
        if !(1..=MAX_VALIDITY_DAYS).contains(&validity_days) {
            issues.add("/validityDays", format!("must be between 1 and {MAX_VALIDITY_DAYS} days"));
        }
        let parent = match &self.parent_ca_id {
            None => None,
            Some(RecordId::Number(id)) => Some(id.to_string()),
            Some(RecordId::Text(id)) if !id.trim().is_empty() => Some(id.trim().to_owned()),
            Some(RecordId::Text(_)) => {
                issues.add("/parentCaId", "must be the id of an internal CA");
                None
            }
        };
        // Every `None` (and an out-of-range validity) was reported above.
        match (subject, key_algorithm, u32::try_from(validity_days)) {
            (Some(subject), Some(key_algorithm), Ok(validity_days)) if issues.0.is_empty() => {
                let authority = NewAuthority { subject, key_algorithm, validity_days, path_length: self.path_length };
                Ok(match parent {
                    Some(parent_record_id) => AuthoritySpec::Intermediate { parent_record_id, authority },
                    None => AuthoritySpec::Root(authority),
                })
            }
            _ => Err(PluginError::InvalidConfig(issues.0)),
        }
    }

    fn subject(&self, issues: &mut Issues) -> Option<Subject> {
        let Some(given) = &self.subject else {
            issues
                .add("/subject", "required: the new CA's subject (or certificatePem and privateKeyPem to import a CA)");
            return None;
        };
        // Blank members count as absent: an empty RDN is never what an operator meant.
        let text =
            |value: &Option<String>| value.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        let common_name = text(&given.common_name);
        if common_name.is_none() {
            issues.add("/subject/commonName", "required");
        }
        let country = text(&given.country);
        if country.as_deref().is_some_and(|c| c.len() != 2 || !c.bytes().all(|b| b.is_ascii_alphabetic())) {
            issues.add("/subject/country", "must be a two-letter country code, e.g. DE");
        }
        let mut subject = Subject::new(common_name?);
        subject.organization = text(&given.organization);
        subject.organizational_unit = text(&given.organizational_unit);
        subject.country = country.map(|c| c.to_ascii_uppercase());
        subject.state = text(&given.state);
        subject.locality = text(&given.locality);
        Some(subject)
    }
}

/// Whether `text` holds a PEM certificate block. The host parses it for real on import; this
/// only catches a pasted DER file, a key or a CSR in the wrong member.
fn is_pem_certificate(text: &str) -> bool {
    let Some((_, rest)) = text.split_once("-----BEGIN CERTIFICATE-----") else {
        return false;
    };
    let Some((body, _)) = rest.split_once("-----END CERTIFICATE-----") else {
        return false;
    };
    !body.trim().is_empty()
        && body.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=') || c.is_ascii_whitespace())
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Seconds since the epoch as RFC 3339 UTC, e.g. `2036-01-01T00:00:00Z` (days to a civil
/// date after Howard Hinnant's `civil_from_days`; no date crate for one format).
fn rfc3339(secs: i64) -> String {
    let (days, time) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", time / 3600, time % 3600 / 60, time % 60)
}

fn pems(ders: &[Vec<u8>]) -> Vec<String> {
    ders.iter().map(|der| pki::certificate_pem(der)).collect()
}

/// The connection test's `details` (the REST test response's extras for internal CAs).
fn details(authority: &AuthorityInfo, days_left: i64) -> serde_json::Value {
    let key_algorithm = authority
        .key_algorithm
        .and_then(|a| KEY_ALGORITHMS.iter().find(|(_, known)| *known == a))
        .map(|(name, _)| *name);
    let mut details = json!({
        "subject": authority.subject,
        "issuer": authority.issuer,
        "expiresAt": rfc3339(authority.not_after),
        "daysUntilExpiry": days_left,
        "keyAlgorithm": key_algorithm,
    });
    if let Some(parent) = &authority.parent_record_id {
        // CA ids are integers in the API; keep the host's text should it ever be another form.
        details["parentCaId"] = parent.parse::<i64>().map_or_else(|_| json!(parent), |id| json!(id));
    }
    details
}

fn unusable(problem: &PkiError) -> TestReport {
    TestReport::from_checks("internal CA unusable", vec![Check::fail("authority", problem.to_string())])
}

/// The plugin.
pub struct InternalCa;

impl CaConnector for InternalCa {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::ca_connector("trellis.internal", env!("CARGO_PKG_VERSION"), "Internal CA", &["internal"])
            .with_description(
                "A certificate authority run by Trellis itself: a new root, an intermediate of another internal CA, \
                 or an imported CA certificate and key. Keys stay with the host.",
            )
            .with_capabilities(&[Capability::Issue, Capability::Revoke, Capability::Discover, Capability::Renew])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        config.authority_spec().map(|_| ())
    }

    fn setup(_ctx: &CallContext, config: &Config) -> Result<(), PluginError> {
        match pki::create_authority(config.authority_spec()?) {
            Ok(created) => {
                log::info("internal CA created", &[("subject", &created.subject)]);
                Ok(())
            }
            // Setup runs again on retries, on other replicas and after configuration changes;
            // a record's CA is never replaced, so an existing one is success.
            Err(PkiError::AuthorityExists(existing)) => {
                log::info(
                    "internal CA already set up; its certificate and key stay",
                    &[("subject", &existing.subject)],
                );
                Ok(())
            }
            // The host refused what the configuration asks for (an unknown parent, a key that
            // does not match the imported certificate): a configuration problem for the operator.
            Err(PkiError::InvalidRequest(message)) => {
                Err(PluginError::InvalidConfig(vec![ConfigIssue { field: String::new(), message }]))
            }
            Err(err) => Err(err.into()),
        }
    }

    fn test_connection(_ctx: &CallContext, _config: &Config) -> Result<TestReport, PluginError> {
        // A missing or unusable CA is a failed check, not an error: the report says what to fix.
        let authority = match pki::authority() {
            Ok(Some(authority)) => authority,
            Ok(None) => return Ok(unusable(&PkiError::NoAuthority)),
            Err(err) => return Ok(unusable(&err)),
        };
        let now = now();
        let days_left = (authority.not_after - now).div_euclid(86_400);
        let expires_at = rfc3339(authority.not_after);
        let validity = if now < authority.not_before {
            Check::fail("validity", format!("not valid before {}", rfc3339(authority.not_before)))
        } else if now >= authority.not_after {
            Check::fail("validity", format!("expired at {expires_at}"))
        } else if days_left < EXPIRY_WARNING_DAYS {
            Check::warn("validity", format!("expires at {expires_at}, in {days_left} days: plan its replacement"))
        } else {
            Check::pass("validity", format!("valid until {expires_at} ({days_left} days)"))
        };
        let checks = vec![Check::pass("authority", format!("internal CA {}", authority.subject)), validity];
        Ok(TestReport::from_checks(format!("internal CA {}", authority.subject), checks)
            .with_details(details(&authority, days_left)))
    }

    fn issue(_ctx: &CallContext, _config: &Config, request: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        // The profile goes back as the host resolved it: the host signs nothing wider, and
        // narrowing it here would only drop what the requester was granted.
        let signed = pki::sign_csr(&request.csr_der, &request.profile)?;
        // DER as the host signed it: nothing to encode here, nothing for the host to parse back.
        Ok(IssueOutcome::Issued(
            IssuedCertificate::der(signed.certificate_der)
                .with_chain_der(signed.chain_der)
                .with_ca_reference(signed.serial_number),
        ))
    }

    /// By serial number, the `ca_reference` `issue` returned. `pki-core` has no lookup by
    /// serial, so this asks the serial's status first (unknown serials fail at once) and then
    /// pages through what the CA issued.
    fn fetch_certificate(
        _ctx: &CallContext,
        _config: &Config,
        ca_reference: &str,
    ) -> Result<IssuedCertificate, PluginError> {
        let serial = ca_reference.trim().to_ascii_lowercase();
        let not_found = || PluginError::from(PkiError::UnknownSerial(serial.clone()));
        if matches!(pki::status(&serial)?, SerialStatus::Unknown) {
            return Err(not_found());
        }
        let mut cursor = None;
        loop {
            let page = pki::list_issued(&PageRequest::new(cursor, 200))?;
            if let Some(entry) = page.items.into_iter().find(|entry| entry.serial_number == serial) {
                return Ok(IssuedCertificate::der(entry.certificate_der)
                    .with_chain_der(pki::ca_chain()?)
                    .with_ca_reference(serial));
            }
            cursor = Some(page.next_cursor.ok_or_else(not_found)?);
        }
    }

    fn ca_chain(_ctx: &CallContext, _config: &Config) -> Result<Vec<String>, PluginError> {
        Ok(pems(&pki::ca_chain()?))
    }

    fn revoke(_ctx: &CallContext, _config: &Config, request: &RevokeRequest) -> Result<(), PluginError> {
        // The serial comes from the host's inventory (read from the certificate), so it is the
        // same lowercase hex `pki-core` issued.
        pki::revoke(&request.certificate.serial_number, request.reason).map_err(Into::into)
    }

    fn list_certificates(
        _ctx: &CallContext,
        _config: &Config,
        page: &PageRequest,
    ) -> Result<CertificatePage, PluginError> {
        let page = pki::list_issued(page)?;
        let items = page
            .items
            .into_iter()
            .map(|entry| DiscoveredCertificate {
                certificate_pem: pki::certificate_pem(&entry.certificate_der),
                ca_reference: Some(entry.serial_number),
                revoked_at: entry.revocation.map(|r| r.revoked_at),
            })
            .collect();
        Ok(CertificatePage { items, next_cursor: page.next_cursor })
    }
}

trellis_plugin_sdk::export_ca_connector!(InternalCa);

#[cfg(test)]
mod tests;
