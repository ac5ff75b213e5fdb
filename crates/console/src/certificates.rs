//! `/certificates`: the inventory with the API's filters (and the CA), sorted by creation or
//! expiry, with server-side paging, and a
//! certificate's page with its actions (downloads, private key after a confirmation, revoke
//! with a reason, auto-renew, delete). The actions a role cannot use are not shown; the use
//! cases refuse them anyway (`caller.require`).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use trellis_core::audit::{self, AuditFilter};
use trellis_core::auth::Scope;
use trellis_core::cas::service as cas;
use trellis_core::certificates::{self as inventory, Certificate, DownloadFormat, IssuanceSource, ListQuery};
use trellis_core::context::SharedContext;
use trellis_core::lifecycle::{self, revocation::Revocation};
use trellis_core::pagination::PageRequest;
use trellis_http::extract::numeric_id;

use crate::page::{encode, render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

/// The inventory's query string: the API's filters and page.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    status: Option<String>,
    search: Option<String>,
    key_algorithm: Option<String>,
    usage_category: Option<String>,
    issuance_source: Option<String>,
    ca_id: Option<String>,
    sort: Option<String>,
    page: Option<String>,
}

pub struct Row {
    pub id: i64,
    pub common_name: String,
    pub sans: String,
    pub issuer: String,
    pub status: &'static str,
    pub expires: String,
    pub days: i64,
    pub source: &'static str,
}

#[derive(Template)]
#[template(path = "certificates.html")]
struct ListPage {
    chrome: Chrome,
    status: String,
    search: String,
    key_algorithm: String,
    usage_category: String,
    issuance_source: String,
    ca_id: String,
    sort: String,
    /// The workspace's CAs (id, name) for the CA filter; `None` without `cas:read`.
    cas: Option<Vec<(String, String)>>,
    sorts: [(&'static str, &'static str); 3],
    rows: Vec<Row>,
    total: i64,
    total_exact: bool,
    page: i64,
    pages: i64,
    previous: Option<String>,
    next: Option<String>,
    statuses: [&'static str; 4],
    sources: [&'static str; 4],
    usages: [&'static str; 4],
    algorithms: [&'static str; 4],
}

const PAGE_SIZE: i64 = 50;

pub async fn list(
    State(ctx): State<SharedContext>,
    console: Console,
    axum::extract::Query(params): axum::extract::Query<ListParams>,
) -> Result<Response, PageError> {
    let text = |v: &Option<String>| v.as_deref().map(str::trim).unwrap_or("").to_string();
    let page_number = params.page.as_deref().and_then(|p| p.trim().parse::<i64>().ok()).unwrap_or(1).max(1);
    let query = ListQuery {
        status: params.status.clone(),
        search: params.search.clone(),
        signature_algorithm: None,
        key_algorithm: params.key_algorithm.clone(),
        usage_category: params.usage_category.clone(),
        issuance_source: params.issuance_source.clone(),
        ca_id: params.ca_id.clone(),
        sort: params.sort.clone(),
    };
    let found = inventory::list(
        &ctx.certificate_deps(),
        &console.caller,
        query,
        PageRequest::new(Some(page_number), Some(PAGE_SIZE), None, PAGE_SIZE)?,
    )
    .await?;
    let now = ctx.clock.now();
    let pages = ((found.total + PAGE_SIZE - 1) / PAGE_SIZE).max(1);
    let filters = [
        ("status", text(&params.status)),
        ("search", text(&params.search)),
        ("keyAlgorithm", text(&params.key_algorithm)),
        ("usageCategory", text(&params.usage_category)),
        ("issuanceSource", text(&params.issuance_source)),
        ("caId", text(&params.ca_id)),
        ("sort", text(&params.sort)),
    ];
    let link = |page: i64| {
        let mut query: Vec<String> =
            filters.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={}", encode(v))).collect();
        query.push(format!("page={page}"));
        format!("/certificates?{}", query.join("&amp;"))
    };
    let rows = found.items.into_iter().map(|c| row(c, now)).collect::<Vec<_>>();
    // The CA filter offers the workspace's CAs (the first 100, as the CA list pages them).
    let cas = if console.can(Scope::CasRead) {
        let page = cas::list(&ctx.ca_deps(), &console.caller, PageRequest::new(None, Some(100), None, 100)?).await?;
        Some(page.items.into_iter().map(|view| (view.ca.id.to_string(), view.ca.name)).collect())
    } else {
        None
    };
    let more = page_number < pages || !found.total_exact;
    let page = ListPage {
        chrome: Chrome::new(&console, "Certificates", "certificates"),
        previous: (page_number > 1).then(|| link(page_number - 1)),
        next: (more && rows.len() as i64 == PAGE_SIZE).then(|| link(page_number + 1)),
        status: text(&params.status),
        search: text(&params.search),
        key_algorithm: text(&params.key_algorithm),
        usage_category: text(&params.usage_category),
        issuance_source: text(&params.issuance_source),
        ca_id: text(&params.ca_id),
        sort: text(&params.sort),
        cas,
        sorts: [
            ("newest", "Newest first"),
            ("expiresAt", "Expiry, soonest first"),
            ("-expiresAt", "Expiry, latest first"),
        ],
        rows,
        total: found.total,
        total_exact: found.total_exact,
        page: page_number,
        pages,
        statuses: ["active", "expiring", "expired", "revoked"],
        sources: ["internal", "agent", "vault", "external"],
        usages: ["TLS", "S/MIME", "Code Signing", "Client Auth"],
        algorithms: ["RSA", "ECDSA", "ED25519", "ED448"],
    };
    render(&page)
}

fn row(c: Certificate, now: chrono::DateTime<chrono::Utc>) -> Row {
    let mut sans = c.subject_alt_names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if c.subject_alt_names.len() > 3 {
        sans.push_str(&format!(" (+{})", c.subject_alt_names.len() - 3));
    }
    Row {
        id: c.id,
        status: c.status(now).as_str(),
        days: c.days_until_expiry(now),
        expires: when(c.expires_at),
        common_name: c.common_name,
        sans,
        issuer: c.issuer,
        source: c.issuance_source.as_str(),
    }
}

pub struct UsageRow {
    pub host: String,
    pub port: String,
    pub service: String,
    pub location: String,
}

pub struct HistoryRow {
    pub at: String,
    pub action: String,
    pub actor: String,
}

#[derive(Template)]
#[template(path = "certificate.html")]
struct CertificatePage {
    chrome: Chrome,
    c: Certificate,
    status: &'static str,
    days: i64,
    not_before: String,
    expires: String,
    revoked_at: String,
    chain: Vec<String>,
    usage: Vec<UsageRow>,
    history: Option<Vec<HistoryRow>>,
    can_write: bool,
    key_downloadable: bool,
    key_reason: String,
    reasons: [&'static str; 6],
}

#[derive(Deserialize)]
pub struct Flash {
    done: Option<String>,
}

/// What a `?done=` after an action says (a fixed vocabulary: the URL cannot inject text).
fn flash_text(done: Option<&str>) -> Option<String> {
    Some(
        match done? {
            "revoked" => "The certificate is revoked.",
            "revocation-requested" => "The revocation waits for a second person's approval (see Requests).",
            "auto-renew-on" => "Auto-renewal is on.",
            "auto-renew-off" => "Auto-renewal is off.",
            "deleted" => "The certificate was deleted from the inventory.",
            "issued" => "The certificate was issued.",
            _ => return None,
        }
        .to_string(),
    )
}

pub async fn show(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
    axum::extract::Query(flash): axum::extract::Query<Flash>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let caller = &console.caller;
    let c = inventory::get(&ctx.certificate_deps(), caller, id).await?;
    let now = ctx.clock.now();
    let usage =
        inventory::list_usage(&ctx.certificate_deps(), caller, Some(id), PageRequest::new(None, Some(50), None, 50)?)
            .await?
            .items
            .into_iter()
            .map(|u| UsageRow {
                host: u.host,
                port: u.port.map(|p| p.to_string()).unwrap_or_default(),
                service: u.service.unwrap_or_default(),
                location: u.location.unwrap_or_default(),
            })
            .collect();
    let history = if console.can(Scope::AuditRead) {
        let filter = AuditFilter {
            target_type: Some("certificate".into()),
            target_id: Some(id.to_string()),
            ..AuditFilter::default()
        };
        let page = audit::list(ctx.store.as_ref(), caller, filter, PageRequest::new(None, Some(50), None, 50)?).await?;
        Some(
            page.items
                .into_iter()
                .map(|e| HistoryRow {
                    at: when(e.created_at),
                    action: e.action,
                    actor: format!("{} {}", e.actor_type, e.actor_id),
                })
                .collect(),
        )
    } else {
        None
    };
    let key = inventory::private_key_status(&ctx.certificate_deps(), caller, id).await?;
    let page = CertificatePage {
        chrome: Chrome::new(&console, format!("Certificate {}", c.common_name), "certificates")
            .with_flash(flash_text(flash.done.as_deref())),
        status: c.status(now).as_str(),
        days: c.days_until_expiry(now),
        not_before: when(c.not_before),
        expires: when(c.expires_at),
        revoked_at: c.revoked_at.map(when).unwrap_or_default(),
        chain: c.chain(),
        usage,
        history,
        can_write: console.can(Scope::CertificatesWrite),
        key_downloadable: key.downloadable && key.issuance_source == IssuanceSource::Internal,
        key_reason: key.reason,
        reasons: [
            "unspecified",
            "keyCompromise",
            "affiliationChanged",
            "superseded",
            "cessationOfOperation",
            "certificateHold",
        ],
        c,
    };
    render(&page)
}

#[derive(Deserialize)]
pub struct FormatQuery {
    format: Option<String>,
}

pub async fn download(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<FormatQuery>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let format = DownloadFormat::parse(query.format.as_deref())?;
    let file = inventory::download(&ctx.certificate_deps(), &console.caller, id, format).await?;
    Ok(attachment(file.bytes, &file.file_name, file.content_type))
}

fn attachment(bytes: Vec<u8>, file_name: &str, content_type: &'static str) -> Response {
    // The file name comes from the certificate's common name: only safe characters reach the
    // header.
    let safe: String =
        file_name.chars().map(|c| if c.is_ascii_alphanumeric() || ".-_".contains(c) { c } else { '_' }).collect();
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{safe}\""))
        .unwrap_or(HeaderValue::from_static("attachment"));
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type)), (header::CONTENT_DISPOSITION, disposition)],
        bytes,
    )
        .into_response()
}

#[derive(Template)]
#[template(path = "private_key.html")]
struct PrivateKeyConfirm {
    chrome: Chrome,
    id: i64,
    common_name: String,
    csrf: String,
}

/// The confirmation before a private key leaves the server (GET shows it; only the POST,
/// which carries the form token, returns the key).
pub async fn private_key_confirm(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    console.caller.require(Scope::CertificatesWrite)?;
    let c = inventory::get(&ctx.certificate_deps(), &console.caller, id).await?;
    render(&PrivateKeyConfirm {
        chrome: Chrome::new(&console, "Download the private key", "certificates"),
        id,
        common_name: c.common_name,
        csrf: console.csrf.clone(),
    })
}

#[derive(Deserialize)]
pub struct Confirmed {
    #[serde(default)]
    confirm: String,
}

pub async fn private_key(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, form): Posted<Confirmed>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    if form.confirm != "yes" {
        return Err(trellis_core::error::Error::invalid_field("confirm", "tick the box to confirm the download").into());
    }
    let (certificate, key) = inventory::private_key(&ctx.certificate_deps(), &console.caller, id).await?;
    let name = format!("{}-{}.key", certificate.common_name, certificate.id);
    let mut response = attachment(key.into_bytes(), &name, "application/x-pem-file");
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

#[derive(Deserialize)]
pub struct RevokeForm {
    reason: Option<String>,
}

pub async fn revoke(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, form): Posted<RevokeForm>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let done = match lifecycle::revocation::revoke(&ctx.lifecycle_deps(), &console.caller, id, form.reason).await? {
        Revocation::Revoked(_) => "revoked",
        Revocation::AwaitingApproval(_) => "revocation-requested",
    };
    Ok(see_other(&format!("/certificates/{id}?done={done}")))
}

#[derive(Deserialize)]
pub struct AutoRenewForm {
    enabled: String,
}

pub async fn auto_renew(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, form): Posted<AutoRenewForm>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let enabled = form.enabled == "true";
    lifecycle::cas::set_auto_renewal(&ctx.lifecycle_deps(), &console.caller, id, Some(enabled)).await?;
    let done = if enabled { "auto-renew-on" } else { "auto-renew-off" };
    Ok(see_other(&format!("/certificates/{id}?done={done}")))
}

pub async fn delete(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, _): Posted<Confirmed>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    inventory::delete(&ctx.certificate_deps(), &console.caller, id).await?;
    Ok(see_other("/certificates?deleted=1"))
}
