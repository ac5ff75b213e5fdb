//! A CA connector for a REST CA: `GET {url}/health`, `POST {url}/sign` → PEM chain.
#![forbid(unsafe_code)]
use trellis_plugin_sdk::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    pub url: String,
    /// API key: a secret, encrypted at rest and masked in responses.
    #[schemars(extend("writeOnly" = true))]
    pub api_key: String,
}

pub struct RestCa;

impl CaConnector for RestCa {
    type Config = Config;
    fn describe() -> PluginInfo {
        PluginInfo::ca_connector("com.example.rest-ca", env!("CARGO_PKG_VERSION"), "REST CA", &["rest-ca"])
    }
    fn test_connection(_: &CallContext, c: &Config) -> Result<TestReport, PluginError> {
        let health = http::Request::get(&format!("{}/health", c.url)).send()?;
        let check = if health.is_success() { Check::pass } else { Check::fail };
        Ok(TestReport::from_checks("REST CA", vec![check("health", format!("HTTP {}", health.status))]))
    }
    fn issue(_: &CallContext, c: &Config, r: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        let body = serde_json::json!({ "csr": r.csr_pem, "days": r.profile.validity_days });
        let res = http::Request::post(&format!("{}/sign", c.url))
            .header("authorization", &format!("Bearer {}", c.api_key))
            .json(&body)?
            .send()?;
        match res.status {
            200 => Ok(IssueOutcome::Issued(IssuedCertificate::pem(res.text()))),
            401 | 403 => Err(PluginError::unauthorized("the CA refused the API key")),
            status => Err(PluginError::upstream(Some(status), res.text(), status >= 500)),
        }
    }
}

trellis_plugin_sdk::export_ca_connector!(RestCa);
