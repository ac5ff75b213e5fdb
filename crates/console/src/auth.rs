//! Sign-in (password, and the identity provider's button when one is configured), the
//! workspace switcher and sign-out. Sign-in and sign-out are the API's own use cases
//! (`auth::login`, `oidc::logout`) setting the API's own session cookie.

use askama::Template;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use trellis_core::auth::{self, oidc};
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_http::extract::{check_same_origin, session_token};
use trellis_http::listener::PeerAddr;
use trellis_http::{HttpSettings, RequestId};

use crate::page::{encode, render, see_other, Chrome, PageError};
use crate::session::{Posted, WORKSPACE_COOKIE};

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    chrome: Chrome,
    next: String,
    email: String,
    error: Option<String>,
    password: bool,
    /// The identity provider's display name and where its button goes.
    idp: Option<(String, String)>,
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

/// Only a path on this site: `/x`, never `//host` or `/\host`, which browsers read as another
/// origin.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path) if path.starts_with('/') && !path.starts_with("//") && !path.contains('\\') => path.to_string(),
        _ => "/".to_string(),
    }
}

fn login_form(ctx: &SharedContext, next: String, email: String, error: Option<String>) -> LoginPage {
    let offered = oidc::providers(&ctx.auth_deps());
    let idp = offered.oidc.map(|name| (name, format!("/api/auth/oidc/login?redirect={}", encode(&next))));
    LoginPage { chrome: Chrome::anonymous("Sign in"), next, email, error, password: offered.password, idp }
}

pub async fn login_page(
    State(ctx): State<SharedContext>,
    axum::extract::Query(query): axum::extract::Query<NextQuery>,
) -> Result<Response, PageError> {
    render(&login_form(&ctx, safe_next(query.next.as_deref()), String::new(), None))
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    next: Option<String>,
}

pub async fn login(
    State(ctx): State<SharedContext>,
    ConnectInfo(PeerAddr(peer)): ConnectInfo<PeerAddr>,
    Extension(request_id): Extension<RequestId>,
    Extension(settings): Extension<HttpSettings>,
    method: Method,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, PageError> {
    // Login cross-site request forgery (signing the victim into the attacker's account) is
    // refused by the same rule as every cookie-borne change.
    check_same_origin(&method, &headers).map_err(PageError::Api)?;
    let next = safe_next(form.next.as_deref());
    let client = settings.client_address(peer.ip(), &headers);
    match auth::login(&ctx.auth_deps(), &form.email, &form.password, &client.to_string(), &request_id.0).await {
        Ok(session) => {
            let mut response = see_other(&next);
            if let Ok(value) = settings.session_set_cookie(Some(&session.token)).parse() {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            Ok(response)
        }
        Err(err) => {
            let message = match &err {
                Error::Unauthorized => "Wrong e-mail or password. Check both and try again.".to_string(),
                Error::RateLimited { retry_after_secs } => {
                    format!("Too many failed attempts. Wait {retry_after_secs} seconds, then try again.")
                }
                _ => return Err(err.into()),
            };
            let code = trellis_http::error::status_of(&err);
            let page = login_form(&ctx, next, form.email, Some(message));
            let html = page.render().map_err(|e| PageError::from(Error::Internal(format!("template: {e}"))))?;
            Ok((code, axum::response::Html(html)).into_response())
        }
    }
}

#[derive(Deserialize)]
pub struct Empty {}

pub async fn logout(
    State(ctx): State<SharedContext>,
    Extension(settings): Extension<HttpSettings>,
    headers: HeaderMap,
    Posted(_console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    let mut location = "/login".to_string();
    if let Some(token) = session_token(&headers, settings.session_cookie()) {
        // An identity-provider session is ended there too (RP-initiated logout).
        if let Some(url) = oidc::logout(&ctx.auth_deps(), &token).await? {
            location = url;
        }
    }
    let mut response = see_other(&location);
    if let Ok(value) = settings.session_set_cookie(None).parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

#[derive(Deserialize)]
pub struct SwitchForm {
    workspace: String,
}

/// Remembers the chosen workspace for the console's next pages, once the user is found to be
/// a member of it (the same check every request makes again).
pub async fn switch_workspace(
    Extension(settings): Extension<HttpSettings>,
    Posted(console, form): Posted<SwitchForm>,
) -> Result<Response, PageError> {
    let Some(workspace) = console.workspaces.iter().find(|w| w.id.as_str() == form.workspace.trim()) else {
        return Err(Error::Forbidden("You are not a member of this workspace".into()).into());
    };
    let secure = if settings.secure_cookies { "; Secure" } else { "" };
    let cookie = format!("{WORKSPACE_COOKIE}={}; HttpOnly; SameSite=Lax; Path=/{secure}", workspace.id.as_str());
    let mut response = see_other("/");
    if let Ok(value) = cookie.parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn only_a_path_here_is_followed_after_sign_in() {
        assert_eq!(safe_next(Some("/certificates?status=expired")), "/certificates?status=expired");
        for outside in ["//evil.example", "/\\evil.example", "https://evil.example/", "evil", ""] {
            assert_eq!(safe_next(Some(outside)), "/", "{outside}");
        }
        assert_eq!(safe_next(None), "/");
    }
}
