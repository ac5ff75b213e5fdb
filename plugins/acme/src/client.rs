//! The ACME protocol (RFC 8555) over the SDK: the directory, nonces, JWS-signed requests with
//! badNonce retries, the account, and the mapping of ACME problems onto plugin errors.

use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::http::{self, Response};
use trellis_plugin_sdk::jws::{self, KeyId};
use trellis_plugin_sdk::keystore::{self, KeyAlgorithm, KeyInfo};
use trellis_plugin_sdk::prelude::*;

use crate::Config;

/// The keystore label of the record's ACME account key.
pub(crate) const ACCOUNT_KEY: &str = "acme-account";
/// The state key of the record's account (`Account`).
pub(crate) const ACCOUNT_STATE: &str = "account";
/// How often one request is retried after a `badNonce` (RFC 8555 §6.5).
const BAD_NONCE_RETRIES: usize = 8;
const ERROR_PREFIX: &str = "urn:ietf:params:acme:error:";

/// The directory (RFC 8555 §7.1.1), and RFC 9773's `renewalInfo`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Directory {
    pub(crate) new_nonce: String,
    pub(crate) new_account: String,
    pub(crate) new_order: String,
    pub(crate) revoke_cert: Option<String>,
    pub(crate) renewal_info: Option<String>,
    #[serde(default)]
    pub(crate) meta: DirectoryMeta,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DirectoryMeta {
    pub(crate) terms_of_service: Option<String>,
    #[serde(default)]
    pub(crate) external_account_required: bool,
}

/// What the record keeps about its account.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Account {
    pub(crate) url: String,
    pub(crate) directory_url: String,
}

/// An ACME problem document (RFC 8555 §6.7).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Problem {
    #[serde(rename = "type", default)]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) detail: String,
}

impl Problem {
    /// The problem type without the ACME URN prefix (`badNonce`, `rateLimited`, …).
    pub(crate) fn short(&self) -> &str {
        self.kind.strip_prefix(ERROR_PREFIX).unwrap_or(&self.kind)
    }

    pub(crate) fn describe(&self) -> String {
        let detail = trellis_plugin_sdk::util::truncate(&self.detail, 300);
        if detail.is_empty() {
            self.short().to_owned()
        } else {
            format!("{}: {detail}", self.short())
        }
    }
}

/// The directory document, or the error an unreachable or broken directory is.
pub(crate) fn fetch_directory(url: &str) -> Result<(Value, Directory), PluginError> {
    let response = http::Request::get(url).header("accept", "application/json").send().map_err(|err| {
        let retryable = !matches!(err, http::HttpError::Denied | http::HttpError::InvalidUrl(_));
        PluginError::upstream(None, format!("ACME directory {url} unreachable: {err}"), retryable)
    })?;
    if !response.is_success() {
        return Err(PluginError::upstream(
            Some(response.status),
            format!("ACME directory {url} answered {}", response.status),
            response.status >= 500 || response.status == 429,
        ));
    }
    let raw: Value = response.json()?;
    let directory: Directory = serde_json::from_value(raw.clone()).map_err(|err| {
        PluginError::upstream(Some(response.status), format!("{url} is not an ACME directory: {err}"), false)
    })?;
    Ok((raw, directory))
}

/// One call's ACME session: the directory, the account key, the account URL once known, and
/// the last nonce the server handed out.
pub(crate) struct Client {
    pub(crate) directory_url: String,
    pub(crate) directory: Directory,
    pub(crate) key: KeyInfo,
    pub(crate) account_url: Option<String>,
    nonce: Option<String>,
}

impl Client {
    /// The directory and the account key (created on first use).
    pub(crate) fn connect(directory_url: &str) -> Result<Client, PluginError> {
        let (_, directory) = fetch_directory(directory_url)?;
        Client::with_directory(directory_url, directory)
    }

    /// As [`Client::connect`], with the directory already fetched.
    pub(crate) fn with_directory(directory_url: &str, directory: Directory) -> Result<Client, PluginError> {
        let key = keystore::get_or_generate(ACCOUNT_KEY, KeyAlgorithm::EcdsaP256)?;
        Ok(Client { directory_url: directory_url.to_owned(), directory, key, account_url: None, nonce: None })
    }

    fn fresh_nonce(&mut self) -> Result<String, PluginError> {
        if let Some(nonce) = self.nonce.take() {
            return Ok(nonce);
        }
        let response = http::Request::new("HEAD", &self.directory.new_nonce).send()?;
        response.header("replay-nonce").ok_or_else(|| {
            PluginError::upstream(Some(response.status), "newNonce answered without a Replay-Nonce", true)
        })
    }

    /// A signed POST (`payload` `None`: POST-as-GET) by `kid` once the account is known, by
    /// `jwk` before. Retries `badNonce` with the nonce of the refusal; other problems become
    /// plugin errors through [`problem_error`].
    pub(crate) fn post(&mut self, url: &str, payload: Option<&Value>) -> Result<Response, PluginError> {
        let response = self.post_raw(url, payload, None)?;
        if response.is_success() {
            return Ok(response);
        }
        Err(problem_error(&response, &problem(&response)))
    }

    /// As [`Client::post`], answering the response whatever its status (after badNonce
    /// retries), with `accept` when given.
    pub(crate) fn post_raw(
        &mut self,
        url: &str,
        payload: Option<&Value>,
        accept: Option<&str>,
    ) -> Result<Response, PluginError> {
        let mut attempt = 0;
        loop {
            let nonce = self.fresh_nonce()?;
            let id = match &self.account_url {
                Some(kid) => KeyId::Kid(kid),
                None => KeyId::Jwk,
            };
            let body = jws::sign(ACCOUNT_KEY, &self.key, id, url, Some(&nonce), payload)?;
            let mut request = http::Request::post(url).header("content-type", jws::CONTENT_TYPE);
            if let Some(accept) = accept {
                request = request.header("accept", accept);
            }
            let body = serde_json::to_vec(&body).map_err(|err| PluginError::internal(err.to_string()))?;
            let response = request.body(body).send()?;
            self.nonce = response.header("replay-nonce");
            if !response.is_success() && problem(&response).short() == "badNonce" && attempt < BAD_NONCE_RETRIES {
                attempt += 1;
                log::debug("ACME badNonce; retrying with the fresh nonce", &[("url", url)]);
                continue;
            }
            return Ok(response);
        }
    }

    /// POST-as-GET of a JSON resource.
    pub(crate) fn get_json<T: serde::de::DeserializeOwned>(&mut self, url: &str) -> Result<(T, Response), PluginError> {
        let response = self.post(url, None)?;
        Ok((response.json()?, response))
    }

    /// The record's account: the one in state for this directory, else registered now (with
    /// External Account Binding when configured). Registering an existing key finds its
    /// account again, so a lost state or a race ends with the same account.
    pub(crate) fn ensure_account(&mut self, config: &Config) -> Result<String, PluginError> {
        if let Some(account) = state::get_json::<Account>(ACCOUNT_STATE)? {
            if account.directory_url == self.directory_url {
                self.account_url = Some(account.url.clone());
                return Ok(account.url);
            }
        }
        let mut payload = json!({ "termsOfServiceAgreed": config.terms_of_service_agreed.unwrap_or(false) });
        if let Some(email) = config.email.as_deref().filter(|e| !e.is_empty()) {
            payload["contact"] = json!([format!("mailto:{email}")]);
        }
        let eab = match (&config.eab_kid, &config.eab_hmac_key) {
            (Some(kid), Some(key)) => {
                let key = jws::base64url_decode(key)
                    .map_err(|_| PluginError::invalid_config("/eabHmacKey", "must be base64url"))?;
                payload["externalAccountBinding"] =
                    jws::external_account_binding(kid, &key, &self.key.jwk, &self.directory.new_account);
                true
            }
            _ => false,
        };
        // A commercial CA requires EAB whatever its directory says (a record may point its `url`
        // at another directory, as the tests do with Pebble); any CA whose directory says so does.
        let commercial = config.commercial().filter(|c| c.eab_required);
        if (self.directory.meta.external_account_required || commercial.is_some()) && !eab {
            let (ca, from) = match commercial {
                Some(c) => (c.ca_type, Some(c.eab_from)),
                None => ("this ACME CA", None),
            };
            return Err(PluginError::InvalidConfig(config.missing_eab(ca, from)));
        }
        let new_account = self.directory.new_account.clone();
        self.account_url = None;
        let response = self.post_raw(&new_account, Some(&payload), None)?;
        if !response.is_success() {
            return Err(account_refused(&response, eab, self.directory.meta.terms_of_service.as_deref()));
        }
        let url = response.header("location").ok_or_else(|| {
            PluginError::upstream(Some(response.status), "newAccount answered without the account URL", false)
        })?;
        state::set_json(ACCOUNT_STATE, &Account { url: url.clone(), directory_url: self.directory_url.clone() })?;
        log::info("ACME account ready", &[("account", &url)]);
        self.account_url = Some(url.clone());
        Ok(url)
    }
}

/// The problem document of a failed response (an empty one when the body is not one).
pub(crate) fn problem(response: &Response) -> Problem {
    serde_json::from_slice(&response.body).unwrap_or_default()
}

/// How an ACME problem reaches the host: throttling as `rate-limited`, server failures as
/// retryable `upstream`, the CA's refusals of the request as `rejected`.
pub(crate) fn problem_error(response: &Response, problem: &Problem) -> PluginError {
    let status = response.status;
    match problem.short() {
        _ if status == 429 => PluginError::RateLimited(response.retry_after_secs()),
        "rateLimited" => PluginError::RateLimited(response.retry_after_secs()),
        "serverInternal" => PluginError::upstream(Some(status), problem.describe(), true),
        "badCSR"
        | "badSignatureAlgorithm"
        | "caa"
        | "rejectedIdentifier"
        | "unsupportedIdentifier"
        | "userActionRequired"
        | "orderNotReady"
        | "badRevocationReason"
        | "alreadyRevoked"
        | "connection"
        | "dns"
        | "incorrectResponse"
        | "tls"
        | "compound" => PluginError::rejected(problem.describe()),
        "unauthorized" | "accountDoesNotExist" | "externalAccountRequired" => {
            PluginError::unauthorized(problem.describe())
        }
        _ if status >= 500 => PluginError::upstream(Some(status), format!("ACME server answered {status}"), true),
        _ if problem.kind.is_empty() => {
            PluginError::upstream(Some(status), format!("ACME server answered {status}"), false)
        }
        _ => PluginError::upstream(Some(status), problem.describe(), false),
    }
}

/// A refused account registration as a configuration problem the operator can fix (400),
/// naming the member at fault and what to do; throttling and server failures stay what they are.
fn account_refused(response: &Response, eab: bool, terms: Option<&str>) -> PluginError {
    let problem = problem(response);
    let field = match problem.short() {
        "rateLimited" | "serverInternal" => return problem_error(response, &problem),
        _ if response.status == 429 || response.status >= 500 => return problem_error(response, &problem),
        "invalidContact" | "unsupportedContact" => "/email",
        // `agreementRequired` is not in RFC 8555's registry, but Pebble and Boulder's ancestors
        // answer it for an account that did not agree to the terms of service.
        "userActionRequired" | "agreementRequired" => "/termsOfServiceAgreed",
        "externalAccountRequired" => "/eabKid",
        _ if eab => "/eabKid",
        _ => "",
    };
    let why = match field {
        "/eabKid" if eab => "the CA refused the External Account Binding (check eabKid and eabHmacKey)".to_owned(),
        "/termsOfServiceAgreed" => match terms {
            Some(terms) => format!(
                "the CA requires agreeing to its terms of service ({terms}): read them and set termsOfServiceAgreed to true"
            ),
            None => "the CA requires agreeing to its terms of service: set termsOfServiceAgreed to true".to_owned(),
        },
        _ => "the CA refused to register the account".to_owned(),
    };
    PluginError::invalid_config(field, format!("{why}: {}", problem.describe()))
}

/// Whether `err` says the CA could not be reached or is failing for now (a retry may work), as
/// opposed to a CA that answered and refused.
/// Throttling is an answer, not an outage: it stays an error (503 with `Retry-After`).
pub(crate) fn unreachable(err: &PluginError) -> bool {
    matches!(err, PluginError::Upstream { retryable: true, .. })
}
