//! CA probes (plugin `trellis.ca-probe`): the CA types users register for which Trellis has no
//! issuing connector yet. They can be registered, tested and health-checked; issuing, revoking
//! and listing through them answer `not-supported` (the host refuses those calls up front, since
//! the plugin declares no capability).
//!
//! Types and their probe (spec §4.1):
//! - `microsoft_adcs` (enterprise CA): `GET {url}/certsrv/` (web enrolment); a 401 with
//!   `WWW-Authenticate` is reachable (it wants Windows authentication).
//! - `google_cas`, `azure_key_vault`, `aws_acm`: HTTPS reachability of `url` (any HTTP answer
//!   over TLS; a 5xx is a warning).
//!
//! The commercial CAs with ACME servers (`digicert`, `sectigo`, `globalsign`, `entrust`) are
//! served by the ACME connector (`plugins/acme`) since its 0.2.0, which issues through them; this
//! plugin stopped declaring them in 0.2.0 so that, once both are upgraded, their records resolve
//! to the connector that issues.
//!
//! `hashicorp_vault` was probed here until it got its issuing connector, `plugins/vault`; its
//! records are served by that plugin now (a record finds its connector by type at each call).
//!
//! Every type: a bundled `config.rootCertificate` (PEM) is checked on its own, by the SDK's
//! `root_certificate` (shared with `plugins/acme`): it parses, is a CA (basicConstraints
//! CA:TRUE), and is within its validity (a warning inside 30 days of expiry). `validate-config`
//! refuses one that does not parse or is not a CA; expiry is the test's.
//!
//! One plugin serves several types: its configuration declares `caType` with the schema
//! annotation `x-trellis-record-type`, which the host fills with the record's type on every call.

#![forbid(unsafe_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use trellis_plugin_sdk::prelude::*;

/// How a type is probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// AD CS web enrolment, `/certsrv/`.
    WebEnrolment,
    /// Any HTTP answer over TLS.
    Https,
}

/// The served types: name, probe, default issuer patterns (the host applies a `type:` prefixed
/// default only to records of that type).
pub const TYPES: [(&str, Probe, &[&str]); 4] = [
    ("microsoft_adcs", Probe::WebEnrolment, &[]),
    ("google_cas", Probe::Https, &[]),
    ("azure_key_vault", Probe::Https, &[]),
    ("aws_acm", Probe::Https, &["Amazon"]),
];

const PROBE_TIMEOUT_MS: u64 = 10_000;

/// A probed CA's configuration. Credentials the CA type needs later (`apiKey`, …) may be stored
/// beside these members; the probes do not use them.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Config {
    /// The record's CA type. Filled in by the host on every call; not stored.
    #[schemars(extend("x-trellis-record-type" = true))]
    pub ca_type: Option<String>,
    /// The CA's root certificate (PEM), checked by the test: it parses, is a CA, is not expired.
    pub root_certificate: Option<String>,
}

pub struct CaProbe;

fn probe_of(ca_type: &str) -> Option<Probe> {
    TYPES.iter().find(|(name, _, _)| *name == ca_type).map(|(_, probe, _)| *probe)
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn base_url(ctx: &CallContext) -> Option<&str> {
    ctx.endpoint.as_deref().map(|u| u.trim_end_matches('/')).filter(|u| !u.is_empty())
}

fn probe_certsrv(base: &str, checks: &mut Vec<Check>) -> serde_json::Value {
    let base = base.strip_suffix("/certsrv").unwrap_or(base);
    let url = format!("{base}/certsrv/");
    match http::Request::get(&url).timeout_ms(PROBE_TIMEOUT_MS).max_response_bytes(256 * 1024).send() {
        Ok(response) => {
            let authenticate = response.header("www-authenticate");
            let check = match response.status {
                200..=299 => Check::pass("web-enrolment", format!("{url} answered HTTP {}", response.status)),
                401 if authenticate.is_some() => Check::pass(
                    "web-enrolment",
                    format!(
                        "{url} is there and asks for authentication ({})",
                        authenticate.as_deref().unwrap_or_default()
                    ),
                ),
                401 | 403 => Check::warn(
                    "web-enrolment",
                    format!(
                        "{url} refused the request (HTTP {}) without naming an authentication scheme",
                        response.status
                    ),
                ),
                404 => Check::fail("web-enrolment", format!("{url}: no web enrolment there (HTTP 404)")),
                other => Check::fail("web-enrolment", format!("{url} answered HTTP {other}")),
            };
            checks.push(Check::pass("reachable", format!("{url} answered over HTTP")));
            checks.push(check);
            json!({ "webEnrolmentUrl": url, "httpStatus": response.status, "authenticate": authenticate })
        }
        Err(err) => {
            checks.push(Check::fail("reachable", format!("{url}: {err}")));
            json!({ "webEnrolmentUrl": url })
        }
    }
}

fn probe_https(base: &str, checks: &mut Vec<Check>) -> serde_json::Value {
    if !base.starts_with("https://") {
        checks.push(Check::warn("https", format!("{base} is not an https:// URL")));
    }
    match http::Request::get(base).timeout_ms(PROBE_TIMEOUT_MS).max_response_bytes(256 * 1024).send() {
        Ok(response) if response.status >= 500 => {
            checks.push(Check::warn(
                "reachable",
                format!("{base} answered with a server error (HTTP {})", response.status),
            ));
            json!({ "url": base, "httpStatus": response.status })
        }
        Ok(response) => {
            checks.push(Check::pass("reachable", format!("{base} answered HTTP {}", response.status)));
            json!({ "url": base, "httpStatus": response.status })
        }
        Err(err) => {
            checks.push(Check::fail("reachable", format!("{base}: {err}")));
            json!({ "url": base })
        }
    }
}

/// The whole test, at `now` (seconds).
pub fn run_test(ctx: &CallContext, config: &Config, now: i64) -> TestReport {
    let ca_type = config.ca_type.as_deref().unwrap_or_default();
    let Some(probe) = probe_of(ca_type) else {
        return TestReport::from_checks(
            "unknown CA type",
            vec![Check::fail("ca-type", format!("`{ca_type}` is not a type this plugin probes"))],
        );
    };
    let mut checks = Vec::new();
    let probe_details = match base_url(ctx) {
        None => {
            checks.push(Check::fail("endpoint", "the CA has no url to probe: set the CA's `url`"));
            json!({})
        }
        Some(base) => match probe {
            Probe::WebEnrolment => probe_certsrv(base, &mut checks),
            Probe::Https => probe_https(base, &mut checks),
        },
    };
    let mut details = json!({ "type": ca_type, "probe": match probe {
        Probe::WebEnrolment => "web-enrolment",
        Probe::Https => "https-reachability",
    }, "issuing": false });
    if let (Some(map), serde_json::Value::Object(extra)) = (details.as_object_mut(), probe_details) {
        map.extend(extra);
    }
    if let Some((root, root_details)) = root_certificate::checks(config.root_certificate.as_deref(), now) {
        checks.extend(root);
        if let Some(map) = details.as_object_mut() {
            map.insert("rootCertificate".into(), root_details);
        }
    }
    let failed = checks.iter().any(|c| c.status == CheckStatus::Fail);
    let message = if failed {
        let first = checks.iter().find(|c| c.status == CheckStatus::Fail).map(|c| c.message.clone());
        format!("The {ca_type} CA failed its test: {}", first.unwrap_or_default())
    } else {
        format!("The {ca_type} CA answered its {} probe", details["probe"].as_str().unwrap_or_default())
    };
    TestReport::from_checks(message, checks).with_details(details)
}

impl CaConnector for CaProbe {
    type Config = Config;

    fn describe() -> PluginInfo {
        let names: Vec<&str> = TYPES.iter().map(|(name, _, _)| *name).collect();
        let patterns: Vec<String> =
            TYPES.iter().flat_map(|(name, _, patterns)| patterns.iter().map(move |p| format!("{name}:{p}"))).collect();
        let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
        PluginInfo::ca_connector("trellis.ca-probe", env!("CARGO_PKG_VERSION"), "CA probes", &names)
            .with_description(
                "Registers and tests CA types without an issuing connector yet (AD CS web enrolment, \
                 HTTPS reachability of cloud CAs, bundled root certificate checks).",
            )
            .with_default_issuer_patterns(&patterns)
            .with_capabilities(&[])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        match root_certificate::config_issue(config.root_certificate.as_deref()) {
            Some(issue) => Err(PluginError::InvalidConfig(vec![issue])),
            None => Ok(()),
        }
    }

    fn test_connection(ctx: &CallContext, config: &Config) -> Result<TestReport, PluginError> {
        Ok(run_test(ctx, config, now_secs()))
    }

    fn issue(_ctx: &CallContext, config: &Config, _request: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        Err(PluginError::not_supported(format!(
            "CA type `{}` can be registered and tested, but Trellis has no issuing connector for it yet",
            config.ca_type.as_deref().unwrap_or("unknown")
        )))
    }
}

trellis_plugin_sdk::export_ca_connector!(CaProbe);

#[cfg(test)]
mod tests;
