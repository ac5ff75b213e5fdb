//! `/`: counts by status, what expires within 7 and 30 days and within a window the user
//! picks, a 90-day expiry timeline drawn on the server (SVG), CAs by health, pending
//! approvals and recent audit events. Every number comes from an indexed query (the inventory
//! statistics and `certificates::expiry_outlook`), never from walking the inventory.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use trellis_core::audit::{self, AuditFilter};
use trellis_core::auth::Scope;
use trellis_core::cas::service as cas;
use trellis_core::certificates::{self as inventory, Status};
use trellis_core::context::SharedContext;
use trellis_core::issuance::requests;
use trellis_core::lifecycle::revocation_requests;
use trellis_core::pagination::PageRequest;

use crate::page::{day, render, when, Chrome, PageError};
use crate::session::Console;

const TIMELINE_DAYS: usize = 90;

#[derive(Deserialize)]
pub struct DashboardQuery {
    /// The adjustable expiry window, in days (1 to 365; default 60).
    window: Option<String>,
}

pub struct Bar {
    pub x: usize,
    pub y: i64,
    pub height: i64,
    pub label: String,
}

pub struct CaRow {
    pub name: String,
    pub ca_type: String,
    pub status: &'static str,
    pub health: &'static str,
}

pub struct EventRow {
    pub at: String,
    pub action: String,
    pub target: String,
    pub actor: String,
}

#[derive(Template)]
#[template(path = "dashboard.html")]
struct Dashboard {
    chrome: Chrome,
    total: i64,
    by_status: Vec<(&'static str, i64)>,
    expired: i64,
    within_7: i64,
    within_30: i64,
    window: i64,
    within_window: i64,
    window_error: Option<String>,
    timeline_total: i64,
    timeline_peak: i64,
    bars: Vec<Bar>,
    cas: Option<Vec<CaRow>>,
    pending_issuance: i64,
    pending_revocation: i64,
    events: Option<Vec<EventRow>>,
}

/// The timeline's drawing area (viewBox units).
const CHART_HEIGHT: i64 = 120;
const BAR_STEP: usize = 10;

pub async fn show(
    State(ctx): State<SharedContext>,
    console: Console,
    axum::extract::Query(query): axum::extract::Query<DashboardQuery>,
) -> Result<Response, PageError> {
    let caller = &console.caller;
    let (window, window_error) = match query.window.as_deref().map(str::trim).filter(|w| !w.is_empty()) {
        None => (60, None),
        Some(text) => match text.parse::<i64>() {
            Ok(days) if (1..=365).contains(&days) => (days, None),
            _ => (
                60,
                Some(format!(
                    "“{}” is not a number of days from 1 to 365; showing 60.",
                    text.chars().take(20).collect::<String>()
                )),
            ),
        },
    };
    let stats = inventory::statistics(&ctx.certificate_deps(), caller).await?;
    let outlook = inventory::expiry_outlook(&ctx.certificate_deps(), caller, window.max(TIMELINE_DAYS as i64)).await?;
    let within = |days: usize| outlook.iter().take(days).sum::<i64>();
    let count_of = |status: Status| stats.by_status.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n);
    let timeline = &outlook[..TIMELINE_DAYS.min(outlook.len())];
    let peak = timeline.iter().copied().max().unwrap_or(0);
    let now = ctx.now_millis();
    let bars = timeline
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            // A day with any certificate is at least 2 units tall, so it is never invisible.
            let height = if count == 0 || peak == 0 { 0 } else { (count * CHART_HEIGHT / peak).max(2) };
            let date = day(now + (i as i64) * 24 * 3600 * 1000);
            Bar { x: i * BAR_STEP, y: CHART_HEIGHT - height, height, label: format!("{date}: {count} expiring") }
        })
        .collect();
    let cas = if console.can(Scope::CasRead) {
        let page = cas::list(&ctx.ca_deps(), caller, PageRequest::new(None, Some(100), None, 100)?).await?;
        let mut rows: Vec<CaRow> = page
            .items
            .into_iter()
            .map(|view| CaRow {
                name: view.ca.name,
                ca_type: view.ca.ca_type,
                status: view.ca.status.as_str(),
                health: view.ca.health_status.as_str(),
            })
            .collect();
        // The unhealthy first: they are what needs attention.
        rows.sort_by_key(|r| (health_rank(r.health), r.name.clone()));
        Some(rows)
    } else {
        None
    };
    let one = PageRequest::new(None, Some(1), None, 1)?;
    let pending_issuance = requests::list(&ctx.issuance_deps(), caller, Some("pending"), one).await?.total;
    let pending_revocation =
        revocation_requests::list(&ctx.lifecycle_deps(), caller, Some("pending"), one).await?.total;
    let events = if console.can(Scope::AuditRead) {
        let page = audit::list(
            ctx.store.as_ref(),
            caller,
            AuditFilter::default(),
            PageRequest::new(None, Some(10), None, 10)?,
        )
        .await?;
        Some(
            page.items
                .into_iter()
                .map(|e| EventRow {
                    at: when(e.created_at),
                    action: e.action,
                    target: match e.target_id {
                        Some(id) => format!("{} {id}", e.target_type),
                        None => e.target_type,
                    },
                    actor: format!("{} {}", e.actor_type, e.actor_id),
                })
                .collect(),
        )
    } else {
        None
    };
    let page = Dashboard {
        chrome: Chrome::new(&console, "Dashboard", "dashboard"),
        total: stats.total,
        by_status: Status::ALL.iter().map(|s| (s.as_str(), count_of(*s))).collect(),
        expired: count_of(Status::Expired),
        within_7: within(7),
        within_30: within(30),
        window,
        within_window: within(window as usize),
        window_error,
        timeline_total: timeline.iter().sum(),
        timeline_peak: peak,
        bars,
        cas,
        pending_issuance,
        pending_revocation,
        events,
    };
    render(&page)
}

fn health_rank(health: &str) -> u8 {
    match health {
        "unhealthy" => 0,
        "degraded" => 1,
        "healthy" => 3,
        _ => 2,
    }
}
