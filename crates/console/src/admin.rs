//! The workspace's administration pages: CAs (list, a CA's page with its certificate and chain,
//! its connection test run again), the audit log with filters, API keys (a new key shown once),
//! and members. Each calls the API's use case; each form is hidden from a role that cannot use
//! it and refused by the use case anyway.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use trellis_core::audit::{self, AuditFilter};
use trellis_core::auth::{self, members, KeyKind, NewApiKey, Scope};
use trellis_core::cas::service as cas;
use trellis_core::context::SharedContext;
use trellis_core::ids::ApiKeyId;
use trellis_core::pagination::PageRequest;
use trellis_core::plugins::{CheckStatus, TestReport};
use trellis_http::extract::numeric_id;

use crate::page::{render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

pub struct CaRow {
    pub id: i64,
    pub name: String,
    pub ca_type: String,
    pub status: &'static str,
    pub health: &'static str,
    pub last_sync: String,
}

#[derive(Template)]
#[template(path = "cas.html")]
struct CasPage {
    chrome: Chrome,
    cas: Vec<CaRow>,
    total: i64,
    healthy: i64,
    issued: i64,
    can_write: bool,
}

pub async fn cas_list(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    let caller = &console.caller;
    let stats = cas::stats(&ctx.ca_deps(), caller).await?;
    let cas = cas::list(&ctx.ca_deps(), caller, PageRequest::new(None, Some(100), None, 100)?)
        .await?
        .items
        .into_iter()
        .map(|view| CaRow {
            id: view.ca.id,
            name: view.ca.name,
            ca_type: view.ca.ca_type,
            status: view.ca.status.as_str(),
            health: view.ca.health_status.as_str(),
            last_sync: view.ca.last_sync.map(when).unwrap_or_default(),
        })
        .collect();
    render(&CasPage {
        chrome: Chrome::new(&console, "Certificate authorities", "cas"),
        cas,
        total: stats.total,
        healthy: stats.healthy,
        issued: stats.certificates_issued,
        can_write: console.can(Scope::CasWrite),
    })
}

pub struct CheckRow {
    pub name: String,
    pub status: &'static str,
    pub message: String,
}

#[derive(Template)]
#[template(path = "ca.html")]
struct CaPage {
    chrome: Chrome,
    ca: CaRow,
    description: String,
    url: String,
    config: String,
    chain: Vec<String>,
    can_test: bool,
    csrf: String,
    report: Option<(bool, String, Vec<CheckRow>)>,
}

fn check_status(status: &CheckStatus) -> &'static str {
    match status {
        CheckStatus::Pass => "pass",
        CheckStatus::Warn => "warn",
        CheckStatus::Fail => "fail",
        CheckStatus::Skip => "skip",
    }
}

async fn ca_page(
    ctx: &SharedContext,
    console: &Console,
    id: i64,
    report: Option<TestReport>,
) -> Result<Response, PageError> {
    let view = cas::get(&ctx.ca_deps(), &console.caller, id).await?;
    let mut chain = view.chain.clone();
    if chain.is_empty() {
        chain.extend(view.certificate.clone());
    }
    render(&CaPage {
        chrome: Chrome::new(console, format!("CA {}", view.ca.name), "cas"),
        description: view.ca.description.clone().unwrap_or_default(),
        url: view.ca.url.clone().unwrap_or_default(),
        // Secret members are already masked by the use case (`secrets::masked`).
        config: serde_json::to_string_pretty(&view.config).unwrap_or_default(),
        chain,
        can_test: console.can(Scope::CasWrite),
        csrf: console.csrf.clone(),
        report: report.map(|r| {
            let checks = r
                .checks
                .iter()
                .map(|c| CheckRow { name: c.name.clone(), status: check_status(&c.status), message: c.message.clone() })
                .collect();
            (r.success, r.message, checks)
        }),
        ca: CaRow {
            id: view.ca.id,
            status: view.ca.status.as_str(),
            health: view.ca.health_status.as_str(),
            last_sync: view.ca.last_sync.map(when).unwrap_or_default(),
            name: view.ca.name,
            ca_type: view.ca.ca_type,
        },
    })
}

pub async fn ca_show(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    ca_page(&ctx, &console, id, None).await
}

#[derive(Deserialize)]
pub struct Empty {}

/// Runs the CA's connection test again (audited and reflected in its health, as over the API)
/// and shows its checks.
pub async fn ca_test(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let report = cas::test(&ctx.ca_deps(), &console.caller, id).await?;
    ca_page(&ctx, &console, id, Some(report)).await
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditQuery {
    action: Option<String>,
    actor_id: Option<String>,
    target_type: Option<String>,
    target_id: Option<String>,
    page: Option<String>,
}

pub struct AuditRow {
    pub at: String,
    pub action: String,
    pub actor: String,
    pub target: String,
    pub request_id: String,
    pub details: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    action: String,
    actor_id: String,
    target_type: String,
    target_id: String,
    rows: Vec<AuditRow>,
    page: i64,
    next: Option<String>,
}

pub async fn audit_log(
    State(ctx): State<SharedContext>,
    console: Console,
    axum::extract::Query(query): axum::extract::Query<AuditQuery>,
) -> Result<Response, PageError> {
    let present = |v: &Option<String>| v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
    let page = query.page.as_deref().and_then(|p| p.parse::<i64>().ok()).unwrap_or(1).max(1);
    let filter = AuditFilter {
        action: present(&query.action),
        actor_id: present(&query.actor_id),
        target_type: present(&query.target_type),
        target_id: present(&query.target_id),
        ..AuditFilter::default()
    };
    let found =
        audit::list(ctx.store.as_ref(), &console.caller, filter, PageRequest::new(Some(page), Some(50), None, 50)?)
            .await?;
    let more = found.items.len() == 50;
    let rows = found
        .items
        .into_iter()
        .map(|e| AuditRow {
            at: when(e.created_at),
            action: e.action,
            actor: format!("{} {}", e.actor_type, e.actor_id),
            target: match e.target_id {
                Some(id) => format!("{} {id}", e.target_type),
                None => e.target_type,
            },
            request_id: e.request_id.unwrap_or_default(),
            details: e.details.to_string(),
        })
        .collect();
    let text = |v: &Option<String>| present(v).unwrap_or_default();
    let next = more.then(|| {
        let params = [
            ("action", text(&query.action)),
            ("actorId", text(&query.actor_id)),
            ("targetType", text(&query.target_type)),
            ("targetId", text(&query.target_id)),
        ];
        let mut parts: Vec<String> = params
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={}", crate::page::encode(v)))
            .collect();
        parts.push(format!("page={}", page + 1));
        format!("/audit?{}", parts.join("&"))
    });
    render(&AuditPage {
        chrome: Chrome::new(&console, "Audit log", "audit"),
        action: text(&query.action),
        actor_id: text(&query.actor_id),
        target_type: text(&query.target_type),
        target_id: text(&query.target_id),
        rows,
        page,
        next,
    })
}

pub struct KeyRow {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub scopes: String,
    pub created: String,
    pub last_used: String,
}

#[derive(Template)]
#[template(path = "api_keys.html")]
struct KeysPage {
    chrome: Chrome,
    csrf: String,
    can_write: bool,
    keys: Vec<KeyRow>,
    all_scopes: Vec<&'static str>,
    /// The key just created: shown this once.
    created: Option<String>,
}

async fn keys_page(ctx: &SharedContext, console: &Console, created: Option<String>) -> Result<Response, PageError> {
    let keys = auth::list_api_keys(&ctx.auth_deps(), &console.caller)
        .await?
        .into_iter()
        .map(|k| KeyRow {
            id: k.id.to_string(),
            name: k.name,
            prefix: k.prefix,
            scopes: k.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            created: when(k.created_at),
            last_used: k.last_used_at.map(when).unwrap_or_else(|| "never".into()),
        })
        .collect();
    render(&KeysPage {
        chrome: Chrome::new(console, "API keys", "api-keys"),
        csrf: console.csrf.clone(),
        can_write: console.can(Scope::ApiKeysWrite),
        keys,
        // A key can carry only what its maker holds (the use case checks it too).
        all_scopes: console.caller.scopes.iter().map(|s| s.as_str()).collect(),
        created,
    })
}

pub async fn api_keys(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    keys_page(&ctx, &console, None).await
}

#[derive(Deserialize)]
pub struct NewKeyForm {
    #[serde(default)]
    name: String,
    /// `scope=a&scope=b` is read from the raw form (serde_urlencoded has no repeated keys).
    #[serde(default)]
    scopes: String,
}

pub async fn create_api_key(
    State(ctx): State<SharedContext>,
    Posted(console, form): Posted<NewKeyForm>,
) -> Result<Response, PageError> {
    let scopes = form.scopes.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
    let (_, secret) = auth::create_api_key(
        &ctx.auth_deps(),
        &console.caller,
        NewApiKey { name: form.name, scopes, kind: KeyKind::Client },
    )
    .await?;
    // Shown in this answer only; never stored in clear, never in a URL.
    keys_page(&ctx, &console, Some(secret)).await
}

pub async fn delete_api_key(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    auth::delete_api_key(&ctx.auth_deps(), &console.caller, &ApiKeyId::from(id.as_str())).await?;
    Ok(see_other("/api-keys"))
}

pub struct MemberRow {
    pub email: String,
    pub role: &'static str,
    pub joined: String,
}

#[derive(Template)]
#[template(path = "members.html")]
struct MembersPage {
    chrome: Chrome,
    csrf: String,
    can_write: bool,
    members: Vec<MemberRow>,
    invitations: Vec<(String, String, String)>,
    roles: [&'static str; 3],
}

pub async fn members_list(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    let page = PageRequest::new(None, Some(100), None, 100)?;
    let members = members::list_members(&ctx.auth_deps(), &console.caller, page)
        .await?
        .items
        .into_iter()
        .map(|m| MemberRow { email: m.email, role: m.role.as_str(), joined: when(m.joined_at) })
        .collect();
    let invitations = if console.can(Scope::MembersWrite) {
        members::list_invitations(&ctx.auth_deps(), &console.caller, page)
            .await?
            .items
            .into_iter()
            .map(|i| (i.email, i.role.as_str().to_string(), when(i.expires_at)))
            .collect()
    } else {
        Vec::new()
    };
    render(&MembersPage {
        chrome: Chrome::new(&console, "Members", "members"),
        csrf: console.csrf.clone(),
        can_write: console.can(Scope::MembersWrite),
        members,
        invitations,
        roles: ["viewer", "member", "owner"],
    })
}

#[derive(Deserialize)]
pub struct AddMemberForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
}

pub async fn add_member(
    State(ctx): State<SharedContext>,
    Posted(console, form): Posted<AddMemberForm>,
) -> Result<Response, PageError> {
    members::add(&ctx.auth_deps(), &console.caller, &form.email, &form.role).await?;
    Ok(see_other("/members"))
}
