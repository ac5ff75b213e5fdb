//! Vault's HTTP API as the connector speaks it (Vault and OpenBao answer alike): requests under
//! `/v1/` with `X-Vault-Token` and `X-Vault-Namespace`, JSON answers `{"data": …}` or
//! `{"errors": […]}`, and those errors turned into [`PluginError`]s that say what to fix.

use serde_json::Value;
use trellis_plugin_sdk::prelude::*;

/// How long one Vault request may take; the call's own budget bounds the whole operation.
const REQUEST_TIMEOUT_MS: u64 = 15_000;

/// A Vault error answer: HTTP status and Vault's `errors`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultError {
    pub status: u16,
    pub errors: Vec<String>,
}

/// What a request can fail with: Vault answered with an error, or the request failed before.
#[derive(Debug)]
pub enum CallError {
    Vault(VaultError),
    Plugin(PluginError),
}

impl From<PluginError> for CallError {
    fn from(err: PluginError) -> CallError {
        CallError::Plugin(err)
    }
}

impl From<http::HttpError> for CallError {
    fn from(err: http::HttpError) -> CallError {
        // An unreachable Vault (connection refused, DNS, TLS, timeout) is a retryable upstream
        // failure: 503 to the client. A request the host's policy denies is not retryable.
        let retryable = matches!(err, http::HttpError::Timeout | http::HttpError::Transport(_));
        let message = if retryable { format!("Vault is unreachable: {err}") } else { err.to_string() };
        CallError::Plugin(PluginError::upstream(None, message, retryable))
    }
}

impl VaultError {
    /// Vault's messages, joined.
    pub fn message(&self) -> String {
        if self.errors.is_empty() {
            format!("HTTP {}", self.status)
        } else {
            self.errors.join("; ")
        }
    }

    fn mentions(&self, needle: &str) -> bool {
        self.errors.iter().any(|e| e.to_ascii_lowercase().contains(needle))
    }

    /// The role named in the path does not exist (a configuration problem, not a refusal).
    pub fn mentions_unknown_role(&self) -> bool {
        self.mentions("unknown role")
    }

    pub fn is_sealed(&self) -> bool {
        self.status == 503 || self.mentions("sealed")
    }

    pub fn is_permission_denied(&self) -> bool {
        self.status == 403 || self.mentions("permission denied")
    }

    /// The error for an operator: `fix` says what to grant when Vault denied permission.
    pub fn into_plugin_error(self, addr: &str, fix: &str) -> PluginError {
        let message = self.message();
        if self.is_sealed() {
            return PluginError::upstream(
                Some(503),
                format!("Vault at {addr} is sealed ({message}); unseal it (`bao operator unseal` / `vault operator unseal`)"),
                true,
            );
        }
        if self.is_permission_denied() {
            return PluginError::unauthorized(format!(
                "Vault at {addr} answered permission denied; the token is invalid or expired, or its policy lacks {fix}"
            ));
        }
        match self.status {
            501 => PluginError::upstream(Some(501), format!("Vault at {addr} is not initialised ({message})"), true),
            429 => PluginError::RateLimited(None),
            404 => PluginError::not_found(format!("Vault at {addr}: {message}")),
            400 if self.mentions("not found") => PluginError::not_found(format!("Vault at {addr}: {message}")),
            status if status >= 500 => PluginError::upstream(Some(status), format!("Vault at {addr}: {message}"), true),
            status => PluginError::upstream(Some(status), format!("Vault at {addr}: {message}"), false),
        }
    }
}

/// A Vault server as one call reaches it: address, namespace and token.
pub struct Vault {
    pub addr: String,
    namespace: Option<String>,
    token: Option<String>,
}

impl Vault {
    pub fn new(addr: &str, namespace: Option<&str>) -> Vault {
        Vault {
            addr: addr.trim().trim_end_matches('/').to_owned(),
            namespace: namespace.map(|ns| ns.trim_matches('/').to_owned()).filter(|ns| !ns.is_empty()),
            token: None,
        }
    }

    pub fn set_token(&mut self, token: &str) {
        self.token = Some(token.to_owned());
    }

    fn request(&self, method: &str, path: &str) -> http::Request {
        let mut request = http::Request::new(method, &format!("{}/v1/{}", self.addr, path.trim_start_matches('/')))
            .timeout_ms(REQUEST_TIMEOUT_MS);
        if let Some(namespace) = &self.namespace {
            request = request.header("x-vault-namespace", namespace);
        }
        if let Some(token) = &self.token {
            request = request.header("x-vault-token", token);
        }
        request
    }

    /// The raw answer, whatever its status (for `sys/health`, whose statuses carry meaning).
    pub fn raw(&self, method: &str, path: &str) -> Result<http::Response, CallError> {
        Ok(self.request(method, path).send()?)
    }

    /// `GET`s `path` and answers the whole JSON body.
    pub fn get(&self, path: &str) -> Result<Value, CallError> {
        self.send(self.request("GET", path))
    }

    /// `POST`s `body` to `path` and answers the whole JSON body (`Null` for 204).
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.send(self.request("POST", path).json(body)?)
    }

    fn send(&self, request: http::Request) -> Result<Value, CallError> {
        let response = request.send()?;
        if !response.is_success() {
            return Err(CallError::Vault(error_of(&response)));
        }
        if response.body.is_empty() {
            return Ok(Value::Null);
        }
        Ok(response.json()?)
    }
}

/// Vault's `{"errors": [...]}`, or the body's text when it is not that.
fn error_of(response: &http::Response) -> VaultError {
    let errors = serde_json::from_slice::<Value>(&response.body)
        .ok()
        .and_then(|v| v.get("errors").and_then(Value::as_array).cloned())
        .map(|errors| errors.iter().filter_map(Value::as_str).map(str::to_owned).collect::<Vec<_>>())
        .unwrap_or_else(|| {
            let text = util::truncate(response.text().trim(), 300);
            if text.is_empty() {
                Vec::new()
            } else {
                vec![text]
            }
        });
    VaultError { status: response.status, errors }
}
