//! The HashiCorp Vault / OpenBao PKI connector (CA type `hashicorp_vault`), written only against
//! the SDK. Vault and OpenBao speak the same PKI API:
//!
//! - issue: `POST {pkiPath}/sign/{role}` (or `{pkiPath}/issuer/{issuerRef}/sign/{role}`) with the
//!   CSR Trellis made; the chain is the answer's `ca_chain`. The serial is the CA reference. Vault's
//!   sign is not idempotent, so the serial is remembered per idempotency key (plugin state) and a
//!   retry fetches `cert/{serial}` instead of signing twice;
//! - revoke: `POST {pkiPath}/revoke` with the serial (Vault records no reason and has no hold);
//! - discovery: `LIST {pkiPath}/certs` a page at a time (`after`/`limit`, which OpenBao honours;
//!   a server that ignores them is paged here), each `cert/{serial}` imported, revoked ones as
//!   revoked; the mount's own CA certificates are skipped (they are the chain, not issuance);
//! - test: `health` (`sys/health`), `auth` (token lookup-self, or the AppRole login), `role`
//!   (`roles/{role}` exists and allows names), `issuer-validity` (`issuer/{ref}/json`).
//!
//! Authentication is a token, or AppRole (`auth/{approleMount}/login`): the login's token is
//! kept in plugin state (sealed at rest by the host) until half its TTL, since each call runs in
//! a fresh sandbox; a cached token Vault refuses is dropped and the login made once more.
//! There is no ACME ARI here: Vault has no renewal information, renewal follows the expiry rule.

#![forbid(unsafe_code)]

mod api;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

use crate::api::{CallError, Vault};

/// Days before the issuer's certificate expires from which the test warns.
const ISSUER_EXPIRY_WARNING_DAYS: i64 = 30;
/// State key prefix of the AppRole login token cache.
const APPROLE_STATE: &str = "approle-token/";
/// State key prefix of the serial signed per idempotency key.
const ISSUED_STATE: &str = "issued/";
/// A login token without a TTL (a root-like token) is still refreshed this often.
const UNBOUNDED_TOKEN_REFRESH_SECS: i64 = 3_600;
/// The most certificates one discovery page reads (each is one `cert/{serial}` request).
const MAX_PAGE: u32 = 200;

/// A `hashicorp_vault` record's configuration. Members are optional so `validate_config` names
/// every problem with its field. Unknown members are kept, not refused: records created when
/// this type was only probed (`plugins/ca-probe`) may hold other members and keep working.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// Vault's address (`https://vault.example.com:8200`); defaults to the CA record's `url`.
    /// A host other than the record's `url` must be granted to the plugin.
    #[schemars(extend("format" = "uri"))]
    pub vault_addr: Option<String>,
    /// The PKI secrets engine's mount path; default `pki`.
    pub pki_path: Option<String>,
    /// The PKI role certificates are signed under (`{pkiPath}/sign/{role}`); required to issue.
    pub role: Option<String>,
    /// The issuer to sign with (`{pkiPath}/issuer/{issuerRef}/sign/{role}`); default: the
    /// mount's default issuer.
    pub issuer_ref: Option<String>,
    /// The Vault Enterprise / OpenBao namespace, sent as `X-Vault-Namespace`.
    pub namespace: Option<String>,
    /// `token` (default when `token` is set) or `approle`.
    #[schemars(extend("enum" = ["token", "approle"]))]
    pub auth_method: Option<String>,
    /// The Vault token (`authMethod: token`). Secret: encrypted at rest, masked in responses.
    #[schemars(extend("writeOnly" = true))]
    pub token: Option<String>,
    /// The AppRole role ID (`authMethod: approle`).
    pub role_id: Option<String>,
    /// The AppRole secret ID. Secret: encrypted at rest, masked in responses.
    #[schemars(extend("writeOnly" = true))]
    pub secret_id: Option<String>,
    /// The AppRole auth mount; default `approle`.
    pub approle_mount: Option<String>,
}

fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// A path segment (role, issuer reference, mount): letters, digits, `-`, `_`, `.`; never `..`.
fn segment_ok(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text != "."
        && text != ".."
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A mount path or namespace: segments joined by `/`.
fn path_ok(text: &str) -> bool {
    let trimmed = text.trim_matches('/');
    !trimmed.is_empty() && trimmed.len() <= 256 && trimmed.split('/').all(segment_ok)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AuthMethod {
    Token,
    AppRole,
    /// No credentials: a record registered for its health only (as the probe allowed).
    None,
}

impl Config {
    fn auth_method(&self) -> Option<AuthMethod> {
        match present(&self.auth_method) {
            Some("token") => Some(AuthMethod::Token),
            Some("approle") => Some(AuthMethod::AppRole),
            Some(_) => None,
            None if present(&self.token).is_some() => Some(AuthMethod::Token),
            None if present(&self.role_id).is_some() || present(&self.secret_id).is_some() => Some(AuthMethod::AppRole),
            None => Some(AuthMethod::None),
        }
    }

    fn pki_path(&self) -> String {
        present(&self.pki_path).map(|p| p.trim_matches('/').to_owned()).unwrap_or_else(|| "pki".to_owned())
    }

    fn approle_mount(&self) -> String {
        present(&self.approle_mount).map(|p| p.trim_matches('/').to_owned()).unwrap_or_else(|| "approle".to_owned())
    }

    /// `vaultAddr`, else the record's `url`.
    fn addr(&self, ctx: &CallContext) -> Result<String, PluginError> {
        present(&self.vault_addr)
            .map(str::to_owned)
            .or_else(|| ctx.endpoint.clone().filter(|u| !u.trim().is_empty()))
            .map(|addr| addr.trim().trim_end_matches('/').to_owned())
            .ok_or_else(|| {
                PluginError::invalid_config("/vaultAddr", "set vaultAddr or the CA's url to Vault's address")
            })
    }

    fn role(&self) -> Result<&str, PluginError> {
        present(&self.role).ok_or_else(|| {
            PluginError::invalid_config("/role", "is required to issue: the PKI role certificates are signed under")
        })
    }

    /// `{pkiPath}/sign/{role}`, through `issuerRef` when set.
    fn sign_path(&self) -> Result<String, PluginError> {
        let role = self.role()?;
        Ok(match present(&self.issuer_ref) {
            Some(issuer) => format!("{}/issuer/{issuer}/sign/{role}", self.pki_path()),
            None => format!("{}/sign/{role}", self.pki_path()),
        })
    }

    fn issuer_path(&self) -> String {
        format!("{}/issuer/{}/json", self.pki_path(), present(&self.issuer_ref).unwrap_or("default"))
    }
}

/// The AppRole login token as cached in plugin state (sealed at rest by the host).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedLogin {
    token: String,
    /// Unix seconds after which a new login is made: half the token's TTL.
    refresh_at: i64,
    /// SHA-256 of the secret ID it was made with: a changed secret ID logs in again.
    secret_fingerprint: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A client authenticated as the record says.
struct Session {
    vault: Vault,
    config_key: Option<String>,
    /// True when the token came from the AppRole cache (a refusal may mean it was revoked).
    cached: bool,
}

fn approle_cache_key(config: &Config, addr: &str) -> String {
    let identity = format!(
        "{addr}\n{}\n{}\n{}",
        present(&config.namespace).unwrap_or(""),
        config.approle_mount(),
        present(&config.role_id).unwrap_or("")
    );
    format!("{APPROLE_STATE}{}", hex(&jws::sha256(identity.as_bytes())))
}

/// Logs in with AppRole: the token and its TTL in seconds.
fn approle_login(config: &Config, vault: &Vault) -> Result<(String, i64), PluginError> {
    let (Some(role_id), Some(secret_id)) = (present(&config.role_id), present(&config.secret_id)) else {
        return Err(PluginError::invalid_config("/roleId", "roleId and secretId are required with authMethod approle"));
    };
    let mount = config.approle_mount();
    let answer = vault
        .post(&format!("auth/{mount}/login"), &json!({ "role_id": role_id, "secret_id": secret_id }))
        .map_err(|err| match err {
            CallError::Vault(err) if !err.is_sealed() && (err.status == 400 || err.is_permission_denied()) => {
                PluginError::unauthorized(format!(
                    "Vault at {} refused the AppRole login at auth/{mount}/login ({}); check roleId and secretId (and the secret ID's TTL and uses)",
                    vault.addr,
                    err.message()
                ))
            }
            other => plugin_error(other, &vault.addr, &format!("access to auth/{mount}/login")),
        })?;
    let token = answer["auth"]["client_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| PluginError::upstream(Some(200), "the AppRole login answered without a client_token", false))?;
    Ok((token.to_owned(), answer["auth"]["lease_duration"].as_i64().unwrap_or(0)))
}

impl Session {
    fn open(ctx: &CallContext, config: &Config) -> Result<Session, PluginError> {
        let addr = config.addr(ctx)?;
        let mut vault = Vault::new(&addr, present(&config.namespace));
        match config.auth_method() {
            Some(AuthMethod::Token) => {
                let token = present(&config.token)
                    .ok_or_else(|| PluginError::invalid_config("/token", "is required with authMethod token"))?;
                vault.set_token(token);
                Ok(Session { vault, config_key: None, cached: false })
            }
            Some(AuthMethod::AppRole) => {
                let key = approle_cache_key(config, &addr);
                let fingerprint = hex(&jws::sha256(present(&config.secret_id).unwrap_or("").as_bytes()));
                let now = clock::unix_seconds();
                // A cache that cannot be read costs one login, never the call.
                let cached = state::get_json::<CachedLogin>(&key).ok().flatten();
                if let Some(cached) = cached.filter(|c| c.refresh_at > now && c.secret_fingerprint == fingerprint) {
                    vault.set_token(&cached.token);
                    return Ok(Session { vault, config_key: Some(key), cached: true });
                }
                let mut session = Session { vault, config_key: Some(key), cached: false };
                session.login(config)?;
                Ok(session)
            }
            Some(AuthMethod::None) => Err(PluginError::invalid_config(
                "/authMethod",
                "no credentials: set authMethod token (with token) or approle (with roleId and secretId)",
            )),
            None => Err(PluginError::invalid_config("/authMethod", "must be token or approle")),
        }
    }

    /// A fresh AppRole login, cached until half its TTL.
    fn login(&mut self, config: &Config) -> Result<(), PluginError> {
        let (token, ttl) = approle_login(config, &self.vault)?;
        let now = clock::unix_seconds();
        let refresh_at = now + if ttl > 0 { ttl / 2 } else { UNBOUNDED_TOKEN_REFRESH_SECS };
        if let Some(key) = &self.config_key {
            let fingerprint = hex(&jws::sha256(present(&config.secret_id).unwrap_or("").as_bytes()));
            let cached = CachedLogin { token: token.clone(), refresh_at, secret_fingerprint: fingerprint };
            // A cache only: failing to write it costs a login next time.
            if state::set_json(key, &cached).is_err() {
                log::warn("cannot cache the AppRole login token", &[]);
            }
        }
        self.vault.set_token(&token);
        self.cached = false;
        Ok(())
    }

    /// Runs `op`; a permission refusal with a cached AppRole token (revoked, or its policy
    /// changed) logs in again and runs it once more.
    fn run<T>(&mut self, config: &Config, op: impl Fn(&Vault) -> Result<T, CallError>) -> Result<T, CallError> {
        match op(&self.vault) {
            Err(CallError::Vault(err)) if self.cached && err.is_permission_denied() && !err.is_sealed() => {
                if let Some(key) = &self.config_key {
                    let _ = state::delete(key);
                }
                self.login(config)?;
                op(&self.vault)
            }
            other => other,
        }
    }
}

fn plugin_error(err: CallError, addr: &str, fix: &str) -> PluginError {
    match err {
        CallError::Vault(err) => err.into_plugin_error(addr, fix),
        CallError::Plugin(err) => err,
    }
}

/// A serial as Vault names it: lowercase hex pairs joined by `:`.
fn colon_serial(serial_hex: &str) -> Option<String> {
    let digits: String =
        serial_hex.trim().trim_start_matches("0x").chars().filter(|c| *c != ':' && *c != '-').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let digits = digits.to_ascii_lowercase();
    let digits = digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let padded = if digits.len() % 2 == 1 { format!("0{digits}") } else { digits.to_owned() };
    Some(
        padded
            .as_bytes()
            .chunks(2)
            .map(|pair| String::from_utf8_lossy(pair).into_owned())
            .collect::<Vec<_>>()
            .join(":"),
    )
}

/// A serial as Vault stores it under `certs/`: `aa-bb-…`.
fn storage_key(serial: &str) -> String {
    serial.replace(':', "-")
}

/// The PEM of a `cert/{serial}`-like answer's `data.certificate`.
fn certificate_of(answer: &Value) -> Option<String> {
    answer["data"]["certificate"]
        .as_str()
        .filter(|pem| pem.contains("BEGIN CERTIFICATE"))
        .map(|pem| pem.trim().to_owned())
}

/// Facts of a certificate the test and discovery read.
struct CertFacts {
    subject: String,
    not_after: i64,
    is_ca: bool,
}

fn cert_facts(pem: &str) -> Option<CertFacts> {
    let der = util::pem_to_der(pem)?;
    let (_, certificate) = x509_parser::parse_x509_certificate(&der).ok()?;
    Some(CertFacts {
        subject: certificate.subject().to_string(),
        not_after: certificate.validity().not_after.timestamp(),
        is_ca: certificate.basic_constraints().ok().flatten().is_some_and(|bc| bc.value.ca),
    })
}

/// The subject alternative names as Vault's `alt_names` (DNS and email), `ip_sans`, `uri_sans`.
fn san_members(request: &IssueRequest) -> Value {
    let (mut alt, mut ips, mut uris) = (Vec::new(), Vec::new(), Vec::new());
    for san in &request.profile.subject_alt_names {
        match san {
            SubjectAltName::Dns(name) | SubjectAltName::Email(name) => alt.push(name.clone()),
            SubjectAltName::Ip(ip) => ips.push(ip.to_string()),
            SubjectAltName::Uri(uri) => uris.push(uri.clone()),
            _ => {}
        }
    }
    let mut body = json!({});
    if !alt.is_empty() {
        body["alt_names"] = json!(alt.join(","));
    }
    if !ips.is_empty() {
        body["ip_sans"] = json!(ips.join(","));
    }
    if !uris.is_empty() {
        body["uri_sans"] = json!(uris.join(","));
    }
    body
}

fn issued_from(answer: &Value, serial: &str) -> Result<IssuedCertificate, PluginError> {
    let certificate = certificate_of(answer)
        .ok_or_else(|| PluginError::upstream(Some(200), "Vault answered without a certificate", false))?;
    let mut chain: Vec<String> = answer["data"]["ca_chain"]
        .as_array()
        .map(|chain| chain.iter().filter_map(Value::as_str).flat_map(util::pem_certificates).collect())
        .unwrap_or_default();
    if chain.is_empty() {
        chain = util::pem_certificates(answer["data"]["issuing_ca"].as_str().unwrap_or_default());
    }
    Ok(IssuedCertificate::pem(certificate).with_chain(chain).with_ca_reference(serial))
}

/// The Vault / OpenBao connector.
pub struct VaultPki;

impl CaConnector for VaultPki {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::ca_connector("trellis.vault", env!("CARGO_PKG_VERSION"), "HashiCorp Vault / OpenBao PKI", &[
            "hashicorp_vault",
        ])
        .with_description(
            "Issues, revokes and discovers certificates through a Vault or OpenBao PKI secrets engine, with a token or AppRole.",
        )
        .with_capabilities(&[Capability::Issue, Capability::Revoke, Capability::Renew, Capability::Discover])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        if let Some(why) = present(&config.vault_addr).and_then(http::http_base_url_problem) {
            issues.push(ConfigIssue::new("/vaultAddr", why));
        }
        if let Some(path) = present(&config.pki_path) {
            if !path_ok(path) {
                issues.push(ConfigIssue::new("/pkiPath", "must be a mount path such as pki or pki/int"));
            }
        }
        for (field, value) in [("/role", &config.role), ("/issuerRef", &config.issuer_ref)] {
            if let Some(text) = present(value) {
                if !segment_ok(text) {
                    issues.push(ConfigIssue::new(field, "may hold only letters, digits, '-', '_' and '.'"));
                }
            }
        }
        for (field, value) in [("/namespace", &config.namespace), ("/approleMount", &config.approle_mount)] {
            if let Some(text) = present(value) {
                if !path_ok(text) {
                    issues.push(ConfigIssue::new(field, "must be a path such as team-a or team-a/dev"));
                }
            }
        }
        match config.auth_method() {
            None => issues.push(ConfigIssue::new("/authMethod", "must be token or approle")),
            Some(AuthMethod::Token) => {
                if present(&config.token).is_none() {
                    issues.push(ConfigIssue::new("/token", "is required with authMethod token"));
                }
                for (field, value) in [("/roleId", &config.role_id), ("/secretId", &config.secret_id)] {
                    if present(value).is_some() {
                        issues.push(ConfigIssue::new(field, "only applies with authMethod approle"));
                    }
                }
            }
            Some(AuthMethod::AppRole) => {
                for (field, value) in [("/roleId", &config.role_id), ("/secretId", &config.secret_id)] {
                    if present(value).is_none() {
                        issues.push(ConfigIssue::new(field, "is required with authMethod approle"));
                    }
                }
                if present(&config.token).is_some() {
                    issues.push(ConfigIssue::new("/token", "only applies with authMethod token"));
                }
            }
            Some(AuthMethod::None) => {}
        }
        if issues.is_empty() {
            Ok(())
        } else {
            Err(PluginError::InvalidConfig(issues))
        }
    }

    fn test_connection(ctx: &CallContext, config: &Config) -> Result<TestReport, PluginError> {
        let addr = config.addr(ctx)?;
        let pki = config.pki_path();
        let mut details = json!({ "vaultAddr": addr, "pkiPath": pki, "role": present(&config.role) });
        if let Some(namespace) = present(&config.namespace) {
            details["namespace"] = json!(namespace);
        }
        let mut checks = Vec::new();
        let anonymous = Vault::new(&addr, present(&config.namespace));

        // health: Vault's status codes as it documents them. sys/health belongs to the root
        // namespace: OpenBao answers 400 to it under X-Vault-Namespace.
        let health = match Vault::new(&addr, None).raw("GET", "sys/health") {
            Ok(response) => response,
            Err(err) => {
                checks.push(Check::fail("health", plugin_error(err, &addr, "").to_string()));
                return Ok(TestReport::from_checks("Vault is unreachable", checks).with_details(details));
            }
        };
        let body: Value = serde_json::from_slice(&health.body).unwrap_or(Value::Null);
        details["version"] = body["version"].clone();
        details["sealed"] = body["sealed"].clone();
        let healthy = match health.status {
            200 => {
                checks.push(Check::pass("health", "initialised, unsealed and active"));
                true
            }
            // Reachable, but not the active node: a warning (the CA's health reads degraded).
            429 | 473 => {
                checks.push(Check::warn(
                    "health",
                    format!("reachable: a standby node ({}); requests are forwarded to the active node", health.status),
                ));
                true
            }
            472 => {
                checks.push(Check::warn("health", "reachable: a disaster-recovery secondary, which cannot issue"));
                true
            }
            501 => {
                checks.push(Check::fail("health", "Vault is not initialised (501): run operator init"));
                false
            }
            503 => {
                checks.push(Check::fail("health", "Vault is sealed (503): unseal it"));
                false
            }
            other => {
                checks.push(Check::fail("health", format!("sys/health answered {other}")));
                false
            }
        };
        if !healthy {
            for name in ["auth", "role", "issuer-validity"] {
                checks.push(Check::skip(name, "Vault is not serving"));
            }
            return Ok(TestReport::from_checks("Vault cannot serve requests", checks).with_details(details));
        }

        // auth: a token is looked up; AppRole logs in (and caches the token).
        let session = match config.auth_method() {
            Some(AuthMethod::None) => {
                checks.push(Check::skip(
                    "auth",
                    "no credentials configured (authMethod token or approle): Vault can be tested but not issued through",
                ));
                None
            }
            _ => match Session::open(ctx, config) {
                Err(err) => {
                    checks.push(Check::fail("auth", err.to_string()));
                    None
                }
                Ok(session) => {
                    if config.auth_method() == Some(AuthMethod::AppRole) {
                        checks.push(Check::pass(
                            "auth",
                            format!("AppRole login at auth/{}/login succeeded", config.approle_mount()),
                        ));
                        Some(session)
                    } else {
                        match session.vault.get("auth/token/lookup-self") {
                            Ok(answer) => {
                                let policies: Vec<&str> = answer["data"]["policies"]
                                    .as_array()
                                    .map(|p| p.iter().filter_map(Value::as_str).collect())
                                    .unwrap_or_default();
                                checks.push(Check::pass(
                                    "auth",
                                    format!("the token is valid (policies: {})", policies.join(", ")),
                                ));
                                Some(session)
                            }
                            Err(err) => {
                                let err =
                                    plugin_error(err, &addr, "read on auth/token/lookup-self (the default policy)");
                                checks.push(Check::fail("auth", err.to_string()));
                                None
                            }
                        }
                    }
                }
            },
        };

        // role: it exists and allows names.
        match (present(&config.role), &session) {
            // Not a warning: a record registered for its health (as the probe allowed) stays healthy.
            (None, _) => checks.push(Check::skip("role", "no role configured: set role to issue")),
            (Some(_), None) => checks.push(Check::skip("role", "needs working credentials")),
            (Some(role), Some(session)) => match session.vault.get(&format!("{pki}/roles/{role}")) {
                Ok(answer) => {
                    let data = &answer["data"];
                    let domains: Vec<&str> = data["allowed_domains"]
                        .as_array()
                        .map(|d| d.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let any = data["allow_any_name"].as_bool().unwrap_or(false);
                    checks.push(if any {
                        Check::pass("role", format!("{pki}/roles/{role} allows any name"))
                    } else if domains.is_empty() && !data["allow_localhost"].as_bool().unwrap_or(false) {
                        Check::warn("role", format!("{pki}/roles/{role} allows no domains: it cannot sign names"))
                    } else {
                        Check::pass("role", format!("{pki}/roles/{role} allows {}", domains.join(", ")))
                    });
                    if data["no_store"].as_bool() == Some(true) {
                        checks.push(Check::warn(
                            "role-store",
                            "the role has no_store: Vault keeps no copy, so discovery and revocation by serial cannot see its certificates",
                        ));
                    }
                }
                Err(CallError::Vault(err)) if err.status == 404 => {
                    checks.push(Check::fail("role", format!("{pki} has no role {role}")))
                }
                Err(err) => {
                    let fix = format!("read on {pki}/roles/{role}");
                    checks.push(Check::fail("role", plugin_error(err, &addr, &fix).to_string()));
                }
            },
        }

        // issuer-validity: the issuer's certificate (an unauthenticated endpoint).
        match anonymous.get(&config.issuer_path()) {
            Ok(answer) => match certificate_of(&answer).as_deref().and_then(cert_facts) {
                Some(facts) => {
                    let now = clock::unix_seconds();
                    let days_left = (facts.not_after - now).div_euclid(86_400);
                    checks.push(if facts.not_after <= now {
                        Check::fail(
                            "issuer-validity",
                            format!("the issuer's certificate expired {} days ago", -days_left),
                        )
                    } else if days_left < ISSUER_EXPIRY_WARNING_DAYS {
                        Check::warn("issuer-validity", format!("the issuer's certificate expires in {days_left} days"))
                    } else {
                        Check::pass("issuer-validity", format!("valid for {days_left} more days"))
                    });
                    details["issuer"] = json!({ "subject": facts.subject,
                        "notAfter": util::rfc3339(facts.not_after.saturating_mul(1000)), "daysUntilExpiry": days_left });
                }
                None => {
                    checks.push(Check::fail("issuer-validity", "the issuer answered without a readable certificate"))
                }
            },
            Err(err) => {
                let err = plugin_error(err, &addr, "");
                let message = match &err {
                    PluginError::NotFound(_) => format!("{pki} has no issuer yet (generate or import one): {err}"),
                    _ => err.to_string(),
                };
                checks.push(Check::fail("issuer-validity", message));
            }
        }
        let failed = checks.iter().any(|c| c.status == CheckStatus::Fail);
        let message = if failed { "Vault PKI cannot issue" } else { "Vault PKI is ready" };
        Ok(TestReport::from_checks(message, checks).with_details(details))
    }

    fn issue(ctx: &CallContext, config: &Config, request: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        let path = config.sign_path()?;
        let mut session = Session::open(ctx, config)?;
        let addr = session.vault.addr.clone();
        let issued_key = format!("{ISSUED_STATE}{}", hex(&jws::sha256(request.idempotency_key.as_bytes())));
        // A retry of an issuance already signed: the same certificate, not a second one.
        if let Some(serial) = state::get(&issued_key)?.and_then(|bytes| String::from_utf8(bytes).ok()) {
            let pki = config.pki_path();
            let answer = session
                .run(config, |vault| vault.get(&format!("{pki}/cert/{serial}")))
                .map_err(|err| plugin_error(err, &addr, &format!("read on {pki}/cert/*")))?;
            return Ok(IssueOutcome::Issued(issued_from(&answer, &serial)?));
        }
        let mut body = san_members(request);
        body["csr"] = json!(request.csr_pem.trim());
        body["format"] = json!("pem");
        body["ttl"] = json!(format!("{}h", u64::from(request.profile.validity_days.max(1)) * 24));
        if let Some(cn) = request.profile.common_name.as_deref().filter(|cn| !cn.is_empty()) {
            body["common_name"] = json!(cn);
        }
        let answer = session.run(config, |vault| vault.post(&path, &body)).map_err(|err| match err {
            // The role refused the request (a name, a TTL, the key): Vault's own words, 400.
            CallError::Vault(err) if err.status == 400 && err.mentions_unknown_role() => {
                PluginError::invalid_config("/role", format!("Vault at {addr}: {}", err.message()))
            }
            CallError::Vault(err) if err.status == 400 => {
                PluginError::rejected(format!("Vault refused to sign under {path}: {}", err.message()))
            }
            other => plugin_error(other, &addr, &format!("update on {path}")),
        })?;
        let serial = answer["data"]["serial_number"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| PluginError::upstream(Some(200), "Vault signed without a serial_number", false))?
            .to_owned();
        if let Some(warnings) = answer["warnings"].as_array() {
            for warning in warnings.iter().filter_map(Value::as_str) {
                log::info("Vault warned while signing", &[("warning", warning), ("serial", &serial)]);
            }
        }
        // The serial is not secret; failing to remember it only loses retry deduplication.
        if state::set(&issued_key, serial.as_bytes()).is_err() {
            log::warn("cannot remember the signed serial for retries", &[("serial", &serial)]);
        }
        log::info("certificate signed", &[("serial", &serial), ("path", &path)]);
        Ok(IssueOutcome::Issued(issued_from(&answer, &serial)?))
    }

    fn fetch_certificate(
        ctx: &CallContext,
        config: &Config,
        ca_reference: &str,
    ) -> Result<IssuedCertificate, PluginError> {
        let serial = colon_serial(ca_reference)
            .ok_or_else(|| PluginError::invalid_input("the CA reference is not a Vault serial number"))?;
        let addr = config.addr(ctx)?;
        let pki = config.pki_path();
        // cert/{serial} is unauthenticated in Vault's PKI.
        let answer = Vault::new(&addr, present(&config.namespace))
            .get(&format!("{pki}/cert/{serial}"))
            .map_err(|err| plugin_error(err, &addr, ""))?;
        issued_from(&answer, &serial)
    }

    fn ca_chain(ctx: &CallContext, config: &Config) -> Result<Vec<String>, PluginError> {
        let addr = config.addr(ctx)?;
        let answer = Vault::new(&addr, present(&config.namespace))
            .get(&config.issuer_path())
            .map_err(|err| plugin_error(err, &addr, ""))?;
        let chain: Vec<String> = answer["data"]["ca_chain"]
            .as_array()
            .map(|chain| chain.iter().filter_map(Value::as_str).flat_map(util::pem_certificates).collect())
            .unwrap_or_default();
        Ok(if chain.is_empty() { certificate_of(&answer).into_iter().collect() } else { chain })
    }

    fn revoke(ctx: &CallContext, config: &Config, request: &RevokeRequest) -> Result<(), PluginError> {
        if matches!(request.reason, RevocationReason::CertificateHold | RevocationReason::RemoveFromCrl) {
            return Err(PluginError::invalid_input(
                "Vault revokes for good and has no certificate hold; choose another reason",
            ));
        }
        let serial = request
            .certificate
            .ca_reference
            .as_deref()
            .and_then(colon_serial)
            .or_else(|| colon_serial(&request.certificate.serial_number))
            .ok_or_else(|| PluginError::invalid_input("the certificate's serial number is not hexadecimal"))?;
        let mut session = Session::open(ctx, config)?;
        let addr = session.vault.addr.clone();
        let path = format!("{}/revoke", config.pki_path());
        // Revoking a revoked certificate answers 200 again: idempotent for the inventory.
        session
            .run(config, |vault| vault.post(&path, &json!({ "serial_number": serial })))
            .map_err(|err| plugin_error(err, &addr, &format!("update on {path}")))?;
        log::info("certificate revoked", &[("serial", &serial)]);
        Ok(())
    }

    fn list_certificates(
        ctx: &CallContext,
        config: &Config,
        page: &PageRequest,
    ) -> Result<CertificatePage, PluginError> {
        let mut session = Session::open(ctx, config)?;
        let addr = session.vault.addr.clone();
        let pki = config.pki_path();
        let limit = page.limit.clamp(1, MAX_PAGE);
        let after = page.cursor.as_deref().filter(|c| !c.is_empty());
        let mut query = format!("{pki}/certs?list=true&limit={limit}");
        if let Some(after) = after {
            query.push_str(&format!("&after={after}"));
        }
        let listed = match session.run(config, |vault| vault.get(&query)) {
            Ok(answer) => answer,
            // An empty mount answers 404 to LIST.
            Err(CallError::Vault(err)) if err.status == 404 && !err.is_sealed() => {
                return Ok(CertificatePage { items: Vec::new(), next_cursor: None })
            }
            Err(err) => return Err(plugin_error(err, &addr, &format!("list on {pki}/certs"))),
        };
        let mut keys: Vec<String> = listed["data"]["keys"]
            .as_array()
            .map(|keys| keys.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        // The cursor is a serial in the storage's form (`aa-bb-…`): OpenBao answers `aa:bb:…` but
        // orders and compares `after` as it stores the keys, so an `aa:bb` cursor would skip
        // serials. A server that honours after/limit answers at most `limit` keys in that order;
        // one that ignores them (Vault before paginated lists) answers every key: page here, in
        // the same order.
        if keys.len() > limit as usize {
            keys.sort_by_key(|k| storage_key(k));
            if let Some(after) = after {
                keys.retain(|k| storage_key(k).as_str() > after);
            }
        }
        let more = keys.len() >= limit as usize;
        keys.truncate(limit as usize);
        let mut items = Vec::with_capacity(keys.len());
        for serial in &keys {
            let answer = match session.vault.get(&format!("{pki}/cert/{serial}")) {
                Ok(answer) => answer,
                // Tidied away between the list and the read.
                Err(CallError::Vault(err)) if err.status == 404 && !err.is_sealed() => continue,
                Err(err) => return Err(plugin_error(err, &addr, &format!("read on {pki}/cert/*"))),
            };
            let Some(pem) = certificate_of(&answer) else { continue };
            // The mount's own CA certificates are its chain, not what it issued.
            if cert_facts(&pem).is_some_and(|facts| facts.is_ca) {
                continue;
            }
            let revoked_at = answer["data"]["revocation_time"].as_i64().filter(|t| *t > 0);
            items.push(DiscoveredCertificate { certificate_pem: pem, ca_reference: Some(serial.clone()), revoked_at });
        }
        let next_cursor = if more { keys.last().map(|k| storage_key(k)) } else { None };
        Ok(CertificatePage { items, next_cursor })
    }
}

trellis_plugin_sdk::export_ca_connector!(VaultPki);

#[cfg(test)]
mod tests;
