//! `/requests`: the approval queue, issuance and revocation requests, with approve and reject
//! (with a reason). The four-eyes rule is the domain's (`approvals.rs`); the page only hides
//! the buttons from the requester and from roles that cannot decide.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use trellis_core::auth::Scope;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::issuance::requests;
use trellis_core::lifecycle::revocation_requests;
use trellis_core::pagination::PageRequest;
use trellis_http::extract::numeric_id;

use crate::page::{render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

pub struct IssuanceRow {
    pub id: i64,
    pub common_name: String,
    pub ca_id: i64,
    pub status: &'static str,
    pub reasons: String,
    pub requested_by: String,
    pub at: String,
    pub certificate_id: Option<i64>,
    pub decidable: bool,
}

pub struct RevocationRow {
    pub id: i64,
    pub certificate_id: i64,
    pub reason: String,
    pub status: &'static str,
    pub requested_by: String,
    pub at: String,
    pub decidable: bool,
}

#[derive(Template)]
#[template(path = "requests.html")]
struct RequestsPage {
    chrome: Chrome,
    status: String,
    statuses: [&'static str; 4],
    issuance: Vec<IssuanceRow>,
    revocation: Vec<RevocationRow>,
    csrf: String,
}

#[derive(Deserialize)]
pub struct RequestsQuery {
    status: Option<String>,
    done: Option<String>,
}

/// The policy reasons as words (`[{code, message}]` → "message; message").
pub(crate) fn reasons_text(reasons: &serde_json::Value) -> String {
    reasons
        .as_array()
        .map(|items| {
            items.iter().filter_map(|r| r.get("message").and_then(|m| m.as_str())).collect::<Vec<_>>().join("; ")
        })
        .unwrap_or_default()
}

pub async fn list(
    State(ctx): State<SharedContext>,
    console: Console,
    axum::extract::Query(query): axum::extract::Query<RequestsQuery>,
) -> Result<Response, PageError> {
    let status = query.status.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("pending").to_string();
    let caller = &console.caller;
    let page = PageRequest::new(None, Some(100), None, 100)?;
    let me = caller.user_id().map(|id| format!("user:{id}")).unwrap_or_default();
    let can_decide = console.can(Scope::CertificatesWrite);
    let filter = (status != "all").then_some(status.as_str());
    let issuance = requests::list(&ctx.issuance_deps(), caller, filter, page)
        .await?
        .items
        .into_iter()
        .map(|r| IssuanceRow {
            decidable: can_decide && r.status.as_str() == "pending" && r.requested_by != me,
            id: r.id,
            common_name: r.common_name.unwrap_or_default(),
            ca_id: r.ca_id,
            status: r.status.as_str(),
            reasons: reasons_text(&r.reasons),
            requested_by: r.requested_by,
            at: when(r.created_at),
            certificate_id: r.certificate_id,
        })
        .collect();
    // Revocation requests have no `issuing`/`issued` states: those filters show none of them.
    let revocation = match filter {
        Some("issuing" | "issued") => Vec::new(),
        _ => revocation_requests::list(&ctx.lifecycle_deps(), caller, filter, page)
            .await?
            .items
            .into_iter()
            .map(|r| RevocationRow {
                decidable: can_decide && r.status.as_str() == "pending" && r.requested_by != me,
                id: r.id,
                certificate_id: r.certificate_id,
                reason: r.reason,
                status: r.status.as_str(),
                requested_by: r.requested_by,
                at: when(r.created_at),
            })
            .collect(),
    };
    let flash = match query.done.as_deref() {
        Some("approved") => Some("Approved.".to_string()),
        Some("rejected") => Some("Rejected.".to_string()),
        Some("submitted") => {
            Some("The request was submitted: it waits for approval, or for the CA to issue.".to_string())
        }
        _ => None,
    };
    render(&RequestsPage {
        chrome: Chrome::new(&console, "Requests", "requests").with_flash(flash),
        status,
        statuses: ["pending", "approved", "rejected", "failed"],
        issuance,
        revocation,
        csrf: console.csrf.clone(),
    })
}

#[derive(Deserialize)]
pub struct Decision {
    reason: Option<String>,
}

pub async fn approve(
    State(ctx): State<SharedContext>,
    Path((kind, id)): Path<(String, String)>,
    Posted(console, _): Posted<Decision>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    match kind.as_str() {
        "issuance" => {
            requests::approve(&ctx.issuance_deps(), &console.caller, id).await?;
        }
        "revocation" => {
            revocation_requests::approve(&ctx.lifecycle_deps(), &console.caller, id).await?;
        }
        _ => return Err(Error::invalid_field("kind", "must be issuance or revocation").into()),
    }
    Ok(see_other("/requests?done=approved"))
}

pub async fn reject(
    State(ctx): State<SharedContext>,
    Path((kind, id)): Path<(String, String)>,
    Posted(console, form): Posted<Decision>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let reason = form.reason.map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
    match kind.as_str() {
        "issuance" => {
            requests::reject(&ctx.issuance_deps(), &console.caller, id, reason).await?;
        }
        "revocation" => {
            revocation_requests::reject(&ctx.lifecycle_deps(), &console.caller, id, reason).await?;
        }
        _ => return Err(Error::invalid_field("kind", "must be issuance or revocation").into()),
    }
    Ok(see_other("/requests?done=rejected"))
}
