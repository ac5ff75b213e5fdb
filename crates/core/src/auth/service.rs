//! Use cases of authentication and tenancy.

use crate::audit::{self, Audit};
use crate::auth::AuthDeps;
use crate::auth::{parse_scopes, Actor, ApiKey, Caller, KeyKind, Role, Scope, User, Workspace};
use crate::clock::random_hex;
use crate::crypto::{hash_password, token_digest, verify_password_off_thread};
use crate::error::{Entity, Error, Result};
use crate::ids::{ApiKeyId, UserId, WorkspaceId};
use crate::principal::Principal;
use crate::unit_of_work::Target;
use crate::validation::validate_name;

pub const SESSION_COOKIE: &str = "trellis_session";
pub const SESSION_LIFETIME_SECS: i64 = 7 * 24 * 3600;
const MIN_PASSWORD_LEN: usize = 8;

/// A hash checked when the email is unknown, so that a login for a missing
/// account costs the same time as one with a wrong password.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("not-a-password", &crate::clock::OsEntropy).unwrap_or_default())
}

pub struct NewUser {
    pub email: String,
    pub password: String,
    pub first_name: String,
    pub workspace_name: String,
    pub admin: bool,
}

/// Creates a user and a workspace they own. Used by the CLI and the bootstrap.
pub async fn create_user(ctx: &AuthDeps, new: NewUser) -> Result<(User, Workspace)> {
    let email = normalize_email(&new.email)?;
    if new.password.chars().count() < MIN_PASSWORD_LEN {
        return Err(Error::invalid_field("password", format!("must be at least {MIN_PASSWORD_LEN} characters")));
    }
    let workspace_name = validate_name("workspace", &new.workspace_name)?;
    let password_hash =
        hash_password(&new.password, ctx.entropy.as_ref()).map_err(|e| Error::Internal(e.to_string()))?;
    let now = ctx.now_millis();
    let user = User {
        id: UserId::new(ctx.new_id("usr_")),
        email,
        first_name: new.first_name.trim().to_string(),
        is_admin: new.admin,
        current_workspace_id: None,
        created_at: now,
    };
    let workspace = Workspace {
        id: WorkspaceId::new(ctx.new_id("ws_")),
        name: workspace_name,
        role: Some(Role::Owner),
        created_at: now,
    };
    let system = Audit::by(Actor::System.principal(), None);
    let mut change = ctx.change(system, Some(&workspace.id)).await?;
    change.tx().insert_workspace(&workspace, None).await?;
    change.tx().insert_user(&user, &password_hash).await.map_err(|err| match err {
        crate::store_error::StoreError::Unique(_) => {
            Error::Conflict(format!("A user with email {} already exists", user.email))
        }
        other => other.into(),
    })?;
    change.tx().add_member(&workspace.id, &user.id, Role::Owner, now).await?;
    change.tx().set_current_workspace(&user.id, &workspace.id).await?;
    change.audit(
        "user.created",
        Target::new("user", &user.id),
        serde_json::json!({ "email": user.email, "admin": user.is_admin }),
    );
    change.commit().await?;
    let user = User { current_workspace_id: Some(workspace.id.clone()), ..user };
    // Invitations sent to this address before the account existed take effect now.
    super::members::redeem_invitations(ctx, &user, None).await?;
    Ok((user, workspace))
}

/// Creates the instance administrator from `TRELLIS_ADMIN_*` when no user exists yet.
pub async fn bootstrap_admin(ctx: &AuthDeps) -> Result<Option<User>> {
    let (Some(email), Some(password)) = (ctx.settings.admin_email.clone(), ctx.settings.admin_password.clone()) else {
        return Ok(None);
    };
    if ctx.store.count_users().await? > 0 {
        return Ok(None);
    }
    let (user, _) = create_user(
        ctx,
        NewUser { email, password, first_name: "Admin".into(), workspace_name: "default".into(), admin: true },
    )
    .await?;
    Ok(Some(user))
}

pub struct Session {
    pub token: String,
    pub user: User,
    pub expires_at: i64,
}

/// Checks credentials (throttled per account and address) and opens a session.
pub async fn login(
    ctx: &AuthDeps,
    email: &str,
    password: &str,
    client_address: &str,
    request_id: &str,
) -> Result<Session> {
    let now = ctx.clock.now();
    // The attempt is counted before the password is checked (one lock, no gap), so
    // concurrent guesses cannot all get past the limit.
    let reservation = ctx.login_limiter.reserve(email, client_address, now).map_err(|retry_after_secs| {
        tracing::warn!(target: "trellis::security", client_address, "login throttled");
        Error::RateLimited { retry_after_secs }
    })?;
    let email_key = email.trim().to_lowercase();
    let found = ctx.store.find_user_credentials(&email_key).await?;
    let verified = match &found {
        // A user made by OIDC sign-in has no password: checked against the dummy like a
        // missing account, so the answer's timing does not tell such accounts apart.
        Some((_, hash)) if hash.is_empty() => {
            verify_password_off_thread(password, dummy_hash()).await;
            false
        }
        Some((_, hash)) => verify_password_off_thread(password, hash).await,
        None => {
            verify_password_off_thread(password, dummy_hash()).await;
            false
        }
    };
    let (Some((user, _)), true) = (found, verified) else {
        tracing::warn!(target: "trellis::security", client_address, "login failed");
        return Err(Error::Unauthorized);
    };
    ctx.login_limiter.succeeded(reservation);
    // Break-glass: with password sign-in off, instance administrators keep it (the IdP may be
    // down or misconfigured), nobody else. Checked after the password, so the answer does not
    // tell who is an administrator.
    if ctx.settings.password_login_disabled && !user.is_admin {
        tracing::warn!(target: "trellis::security", client_address, "password login refused: turned off");
        return Err(crate::auth::oidc::OidcError::PasswordLoginDisabled.into());
    }
    // Invitations waiting for this address are redeemed at sign-in (an account made before the
    // invitation, or by a path that does not redeem, joins at its next login).
    let joined = super::members::redeem_invitations(ctx, &user, Some(request_id)).await?;
    let user = match (&user.current_workspace_id, joined.first()) {
        (None, Some(first)) => User { current_workspace_id: Some(first.clone()), ..user },
        _ => user,
    };
    let token = random_hex(ctx.entropy.as_ref(), 32);
    let now_ms = now.timestamp_millis();
    let expires_at = now_ms + SESSION_LIFETIME_SECS * 1000;
    let actor = Audit::by(Principal::user(user.id.as_str()), Some(request_id.to_string()));
    let mut change = ctx.change(actor, user.current_workspace_id.as_deref()).await?;
    change.tx().insert_session(&token_digest(&token), &user.id, now_ms, expires_at).await?;
    change.audit("auth.login", Target::kind("session"), serde_json::json!({}));
    change.commit().await?;
    Ok(Session { token, user, expires_at })
}

pub async fn logout(ctx: &AuthDeps, session_token: &str) -> Result<()> {
    let mut tx = ctx.store.begin_auth().await?;
    tx.delete_session(&token_digest(session_token)).await?;
    tx.commit().await?;
    Ok(())
}

/// Resolves a session cookie to a caller. `requested_workspace` is the
/// `X-Workspace-Id` header; without it the user's current workspace is used.
pub async fn authenticate_session(
    ctx: &AuthDeps,
    session_token: &str,
    requested_workspace: Option<&str>,
    request_id: &str,
) -> Result<(User, Caller)> {
    let user = ctx
        .store
        .find_session_user(&token_digest(session_token), ctx.now_millis())
        .await?
        .ok_or(Error::Unauthorized)?;
    let workspace_id = match requested_workspace.or(user.current_workspace_id.as_deref()) {
        Some(id) => WorkspaceId::from(id),
        None => return Err(Error::Forbidden("You are not a member of any workspace".into())),
    };
    let role = ctx
        .store
        .find_membership(&workspace_id, &user.id)
        .await?
        .ok_or_else(|| Error::Forbidden("You are not a member of this workspace".into()))?;
    let caller = Caller {
        actor: Actor::User { id: user.id.clone(), email: user.email.clone() },
        workspace_id,
        scopes: role.scopes(),
        instance_admin: user.is_admin,
        request_id: request_id.to_string(),
    };
    Ok((user, caller))
}

/// An API key as authentication reads it: its row and, for a key a user made, that user's
/// role in the key's workspace now. Kept in [`AuthDeps::api_keys`] by the key's digest for at
/// most [`crate::ttl_cache::TTL_MS`]; a change to keys or memberships through this replica
/// forgets them all once committed ([`forget_key_grants`]).
#[derive(Debug, Clone)]
pub struct KeyGrant {
    key: ApiKey,
    maker_role: Option<Role>,
}

/// Forgets every kept [`KeyGrant`]: call it after committing a change to API keys or to
/// memberships (a demoted or removed maker changes what their keys open).
pub fn forget_key_grants(ctx: &AuthDeps) {
    ctx.api_keys.forget_all();
}

/// Resolves an API key (`ck_…` or `ak_…`) to a caller bound to the key's workspace.
pub async fn authenticate_key(ctx: &AuthDeps, key: &str, request_id: &str) -> Result<Caller> {
    if !looks_like_key(key) {
        return Err(Error::Unauthorized);
    }
    // The lookup is by SHA-256 digest, so response timing reveals nothing about the key.
    let digest = token_digest(key);
    let now = ctx.now_millis();
    let grant = ctx
        .api_keys
        .get_or_load(digest.clone(), now, || load_key_grant(ctx, &digest))
        .await?
        .ok_or(Error::Unauthorized)?;
    // Last use is recorded at minute granularity, so most requests stay read-only.
    if grant.key.last_used_at.is_none_or(|at| at < now - 60_000) {
        let mut tx = ctx.store.begin_auth().await?;
        tx.touch_api_key(&grant.key.id, now).await?;
        tx.commit().await?;
        ctx.api_keys.update(&digest, |kept| kept.key.last_used_at = Some(now));
    }
    // Enforced on use as well as on creation, whatever the stored row says.
    let KeyGrant { key: api_key, maker_role } = grant;
    let scopes = api_key
        .scopes
        .into_iter()
        .filter(|scope| scope.allowed_for(api_key.kind))
        .filter(|scope| maker_role.is_none_or(|role| role.scopes().contains(scope)))
        .collect();
    Ok(Caller {
        actor: Actor::ApiKey { id: api_key.id.clone(), kind: api_key.kind, owner: api_key.created_by.map(UserId::new) },
        workspace_id: api_key.workspace_id,
        scopes,
        instance_admin: false,
        request_id: request_id.to_string(),
    })
}

async fn load_key_grant(ctx: &AuthDeps, digest: &str) -> Result<Option<KeyGrant>> {
    let Some(key) = ctx.store.find_api_key_by_hash(digest).await? else { return Ok(None) };
    // A key acts for the user who made it, so it holds no more than that user holds now: a
    // maker removed from the workspace leaves a key that opens nothing (removal also deletes
    // such keys; this covers memberships ended by any other path), and a demoted maker's key
    // loses what the new role lacks at its next request.
    let maker_role = match &key.created_by {
        Some(maker) => Some(
            ctx.store.find_membership(&key.workspace_id, &UserId::from(maker.as_str())).await?.ok_or_else(|| {
                tracing::warn!(target: "trellis::security", key = %key.id, "API key of a former member refused");
                Error::Unauthorized
            })?,
        ),
        None => None,
    };
    Ok(Some(KeyGrant { key, maker_role }))
}

fn looks_like_key(key: &str) -> bool {
    (key.starts_with("ck_") || key.starts_with("ak_"))
        && key.len() == 67
        && key[3..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn check_kind_scopes(kind: KeyKind, scopes: &[Scope]) -> Result<()> {
    match scopes.iter().find(|scope| !scope.allowed_for(kind)) {
        Some(scope) => Err(Error::invalid_field(
            "scopes",
            format!(
                "a {} key cannot carry {}: device keys attest and enroll, owners manage trust (use a client key)",
                kind.as_str(),
                scope.as_str()
            ),
        )),
        None => Ok(()),
    }
}

pub struct NewApiKey {
    pub name: String,
    pub scopes: Vec<String>,
    pub kind: KeyKind,
}

/// Creates a key in the caller's workspace and returns it with its secret, shown only now.
pub async fn create_api_key(ctx: &AuthDeps, caller: &Caller, new: NewApiKey) -> Result<(ApiKey, String)> {
    caller.require(Scope::ApiKeysWrite)?;
    let scopes = parse_scopes(&new.scopes)?;
    check_kind_scopes(new.kind, &scopes)?;
    // A key never carries more authority than its creator.
    if let Some(scope) = scopes.iter().find(|s| !caller.scopes.contains(s)) {
        return Err(Error::Forbidden(format!("You cannot grant the scope {} which you do not hold", scope.as_str())));
    }
    // A key made with a key acts for the same person as the key that made it, so removing
    // that person ends both.
    let maker = match &caller.actor {
        Actor::User { id, .. } => Some(id.to_string()),
        Actor::ApiKey { owner, .. } => owner.as_ref().map(ToString::to_string),
        Actor::System => None,
    };
    insert_api_key(ctx, &caller.workspace_id, new.name, scopes, new.kind, maker, &audit::Audit::of(caller)).await
}

/// The CLI path: the operator creates a key for any existing workspace.
pub async fn create_api_key_as_operator(
    ctx: &AuthDeps,
    workspace_id: &str,
    new: NewApiKey,
) -> Result<(ApiKey, String)> {
    if ctx.store.find_workspace(workspace_id).await?.is_none() {
        return Err(Error::NotFound(Entity::Workspace));
    }
    let scopes = parse_scopes(&new.scopes)?;
    check_kind_scopes(new.kind, &scopes)?;
    let system = Audit::by(Actor::System.principal(), None);
    insert_api_key(ctx, workspace_id, new.name, scopes, new.kind, None, &system).await
}

async fn insert_api_key(
    ctx: &AuthDeps,
    workspace_id: &str,
    name: String,
    scopes: Vec<Scope>,
    kind: KeyKind,
    created_by: Option<String>,
    actor: &Audit,
) -> Result<(ApiKey, String)> {
    let name = validate_name("name", &name)?;
    let secret = format!("{}{}", kind.prefix(), random_hex(ctx.entropy.as_ref(), 32));
    let now = ctx.now_millis();
    let key = ApiKey {
        id: ApiKeyId::new(ctx.new_id("key_")),
        workspace_id: WorkspaceId::from(workspace_id),
        name,
        kind,
        prefix: secret.chars().take(10).collect(),
        scopes,
        created_by,
        created_at: now,
        last_used_at: None,
    };
    let mut change = ctx.change(actor.clone(), Some(workspace_id)).await?;
    change.tx().insert_api_key(&key, &token_digest(&secret)).await?;
    let scope_names: Vec<&str> = key.scopes.iter().map(|s| s.as_str()).collect();
    change.audit(
        "api_key.created",
        Target::new("api_key", &key.id),
        serde_json::json!({ "name": key.name, "kind": kind.as_str(), "scopes": scope_names }),
    );
    change.commit().await?;
    Ok((key, secret))
}

pub async fn list_api_keys(ctx: &AuthDeps, caller: &Caller) -> Result<Vec<ApiKey>> {
    caller.require(Scope::ApiKeysRead)?;
    Ok(ctx.store.list_api_keys(&caller.workspace_id).await?)
}

pub async fn delete_api_key(ctx: &AuthDeps, caller: &Caller, key_id: &ApiKeyId) -> Result<()> {
    caller.require(Scope::ApiKeysWrite)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if !change.tx().delete_api_key(&caller.workspace_id, key_id).await? {
        return Err(Error::NotFound(Entity::ApiKey));
    }
    change.audit("api_key.deleted", Target::new("api_key", key_id), serde_json::json!({}));
    change.commit().await?;
    forget_key_grants(ctx);
    Ok(())
}

/// Workspaces the session user belongs to. API keys see only their own workspace.
pub async fn list_workspaces(ctx: &AuthDeps, caller: &Caller) -> Result<Vec<Workspace>> {
    match caller.user_id() {
        Some(user_id) => Ok(ctx.store.list_user_workspaces(user_id).await?),
        None => Ok(ctx.store.find_workspace(&caller.workspace_id).await?.into_iter().collect()),
    }
}

/// Creates a workspace owned by the session user.
pub async fn create_workspace(ctx: &AuthDeps, caller: &Caller, name: &str) -> Result<Workspace> {
    let Some(user_id) = caller.user_id() else {
        return Err(Error::Forbidden("Workspaces are created by signed-in users, not API keys".into()));
    };
    let name = validate_name("name", name)?;
    let now = ctx.now_millis();
    let workspace =
        Workspace { id: WorkspaceId::new(ctx.new_id("ws_")), name, role: Some(Role::Owner), created_at: now };
    let mut change = ctx.change(Audit::of(caller), Some(&workspace.id)).await?;
    change.tx().insert_workspace(&workspace, Some(user_id)).await?;
    change.tx().add_member(&workspace.id, user_id, Role::Owner, now).await?;
    change.audit(
        "workspace.created",
        Target::new("workspace", &workspace.id),
        serde_json::json!({ "name": workspace.name }),
    );
    change.commit().await?;
    Ok(workspace)
}

pub(crate) fn normalize_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let valid = email.len() <= 254
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.') && !domain.starts_with('.'))
        && !email.chars().any(char::is_whitespace);
    if valid {
        Ok(email)
    } else {
        Err(Error::invalid_field("email", "must be an email address like admin@example.com"))
    }
}

/// The session's user and, when they have a workspace, their caller in it. A person signed in
/// through the IdP whose groups map to no workspace yet has a session and no caller: `GET
/// /api/auth/user` answers them "no workspace yet" instead of refusing the session.
pub async fn session_user(
    ctx: &AuthDeps,
    session_token: &str,
    requested_workspace: Option<&str>,
    request_id: &str,
) -> Result<(User, Option<Caller>)> {
    if requested_workspace.is_none() {
        let user = ctx
            .store
            .find_session_user(&token_digest(session_token), ctx.now_millis())
            .await?
            .ok_or(Error::Unauthorized)?;
        if user.current_workspace_id.is_none() {
            // A membership made since (by hand, say) without a current workspace: open in it.
            let Some(first) = ctx.store.list_user_workspaces(&user.id).await?.into_iter().next() else {
                return Ok((user, None));
            };
            let (user, caller) = authenticate_session(ctx, session_token, Some(&first.id), request_id).await?;
            return Ok((user, Some(caller)));
        }
    }
    let (user, caller) = authenticate_session(ctx, session_token, requested_workspace, request_id).await?;
    Ok((user, Some(caller)))
}
