//! What the export macros call: the WIT ⇄ SDK conversions and one generic entry point per
//! export. Keeping the work here keeps the macro expansions (code in the plugin crate) to one
//! delegating line per function.
#![doc(hidden)]

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::bindings::ca_connector::exports::trellis::plugin::connector as wc;
use crate::bindings::imports::trellis::plugin::types as w;
use crate::bindings::integration::exports::trellis::plugin::notifier as wn;
use crate::{
    CaConnector, Capability, CertificateProfile, CertificateRef, ConfigIssue, Integration, IssueOutcome, IssueRequest,
    IssuedCertificate, PageRequest, PluginError, PluginInfo, PluginKind, RevocationReason, RevokeRequest,
    SubjectAltName, TestReport,
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

fn certificate_ref(c: w::CertificateRef) -> CertificateRef {
    CertificateRef {
        pem: c.certificate.map(|c| c.pem),
        serial_number: c.serial_number,
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
            common_name: r.profile.subject.common_name,
            subject_alt_names: r.profile.subject_alt_names.into_iter().map(san).collect(),
            extended_key_usages: r.profile.extended_key_usages,
            validity_days: r.profile.validity_days,
        },
        replaces: r.replaces.map(certificate_ref),
        metadata: serde_json::from_str(&r.metadata).unwrap_or_else(|_| serde_json::json!({})),
    }
}

fn issued(c: IssuedCertificate) -> wc::IssuedCertificate {
    wc::IssuedCertificate {
        certificate: w::CertificateData::Pem(c.certificate_pem),
        chain: c.chain_pem.into_iter().map(w::CertificateData::Pem).collect(),
        ca_reference: c.ca_reference,
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

fn reason(r: w::RevocationReason) -> RevocationReason {
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
                    explanation_url: None,
                    retry_after_seconds: None,
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
}
