//! What every page shares: the chrome (navigation, workspace switcher, sign-out), rendering,
//! and errors shown in words with what to do.

use askama::Template;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use trellis_core::auth::Scope;
use trellis_core::error::Error;
use trellis_http::error::ApiError;

use crate::assets;
use crate::session::Console;

/// The layout's data (`templates/base.html`).
pub struct Chrome {
    pub title: String,
    /// Which navigation entry is current (`aria-current="page"`).
    pub section: &'static str,
    pub css: String,
    pub js: String,
    pub signed_in: Option<SignedIn>,
    /// A notice shown once at the top (e.g. after an action).
    pub flash: Option<String>,
}

pub struct SignedIn {
    pub email: String,
    pub workspace_id: String,
    pub workspace_name: String,
    pub workspaces: Vec<(String, String)>,
    pub csrf: String,
    /// Shown the Issue entry (members and owners).
    pub can_issue: bool,
    pub can_audit: bool,
    pub can_keys: bool,
    pub can_members: bool,
    /// Instance administrators see the plugins.
    pub admin: bool,
}

impl Chrome {
    pub fn new(console: &Console, title: impl Into<String>, section: &'static str) -> Self {
        Chrome {
            title: title.into(),
            section,
            css: assets::css_url(),
            js: assets::htmx_url(),
            signed_in: Some(SignedIn {
                email: console.user.email.clone(),
                workspace_id: console.caller.workspace_id.to_string(),
                workspace_name: console.workspace_name().to_string(),
                workspaces: console.workspaces.iter().map(|w| (w.id.to_string(), w.name.clone())).collect(),
                csrf: console.csrf.clone(),
                can_issue: console.can(Scope::CertificatesWrite),
                can_audit: console.can(Scope::AuditRead),
                can_keys: console.can(Scope::ApiKeysRead),
                can_members: console.can(Scope::MembersRead),
                admin: console.caller.instance_admin,
            }),
            flash: None,
        }
    }

    pub fn anonymous(title: impl Into<String>) -> Self {
        Chrome {
            title: title.into(),
            section: "",
            css: assets::css_url(),
            js: assets::htmx_url(),
            signed_in: None,
            flash: None,
        }
    }

    pub fn workspace_name(&self) -> &str {
        self.signed_in.as_ref().map_or("", |s| s.workspace_name.as_str())
    }

    pub fn csrf(&self) -> &str {
        self.signed_in.as_ref().map_or("", |s| s.csrf.as_str())
    }

    pub fn with_flash(mut self, flash: Option<String>) -> Self {
        self.flash = flash;
        self
    }
}

pub fn render<T: Template>(template: &T) -> Result<Response, PageError> {
    let html = template.render().map_err(|err| PageError::from(Error::Internal(format!("template: {err}"))))?;
    Ok(Html(html).into_response())
}

/// Why a page could not be shown.
#[derive(Debug)]
pub enum PageError {
    /// No (valid) session: to the sign-in page, then back to `next`.
    SignIn {
        next: String,
    },
    /// Signed in, but a member of no workspace yet.
    NoWorkspace,
    Api(ApiError),
}

impl<E: Into<Error>> From<E> for PageError {
    fn from(err: E) -> Self {
        PageError::Api(ApiError::Domain(err.into()))
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    chrome: Chrome,
    status: u16,
    heading: String,
    message: String,
    advice: &'static str,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, heading, message, advice) = match self {
            PageError::SignIn { next } => return see_other(&format!("/login?next={}", encode(&next))),
            PageError::NoWorkspace => (
                StatusCode::FORBIDDEN,
                "No workspace yet".to_string(),
                "You are signed in, but no group of yours gives access to a workspace.".to_string(),
                "Ask an administrator to add you to one, then reload this page.",
            ),
            PageError::Api(err) => {
                let (status, code) = err.status_and_code();
                let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
                    tracing::error!(code, error = ?err, "console page failed");
                    "Something went wrong on the server; the request id in the response identifies it in the logs."
                        .to_string()
                } else {
                    err.message()
                };
                let advice = match status.as_u16() {
                    400 | 422 => "Correct the form and send it again.",
                    403 if code == "CSRF_REJECTED" => {
                        "The form was not sent from this console (or it expired with your session). Reload the page and try again."
                    }
                    403 => "Your role in this workspace does not allow this. Ask an owner of the workspace.",
                    404 => "It may have been deleted, or it belongs to another workspace: check the workspace switcher.",
                    409 => "Reload the page to see its current state.",
                    429 | 503 => "Wait a moment and try again.",
                    _ => "Try again; if it keeps failing, tell your administrator.",
                };
                (status, status.canonical_reason().unwrap_or("Error").to_string(), message, advice)
            }
        };
        let page =
            ErrorPage { chrome: Chrome::anonymous(heading.clone()), status: status.as_u16(), heading, message, advice };
        match page.render() {
            Ok(html) => (status, Html(html)).into_response(),
            Err(_) => (status, "error").into_response(),
        }
    }
}

/// 303 to `location` (after a form post, so reloading does not send it again).
pub fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// Percent-encodes a query value.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `2026-11-28 23:40 UTC`.
pub fn when(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map_or_else(|| "—".to_string(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string())
}

/// `2026-11-28`.
pub fn day(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map_or_else(|| "—".to_string(), |t| t.format("%Y-%m-%d").to_string())
}

#[cfg(test)]
mod tests {
    use super::{encode, when};

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("/certificates?status=expired&x=a b"), "/certificates%3Fstatus%3Dexpired%26x%3Da%20b");
    }

    #[test]
    fn times_read_in_utc() {
        assert_eq!(when(0), "1970-01-01 00:00 UTC");
    }
}
