//! The web console: server-rendered pages (askama) served by `trellis serve` at `/`, sign-in at
//! `/login`. Every page is a handler over the same domain services and scope checks as the REST
//! API (`trellis_core`), authenticated by the same session cookie and same-origin rule
//! (`trellis_http::extract`); the console adds a per-session token on its forms. Assets (one CSS
//! file and the vendored htmx) are embedded in the binary: `cargo build` needs no Node.

mod admin;
mod assets;
mod auth;
mod ca_form;
mod certificates;
mod dashboard;
mod discovery;
mod events_out;
mod fleet;
mod issue;
mod page;
mod plugin_upload;
mod requests;
mod session;

use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use trellis_core::context::SharedContext;

/// `default-src 'self'` with nothing inline: no inline script, no inline style (the templates
/// carry no `style=` attribute), forms post only here, no framing.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

/// The console's routes, merged into the API's router by `trellis_http::router_with` so they
/// share its admission, body limit and request-id layers.
pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/", get(dashboard::show))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/workspace", post(auth::switch_workspace))
        .route("/certificates", get(certificates::list))
        .route("/certificates/{id}", get(certificates::show))
        .route("/certificates/{id}/download", get(certificates::download))
        .route("/certificates/{id}/private-key", get(certificates::private_key_confirm).post(certificates::private_key))
        .route("/certificates/{id}/revoke", post(certificates::revoke))
        .route("/certificates/{id}/auto-renew", post(certificates::auto_renew))
        .route("/certificates/{id}/delete", post(certificates::delete))
        .route("/issue", get(issue::show).post(issue::submit))
        .route("/issue/issued/{id}", get(issue::issued))
        .route("/issue/requested/{id}", get(issue::requested))
        .route("/requests", get(requests::list))
        .route("/requests/{kind}/{id}/approve", post(requests::approve))
        .route("/requests/{kind}/{id}/reject", post(requests::reject))
        .route("/discovery", get(discovery::list).post(discovery::start))
        .route("/discovery/{id}", get(discovery::show))
        .route("/cas", get(admin::cas_list))
        .route("/cas/new", get(ca_form::new_form).post(ca_form::create))
        .route("/cas/{id}", get(admin::ca_show))
        .route("/cas/{id}/edit", get(ca_form::edit_form).post(ca_form::update))
        .route("/cas/{id}/test", post(admin::ca_test))
        .route("/audit", get(admin::audit_log))
        .route("/api-keys", get(admin::api_keys).post(admin::create_api_key))
        .route("/api-keys/{id}/delete", post(admin::delete_api_key))
        .route("/members", get(admin::members_list).post(admin::add_member))
        .route("/events-out", get(events_out::show).post(events_out::create))
        .route("/events-out/deliveries/{id}/redeliver", post(events_out::redeliver))
        .route("/plugins", get(fleet::plugins_list))
        .route("/plugins/{id}/rollback", post(fleet::roll_back))
        .route("/plugins/upload", post(plugin_upload::upload))
        .route("/plugins/{id}/versions/{version}/activate", post(fleet::activate))
        .route("/plugins/bindings", post(fleet::bind))
        .route("/plugins/bindings/{kind}/{service_type}/unbind", post(fleet::unbind))
        .route("/attestation", get(fleet::attestation))
        .route("/attestation/devices/{id}", get(fleet::device))
        .route("/assets/{file}", get(assets::serve))
        .layer(axum::middleware::map_response(security_headers))
}

/// Headers on every console answer. Pages hold workspace data, so they are never cached;
/// assets set their own long-lived `Cache-Control` (their names carry their hash).
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
