//! What the export macros call: the WIT ⇄ SDK conversions and one generic entry point per
//! export. Keeping the work here keeps the macro expansions (code in the plugin crate) to one
//! delegating line per function.
#![doc(hidden)]

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::bindings::ca_connector::exports::trellis::plugin::connector as wc;
use crate::bindings::imports::trellis::plugin::types as w;
use crate::bindings::integration::exports::trellis::plugin::notifier as wn;
use crate::types::Encoded;
use crate::{
    CaConnector, Capability, CertificateProfile, CertificateRef, ConfigIssue, Integration, IssueOutcome, IssueRequest,
    IssuedCertificate, KeyUsage, NameAttribute, PageRequest, PluginError, PluginInfo, PluginKind, RevocationReason,
    RevokeRequest, Subject, SubjectAltName, TestReport,
};

/// Parses a configuration document into the plugin's typed config. An absent configuration
/// is an empty object, so configs whose fields are all optional need no special case.
pub fn parse_config<T: DeserializeOwned>(config: &str) -> Result<T, PluginError> {
    let config = if config.trim().is_empty() { "{}" } else { config };
    serde_json::from_str(config).map_err(|err| {
        PluginError::InvalidConfig(vec![ConfigIssue {
            field: String::new(),
            message: format!("configuration does not match the schema: {err}"),
        }])
    })
}

/// The JSON Schema of `C`, as the SDK sends it to the host.
pub fn config_schema<C: JsonSchema>() -> serde_json::Value {
    schemars::schema_for!(C).to_value()
}

/// The members of `C` marked secret: `writeOnly: true` in their schema (encrypted at rest,
/// masked in responses), or also `x-trellis-withheld: true` (never enters the sandbox).
/// Returns (JSON pointer, withheld).
pub fn secret_fields<C: JsonSchema>() -> Vec<(String, bool)> {
    let schema = config_schema::<C>();
    let mut found = Vec::new();
    collect_secrets(&schema, &schema, "", &mut found, 0);
    found
}

fn resolve<'a>(root: &'a serde_json::Value, schema: &'a serde_json::Value) -> &'a serde_json::Value {
    match schema.get("$ref").and_then(|r| r.as_str()).and_then(|r| r.strip_prefix("#/$defs/")) {
        Some(name) => root.get("$defs").and_then(|defs| defs.get(name)).unwrap_or(schema),
        None => schema,
    }
}

fn collect_secrets(
    root: &serde_json::Value,
    schema: &serde_json::Value,
    prefix: &str,
    found: &mut Vec<(String, bool)>,
    depth: usize,
) {
    // Recursive types would loop: configurations are shallow.
    if depth > 8 {
        return;
    }
    let schema = resolve(root, schema);
    // `Option<T>` and enums wrap their object schemas in anyOf / oneOf.
    for combinator in ["anyOf", "oneOf", "allOf"] {
        for branch in schema.get(combinator).and_then(|b| b.as_array()).into_iter().flatten() {
            collect_secrets(root, branch, prefix, found, depth + 1);
        }
    }
    let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
        return;
    };
    for (name, property) in properties {
        let pointer = format!("{prefix}/{}", name.replace('~', "~0").replace('/', "~1"));
        let is = |keyword: &str| property.get(keyword).and_then(|v| v.as_bool()).unwrap_or(false);
        if is("writeOnly") || is("x-trellis-withheld") {
            found.push((pointer, is("x-trellis-withheld")));
        } else {
            collect_secrets(root, property, &pointer, found, depth + 1);
        }
    }
}

fn describe<C: JsonSchema>(info: PluginInfo) -> w::PluginInfo {
    let capabilities = info.capabilities.iter().fold(w::Capabilities::empty(), |flags, capability| {
        flags
            | match capability {
                Capability::Issue => w::Capabilities::ISSUE,
                Capability::Revoke => w::Capabilities::REVOKE,
                Capability::Discover => w::Capabilities::DISCOVER,
                Capability::Renew => w::Capabilities::RENEW,
                Capability::RenewalInfo => w::Capabilities::RENEWAL_INFO,
            }
    });
    w::PluginInfo {
        id: info.id,
        version: info.version,
        kind: match info.kind {
            PluginKind::CaConnector => w::PluginKind::CaConnector,
            PluginKind::Integration => w::PluginKind::Integration,
            PluginKind::IssuancePolicy => w::PluginKind::IssuancePolicy,
            PluginKind::AttestationVerifier => w::PluginKind::AttestationVerifier,
        },
        name: info.name,
        description: info.description,
        serves: info.serves,
        config_schema: config_schema::<C>().to_string(),
        secret_fields: secret_fields::<C>()
            .into_iter()
            .map(|(pointer, withheld)| w::SecretField { pointer, withheld })
            .collect(),
        capabilities,
        default_issuer_patterns: info.default_issuer_patterns,
        outbound_hosts: info.outbound_hosts,
    }
}

fn error(err: PluginError) -> w::PluginError {
    match err {
        PluginError::InvalidConfig(issues) => w::PluginError::InvalidConfig(
            issues.into_iter().map(|i| w::ConfigIssue { field: i.field, message: i.message }).collect(),
        ),
        PluginError::InvalidInput(message) => w::PluginError::InvalidInput(message),
        PluginError::Unauthorized(message) => w::PluginError::Unauthorized(message),
        PluginError::NotFound(message) => w::PluginError::NotFound(message),
        PluginError::NotSupported(message) => w::PluginError::NotSupported(message),
        PluginError::Upstream { status, message, retryable } => {
            w::PluginError::Upstream(w::UpstreamFailure { status, message, retryable })
        }
        PluginError::RateLimited(seconds) => w::PluginError::RateLimited(seconds),
        PluginError::Conflict(message) => w::PluginError::Conflict(message),
        PluginError::Rejected(message) => w::PluginError::Rejected(message),
        PluginError::Internal(message) => w::PluginError::Internal(message),
    }
}

fn context(ctx: w::CallContext) -> crate::CallContext {
    crate::CallContext {
        workspace_id: ctx.workspace_id,
        record_id: ctx.record_id,
        request_id: ctx.request_id,
        endpoint: ctx.endpoint,
        time_budget_ms: ctx.time_budget_ms,
    }
}

fn report(report: TestReport) -> w::TestReport {
    w::TestReport {
        success: report.success(),
        message: report.message,
        checks: report
            .checks
            .into_iter()
            .map(|c| w::Check {
                name: c.name,
                status: match c.status {
                    crate::CheckStatus::Pass => w::CheckStatus::Pass,
                    crate::CheckStatus::Warn => w::CheckStatus::Warn,
                    crate::CheckStatus::Fail => w::CheckStatus::Fail,
                    crate::CheckStatus::Skip => w::CheckStatus::Skip,
                },
                message: c.message,
            })
            .collect(),
        details: report.details.to_string(),
    }
}

fn san(name: w::SubjectAltName) -> SubjectAltName {
    use std::net::{Ipv4Addr, Ipv6Addr};
    match name {
        w::SubjectAltName::Dns(name) => SubjectAltName::Dns(name),
        w::SubjectAltName::Email(mailbox) => SubjectAltName::Email(mailbox),
        w::SubjectAltName::Uri(uri) => SubjectAltName::Uri(uri),
        w::SubjectAltName::Ip(w::IpAddress::Ipv4((a, b, c, d))) => SubjectAltName::Ip(Ipv4Addr::new(a, b, c, d).into()),
        w::SubjectAltName::Ip(w::IpAddress::Ipv6((a, b, c, d, e, f, g, h))) => {
            SubjectAltName::Ip(Ipv6Addr::new(a, b, c, d, e, f, g, h).into())
        }
    }
}

fn subject(s: w::Subject) -> Subject {
    Subject {
        common_name: s.common_name,
        organization: s.organization,
        organizational_unit: s.organizational_unit,
        country: s.country,
        state: s.state,
        locality: s.locality,
        other: s.other.into_iter().map(|a| NameAttribute { oid: a.oid, value: a.value }).collect(),
    }
}

fn key_usages(flags: w::KeyUsages) -> Vec<KeyUsage> {
    [
        (w::KeyUsages::DIGITAL_SIGNATURE, KeyUsage::DigitalSignature),
        (w::KeyUsages::CONTENT_COMMITMENT, KeyUsage::ContentCommitment),
        (w::KeyUsages::KEY_ENCIPHERMENT, KeyUsage::KeyEncipherment),
        (w::KeyUsages::DATA_ENCIPHERMENT, KeyUsage::DataEncipherment),
        (w::KeyUsages::KEY_AGREEMENT, KeyUsage::KeyAgreement),
        (w::KeyUsages::KEY_CERT_SIGN, KeyUsage::KeyCertSign),
        (w::KeyUsages::CRL_SIGN, KeyUsage::CrlSign),
        (w::KeyUsages::ENCIPHER_ONLY, KeyUsage::EncipherOnly),
        (w::KeyUsages::DECIPHER_ONLY, KeyUsage::DecipherOnly),
    ]
    .into_iter()
    .filter(|(flag, _)| flags.bits() & flag.bits() != 0)
    .map(|(_, usage)| usage)
    .collect()
}

fn certificate_ref(c: w::CertificateRef) -> CertificateRef {
    CertificateRef {
        pem: c.certificate.map(|c| c.pem),
        serial_number: c.serial_number,
        authority_key_id: c.authority_key_id,
        not_before: c.not_before,
        not_after: c.not_after,
        ca_reference: c.ca_reference,
    }
}

fn issue_request(r: wc::IssueRequest) -> IssueRequest {
    IssueRequest {
        idempotency_key: r.idempotency_key,
        csr_pem: r.csr.pem,
        csr_der: r.csr.der,
        template: r.template,
        profile: CertificateProfile {
            common_name: r.profile.subject.common_name.clone(),
            subject: subject(r.profile.subject),
            subject_alt_names: r.profile.subject_alt_names.into_iter().map(san).collect(),
            key_usages: key_usages(r.profile.key_usages),
            extended_key_usages: r.profile.extended_key_usages,
            validity_days: r.profile.validity_days,
        },
        replaces: r.replaces.map(certificate_ref),
        metadata: serde_json::from_str(&r.metadata).unwrap_or_else(|_| serde_json::json!({})),
    }
}

fn issued(c: IssuedCertificate) -> wc::IssuedCertificate {
    wc::IssuedCertificate {
        certificate: certificate_data(c.certificate),
        chain: c.chain.into_iter().map(certificate_data).collect(),
        ca_reference: c.ca_reference,
    }
}

fn certificate_data(encoded: Encoded) -> w::CertificateData {
    match encoded {
        Encoded::Pem(text) => w::CertificateData::Pem(text),
        Encoded::Der(der) => w::CertificateData::Der(der),
    }
}

fn outcome(o: IssueOutcome) -> wc::IssueOutcome {
    match o {
        IssueOutcome::Issued(c) => wc::IssueOutcome::Issued(issued(c)),
        IssueOutcome::Pending { reference, retry_after_secs, status_message } => {
            wc::IssueOutcome::Pending(wc::PendingIssue {
                reference,
                retry_after_seconds: retry_after_secs,
                status_message,
            })
        }
    }
}

pub(crate) fn reason(r: w::RevocationReason) -> RevocationReason {
    match r {
        w::RevocationReason::Unspecified => RevocationReason::Unspecified,
        w::RevocationReason::KeyCompromise => RevocationReason::KeyCompromise,
        w::RevocationReason::CaCompromise => RevocationReason::CaCompromise,
        w::RevocationReason::AffiliationChanged => RevocationReason::AffiliationChanged,
        w::RevocationReason::Superseded => RevocationReason::Superseded,
        w::RevocationReason::CessationOfOperation => RevocationReason::CessationOfOperation,
        w::RevocationReason::CertificateHold => RevocationReason::CertificateHold,
        w::RevocationReason::RemoveFromCrl => RevocationReason::RemoveFromCrl,
        w::RevocationReason::PrivilegeWithdrawn => RevocationReason::PrivilegeWithdrawn,
        w::RevocationReason::AaCompromise => RevocationReason::AaCompromise,
    }
}

type WitResult<T> = Result<T, w::PluginError>;

/// The connector exports, generic over the plugin.
pub mod connector {
    use super::*;

    fn config<P: CaConnector>(config: &str) -> Result<P::Config, PluginError> {
        parse_config::<P::Config>(config)
    }

    pub fn describe<P: CaConnector>() -> w::PluginInfo {
        super::describe::<P::Config>(P::describe())
    }

    pub fn validate_config<P: CaConnector>(raw: String) -> WitResult<()> {
        config::<P>(&raw).and_then(|c| P::validate_config(&c)).map_err(error)
    }

    pub fn setup<P: CaConnector>(ctx: w::CallContext, raw: String) -> WitResult<()> {
        config::<P>(&raw).and_then(|c| P::setup(&context(ctx), &c)).map_err(error)
    }

    pub fn test_connection<P: CaConnector>(ctx: w::CallContext, raw: String) -> WitResult<w::TestReport> {
        config::<P>(&raw).and_then(|c| P::test_connection(&context(ctx), &c)).map(report).map_err(error)
    }

    pub fn issue<P: CaConnector>(ctx: w::CallContext, raw: String, r: wc::IssueRequest) -> WitResult<wc::IssueOutcome> {
        config::<P>(&raw).and_then(|c| P::issue(&context(ctx), &c, &issue_request(r))).map(outcome).map_err(error)
    }

    pub fn poll_issue<P: CaConnector>(
        ctx: w::CallContext,
        raw: String,
        reference: String,
        r: wc::IssueRequest,
    ) -> WitResult<wc::IssueOutcome> {
        config::<P>(&raw)
            .and_then(|c| P::poll_issue(&context(ctx), &c, &reference, &issue_request(r)))
            .map(outcome)
            .map_err(error)
    }

    pub fn fetch_certificate<P: CaConnector>(
        ctx: w::CallContext,
        raw: String,
        reference: String,
    ) -> WitResult<wc::IssuedCertificate> {
        config::<P>(&raw).and_then(|c| P::fetch_certificate(&context(ctx), &c, &reference)).map(issued).map_err(error)
    }

    pub fn ca_chain<P: CaConnector>(ctx: w::CallContext, raw: String) -> WitResult<Vec<w::CertificateData>> {
        config::<P>(&raw)
            .and_then(|c| P::ca_chain(&context(ctx), &c))
            .map(|chain| chain.into_iter().map(w::CertificateData::Pem).collect())
            .map_err(error)
    }

    pub fn revoke<P: CaConnector>(ctx: w::CallContext, raw: String, r: wc::RevokeRequest) -> WitResult<()> {
        let request = RevokeRequest { certificate: certificate_ref(r.certificate), reason: reason(r.reason) };
        config::<P>(&raw).and_then(|c| P::revoke(&context(ctx), &c, &request)).map_err(error)
    }

    pub fn list_certificates<P: CaConnector>(
        ctx: w::CallContext,
        raw: String,
        page: w::PageRequest,
    ) -> WitResult<wc::CertificatePage> {
        let page = PageRequest { cursor: page.cursor, limit: page.limit };
        config::<P>(&raw)
            .and_then(|c| P::list_certificates(&context(ctx), &c, &page))
            .map(|page| wc::CertificatePage {
                items: page
                    .items
                    .into_iter()
                    .map(|d| wc::DiscoveredCertificate {
                        certificate: w::CertificateData::Pem(d.certificate_pem),
                        ca_reference: d.ca_reference,
                        revocation: d.revoked_at.map(|revoked_at| w::RevocationInfo {
                            revoked_at,
                            reason: w::RevocationReason::Unspecified,
                        }),
                    })
                    .collect(),
                next_cursor: page.next_cursor,
            })
            .map_err(error)
    }

    pub fn renewal_info<P: CaConnector>(
        ctx: w::CallContext,
        raw: String,
        certificate: w::CertificateRef,
    ) -> WitResult<Option<wc::RenewalWindow>> {
        config::<P>(&raw)
            .and_then(|c| P::renewal_info(&context(ctx), &c, &certificate_ref(certificate)))
            .map(|window| {
                window.map(|w| wc::RenewalWindow {
                    start: w.start,
                    end: w.end,
                    explanation_url: w.explanation_url,
                    retry_after_seconds: w.retry_after_secs,
                })
            })
            .map_err(error)
    }
}

/// The integration exports, generic over the plugin.
pub mod integration {
    use super::*;

    fn config<P: Integration>(config: &str) -> Result<P::Config, PluginError> {
        parse_config::<P::Config>(config)
    }

    pub fn describe<P: Integration>() -> w::PluginInfo {
        super::describe::<P::Config>(P::describe())
    }

    pub fn validate_config<P: Integration>(raw: String) -> WitResult<()> {
        config::<P>(&raw).and_then(|c| P::validate_config(&c)).map_err(error)
    }

    pub fn test<P: Integration>(ctx: w::CallContext, raw: String) -> WitResult<w::TestReport> {
        config::<P>(&raw).and_then(|c| P::test(&context(ctx), &c)).map(report).map_err(error)
    }

    pub fn notify<P: Integration>(ctx: w::CallContext, raw: String, event: wn::Event) -> WitResult<wn::Delivery> {
        let event = crate::Event {
            id: event.id,
            event_type: event.event_type,
            occurred_at_ms: event.occurred_at,
            summary: event.summary,
            payload: serde_json::from_str(&event.payload).unwrap_or_else(|_| serde_json::json!({})),
        };
        config::<P>(&raw)
            .and_then(|c| P::notify(&context(ctx), &c, &event))
            .map(|d| wn::Delivery { status: d.status, reference: d.reference })
            .map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A certificate goes to the host in the encoding the connector gave: DER stays DER (no
    /// text to encode or parse back), PEM stays the CA's text.
    #[test]
    fn issued_certificates_keep_their_encoding() {
        let der = issued(IssuedCertificate::der(vec![0x30, 1]).with_chain_der(vec![vec![0x30, 2]]));
        assert!(matches!(&der.certificate, w::CertificateData::Der(bytes) if bytes == &[0x30, 1]));
        assert!(matches!(&der.chain[..], [w::CertificateData::Der(bytes)] if bytes == &[0x30, 2]));
        let pem = issued(IssuedCertificate::pem("leaf text").with_chain(vec!["chain text".into()]));
        assert!(matches!(&pem.certificate, w::CertificateData::Pem(text) if text == "leaf text"));
        assert!(matches!(&pem.chain[..], [w::CertificateData::Pem(text)] if text == "chain text"));
        assert_eq!(IssuedCertificate::der(vec![1, 2, 3]).certificate_pem(), crate::pki::certificate_pem(&[1, 2, 3]));
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Dns {
        zone: String,
        #[schemars(extend("writeOnly" = true))]
        secret_key: String,
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Config {
        url: String,
        #[schemars(extend("writeOnly" = true))]
        api_key: Option<String>,
        #[schemars(extend("writeOnly" = true, "x-trellis-withheld" = true))]
        ca_key_pem: Option<String>,
        dns: Option<Dns>,
    }

    #[test]
    fn secret_fields_come_from_the_config_type_nested_ones_too() {
        let mut secrets = secret_fields::<Config>();
        secrets.sort();
        assert_eq!(
            secrets,
            [("/apiKey".to_owned(), false), ("/caKeyPem".to_owned(), true), ("/dns/secretKey".to_owned(), false)]
        );
        assert_eq!(config_schema::<Config>()["required"], json!(["url"]));
    }

    #[test]
    fn a_config_that_does_not_parse_names_the_problem() {
        let err = parse_config::<Config>(r#"{"url": 5}"#).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.starts_with("invalid configuration: configuration does not match the schema: invalid type"),
            "{err}"
        );
        assert!(parse_config::<serde_json::Value>("").is_ok(), "an empty config is an empty object");
    }

    #[test]
    fn a_report_succeeds_only_without_failed_checks() {
        use crate::{Check, TestReport};
        assert!(TestReport::from_checks("ok", vec![Check::pass("a", ""), Check::warn("b", "")]).success());
        assert!(!TestReport::from_checks("no", vec![Check::pass("a", ""), Check::fail("b", "")]).success());
        assert!(!report(TestReport::from_checks("no", vec![Check::fail("b", "")])).success);
    }

    #[test]
    fn errors_read_as_sentences() {
        assert_eq!(
            PluginError::upstream(Some(502), "bad gateway", true).to_string(),
            "upstream answered 502: bad gateway"
        );
        assert_eq!(
            PluginError::invalid_config("/url", "must be https").to_string(),
            "invalid configuration: /url: must be https"
        );
        assert_eq!(
            crate::http::HttpError::Denied.to_string(),
            "outbound request denied by the host's policy (ask the operator to grant the host)"
        );
    }

    /// `pki::sign_csr` signs only the request's own profile: every part must reach the plugin.
    #[test]
    fn the_whole_profile_reaches_the_plugin() {
        let subject = w::Subject {
            common_name: Some("a.example".into()),
            organization: Some("Example".into()),
            organizational_unit: None,
            country: Some("DE".into()),
            state: None,
            locality: None,
            other: vec![w::NameAttribute { oid: "2.5.4.5".into(), value: "42".into() }],
        };
        let request = issue_request(wc::IssueRequest {
            idempotency_key: "k".into(),
            csr: w::DerPem { der: vec![1], pem: String::new() },
            template: None,
            profile: w::CertificateProfile {
                subject,
                subject_alt_names: vec![w::SubjectAltName::Dns("a.example".into())],
                key_usages: w::KeyUsages::DIGITAL_SIGNATURE | w::KeyUsages::KEY_ENCIPHERMENT,
                extended_key_usages: vec!["1.3.6.1.5.5.7.3.1".into()],
                validity_days: 30,
            },
            replaces: None,
            metadata: "{}".into(),
        });
        let profile = request.profile;
        assert_eq!(profile.common_name.as_deref(), Some("a.example"));
        assert_eq!(profile.subject.common_name, profile.common_name);
        assert_eq!(
            (profile.subject.organization.as_deref(), profile.subject.country.as_deref()),
            (Some("Example"), Some("DE"))
        );
        assert_eq!(profile.subject.other, [NameAttribute { oid: "2.5.4.5".into(), value: "42".into() }]);
        assert_eq!(profile.key_usages, [KeyUsage::DigitalSignature, KeyUsage::KeyEncipherment]);
    }

    #[test]
    fn pki_errors_map_onto_plugin_errors() {
        use crate::pki::{certificate_pem, PkiError};
        assert!(matches!(PluginError::from(PkiError::InvalidCsr("bad".into())), PluginError::InvalidInput(_)));
        assert!(matches!(PluginError::from(PkiError::UnknownSerial("0a".into())), PluginError::NotFound(_)));
        let no_authority = PluginError::from(PkiError::NoAuthority);
        assert!(matches!(&no_authority, PluginError::NotFound(m) if m.contains("has not been set up")));
        assert!(matches!(PluginError::from(PkiError::Unavailable("x".into())), PluginError::NotSupported(_)));
        let pem = certificate_pem(&[0u8; 60]);
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines.first(), Some(&"-----BEGIN CERTIFICATE-----"));
        assert_eq!(lines.last(), Some(&"-----END CERTIFICATE-----"));
        assert_eq!(lines[1..lines.len() - 1].iter().map(|l| l.len()).collect::<Vec<_>>(), [64, 16]);
    }
}

pub mod policy {
    use super::*;
    use crate::bindings::issuance_policy::exports::trellis::plugin::policy as wp;
    use crate::policy::{
        Decision, EvaluationRequest, IssuancePolicy, IssuanceSource, Requester, RequesterKind, SubjectKey,
    };

    fn config<P: IssuancePolicy>(config: &str) -> Result<P::Config, PluginError> {
        parse_config::<P::Config>(config)
    }

    pub fn describe<P: IssuancePolicy>() -> w::PluginInfo {
        super::describe::<P::Config>(P::describe())
    }

    pub fn validate_config<P: IssuancePolicy>(raw: String) -> WitResult<()> {
        config::<P>(&raw).and_then(|c| P::validate_config(&c)).map_err(error)
    }

    fn request(r: wp::EvaluationRequest) -> EvaluationRequest {
        EvaluationRequest {
            ca_type: r.ca_type,
            ca_id: r.ca_id,
            template: r.template,
            subject: subject(r.subject),
            subject_alt_names: r.subject_alt_names.into_iter().map(san).collect(),
            key: SubjectKey {
                algorithm: r.key.algorithm,
                size_bits: r.key.size_bits,
                curve: r.key.curve,
                server_generated: r.key.server_generated,
            },
            validity_days: r.validity_days,
            requester: Requester {
                kind: match r.requester.kind {
                    wp::RequesterKind::User => RequesterKind::User,
                    wp::RequesterKind::ApiKey => RequesterKind::ApiKey,
                    wp::RequesterKind::Agent => RequesterKind::Agent,
                    wp::RequesterKind::System => RequesterKind::System,
                },
                id: r.requester.id,
                display_name: r.requester.display_name,
            },
            source: match r.source {
                wp::Source::Api => IssuanceSource::Api,
                wp::Source::RequestWorkflow => IssuanceSource::RequestWorkflow,
                wp::Source::Attestation => IssuanceSource::Attestation,
                wp::Source::Renewal => IssuanceSource::Renewal,
            },
        }
    }

    fn decision(d: Decision) -> wp::Decision {
        let reasons = |reasons: Vec<crate::policy::Reason>| {
            reasons.into_iter().map(|r| wp::Reason { code: r.code, message: r.message }).collect()
        };
        match d {
            Decision::Allow { max_validity_days } => wp::Decision::Allow(max_validity_days),
            Decision::Deny(list) => wp::Decision::Deny(reasons(list)),
            Decision::RequireApproval(list) => wp::Decision::RequireApproval(reasons(list)),
        }
    }

    pub fn evaluate<P: IssuancePolicy>(
        ctx: w::CallContext,
        raw: String,
        r: wp::EvaluationRequest,
    ) -> WitResult<wp::Decision> {
        config::<P>(&raw).and_then(|c| P::evaluate(&context(ctx), &c, &request(r))).map(decision).map_err(error)
    }
}

pub mod verifier {
    use super::*;
    use crate::bindings::attestation_verifier::exports::trellis::plugin::verifier as wv;
    use crate::verifier::{
        AttestationVerifier, BoundCsr, EnrolledDevice, EnrollmentRequest, EnrollmentVerdict, Evidence, PcrValue,
        Tpm2Certification, Tpm2Evidence, TpmClock, TrustAnchor, Verdict, VerifyRequest,
    };

    fn config<P: AttestationVerifier>(config: &str) -> Result<P::Config, PluginError> {
        parse_config::<P::Config>(config)
    }

    pub fn describe<P: AttestationVerifier>() -> w::PluginInfo {
        super::describe::<P::Config>(P::describe())
    }

    pub fn validate_config<P: AttestationVerifier>(raw: String) -> WitResult<()> {
        config::<P>(&raw).and_then(|c| P::validate_config(&c)).map_err(error)
    }

    fn anchors(anchors: Vec<wv::TrustAnchor>) -> Vec<TrustAnchor> {
        anchors
            .into_iter()
            .map(|a| TrustAnchor { certificate_der: a.certificate_der, manufacturer: a.manufacturer })
            .collect()
    }

    fn pcr(p: wv::PcrValue) -> PcrValue {
        PcrValue { bank: p.bank, index: p.index, digest: p.digest }
    }

    fn clock(c: wv::TpmClock) -> TpmClock {
        TpmClock { clock: c.clock, reset_count: c.reset_count, restart_count: c.restart_count, safe: c.safe }
    }

    /// A policy document that is not JSON reaches the plugin as `null`, which its own parsing
    /// then refuses with a message.
    fn json(text: &str) -> serde_json::Value {
        serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
    }

    fn failures(list: &[crate::verifier::Failure]) -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    }

    pub fn enroll<P: AttestationVerifier>(
        ctx: w::CallContext,
        raw: String,
        r: wv::EnrollmentRequest,
    ) -> WitResult<wv::EnrollmentVerdict> {
        let request = EnrollmentRequest {
            ek_certificate: r.ek_certificate,
            ek_chain: r.ek_chain,
            ek_public: r.ek_public,
            ak_public: r.ak_public,
            trust_anchors: anchors(r.trust_anchors),
            policy: r.policy.as_deref().map(json),
            secret: r.secret,
            entropy: r.entropy,
            now: r.now,
        };
        let verdict: EnrollmentVerdict =
            config::<P>(&raw).and_then(|c| P::enroll(&context(ctx), &c, &request)).map_err(error)?;
        let passed = verdict.is_passed();
        Ok(wv::EnrollmentVerdict {
            passed,
            failures: failures(&verdict.failures),
            ak_name: verdict.ak_name,
            ek_manufacturer: verdict.ek_manufacturer,
            challenge: verdict.challenge.filter(|_| passed).map(|c| wv::ActivationChallenge {
                credential_blob: c.credential_blob,
                encrypted_secret: c.encrypted_secret,
            }),
        })
    }

    pub fn verify<P: AttestationVerifier>(
        ctx: w::CallContext,
        raw: String,
        r: wv::VerifyRequest,
    ) -> WitResult<wv::Verdict> {
        let evidence = match r.evidence {
            wv::Evidence::Tpm2(e) => Evidence::Tpm2(Tpm2Evidence {
                quote: e.quote,
                quote_signature: e.quote_signature,
                pcrs: e.pcrs.into_iter().map(pcr).collect(),
                certification: e.certification.map(|c| Tpm2Certification {
                    attest: c.attest,
                    signature: c.signature,
                    certified_key_public: c.certified_key_public,
                }),
                event_log: e.event_log,
            }),
            wv::Evidence::Other(o) => Evidence::Other { format: o.format, data: o.data },
        };
        let request = VerifyRequest {
            evidence,
            policy: json(&r.policy),
            nonce: r.nonce,
            nonce_issued_at: r.nonce_issued_at,
            now: r.now,
            device: EnrolledDevice {
                ak_public: r.device.ak_public,
                ak_name: r.device.ak_name,
                ek_certificate: r.device.ek_certificate,
                ek_chain: r.device.ek_chain,
                last_clock: r.device.last_clock.map(clock),
            },
            csr: r.csr.map(|c| BoundCsr { der: c.der, public_key: c.public_key }),
            trust_anchors: anchors(r.trust_anchors),
        };
        let verdict: Verdict = config::<P>(&raw).and_then(|c| P::verify(&context(ctx), &c, &request)).map_err(error)?;
        Ok(wv::Verdict {
            passed: verdict.is_passed(),
            failures: failures(&verdict.failures),
            trust_score: verdict.trust_score(),
            verified_pcrs: verdict
                .verified_pcrs
                .into_iter()
                .map(|p| wv::PcrValue { bank: p.bank, index: p.index, digest: p.digest })
                .collect(),
            ek_manufacturer: verdict.ek_manufacturer,
            clock: verdict.clock.map(|c| wv::TpmClock {
                clock: c.clock,
                reset_count: c.reset_count,
                restart_count: c.restart_count,
                safe: c.safe,
            }),
        })
    }
}

/// The pure worlds' glue, driven natively with WIT values as the host sends them.
#[cfg(test)]
mod pure_world_tests {
    use super::verifier as gv;
    use super::w;
    use crate::bindings::attestation_verifier::exports::trellis::plugin::verifier as wv;
    use crate::verifier::*;
    use crate::{CallContext, PluginError, PluginInfo};

    /// Claims every enrollment passed but reports a failure, and answers verify with failures.
    struct Careless;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NoConfig {}

    impl AttestationVerifier for Careless {
        type Config = NoConfig;
        fn describe() -> PluginInfo {
            PluginInfo::attestation_verifier("t.careless", "1.0.0", "Careless", &["tpm2"])
        }
        fn enroll(_: &CallContext, _: &NoConfig, r: &EnrollmentRequest) -> Result<EnrollmentVerdict, PluginError> {
            let challenge = ActivationChallenge { credential_blob: r.secret.clone(), encrypted_secret: vec![] };
            if r.ak_public.is_empty() {
                // The constructors cannot express "passed with failures": a failed verdict never
                // carries a challenge to the host.
                return Ok(EnrollmentVerdict::failed(vec![Failure::new("ak_attributes_invalid", "empty")]));
            }
            Ok(EnrollmentVerdict::passed(b"name".to_vec(), challenge).with_ek_manufacturer("id:00000001"))
        }
        fn verify(_: &CallContext, _: &NoConfig, r: &VerifyRequest) -> Result<Verdict, PluginError> {
            let Evidence::Tpm2(e) = &r.evidence else { return Err(PluginError::invalid_input("tpm2 only")) };
            let failures =
                if e.quote.ends_with(&r.nonce) { vec![] } else { vec![Failure::new("quote_nonce_mismatch", "")] };
            Ok(Verdict::from_checks(failures, e.pcrs.clone(), 200))
        }
    }

    fn ctx() -> w::CallContext {
        w::CallContext {
            workspace_id: "ws".into(),
            record_id: "dev".into(),
            request_id: "req".into(),
            endpoint: None,
            time_budget_ms: 1000,
        }
    }

    fn enrollment(ak_public: Vec<u8>) -> wv::EnrollmentRequest {
        wv::EnrollmentRequest {
            ek_certificate: None,
            ek_chain: vec![],
            ek_public: vec![1],
            ak_public,
            trust_anchors: vec![],
            policy: Some("{\"requiredPcrs\":[7]}".into()),
            secret: vec![9; 32],
            entropy: vec![0; 64],
            now: 0,
        }
    }

    #[test]
    fn enrollment_verdicts_reach_the_host_consistent() {
        let passed = gv::enroll::<Careless>(ctx(), "{}".into(), enrollment(vec![2])).expect("enroll");
        assert!(passed.passed && passed.failures.is_empty());
        assert_eq!(passed.challenge.map(|c| c.credential_blob), Some(vec![9; 32]));
        assert_eq!(passed.ek_manufacturer.as_deref(), Some("id:00000001"));
        let failed = gv::enroll::<Careless>(ctx(), "{}".into(), enrollment(vec![])).expect("enroll");
        assert!(!failed.passed && failed.challenge.is_none());
        assert_eq!(failed.failures, ["ak_attributes_invalid: empty"]);
    }

    #[test]
    fn verdicts_pass_only_without_failures_and_carry_no_trust_when_failed() {
        let request = |quote: &[u8]| wv::VerifyRequest {
            evidence: wv::Evidence::Tpm2(wv::Tpm2Evidence {
                quote: quote.to_vec(),
                quote_signature: vec![],
                pcrs: vec![wv::PcrValue { bank: "SHA256".into(), index: 7, digest: vec![0; 32] }],
                certification: None,
                event_log: None,
            }),
            policy: "{}".into(),
            nonce: b"nonce".to_vec(),
            nonce_issued_at: 0,
            now: 0,
            device: wv::EnrolledDevice {
                ak_public: vec![],
                ak_name: vec![],
                ek_certificate: None,
                ek_chain: vec![],
                last_clock: None,
            },
            csr: None,
            trust_anchors: vec![],
        };
        let ok = gv::verify::<Careless>(ctx(), "{}".into(), request(b"quote+nonce")).expect("verify");
        assert!(ok.passed);
        assert_eq!((ok.trust_score, ok.verified_pcrs.len()), (100, 1), "scores are capped at 100");
        let bad = gv::verify::<Careless>(ctx(), "{}".into(), request(b"quote")).expect("verify");
        assert!(!bad.passed);
        assert_eq!((bad.trust_score, bad.failures.as_slice()), (0, ["quote_nonce_mismatch:".to_owned()].as_slice()));
        let refused = gv::verify::<Careless>(
            ctx(),
            "{}".into(),
            wv::VerifyRequest {
                evidence: wv::Evidence::Other(wv::OpaqueEvidence { format: "x".into(), data: vec![] }),
                ..request(b"")
            },
        );
        assert!(matches!(refused, Err(w::PluginError::InvalidInput(_))));
    }

    #[test]
    fn policies_read_the_request_and_answer_decisions() {
        use super::policy as gp;
        use crate::bindings::issuance_policy::exports::trellis::plugin::policy as wp;
        use crate::policy::*;

        struct WildcardsNeedApproval;
        impl IssuancePolicy for WildcardsNeedApproval {
            type Config = NoConfig;
            fn describe() -> PluginInfo {
                PluginInfo::issuance_policy("t.wild", "1.0.0", "Wildcards", &["wild"])
            }
            fn evaluate(_: &CallContext, _: &NoConfig, r: &EvaluationRequest) -> Result<Decision, PluginError> {
                Ok(if r.dns_names().any(|n| n.starts_with("*.")) {
                    Decision::RequireApproval(vec![Reason::new("wildcard", "wildcards need approval")])
                } else {
                    Decision::allow_at_most(90)
                })
            }
        }
        let request = |name: &str| wp::EvaluationRequest {
            ca_type: "internal".into(),
            ca_id: "ca".into(),
            template: None,
            subject: w::Subject {
                common_name: Some(name.into()),
                organization: None,
                organizational_unit: None,
                country: None,
                state: None,
                locality: None,
                other: vec![],
            },
            subject_alt_names: vec![w::SubjectAltName::Dns(name.into())],
            key: wp::SubjectKey {
                algorithm: "ec".into(),
                size_bits: 256,
                curve: Some("p256".into()),
                server_generated: false,
            },
            validity_days: 365,
            requester: wp::Requester { kind: wp::RequesterKind::ApiKey, id: "key".into(), display_name: None },
            source: wp::Source::Renewal,
        };
        let info = gp::describe::<WildcardsNeedApproval>();
        assert!(matches!(info.kind, w::PluginKind::IssuancePolicy));
        assert!(matches!(
            gp::evaluate::<WildcardsNeedApproval>(ctx(), "{}".into(), request("a.example")),
            Ok(wp::Decision::Allow(Some(90)))
        ));
        let held = gp::evaluate::<WildcardsNeedApproval>(ctx(), "{}".into(), request("*.example"));
        assert!(matches!(held, Ok(wp::Decision::RequireApproval(reasons)) if reasons[0].code == "wildcard"));
    }
}
