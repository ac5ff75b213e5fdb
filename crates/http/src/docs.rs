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
        super::domain_claims::list_claims,
        super::domain_claims::create_claim,
        super::domain_claims::get_claim,
        super::domain_claims::verify_claim,
        super::domain_claims::delete_claim,
        super::domain_claims::assign_claim,
        super::acme_server::get_directory,
        super::acme_server::put_directory,
        super::acme_server::create_eab_key,
        super::acme_server::list_eab_keys,
        super::acme_server::revoke_eab_key,
        super::acme_server::list_accounts,
        super::acme_server::deactivate_account,
        super::ops::health,
        super::ops::ready,
        super::ops::prometheus,
        super::auth::login,
        super::auth::logout,
        super::auth::current_user,
        super::oidc::providers,
        super::oidc::login,
        super::oidc::callback,
        super::auth::list_workspaces,
        super::auth::create_workspace,
        super::auth::list_api_keys,
        super::auth::create_api_key,
        super::auth::delete_api_key,
        super::members::list_members,
        super::members::add_member,
        super::members::set_role,
        super::members::remove_member,
        super::members::list_invitations,
        super::members::delete_invitation,
        super::certificates::list_certificates,
        super::certificates::register_certificate,
        super::certificates::statistics,
        super::certificates::get_certificate,
        super::certificates::update_certificate,
        super::certificates::delete_certificate,
        super::certificates::set_auto_renew,
        super::certificates::revoke_certificate,
        super::certificates::list_revocation_requests,
        super::certificates::approve_revocation,
        super::certificates::reject_revocation,
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
        super::cas::list_cas,
        super::cas::ca_stats,
        super::cas::get_ca,
        super::cas::create_ca,
        super::cas::patch_ca,
        super::cas::put_ca,
        super::cas::delete_ca,
        super::cas::test_ca,
        super::cas::sync_ca,
        super::cas::fetch_certificates,
        super::discovery::list_scans,
        super::discovery::get_scan,
        super::discovery::start_scan,
        super::discovery::cancel_scan,
        super::webhooks::list_webhooks,
        super::webhooks::create_webhook,
        super::webhooks::get_webhook,
        super::webhooks::update_webhook,
        super::webhooks::delete_webhook,
        super::webhooks::test_webhook,
        super::webhooks::rotate_secret,
        super::webhooks::list_deliveries,
        super::webhooks::get_delivery,
        super::webhooks::redeliver,
        super::integrations::list_integrations,
        super::integrations::create_integration,
        super::integrations::get_integration,
        super::integrations::patch_integration,
        super::integrations::put_integration,
        super::integrations::delete_integration,
        super::integrations::test_integration,
        super::attestation::list_devices,
        super::attestation::create_device,
        super::attestation::get_device,
        super::attestation::update_device,
        super::attestation::delete_device,
        super::attestation::reset_enrollment,
        super::attestation::challenge,
        super::attestation::enroll,
        super::attestation::activate,
        super::attestation::attest_and_provision,
        super::attestation::attestations,
        super::attestation::attest,
        super::attestation::attest_tpm,
        super::attestation::list_policies,
        super::attestation::get_policy,
        super::attestation::create_policy,
        super::attestation::update_policy,
        super::attestation::delete_policy,
        super::attestation::list_roots,
        super::attestation::add_root,
        super::attestation::remove_root,
        super::issuance::issue_certificate,
        super::issuance::list_crl_entries,
        super::issuance::list_templates,
        super::issuance::get_template,
        super::issuance::create_template,
        super::issuance::update_template,
        super::issuance::delete_template,
        super::issuance::list_requests,
        super::issuance::get_request,
        super::issuance::submit_request,
        super::issuance::approve_request,
        super::issuance::reject_request,
        super::issuance::list_policies,
        super::issuance::create_policy,
        super::issuance::delete_policy,
        super::cas::crl,
        super::cas::ca_certificate,
        super::cas::ocsp_post,
        super::cas::ocsp_get,
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
        super::plugins::list_keys,
        super::plugins::add_key,
        super::plugins::revoke_key,
    ),
    modifiers(&ApiContract)
)]
pub struct ApiDoc;

/// What every operation shares, stated once instead of on each annotation: the path parameters
/// of its template, the error answers any operation may give (in the spec's error shape), and
/// how to authenticate.
struct ApiContract;

/// Answers any operation may give, beside its own.
const COMMON_ERRORS: &[(&str, &str)] = &[
    ("400", "Invalid input: `VALIDATION_ERROR` with `details`"),
    ("401", "No or invalid credentials: `UNAUTHORIZED`"),
    (
        "403",
        "Lacks the scope or role, or a cross-origin cookie change: `FORBIDDEN`, `INSUFFICIENT_SCOPE`, `CSRF_REJECTED`",
    ),
    ("404", "Absent, or in another workspace: `NOT_FOUND`"),
    ("405", "Method not allowed on this path"),
    ("408", "The request took longer than the timeout: `REQUEST_TIMEOUT`"),
    ("409", "Conflicts with an existing resource: `CONFLICT`"),
    ("413", "Body over the size limit: `PAYLOAD_TOO_LARGE`"),
    ("429", "Too many attempts: `RATE_LIMITED`, with `Retry-After`"),
    ("500", "Server fault: `INTERNAL_ERROR` (the X-Request-Id header identifies it in the logs)"),
    ("502", "A plugin failed: `PLUGIN_*` codes"),
    ("503", "A dependency is unavailable or the server is busy: `SERVICE_UNAVAILABLE`"),
    ("504", "A plugin ran out of time: `PLUGIN_TIMEOUT`"),
];

impl utoipa::Modify for ApiContract {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
        use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
        use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
        use utoipa::openapi::{ContentBuilder, ResponseBuilder};

        let components = openapi.components.get_or_insert_with(Default::default);
        components.schemas.insert("ErrorBody".into(), error_body_schema().into());
        components.schemas.insert("AttestationErrorBody".into(), attestation_error_body_schema().into());
        components.add_security_scheme("apiKey", SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-Key"))));
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new("trellis_session"))),
        );
        let error_with = |description: &str, schema: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(utoipa::openapi::Ref::from_schema_name(schema))).build(),
                )
                .build()
        };

        for (path, item) in openapi.paths.paths.iter_mut() {
            let template_params: Vec<String> = path
                .split('/')
                .filter_map(|segment| segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
                .map(str::to_owned)
                .collect();
            // Integer ids (spec: CAs and certificates have integer ids); the rest are strings
            // (templates: a built-in's name or a number; plugins: their id).
            let numeric = [
                "/api/certificates/",
                "/api/machine-identities/",
                "/api/certificate-authorities/",
                "/api/certificate-requests/",
                "/api/issuance-policies/",
                "/api/discovery/scans/",
                "/api/iot/devices/",
                "/api/attestation/policies/",
                "/api/attestation/trust-roots/",
                "/pki/",
            ]
            .iter()
            .any(|prefix| path.starts_with(prefix));
            // Spec §4.3: the attestation endpoints answer errors as `{error: "<code>", details}`.
            let attestation_form = path.starts_with("/api/attestation/")
                || (path.starts_with("/api/iot/devices/{id}/") && path != "/api/iot/devices/{id}");
            let schema = if attestation_form { "AttestationErrorBody" } else { "ErrorBody" };
            let error = |description: &str| error_with(description, schema);
            let operations = [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete];
            for operation in operations.into_iter().flatten() {
                let params = operation.parameters.get_or_insert_with(Vec::new);
                for name in &template_params {
                    let declared =
                        params.iter().any(|p: &Parameter| &p.name == name && p.parameter_in == ParameterIn::Path);
                    if declared {
                        continue;
                    }
                    let schema = if numeric && (name == "id" || name == "ca_id") {
                        ObjectBuilder::new()
                            .schema_type(SchemaType::Type(Type::Integer))
                            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                                utoipa::openapi::KnownFormat::Int64,
                            )))
                            .minimum(Some(1))
                            .build()
                    } else {
                        ObjectBuilder::new().schema_type(SchemaType::Type(Type::String)).min_length(Some(1)).build()
                    };
                    params.push(
                        ParameterBuilder::new()
                            .name(name)
                            .parameter_in(ParameterIn::Path)
                            .required(utoipa::openapi::Required::True)
                            .schema(Some(schema))
                            .build(),
                    );
                }
                for (status, description) in COMMON_ERRORS {
                    if !operation.responses.responses.contains_key(*status) {
                        operation.responses.responses.insert((*status).to_owned(), error(description).into());
                    }
                }
                // Errors an annotation names with a description only still have the error shape.
                for (status, response) in operation.responses.responses.iter_mut() {
                    let is_error = status.starts_with('4') || status.starts_with('5');
                    if let (true, utoipa::openapi::RefOr::T(response)) = (is_error, response) {
                        if response.content.is_empty() {
                            *response = error(&response.description);
                        }
                    }
                }
            }
        }
    }
}

/// `{"error": {"code", "message", "details"?}}`.
fn error_body_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let string = || ObjectBuilder::new().schema_type(SchemaType::Type(Type::String));
    let inner = ObjectBuilder::new()
        .property("code", string())
        .property("message", string())
        .property("details", ObjectBuilder::new())
        .required("code")
        .required("message");
    ObjectBuilder::new().property("error", inner).required("error").build()
}

/// `{"error": "<code>", "details"?, "failures"?}` (spec §4.3); `error` is the §5 object for a
/// 401 from authentication, which comes before the endpoint.
fn attestation_error_body_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
    let string = || ObjectBuilder::new().schema_type(SchemaType::Type(Type::String));
    let any = || ObjectBuilder::new().schema_type(SchemaType::AnyValue);
    ObjectBuilder::new()
        .property("error", any())
        .property("details", any())
        .property("failures", ArrayBuilder::new().items(string()))
        .required("error")
        .build()
}

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
