//! `/issue`: the issuance form (CA, template, names, key algorithm or a pasted CSR), with each
//! template's limits beside it and a refusal's reasons (policies, template limits) shown inline
//! above the form as sent. The use case is the API's `issuance::issue`. What it ended with has
//! a page of its own: `/issue/issued/{id}` (what was issued and its downloads) or
//! `/issue/requested/{id}` (the request that waits for approval or for the CA).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use trellis_core::auth::Scope;
use trellis_core::cas::service as cas;
use trellis_core::certificates::{self as inventory, IssuanceSource};
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::issuance::{self, requests, templates, IssueInput, Outcome};
use trellis_core::pagination::PageRequest;

use trellis_http::extract::numeric_id;

use crate::page::{render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

pub struct TemplateRow {
    pub id: String,
    pub name: String,
    pub limits: String,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssueForm {
    #[serde(default)]
    ca_id: String,
    #[serde(default)]
    template_id: String,
    #[serde(default)]
    common_name: String,
    #[serde(default)]
    names: String,
    #[serde(default)]
    key_algorithm: String,
    #[serde(default)]
    csr: String,
    #[serde(default)]
    validity_days: String,
    #[serde(default)]
    auto_renewal: Option<String>,
}

#[derive(Template)]
#[template(path = "issue.html")]
struct IssuePage {
    chrome: Chrome,
    csrf: String,
    cas: Vec<(i64, String)>,
    templates: Vec<TemplateRow>,
    algorithms: [&'static str; 4],
    form: IssueForm,
    /// The CA the form had chosen (0: none yet).
    ca_selected: i64,
    error: Option<String>,
    reasons: Vec<String>,
}

async fn page(
    ctx: &SharedContext,
    console: &Console,
    form: IssueForm,
    error: Option<(String, Vec<String>)>,
) -> Result<IssuePage, PageError> {
    let caller = &console.caller;
    let cas = cas::list(&ctx.ca_deps(), caller, PageRequest::new(None, Some(100), None, 100)?)
        .await?
        .items
        .into_iter()
        .map(|view| (view.ca.id, format!("{} ({})", view.ca.name, view.ca.ca_type)))
        .collect();
    let templates = templates::list(&ctx.issuance_deps(), caller)
        .await?
        .into_iter()
        .map(|t| TemplateRow {
            limits: format!(
                "validity up to {} days (default {}); keys: {}{}",
                t.max_validity_days,
                t.default_validity_days,
                t.allowed_key_algorithms.join(", "),
                if t.allowed_key_algorithms.iter().any(|k| k == "rsa") {
                    format!(" (RSA ≥ {} bits)", t.min_rsa_bits)
                } else {
                    String::new()
                }
            ),
            id: t.id,
            name: t.name,
        })
        .collect();
    let (error, reasons) = error.map_or((None, Vec::new()), |(message, reasons)| (Some(message), reasons));
    Ok(IssuePage {
        chrome: Chrome::new(console, "Issue a certificate", "issue"),
        csrf: console.csrf.clone(),
        cas,
        templates,
        algorithms: ["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa"],
        ca_selected: form.ca_id.trim().parse().unwrap_or(0),
        form,
        error,
        reasons,
    })
}

pub async fn show(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    console.caller.require(Scope::CertificatesWrite)?;
    let form =
        IssueForm { template_id: "web_server".into(), key_algorithm: "ecdsa-p256".into(), ..IssueForm::default() };
    render(&page(&ctx, &console, form, None).await?)
}

fn optional(text: &str) -> Option<String> {
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// The refusal's reasons in words: policy reasons (`[{code, message}]`) or a validation's
/// details.
fn reasons_of(err: &Error) -> Vec<String> {
    let value = match err {
        Error::PolicyDenied(reasons) => reasons,
        Error::Validation { details: Some(details), .. } => details,
        _ => return Vec::new(),
    };
    match value {
        serde_json::Value::Array(items) => items
            .iter()
            .map(|item| item.get("message").and_then(|m| m.as_str()).map_or_else(|| item.to_string(), str::to_string))
            .collect(),
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
            .collect(),
        other => vec![other.to_string()],
    }
}

pub async fn submit(
    State(ctx): State<SharedContext>,
    Posted(console, form): Posted<IssueForm>,
) -> Result<Response, PageError> {
    let validity_days = match optional(&form.validity_days) {
        None => None,
        Some(text) => match text.parse::<u32>() {
            Ok(days) => Some(days),
            Err(_) => {
                let message = "Validity must be a whole number of days.".to_string();
                return refused(&ctx, &console, form, StatusCode::BAD_REQUEST, message, Vec::new()).await;
            }
        },
    };
    let ca_id = optional(&form.ca_id).and_then(|id| id.parse::<i64>().ok());
    let csr = optional(&form.csr);
    let input = IssueInput {
        ca_id,
        template_id: optional(&form.template_id),
        common_name: optional(&form.common_name),
        subject_alt_names: form
            .names
            .split(['\n', ','])
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect(),
        // A pasted CSR carries its own key: the algorithm field is for a key made here.
        key_algorithm: if csr.is_some() { None } else { optional(&form.key_algorithm) },
        csr,
        validity_days,
        auto_renewal: Some(form.auto_renewal.is_some()),
        ..IssueInput::default()
    };
    match issuance::issue(&ctx.issuance_deps(), &console.caller, input).await {
        Ok(Outcome::Issued(issued)) => Ok(see_other(&format!("/issue/issued/{}", issued.certificate.id))),
        Ok(Outcome::AwaitingApproval(request)) | Ok(Outcome::Issuing(request)) => {
            Ok(see_other(&format!("/issue/requested/{}", request.id)))
        }
        Err(err @ (Error::Validation { .. } | Error::PolicyDenied(_) | Error::NotFound(_) | Error::Conflict(_))) => {
            let status = trellis_http::error::status_of(&err);
            let reasons = reasons_of(&err);
            refused(&ctx, &console, form, status, err.to_string(), reasons).await
        }
        Err(err) => Err(err.into()),
    }
}

async fn refused(
    ctx: &SharedContext,
    console: &Console,
    form: IssueForm,
    status: StatusCode,
    message: String,
    reasons: Vec<String>,
) -> Result<Response, PageError> {
    let page = page(ctx, console, form, Some((message, reasons))).await?;
    let html = page.render().map_err(|err| PageError::from(Error::Internal(format!("template: {err}"))))?;
    Ok((status, Html(html)).into_response())
}

#[derive(Template)]
#[template(path = "issued.html")]
struct IssuedPage {
    chrome: Chrome,
    id: i64,
    common_name: String,
    names: Vec<String>,
    issuer: String,
    serial: String,
    not_before: String,
    expires: String,
    key: String,
    template: String,
    /// The private key link: members and owners, a key the internal PKI generated and holds.
    key_link: bool,
    key_reason: String,
}

/// What an issuance from the form produced, with its downloads. Any certificate of the
/// workspace can be shown so (the page is a read); the private key link leads to the
/// certificate's confirmation page, which the use case guards again.
pub async fn issued(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let caller = &console.caller;
    let c = inventory::get(&ctx.certificate_deps(), caller, id).await?;
    let key = inventory::private_key_status(&ctx.certificate_deps(), caller, id).await?;
    let key_link =
        console.can(Scope::CertificatesWrite) && key.downloadable && key.issuance_source == IssuanceSource::Internal;
    render(&IssuedPage {
        chrome: Chrome::new(&console, format!("Issued {}", c.common_name), "issue")
            .with_flash(Some("The certificate was issued.".to_string())),
        id: c.id,
        names: c.subject_alt_names.clone(),
        issuer: c.issuer.clone(),
        serial: c.serial_number.clone(),
        not_before: when(c.not_before),
        expires: when(c.expires_at),
        key: match c.key_size {
            Some(bits) => format!("{} {bits}", c.key_algorithm),
            None => c.key_algorithm.clone(),
        },
        template: c.issuance_template.clone().unwrap_or_default(),
        key_link,
        key_reason: key.reason,
        common_name: c.common_name,
    })
}

#[derive(Template)]
#[template(path = "requested.html")]
struct RequestedPage {
    chrome: Chrome,
    id: i64,
    common_name: String,
    ca_id: i64,
    status: &'static str,
    reasons: String,
    /// The CA accepted the order and issues in the background (`issuing`).
    issuing: bool,
    status_message: String,
    certificate_id: Option<i64>,
    at: String,
}

/// An issuance from the form that did not end with a certificate: it waits for a second
/// person's approval, or the CA accepted the order and issues later.
pub async fn requested(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let r = requests::get(&ctx.issuance_deps(), &console.caller, id).await?;
    render(&RequestedPage {
        chrome: Chrome::new(&console, format!("Request {id}"), "issue"),
        id: r.id,
        common_name: r.common_name.unwrap_or_default(),
        ca_id: r.ca_id,
        status: r.status.as_str(),
        reasons: crate::requests::reasons_text(&r.reasons),
        issuing: r.status.as_str() == "issuing",
        status_message: r.status_message.unwrap_or_default(),
        certificate_id: r.certificate_id,
        at: when(r.created_at),
    })
}
