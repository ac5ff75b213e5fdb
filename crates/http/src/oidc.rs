//! `/api/auth/providers` and OpenID Connect sign-in: `/api/auth/oidc/login` and
//! `/api/auth/oidc/callback` (the rules are `trellis_core::auth::oidc`'s).

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiResult;
use crate::extract::{session_token, Query};
use crate::{data, Data, RequestId};
use trellis_core::auth::oidc::{self, Callback, BINDING_COOKIE, LOGIN_TTL_SECS};
use trellis_core::context::SharedContext;

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/auth/providers", get(providers))
        .route("/api/auth/oidc/login", get(login))
        .route("/api/auth/oidc/callback", get(callback))
}

/// A way to sign in.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderDto {
    /// `password` or `oidc`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// What a login page shows on the button.
    display_name: String,
    /// Where the browser goes to start (`oidc` only; add `?redirect=/path`).
    #[serde(skip_serializing_if = "Option::is_none")]
    login_url: Option<&'static str>,
}

/// The sign-in methods a login page offers (no authentication needed).
#[utoipa::path(get, path = "/api/auth/providers", tag = "auth",
    responses((status = 200, body = Data<Vec<ProviderDto>>)))]
async fn providers(State(ctx): State<SharedContext>) -> ApiResult<axum::Json<serde_json::Value>> {
    let offered = oidc::providers(&ctx.auth_deps());
    let mut list = Vec::new();
    if let Some(name) = offered.oidc {
        list.push(ProviderDto { kind: "oidc", display_name: name, login_url: Some("/api/auth/oidc/login") });
    }
    if offered.password {
        list.push(ProviderDto { kind: "password", display_name: "E-mail and password".into(), login_url: None });
    }
    Ok(data(list))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LoginQuery {
    /// Where to go once signed in: a path on this site (default `/`).
    redirect: Option<String>,
}

fn binding_cookie(settings: &crate::HttpSettings, value: &str, max_age: i64) -> String {
    let secure = if settings.secure_cookies { "; Secure" } else { "" };
    // SameSite=Lax: the IdP's redirect back is a top-level GET navigation from another site,
    // which Lax cookies accompany and Strict ones do not.
    format!("{BINDING_COOKIE}={value}; HttpOnly; SameSite=Lax; Path=/api/auth/oidc; Max-Age={max_age}{secure}")
}

fn redirect_to(location: &str) -> Response {
    let mut response = StatusCode::FOUND.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// Starts an OpenID Connect sign-in: answers 302 to the identity provider.
#[utoipa::path(get, path = "/api/auth/oidc/login", tag = "auth", params(LoginQuery),
    responses((status = 302, description = "To the identity provider; sets the sign-in's binding cookie"),
        (status = 400, description = "`redirect` is not a path on this site"),
        (status = 404, description = "OpenID Connect is not configured"),
        (status = 502, description = "The identity provider is unreachable")))]
async fn login(
    State(ctx): State<SharedContext>,
    request_id: axum::Extension<RequestId>,
    axum::Extension(settings): axum::Extension<crate::HttpSettings>,
    Query(query): Query<LoginQuery>,
) -> ApiResult<Response> {
    let start = oidc::start_login(&ctx.auth_deps(), query.redirect.as_deref(), &request_id.0 .0).await?;
    let mut response = redirect_to(&start.authorize_url);
    if let Ok(cookie) = HeaderValue::from_str(&binding_cookie(&settings, &start.browser_token, LOGIN_TTL_SECS)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    /// RFC 9207: the issuer that answers.
    iss: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// The identity provider's redirect back: sets the session cookie and answers 302 to the
/// sign-in's `redirect`. A person whose groups map to no workspace is signed in all the same
/// (`GET /api/auth/user` then says "no workspace yet").
#[utoipa::path(get, path = "/api/auth/oidc/callback", tag = "auth", params(CallbackQuery),
    responses((status = 302, description = "Signed in; sets the session cookie"),
        (status = 400, description = "Unknown, expired, reused or foreign `state`; no code; a wrong `iss`"),
        (status = 401, description = "The identity provider refused, or its ID token failed a check (the code says which)"),
        (status = 403, description = "The identity provider gave no e-mail"),
        (status = 404, description = "OpenID Connect is not configured"),
        (status = 409, description = "The e-mail belongs to another user and is not verified by the IdP"),
        (status = 502, description = "The identity provider is unreachable or answered nonsense")))]
async fn callback(
    State(ctx): State<SharedContext>,
    request_id: axum::Extension<RequestId>,
    axum::Extension(settings): axum::Extension<crate::HttpSettings>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> ApiResult<Response> {
    let browser = session_token(&headers, BINDING_COOKIE);
    let callback = Callback {
        code: query.code,
        state: query.state,
        iss: query.iss,
        error: query.error,
        error_description: query.error_description,
    };
    let signed_in = oidc::finish_login(&ctx.auth_deps(), callback, browser.as_deref(), &request_id.0 .0).await?;
    let session = settings.session_set_cookie(Some(&signed_in.session.token));
    let mut response = redirect_to(&signed_in.redirect);
    for cookie in [session, binding_cookie(&settings, "", 0)] {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    Ok(response)
}
