//! External integrations (spec §2.9, §4.4): `{name, type, configuration}` records served by
//! the integration plugin bound to `type` for the workspace (`slack`, `msteams`, `pagerduty`,
//! `jira`, `servicenow`, `splunk`, `datadog`, or any third party's). The plugin validates the
//! configuration; its secret members are sealed at rest and masked in every response, as a
//! CA's are. Events reach the plugin's `notify` through the same outbox worker, retry
//! schedule and delivery log as webhooks.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::crypto::MasterKey;
use crate::error::{Entity, Error, Result};
use crate::pagination::{Page, PageRequest};
use crate::plugins::binding::{self, RecordBinding};
use crate::plugins::record_config as secrets;
use crate::plugins::{CallTarget, PluginHost, PluginInfo, PluginKind, TestReport};
use crate::unit_of_work::Target;
use crate::validation::bounded_text;

use super::worker::WebhookDeps;
use super::{check_event_list, DeliveryStats, ExternalIntegration, SUCCESS_RATE_WINDOW_MS};

const MAX_NAME: usize = 200;
const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// A create, PUT or PATCH body. `None` = absent.
#[derive(Debug, Default, Clone)]
pub struct IntegrationInput {
    pub name: Option<String>,
    pub integration_type: Option<String>,
    pub configuration: Option<Value>,
    pub events: Option<Vec<String>>,
    pub enabled: Option<bool>,
}

/// An integration as callers see it: secrets masked, with its rolling success rate.
#[derive(Debug, Clone)]
pub struct IntegrationView {
    pub integration: ExternalIntegration,
    pub configuration: Value,
    pub stats: DeliveryStats,
}

impl RecordBinding for ExternalIntegration {
    const KIND: PluginKind = PluginKind::Integration;
    const PLUGIN_NOUN: &'static str = "integration plugin";
    const INSTALL_HINT: &'static str = "an integration plugin";
    const CONFIG_MEMBER: &'static str = "configuration";

    fn workspace_id(&self) -> &str {
        &self.workspace_id
    }
    fn service_type(&self) -> &str {
        &self.integration_type
    }
    fn stored_config(&self) -> &Value {
        &self.config
    }
    fn owner(&self) -> secrets::Owner {
        owner(&self.workspace_id, &self.id)
    }
    fn call_record_id(&self) -> String {
        self.id.clone()
    }
}

/// The plugin serving `integration_type` here, or a 400 listing the served types.
pub fn plugin_for(host: &dyn PluginHost, workspace_id: &str, integration_type: &str) -> Result<Arc<PluginInfo>> {
    binding::resolve_plugin::<ExternalIntegration>(host, workspace_id, integration_type)
}

/// A call into the integration's plugin: clear configuration, the record's URLs reachable.
pub fn call_target(master_key: &MasterKey, integration: &ExternalIntegration, info: &PluginInfo) -> Result<CallTarget> {
    binding::call_target(master_key, integration, info)
}

/// What an integration's sealed configuration members are bound to.
fn owner(workspace_id: &str, id: &str) -> secrets::Owner {
    secrets::Owner::new(workspace_id, "integration", id)
}

fn check_type(text: &str) -> Result<String> {
    let text = text.trim();
    let valid = !text.is_empty()
        && text.len() <= 64
        && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !valid {
        return Err(Error::invalid_field("type", "must be an integration type such as slack, pagerduty or jira"));
    }
    Ok(text.to_owned())
}

fn view(integration: ExternalIntegration, stats: DeliveryStats) -> IntegrationView {
    let configuration = secrets::masked(&integration.config);
    IntegrationView { integration, configuration, stats }
}

async fn with_stats(
    ctx: &WebhookDeps,
    items: Vec<ExternalIntegration>,
    workspace_id: &str,
) -> Result<Vec<IntegrationView>> {
    let ids: Vec<String> = items.iter().map(|i| i.id.clone()).collect();
    let since = ctx.now_millis() - SUCCESS_RATE_WINDOW_MS;
    let stats =
        if ids.is_empty() { Vec::new() } else { ctx.store.reads().delivery_stats(workspace_id, &ids, since).await? };
    Ok(items
        .into_iter()
        .map(|i| {
            let s = stats.iter().find(|(id, _)| *id == i.id).map(|(_, s)| *s).unwrap_or_default();
            view(i, s)
        })
        .collect())
}

pub async fn list(ctx: &WebhookDeps, caller: &Caller, page: PageRequest) -> Result<Page<IntegrationView>> {
    caller.require(Scope::IntegrationsRead)?;
    let Page { items, total, total_exact, request } =
        ctx.store.reads().list_integrations(&caller.workspace_id, page).await?;
    let items = with_stats(ctx, items, &caller.workspace_id).await?;
    Ok(Page { items, total, total_exact, request })
}

async fn find(ctx: &WebhookDeps, workspace_id: &str, id: &str) -> Result<ExternalIntegration> {
    ctx.store.reads().find_integration(workspace_id, id).await?.ok_or(Error::NotFound(Entity::ExternalIntegration))
}

pub async fn get(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<IntegrationView> {
    caller.require(Scope::IntegrationsRead)?;
    let integration = find(ctx, &caller.workspace_id, id).await?;
    let mut views = with_stats(ctx, vec![integration], &caller.workspace_id).await?;
    views.pop().ok_or(Error::NotFound(Entity::ExternalIntegration))
}

/// Name, type, configuration (sealed bound to integration `id`, validated by the plugin) and
/// events of a create or a full replace; `previous` lets masked secrets stand for the stored
/// ones.
async fn resolve(
    ctx: &WebhookDeps,
    workspace_id: &str,
    id: &str,
    input: IntegrationInput,
    previous: Option<&ExternalIntegration>,
) -> Result<(String, String, Value, Vec<String>)> {
    let name = bounded_text("name", input.name.as_deref().unwrap_or_default(), MAX_NAME)?;
    if name.is_empty() {
        return Err(Error::invalid_field("name", "is required"));
    }
    let integration_type = check_type(input.integration_type.as_deref().unwrap_or_default())?;
    let info = plugin_for(ctx.plugins.host(), workspace_id, &integration_type)?;
    let configuration = match input.configuration.unwrap_or(Value::Null) {
        Value::Null => json!({}),
        config @ Value::Object(_) if config.to_string().len() <= MAX_CONFIG_BYTES => config,
        Value::Object(_) => return Err(Error::invalid_field("configuration", "must be at most 64 KiB")),
        _ => return Err(Error::invalid_field("configuration", "must be an object")),
    };
    let pointers = secrets::secret_pointers(&info);
    // Another type is another plugin: the old one's secrets are not carried over to it.
    let same_type = previous.filter(|p| p.integration_type == integration_type);
    let before = same_type
        .map(|p| secrets::unseal(&p.config, &pointers, &owner(workspace_id, &p.id), &ctx.master_key))
        .transpose()?;
    let clear = secrets::resolve_masks("configuration", configuration.clone(), before.as_ref(), &pointers)?;
    if let Some(before) = &before {
        secrets::refuse_kept_secrets_for_new_destinations(
            "configuration",
            &info,
            &pointers,
            &configuration,
            &clear,
            None,
            before,
            None,
        )?;
    }
    // The plugin validates what it will receive: secrets in the clear, withheld ones removed.
    binding::validate_config::<ExternalIntegration>(ctx.plugins.host(), workspace_id, &info, &integration_type, &clear)
        .await?;
    let sealed = binding::seal_config(
        &ctx.master_key,
        ctx.entropy.as_ref(),
        &info,
        clear,
        same_type.map(|p| &p.config),
        &owner(workspace_id, id),
    )?;
    let events = match input.events {
        Some(events) => check_event_list("events", Some(events), true)?,
        None => previous.map(|p| p.events.clone()).unwrap_or_else(|| vec!["*".to_owned()]),
    };
    Ok((name, integration_type, sealed, events))
}

fn audit_details(integration: &ExternalIntegration) -> Value {
    json!({ "name": integration.name, "type": integration.integration_type, "events": integration.events, "enabled": integration.enabled })
}

pub async fn create(ctx: &WebhookDeps, caller: &Caller, input: IntegrationInput) -> Result<IntegrationView> {
    caller.require(Scope::IntegrationsWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let enabled = input.enabled.unwrap_or(true);
    // The id comes first: the configuration's secrets are sealed bound to it.
    let id = ctx.new_id("int_");
    let (name, integration_type, config, events) = resolve(ctx, &workspace_id, &id, input, None).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let at = change.at();
    let integration = ExternalIntegration {
        id,
        workspace_id,
        name,
        integration_type,
        events,
        config,
        enabled,
        disabled_reason: None,
        failing_since: None,
        created_at: at,
        updated_at: at,
        subscribed_at: at,
    };
    change.tx().webhooks().insert_integration(&integration).await?;
    change.audit("integration.created", Target::new("integration", &integration.id), audit_details(&integration));
    change.commit().await?;
    Ok(view(integration, DeliveryStats::default()))
}

/// PATCH (`replace = false`: absent members keep their value; configuration members merge)
/// or PUT (`replace = true`: the body is the whole record).
pub async fn update(
    ctx: &WebhookDeps,
    caller: &Caller,
    id: &str,
    mut input: IntegrationInput,
    replace: bool,
) -> Result<IntegrationView> {
    caller.require(Scope::IntegrationsWrite)?;
    let mut integration = find(ctx, &caller.workspace_id, id).await?;
    if !replace {
        input.name = input.name.or_else(|| Some(integration.name.clone()));
        input.integration_type = input.integration_type.or_else(|| Some(integration.integration_type.clone()));
        input.configuration = Some(match (input.configuration.take(), secrets::masked(&integration.config)) {
            (Some(Value::Object(patch)), Value::Object(mut current)) => {
                current.extend(patch);
                Value::Object(current)
            }
            (Some(other), _) => other,
            (None, current) => current,
        });
    }
    let enabled = input.enabled;
    let (was_enabled, old_events) = (integration.enabled, integration.events.clone());
    let (name, integration_type, config, events) =
        resolve(ctx, &caller.workspace_id, id, input, Some(&integration)).await?;
    integration.name = name;
    integration.integration_type = integration_type;
    integration.config = config;
    integration.events = events;
    if let Some(enabled) = enabled {
        if enabled && !integration.enabled {
            integration.disabled_reason = None;
            integration.failing_since = None;
        }
        if !enabled && integration.enabled {
            integration.disabled_reason = Some("disabled by a user".into());
        }
        integration.enabled = enabled;
    }
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    integration.updated_at = change.at();
    if super::resubscribed(was_enabled, &old_events, integration.enabled, &integration.events) {
        integration.subscribed_at = integration.updated_at;
    }
    if !change.tx().webhooks().update_integration(&integration).await? {
        return Err(Error::NotFound(Entity::ExternalIntegration));
    }
    change.audit("integration.updated", Target::new("integration", &integration.id), audit_details(&integration));
    change.commit().await?;
    get(ctx, caller, id).await
}

pub async fn delete(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<()> {
    caller.require(Scope::IntegrationsWrite)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    if !change.tx().webhooks().delete_integration(&caller.workspace_id, id, at).await? {
        return Err(Error::NotFound(Entity::ExternalIntegration));
    }
    change.audit("integration.deleted", Target::new("integration", id), json!({}));
    change.commit().await
}

/// Runs the plugin's `test` (a harmless message to the external system) and reports each check.
pub async fn test(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<TestReport> {
    caller.require(Scope::IntegrationsWrite)?;
    let integration = find(ctx, &caller.workspace_id, id).await?;
    let info = plugin_for(ctx.plugins.host(), &caller.workspace_id, &integration.integration_type)?;
    let mut target = call_target(&ctx.master_key, &integration, &info)?;
    target.context.request_id = caller.request_id.clone();
    let report = match ctx.plugins.host().integration_test(&target).await {
        Ok(report) => report,
        Err(err) => TestReport::failed_call(&err),
    };
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    change.audit("integration.tested", Target::new("integration", id), json!({ "success": report.success }));
    change.commit().await?;
    Ok(report)
}
