//! The OpenAPI document, generated from the handlers' annotations, and a
//! self-contained HTML page that renders it (no external scripts: the docs work offline).

use axum::response::Html;
use axum::routing::get;
use axum::{Json, Router};
use utoipa::OpenApi;

use trellis_core::context::SharedContext;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Trellis",
        description = "Certificate lifecycle management. Errors: `{\"error\": {\"code\", \"message\", \"details\"?}}`. Authenticate with the `trellis_session` cookie (POST /api/auth/login) or `X-API-Key: ck_…` / `Authorization: Bearer ck_…`."
    ),
    paths(
        super::ops::health,
        super::ops::ready,
        super::ops::prometheus,
        super::auth::login,
        super::auth::logout,
        super::auth::current_user,
        super::auth::list_workspaces,
        super::auth::create_workspace,
        super::auth::list_api_keys,
        super::auth::create_api_key,
        super::auth::delete_api_key,
        super::certificates::list_certificates,
        super::certificates::register_certificate,
        super::certificates::statistics,
        super::certificates::get_certificate,
        super::certificates::update_certificate,
        super::certificates::delete_certificate,
        super::certificates::set_auto_renew,
        super::certificates::revoke_certificate,
        super::certificates::download_certificate,
        super::certificates::private_key,
        super::certificates::private_key_status,
        super::certificates::assign_identity,
        super::certificates::list_usage,
        super::certificates::add_usage,
        super::certificates::list_identities,
        super::certificates::create_identity,
        super::certificates::get_identity,
        super::certificates::delete_identity,
        super::audit::list_audit,
        super::audit::list_events,
        super::plugins::install_plugin,
        super::plugins::list_plugins,
        super::plugins::show_plugin,
        super::plugins::activate_version,
        super::plugins::rollback_plugin,
        super::plugins::remove_plugin,
        super::plugins::remove_version,
        super::plugins::grant_hosts,
        super::plugins::list_bindings,
        super::plugins::bind,
        super::plugins::unbind,
        super::plugins::test_binding,
    )
)]
pub struct ApiDoc;

pub fn routes() -> Router<SharedContext> {
    Router::new().route("/api/openapi.json", get(openapi)).route("/docs", get(docs_page))
}

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

async fn docs_page() -> Html<String> {
    let doc = ApiDoc::openapi();
    let mut rows = String::new();
    for (path, item) in &doc.paths.paths {
        let operations = [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("PATCH", &item.patch),
            ("DELETE", &item.delete),
        ];
        for (method, operation) in operations {
            let Some(operation) = operation else { continue };
            let summary = operation.summary.clone().or(operation.description.clone()).unwrap_or_default();
            let tag = operation.tags.as_ref().and_then(|t| t.first().cloned()).unwrap_or_default();
            rows.push_str(&format!(
                "<tr><td>{}</td><td class=m>{method}</td><td><code>{}</code></td><td>{}</td></tr>\n",
                escape(&tag),
                escape(path),
                escape(&summary)
            ));
        }
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=utf-8><title>Trellis API</title><style>\
         body{{font-family:system-ui,sans-serif;margin:2rem;max-width:70rem}}td{{padding:.3rem .6rem;border-bottom:1px solid #ddd;vertical-align:top}}\
         .m{{font-weight:bold}}</style></head><body><h1>Trellis API</h1><p>{}</p>\
         <p>Machine-readable: <a href=\"/api/openapi.json\">/api/openapi.json</a> (OpenAPI 3.1). List endpoints take <code>page</code>, \
         <code>limit</code> (1–100) and <code>offset</code>, and answer <code>{{data, total, page, limit, offset, totalPages}}</code>.</p>\
         <table><tr><th>Area</th><th>Method</th><th>Path</th><th>What it does</th></tr>{rows}</table></body></html>",
        escape(doc.info.description.as_deref().unwrap_or(""))
    ))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
