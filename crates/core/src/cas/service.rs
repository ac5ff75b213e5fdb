//! Use cases of the CA registry (§4.1). Every call checks the caller's scope and confines
//! itself to the caller's workspace; every change commits with its audit row and event.

use std::sync::Arc;

use serde_json::{json, Value};

use super::port::{CaReads, CaStore, CaTx};
use super::{CaFields, CaStats, CaStatus, CertificateAuthority, HealthStatus};
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::clock::{SharedClock, SharedEntropy};
use crate::crypto::MasterKey;
use crate::error::{Entity, Error, Result};
use crate::events::{CaData, CaHealthChanged, Event};
use crate::pagination::{Page, PageRequest};
use crate::pki::PkiPort;
use crate::plugins::binding::{self, RecordBinding};
use crate::plugins::record_config as secrets;
use crate::plugins::service::PluginService;
use crate::plugins::{CallTarget, CheckStatus, PkiGrant, PluginError, PluginHost, PluginInfo, PluginKind, TestReport};
use crate::ttl_cache::TtlMap;
use crate::unit_of_work::Target;
use crate::unit_of_work::UnitOfWork;
use crate::validation::bounded_text;

/// What the registry's use cases use, and nothing else of the service: the area's storage port,
/// the plugin runtime (connectors), the internal PKI (an internal CA's chain), the cache of CA
/// records issuance reads, the master key (sealed configurations), the clock and entropy.
/// `Context::ca_deps` hands it out.
#[derive(Clone)]
pub struct CaDeps {
    pub store: Arc<dyn CaStore>,
    pub plugins: PluginService,
    pub pki: Option<Arc<dyn PkiPort>>,
    /// CA records as issuance reads them, by workspace and id: kept briefly, forgotten after
    /// every committed change (see [`crate::ttl_cache`]).
    pub cas_cache: Arc<TtlMap<(String, i64), CertificateAuthority>>,
    pub master_key: MasterKey,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

impl CaDeps {
    pub(crate) fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub(crate) async fn change(
        &self,
        actor: Audit,
        workspace_id: Option<&str>,
    ) -> Result<UnitOfWork<'static, dyn CaTx>> {
        let tx = self.store.begin_cas().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}

/// The CA type served by the host's internal PKI (`pki-core`).
pub const INTERNAL: &str = "internal";

const MAX_NAME: usize = 200;
const MAX_TEXT: usize = 2000;
const MAX_PATTERNS: usize = 50;
const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// A create, PUT or PATCH body, as the API received it. `None` = absent.
#[derive(Debug, Default, Clone)]
pub struct CaInput {
    pub name: Option<String>,
    pub ca_type: Option<String>,
    pub description: Option<Option<String>>,
    pub url: Option<Option<String>>,
    pub status: Option<String>,
    pub issuer_patterns: Option<Vec<String>>,
    pub config: Option<Value>,
}

/// A CA as callers see it: configuration secrets masked.
#[derive(Debug, Clone)]
pub struct CaView {
    pub ca: CertificateAuthority,
    pub config: Value,
    /// The CA's own certificate, PEM (internal CAs; single reads only).
    pub certificate: Option<String>,
    /// The CA's chain, PEM: its own certificate first, up to and including the root (internal
    /// CAs; single reads only).
    pub chain: Vec<String>,
}

fn view(ca: CertificateAuthority) -> CaView {
    let config = secrets::masked(&ca.config);
    CaView { ca, config, certificate: None, chain: Vec::new() }
}

impl RecordBinding for CertificateAuthority {
    const KIND: PluginKind = PluginKind::CaConnector;
    const PLUGIN_NOUN: &'static str = "CA connector";
    const INSTALL_HINT: &'static str = "a connector plugin";
    const CONFIG_MEMBER: &'static str = "config";

    fn workspace_id(&self) -> &str {
        &self.workspace_id
    }
    fn service_type(&self) -> &str {
        &self.ca_type
    }
    fn stored_config(&self) -> &Value {
        &self.config
    }
    fn owner(&self) -> secrets::Owner {
        owner(self)
    }
    fn call_record_id(&self) -> String {
        self.id.to_string()
    }
    /// A CA's host is its URL; URLs inside its configuration are not (a connector reaches what
    /// the operator granted it and the CA's own endpoint).
    fn record_hosts(&self, _clear: &Value) -> Vec<String> {
        self.url.iter().cloned().collect()
    }
    /// The connector learns the CA's endpoint; an internal CA's connector gets the grant to
    /// `pki-core`, with the withheld members it may read.
    fn finish_target(&self, mut target: CallTarget, clear: Value) -> CallTarget {
        target.context.endpoint = self.url.clone();
        if self.ca_type == INTERNAL {
            target.pki = Some(PkiGrant {
                workspace_id: self.workspace_id.clone(),
                ca_id: self.id,
                withheld_config: clear,
                sign: None,
            });
        }
        target
    }
}

/// The plugin that serves `ca_type` here, or a 400 listing the types that are served.
pub fn connector_for(host: &dyn PluginHost, workspace_id: &str, ca_type: &str) -> Result<Arc<PluginInfo>> {
    binding::resolve_plugin::<CertificateAuthority>(host, workspace_id, ca_type)
}

/// The CA types a caller who may create CAs can choose from here, each with the connector that
/// serves it (its configuration schema and secret members drive the console's CA forms).
pub fn connector_types(ctx: &CaDeps, caller: &Caller) -> Result<Vec<(String, Arc<PluginInfo>)>> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let mut types: Vec<(String, Arc<PluginInfo>)> = ctx
        .plugins
        .host()
        .served_types(PluginKind::CaConnector)
        .into_iter()
        // A type served by an installed plugin the workspace has not bound (several serve it)
        // cannot be created here: it is left out rather than offered and then refused.
        .filter_map(|ca_type| {
            connector_for(ctx.plugins.host(), &workspace_id, &ca_type).ok().map(|info| (ca_type, info))
        })
        .collect();
    types.sort_by(|a, b| a.0.cmp(&b.0));
    types.dedup_by(|a, b| a.0 == b.0);
    Ok(types)
}

/// Everything a call into a CA's connector needs: the target with the clear configuration
/// (withheld members removed) and, for internal CAs, the grant to `pki-core`.
pub fn call_target(master_key: &MasterKey, ca: &CertificateAuthority, info: &PluginInfo) -> Result<CallTarget> {
    binding::call_target(master_key, ca, info)
}

/// What a CA's sealed configuration members are bound to.
pub fn owner(ca: &CertificateAuthority) -> secrets::Owner {
    secrets::Owner::new(&ca.workspace_id, "certificate_authority", ca.id)
}

/// The built-in issuer patterns of `ca_type` (§2.1): the plugin's defaults, where one written
/// `<type>:<pattern>` (a plugin serving several types) applies only to that type.
pub fn default_patterns(info: &PluginInfo, ca_type: &str) -> Vec<String> {
    info.default_issuer_patterns
        .iter()
        .filter_map(|pattern| match pattern.split_once(':') {
            Some((for_type, pattern)) if info.serves.iter().any(|t| t == for_type) => {
                (for_type == ca_type).then(|| pattern.to_owned())
            }
            _ => Some(pattern.clone()),
        })
        .collect()
}

/// The refusal of an issuance through a CA whose connector cannot issue.
pub fn cannot_issue(ca: &CertificateAuthority, info: &PluginInfo) -> Error {
    Error::UnsupportedCa(format!(
        "CA type `{}` can be registered and tested, but its connector ({}) cannot issue certificates: \
         no issuing connector for this type is installed yet",
        ca.ca_type, info.id
    ))
}

/// A connector's `invalid-config` as a 400 naming each problem under `details.config`.
pub(crate) fn config_error(err: PluginError) -> Error {
    secrets::invalid_config(err, "config")
}

fn check_type(text: &str) -> Result<String> {
    let valid = !text.is_empty()
        && text.len() <= 64
        && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !valid {
        return Err(Error::invalid_field(
            "type",
            "must be a snake_case CA type such as internal, acme or aws_private_ca",
        ));
    }
    Ok(text.to_owned())
}

fn check_url(text: &str) -> Result<String> {
    let text = text.trim();
    let parsed = url::Url::parse(text)
        .map_err(|_| Error::invalid_field("url", "must be an absolute http:// or https:// URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() || text.len() > MAX_TEXT {
        return Err(Error::invalid_field("url", "must be an absolute http:// or https:// URL"));
    }
    Ok(text.to_owned())
}

fn check_patterns(patterns: Vec<String>) -> Result<Vec<String>> {
    if patterns.len() > MAX_PATTERNS {
        return Err(Error::invalid_field("issuerPatterns", format!("at most {MAX_PATTERNS} patterns")));
    }
    patterns
        .into_iter()
        .map(|p| {
            let p = bounded_text("issuerPatterns", &p, MAX_NAME)?;
            if p.is_empty() {
                return Err(Error::invalid_field("issuerPatterns", "patterns must not be empty"));
            }
            Ok(p)
        })
        .collect()
}

fn check_config(config: Value) -> Result<Value> {
    match &config {
        Value::Object(_) if config.to_string().len() <= MAX_CONFIG_BYTES => Ok(config),
        Value::Object(_) => Err(Error::invalid_field("config", "must be at most 64 KiB")),
        Value::Null => Ok(json!({})),
        _ => Err(Error::invalid_field("config", "must be an object")),
    }
}

fn parse_status(text: &str) -> Result<CaStatus> {
    CaStatus::parse(text).ok_or_else(|| Error::invalid_field("status", "must be one of active, disconnected, error"))
}

pub async fn list(ctx: &CaDeps, caller: &Caller, page: PageRequest) -> Result<Page<CaView>> {
    caller.require(Scope::CasRead)?;
    Ok(ctx.store.list_cas(&caller.workspace_id, page).await?.map(view))
}

pub async fn stats(ctx: &CaDeps, caller: &Caller) -> Result<CaStats> {
    caller.require(Scope::CasRead)?;
    Ok(ctx.store.ca_stats(&caller.workspace_id).await?)
}

/// [`find`] for issuance: from [`CaDeps::cas_cache`] when read there lately.
pub async fn find_for_issuance(ctx: &CaDeps, workspace_id: &str, id: i64) -> Result<CertificateAuthority> {
    let key = (workspace_id.to_owned(), id);
    ctx.cas_cache
        .get_or_load(key, ctx.now_millis(), || ctx.store.find_ca(workspace_id, id))
        .await?
        .ok_or(Error::NotFound(Entity::CertificateAuthority))
}

/// Drops the CA from [`CaDeps::cas_cache`]: after every committed change to it.
fn forget(ctx: &CaDeps, workspace_id: &str, id: i64) {
    ctx.cas_cache.forget(&(workspace_id.to_owned(), id));
}

/// A CA of the caller's workspace, unmasked (for other use cases of the domain).
pub async fn find(reads: &dyn CaReads, workspace_id: &str, id: i64) -> Result<CertificateAuthority> {
    reads.find_ca(workspace_id, id).await?.ok_or(Error::NotFound(Entity::CertificateAuthority))
}

pub async fn get(ctx: &CaDeps, caller: &Caller, id: i64) -> Result<CaView> {
    caller.require(Scope::CasRead)?;
    let mut view = view(find(ctx.store.as_ref(), &caller.workspace_id, id).await?);
    if let (INTERNAL, Some(pki)) = (view.ca.ca_type.as_str(), ctx.pki.as_ref()) {
        // An internal CA whose key is not made yet (or unreadable) simply has no certificate here.
        if let Some(ca) = pki.ca_chain(id).await.ok().filter(|ca| ca.workspace_id == view.ca.workspace_id) {
            view.chain = ca.chain_der.iter().map(|der| trellis_pki::x509::to_pem(der)).collect();
            view.certificate = view.chain.first().cloned();
        }
    }
    Ok(view)
}

/// Validates the fields of a create or a full replace, with the plugin's `validate-config`.
/// Returns the fields with the secrets left out of `config`, and the configuration with them
/// in the clear: the caller seals it, bound to the record (a create knows its id only once
/// the record is inserted).
async fn resolve_fields(
    ctx: &CaDeps,
    workspace_id: &str,
    input: CaInput,
    previous: Option<&CertificateAuthority>,
) -> Result<(CaFields, Value, Arc<PluginInfo>)> {
    let name = bounded_text("name", input.name.as_deref().unwrap_or_default(), MAX_NAME)?;
    if name.is_empty() {
        return Err(Error::invalid_field("name", "is required"));
    }
    let ca_type = check_type(input.ca_type.as_deref().map(str::trim).unwrap_or_default())?;
    if let Some(previous) = previous.filter(|p| p.ca_type != ca_type) {
        if previous.ca_type == INTERNAL || ca_type == INTERNAL {
            return Err(Error::invalid_field("type", "an internal CA cannot change type (its key stays with it)"));
        }
    }
    let info = connector_for(ctx.plugins.host(), workspace_id, &ca_type)?;
    let description = input.description.flatten().map(|d| bounded_text("description", &d, MAX_TEXT)).transpose()?;
    let url = input.url.flatten().filter(|u| !u.trim().is_empty()).map(|u| check_url(&u)).transpose()?;
    let status = input.status.as_deref().map(parse_status).transpose()?.unwrap_or(CaStatus::Active);
    let issuer_patterns = match input.issuer_patterns {
        Some(patterns) => check_patterns(patterns)?,
        None => previous.map(|p| p.issuer_patterns.clone()).unwrap_or_else(|| default_patterns(&info, &ca_type)),
    };
    let pointers = secrets::secret_pointers(&info);
    let config = secrets::without_record_type(check_config(input.config.unwrap_or(Value::Null))?, &info);
    // Another type is another connector: the old one's secrets are not carried over to it.
    let same_type = previous.filter(|p| p.ca_type == ca_type);
    let before = same_type.map(|p| secrets::unseal(&p.config, &pointers, &owner(p), &ctx.master_key)).transpose()?;
    let clear = secrets::resolve_masks("config", config.clone(), before.as_ref(), &pointers)?;
    if let (Some(previous), Some(before)) = (same_type, &before) {
        secrets::refuse_kept_secrets_for_new_destinations(
            "config",
            &info,
            &pointers,
            &config,
            &clear,
            url.as_deref(),
            before,
            previous.url.as_deref(),
        )?;
    }
    // The plugin validates what it will receive: secrets in the clear, withheld ones removed.
    binding::validate_config::<CertificateAuthority>(ctx.plugins.host(), workspace_id, &info, &ca_type, &clear).await?;
    let health_status = previous.map_or(HealthStatus::Unknown, |p| p.health_status);
    let config = secrets::without_secrets(&clear, &pointers);
    Ok((CaFields { name, ca_type, description, url, status, health_status, issuer_patterns, config }, clear, info))
}

fn audit_details(ca: &CertificateAuthority) -> Value {
    json!({ "name": ca.name, "type": ca.ca_type, "url": ca.url, "status": ca.status.as_str() })
}

fn event_data(ca: &CertificateAuthority) -> CaData {
    CaData {
        ca_id: ca.id,
        name: ca.name.clone(),
        ca_type: ca.ca_type.clone(),
        status: ca.status.as_str(),
        health_status: ca.health_status.as_str(),
    }
}

/// Creates a CA: validates, stores (secrets sealed), runs the connector's `setup` (an internal
/// CA's key and certificate are made here), then records it. A failed setup leaves nothing.
pub async fn create(ctx: &CaDeps, caller: &Caller, input: CaInput) -> Result<CaView> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let (mut fields, clear, info) = resolve_fields(ctx, &workspace_id, input, None).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let at = change.at();
    let inserted = change.tx().insert_ca(&workspace_id, &fields, at).await?;
    // Seals are bound to the record, whose id the insert just allocated; the secrets go in
    // within the same transaction, so the record is never stored without them.
    fields.config = binding::seal_config(&ctx.master_key, ctx.entropy.as_ref(), &info, clear, None, &owner(&inserted))?;
    let ca = change
        .tx()
        .update_ca(&workspace_id, inserted.id, &fields, at)
        .await?
        .ok_or(Error::NotFound(Entity::CertificateAuthority))?;
    change.commit().await?;

    let setup =
        async { ctx.plugins.host().ca_setup(&call_target(&ctx.master_key, &ca, &info)?).await.map_err(config_error) };
    if let Err(err) = setup.await {
        let mut undo = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
        undo.tx().delete_ca(&workspace_id, ca.id).await?;
        undo.commit().await?;
        forget(ctx, &workspace_id, ca.id);
        return Err(err);
    }
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    change
        .audit("ca.created", Target::new("certificate_authority", ca.id), audit_details(&ca))
        .emit(Event::CaCreated(event_data(&ca)));
    change.commit().await?;
    Ok(view(ca))
}

/// PUT (`replace`) or PATCH. PATCH keeps absent fields; PUT resets absent optional ones.
pub async fn update(ctx: &CaDeps, caller: &Caller, id: i64, input: CaInput, replace: bool) -> Result<CaView> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let existing = find(ctx.store.as_ref(), &workspace_id, id).await?;
    let merged = if replace {
        CaInput { issuer_patterns: input.issuer_patterns.or_else(|| Some(existing.issuer_patterns.clone())), ..input }
    } else {
        CaInput {
            name: input.name.or_else(|| Some(existing.name.clone())),
            ca_type: input.ca_type.or_else(|| Some(existing.ca_type.clone())),
            description: input.description.or_else(|| Some(existing.description.clone())),
            url: input.url.or_else(|| Some(existing.url.clone())),
            status: input.status.or_else(|| Some(existing.status.as_str().to_owned())),
            issuer_patterns: input.issuer_patterns,
            // A PATCH of config merges members: `{"apiKey": "new"}` keeps the others. It merges
            // over the masked configuration, so a secret it keeps is one it sends as the mask,
            // the same as a PUT's (and a `$sealed` value can only be the client's).
            config: match (input.config, secrets::masked(&existing.config)) {
                (Some(Value::Object(patch)), Value::Object(mut current)) => {
                    current.extend(patch);
                    Some(Value::Object(current))
                }
                (Some(other), _) => Some(other),
                (None, current) => Some(current),
            },
        }
    };
    let (mut fields, clear, info) = resolve_fields(ctx, &workspace_id, merged, Some(&existing)).await?;
    fields.config = binding::seal_config(
        &ctx.master_key,
        ctx.entropy.as_ref(),
        &info,
        clear,
        Some(&existing.config),
        &owner(&existing),
    )?;
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let at = change.at();
    let ca = change
        .tx()
        .update_ca(&workspace_id, id, &fields, at)
        .await?
        .ok_or(Error::NotFound(Entity::CertificateAuthority))?;
    change
        .audit("ca.updated", Target::new("certificate_authority", id), audit_details(&ca))
        .emit(Event::CaUpdated(event_data(&ca)));
    change.commit().await?;
    forget(ctx, &workspace_id, id);
    Ok(view(ca))
}

pub async fn delete(ctx: &CaDeps, caller: &Caller, id: i64) -> Result<()> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let ca = change.tx().find_ca(&workspace_id, id).await?.ok_or(Error::NotFound(Entity::CertificateAuthority))?;
    change.tx().delete_ca(&workspace_id, id).await?;
    change.audit("ca.deleted", Target::new("certificate_authority", id), audit_details(&ca));
    change.commit().await?;
    forget(ctx, &workspace_id, id);
    Ok(())
}

/// Touches `lastSync` only (§4.1).
pub async fn sync(ctx: &CaDeps, caller: &Caller, id: i64) -> Result<CaView> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let at = change.at();
    let ca =
        change.tx().touch_ca_sync(&workspace_id, id, at).await?.ok_or(Error::NotFound(Entity::CertificateAuthority))?;
    change.audit("ca.synced", Target::new("certificate_authority", id), json!({ "lastSync": at }));
    change.commit().await?;
    forget(ctx, &workspace_id, id);
    Ok(view(ca))
}

/// Health of a test report: all checks pass → healthy; passing with warnings → degraded.
fn health_of(report: &TestReport) -> HealthStatus {
    if !report.success {
        HealthStatus::Unhealthy
    } else if report.checks.iter().any(|c| matches!(c.status, CheckStatus::Warn | CheckStatus::Fail)) {
        HealthStatus::Degraded
    } else {
        HealthStatus::Healthy
    }
}

/// The connector's probe (§4.1 test). Success → `active`, failure → `error` (§3.2); a plugin
/// that cannot reach its CA is a failed probe, reported in the body, not an HTTP error.
pub async fn test(ctx: &CaDeps, caller: &Caller, id: i64) -> Result<TestReport> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let ca = find(ctx.store.as_ref(), &workspace_id, id).await?;
    let report = probe(ctx, &ca).await?;
    record_probe(ctx, &Audit::of(caller), &ca, &report).await?;
    Ok(report)
}

/// Runs `ca`'s connection test; a connector that cannot be called is a failed probe.
async fn probe(ctx: &CaDeps, ca: &CertificateAuthority) -> Result<TestReport> {
    Ok(match connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type) {
        Ok(info) => match ctx.plugins.host().ca_test_connection(&call_target(&ctx.master_key, ca, &info)?).await {
            Ok(report) => report,
            Err(err) => failed_probe(&err),
        },
        Err(err) => failed_probe(&err),
    })
}

/// What one periodic health check did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthRun {
    pub checked: u64,
    /// CAs whose status or health moved.
    pub changed: u64,
}

/// The periodic health check: probes every CA (of every workspace; `disconnected` ones are
/// left alone: an operator set them aside) not checked within `interval`, exactly as `POST
/// …/test` does (status, health, `ca.health_changed`). Each CA is claimed before it is probed,
/// so replicas running this together probe it once per interval.
pub async fn check_health(ctx: &CaDeps, interval: std::time::Duration) -> Result<HealthRun> {
    let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    let mut run = HealthRun::default();
    loop {
        let now = ctx.now_millis();
        let mut change = ctx.change(Audit::system("ca-health"), None).await?;
        let claimed = change.tx().claim_ca_health_checks(now, now.saturating_sub(interval_ms), 20).await?;
        change.commit().await?;
        if claimed.is_empty() {
            return Ok(run);
        }
        let probes = claimed.iter().map(|ca| async move { (ca, probe(ctx, ca).await) });
        for (ca, report) in futures_util::future::join_all(probes).await {
            let outcome = match report {
                Ok(report) => {
                    let moved = health_of(&report) != ca.health_status
                        || (if report.success { CaStatus::Active } else { CaStatus::Error }) != ca.status;
                    record_check(ctx, &Audit::system("ca-health"), ca, &report, false).await.map(|()| moved)
                }
                Err(err) => Err(err),
            };
            match outcome {
                Ok(moved) => {
                    run.checked += 1;
                    run.changed += u64::from(moved);
                }
                Err(err) => tracing::warn!(ca = ca.id, error = %err, "CA health check failed to run"),
            }
        }
    }
}

fn failed_probe(err: &dyn std::fmt::Display) -> TestReport {
    TestReport {
        success: false,
        message: format!("The connection test failed: {err}"),
        checks: vec![crate::plugins::Check {
            name: "connector".into(),
            status: CheckStatus::Fail,
            message: err.to_string(),
        }],
        details: json!({}),
    }
}

/// Moves status and health after a probe; `ca.health_changed` when health moved.
pub async fn record_probe(ctx: &CaDeps, actor: &Audit, ca: &CertificateAuthority, report: &TestReport) -> Result<()> {
    record_check(ctx, actor, ca, report, true).await
}

/// As [`record_probe`]; the audit row only when something moved unless `always_audit` (the
/// periodic check would otherwise fill the log with one row per CA and interval).
pub async fn record_check(
    ctx: &CaDeps,
    actor: &Audit,
    ca: &CertificateAuthority,
    report: &TestReport,
    always_audit: bool,
) -> Result<()> {
    let status = if report.success { CaStatus::Active } else { CaStatus::Error };
    let health = health_of(report);
    let mut change = ctx.change(actor.clone(), Some(&ca.workspace_id)).await?;
    let at = change.at();
    change.tx().set_ca_health(&ca.workspace_id, ca.id, status, health, at).await?;
    if always_audit || status != ca.status || health != ca.health_status {
        change.audit(
            "ca.tested",
            Target::new("certificate_authority", ca.id),
            json!({ "success": report.success, "status": status.as_str(), "healthStatus": health.as_str(),
                "message": report.message }),
        );
    }
    if health != ca.health_status {
        change.emit(Event::CaHealthChanged(CaHealthChanged {
            ca_id: ca.id,
            name: ca.name.clone(),
            previous: ca.health_status.as_str(),
            current: health.as_str(),
            status: status.as_str(),
        }));
    }
    if status != ca.status {
        let updated = CertificateAuthority { status, health_status: health, ..ca.clone() };
        change.emit(Event::CaUpdated(event_data(&updated)));
    }
    change.commit().await?;
    forget(ctx, &ca.workspace_id, ca.id);
    Ok(())
}

/// The revoked serials of the workspace's internal CAs, newest first (`GET /api/certificates/crl`).
pub async fn revoked_serials(
    ctx: &CaDeps,
    caller: &Caller,
    page: PageRequest,
) -> Result<Page<crate::pki::IssuedRecord>> {
    caller.require(Scope::CertificatesRead)?;
    Ok(ctx.store.list_workspace_revoked(&caller.workspace_id, page).await?)
}
