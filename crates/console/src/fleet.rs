//! `/plugins` (instance administrators: installed plugins, their versions, what they serve and
//! their egress grants, the workspace's bindings, roll back) and `/attestation` (devices and
//! attestation policies). The use cases are the API's `plugins::service` and `attestation::*`.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use trellis_core::attestation::{devices, policies};
use trellis_core::auth::Scope;
use trellis_core::context::SharedContext;
use trellis_core::pagination::PageRequest;
use trellis_core::plugins::service as plugins;

use crate::page::{render, see_other, when, Chrome, PageError};
use crate::session::{Console, Posted};

pub struct PluginRow {
    pub id: String,
    pub name: String,
    pub kind: &'static str,
    pub active: String,
    pub versions: String,
    pub serves: String,
    pub hosts: String,
    pub can_roll_back: bool,
}

#[derive(Template)]
#[template(path = "plugins.html")]
struct PluginsPage {
    chrome: Chrome,
    csrf: String,
    plugins: Vec<PluginRow>,
    bindings: Vec<(String, String, String)>,
}

pub async fn plugins_list(State(ctx): State<SharedContext>, console: Console) -> Result<Response, PageError> {
    let rows = plugins::list(&ctx, &console.caller)?
        .into_iter()
        .map(|p| {
            let active = p.versions.iter().find(|v| v.active);
            PluginRow {
                serves: active.map(|v| v.info.serves.join(", ")).unwrap_or_default(),
                versions: p.versions.iter().map(|v| v.info.version.to_string()).collect::<Vec<_>>().join(", "),
                hosts: if p.granted_hosts.is_empty() { "none".into() } else { p.granted_hosts.join(", ") },
                can_roll_back: !p.previous_versions.is_empty(),
                active: p.active_version.unwrap_or_else(|| "none".into()),
                kind: p.kind.as_str(),
                name: p.name,
                id: p.id,
            }
        })
        .collect();
    let bindings = if console.can(Scope::PluginsRead) {
        plugins::list_bindings(&ctx, &console.caller)
            .await?
            .into_iter()
            .map(|b| (b.kind, b.service_type, b.plugin_id))
            .collect()
    } else {
        Vec::new()
    };
    render(&PluginsPage {
        chrome: Chrome::new(&console, "Plugins", "plugins"),
        csrf: console.csrf.clone(),
        plugins: rows,
        bindings,
    })
}

#[derive(Deserialize)]
pub struct Empty {}

pub async fn roll_back(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, Empty {}): Posted<Empty>,
) -> Result<Response, PageError> {
    plugins::rollback(&ctx, &console.caller, id.trim()).await?;
    Ok(see_other("/plugins"))
}

pub struct DeviceRow {
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
    let devices = devices::list(&ctx, caller, PageRequest::new(None, Some(100), None, 100)?)
        .await?
        .items
        .into_iter()
        .map(|d| DeviceRow {
            name: d.name,
            device_type: d.device_type.unwrap_or_default(),
            status: d.status.as_str(),
            manufacturer: d.ek_manufacturer.unwrap_or_default(),
            created: when(d.created_at),
        })
        .collect();
    let policies = policies::list(&ctx, caller, None)
        .await?
        .into_iter()
        .map(|p| (p.name, p.device_type.unwrap_or_default(), p.required_pcr_banks.join(", ")))
        .collect();
    render(&AttestationPage { chrome: Chrome::new(&console, "Attestation", "attestation"), devices, policies })
}
