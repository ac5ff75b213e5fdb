//! Who is looking at a page: the API's session cookie and same-origin rule
//! (`trellis_http::extract`), the workspace the switcher chose (a cookie of the console's own,
//! since a link cannot send `X-Workspace-Id`), and the per-session token every console form
//! carries.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use trellis_core::auth::{self, Caller, Scope, User, Workspace};
use trellis_core::context::SharedContext;
use trellis_core::crypto::constant_time_eq;
use trellis_core::error::Error;
use trellis_http::error::ApiError;
use trellis_http::extract::{check_same_origin, request_id, session_cookie_name, session_token};

use crate::page::PageError;

/// The console's workspace choice. Not a secret: the session decides what it may name.
pub const WORKSPACE_COOKIE: &str = "trellis_console_workspace";

/// A signed-in user acting in one workspace.
pub struct Console {
    pub user: User,
    pub caller: Caller,
    pub workspaces: Vec<Workspace>,
    /// The token the console's forms carry (see [`csrf_token`]).
    pub csrf: String,
}

impl Console {
    pub fn can(&self, scope: Scope) -> bool {
        self.caller.scopes.contains(&scope)
    }

    pub fn workspace_name(&self) -> &str {
        self.workspaces
            .iter()
            .find(|w| w.id == self.caller.workspace_id)
            .map_or(self.caller.workspace_id.as_str(), |w| w.name.as_str())
    }
}

/// Derived from the session token, so it needs no storage, changes with every session and
/// cannot be computed by another site (which never sees the cookie). The derivation is
/// one-way: the token on the page does not reveal the session.
pub fn csrf_token(session_token: &str) -> String {
    let digest = Sha256::digest(format!("trellis-console-form\0{session_token}").as_bytes());
    hex::encode(&digest[..16])
}

fn cookie(parts: &Parts, name: &str) -> Option<String> {
    session_token(&parts.headers, name).filter(|v| !v.is_empty())
}

impl FromRequestParts<SharedContext> for Console {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SharedContext) -> Result<Self, Self::Rejection> {
        let path = parts.uri.path_and_query().map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
        let Some(token) = cookie(parts, session_cookie_name(parts)) else {
            return Err(PageError::SignIn { next: path });
        };
        check_same_origin(&parts.method, &parts.headers).map_err(PageError::Api)?;
        let request_id = request_id(parts);
        let chosen = cookie(parts, WORKSPACE_COOKIE);
        let resolved = match auth::session_user(&ctx.auth_deps(), &token, chosen.as_deref(), &request_id).await {
            // A workspace cookie the user no longer belongs to: fall back to their current one.
            Err(Error::Forbidden(_)) if chosen.is_some() => {
                auth::session_user(&ctx.auth_deps(), &token, None, &request_id).await
            }
            other => other,
        };
        let (user, caller) = match resolved {
            Ok(found) => found,
            Err(Error::Unauthorized) => return Err(PageError::SignIn { next: path }),
            Err(err) => return Err(err.into()),
        };
        let Some(caller) = caller else {
            return Err(PageError::NoWorkspace);
        };
        let workspaces = auth::list_workspaces(&ctx.auth_deps(), &caller).await?;
        Ok(Console { user, caller, workspaces, csrf: csrf_token(&token) })
    }
}

#[derive(Deserialize)]
struct CsrfField {
    #[serde(default)]
    csrf: String,
}

/// A console form post: the session (same-origin checked) and the form, accepted only with the
/// session's form token.
pub struct Posted<T>(pub Console, pub T);

impl<T: DeserializeOwned> FromRequest<SharedContext> for Posted<T> {
    type Rejection = PageError;

    async fn from_request(request: Request, ctx: &SharedContext) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let console = Console::from_request_parts(&mut parts, ctx).await?;
        let request = Request::from_parts(parts, body);
        let bytes = axum::body::Bytes::from_request(request, ctx)
            .await
            .map_err(|_| PageError::from(Error::validation("The form could not be read")))?;
        let field: CsrfField = serde_urlencoded::from_bytes(&bytes).unwrap_or(CsrfField { csrf: String::new() });
        if !constant_time_eq(field.csrf.as_bytes(), console.csrf.as_bytes()) {
            return Err(PageError::Api(ApiError::CrossOrigin));
        }
        let form = serde_urlencoded::from_bytes(&bytes)
            .map_err(|err| PageError::from(Error::validation(format!("The form is incomplete: {err}"))))?;
        Ok(Posted(console, form))
    }
}

#[cfg(test)]
mod tests {
    use super::csrf_token;

    #[test]
    fn the_form_token_is_per_session_and_does_not_reveal_it() {
        let token = csrf_token("a1b2c3");
        assert_eq!(token, csrf_token("a1b2c3"));
        assert_ne!(token, csrf_token("a1b2c4"));
        assert_eq!(token.len(), 32);
        assert!(!token.contains("a1b2c3"));
    }
}
