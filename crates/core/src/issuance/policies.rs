//! The workspace's issuance policies: records naming a policy type (served by an
//! `issuance-policy` plugin) with its configuration, run in order on every issuance.

use serde_json::{json, Value};

use super::IssuanceDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::{Error, Result};
use crate::plugins::binding::{self, RecordBinding};
use crate::plugins::record_config as secrets;
use crate::plugins::{Decision, EvaluationRequest, PluginKind};
use crate::unit_of_work::Target;

/// A stored policy.
#[derive(Debug, Clone, PartialEq)]
pub struct IssuancePolicy {
    pub id: i64,
    pub workspace_id: String,
    pub name: String,
    pub policy_type: String,
    /// Sealed secrets, as for CAs.
    pub config: Value,
    pub position: i64,
    pub enabled: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A policy to create.
#[derive(Debug, Clone, Default)]
pub struct NewPolicy {
    pub name: Option<String>,
    pub policy_type: Option<String>,
    pub config: Option<Value>,
    pub position: Option<i64>,
    pub enabled: Option<bool>,
}

/// Every enabled policy's decision on `request`, in order. A policy that fails (trap, timeout,
/// error) denies: policies fail closed.
pub async fn evaluate(ctx: &IssuanceDeps, workspace_id: &str, request: &EvaluationRequest) -> Result<Vec<Decision>> {
    let policies = in_force(ctx, workspace_id).await?;
    evaluate_listed(ctx, workspace_id, policies, request).await
}

/// The workspace's policies as issuance judges by them: from
/// [`IssuanceDeps::policies_cache`] when listed there lately (a create or delete
/// through this replica forgets them once committed).
pub async fn in_force(ctx: &IssuanceDeps, workspace_id: &str) -> Result<Vec<IssuancePolicy>> {
    let listed = ctx
        .policies_cache
        .get_or_load(workspace_id.to_owned(), ctx.now_millis(), || async {
            ctx.store.list_issuance_policies(workspace_id).await.map(Some)
        })
        .await?;
    Ok(listed.unwrap_or_default())
}

/// [`evaluate`] with the workspace's policies already listed (a caller judging several
/// requests of one workspace lists them once).
pub async fn evaluate_listed(
    ctx: &IssuanceDeps,
    workspace_id: &str,
    policies: Vec<IssuancePolicy>,
    request: &EvaluationRequest,
) -> Result<Vec<Decision>> {
    let mut decisions = Vec::with_capacity(policies.len());
    for policy in policies.into_iter().filter(|p| p.enabled) {
        let decision = async {
            let info = ctx.plugins.host().serving(workspace_id, PluginKind::IssuancePolicy, &policy.policy_type)?;
            let target = binding::call_target(&ctx.master_key, &policy, &info)?;
            Ok::<_, Error>(ctx.plugins.host().policy_evaluate(&target, request).await?)
        }
        .await;
        decisions.push(decision.unwrap_or_else(|err| Decision::failed(&policy.name, &err)));
    }
    Ok(decisions)
}

/// What a policy's sealed configuration members are bound to.
fn owner(policy: &IssuancePolicy) -> secrets::Owner {
    secrets::Owner::new(&policy.workspace_id, "issuance_policy", policy.id)
}

impl RecordBinding for IssuancePolicy {
    const KIND: PluginKind = PluginKind::IssuancePolicy;
    const PLUGIN_NOUN: &'static str = "issuance policy";
    const INSTALL_HINT: &'static str = "an issuance policy plugin";
    const CONFIG_MEMBER: &'static str = "config";

    fn workspace_id(&self) -> &str {
        &self.workspace_id
    }
    fn service_type(&self) -> &str {
        &self.policy_type
    }
    fn stored_config(&self) -> &Value {
        &self.config
    }
    fn owner(&self) -> secrets::Owner {
        owner(self)
    }
    /// `policy-<id>`: a policy's plugin state is kept apart from a CA's of the same id.
    fn call_record_id(&self) -> String {
        format!("policy-{}", self.id)
    }
}

pub async fn list(ctx: &IssuanceDeps, caller: &Caller) -> Result<Vec<IssuancePolicy>> {
    caller.require(Scope::CasRead)?;
    Ok(ctx.store.list_issuance_policies(&caller.workspace_id).await?)
}

/// Adds a policy (its type must be served; its configuration is validated by the plugin).
pub async fn create(ctx: &IssuanceDeps, caller: &Caller, new: NewPolicy) -> Result<IssuancePolicy> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let name = new
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.len() <= 200)
        .ok_or_else(|| Error::invalid_field("name", "is required (at most 200 characters)"))?
        .to_owned();
    let policy_type = new
        .policy_type
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::invalid_field("type", "is required"))?
        .to_owned();
    let info = binding::resolve_plugin::<IssuancePolicy>(ctx.plugins.host(), &workspace_id, &policy_type)?;
    let config = match new.config.unwrap_or_else(|| json!({})) {
        Value::Object(map) => Value::Object(map),
        _ => return Err(Error::invalid_field("config", "must be an object")),
    };
    let pointers = secrets::secret_pointers(&info);
    let clear = secrets::resolve_masks("config", config, None, &pointers)?;
    binding::validate_config::<IssuancePolicy>(ctx.plugins.host(), &workspace_id, &info, &policy_type, &clear).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let at = change.at();
    let policy = IssuancePolicy {
        id: 0,
        workspace_id: workspace_id.clone(),
        name,
        policy_type,
        config: secrets::without_secrets(&clear, &pointers),
        position: new.position.unwrap_or(0),
        enabled: new.enabled.unwrap_or(true),
        created_at: at,
        updated_at: at,
    };
    let mut policy = change.tx().insert_issuance_policy(&policy).await?;
    // Seals are bound to the record, whose id the insert just allocated; the secrets go in
    // within the same transaction, so the record is never stored without them.
    if pointers.iter().any(|(pointer, _)| clear.pointer(pointer).is_some_and(|v| !v.is_null())) {
        policy.config =
            binding::seal_config(&ctx.master_key, ctx.entropy.as_ref(), &info, clear, None, &owner(&policy))?;
        change.tx().set_issuance_policy_config(&workspace_id, policy.id, &policy.config).await?;
    }
    change.audit(
        "issuance_policy.created",
        Target::new("issuance_policy", policy.id),
        json!({ "name": policy.name, "type": policy.policy_type, "position": policy.position }),
    );
    change.commit().await?;
    ctx.policies_cache.forget(&workspace_id);
    Ok(policy)
}

pub async fn delete(ctx: &IssuanceDeps, caller: &Caller, id: i64) -> Result<()> {
    caller.require(Scope::CasWrite)?;
    let workspace_id = caller.workspace_id.to_string();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    if !change.tx().delete_issuance_policy(&workspace_id, id).await? {
        return Err(Error::NotFound(crate::error::Entity::IssuancePolicy));
    }
    change.audit("issuance_policy.deleted", Target::new("issuance_policy", id), json!({}));
    change.commit().await?;
    ctx.policies_cache.forget(&workspace_id);
    Ok(())
}
