//! Webhook endpoints (spec §2.7, §4.4): create, read, update, delete, rotate the signing
//! secret, send a test. Every call checks the caller's scope and stays in their workspace.
//!
//! The signing secret is shown in full only when it is made (creation, rotation) and is
//! sealed at rest, bound to (workspace, endpoint). A rotation keeps the previous secret
//! signing beside the new one for a grace period, so receivers can switch without losing a
//! delivery.

use serde_json::json;

use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::crypto::MasterKey;
use crate::error::{Entity, Error, Result};
use crate::events::{Event, WebhookTest};
use crate::pagination::{Page, PageRequest};
use crate::unit_of_work::Target;
use crate::validation::bounded_text;

use super::deliveries::{Delivery, NewDelivery};
use super::transport::TransportError;
use super::worker::WebhookDeps;
use super::{check_event_list, signing, DeliveryStats, TargetKind, WebhookEndpoint, SUCCESS_RATE_WINDOW_MS};

const MAX_URL: usize = 2000;
const MAX_DESCRIPTION: usize = 500;
/// How long the previous secret keeps signing after a rotation, unless the caller says.
pub const DEFAULT_ROTATION_GRACE_SECS: i64 = 24 * 3600;
pub const MAX_ROTATION_GRACE_SECS: i64 = 7 * 24 * 3600;

/// A create or update body. `None` = absent (an update keeps the value).
#[derive(Debug, Default, Clone)]
pub struct WebhookInput {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub description: Option<Option<String>>,
    pub enabled: Option<bool>,
}

/// An endpoint as callers see it: no secret, with its rolling success rate.
#[derive(Debug, Clone)]
pub struct WebhookView {
    pub endpoint: WebhookEndpoint,
    pub stats: DeliveryStats,
}

/// A just-made secret, shown once.
#[derive(Debug, Clone)]
pub struct WithSecret {
    pub view: WebhookView,
    pub secret: String,
}

pub(super) fn secret_context(workspace_id: &str, id: &str) -> Vec<u8> {
    format!("trellis:webhook-secret:{workspace_id}:{id}").into_bytes()
}

/// The endpoint's valid secrets in clear, newest first (the previous one during its grace).
pub fn secrets(master_key: &MasterKey, endpoint: &WebhookEndpoint, now: i64) -> Result<Vec<String>> {
    let open = |sealed: &str| {
        master_key
            .open_bound(sealed, &secret_context(&endpoint.workspace_id, &endpoint.id))
            .map_err(|_| Error::Internal(format!("the signing secret of webhook {} does not open", endpoint.id)))
            .and_then(|bytes| String::from_utf8(bytes).map_err(|err| Error::Internal(err.to_string())))
    };
    let mut out = vec![open(&endpoint.secret_sealed)?];
    if let (Some(previous), Some(until)) = (&endpoint.previous_secret_sealed, endpoint.previous_secret_until) {
        if until > now {
            out.push(open(previous)?);
        }
    }
    Ok(out)
}

fn seal_secret(ctx: &WebhookDeps, workspace_id: &str, id: &str, secret: &str) -> String {
    ctx.master_key.seal_bound(secret.as_bytes(), &secret_context(workspace_id, id), ctx.entropy.as_ref())
}

/// An absolute `https://` URL with a host and no credentials, that the egress policy allows
/// now (the worker checks again at every delivery).
async fn check_url(ctx: &WebhookDeps, url: &str) -> Result<String> {
    let url = url.trim();
    let invalid = |problem: &str| Error::invalid_field("url", problem);
    if url.len() > MAX_URL {
        return Err(invalid("must be at most 2000 characters"));
    }
    let parsed = url::Url::parse(url).map_err(|_| invalid("must be an absolute https:// URL"))?;
    if parsed.scheme() != "https" {
        return Err(invalid("must be an absolute https:// URL (deliveries are signed, not encrypted)"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid("must name a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid("must not carry credentials; deliveries are authenticated by their signature"));
    }
    if parsed.fragment().is_some() {
        return Err(invalid("must not have a #fragment"));
    }
    match ctx.transport.vet(url).await {
        Ok(()) => Ok(url.to_owned()),
        Err(TransportError::Denied { reason, message }) => Err(Error::validation_with(
            format!("The webhook URL is not allowed: {message}"),
            json!({ "field": "url", "reason": reason }),
        )),
        Err(err) => Err(Error::validation_with(
            format!("The webhook URL cannot be used: {err}"),
            json!({ "field": "url", "reason": "unresolvable" }),
        )),
    }
}

async fn with_stats(
    ctx: &WebhookDeps,
    endpoints: Vec<WebhookEndpoint>,
    workspace_id: &str,
) -> Result<Vec<WebhookView>> {
    let ids: Vec<String> = endpoints.iter().map(|e| e.id.clone()).collect();
    let since = ctx.now_millis() - SUCCESS_RATE_WINDOW_MS;
    let stats =
        if ids.is_empty() { Vec::new() } else { ctx.store.reads().delivery_stats(workspace_id, &ids, since).await? };
    Ok(endpoints
        .into_iter()
        .map(|endpoint| {
            let stats = stats.iter().find(|(id, _)| *id == endpoint.id).map(|(_, s)| *s).unwrap_or_default();
            WebhookView { endpoint, stats }
        })
        .collect())
}

pub async fn list(ctx: &WebhookDeps, caller: &Caller, page: PageRequest) -> Result<Page<WebhookView>> {
    caller.require(Scope::IntegrationsRead)?;
    let Page { items, total, total_exact, request } =
        ctx.store.reads().list_webhooks(&caller.workspace_id, page).await?;
    let items = with_stats(ctx, items, &caller.workspace_id).await?;
    Ok(Page { items, total, total_exact, request })
}

async fn find(ctx: &WebhookDeps, workspace_id: &str, id: &str) -> Result<WebhookEndpoint> {
    ctx.store.reads().find_webhook(workspace_id, id).await?.ok_or(Error::NotFound(Entity::WebhookEndpoint))
}

pub async fn get(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<WebhookView> {
    caller.require(Scope::IntegrationsRead)?;
    let endpoint = find(ctx, &caller.workspace_id, id).await?;
    let mut views = with_stats(ctx, vec![endpoint], &caller.workspace_id).await?;
    views.pop().ok_or(Error::NotFound(Entity::WebhookEndpoint))
}

fn audit_details(endpoint: &WebhookEndpoint) -> serde_json::Value {
    json!({ "url": endpoint.url, "events": endpoint.events, "enabled": endpoint.enabled })
}

pub async fn create(ctx: &WebhookDeps, caller: &Caller, input: WebhookInput) -> Result<WithSecret> {
    caller.require(Scope::IntegrationsWrite)?;
    let events = check_event_list("events", input.events, false)?;
    let url = check_url(ctx, input.url.as_deref().unwrap_or_default()).await?;
    let description =
        input.description.flatten().map(|d| bounded_text("description", &d, MAX_DESCRIPTION)).transpose()?;
    let workspace_id = caller.workspace_id.to_string();
    let id = ctx.new_id("whk_");
    let secret = signing::new_secret(ctx.entropy.as_ref());
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let at = change.at();
    let endpoint = WebhookEndpoint {
        secret_sealed: seal_secret(ctx, &workspace_id, &id, &secret),
        id,
        workspace_id,
        url,
        description,
        events,
        previous_secret_sealed: None,
        previous_secret_until: None,
        enabled: input.enabled.unwrap_or(true),
        disabled_reason: None,
        failing_since: None,
        created_at: at,
        updated_at: at,
        subscribed_at: at,
    };
    change.tx().webhooks().insert_webhook(&endpoint).await?;
    change.audit("webhook.created", Target::new("webhook", &endpoint.id), audit_details(&endpoint));
    change.commit().await?;
    Ok(WithSecret { view: WebhookView { endpoint, stats: DeliveryStats::default() }, secret })
}

/// Changes URL, events, description or enabled. Enabling an endpoint the service switched off
/// clears its failure record.
pub async fn update(ctx: &WebhookDeps, caller: &Caller, id: &str, input: WebhookInput) -> Result<WebhookView> {
    caller.require(Scope::IntegrationsWrite)?;
    let mut endpoint = find(ctx, &caller.workspace_id, id).await?;
    let (was_enabled, old_events) = (endpoint.enabled, endpoint.events.clone());
    if input.events.is_some() {
        endpoint.events = check_event_list("events", input.events, false)?;
    }
    if let Some(url) = input.url {
        endpoint.url = check_url(ctx, &url).await?;
    }
    if let Some(description) = input.description {
        endpoint.description = description
            .map(|d| bounded_text("description", &d, MAX_DESCRIPTION))
            .transpose()?
            .filter(|d| !d.is_empty());
    }
    if let Some(enabled) = input.enabled {
        if enabled && !endpoint.enabled {
            endpoint.disabled_reason = None;
            endpoint.failing_since = None;
        }
        if !enabled && endpoint.enabled {
            endpoint.disabled_reason = Some("disabled by a user".into());
        }
        endpoint.enabled = enabled;
    }
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    endpoint.updated_at = change.at();
    if super::resubscribed(was_enabled, &old_events, endpoint.enabled, &endpoint.events) {
        endpoint.subscribed_at = endpoint.updated_at;
    }
    if !change.tx().webhooks().update_webhook(&endpoint).await? {
        return Err(Error::NotFound(Entity::WebhookEndpoint));
    }
    change.audit("webhook.updated", Target::new("webhook", &endpoint.id), audit_details(&endpoint));
    change.commit().await?;
    get(ctx, caller, id).await
}

/// Deletes the endpoint; deliveries still pending for it end `failed`.
pub async fn delete(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<()> {
    caller.require(Scope::IntegrationsWrite)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    if !change.tx().webhooks().delete_webhook(&caller.workspace_id, id, at).await? {
        return Err(Error::NotFound(Entity::WebhookEndpoint));
    }
    change.audit("webhook.deleted", Target::new("webhook", id), json!({}));
    change.commit().await
}

/// A new secret; the current one keeps signing for `grace_secs` (default one day, at most a
/// week, 0 = stop now).
pub async fn rotate_secret(
    ctx: &WebhookDeps,
    caller: &Caller,
    id: &str,
    grace_secs: Option<i64>,
) -> Result<WithSecret> {
    caller.require(Scope::IntegrationsWrite)?;
    let grace = grace_secs.unwrap_or(DEFAULT_ROTATION_GRACE_SECS);
    if !(0..=MAX_ROTATION_GRACE_SECS).contains(&grace) {
        return Err(Error::invalid_field("graceSeconds", format!("must be between 0 and {MAX_ROTATION_GRACE_SECS}")));
    }
    let mut endpoint = find(ctx, &caller.workspace_id, id).await?;
    let secret = signing::new_secret(ctx.entropy.as_ref());
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    // The previous secret is re-sealed as is: the sealed current one moves over.
    endpoint.previous_secret_sealed = (grace > 0).then(|| endpoint.secret_sealed.clone());
    endpoint.previous_secret_until = (grace > 0).then_some(at + grace * 1000);
    endpoint.secret_sealed = seal_secret(ctx, &endpoint.workspace_id, &endpoint.id, &secret);
    endpoint.updated_at = at;
    if !change.tx().webhooks().update_webhook(&endpoint).await? {
        return Err(Error::NotFound(Entity::WebhookEndpoint));
    }
    change.audit("webhook.secret_rotated", Target::new("webhook", &endpoint.id), json!({ "graceSeconds": grace }));
    change.commit().await?;
    let view = get(ctx, caller, id).await?;
    Ok(WithSecret { view, secret })
}

/// Enqueues a synthetic `webhook.test` event for this endpoint alone; returns the delivery.
pub async fn test(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<Delivery> {
    caller.require(Scope::IntegrationsWrite)?;
    let endpoint = find(ctx, &caller.workspace_id, id).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let event_id = ctx.new_id("evt_test_");
    let event = Event::WebhookTest(WebhookTest::for_endpoint(&endpoint.id));
    let event_type = event.event_type().as_str();
    let payload = super::worker::body(&event_id, &endpoint.workspace_id, event_type, &event.data()?, at);
    let new = NewDelivery {
        id: ctx.new_id("dlv_"),
        workspace_id: endpoint.workspace_id.clone(),
        target_kind: TargetKind::Webhook,
        target_id: endpoint.id.clone(),
        event_id,
        event_type: event_type.to_owned(),
        payload,
        redelivery_of: None,
        created_at: at,
    };
    let delivery = change.tx().webhooks().insert_delivery(&new).await?;
    change.audit("webhook.tested", Target::new("webhook", &endpoint.id), json!({ "deliveryId": delivery.id }));
    change.commit().await?;
    Ok(delivery)
}
