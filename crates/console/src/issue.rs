//! `/issue`: the issuance form (CA, template, names, key algorithm or a pasted CSR), with each
//! template's limits beside it and a refusal's reasons (policies, template limits) shown inline
//! above the form as sent. The use case is the API's `issuance::issue`.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use trellis_core::auth::Scope;
use trellis_core::cas::service as cas;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::issuance::{self, templates, IssueInput, Outcome};
use trellis_core::pagination::PageRequest;

use crate::page::{render, see_other, Chrome, PageError};
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
    let cas = cas::list(ctx, caller, PageRequest::new(None, Some(100), None, 100)?)
        .await?
        .items
        .into_iter()
        .map(|view| (view.ca.id, format!("{} ({})", view.ca.name, view.ca.ca_type)))
        .collect();
    let templates = templates::list(ctx, caller)
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
        IssueForm { template_id: "tls-server".into(), key_algorithm: "ecdsa-p256".into(), ..IssueForm::default() };
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
    match issuance::issue(&ctx, &console.caller, input).await {
        Ok(Outcome::Issued(issued)) => Ok(see_other(&format!("/certificates/{}?done=issued", issued.certificate.id))),
        Ok(Outcome::AwaitingApproval(_)) | Ok(Outcome::Issuing(_)) => {
            Ok(see_other("/requests?status=all&done=submitted"))
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
