//! `/discovery`: start a scan (TLS endpoints, or a CA's certificates), watch its progress (the
//! scan's page polls itself with htmx while the scan runs; without script, reload), see what it
//! found: the certificates it added or touched, new or already known, paged, each linked to its
//! page. The use cases are the API's `discovery::*`.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;
use trellis_core::auth::Scope;
use trellis_core::cas::service as cas;
use trellis_core::context::SharedContext;
use trellis_core::discovery::{self, Scan};
use trellis_core::error::Error;
use trellis_core::pagination::PageRequest;
use trellis_http::extract::numeric_id;

use crate::page::{render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

pub struct ScanRow {
    pub id: i64,
    pub kind: String,
    pub status: &'static str,
    pub progress: String,
    pub found: i64,
    pub new_count: i64,
    pub at: String,
}

fn row(scan: &Scan) -> ScanRow {
    ScanRow {
        id: scan.id,
        kind: if scan.scan_type == discovery::CA_CERTS {
            format!("CA #{}", scan.ca_id.unwrap_or_default())
        } else {
            scan.targets.join(", ")
        },
        status: scan.status.as_str(),
        progress: scan.progress().map_or_else(|| "—".to_string(), |p| format!("{p}%")),
        found: scan.found,
        new_count: scan.new_count,
        at: when(scan.created_at),
    }
}

#[derive(Template)]
#[template(path = "discovery.html")]
struct DiscoveryPage {
    chrome: Chrome,
    csrf: String,
    can_scan: bool,
    cas: Vec<(i64, String)>,
    scans: Vec<ScanRow>,
}

pub async fn list(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    let caller = &console.caller;
    let page = PageRequest::new(None, Some(50), None, 50)?;
    let scans = discovery::list(&ctx.discovery_deps(), caller, None, None, page).await?.items.iter().map(row).collect();
    let cas = cas::list(&ctx.ca_deps(), caller, PageRequest::new(None, Some(100), None, 100)?)
        .await?
        .items
        .into_iter()
        .map(|view| (view.ca.id, view.ca.name))
        .collect();
    render(&DiscoveryPage {
        chrome: Chrome::new(&console, "Discovery", "discovery"),
        csrf: console.csrf.clone(),
        can_scan: console.can(Scope::CasWrite),
        cas,
        scans,
    })
}

#[derive(Deserialize)]
pub struct StartForm {
    #[serde(default)]
    targets: String,
    #[serde(default)]
    ca_id: String,
}

pub async fn start(
    State(ctx): State<SharedContext>,
    Posted(console, form): Posted<StartForm>,
) -> Result<Response, PageError> {
    let scan = match form.ca_id.trim() {
        "" => {
            let targets: Vec<String> =
                form.targets.lines().map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect();
            if targets.is_empty() {
                return Err(Error::invalid_field("targets", "give at least one host:port, or choose a CA").into());
            }
            discovery::start_tls_scan(&ctx.discovery_deps(), &console.caller, targets).await?
        }
        id => {
            let id = numeric_id(id).map_err(PageError::Api)?;
            discovery::start_ca_scan(&ctx.discovery_deps(), &console.caller, id).await?
        }
    };
    Ok(see_other(&format!("/discovery/{}", scan.id)))
}

/// A certificate the scan found, as its table shows it.
pub struct FindingRow {
    pub id: i64,
    pub common_name: String,
    pub new: bool,
    /// Already known, and the scan changed it (revoked it, linked its CA).
    pub updated: bool,
    pub status: &'static str,
    pub expires: String,
}

/// Certificates found, a page at a time.
const FINDINGS_PER_PAGE: i64 = 50;

#[derive(Deserialize)]
pub struct ScanQuery {
    page: Option<String>,
}

#[derive(Template)]
#[template(path = "scan.html")]
struct ScanPage {
    chrome: Chrome,
    scan: ScanRow,
    /// Still moving: the progress section polls itself.
    live: bool,
    percent: i64,
    updated: i64,
    failed: i64,
    failures: Vec<(String, String)>,
    error: Option<String>,
    finished: String,
    /// `None` for a role that cannot read the inventory.
    findings: Option<Vec<FindingRow>>,
    findings_total: i64,
    /// Found (less failed) but not listed: `found` counts a certificate at each endpoint that
    /// served it, a certificate may have been deleted since, and a scan from before the scan's
    /// record of its certificates (migration 0580) counted known ones left unchanged without
    /// listing them.
    unlisted: i64,
    page: i64,
    previous: Option<String>,
    next: Option<String>,
}

pub async fn show(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
    Query(query): Query<ScanQuery>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let page = match query.page.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        None => 1,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|p| *p >= 1)
            .ok_or_else(|| Error::invalid_field("page", "must be a whole number from 1"))?,
    };
    let scan = discovery::get(&ctx.discovery_deps(), &console.caller, id).await?;
    let live = matches!(scan.status.as_str(), "pending" | "running");
    let (mut findings, mut findings_total, mut more) = (None, 0, false);
    if console.can(Scope::CertificatesRead) {
        let window = PageRequest::new(Some(page), Some(FINDINGS_PER_PAGE), None, FINDINGS_PER_PAGE)?;
        let found = discovery::findings(&ctx.discovery_deps(), &console.caller, id, window).await?;
        let now = ctx.clock.now();
        findings_total = found.total;
        more = page * FINDINGS_PER_PAGE < found.total;
        findings = Some(
            found
                .items
                .into_iter()
                .map(|f| FindingRow {
                    id: f.certificate.id,
                    status: f.certificate.status(now).as_str(),
                    expires: when(f.certificate.expires_at),
                    new: f.is_new(),
                    updated: f.outcome == discovery::FindingOutcome::Updated,
                    common_name: f.certificate.common_name,
                })
                .collect(),
        );
    }
    let link = |page: i64| format!("/discovery/{id}?page={page}");
    render(&ScanPage {
        chrome: Chrome::new(&console, format!("Scan {id}"), "discovery"),
        live,
        percent: scan.progress().unwrap_or(0),
        updated: scan.updated_count,
        failed: scan.failed_count,
        failures: scan.failures.iter().map(|f| (f.target.clone(), f.message.clone())).collect(),
        error: scan.error.clone(),
        finished: scan.finished_at.map(when).unwrap_or_default(),
        findings,
        unlisted: (scan.found - scan.failed_count - findings_total).max(0),
        findings_total,
        page,
        previous: (page > 1).then(|| link(page - 1)),
        next: more.then(|| link(page + 1)),
        scan: row(&scan),
    })
}
