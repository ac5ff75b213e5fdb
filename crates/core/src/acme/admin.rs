//! Managing the ACME server through the REST API: a CA's directory settings, external account
//! binding keys, the accounts bound to the workspace. Scopes: `cas:read` to read, `cas:write` to
//! change (the directory is a property of the CA, as domain claims are of its issuance). Every
//! change is audited.

use std::collections::BTreeMap;

use serde_json::json;

use super::jws::b64;
use super::AcmeDeps;
use super::{Account, AccountStatus, DirectoryConfig, EabKey, CHALLENGE_TYPES};
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::{Entity, Error, Result};
use crate::unit_of_work::Target;

/// What binds a sealed EAB MAC key to its record (a sealed key copied to another row does not
/// open).
pub fn eab_seal_context(id: &str) -> Vec<u8> {
    format!("acme-eab:{id}").into_bytes()
}

fn acme(ctx: &AcmeDeps) -> Result<&dyn super::AcmeStore> {
    ctx.acme.as_deref().ok_or_else(|| Error::Internal("the ACME server has no store".into()))
}

/// `GET /api/certificate-authorities/{id}/acme`: the settings, or the defaults of a directory
/// never enabled.
pub async fn get_directory(ctx: &AcmeDeps, caller: &Caller, ca_id: i64) -> Result<DirectoryConfig> {
    caller.require(Scope::CasRead)?;
    let ca = crate::cas::service::find(ctx.store.as_ref(), &caller.workspace_id, ca_id).await?;
    Ok(acme(ctx)?.directory(ca.id).await?.unwrap_or_else(|| DirectoryConfig::off(ca.id, &ca.workspace_id)))
}

/// The body of `PUT /api/certificate-authorities/{id}/acme` (absent members keep their value).
#[derive(Debug, Default, Clone)]
pub struct DirectoryInput {
    pub enabled: Option<bool>,
    pub external_account_required: Option<bool>,
    pub default_template: Option<Option<String>>,
    pub profiles: Option<BTreeMap<String, String>>,
    pub challenge_types: Option<Vec<String>>,
    pub order_lifetime_seconds: Option<i64>,
}

/// `PUT /api/certificate-authorities/{id}/acme`: templates must resolve, the CA's connector
/// must issue.
pub async fn put_directory(
    ctx: &AcmeDeps,
    caller: &Caller,
    ca_id: i64,
    input: DirectoryInput,
) -> Result<DirectoryConfig> {
    caller.require(Scope::CasWrite)?;
    let ca = crate::cas::service::find(ctx.store.as_ref(), &caller.workspace_id, ca_id).await?;
    let mut config =
        acme(ctx)?.directory(ca.id).await?.unwrap_or_else(|| DirectoryConfig::off(ca.id, &ca.workspace_id));
    if let Some(enabled) = input.enabled {
        config.enabled = enabled;
    }
    if let Some(required) = input.external_account_required {
        config.external_account_required = required;
    }
    if let Some(template) = input.default_template {
        config.default_template = template.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    }
    if let Some(profiles) = input.profiles {
        if profiles.len() > 20 {
            return Err(Error::invalid_field("profiles", "at most 20 profiles"));
        }
        for name in profiles.keys() {
            let fine = !name.is_empty()
                && name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !fine {
                return Err(Error::invalid_field("profiles", format!("profile name `{name}`: letters, digits, - _ .")));
            }
        }
        config.profiles = profiles;
    }
    if let Some(types) = input.challenge_types {
        if types.is_empty() {
            return Err(Error::invalid_field("challengeTypes", "at least one challenge type"));
        }
        let mut kept = Vec::new();
        for kind in types {
            if !CHALLENGE_TYPES.contains(&kind.as_str()) {
                return Err(Error::invalid_field(
                    "challengeTypes",
                    format!("`{kind}` is not one of {CHALLENGE_TYPES:?}"),
                ));
            }
            if !kept.contains(&kind) {
                kept.push(kind);
            }
        }
        config.challenge_types = kept;
    }
    if let Some(seconds) = input.order_lifetime_seconds {
        if !(60..=30 * 86_400).contains(&seconds) {
            return Err(Error::invalid_field("orderLifetimeSeconds", "between 60 and 2592000"));
        }
        config.order_lifetime_seconds = seconds;
    }
    let templates = config.default_template.iter().chain(config.profiles.values());
    for template in templates {
        if crate::issuance::templates::resolve(&ctx.issuance, &ca.workspace_id, Some(template)).await.is_err() {
            return Err(Error::invalid_field("profiles", format!("template `{template}` does not exist")));
        }
    }
    if config.enabled {
        let connector = crate::cas::service::connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
        if !connector.capabilities.issue {
            return Err(crate::cas::service::cannot_issue(&ca, &connector));
        }
    }
    config.updated_at = ctx.now_millis();
    acme(ctx)?.put_directory(&config).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    change.audit(
        "acme.directory.update",
        Target::new("certificate_authority", ca.id),
        json!({
            "enabled": config.enabled,
            "externalAccountRequired": config.external_account_required,
            "defaultTemplate": config.default_template,
            "profiles": config.profiles,
            "challengeTypes": config.challenge_types,
            "orderLifetimeSeconds": config.order_lifetime_seconds,
        }),
    );
    change.commit().await?;
    Ok(config)
}

/// A new EAB key and its MAC key, which is shown this once.
#[derive(Debug, Clone)]
pub struct NewEabKey {
    pub key: EabKey,
    pub hmac_key: String,
}

/// `POST /api/acme/eab-keys {caId, name}`.
pub async fn create_eab_key(ctx: &AcmeDeps, caller: &Caller, ca_id: i64, name: &str) -> Result<NewEabKey> {
    caller.require(Scope::CasWrite)?;
    let name = crate::validation::bounded_text("name", name, 200)?;
    if name.is_empty() {
        return Err(Error::invalid_field("name", "is required"));
    }
    let ca = crate::cas::service::find(ctx.store.as_ref(), &caller.workspace_id, ca_id).await?;
    let id = ctx.new_id("eab_");
    let mut secret = [0u8; 32];
    ctx.entropy.fill(&mut secret);
    let mut kid = [0u8; 12];
    ctx.entropy.fill(&mut kid);
    let key = EabKey {
        hmac_sealed: ctx.master_key.seal_bound(&secret, &eab_seal_context(&id), ctx.entropy.as_ref()),
        id,
        workspace_id: caller.workspace_id.to_string(),
        ca_id: ca.id,
        name,
        key_id: format!("kid_{}", b64(&kid)),
        account_id: None,
        revoked_at: None,
        created_at: ctx.now_millis(),
    };
    acme(ctx)?.insert_eab_key(&key).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    change.audit(
        "acme.eab_key.create",
        Target::new("acme_eab_key", &key.id),
        json!({ "caId": ca.id, "name": key.name, "keyId": key.key_id }),
    );
    change.commit().await?;
    Ok(NewEabKey { key, hmac_key: b64(&secret) })
}

pub async fn list_eab_keys(ctx: &AcmeDeps, caller: &Caller) -> Result<Vec<EabKey>> {
    caller.require(Scope::CasRead)?;
    Ok(acme(ctx)?.eab_keys(&caller.workspace_id).await?)
}

/// `DELETE /api/acme/eab-keys/{id}`: the key is revoked (kept, so the account it bound still
/// names it); it binds no new account.
pub async fn revoke_eab_key(ctx: &AcmeDeps, caller: &Caller, id: &str) -> Result<()> {
    caller.require(Scope::CasWrite)?;
    if !acme(ctx)?.revoke_eab_key(&caller.workspace_id, id, ctx.now_millis()).await? {
        return Err(Error::NotFound(Entity::AcmeEabKey));
    }
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    change.audit("acme.eab_key.revoke", Target::new("acme_eab_key", id), json!({}));
    change.commit().await
}

/// An account with how many orders it made.
#[derive(Debug, Clone)]
pub struct AccountView {
    pub account: Account,
    pub orders: usize,
}

pub async fn list_accounts(ctx: &AcmeDeps, caller: &Caller) -> Result<Vec<AccountView>> {
    caller.require(Scope::CasRead)?;
    let store = acme(ctx)?;
    let mut views = Vec::new();
    for account in store.accounts(&caller.workspace_id).await? {
        let orders = store.order_ids(&account.id).await?.len();
        views.push(AccountView { account, orders });
    }
    Ok(views)
}

/// `POST /api/acme/accounts/{id}/deactivate`: the account's requests are refused from then on.
pub async fn deactivate_account(ctx: &AcmeDeps, caller: &Caller, id: &str) -> Result<AccountView> {
    caller.require(Scope::CasWrite)?;
    let store = acme(ctx)?;
    let mut account =
        store.account_in_workspace(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::AcmeAccount))?;
    account.status = AccountStatus::Deactivated;
    store.update_account(&account).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    change.audit("acme.account.deactivate", Target::new("acme_account", id), json!({}));
    change.commit().await?;
    let orders = store.order_ids(&account.id).await?.len();
    Ok(AccountView { account, orders })
}
