//! The ACME connector (CA type `acme`, RFC 8555), written only against the SDK.
//!
//! The account key lives in the host's keystore (`acme-account`, ECDSA P-256, created on first
//! use and reused); the account URL and one order URL per idempotency key live in the record's
//! state. Issuance places an order for the request's names, answers each authorization's
//! challenge through the host's challenge solver (HTTP-01 on the host's listener, or DNS-01
//! through the configured DNS provider), finalizes with the request's CSR and downloads the
//! chain. When the call's time budget runs out first, it answers `pending` with the order URL,
//! and `poll-issue` continues where the order stands.
//!
//! The same connector serves the commercial CAs that offer ACME with External Account Binding
//! (`digicert`, `sectigo`, `globalsign`, `entrust`, `zerossl`, `google_trust_services`, see
//! `commercial.rs`): each type brings its CA's production directory as the default and its
//! issuer patterns, and refuses a record without EAB credentials.

#![forbid(unsafe_code)]

mod client;
pub mod commercial;
mod order;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;
use trellis_plugin_sdk::ConfigIssue;

use crate::client::{fetch_directory, Client};

/// The challenge types this connector answers.
const CHALLENGE_TYPES: [&str; 2] = ["http-01", "dns-01"];

/// An ACME CA record's configuration. The directory is `directoryUrl`, else the record's `url`,
/// else (commercial types) the CA's documented production directory.
// Members are optional so `validate_config` names every problem with its field. Unknown members
// are collected rather than refused by serde: records of the commercial types were created under
// the `ca-probe` plugin, which accepted any member beside its own, and such a record must keep
// answering its calls after the upgrade; a configuration being saved is still refused member by
// member in `validate_config`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// The record's CA type (`acme` or a commercial CA). Filled in by the host on every call;
    /// not stored.
    #[schemars(extend("x-trellis-record-type" = true))]
    pub ca_type: Option<String>,
    /// The ACME directory URL, e.g. `https://acme-v02.api.letsencrypt.org/directory`; defaults
    /// to the CA record's `url`.
    pub directory_url: Option<String>,
    /// Contact email registered with the account (`mailto:`).
    pub email: Option<String>,
    /// Agree to the CA's terms of service (required by most public CAs).
    pub terms_of_service_agreed: Option<bool>,
    /// External Account Binding key identifier, from the CA (with `eabHmacKey`).
    pub eab_kid: Option<String>,
    /// External Account Binding MAC key, base64url, from the CA. Secret: encrypted at rest,
    /// masked in responses.
    #[schemars(extend("writeOnly" = true))]
    pub eab_hmac_key: Option<String>,
    /// The challenge to answer: `http-01` (default; the host's listener,
    /// `TRELLIS_ACME_HTTP01_LISTEN`, must be reachable by the CA on port 80) or `dns-01`
    /// (through `dnsProvider`; required for wildcard names).
    #[schemars(extend("enum" = ["http-01", "dns-01"]))]
    pub challenge_type: Option<String>,
    /// The DNS provider for `dns-01`, passed to the host's challenge solver: an object with a
    /// `type`, e.g. `{"type": "challtestsrv", "url": "http://127.0.0.1:8055"}`.
    pub dns_provider: Option<Value>,
    /// The CA's root certificate (PEM), checked by the connection test (it parses, is a CA, is
    /// within its validity); records of the commercial types created under `ca-probe` may carry
    /// one. Issuance does not use it: the chain comes with each certificate.
    pub root_certificate: Option<String>,
    /// Members outside the schema: ignored by calls, refused by `validate_config`.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: serde_json::Map<String, Value>,
}

impl Config {
    fn directory_url(&self, ctx: &CallContext) -> Result<String, PluginError> {
        self.directory_url
            .clone()
            .filter(|u| !u.trim().is_empty())
            .or_else(|| ctx.endpoint.clone().filter(|u| !u.trim().is_empty()))
            .or_else(|| self.commercial().map(|c| c.directory_url.to_owned()))
            .map(|u| u.trim().to_owned())
            .ok_or_else(|| {
                PluginError::invalid_config("/directoryUrl", "set the CA's url or directoryUrl to the ACME directory")
            })
    }

    /// The commercial CA this record is, if it is one.
    pub(crate) fn commercial(&self) -> Option<&'static commercial::Commercial> {
        commercial::commercial(self.ca_type.as_deref())
    }

    /// Whether both EAB members are set.
    fn has_eab(&self) -> bool {
        self.eab_kid.as_deref().is_some_and(|k| !k.trim().is_empty())
            && self.eab_hmac_key.as_deref().is_some_and(|k| !k.is_empty())
    }

    /// The refusal of a record whose CA requires External Account Binding and that has none:
    /// one issue per missing member, saying where the CA hands the values out.
    pub(crate) fn missing_eab(&self, ca: &str, from: Option<&str>) -> Vec<ConfigIssue> {
        let whence = from.map(|f| format!(" (from {f})")).unwrap_or_default();
        let mut issues = Vec::new();
        if self.eab_kid.as_deref().is_none_or(|k| k.trim().is_empty()) {
            issues.push(ConfigIssue::new(
                "/eabKid",
                format!("{ca} requires External Account Binding: set eabKid, the EAB key identifier{whence}"),
            ));
        }
        if self.eab_hmac_key.as_deref().is_none_or(str::is_empty) {
            issues.push(ConfigIssue::new(
                "/eabHmacKey",
                format!("{ca} requires External Account Binding: set eabHmacKey, the base64url EAB MAC key{whence}"),
            ));
        }
        issues
    }

    fn dns01(&self) -> bool {
        self.challenge_type.as_deref() == Some("dns-01")
    }
}

/// The ACME connector.
pub struct Acme;

impl CaConnector for Acme {
    type Config = Config;

    fn describe() -> PluginInfo {
        let mut types = vec!["acme"];
        types.extend(commercial::COMMERCIAL.iter().map(|c| c.ca_type));
        let patterns = commercial::default_issuer_patterns();
        let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
        // The default directories are requests for the operator to grant: a record whose `url`
        // is its directory needs no grant (the CA's own host is always allowed).
        let hosts: Vec<&str> = commercial::COMMERCIAL
            .iter()
            .filter_map(|c| c.directory_url.strip_prefix("https://"))
            .filter_map(|rest| rest.split('/').next())
            .collect();
        PluginInfo::ca_connector("trellis.acme", env!("CARGO_PKG_VERSION"), "ACME", &types)
            .with_description(
                "Issues and revokes through any ACME CA (RFC 8555): HTTP-01 and DNS-01 challenges, External Account Binding, renewal information (RFC 9773); and through the commercial CAs' ACME servers with EAB (DigiCert, Sectigo, GlobalSign, Entrust, ZeroSSL, Google Trust Services).",
            )
            .with_default_issuer_patterns(&patterns)
            .with_outbound_hosts(&hosts)
            .with_capabilities(&[Capability::Issue, Capability::Revoke, Capability::Renew, Capability::RenewalInfo])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        if let Some(url) = config.directory_url.as_deref().filter(|u| !u.is_empty()) {
            if let Some(why) = http::http_url_problem(url) {
                issues.push(ConfigIssue::new("/directoryUrl", why));
            }
        }
        if let Some(email) = &config.email {
            let ok = email.len() <= 254 && email.split_once('@').is_some_and(|(l, d)| !l.is_empty() && d.contains('.'));
            if !ok || email.chars().any(|c| c.is_whitespace() || c.is_control()) {
                issues.push(ConfigIssue::new("/email", "must be an email address"));
            }
        }
        match (&config.eab_kid, &config.eab_hmac_key) {
            (Some(_), None) => issues.push(ConfigIssue::new("/eabHmacKey", "is required with eabKid")),
            (None, Some(_)) => issues.push(ConfigIssue::new("/eabKid", "is required with eabHmacKey")),
            (Some(kid), Some(key)) => {
                if kid.trim().is_empty() {
                    issues.push(ConfigIssue::new("/eabKid", "must not be empty"));
                }
                if jws::base64url_decode(key).map_or(true, |k| k.is_empty()) {
                    issues.push(ConfigIssue::new("/eabHmacKey", "must be the base64url MAC key the CA issued"));
                }
            }
            (None, None) => {}
        }
        if let Some(ca) = config.commercial().filter(|c| c.eab_required) {
            if config.eab_kid.is_none() && config.eab_hmac_key.is_none() {
                issues.extend(config.missing_eab(ca.ca_type, Some(ca.eab_from)));
            }
        }
        issues.extend(root_certificate::config_issue(config.root_certificate.as_deref()));
        for member in config.other.keys() {
            issues.push(ConfigIssue::new(&format!("/{member}"), "is not a member of an ACME CA's configuration"));
        }
        if let Some(kind) = &config.challenge_type {
            if !CHALLENGE_TYPES.contains(&kind.as_str()) {
                issues.push(ConfigIssue::new("/challengeType", "must be http-01 or dns-01"));
            }
        }
        match &config.dns_provider {
            Some(provider) if provider.get("type").and_then(Value::as_str).is_none_or(str::is_empty) => {
                issues.push(ConfigIssue::new("/dnsProvider", "must be an object with a `type`, e.g. challtestsrv"));
            }
            None if config.dns01() => {
                issues.push(ConfigIssue::new("/dnsProvider", "is required for dns-01"));
            }
            _ => {}
        }
        if issues.is_empty() {
            Ok(())
        } else {
            Err(PluginError::InvalidConfig(issues))
        }
    }

    /// Registers the account (or finds it again), so that a configuration the CA refuses
    /// (terms not agreed, External Account Binding) is a 400 before the record exists. A
    /// directory that cannot be reached right now does not refuse the record (spec §3.2: create
    /// makes it `active`, `test` moves it to `error`): the account is then registered on first
    /// use, by the connection test or the first issuance, which both go through `ensure_account`.
    fn setup(ctx: &CallContext, config: &Config) -> Result<(), PluginError> {
        let registered = Client::connect(&config.directory_url(ctx)?).and_then(|mut c| c.ensure_account(config));
        match registered {
            Ok(_) => Ok(()),
            Err(err) if client::unreachable(&err) => {
                log::warn(
                    "ACME directory unreachable; the account is registered on first use",
                    &[("error", &err.to_string())],
                );
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    fn test_connection(ctx: &CallContext, config: &Config) -> Result<TestReport, PluginError> {
        let url = config.directory_url(ctx)?;
        let (raw, directory) = match fetch_directory(&url) {
            Ok(found) => found,
            Err(err) => {
                return Ok(TestReport::from_checks(
                    "The ACME directory could not be fetched",
                    vec![Check::fail("directory", err.to_string())],
                )
                .with_details(json!({ "directoryUrl": url, "endpoints": [] })));
            }
        };
        let endpoints: Vec<&str> = raw
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_str())
            .filter(|v| v.starts_with("https://") || v.starts_with("http://"))
            .collect();
        let mut checks = vec![Check::pass("directory", format!("{} endpoints", endpoints.len()))];
        let eab = config.has_eab();
        let required = directory.meta.external_account_required || config.commercial().is_some_and(|c| c.eab_required);
        checks.push(match (required, eab) {
            (true, false) => Check::fail("externalAccountBinding", "the CA requires eabKid and eabHmacKey"),
            (true, true) => Check::pass("externalAccountBinding", "configured"),
            (false, _) => Check::skip("externalAccountBinding", "not required by the CA"),
        });
        if let Some(terms) = &directory.meta.terms_of_service {
            checks.push(if config.terms_of_service_agreed == Some(true) {
                Check::pass("termsOfService", format!("agreed: {terms}"))
            } else {
                Check::warn("termsOfService", format!("not agreed (termsOfServiceAgreed): {terms}"))
            });
        }
        let root = root_certificate::checks(config.root_certificate.as_deref(), clock::unix_seconds());
        let mut details = json!({ "directoryUrl": url, "endpoints": endpoints, "externalAccountRequired": required });
        if let Some((root_checks, root_details)) = root {
            checks.extend(root_checks);
            details["rootCertificate"] = root_details;
        }
        if let Some(ca) = config.commercial() {
            details["caType"] = json!(ca.ca_type);
            details["defaultDirectoryUrl"] = json!(ca.directory_url);
        }
        // The account a setup could not register (the directory was down) is registered here;
        // otherwise this finds it in the record's state without a request.
        let account = Client::with_directory(&url, directory).and_then(|mut client| client.ensure_account(config));
        checks.push(match account {
            Ok(account) => {
                let check = Check::pass("account", format!("registered: {account}"));
                details["accountUrl"] = Value::String(account);
                check
            }
            Err(err) => Check::fail("account", err.to_string()),
        });
        Ok(TestReport::from_checks("The ACME directory answered", checks).with_details(details))
    }

    fn issue(ctx: &CallContext, config: &Config, request: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        order::issue(ctx, config, request, None)
    }

    fn poll_issue(
        ctx: &CallContext,
        config: &Config,
        reference: &str,
        request: &IssueRequest,
    ) -> Result<IssueOutcome, PluginError> {
        order::issue(ctx, config, request, Some(reference))
    }

    fn fetch_certificate(
        ctx: &CallContext,
        config: &Config,
        ca_reference: &str,
    ) -> Result<IssuedCertificate, PluginError> {
        let mut client = Client::connect(&config.directory_url(ctx)?)?;
        client.ensure_account(config)?;
        order::download(&mut client, ca_reference)
    }

    fn ca_chain(_ctx: &CallContext, _config: &Config) -> Result<Vec<String>, PluginError> {
        // ACME has no chain endpoint: the chain is the one the CA last delivered with a
        // certificate (empty before the first issuance).
        Ok(state::get_json::<Vec<String>>(order::CHAIN_STATE)?.unwrap_or_default())
    }

    fn revoke(ctx: &CallContext, config: &Config, request: &RevokeRequest) -> Result<(), PluginError> {
        let der = request
            .certificate
            .pem
            .as_deref()
            .and_then(util::pem_to_der)
            .ok_or_else(|| PluginError::invalid_input("ACME revocation needs the certificate itself"))?;
        let mut client = Client::connect(&config.directory_url(ctx)?)?;
        let url = client
            .directory
            .revoke_cert
            .clone()
            .ok_or_else(|| PluginError::not_supported("this ACME CA offers no revokeCert"))?;
        client.ensure_account(config)?;
        let payload = json!({ "certificate": jws::base64url(&der), "reason": reason_code(request.reason) });
        let response = client.post_raw(&url, Some(&payload), None)?;
        if response.is_success() {
            return Ok(());
        }
        let problem = client::problem(&response);
        if problem.short() == "alreadyRevoked" {
            return Ok(());
        }
        Err(client::problem_error(&response, &problem))
    }

    fn renewal_info(
        ctx: &CallContext,
        config: &Config,
        certificate: &CertificateRef,
    ) -> Result<Option<RenewalWindow>, PluginError> {
        let (_, directory) = fetch_directory(&config.directory_url(ctx)?)?;
        let (Some(base), Some(id)) = (directory.renewal_info, order::ari_certificate_id(certificate)) else {
            return Ok(None);
        };
        let url = format!("{}/{id}", base.trim_end_matches('/'));
        let response = http::Request::get(&url).header("accept", "application/json").send()?;
        if response.status == 404 {
            return Ok(None);
        }
        if !response.is_success() {
            return Err(client::problem_error(&response, &client::problem(&response)));
        }
        let info: Value = response.json()?;
        let window = &info["suggestedWindow"];
        let (Some(start), Some(end)) = (
            window["start"].as_str().and_then(util::parse_rfc3339),
            window["end"].as_str().and_then(util::parse_rfc3339),
        ) else {
            return Err(PluginError::upstream(Some(response.status), "renewalInfo without a suggestedWindow", false));
        };
        let mut found = RenewalWindow::new(start, end);
        found.explanation_url = info["explanationURL"].as_str().map(str::to_owned);
        found.retry_after_secs = response.retry_after_secs();
        Ok(Some(found))
    }
}

/// RFC 5280 reason codes, as `revokeCert` takes them.
fn reason_code(reason: RevocationReason) -> u8 {
    match reason {
        RevocationReason::KeyCompromise => 1,
        RevocationReason::CaCompromise => 2,
        RevocationReason::AffiliationChanged => 3,
        RevocationReason::Superseded => 4,
        RevocationReason::CessationOfOperation => 5,
        RevocationReason::CertificateHold => 6,
        RevocationReason::RemoveFromCrl => 8,
        RevocationReason::PrivilegeWithdrawn => 9,
        RevocationReason::AaCompromise => 10,
        _ => 0,
    }
}

trellis_plugin_sdk::export_ca_connector!(Acme);

#[cfg(test)]
mod tests;
