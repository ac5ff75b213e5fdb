//! The AWS Private CA connector (CA type `aws_private_ca`), written only against the SDK.
//!
//! Every request goes to the ACM PCA JSON API, SigV4-signed inside the sandbox with the record's
//! access key, or with temporary credentials for `roleArn` from STS `AssumeRole` (asked once per
//! call: a call's sandbox keeps nothing, and session credentials are not worth persisting).
//! Issuance is `IssueCertificate` then `GetCertificate`, which answers
//! `RequestInProgressException` until the CA has signed: the connector polls within the call's
//! time budget and answers `pending` with the certificate ARN when the budget runs out, so
//! `poll-issue` continues. Retries of one issuance reuse one `IdempotencyToken` derived from the
//! host's idempotency key (AWS deduplicates for five minutes; later, the host polls by ARN).

#![forbid(unsafe_code)]

mod api;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;
use trellis_plugin_sdk::sigv4::Credentials;

use crate::api::{CallError, Pca};

/// The signing algorithms ACM PCA takes (`SigningAlgorithm`).
const SIGNING_ALGORITHMS: [&str; 9] = [
    "SHA256WITHECDSA",
    "SHA384WITHECDSA",
    "SHA512WITHECDSA",
    "SHA256WITHRSA",
    "SHA384WITHRSA",
    "SHA512WITHRSA",
    "SM3WITHSM2",
    "ML_DSA_44",
    "ML_DSA_65",
];

/// State key prefix of the CA's own signing algorithm, learnt once per CA ARN.
const SIGNING_ALGORITHM_STATE: &str = "signing-algorithm/";

/// Days before the CA's own certificate expires from which the test warns.
const CA_EXPIRY_WARNING_DAYS: i64 = 30;

/// An AWS Private CA record's configuration. Members are optional so `validate_config` names
/// every problem with its field.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The CA's ARN: `arn:aws:acm-pca:<region>:<account>:certificate-authority/<id>`.
    pub ca_arn: Option<String>,
    /// The AWS region; defaults to the one in `caArn`.
    pub region: Option<String>,
    /// The IAM access key ID that signs requests (or that assumes `roleArn`).
    pub access_key_id: Option<String>,
    /// The secret of `accessKeyId`. Secret: encrypted at rest, masked in responses.
    #[schemars(extend("writeOnly" = true))]
    pub secret_access_key: Option<String>,
    /// The session token, when the access key is temporary. Secret.
    #[schemars(extend("writeOnly" = true))]
    pub session_token: Option<String>,
    /// An IAM role to assume (STS `AssumeRole`) for every call; the access key needs
    /// `sts:AssumeRole` on it, the role the acm-pca permissions.
    pub role_arn: Option<String>,
    /// The external ID the role's trust policy requires, if any.
    pub external_id: Option<String>,
    /// The ACM PCA endpoint; defaults to the CA record's `url`, then to
    /// `https://acm-pca.<region>.amazonaws.com` (grant that host to the plugin).
    pub endpoint: Option<String>,
    /// The STS endpoint for `roleArn`; defaults to `https://sts.<region>.amazonaws.com`.
    pub sts_endpoint: Option<String>,
    /// The algorithm the CA signs with; defaults to the CA's own (DescribeCertificateAuthority).
    #[schemars(extend("enum" = SIGNING_ALGORITHMS))]
    pub signing_algorithm: Option<String>,
    /// An ACM PCA certificate template ARN; defaults to AWS's `EndEntityCertificate/V1`.
    pub template_arn: Option<String>,
}

/// The parts of a certificate-authority ARN.
struct CaArn<'a> {
    region: &'a str,
}

fn parse_ca_arn(arn: &str) -> Option<CaArn<'_>> {
    let mut parts = arn.splitn(6, ':');
    let (prefix, partition, service, region, account, resource) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let id = resource.strip_prefix("certificate-authority/")?;
    let ok = prefix == "arn"
        && partition.starts_with("aws")
        && service == "acm-pca"
        && region_ok(region)
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then_some(CaArn { region })
}

fn region_ok(region: &str) -> bool {
    !region.is_empty()
        && region.len() <= 32
        && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn role_arn_ok(arn: &str) -> bool {
    let mut parts = arn.splitn(6, ':');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next()),
        (Some("arn"), Some(partition), Some("iam"), Some(""), Some(account), Some(resource))
            if partition.starts_with("aws") && account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())
                && resource.strip_prefix("role/").is_some_and(|name| !name.is_empty())
    )
}

fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// A configuration that passed validation, with its defaults resolved.
struct Resolved<'a> {
    ca_arn: &'a str,
    region: String,
    config: &'a Config,
}

impl Config {
    fn resolve(&self) -> Result<Resolved<'_>, PluginError> {
        let ca_arn = present(&self.ca_arn).ok_or_else(|| PluginError::invalid_config("/caArn", "is required"))?;
        let arn = parse_ca_arn(ca_arn).ok_or_else(|| {
            PluginError::invalid_config("/caArn", "must be an AWS Private CA certificate-authority ARN")
        })?;
        let region = present(&self.region).unwrap_or(arn.region).to_owned();
        Ok(Resolved { ca_arn, region, config: self })
    }
}

impl Resolved<'_> {
    fn endpoint(&self, ctx: &CallContext) -> String {
        present(&self.config.endpoint)
            .map(str::to_owned)
            .or_else(|| ctx.endpoint.clone().filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| format!("https://acm-pca.{}.amazonaws.com", self.region))
    }

    fn sts_endpoint(&self) -> String {
        present(&self.config.sts_endpoint)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("https://sts.{}.amazonaws.com", self.region))
    }

    /// The record's own credentials.
    fn base_credentials(&self) -> Result<Credentials, PluginError> {
        let (Some(id), Some(secret)) = (present(&self.config.access_key_id), present(&self.config.secret_access_key))
        else {
            return Err(PluginError::invalid_config("/accessKeyId", "accessKeyId and secretAccessKey are required"));
        };
        let credentials = Credentials::new(id, secret);
        Ok(match present(&self.config.session_token) {
            Some(token) => credentials.with_session_token(token),
            None => credentials,
        })
    }

    /// A client for the CA, as the assumed role when `roleArn` is set.
    fn client(&self, ctx: &CallContext) -> Result<Pca, PluginError> {
        let mut credentials = self.base_credentials()?;
        if let Some(role) = present(&self.config.role_arn) {
            credentials = api::assume_role(
                &self.sts_endpoint(),
                &self.region,
                &credentials,
                role,
                present(&self.config.external_id),
            )
            .map_err(|err| match PluginError::from(err) {
                PluginError::Unauthorized(why) => PluginError::unauthorized(format!("assuming {role}: {why}")),
                other => other,
            })?;
        }
        Ok(Pca::new(&self.endpoint(ctx), &self.region, credentials))
    }
}

/// The AWS Private CA connector.
pub struct AwsPca;

impl CaConnector for AwsPca {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::ca_connector("trellis.aws-pca", env!("CARGO_PKG_VERSION"), "AWS Private CA", &["aws_private_ca"])
            .with_description(
                "Issues, fetches and revokes through AWS Private CA (ACM PCA), with an access key or an assumed IAM role.",
            )
            .with_capabilities(&[Capability::Issue, Capability::Revoke, Capability::Renew])
            .with_outbound_hosts(&["acm-pca.*.amazonaws.com", "acm-pca-fips.*.amazonaws.com", "sts.*.amazonaws.com"])
            .with_default_issuer_patterns(&["Amazon"])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        match present(&config.ca_arn) {
            None => issues.push(ConfigIssue::new("/caArn", "is required")),
            Some(arn) => match parse_ca_arn(arn) {
                None => issues.push(ConfigIssue::new(
                    "/caArn",
                    "must be an AWS Private CA ARN: arn:aws:acm-pca:<region>:<account>:certificate-authority/<id>",
                )),
                Some(parsed) => {
                    if let Some(region) = present(&config.region) {
                        if region != parsed.region {
                            issues.push(ConfigIssue::new(
                                "/region",
                                format!("is {region} but caArn names {}: a CA lives in one region", parsed.region),
                            ));
                        }
                    }
                }
            },
        }
        if let Some(region) = present(&config.region) {
            if !region_ok(region) {
                issues.push(ConfigIssue::new("/region", "must be an AWS region such as eu-west-1"));
            }
        }
        match present(&config.access_key_id) {
            None => issues.push(ConfigIssue::new("/accessKeyId", "is required")),
            Some(id) if id.len() > 128 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                issues.push(ConfigIssue::new("/accessKeyId", "must be an IAM access key ID (letters and digits)"));
            }
            Some(_) => {}
        }
        if present(&config.secret_access_key).is_none() {
            issues.push(ConfigIssue::new("/secretAccessKey", "is required"));
        }
        if let Some(role) = present(&config.role_arn) {
            if !role_arn_ok(role) {
                issues
                    .push(ConfigIssue::new("/roleArn", "must be an IAM role ARN: arn:aws:iam::<account>:role/<name>"));
            }
        } else if present(&config.external_id).is_some() {
            issues.push(ConfigIssue::new("/externalId", "only applies with roleArn"));
        }
        for (field, value) in [("/endpoint", &config.endpoint), ("/stsEndpoint", &config.sts_endpoint)] {
            if let Some(why) = present(value).and_then(http::http_base_url_problem) {
                issues.push(ConfigIssue::new(field, why));
            }
        }
        if let Some(algorithm) = present(&config.signing_algorithm) {
            if !SIGNING_ALGORITHMS.contains(&algorithm) {
                issues.push(ConfigIssue::new(
                    "/signingAlgorithm",
                    format!("must be one of {}", SIGNING_ALGORITHMS.join(", ")),
                ));
            }
        }
        if let Some(template) = present(&config.template_arn) {
            if !template.starts_with("arn:") || template.chars().any(char::is_whitespace) {
                issues.push(ConfigIssue::new("/templateArn", "must be an ACM PCA template ARN"));
            }
        }
        if issues.is_empty() {
            Ok(())
        } else {
            Err(PluginError::InvalidConfig(issues))
        }
    }

    /// Describes the CA, so a record whose credentials, permissions or ARN are wrong is not
    /// created.
    fn setup(ctx: &CallContext, config: &Config) -> Result<(), PluginError> {
        let resolved = config.resolve()?;
        let client = resolved.client(ctx)?;
        let described = describe_ca(&client, resolved.ca_arn)?;
        remember_signing_algorithm(resolved.ca_arn, &described);
        Ok(())
    }

    fn test_connection(ctx: &CallContext, config: &Config) -> Result<TestReport, PluginError> {
        let resolved = config.resolve()?;
        let endpoint = resolved.endpoint(ctx);
        let mut details = json!({ "caArn": resolved.ca_arn, "region": resolved.region, "endpoint": endpoint });
        let mut checks = Vec::new();
        if let Some(role) = present(&config.role_arn) {
            details["roleArn"] = json!(role);
        }
        let client = match resolved.client(ctx) {
            Ok(client) => {
                if present(&config.role_arn).is_some() {
                    checks.push(Check::pass("assume-role", "STS issued temporary credentials for the role"));
                }
                client
            }
            Err(err) => {
                checks.push(Check::fail("assume-role", err.to_string()));
                return Ok(TestReport::from_checks("The IAM role could not be assumed", checks).with_details(details));
            }
        };
        let described = match describe_ca(&client, resolved.ca_arn) {
            Ok(described) => described,
            Err(err) => {
                let name = match &err {
                    PluginError::Unauthorized(_) => "credentials",
                    PluginError::NotFound(_) => "certificate-authority",
                    _ => "api",
                };
                checks.push(Check::fail(name, err.to_string()));
                return Ok(TestReport::from_checks("DescribeCertificateAuthority failed", checks).with_details(details));
            }
        };
        remember_signing_algorithm(resolved.ca_arn, &described);
        checks.push(Check::pass("credentials", "AWS accepted the signed request"));
        let status = described["Status"].as_str().unwrap_or("UNKNOWN");
        checks.push(match status {
            "ACTIVE" => Check::pass("ca-status", "ACTIVE"),
            "PENDING_CERTIFICATE" => {
                Check::fail("ca-status", "PENDING_CERTIFICATE: install the CA's certificate before it can issue")
            }
            other => Check::fail("ca-status", format!("{other}: the CA cannot issue until it is ACTIVE")),
        });
        let now = clock::unix_seconds();
        // DescribeCertificateAuthority has timestamps as epoch seconds (fractions allowed).
        let not_after = described["NotAfter"].as_f64().map(|secs| secs as i64);
        if let Some(not_after) = not_after {
            let days_left = (not_after - now).div_euclid(86_400);
            checks.push(if not_after <= now {
                Check::fail("ca-validity", format!("the CA's certificate expired {} days ago", -days_left))
            } else if days_left < CA_EXPIRY_WARNING_DAYS {
                Check::warn("ca-validity", format!("the CA's certificate expires in {days_left} days"))
            } else {
                Check::pass("ca-validity", format!("valid for {days_left} more days"))
            });
            details["notAfter"] = json!(util::rfc3339(not_after.saturating_mul(1000)));
            details["daysUntilExpiry"] = json!(days_left);
        }
        let configuration = &described["CertificateAuthorityConfiguration"];
        details["status"] = json!(status);
        details["type"] = described["Type"].clone();
        details["keyAlgorithm"] = configuration["KeyAlgorithm"].clone();
        details["signingAlgorithm"] = configuration["SigningAlgorithm"].clone();
        details["subject"] = configuration["Subject"].clone();
        details["usageMode"] = described["UsageMode"].clone();
        let message = if status == "ACTIVE" { "AWS Private CA is active" } else { "AWS Private CA cannot issue" };
        Ok(TestReport::from_checks(message, checks).with_details(details))
    }

    fn issue(ctx: &CallContext, config: &Config, request: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        let resolved = config.resolve()?;
        let client = resolved.client(ctx)?;
        let signing_algorithm = match present(&config.signing_algorithm) {
            Some(algorithm) => algorithm.to_owned(),
            None => ca_signing_algorithm(&client, resolved.ca_arn)?,
        };
        let validity_days = request.profile.validity_days.max(1);
        let mut body = json!({
            "CertificateAuthorityArn": resolved.ca_arn,
            "Csr": util::base64(request.csr_pem.trim().as_bytes()),
            "SigningAlgorithm": signing_algorithm,
            "Validity": { "Value": validity_days, "Type": "DAYS" },
            "IdempotencyToken": idempotency_token(&request.idempotency_key),
        });
        if let Some(template) = present(&config.template_arn) {
            body["TemplateArn"] = json!(template);
        }
        let issued = client.call("IssueCertificate", &body)?;
        let certificate_arn = issued["CertificateArn"]
            .as_str()
            .filter(|arn| !arn.is_empty())
            .ok_or_else(|| {
                PluginError::upstream(Some(200), "IssueCertificate answered without a CertificateArn", false)
            })?
            .to_owned();
        log::info("certificate requested", &[("certificateArn", &certificate_arn)]);
        wait_for_certificate(ctx, &client, resolved.ca_arn, &certificate_arn)
    }

    fn poll_issue(
        ctx: &CallContext,
        config: &Config,
        reference: &str,
        _request: &IssueRequest,
    ) -> Result<IssueOutcome, PluginError> {
        let resolved = config.resolve()?;
        let client = resolved.client(ctx)?;
        wait_for_certificate(ctx, &client, resolved.ca_arn, reference)
    }

    fn fetch_certificate(
        ctx: &CallContext,
        config: &Config,
        ca_reference: &str,
    ) -> Result<IssuedCertificate, PluginError> {
        let resolved = config.resolve()?;
        let client = resolved.client(ctx)?;
        match get_certificate(&client, resolved.ca_arn, ca_reference)? {
            Some(issued) => Ok(issued),
            None => Err(PluginError::upstream(None, "AWS Private CA is still issuing this certificate", true)),
        }
    }

    fn ca_chain(ctx: &CallContext, config: &Config) -> Result<Vec<String>, PluginError> {
        let resolved = config.resolve()?;
        let client = resolved.client(ctx)?;
        let answer = client
            .call("GetCertificateAuthorityCertificate", &json!({ "CertificateAuthorityArn": resolved.ca_arn }))?;
        let mut chain = util::pem_certificates(answer["Certificate"].as_str().unwrap_or_default());
        chain.extend(util::pem_certificates(answer["CertificateChain"].as_str().unwrap_or_default()));
        Ok(chain)
    }

    fn revoke(ctx: &CallContext, config: &Config, request: &RevokeRequest) -> Result<(), PluginError> {
        let reason = revocation_reason(request.reason)?;
        let serial = colon_serial(&request.certificate.serial_number)
            .ok_or_else(|| PluginError::invalid_input("the certificate's serial number is not hexadecimal"))?;
        let resolved = config.resolve()?;
        let client = resolved.client(ctx)?;
        let body = json!({
            "CertificateAuthorityArn": resolved.ca_arn,
            "CertificateSerial": serial,
            "RevocationReason": reason,
        });
        match client.call("RevokeCertificate", &body) {
            Ok(_) => Ok(()),
            // Revoking twice is not an error for the inventory.
            Err(CallError::Aws(err)) if err.code == "RequestAlreadyProcessedException" => Ok(()),
            Err(err) => Err(err.into()),
        }
    }
}

/// DescribeCertificateAuthority's `CertificateAuthority`.
fn describe_ca(client: &Pca, ca_arn: &str) -> Result<Value, PluginError> {
    let answer = client.call("DescribeCertificateAuthority", &json!({ "CertificateAuthorityArn": ca_arn }))?;
    match &answer["CertificateAuthority"] {
        Value::Object(_) => Ok(answer["CertificateAuthority"].clone()),
        _ => Err(PluginError::upstream(Some(200), "DescribeCertificateAuthority answered without the CA", false)),
    }
}

fn remember_signing_algorithm(ca_arn: &str, described: &Value) {
    if let Some(algorithm) = described["CertificateAuthorityConfiguration"]["SigningAlgorithm"].as_str() {
        // A cache only: failing to write it costs one DescribeCertificateAuthority later.
        let _ = state::set(&format!("{SIGNING_ALGORITHM_STATE}{ca_arn}"), algorithm.as_bytes());
    }
}

/// The CA's own signing algorithm, from state or DescribeCertificateAuthority.
fn ca_signing_algorithm(client: &Pca, ca_arn: &str) -> Result<String, PluginError> {
    let key = format!("{SIGNING_ALGORITHM_STATE}{ca_arn}");
    if let Some(known) = state::get(&key)?.and_then(|bytes| String::from_utf8(bytes).ok()) {
        return Ok(known);
    }
    let described = describe_ca(client, ca_arn)?;
    remember_signing_algorithm(ca_arn, &described);
    described["CertificateAuthorityConfiguration"]["SigningAlgorithm"].as_str().map(str::to_owned).ok_or_else(|| {
        PluginError::invalid_config("/signingAlgorithm", "the CA does not say how it signs: set signingAlgorithm")
    })
}

/// GetCertificate: `None` while AWS answers `RequestInProgressException`.
fn get_certificate(
    client: &Pca,
    ca_arn: &str,
    certificate_arn: &str,
) -> Result<Option<IssuedCertificate>, PluginError> {
    let body = json!({ "CertificateAuthorityArn": ca_arn, "CertificateArn": certificate_arn });
    let answer = match client.call("GetCertificate", &body) {
        Ok(answer) => answer,
        Err(CallError::Aws(err)) if err.code == "RequestInProgressException" => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let certificate = answer["Certificate"]
        .as_str()
        .filter(|pem| pem.contains("BEGIN CERTIFICATE"))
        .ok_or_else(|| PluginError::upstream(Some(200), "GetCertificate answered without a certificate", false))?;
    let chain = util::pem_certificates(answer["CertificateChain"].as_str().unwrap_or_default());
    Ok(Some(IssuedCertificate::pem(certificate.trim().to_owned()).with_chain(chain).with_ca_reference(certificate_arn)))
}

/// Polls GetCertificate within the call's budget; `pending` with the ARN when it runs out.
fn wait_for_certificate(
    ctx: &CallContext,
    client: &Pca,
    ca_arn: &str,
    certificate_arn: &str,
) -> Result<IssueOutcome, PluginError> {
    // Keep a second of the budget for the host to store the result.
    let deadline = poll::Deadline::from_budget(ctx, 1_000);
    // AWS documents that a certificate is usually ready within seconds.
    let backoff = poll::Backoff::new(200, 2_000);
    let polled = poll::until(&deadline, &backoff, || {
        Ok(match get_certificate(client, ca_arn, certificate_arn)? {
            Some(issued) => poll::Step::Done(issued),
            None => poll::Step::Wait { retry_after_secs: None },
        })
    })?;
    Ok(match polled {
        poll::Polled::Done(issued) => IssueOutcome::Issued(issued),
        poll::Polled::OutOfTime { retry_after_secs } => IssueOutcome::Pending {
            reference: certificate_arn.to_owned(),
            retry_after_secs: retry_after_secs.or(Some(5)),
            status_message: "AWS Private CA is still issuing the certificate".to_owned(),
        },
    })
}

/// ACM PCA takes an `IdempotencyToken` of at most 36 characters: the first 128 bits of the
/// host's key's SHA-256, hex.
fn idempotency_token(key: &str) -> String {
    jws::sha256(key.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// A serial as ACM PCA's `CertificateSerial`: colon-separated hex pairs, uppercase.
fn colon_serial(serial_hex: &str) -> Option<String> {
    let digits = serial_hex.trim().trim_start_matches("0x").replace(':', "");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let padded = if digits.len() % 2 == 1 { format!("0{digits}") } else { digits.to_owned() };
    let pairs: Vec<String> =
        padded.as_bytes().chunks(2).map(|pair| String::from_utf8_lossy(pair).to_ascii_uppercase()).collect();
    Some(pairs.join(":"))
}

/// RFC 5280 reasons as ACM PCA names them. ACM PCA has no certificate hold.
fn revocation_reason(reason: RevocationReason) -> Result<&'static str, PluginError> {
    Ok(match reason {
        RevocationReason::KeyCompromise => "KEY_COMPROMISE",
        RevocationReason::CaCompromise => "CERTIFICATE_AUTHORITY_COMPROMISE",
        RevocationReason::AffiliationChanged => "AFFILIATION_CHANGED",
        RevocationReason::Superseded => "SUPERSEDED",
        RevocationReason::CessationOfOperation => "CESSATION_OF_OPERATION",
        RevocationReason::PrivilegeWithdrawn => "PRIVILEGE_WITHDRAWN",
        RevocationReason::AaCompromise => "A_A_COMPROMISE",
        RevocationReason::CertificateHold | RevocationReason::RemoveFromCrl => {
            return Err(PluginError::invalid_input(
                "AWS Private CA revokes for good and has no certificate hold; choose another reason",
            ))
        }
        _ => "UNSPECIFIED",
    })
}

trellis_plugin_sdk::export_ca_connector!(AwsPca);

#[cfg(test)]
mod tests;
