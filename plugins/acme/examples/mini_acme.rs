//! The worked connector example of docs/plugin-authors.md ("Worked example: an ACME-like connector"),
//! kept here so that it compiles (`cargo test -p trellis-plugin-acme` builds examples).

#![forbid(unsafe_code)]
#![allow(dead_code)]
use serde_json::{json, Value};
use trellis_plugin_sdk::challenge::{self, Challenge};
use trellis_plugin_sdk::jws::{self, KeyId};
use trellis_plugin_sdk::keystore::KeyAlgorithm;
use trellis_plugin_sdk::poll::{self, Backoff, Deadline, Polled, Step};
use trellis_plugin_sdk::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    directory_url: String,
}

const KEY: &str = "account";

/// One call's session: the directory, the key, the account URL, the last nonce.
struct Session {
    dir: Value,
    key: keystore::KeyInfo,
    kid: Option<String>,
    nonce: Option<String>,
}

impl Session {
    fn open(config: &Config) -> Result<Session, PluginError> {
        let dir: Value = http::Request::get(&config.directory_url).send()?.json()?;
        let key = keystore::get_or_generate(KEY, KeyAlgorithm::EcdsaP256)?;
        Ok(Session { dir, key, kid: state::get_json("account")?, nonce: None })
    }

    fn url(&self, name: &str) -> String {
        self.dir[name].as_str().unwrap_or_default().to_owned()
    }

    /// A signed POST (`None`: POST-as-GET), by `kid` once registered, by `jwk` before.
    fn post(&mut self, url: &str, payload: Option<&Value>) -> Result<http::Response, PluginError> {
        let nonce = match self.nonce.take() {
            Some(n) => n,
            None => {
                http::Request::new("HEAD", &self.url("newNonce")).send()?.header("replay-nonce").unwrap_or_default()
            }
        };
        let id = self.kid.as_deref().map_or(KeyId::Jwk, KeyId::Kid);
        let body = jws::sign(KEY, &self.key, id, url, Some(&nonce), payload)?;
        let res = http::Request::post(url).header("content-type", jws::CONTENT_TYPE).json(&body)?.send()?;
        self.nonce = res.header("replay-nonce");
        match res.status {
            200..=299 => Ok(res),
            429 => Err(PluginError::RateLimited(res.retry_after_secs())),
            s if s >= 500 => Err(PluginError::upstream(Some(s), res.text(), true)),
            _ => Err(PluginError::rejected(res.text())),
        }
    }

    fn register(&mut self) -> Result<(), PluginError> {
        if self.kid.is_none() {
            let res = self.post(&self.url("newAccount"), Some(&json!({ "termsOfServiceAgreed": true })))?;
            let kid = res.header("location").ok_or_else(|| PluginError::upstream(None, "no account URL", false))?;
            state::set_json("account", &kid)?;
            self.kid = Some(kid);
        }
        Ok(())
    }
}

pub struct MiniAcme;

impl CaConnector for MiniAcme {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::ca_connector("com.example.mini-acme", env!("CARGO_PKG_VERSION"), "Mini ACME", &["mini-acme"])
    }

    fn setup(_: &CallContext, c: &Config) -> Result<(), PluginError> {
        Session::open(c)?.register()
    }

    fn test_connection(_: &CallContext, c: &Config) -> Result<TestReport, PluginError> {
        let dir: Value = http::Request::get(&c.directory_url).send()?.json()?;
        Ok(TestReport::from_checks("directory answered", vec![Check::pass("directory", "ok")])
            .with_details(json!({ "directoryUrl": c.directory_url, "endpoints": dir })))
    }

    fn issue(ctx: &CallContext, c: &Config, r: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        let mut s = Session::open(c)?;
        s.register()?;
        // Idempotent: the order placed for this key before, else a new one.
        let key = format!("order/{}", r.idempotency_key);
        let order_url = match state::get_json::<String>(&key)? {
            Some(url) => url,
            None => {
                let names: Vec<Value> = r
                    .profile
                    .subject_alt_names
                    .iter()
                    .map(|n| json!({ "type": "dns", "value": n.to_string() }))
                    .collect();
                let res = s.post(&s.url("newOrder"), Some(&json!({ "identifiers": names })))?;
                let url = res.header("location").unwrap_or_default();
                state::set_json(&key, &url)?;
                url
            }
        };
        Self::poll_issue(ctx, c, &order_url, r)
    }

    fn poll_issue(
        ctx: &CallContext,
        c: &Config,
        order_url: &str,
        r: &IssueRequest,
    ) -> Result<IssueOutcome, PluginError> {
        let mut s = Session::open(c)?;
        s.register()?;
        let deadline = Deadline::from_budget(ctx, 2_000);
        let order: Value = s.post(order_url, None)?.json()?;
        for authz_url in order["authorizations"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            let authz: Value = s.post(authz_url, None)?.json()?;
            let Some(ch) = authz["challenges"].as_array().into_iter().flatten().find(|c| c["type"] == "http-01") else {
                continue;
            };
            let token = ch["token"].as_str().unwrap_or_default();
            let answer = Challenge::http01(
                authz["identifier"]["value"].as_str().unwrap_or_default(),
                token,
                &format!("{token}.{}", s.key.jwk_thumbprint),
            );
            challenge::present(&answer)?;
            s.post(ch["url"].as_str().unwrap_or_default(), Some(&json!({})))?;
            let polled = poll::until(&deadline, &Backoff::default(), || {
                let res = s.post(authz_url, None)?;
                let status = res.json::<Value>()?["status"].as_str().unwrap_or_default().to_owned();
                Ok(if status == "pending" {
                    Step::Wait { retry_after_secs: res.retry_after_secs() }
                } else {
                    Step::Done(status)
                })
            })?;
            match polled {
                Polled::OutOfTime { retry_after_secs } => {
                    return Ok(IssueOutcome::Pending {
                        reference: order_url.to_owned(),
                        retry_after_secs,
                        status_message: "validating".into(),
                    })
                }
                Polled::Done(status) => {
                    challenge::cleanup(&answer)?;
                    if status != "valid" {
                        return Err(PluginError::rejected(format!("authorization {status}")));
                    }
                }
            }
        }
        let finalize = order["finalize"].as_str().unwrap_or_default().to_owned();
        let done: Value = s.post(&finalize, Some(&json!({ "csr": jws::base64url(&r.csr_der) })))?.json()?;
        let cert_url = done["certificate"].as_str().unwrap_or_default().to_owned(); // a real CA may need polling here too
        let mut pems = util::pem_certificates(&s.post(&cert_url, None)?.text());
        let leaf = pems.remove(0);
        Ok(IssueOutcome::Issued(IssuedCertificate::pem(leaf).with_chain(pems).with_ca_reference(cert_url)))
    }
}

trellis_plugin_sdk::export_ca_connector!(MiniAcme);

fn main() {}
