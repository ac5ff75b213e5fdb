//! OpenID Connect sign-in (authorization code flow, PKCE S256, confidential client), users
//! created just in time and keyed by (issuer, subject), and workspace memberships synced from
//! the IdP's groups at every sign-in.
//!
//! The rules live here; the IdP is reached through [`port::OidcTransport`] and the rows through
//! [`port::OidcReads`] / [`port::OidcWrites`]. The flow:
//! 1. [`start_login`]: a random `state`, `nonce` and PKCE verifier; the attempt is stored (state
//!    and browser binding as digests, the verifier sealed) and the browser is sent to the IdP
//!    with a binding cookie (`SameSite=Lax`: `Strict` would not be sent on the way back).
//! 2. [`finish_login`]: the attempt is consumed once, and only by the browser that started it;
//!    RFC 9207 `iss`; the code is redeemed (with the verifier); the ID token's signature (JWKS,
//!    [`keys`]) and claims (`iss`, `aud`, `azp`, `exp`, `iat`, `nonce`) are checked; the user is
//!    found or created; memberships are synced; a session opens.

mod keys;
pub mod port;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use sha2::{Digest, Sha256};

use self::port::{IdpAnswer, LoginAttempt, Membership, MembershipSource, OidcTransport};
use crate::audit::Audit;
use crate::auth::port::AuthWrites;
use crate::auth::AuthDeps;
use crate::auth::{Role, Session, User, SESSION_LIFETIME_SECS};
use crate::clock::random_hex;
use crate::crypto::{constant_time_eq, token_digest};
use crate::error::{Error, Result};
use crate::ids::{UserId, WorkspaceId};
use crate::principal::Principal;
use crate::unit_of_work::{ChangeTx, Target, UnitOfWork};

/// The cookie that binds a sign-in in flight to the browser that started it.
pub const BINDING_COOKIE: &str = "trellis_oidc";
/// How long a sign-in may take at the IdP.
pub const LOGIN_TTL_SECS: i64 = 600;

/// A group → (workspace, role) rule from the config file's `[[oidc.role_mappings]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleMapping {
    pub group: String,
    /// A workspace id, or else a workspace name.
    pub workspace: String,
    pub role: Role,
}

/// The operator's OIDC settings (validated by the binary's configuration).
#[derive(Clone)]
pub struct OidcConfig {
    /// The issuer identifier, exactly as the IdP's discovery document and ID tokens carry it.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    pub scopes: Vec<String>,
    pub display_name: String,
    pub groups_claim: String,
    /// `{TRELLIS_PUBLIC_URL}/api/auth/oidc/callback`.
    pub redirect_uri: String,
    /// Where the IdP sends the browser after RP-initiated logout: `{TRELLIS_PUBLIC_URL}/`.
    pub post_logout_redirect_uri: String,
    pub role_mappings: Vec<RoleMapping>,
    /// Tolerated clock difference with the IdP for `exp` and `iat`.
    pub clock_skew: Duration,
    /// At most one JWKS refresh forced by an unknown key per this interval.
    pub jwks_min_refresh: Duration,
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("groups_claim", &self.groups_claim)
            .field("role_mappings", &self.role_mappings)
            .finish_non_exhaustive()
    }
}

/// Why a sign-in failed. Each has its own stable code; none is a 500.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OidcError {
    #[error("OpenID Connect sign-in is not configured")]
    NotConfigured,
    #[error("`redirect` must be a path on this site, like /certificates")]
    BadRedirect,
    #[error("The callback carries no `state`")]
    MissingState,
    #[error("This sign-in is unknown, expired or already finished; start again")]
    UnknownState,
    #[error("This sign-in was started in another browser; start again from this one")]
    StateFromAnotherBrowser,
    #[error("The identity provider refused the sign-in: {0}")]
    Denied(String),
    #[error("The callback carries no authorization `code`")]
    MissingCode,
    #[error("The callback's `iss` is not the configured issuer (RFC 9207)")]
    IssuerParameterMismatch,
    #[error("The identity provider sends `iss` with callbacks, and this one has none (RFC 9207)")]
    IssuerParameterMissing,
    #[error("The identity provider is unreachable: {0}")]
    ProviderUnavailable(String),
    #[error("The identity provider answered something unusable: {0}")]
    ProviderInvalid(String),
    #[error("The identity provider refused to redeem the code: {0}")]
    CodeRejected(String),
    #[error("The ID token is malformed: {0}")]
    TokenMalformed(String),
    #[error("The ID token uses a signature algorithm that is not accepted: {0}")]
    TokenAlgorithm(String),
    #[error("The ID token is signed with a key the identity provider does not publish (kid {0})")]
    UnknownKey(String),
    #[error("The ID token's signature does not verify")]
    BadSignature,
    #[error("The ID token's issuer is not the configured issuer")]
    WrongIssuer,
    #[error("The ID token is not meant for this client (aud)")]
    WrongAudience,
    #[error("The ID token has several audiences and no `azp` naming this client")]
    MissingAzp,
    #[error("The ID token's `azp` is not this client")]
    WrongAzp,
    #[error("The ID token has expired")]
    Expired,
    #[error("The ID token's `iat` is in the future or too old")]
    BadIssuedAt,
    #[error("The ID token's nonce does not match this sign-in")]
    WrongNonce,
    #[error("The identity provider gave no e-mail address for this person (ask for the `email` scope)")]
    MissingEmail,
    #[error("A Trellis user with this e-mail already exists and the identity provider does not vouch for the address (email_verified)")]
    EmailInUse,
    #[error("The userinfo answer is about another person than the ID token")]
    UserinfoMismatch,
    #[error("Password sign-in is turned off; sign in through the identity provider")]
    PasswordLoginDisabled,
}

impl crate::error::AreaError for OidcError {
    fn code(&self) -> &'static str {
        OidcError::code(self)
    }
}

impl OidcError {
    /// Stable machine-readable code. Never change a value once shipped.
    pub fn code(&self) -> &'static str {
        match self {
            OidcError::NotConfigured => "OIDC_NOT_CONFIGURED",
            OidcError::BadRedirect => "OIDC_BAD_REDIRECT",
            OidcError::MissingState => "OIDC_MISSING_STATE",
            OidcError::UnknownState => "OIDC_UNKNOWN_STATE",
            OidcError::StateFromAnotherBrowser => "OIDC_STATE_MISMATCH",
            OidcError::Denied(_) => "OIDC_DENIED",
            OidcError::MissingCode => "OIDC_MISSING_CODE",
            OidcError::IssuerParameterMismatch => "OIDC_ISS_PARAMETER_MISMATCH",
            OidcError::IssuerParameterMissing => "OIDC_ISS_PARAMETER_MISSING",
            OidcError::ProviderUnavailable(_) => "OIDC_PROVIDER_UNAVAILABLE",
            OidcError::ProviderInvalid(_) => "OIDC_PROVIDER_INVALID",
            OidcError::CodeRejected(_) => "OIDC_CODE_REJECTED",
            OidcError::TokenMalformed(_) => "OIDC_TOKEN_MALFORMED",
            OidcError::TokenAlgorithm(_) => "OIDC_TOKEN_ALGORITHM",
            OidcError::UnknownKey(_) => "OIDC_UNKNOWN_KEY",
            OidcError::BadSignature => "OIDC_BAD_SIGNATURE",
            OidcError::WrongIssuer => "OIDC_WRONG_ISSUER",
            OidcError::WrongAudience => "OIDC_WRONG_AUDIENCE",
            OidcError::MissingAzp => "OIDC_MISSING_AZP",
            OidcError::WrongAzp => "OIDC_WRONG_AZP",
            OidcError::Expired => "OIDC_TOKEN_EXPIRED",
            OidcError::BadIssuedAt => "OIDC_BAD_IAT",
            OidcError::WrongNonce => "OIDC_WRONG_NONCE",
            OidcError::MissingEmail => "OIDC_MISSING_EMAIL",
            OidcError::EmailInUse => "OIDC_EMAIL_IN_USE",
            OidcError::UserinfoMismatch => "OIDC_USERINFO_MISMATCH",
            OidcError::PasswordLoginDisabled => "PASSWORD_LOGIN_DISABLED",
        }
    }
}

/// What the discovery document tells (OpenID Connect Discovery 1.0).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ProviderMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub userinfo_endpoint: Option<String>,
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// The configured IdP: settings, transport, and the discovery and key caches.
pub struct Provider {
    pub config: OidcConfig,
    transport: Arc<dyn OidcTransport>,
    metadata: Mutex<Option<(ProviderMetadata, i64)>>,
    keys: tokio::sync::Mutex<keys::KeyCache>,
}

/// Discovery is re-read at most this often (an IdP moving its endpoints needs no restart).
const METADATA_TTL_MS: i64 = 3600 * 1000;
/// The largest answer read from the IdP.
pub const MAX_IDP_BODY: usize = 1024 * 1024;

impl Provider {
    pub fn new(config: OidcConfig, transport: Arc<dyn OidcTransport>) -> Self {
        Provider {
            config,
            transport,
            metadata: Mutex::new(None),
            keys: tokio::sync::Mutex::new(keys::KeyCache::default()),
        }
    }

    fn cached_metadata(&self, now: i64) -> Option<ProviderMetadata> {
        let guard = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().filter(|(_, at)| now - at < METADATA_TTL_MS).map(|(m, _)| m.clone())
    }

    /// The discovery document (cached).
    pub async fn metadata(&self, now: i64) -> Result<ProviderMetadata, OidcError> {
        if let Some(metadata) = self.cached_metadata(now) {
            return Ok(metadata);
        }
        let url = format!("{}/.well-known/openid-configuration", self.config.issuer.trim_end_matches('/'));
        let answer = self.get(&url, None).await?;
        let metadata: ProviderMetadata = json_answer(&answer, "the discovery document")?;
        // OpenID Connect Discovery §4.3: the document must name exactly the issuer asked about.
        if metadata.issuer != self.config.issuer {
            return Err(OidcError::ProviderInvalid(format!(
                "the discovery document names issuer `{}`, not the configured `{}`",
                metadata.issuer, self.config.issuer
            )));
        }
        *self.metadata.lock().unwrap_or_else(|p| p.into_inner()) = Some((metadata.clone(), now));
        Ok(metadata)
    }

    async fn get(&self, url: &str, bearer: Option<&str>) -> Result<IdpAnswer, OidcError> {
        self.transport.get(url, bearer).await.map_err(|err| OidcError::ProviderUnavailable(err.0))
    }

    async fn fetch_keys(&self, metadata: &ProviderMetadata) -> Result<Vec<jsonwebtoken::jwk::Jwk>, OidcError> {
        let answer = self.get(&metadata.jwks_uri, None).await?;
        if answer.status != 200 {
            return Err(OidcError::ProviderInvalid(format!("the JWKS answered HTTP {}", answer.status)));
        }
        keys::parse_jwks(&answer.body)
    }

    /// Verifies the ID token's signature with the IdP's keys; answers its claims.
    async fn verify_signature(
        &self,
        metadata: &ProviderMetadata,
        token: &str,
        now_ms: i64,
    ) -> Result<serde_json::Value, OidcError> {
        let (alg, kid) = keys::header(token)?;
        let min_refresh_ms = i64::try_from(self.config.jwks_min_refresh.as_millis()).unwrap_or(i64::MAX);
        let mut cache = self.keys.lock().await;
        if !cache.is_loaded() {
            let fetched = self.fetch_keys(metadata).await?;
            cache.load(fetched);
        }
        let candidates = match cache.lookup(kid.as_deref(), now_ms, min_refresh_ms, false)? {
            Some(found) => found,
            None => {
                tracing::info!(kid = kid.as_deref(), "ID token signed with an unknown key: refreshing the IdP's JWKS");
                let fetched = self.fetch_keys(metadata).await?;
                cache.load(fetched);
                cache.lookup(kid.as_deref(), now_ms, min_refresh_ms, true)?.unwrap_or_default()
            }
        };
        drop(cache);
        keys::verify_signature(token, alg, &candidates)
    }
}

fn json_answer<T: serde::de::DeserializeOwned>(answer: &IdpAnswer, what: &str) -> Result<T, OidcError> {
    if answer.status != 200 {
        return Err(OidcError::ProviderInvalid(format!("{what} answered HTTP {}", answer.status)));
    }
    serde_json::from_slice(&answer.body)
        .map_err(|err| OidcError::ProviderInvalid(format!("{what} is not valid: {err}")))
}

fn provider(ctx: &AuthDeps) -> Result<&Provider, OidcError> {
    ctx.oidc.as_deref().ok_or(OidcError::NotConfigured)
}

/// Logs a failed sign-in (the reason, never a token or a code) and wraps it.
fn failed(err: OidcError, request_id: &str) -> Error {
    match &err {
        OidcError::ProviderUnavailable(_) | OidcError::ProviderInvalid(_) => {
            tracing::error!(target: "trellis::security", code = err.code(), request_id, reason = %err, "OIDC sign-in failed");
        }
        _ => {
            tracing::warn!(target: "trellis::security", code = err.code(), request_id, reason = %err, "OIDC sign-in failed")
        }
    }
    Error::from(err)
}

/// A `redirect` is a path on this site: one leading `/`, not `//` or `/\` (which browsers
/// read as another host), no scheme, no control characters or backslashes.
pub fn check_redirect(redirect: Option<&str>) -> Result<String, OidcError> {
    let Some(redirect) = redirect.filter(|r| !r.is_empty()) else { return Ok("/".to_owned()) };
    let valid = redirect.starts_with('/')
        && !redirect.starts_with("//")
        && !redirect.contains('\\')
        && redirect.len() <= 2048
        && !redirect.chars().any(|c| c.is_control() || c.is_whitespace());
    if valid {
        Ok(redirect.to_owned())
    } else {
        Err(OidcError::BadRedirect)
    }
}

/// The sign-in methods a login page offers.
pub struct Providers {
    pub password: bool,
    pub oidc: Option<String>,
}

pub fn providers(ctx: &AuthDeps) -> Providers {
    Providers {
        password: !ctx.settings.password_login_disabled,
        oidc: ctx.oidc.as_ref().map(|p| p.config.display_name.clone()),
    }
}

/// Where to send the browser, and the value of its binding cookie.
pub struct LoginStart {
    pub authorize_url: String,
    pub browser_token: String,
}

/// Step 1: records a sign-in attempt and answers the IdP's authorization URL.
pub async fn start_login(ctx: &AuthDeps, redirect: Option<&str>, request_id: &str) -> Result<LoginStart> {
    let provider = provider(ctx).map_err(|err| failed(err, request_id))?;
    let redirect = check_redirect(redirect).map_err(|err| failed(err, request_id))?;
    let now = ctx.now_millis();
    let metadata = provider.metadata(now).await.map_err(|err| failed(err, request_id))?;
    let state = random_hex(ctx.entropy.as_ref(), 32);
    let nonce = random_hex(ctx.entropy.as_ref(), 32);
    // RFC 7636: 43 to 128 unreserved characters; 64 hex digits carry 256 bits.
    let verifier = random_hex(ctx.entropy.as_ref(), 32);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    let browser_token = random_hex(ctx.entropy.as_ref(), 32);
    let state_digest = token_digest(&state);
    let attempt = LoginAttempt {
        sealed_verifier: ctx.master_key.seal_bound(
            verifier.as_bytes(),
            format!("oidc-verifier:{state_digest}").as_bytes(),
            ctx.entropy.as_ref(),
        ),
        state_digest,
        browser_digest: token_digest(&browser_token),
        nonce: nonce.clone(),
        redirect,
        created_at: now,
        expires_at: now + LOGIN_TTL_SECS * 1000,
    };
    let mut tx = ctx.store.begin_auth().await?;
    tx.insert_login_attempt(&attempt, now).await?;
    tx.commit().await?;
    let mut url = url::Url::parse(&metadata.authorization_endpoint).map_err(|_| {
        failed(OidcError::ProviderInvalid("the authorization endpoint is not a URL".into()), request_id)
    })?;
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &provider.config.client_id)
        .append_pair("redirect_uri", &provider.config.redirect_uri)
        .append_pair("scope", &provider.config.scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("nonce", &nonce)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256");
    Ok(LoginStart { authorize_url: url.into(), browser_token })
}

/// What the IdP sent back to the callback.
#[derive(Debug, Default)]
pub struct Callback {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// A finished sign-in: the session to set, and where to send the browser.
pub struct SignedIn {
    pub session: Session,
    pub redirect: String,
    /// False when no group mapped the person to a workspace (yet).
    pub has_workspace: bool,
}

/// Step 2: the callback. Every failure is an [`OidcError`], logged.
pub async fn finish_login(
    ctx: &AuthDeps,
    callback: Callback,
    browser_token: Option<&str>,
    request_id: &str,
) -> Result<SignedIn> {
    let provider = provider(ctx).map_err(|err| failed(err, request_id))?;
    let attempt = take_attempt(ctx, &callback, browser_token).await.map_err(|err| match err.area::<OidcError>() {
        Some(refusal) => failed(refusal.clone(), request_id),
        None => err,
    })?;
    let identity = redeem(ctx, provider, &callback, &attempt).await.map_err(|err| failed(err, request_id))?;
    let user = resolve_user(ctx, provider, &identity, request_id).await?;
    // Invitations waiting for this address join the person now (manual memberships: the group
    // sync below never touches them), as at every other sign-in.
    crate::auth::members::redeem_invitations(ctx, &user, Some(request_id)).await?;
    let workspace = sync_memberships(ctx, provider, &user, &identity.groups, request_id).await?;
    let now = ctx.now_millis();
    let token = random_hex(ctx.entropy.as_ref(), 32);
    let expires_at = now + SESSION_LIFETIME_SECS * 1000;
    let actor = Audit::by(Principal::user(user.id.as_str()), Some(request_id.to_owned()));
    let mut change = ctx.change(actor, workspace.as_deref()).await?;
    change.tx().insert_session(&token_digest(&token), &user.id, now, expires_at).await?;
    change.tx().touch_user_identity(&provider.config.issuer, &identity.subject, now).await?;
    change.audit("auth.login", Target::kind("session"), serde_json::json!({ "method": "oidc" }));
    change.commit().await?;
    let user = User { current_workspace_id: workspace.clone(), ..user };
    Ok(SignedIn {
        session: Session { token, user, expires_at },
        redirect: attempt.redirect,
        has_workspace: workspace.is_some(),
    })
}

/// The attempt named by `state`, consumed, if this browser started it.
async fn take_attempt(ctx: &AuthDeps, callback: &Callback, browser_token: Option<&str>) -> Result<LoginAttempt> {
    let state = callback.state.as_deref().filter(|s| !s.is_empty()).ok_or(OidcError::MissingState)?;
    let state_digest = token_digest(state);
    let attempt = ctx.store.find_login_attempt(&state_digest).await?.ok_or(OidcError::UnknownState)?;
    let browser_digest = browser_token.map(token_digest).unwrap_or_default();
    // The attempt stays for the right browser: another one presenting a stolen `state` (login
    // CSRF, a leaked callback URL) neither finishes nor spoils it.
    if !constant_time_eq(browser_digest.as_bytes(), attempt.browser_digest.as_bytes()) {
        return Err(OidcError::StateFromAnotherBrowser.into());
    }
    if attempt.expires_at <= ctx.now_millis() {
        return Err(OidcError::UnknownState.into());
    }
    let mut tx = ctx.store.begin_auth().await?;
    let consumed = tx.consume_login_attempt(&state_digest, &attempt.browser_digest).await?;
    tx.commit().await?;
    if !consumed {
        // Another callback with the same state won the race: the code is redeemed once.
        return Err(OidcError::UnknownState.into());
    }
    Ok(attempt)
}

/// Who signed in, as the IdP vouches.
#[derive(Debug, Clone)]
pub struct Identity {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: bool,
    pub first_name: Option<String>,
    pub groups: Vec<String>,
}

#[derive(serde::Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
    access_token: Option<String>,
}

/// RFC 9207, the code redemption, the ID token, and userinfo when the token lacks something.
async fn redeem(
    ctx: &AuthDeps,
    provider: &Provider,
    callback: &Callback,
    attempt: &LoginAttempt,
) -> Result<Identity, OidcError> {
    let config = &provider.config;
    let now = ctx.now_millis();
    let metadata = provider.metadata(now).await?;
    match callback.iss.as_deref() {
        Some(iss) if iss != config.issuer => return Err(OidcError::IssuerParameterMismatch),
        None if metadata.authorization_response_iss_parameter_supported => {
            return Err(OidcError::IssuerParameterMissing)
        }
        _ => {}
    }
    if let Some(error) = &callback.error {
        let description = callback.error_description.as_deref().unwrap_or("");
        let text: String = format!("{error} {description}").trim().chars().take(300).collect();
        return Err(OidcError::Denied(text));
    }
    let code = callback.code.as_deref().filter(|c| !c.is_empty()).ok_or(OidcError::MissingCode)?;
    let verifier = ctx
        .master_key
        .open_bound(&attempt.sealed_verifier, format!("oidc-verifier:{}", attempt.state_digest).as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| OidcError::ProviderInvalid("the sign-in's PKCE verifier does not open".into()))?;
    // client_secret_basic is the default method (OIDC Core §9); client_secret_post when the IdP
    // lists only that.
    let post_only = metadata.token_endpoint_auth_methods_supported.as_ref().is_some_and(|methods| {
        !methods.iter().any(|m| m == "client_secret_basic") && methods.iter().any(|m| m == "client_secret_post")
    });
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", config.redirect_uri.as_str()),
        ("code_verifier", verifier.as_str()),
    ];
    let basic = if post_only {
        form.push(("client_id", config.client_id.as_str()));
        form.push(("client_secret", config.client_secret.as_str()));
        None
    } else {
        Some((config.client_id.as_str(), config.client_secret.as_str()))
    };
    let answer = provider
        .transport
        .post_form(&metadata.token_endpoint, basic, &form)
        .await
        .map_err(|err| OidcError::ProviderUnavailable(err.0))?;
    if answer.status != 200 {
        #[derive(serde::Deserialize)]
        struct TokenError {
            error: String,
            #[serde(default)]
            error_description: Option<String>,
        }
        let reason = serde_json::from_slice::<TokenError>(&answer.body)
            .map(|e| format!("{} {}", e.error, e.error_description.unwrap_or_default()).trim().to_owned())
            .unwrap_or_else(|_| format!("HTTP {}", answer.status));
        return Err(OidcError::CodeRejected(reason.chars().take(300).collect()));
    }
    let tokens: TokenAnswer = serde_json::from_slice(&answer.body)
        .map_err(|err| OidcError::ProviderInvalid(format!("the token answer is not valid: {err}")))?;
    let id_token =
        tokens.id_token.ok_or_else(|| OidcError::ProviderInvalid("the token answer has no id_token".into()))?;
    let claims = provider.verify_signature(&metadata, &id_token, now).await?;
    check_claims(config, &claims, &attempt.nonce, now)?;
    let mut identity = identity_from(config, &claims)?;
    let groups_in_token = claims.get(&config.groups_claim).is_some();
    let needs_userinfo = !groups_in_token || identity.email.is_none() || identity.first_name.is_none();
    if let (true, Some(endpoint), Some(access_token)) =
        (needs_userinfo, metadata.userinfo_endpoint.as_deref(), tokens.access_token.as_deref())
    {
        let answer = provider.get(endpoint, Some(access_token)).await?;
        let info: serde_json::Value = json_answer(&answer, "the userinfo endpoint")?;
        // OIDC Core §5.3.2: the answer is trusted only when it is about the same subject.
        if info.get("sub").and_then(|s| s.as_str()) != Some(identity.subject.as_str()) {
            return Err(OidcError::UserinfoMismatch);
        }
        let extra = identity_from(config, &info)?;
        if !groups_in_token {
            identity.groups = extra.groups;
        }
        if identity.email.is_none() {
            identity.email = extra.email;
            identity.email_verified = extra.email_verified;
        }
        identity.first_name = identity.first_name.or(extra.first_name);
    }
    Ok(identity)
}

/// The ID token's claims (OIDC Core §3.1.3.7), against the injected clock.
pub fn check_claims(
    config: &OidcConfig,
    claims: &serde_json::Value,
    nonce: &str,
    now_ms: i64,
) -> Result<(), OidcError> {
    let skew = i64::try_from(config.clock_skew.as_secs()).unwrap_or(60);
    let now = now_ms / 1000;
    if claims.get("iss").and_then(|v| v.as_str()) != Some(config.issuer.as_str()) {
        return Err(OidcError::WrongIssuer);
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(serde_json::Value::String(aud)) => vec![aud.as_str()],
        Some(serde_json::Value::Array(list)) => list.iter().filter_map(|v| v.as_str()).collect(),
        _ => Vec::new(),
    };
    if !audiences.contains(&config.client_id.as_str()) {
        return Err(OidcError::WrongAudience);
    }
    match claims.get("azp").and_then(|v| v.as_str()) {
        Some(azp) if azp != config.client_id => return Err(OidcError::WrongAzp),
        None if audiences.len() > 1 => return Err(OidcError::MissingAzp),
        _ => {}
    }
    let exp = claims.get("exp").and_then(|v| v.as_i64()).ok_or_else(|| OidcError::TokenMalformed("no `exp`".into()))?;
    if exp + skew <= now {
        return Err(OidcError::Expired);
    }
    let iat = claims.get("iat").and_then(|v| v.as_i64()).ok_or_else(|| OidcError::TokenMalformed("no `iat`".into()))?;
    // Issued just now, for this sign-in: not in the future, not older than a sign-in may take.
    if iat > now + skew || iat < now - LOGIN_TTL_SECS - skew {
        return Err(OidcError::BadIssuedAt);
    }
    if let Some(nbf) = claims.get("nbf").and_then(|v| v.as_i64()) {
        if nbf > now + skew {
            return Err(OidcError::BadIssuedAt);
        }
    }
    let token_nonce = claims.get("nonce").and_then(|v| v.as_str()).unwrap_or("");
    if !constant_time_eq(token_nonce.as_bytes(), nonce.as_bytes()) {
        return Err(OidcError::WrongNonce);
    }
    match claims.get("sub").and_then(|v| v.as_str()) {
        Some(sub) if !sub.is_empty() && sub.len() <= 255 => Ok(()),
        _ => Err(OidcError::TokenMalformed("no usable `sub`".into())),
    }
}

/// The person's attributes from a set of claims (ID token or userinfo).
pub fn identity_from(config: &OidcConfig, claims: &serde_json::Value) -> Result<Identity, OidcError> {
    let text = |name: &str| {
        claims.get(name).and_then(|v| v.as_str()).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
    };
    let groups = match claims.get(&config.groups_claim) {
        Some(serde_json::Value::String(one)) => vec![one.clone()],
        Some(serde_json::Value::Array(list)) => list.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    };
    // Some IdPs send `email_verified` as the string "true".
    let email_verified = match claims.get("email_verified") {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::String(s)) => s == "true",
        _ => false,
    };
    Ok(Identity {
        subject: text("sub").unwrap_or_default(),
        email: text("email"),
        email_verified,
        first_name: text("given_name").or_else(|| text("name")),
        groups,
    })
}

/// The user signed in as (issuer, subject), created on the first sign-in.
async fn resolve_user(ctx: &AuthDeps, provider: &Provider, identity: &Identity, request_id: &str) -> Result<User> {
    let issuer = &provider.config.issuer;
    let now = ctx.now_millis();
    let first_name: String = identity.first_name.clone().unwrap_or_default().chars().take(200).collect();
    let actor = |id: &UserId| Audit::by(Principal::user(id.as_str()), Some(request_id.to_owned()));
    if let Some(user) = ctx.store.find_identity_user(issuer, &identity.subject).await? {
        if !first_name.is_empty() && first_name != user.first_name {
            let mut tx = ctx.store.begin_auth().await?;
            tx.set_first_name(&user.id, &first_name, now).await?;
            tx.commit().await?;
            return Ok(User { first_name, ..user });
        }
        return Ok(user);
    }
    let email = identity
        .email
        .as_deref()
        .map(|e| e.trim().to_lowercase())
        .filter(|e| e.contains('@') && e.len() <= 254)
        .ok_or_else(|| failed(OidcError::MissingEmail, request_id))?;
    if let Some((existing, _)) = ctx.store.find_user_credentials(&email).await? {
        // Linking an existing account by e-mail is safe only when the IdP vouches for the
        // address; otherwise anyone who can set that address at the IdP would take the account.
        if !identity.email_verified {
            return Err(failed(OidcError::EmailInUse, request_id));
        }
        let mut change = ctx.change(actor(&existing.id), existing.current_workspace_id.as_deref()).await?;
        change.tx().insert_user_identity(issuer, &identity.subject, &existing.id, now).await?;
        change.audit(
            "user.identity_linked",
            Target::new("user", &existing.id),
            serde_json::json!({ "issuer": issuer, "subject": identity.subject }),
        );
        change.commit().await?;
        return Ok(existing);
    }
    let user = User {
        id: UserId::new(ctx.new_id("usr_")),
        email,
        first_name,
        is_admin: false,
        current_workspace_id: None,
        created_at: now,
    };
    let mut change = ctx.change(actor(&user.id), None).await?;
    // No password: the empty hash never verifies, so this person signs in only through the IdP.
    change.tx().insert_user(&user, "").await.map_err(|err| match err {
        crate::store_error::StoreError::Unique(_) => failed(OidcError::EmailInUse, request_id),
        other => other.into(),
    })?;
    change.tx().insert_user_identity(issuer, &identity.subject, &user.id, now).await?;
    change.audit(
        "user.created",
        Target::new("user", &user.id),
        serde_json::json!({ "email": user.email, "admin": false, "source": "oidc", "issuer": issuer }),
    );
    change.commit().await?;
    Ok(user)
}

/// The memberships the groups call for: per workspace, the highest role any mapping grants.
pub fn desired_memberships(
    mappings: &[RoleMapping],
    groups: &[String],
    resolve: impl Fn(&str) -> Option<WorkspaceId>,
) -> Vec<(WorkspaceId, Role)> {
    let mut desired: Vec<(WorkspaceId, Role)> = Vec::new();
    for mapping in mappings.iter().filter(|m| groups.iter().any(|g| g == &m.group)) {
        let Some(workspace) = resolve(&mapping.workspace) else { continue };
        match desired.iter_mut().find(|(w, _)| *w == workspace) {
            Some((_, role)) if rank(mapping.role) > rank(*role) => *role = mapping.role,
            Some(_) => {}
            None => desired.push((workspace, mapping.role)),
        }
    }
    desired
}

fn rank(role: Role) -> u8 {
    match role {
        Role::Viewer => 0,
        Role::Member => 1,
        Role::Owner => 2,
    }
}

/// The change again when an owner's IdP-made membership may be demoted or removed; never the
/// workspace's last owner (the members API's rule): then the change is dropped, logged and
/// audited (`membership.sync_kept`), and the owner stays until the workspace has another.
async fn unless_last_owner<'a, T: ?Sized + ChangeTx + AuthWrites>(
    mut change: UnitOfWork<'a, T>,
    workspace: &WorkspaceId,
    user: &User,
    would_be: &str,
) -> Result<Option<UnitOfWork<'a, T>>> {
    change.tx().lock_workspace(workspace).await?;
    if change.tx().count_owners(workspace).await? > 1 {
        return Ok(Some(change));
    }
    tracing::warn!(target: "trellis::security", workspace = %workspace, user = %user.id, "the identity provider's groups would leave the workspace without an owner; the membership is kept");
    change.audit(
        "membership.sync_kept",
        Target::new("user", &user.id),
        serde_json::json!({ "reason": "last_owner", "wouldBe": would_be, "source": "oidc", "email": user.email }),
    );
    change.commit().await?;
    Ok(None)
}

/// Re-syncs the IdP-made memberships with the groups (added, role changed, removed; each in
/// its workspace's audit log); manual memberships are left alone. Answers the workspace the
/// session opens in (none: no workspace yet).
async fn sync_memberships(
    ctx: &AuthDeps,
    provider: &Provider,
    user: &User,
    groups: &[String],
    request_id: &str,
) -> Result<Option<WorkspaceId>> {
    let mut resolved: Vec<(String, Option<WorkspaceId>)> = Vec::new();
    for mapping in provider.config.role_mappings.iter().filter(|m| groups.contains(&m.group)) {
        if resolved.iter().any(|(r, _)| r == &mapping.workspace) {
            continue;
        }
        let found = crate::auth::members::workspaces_named(ctx, &mapping.workspace).await?;
        let id = match found.as_slice() {
            [one] => Some(one.id.clone()),
            [] => {
                tracing::warn!(workspace = %mapping.workspace, group = %mapping.group, "OIDC role mapping names no workspace; skipped");
                None
            }
            _ => {
                tracing::warn!(workspace = %mapping.workspace, group = %mapping.group, "OIDC role mapping names several workspaces; use the id; skipped");
                None
            }
        };
        resolved.push((mapping.workspace.clone(), id));
    }
    let desired = desired_memberships(&provider.config.role_mappings, groups, |reference| {
        resolved.iter().find(|(r, _)| r == reference).and_then(|(_, id)| id.clone())
    });
    let current: Vec<Membership> = ctx.store.list_memberships(&user.id).await?;
    let actor = Audit::by(Principal::user(user.id.as_str()), Some(request_id.to_owned()));
    let now = ctx.now_millis();
    let target = Target::new("user", &user.id);
    for (workspace, role) in &desired {
        let existing = current.iter().find(|m| &m.workspace_id == workspace);
        match existing {
            None => {
                let mut change = ctx.change(actor.clone(), Some(workspace)).await?;
                change.tx().add_sourced_member(workspace, &user.id, *role, MembershipSource::Oidc, now).await?;
                change.audit(
                    "membership.added",
                    target.clone(),
                    serde_json::json!({ "role": role.as_str(), "source": "oidc", "email": user.email }),
                );
                change.commit().await?;
            }
            Some(m) if m.source == MembershipSource::Oidc && m.role != *role => {
                let mut change = ctx.change(actor.clone(), Some(workspace)).await?;
                if m.role == Role::Owner {
                    match unless_last_owner(change, workspace, user, "demoted").await? {
                        Some(kept) => change = kept,
                        None => continue,
                    }
                }
                change.tx().set_oidc_member_role(workspace, &user.id, *role).await?;
                change.audit(
                    "membership.role_changed",
                    target.clone(),
                    serde_json::json!({ "from": m.role.as_str(), "to": role.as_str(), "source": "oidc", "email": user.email }),
                );
                change.commit().await?;
                crate::auth::forget_key_grants(ctx);
            }
            Some(_) => {}
        }
    }
    for m in current.iter().filter(|m| m.source == MembershipSource::Oidc) {
        if desired.iter().any(|(w, _)| w == &m.workspace_id) {
            continue;
        }
        let mut change = ctx.change(actor.clone(), Some(&m.workspace_id)).await?;
        if m.role == Role::Owner {
            match unless_last_owner(change, &m.workspace_id, user, "removed").await? {
                Some(kept) => change = kept,
                None => continue,
            }
        }
        change.tx().remove_oidc_member(&m.workspace_id, &user.id).await?;
        change.audit(
            "membership.removed",
            target.clone(),
            serde_json::json!({ "role": m.role.as_str(), "source": "oidc", "email": user.email }),
        );
        change.commit().await?;
        crate::auth::forget_key_grants(ctx);
    }
    // The session opens in the current workspace if the person is still a member, else in any
    // workspace they have, else in none ("no workspace yet").
    let now_member: Vec<WorkspaceId> =
        ctx.store.list_memberships(&user.id).await?.into_iter().map(|m| m.workspace_id).collect();
    let chosen = match &user.current_workspace_id {
        Some(current) if now_member.contains(current) => Some(current.clone()),
        _ => now_member.first().cloned(),
    };
    if chosen != user.current_workspace_id {
        let mut tx = ctx.store.begin_auth().await?;
        tx.set_current_workspace_opt(&user.id, chosen.as_ref()).await?;
        tx.commit().await?;
    }
    Ok(chosen)
}

/// RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0): the IdP's URL that ends the
/// person's session there too, when the IdP has one and the user signed in through it.
pub async fn end_session_url(ctx: &AuthDeps, user_id: &UserId) -> Result<Option<String>> {
    let Some(provider) = ctx.oidc.as_deref() else { return Ok(None) };
    if !ctx.store.has_identity(user_id, &provider.config.issuer).await? {
        return Ok(None);
    }
    let Ok(metadata) = provider.metadata(ctx.now_millis()).await else { return Ok(None) };
    let Some(endpoint) = metadata.end_session_endpoint else { return Ok(None) };
    let Ok(mut url) = url::Url::parse(&endpoint) else { return Ok(None) };
    url.query_pairs_mut()
        .append_pair("client_id", &provider.config.client_id)
        .append_pair("post_logout_redirect_uri", &provider.config.post_logout_redirect_uri);
    Ok(Some(url.into()))
}

/// Ends the session; answers the IdP's logout URL when the user signed in through it.
pub async fn logout(ctx: &AuthDeps, session_token: &str) -> Result<Option<String>> {
    let user = ctx.store.find_session_user(&token_digest(session_token), ctx.now_millis()).await?;
    crate::auth::logout(ctx, session_token).await?;
    match user {
        Some(user) => end_session_url(ctx, &user.id).await,
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests;
