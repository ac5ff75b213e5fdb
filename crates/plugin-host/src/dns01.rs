//! DNS-01 answers (`challenge-solver`): the TXT record `_acme-challenge.<domain>` published
//! through a DNS provider the host implements, chosen by the `type` of the provider settings a
//! connector passes (normally the record's `dnsProvider` configuration section).
//!
//! Providers reach their APIs through the plugins' own egress policy and the call's grant
//! ([`crate::egress`]): the provider's host must be the record's or one the operator granted the
//! plugin, and private or loopback addresses are refused unless the operator allows private
//! networks. A provider is one [`DnsProvider`] implementation listed in [`PROVIDERS`]; Route 53
//! or Cloudflare join by adding theirs (their credentials come in the settings, as secret
//! members of the record's configuration).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use crate::egress::{EgressCall, EgressPolicy};

/// A TXT record to publish or remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxtRecord {
    /// `_acme-challenge.<domain>.` (fully qualified, trailing dot).
    pub(crate) fqdn: String,
    /// The TXT value.
    pub(crate) value: String,
}

impl TxtRecord {
    /// The record for `domain` and `value`, if both are plausible: a DNS name (no wildcard,
    /// no trailing dot) and a base64url SHA-256 digest.
    pub(crate) fn for_challenge(domain: &str, value: &str) -> Result<TxtRecord, String> {
        let domain_ok = !domain.is_empty()
            && domain.len() <= 253
            && domain.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !domain_ok {
            return Err("the domain must be a DNS name without `*.` or a trailing dot".into());
        }
        let value_ok = value.len() == 43 && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !value_ok {
            return Err("the value must be base64url(SHA-256(key authorization))".into());
        }
        Ok(TxtRecord { fqdn: format!("_acme-challenge.{}.", domain.to_ascii_lowercase()), value: value.to_owned() })
    }
}

/// Why a provider could not act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProviderError {
    /// The settings are unusable (the message names the member).
    Invalid(String),
    /// The provider refused or could not be reached.
    Failed(String),
}

pub(crate) type ProviderFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ProviderError>> + Send + 'a>>;

/// One DNS provider API.
pub(crate) trait DnsProvider: Send + Sync {
    /// The settings' `type` it serves.
    fn kind(&self) -> &'static str;
    /// Publishes `record`; answers the seconds to wait for propagation.
    fn present<'a>(
        &'a self,
        http: &'a ProviderHttp,
        settings: &'a Value,
        record: &'a TxtRecord,
    ) -> ProviderFuture<'a, u32>;
    /// Removes `record` (a missing one is not an error).
    fn cleanup<'a>(
        &'a self,
        http: &'a ProviderHttp,
        settings: &'a Value,
        record: &'a TxtRecord,
    ) -> ProviderFuture<'a, ()>;
}

/// The providers this host implements.
pub(crate) const PROVIDERS: &[&dyn DnsProvider] = &[&Challtestsrv];

/// The provider serving settings `settings` (a JSON object document with a `type`).
pub(crate) fn provider_for(settings: &str) -> Result<(&'static dyn DnsProvider, Value), ProviderError> {
    let settings: Value = serde_json::from_str(settings)
        .map_err(|_| ProviderError::Invalid("the DNS provider settings must be a JSON object".into()))?;
    let kind = settings.get("type").and_then(Value::as_str).unwrap_or_default();
    let provider = PROVIDERS.iter().copied().find(|p| p.kind() == kind).ok_or_else(|| {
        let known: Vec<&str> = PROVIDERS.iter().map(|p| p.kind()).collect();
        ProviderError::Invalid(format!("unknown DNS provider type {kind:?}; this host implements {}", known.join(", ")))
    })?;
    Ok((provider, settings))
}

/// Outbound HTTP for providers, under the calling plugin's egress policy and grant.
pub(crate) struct ProviderHttp {
    pub(crate) policy: Arc<EgressPolicy>,
    pub(crate) call: Arc<EgressCall>,
}

impl ProviderHttp {
    /// POSTs `body` as JSON to `url`; a non-2xx answer is a failure naming the status.
    pub(crate) async fn post_json(&self, url: &str, body: &Value) -> Result<Vec<u8>, ProviderError> {
        let failed = |why: String| ProviderError::Failed(why);
        let body = Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed_unsync();
        let uri: http::Uri = url.parse().map_err(|_| ProviderError::Invalid(format!("{url} is not a usable URL")))?;
        // The egress client sends origin-form request lines, so the host goes in `Host`.
        let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
        let request = http::Request::post(uri)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(|_| ProviderError::Invalid(format!("{url} is not a usable URL")))?;
        let response =
            self.policy.clone().send(self.call.clone(), request, None).await.map_err(|err| {
                failed(format!("the DNS provider at {url} could not be reached: {}", transport(&err)))
            })?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|err| failed(format!("the DNS provider's answer could not be read: {err}")))?
            .to_bytes();
        if !status.is_success() {
            return Err(failed(format!("the DNS provider at {url} answered {status}")));
        }
        Ok(bytes.to_vec())
    }
}

fn transport(err: &wasmtime_wasi_http::Error) -> String {
    use wasmtime_wasi_http::Error as E;
    match err {
        E::HttpRequestDenied => "denied by the outbound policy (grant the provider's host to the plugin; \
                                 a private address also needs the operator to allow private networks)"
            .into(),
        E::ConnectionRefused | E::Connect(_) => "connection refused".into(),
        E::ConnectionTimeout | E::HttpResponseTimeout => "timed out".into(),
        other => format!("{other:?}"),
    }
}

/// pebble-challtestsrv's management API (test setups): `POST {url}/set-txt` and
/// `/clear-txt`. Settings: `{"type": "challtestsrv", "url": "http://127.0.0.1:8055"}`. Its
/// clear-txt removes every value at the name, not just this one.
pub(crate) struct Challtestsrv;

impl Challtestsrv {
    fn base_url(settings: &Value) -> Result<String, ProviderError> {
        if let Some(extra) = settings.as_object().and_then(|o| o.keys().find(|k| !matches!(k.as_str(), "type" | "url")))
        {
            return Err(ProviderError::Invalid(format!("challtestsrv settings take `type` and `url`, not `{extra}`")));
        }
        let url = settings.get("url").and_then(Value::as_str).unwrap_or_default().trim().trim_end_matches('/');
        let parsed = url.parse::<http::Uri>().ok().filter(|u| {
            matches!(u.scheme_str(), Some("http" | "https"))
                && u.host().is_some_and(|h| !h.is_empty())
                && u.query().is_none()
                && !u.authority().is_some_and(|a| a.as_str().contains('@'))
        });
        match parsed {
            Some(_) => Ok(url.to_owned()),
            None => {
                Err(ProviderError::Invalid("challtestsrv `url` must be its management API's http(s) base URL".into()))
            }
        }
    }
}

impl DnsProvider for Challtestsrv {
    fn kind(&self) -> &'static str {
        "challtestsrv"
    }

    fn present<'a>(
        &'a self,
        http: &'a ProviderHttp,
        settings: &'a Value,
        record: &'a TxtRecord,
    ) -> ProviderFuture<'a, u32> {
        Box::pin(async move {
            let base = Challtestsrv::base_url(settings)?;
            http.post_json(&format!("{base}/set-txt"), &json!({ "host": record.fqdn, "value": record.value })).await?;
            Ok(0)
        })
    }

    fn cleanup<'a>(
        &'a self,
        http: &'a ProviderHttp,
        settings: &'a Value,
        record: &'a TxtRecord,
    ) -> ProviderFuture<'a, ()> {
        Box::pin(async move {
            let base = Challtestsrv::base_url(settings)?;
            http.post_json(&format!("{base}/clear-txt"), &json!({ "host": record.fqdn })).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_settings_are_checked_before_any_request() {
        let value = "a".repeat(43);
        assert_eq!(
            TxtRecord::for_challenge("WWW.example.com", &value).unwrap().fqdn,
            "_acme-challenge.www.example.com."
        );
        for bad in ["", "*.example.com", "example.com.", "a..b", "exa mple.com"] {
            assert!(TxtRecord::for_challenge(bad, &value).is_err(), "{bad}");
        }
        assert!(TxtRecord::for_challenge("example.com", "short").is_err());

        let (provider, settings) = provider_for(r#"{"type":"challtestsrv","url":"http://127.0.0.1:8055/"}"#).unwrap();
        assert_eq!(provider.kind(), "challtestsrv");
        assert_eq!(Challtestsrv::base_url(&settings).unwrap(), "http://127.0.0.1:8055");
        assert!(
            matches!(provider_for(r#"{"type":"route66"}"#), Err(ProviderError::Invalid(m)) if m.contains("challtestsrv"))
        );
        assert!(matches!(provider_for("[]"), Err(ProviderError::Invalid(_))));
        for bad in [
            json!({"type":"challtestsrv"}),
            json!({"type":"challtestsrv","url":"ftp://x"}),
            json!({"type":"challtestsrv","url":"http://x","token":"t"}),
        ] {
            assert!(Challtestsrv::base_url(&bad).is_err(), "{bad}");
        }
    }
}
