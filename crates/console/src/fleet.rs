//! `/plugins` (instance administrators: installed plugins, their versions, what they serve and
//! their egress grants, the workspace's bindings, roll back) and `/attestation` (devices and
//! attestation policies; a device's page with its attestation history and each failure's
//! reasons). The use cases are the API's `plugins::service` and `attestation::*`.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use trellis_core::attestation::{devices, policies, provision};
use trellis_core::auth::Scope;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::pagination::PageRequest;
use trellis_core::plugins::service as plugins;
use trellis_core::plugins::{Capabilities, PluginKind};
use trellis_http::error::ApiError;

use trellis_http::extract::numeric_id;

use crate::page::{render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

pub struct VersionRow {
    pub version: String,
    pub active: bool,
    pub signer: String,
}

pub struct PluginRow {
    pub id: String,
    pub name: String,
    pub kind: &'static str,
    pub versions: Vec<VersionRow>,
    pub serves: String,
    /// What the active version declares it can do (connectors: issue, revoke, …).
    pub capabilities: String,
    /// Hosts the active version asks for, and hosts the operator granted.
    pub declared_hosts: String,
    pub hosts: String,
    pub can_roll_back: bool,
}

/// What an action on the page ended with, shown above it.
pub struct Notice {
    pub ok: bool,
    pub message: String,
    /// An upload's signature status, in words.
    pub signature: Option<String>,
}

impl Notice {
    pub fn refused(message: String) -> Notice {
        Notice { ok: false, message, signature: None }
    }
}

#[derive(Template)]
#[template(path = "plugins.html")]
struct PluginsPage {
    chrome: Chrome,
    csrf: String,
    plugins: Vec<PluginRow>,
    bindings: Vec<(String, String, String)>,
    /// The workspace's owners choose its bindings (`plugins:write`).
    can_bind: bool,
    kinds: [&'static str; 4],
    notice: Option<Notice>,
}

fn capabilities(kind: PluginKind, c: &Capabilities) -> String {
    if kind != PluginKind::CaConnector {
        return "—".into();
    }
    let named = [
        (c.issue, "issue"),
        (c.revoke, "revoke"),
        (c.discover, "discover"),
        (c.renew, "renew"),
        (c.renewal_info, "renewal info (ARI)"),
    ];
    let on: Vec<&str> = named.iter().filter(|(yes, _)| *yes).map(|(_, name)| *name).collect();
    if on.is_empty() {
        "none".into()
    } else {
        on.join(", ")
    }
}

fn listed(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// The plugins page, with what the last action ended with (`notice`) and its status.
pub async fn plugins_page(
    ctx: &SharedContext,
    console: &Console,
    notice: Option<Notice>,
    status: StatusCode,
) -> Result<Response, PageError> {
    let rows = plugins::list(&ctx.plugin_deps(), &console.caller)?
        .into_iter()
        .map(|p| {
            let active = p.versions.iter().find(|v| v.active);
            PluginRow {
                serves: active.map(|v| v.info.serves.join(", ")).unwrap_or_default(),
                capabilities: active.map_or_else(|| "—".into(), |v| capabilities(p.kind, &v.info.capabilities)),
                declared_hosts: active.map_or_else(|| "none".into(), |v| listed(&v.info.outbound_hosts)),
                versions: p
                    .versions
                    .iter()
                    .map(|v| VersionRow {
                        version: v.info.version.to_string(),
                        active: v.active,
                        signer: v.signer_key_id.clone().unwrap_or_else(|| "unsigned".into()),
                    })
                    .collect(),
                hosts: listed(&p.granted_hosts),
                can_roll_back: !p.previous_versions.is_empty(),
                kind: p.kind.as_str(),
                name: p.name,
                id: p.id,
            }
        })
        .collect();
    let bindings = if console.can(Scope::PluginsRead) {
        plugins::list_bindings(&ctx.plugin_deps(), &console.caller)
            .await?
            .into_iter()
            .map(|b| (b.kind, b.service_type, b.plugin_id))
            .collect()
    } else {
        Vec::new()
    };
    let page = PluginsPage {
        chrome: Chrome::new(console, "Plugins", "plugins"),
        csrf: console.csrf.clone(),
        plugins: rows,
        bindings,
        can_bind: console.can(Scope::PluginsWrite),
        kinds: ["ca-connector", "integration", "attestation-verifier", "issuance-policy"],
        notice,
    };
    let html = page.render().map_err(|err| PageError::from(Error::Internal(format!("template: {err}"))))?;
    Ok((status, Html(html)).into_response())
}

pub async fn plugins_list(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    plugins_page(&ctx, &console, None, StatusCode::OK).await
}

#[derive(Deserialize)]
pub struct Empty {}

pub async fn roll_back(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    plugins::rollback(&ctx.plugin_deps(), &console.caller, id.trim()).await?;
    Ok(see_other("/plugins"))
}

/// A refusal of the use case in words on the page (a 4xx), or the error page for the rest.
async fn refused_on_page(ctx: &SharedContext, console: &Console, err: Error) -> Result<Response, PageError> {
    let status = trellis_http::error::status_of(&err);
    if status.is_server_error() || status == StatusCode::FORBIDDEN {
        return Err(err.into());
    }
    let message = ApiError::Domain(err).message();
    plugins_page(ctx, console, Some(Notice::refused(message)), status).await
}

pub async fn activate(
    State(ctx): State<SharedContext>,
    Path((id, version)): Path<(String, String)>,
    Posted(console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    match plugins::activate(&ctx.plugin_deps(), &console.caller, id.trim(), version.trim()).await {
        Ok(summary) => {
            let message = format!("{} {} is active.", summary.id, summary.active_version.unwrap_or_default());
            plugins_page(&ctx, &console, Some(Notice { ok: true, message, signature: None }), StatusCode::OK).await
        }
        Err(err) => refused_on_page(&ctx, &console, err).await,
    }
}

#[derive(Deserialize)]
pub struct BindForm {
    #[serde(default)]
    kind: String,
    #[serde(default, rename = "type")]
    service_type: String,
    #[serde(default, rename = "pluginId")]
    plugin_id: String,
}

pub async fn bind(
    State(ctx): State<SharedContext>,
    Posted(console, form): Posted<BindForm>,
) -> Result<Response, PageError> {
    let (kind, service_type, plugin_id) = (form.kind.trim(), form.service_type.trim(), form.plugin_id.trim());
    match plugins::bind(&ctx.plugin_deps(), &console.caller, kind, service_type, plugin_id).await {
        Ok(b) => {
            let message =
                format!("In this workspace, {} `{}` is now served by {}.", b.kind, b.service_type, b.plugin_id);
            plugins_page(&ctx, &console, Some(Notice { ok: true, message, signature: None }), StatusCode::OK).await
        }
        Err(err) => refused_on_page(&ctx, &console, err).await,
    }
}

pub async fn unbind(
    State(ctx): State<SharedContext>,
    Path((kind, service_type)): Path<(String, String)>,
    Posted(console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    match plugins::unbind(&ctx.plugin_deps(), &console.caller, kind.trim(), service_type.trim()).await {
        Ok(()) => {
            let message = format!("The binding of {kind} `{service_type}` was removed: its default plugin serves it.");
            plugins_page(&ctx, &console, Some(Notice { ok: true, message, signature: None }), StatusCode::OK).await
        }
        Err(err) => refused_on_page(&ctx, &console, err).await,
    }
}

pub struct DeviceRow {
    pub id: i64,
    pub name: String,
    pub device_type: String,
    pub status: &'static str,
    pub manufacturer: String,
    pub created: String,
}

#[derive(Template)]
#[template(path = "attestation.html")]
struct AttestationPage {
    chrome: Chrome,
    devices: Vec<DeviceRow>,
    policies: Vec<(String, String, String)>,
}

pub async fn attestation(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    let caller = &console.caller;
    let devices = devices::list(&ctx.attestation_deps(), caller, PageRequest::new(None, Some(100), None, 100)?)
        .await?
        .items
        .into_iter()
        .map(|d| DeviceRow {
            id: d.id,
            name: d.name,
            device_type: d.device_type.unwrap_or_default(),
            status: d.status.as_str(),
            manufacturer: d.ek_manufacturer.unwrap_or_default(),
            created: when(d.created_at),
        })
        .collect();
    let policies = policies::list(&ctx.attestation_deps(), caller, None)
        .await?
        .into_iter()
        .map(|p| (p.name, p.device_type.unwrap_or_default(), p.required_pcr_banks.join(", ")))
        .collect();
    render(&AttestationPage { chrome: Chrome::new(&console, "Attestation", "attestation"), devices, policies })
}

/// One attestation of a device, as its history shows it.
pub struct AttestationRow {
    pub at: String,
    /// `provision` (attest-and-provision), `tpm` (a recorded quote), `recorded` (attest).
    pub kind: String,
    pub passed: bool,
    pub trust_score: i64,
    pub policy: String,
    pub failures: Vec<String>,
    pub certificate_id: Option<i64>,
}

#[derive(Template)]
#[template(path = "device.html")]
struct DevicePage {
    chrome: Chrome,
    name: String,
    device_type: String,
    serial: String,
    status: &'static str,
    manufacturer: String,
    enrolled: String,
    last_attested: String,
    history: Vec<AttestationRow>,
    failed: usize,
}

/// The newest attestations a device page shows (the API's largest page).
const HISTORY_SHOWN: i64 = 100;

pub async fn device(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    let device = devices::get(&ctx.attestation_deps(), &console.caller, id).await?;
    let history: Vec<AttestationRow> = provision::history(&ctx.attestation_deps(), &console.caller, id, HISTORY_SHOWN)
        .await?
        .into_iter()
        .map(|r| AttestationRow {
            at: when(r.created_at),
            kind: r.kind,
            passed: r.passed,
            trust_score: r.trust_score,
            policy: r.policy_id.map(|p| p.to_string()).unwrap_or_default(),
            failures: r.failures,
            certificate_id: r.certificate_id,
        })
        .collect();
    render(&DevicePage {
        chrome: Chrome::new(&console, format!("Device {}", device.name), "attestation"),
        failed: history.iter().filter(|r| !r.passed).count(),
        history,
        device_type: device.device_type.unwrap_or_default(),
        serial: device.serial.unwrap_or_default(),
        status: device.status.as_str(),
        manufacturer: device.ek_manufacturer.unwrap_or_default(),
        enrolled: device.enrolled_at.map(when).unwrap_or_else(|| "not enrolled".into()),
        last_attested: device.last_attested_at.map(when).unwrap_or_else(|| "never".into()),
        name: device.name,
    })
}
