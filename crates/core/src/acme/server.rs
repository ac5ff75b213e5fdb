//! The ACME protocol (RFC 8555) over the store. Every POST goes through [`post`]: the JWS is
//! parsed and its header checked (algorithm, nonce consumed once in the store, `url` equal to
//! the request's, `jwk` xor `kid`), the signature verified with the account's key, then the
//! endpoint runs. Errors are [`Problem`]s, never a 5xx for what a client sent.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::jws::{b64, unb64, Jwk, Jws};
use super::problem::{Problem, ProblemType, Subproblem};
use super::AcmeDeps;
use super::{
    rfc3339, Account, AccountStatus, Authorization, AuthorizationStatus, Challenge, ChallengeStatus, DirectoryConfig,
    Identifier, Order, OrderStatus,
};
use crate::audit::Audit;
use crate::issuance::{Decision, IssueInput, Run};
use crate::principal::Principal;
use crate::unit_of_work::Target;

/// The endpoints behind `/acme/{caId}/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    NewAccount,
    Account(String),
    AccountOrders(String),
    KeyChange,
    NewOrder,
    Order(String),
    Finalize(String),
    Authorization(String),
    Challenge(String),
    Certificate(String),
    RevokeCert,
}

impl Endpoint {
    pub fn path(&self) -> String {
        match self {
            Endpoint::NewAccount => "new-account".into(),
            Endpoint::Account(id) => format!("account/{id}"),
            Endpoint::AccountOrders(id) => format!("account/{id}/orders"),
            Endpoint::KeyChange => "key-change".into(),
            Endpoint::NewOrder => "new-order".into(),
            Endpoint::Order(id) => format!("order/{id}"),
            Endpoint::Finalize(id) => format!("order/{id}/finalize"),
            Endpoint::Authorization(id) => format!("authz/{id}"),
            Endpoint::Challenge(id) => format!("chall/{id}"),
            Endpoint::Certificate(id) => format!("cert/{id}"),
            Endpoint::RevokeCert => "revoke-cert".into(),
        }
    }
}

/// What an endpoint answers (the HTTP layer adds `Replay-Nonce` and the status line).
#[derive(Debug, Clone)]
pub struct Reply {
    pub created: bool,
    pub body: ReplyBody,
    pub location: Option<String>,
    /// `Link` headers: (URL, rel).
    pub links: Vec<(String, &'static str)>,
    pub retry_after: Option<u64>,
}

#[derive(Debug, Clone)]
pub enum ReplyBody {
    Json(Value),
    /// `application/pem-certificate-chain`: leaf then chain.
    PemChain(String),
    Empty,
}

impl Reply {
    pub(crate) fn json(body: Value) -> Reply {
        Reply { created: false, body: ReplyBody::Json(body), location: None, links: Vec::new(), retry_after: None }
    }
}

fn problem(kind: ProblemType, detail: impl Into<String>) -> Problem {
    Problem::new(kind, detail)
}

fn not_found(what: &str) -> Problem {
    problem(ProblemType::NotFound, format!("{what} not found"))
}

/// `{public_url}/acme/{caId}`.
pub fn base_url(ctx: &AcmeDeps, ca_id: i64) -> String {
    format!("{}/acme/{ca_id}", ctx.settings.public_url.trim_end_matches('/'))
}

pub(super) fn store(ctx: &AcmeDeps) -> Result<&dyn super::AcmeStore, Problem> {
    ctx.acme.as_deref().ok_or_else(|| problem(ProblemType::ServerInternal, "the ACME server has no store"))
}

/// The directory's settings, when it is enabled.
pub(super) async fn enabled_directory(ctx: &AcmeDeps, ca_id: i64) -> Result<DirectoryConfig, Problem> {
    match store(ctx)?.directory(ca_id).await? {
        Some(config) if config.enabled => Ok(config),
        _ => Err(not_found("ACME directory")),
    }
}

/// `GET /acme/{caId}/directory`.
pub async fn directory(ctx: &AcmeDeps, ca_id: i64) -> Result<Value, Problem> {
    let config = enabled_directory(ctx, ca_id).await?;
    let base = base_url(ctx, ca_id);
    let mut meta = json!({ "externalAccountRequired": config.external_account_required });
    if !config.profiles.is_empty() {
        let profiles: serde_json::Map<String, Value> = config
            .profiles
            .iter()
            .map(|(name, template)| (name.clone(), json!(format!("template {template}"))))
            .collect();
        meta["profiles"] = Value::Object(profiles);
    }
    Ok(json!({
        "newNonce": format!("{base}/new-nonce"),
        "newAccount": format!("{base}/new-account"),
        "newOrder": format!("{base}/new-order"),
        "revokeCert": format!("{base}/revoke-cert"),
        "keyChange": format!("{base}/key-change"),
        "renewalInfo": format!("{base}/renewal-info"),
        "meta": meta,
    }))
}

/// Nonces: `expiry (8 bytes, big-endian milliseconds) ‖ 16 random bytes ‖ the first 16 bytes of
/// HMAC-SHA256 over both`, base64url, under a key derived from the master key (which every
/// replica holds). Handing one out costs no statement (every answer carries one); a POST's
/// nonce is checked by its MAC and expiry, then spent by one INSERT whose primary key lets it
/// happen once across replicas. Before, each answer inserted its nonce and each POST deleted
/// one: two statements per request (docs/benchmarks.md, "ACME server against OpenBao").
const NONCE_BYTES: usize = 8 + 16 + 16;

fn nonce_key(ctx: &AcmeDeps) -> ring::hmac::Key {
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &ctx.master_key.derive_key("acme-nonce"))
}

/// A fresh nonce, good on any replica until it expires or is spent.
pub async fn new_nonce(ctx: &AcmeDeps) -> Result<String, Problem> {
    store(ctx)?;
    let expires_at = ctx.now_millis() + ctx.settings.nonce_lifetime_ms;
    let mut bytes = [0u8; NONCE_BYTES];
    bytes[..8].copy_from_slice(&expires_at.to_be_bytes());
    ctx.entropy.fill(&mut bytes[8..24]);
    let tag = ring::hmac::sign(&nonce_key(ctx), &bytes[..24]);
    bytes[24..].copy_from_slice(&tag.as_ref()[..16]);
    Ok(b64(&bytes))
}

/// Spends `nonce`: true when Trellis issued it, it has not expired, and it was not spent yet.
async fn spend_nonce(ctx: &AcmeDeps, nonce: &str) -> Result<bool, Problem> {
    let Some(bytes) = unb64(nonce).filter(|b| b.len() == NONCE_BYTES) else { return Ok(false) };
    let mut tag = [0u8; 32];
    tag.copy_from_slice(ring::hmac::sign(&nonce_key(ctx), &bytes[..24]).as_ref());
    if !crate::crypto::constant_time_eq(&tag[..16], &bytes[24..]) {
        return Ok(false);
    }
    let mut expiry = [0u8; 8];
    expiry.copy_from_slice(&bytes[..8]);
    let expires_at = i64::from_be_bytes(expiry);
    if expires_at <= ctx.now_millis() {
        return Ok(false);
    }
    // Spent under its canonical spelling: the decoder accepts trailing `=`, and a replay must
    // not pass as a new string for the same nonce.
    Ok(store(ctx)?.spend_nonce(&b64(&bytes), expires_at).await?)
}

/// Forgets the expired spent nonces (the jobs tick); returns how many went.
pub async fn sweep_nonces(ctx: &AcmeDeps) -> Result<u64, Problem> {
    Ok(store(ctx)?.sweep_nonces(ctx.now_millis()).await?)
}

/// `HEAD/GET /acme/{caId}/new-nonce`: only for an enabled directory.
pub async fn nonce_for(ctx: &AcmeDeps, ca_id: i64) -> Result<String, Problem> {
    enabled_directory(ctx, ca_id).await?;
    new_nonce(ctx).await
}

/// A request whose JWS passed every check.
struct Verified {
    jws: Jws,
    /// The account of a `kid` request.
    account: Option<Account>,
}

/// The checks of RFC 8555 §6.2-6.5, in order; `needs_jwk`: newAccount and revokeCert by the
/// certificate's key sign with `jwk`, everything else with `kid`.
async fn verify(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    endpoint: &Endpoint,
    body: &[u8],
    jwk_allowed: bool,
) -> Result<Verified, Problem> {
    let jws = Jws::parse(body)?;
    jws.check_alg()?;
    let nonce = jws.header.nonce.clone().ok_or_else(|| problem(ProblemType::BadNonce, "the JWS has no nonce"))?;
    if !spend_nonce(ctx, &nonce).await? {
        return Err(problem(ProblemType::BadNonce, "the nonce is unknown, used or expired"));
    }
    let base = base_url(ctx, config.ca_id);
    let expected = format!("{base}/{}", endpoint.path());
    if jws.header.url.as_deref() != Some(expected.as_str()) {
        return Err(problem(
            ProblemType::Unauthorized,
            format!("the JWS `url` is not this request's URL ({expected})"),
        ));
    }
    match (&jws.header.jwk, &jws.header.kid) {
        (Some(_), Some(_)) => Err(problem(ProblemType::Malformed, "the JWS carries both `jwk` and `kid`")),
        (None, None) => Err(problem(ProblemType::Malformed, "the JWS carries neither `jwk` nor `kid`")),
        (Some(jwk), None) => {
            if !jwk_allowed {
                return Err(problem(ProblemType::Malformed, "this request must be signed by an account (`kid`)"));
            }
            jws.verify(jwk)?;
            Ok(Verified { jws: jws.clone(), account: None })
        }
        (None, Some(kid)) => {
            let prefix = format!("{base}/account/");
            let account = match kid.strip_prefix(&prefix) {
                Some(id) => store(ctx)?.account(config.ca_id, id).await?,
                None => None,
            };
            let account = account.ok_or_else(|| {
                problem(ProblemType::AccountDoesNotExist, format!("no account `{kid}` in this directory"))
            })?;
            jws.verify(&account.jwk)?;
            if account.status != AccountStatus::Valid {
                return Err(problem(ProblemType::Unauthorized, format!("the account is {}", account.status)));
            }
            Ok(Verified { jws: jws.clone(), account: Some(account) })
        }
    }
}

/// Every ACME POST.
pub async fn post(ctx: &AcmeDeps, ca_id: i64, endpoint: Endpoint, body: &[u8]) -> Result<Reply, Problem> {
    let config = enabled_directory(ctx, ca_id).await?;
    let jwk_allowed = matches!(endpoint, Endpoint::NewAccount | Endpoint::RevokeCert);
    let verified = verify(ctx, &config, &endpoint, body, jwk_allowed).await?;
    let base = base_url(ctx, ca_id);
    if let Endpoint::NewAccount = endpoint {
        return new_account(ctx, &config, &base, &verified.jws).await;
    }
    if let Endpoint::RevokeCert = endpoint {
        return revoke_cert(ctx, &config, verified).await;
    }
    let Some(account) = verified.account else {
        return Err(problem(ProblemType::Malformed, "this request must be signed by an account (`kid`)"));
    };
    let jws = verified.jws;
    match endpoint {
        Endpoint::Account(id) => {
            if id != account.id {
                return Err(problem(ProblemType::Unauthorized, "the account URL is not the signer's"));
            }
            update_account(ctx, &base, account, &jws).await
        }
        Endpoint::AccountOrders(id) => {
            if id != account.id {
                return Err(problem(ProblemType::Unauthorized, "the account URL is not the signer's"));
            }
            let ids = store(ctx)?.order_ids(&account.id).await?;
            Ok(Reply::json(json!({ "orders": ids.iter().map(|id| format!("{base}/order/{id}")).collect::<Vec<_>>() })))
        }
        Endpoint::KeyChange => key_change(ctx, &base, account, &jws).await,
        Endpoint::NewOrder => new_order(ctx, &config, &base, &account, &jws).await,
        Endpoint::Order(id) => {
            let order = owned_order(ctx, &config, &account, &id).await?;
            let order = refresh_order(ctx, order).await?;
            let retry_after = (order.status == OrderStatus::Processing).then_some(5);
            Ok(Reply { retry_after, ..Reply::json(order_json(&base, &order)) })
        }
        Endpoint::Finalize(id) => {
            let order = owned_order(ctx, &config, &account, &id).await?;
            finalize(ctx, &config, &base, &account, order, &jws).await
        }
        Endpoint::Authorization(id) => {
            let authz = owned_authz(ctx, &config, &account, &id).await?;
            authorization(ctx, &base, &account, authz, &jws).await
        }
        Endpoint::Challenge(id) => challenge(ctx, &config, &base, &account, &id).await,
        Endpoint::Certificate(id) => {
            let order = owned_order(ctx, &config, &account, &id).await?;
            match order.certificate_pem {
                Some(pem) if order.status == OrderStatus::Valid => Ok(Reply {
                    created: false,
                    body: ReplyBody::PemChain(pem),
                    location: None,
                    links: Vec::new(),
                    retry_after: None,
                }),
                _ => Err(not_found("certificate")),
            }
        }
        Endpoint::NewAccount | Endpoint::RevokeCert => Err(not_found("endpoint")),
    }
}

fn account_json(base: &str, account: &Account) -> Value {
    json!({
        "status": account.status,
        "contact": account.contact,
        "orders": format!("{base}/account/{}/orders", account.id),
        "createdAt": rfc3339(account.created_at),
    })
}

/// Checks `mailto:` contacts (the only scheme Trellis takes).
fn contacts(payload: &Value) -> Result<Option<Vec<String>>, Problem> {
    let Some(list) = payload.get("contact") else { return Ok(None) };
    let list = list.as_array().ok_or_else(|| problem(ProblemType::Malformed, "`contact` must be an array"))?;
    if list.len() > 10 {
        return Err(problem(ProblemType::InvalidContact, "at most 10 contacts"));
    }
    let mut out = Vec::new();
    for contact in list {
        let text = contact.as_str().ok_or_else(|| problem(ProblemType::InvalidContact, "a contact is not a string"))?;
        let Some(address) = text.strip_prefix("mailto:") else {
            return Err(problem(ProblemType::UnsupportedContact, format!("`{text}`: only mailto: contacts")));
        };
        let valid = address.len() <= 254
            && address.split_once('@').is_some_and(|(l, d)| !l.is_empty() && d.contains('.'))
            && !address.chars().any(|c| c.is_control() || c.is_whitespace() || c == ',');
        if !valid {
            return Err(problem(ProblemType::InvalidContact, format!("`{text}` is not an e-mail address")));
        }
        out.push(text.to_owned());
    }
    Ok(Some(out))
}

async fn audit(ctx: &AcmeDeps, workspace_id: &str, actor: &str, action: &str, target: Target, details: Value) {
    let actor = Audit::by(Principal::acme_account(actor), None);
    let recorded = async {
        let mut change = ctx.change(actor, Some(workspace_id)).await?;
        change.audit(action, target, details);
        change.commit().await
    }
    .await;
    if let Err(err) = recorded {
        tracing::error!(error = %err, action, "recording an ACME audit row failed");
    }
}

async fn new_account(ctx: &AcmeDeps, config: &DirectoryConfig, base: &str, jws: &Jws) -> Result<Reply, Problem> {
    let acme = store(ctx)?;
    let Some(jwk) = jws.header.jwk.clone() else {
        return Err(problem(ProblemType::Malformed, "newAccount is signed with `jwk`"));
    };
    let payload = jws.payload_json()?;
    let thumbprint = jwk.thumbprint();
    if let Some(existing) = acme.account_by_thumbprint(config.ca_id, &thumbprint).await? {
        let location = format!("{base}/account/{}", existing.id);
        return Ok(Reply { location: Some(location), ..Reply::json(account_json(base, &existing)) });
    }
    if payload.get("onlyReturnExisting").and_then(Value::as_bool) == Some(true) {
        return Err(problem(ProblemType::AccountDoesNotExist, "no account has this key"));
    }
    let contact = contacts(&payload)?.unwrap_or_default();
    if config.external_account_required && payload.get("termsOfServiceAgreed").is_some_and(|v| !v.is_boolean()) {
        return Err(problem(ProblemType::Malformed, "`termsOfServiceAgreed` must be a boolean"));
    }
    let id = ctx.new_id("acct_");
    let eab = match payload.get("externalAccountBinding") {
        Some(binding) => Some(check_eab(ctx, config, base, &jwk, binding).await?),
        None if config.external_account_required => {
            return Err(problem(
                ProblemType::ExternalAccountRequired,
                "this directory requires an external account binding (ask a Trellis administrator for an EAB key)",
            ))
        }
        None => None,
    };
    let account = Account {
        id: id.clone(),
        workspace_id: config.workspace_id.clone(),
        ca_id: config.ca_id,
        thumbprint,
        jwk,
        status: AccountStatus::Valid,
        contact,
        eab_key_id: eab.as_ref().map(|k| k.id.clone()),
        created_at: ctx.now_millis(),
    };
    if let Some(key) = &eab {
        if !acme.bind_eab_key(&key.id, &id).await? {
            return Err(problem(
                ProblemType::Unauthorized,
                "the external account binding key is already used or revoked",
            ));
        }
    }
    if let Err(err) = acme.insert_account(&account).await {
        if let Some(key) = &eab {
            acme.unbind_eab_key(&key.id, &id).await?;
        }
        return Err(err.into());
    }
    audit(
        ctx,
        &config.workspace_id,
        &id,
        "acme.account.create",
        Target::new("acme_account", &id),
        json!({ "caId": config.ca_id, "eabKeyId": account.eab_key_id, "contact": account.contact }),
    )
    .await;
    Ok(Reply {
        created: true,
        location: Some(format!("{base}/account/{id}")),
        ..Reply::json(account_json(base, &account))
    })
}

/// RFC 8555 §7.3.4: an HS256 JWS over the account key, by an EAB key of this CA's directory.
async fn check_eab(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    base: &str,
    jwk: &Jwk,
    binding: &Value,
) -> Result<super::EabKey, Problem> {
    let inner = Jws::from_value(binding)?;
    let unauthorized = |detail: &str| problem(ProblemType::Unauthorized, detail.to_owned());
    if inner.header.url.as_deref() != Some(format!("{base}/new-account").as_str()) {
        return Err(unauthorized("the external account binding's `url` is not newAccount's"));
    }
    let key_id = inner.header.kid.clone().ok_or_else(|| unauthorized("the external account binding has no `kid`"))?;
    let key = store(ctx)?
        .eab_key_by_key_id(&key_id)
        .await?
        .filter(|key| key.ca_id == config.ca_id)
        .ok_or_else(|| unauthorized("unknown external account binding key for this directory"))?;
    if key.revoked_at.is_some() {
        return Err(unauthorized("the external account binding key is revoked"));
    }
    if key.account_id.is_some() {
        return Err(unauthorized("the external account binding key is already bound to an account"));
    }
    let secret = ctx
        .master_key
        .open_bound(&key.hmac_sealed, &super::admin::eab_seal_context(&key.id))
        .map_err(|_| problem(ProblemType::ServerInternal, "the EAB key cannot be unsealed"))?;
    inner.verify_hs256(&secret)?;
    let bound = Jwk::from_value(&inner.payload_json()?)?;
    if bound.thumbprint() != jwk.thumbprint() {
        return Err(unauthorized("the external account binding is for another account key"));
    }
    Ok(key)
}

async fn update_account(ctx: &AcmeDeps, base: &str, mut account: Account, jws: &Jws) -> Result<Reply, Problem> {
    let payload = jws.payload()?;
    if payload.is_empty() {
        return Ok(Reply::json(account_json(base, &account)));
    }
    let payload: Value =
        serde_json::from_slice(&payload).map_err(|_| problem(ProblemType::Malformed, "the payload is not JSON"))?;
    let mut action = "acme.account.update";
    if let Some(contact) = contacts(&payload)? {
        account.contact = contact;
    }
    match payload.get("status").and_then(Value::as_str) {
        None => {}
        Some("deactivated") => {
            account.status = AccountStatus::Deactivated;
            action = "acme.account.deactivate";
        }
        Some(other) => return Err(problem(ProblemType::Malformed, format!("status `{other}` cannot be set"))),
    }
    store(ctx)?.update_account(&account).await?;
    audit(
        ctx,
        &account.workspace_id,
        &account.id,
        action,
        Target::new("acme_account", &account.id),
        json!({ "status": account.status, "contact": account.contact }),
    )
    .await;
    Ok(Reply::json(account_json(base, &account)))
}

/// RFC 8555 §7.3.5: the inner JWS, signed by the new key, names the account and its old key.
async fn key_change(ctx: &AcmeDeps, base: &str, mut account: Account, jws: &Jws) -> Result<Reply, Problem> {
    let inner = Jws::from_value(&jws.payload_json()?)?;
    inner.check_alg()?;
    let new_key =
        inner.header.jwk.clone().ok_or_else(|| problem(ProblemType::Malformed, "the inner JWS has no `jwk`"))?;
    if inner.header.kid.is_some() || inner.header.nonce.is_some() {
        return Err(problem(ProblemType::Malformed, "the inner JWS carries neither `kid` nor `nonce`"));
    }
    inner.verify(&new_key)?;
    if inner.header.url != jws.header.url {
        return Err(problem(ProblemType::Malformed, "the inner JWS's `url` is not the outer one's"));
    }
    let payload = inner.payload_json()?;
    let account_url = format!("{base}/account/{}", account.id);
    if payload.get("account").and_then(Value::as_str) != Some(account_url.as_str()) {
        return Err(problem(ProblemType::Malformed, "the inner payload's `account` is not the signer's"));
    }
    let old = Jwk::from_value(payload.get("oldKey").unwrap_or(&Value::Null))?;
    if old.thumbprint() != account.thumbprint {
        return Err(problem(ProblemType::Malformed, "`oldKey` is not the account's current key"));
    }
    let thumbprint = new_key.thumbprint();
    if let Some(holder) = store(ctx)?.account_by_thumbprint(account.ca_id, &thumbprint).await? {
        let mut conflict = problem(ProblemType::Conflict, "the new key is already another account's");
        conflict.location = Some(format!("{base}/account/{}", holder.id));
        return Err(conflict);
    }
    account.jwk = new_key;
    account.thumbprint = thumbprint.clone();
    store(ctx)?.update_account(&account).await?;
    audit(
        ctx,
        &account.workspace_id,
        &account.id,
        "acme.account.key_change",
        Target::new("acme_account", &account.id),
        json!({ "thumbprint": thumbprint }),
    )
    .await;
    Ok(Reply::json(account_json(base, &account)))
}

async fn owned_order(ctx: &AcmeDeps, config: &DirectoryConfig, account: &Account, id: &str) -> Result<Order, Problem> {
    store(ctx)?
        .order(config.ca_id, id)
        .await?
        .filter(|order| order.account_id == account.id)
        .ok_or_else(|| not_found("order"))
}

async fn owned_authz(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    account: &Account,
    id: &str,
) -> Result<Authorization, Problem> {
    store(ctx)?
        .authorization(config.ca_id, id)
        .await?
        .filter(|authz| authz.account_id == account.id)
        .ok_or_else(|| not_found("authorization"))
}

/// Parses an RFC 3339 time of newOrder into milliseconds.
fn parse_time(payload: &Value, name: &str) -> Result<Option<(String, i64)>, Problem> {
    let Some(value) = payload.get(name) else { return Ok(None) };
    let text = value.as_str().ok_or_else(|| problem(ProblemType::Malformed, format!("`{name}` is not a string")))?;
    let at = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|_| problem(ProblemType::Malformed, format!("`{name}` is not an RFC 3339 time")))?;
    Ok(Some((text.to_owned(), at.timestamp_millis())))
}

async fn new_order(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    base: &str,
    account: &Account,
    jws: &Jws,
) -> Result<Reply, Problem> {
    let acme = store(ctx)?;
    let payload = jws.payload_json()?;
    let now = ctx.now_millis();
    let listed = payload
        .get("identifiers")
        .and_then(Value::as_array)
        .filter(|list| !list.is_empty())
        .ok_or_else(|| problem(ProblemType::Malformed, "`identifiers` must be a non-empty array"))?;
    if listed.len() > 100 {
        return Err(problem(ProblemType::RejectedIdentifier, "at most 100 identifiers per order"));
    }
    let mut identifiers = BTreeSet::new();
    let mut rejected = Vec::new();
    for value in listed {
        match Identifier::parse(value) {
            Ok(identifier) => {
                identifiers.insert(identifier);
            }
            Err(mut refused) if !refused.subproblems.is_empty() => rejected.append(&mut refused.subproblems),
            Err(refused) => return Err(refused),
        }
    }
    if !rejected.is_empty() {
        return Err(problem(ProblemType::RejectedIdentifier, "some identifiers cannot be issued for")
            .with_subproblems(rejected));
    }
    let identifiers: Vec<Identifier> = identifiers.into_iter().collect();
    // What notBefore/notAfter do (docs/acme-server.md): a notBefore in the future is refused
    // (certificates start when issued); notAfter sets the validity, within what the template
    // and the policies allow.
    let not_before = parse_time(&payload, "notBefore")?;
    if let Some((_, at)) = &not_before {
        if *at > now + 300_000 {
            return Err(problem(ProblemType::Malformed, "`notBefore` in the future is not supported"));
        }
    }
    let not_after = parse_time(&payload, "notAfter")?;
    if let Some((_, at)) = &not_after {
        if *at <= now {
            return Err(problem(ProblemType::Malformed, "`notAfter` is in the past"));
        }
    }
    let profile = match payload.get("profile") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if config.profiles.contains_key(name) => Some(name.clone()),
        Some(other) => {
            return Err(problem(
                ProblemType::InvalidProfile,
                format!("profile {other} is not offered by this directory"),
            ))
        }
    };
    let replaces = super::renewal_info::check_replaces(ctx, config, account, &identifiers, &payload).await?;
    // Limits: orders per hour per account (an EAB key binds one account, so this is the EAB
    // key's limit too), pending authorizations per account.
    let hour_ago = now - 3_600_000;
    if acme.count_orders_since(&account.id, hour_ago).await? >= ctx.settings.orders_per_hour {
        let mut limited = problem(
            ProblemType::RateLimited,
            format!("at most {} new orders per hour per account", ctx.settings.orders_per_hour),
        );
        limited.retry_after = Some(3600);
        return Err(limited);
    }
    if acme.count_pending_authorizations(&account.id, now).await? + identifiers.len() as i64
        > ctx.settings.pending_authorizations
    {
        let mut limited = problem(
            ProblemType::RateLimited,
            format!("at most {} pending authorizations per account", ctx.settings.pending_authorizations),
        );
        limited.retry_after = Some(600);
        return Err(limited);
    }
    for identifier in &identifiers {
        let (_, wildcard) = identifier.base();
        if wildcard && !config.challenge_types.iter().any(|t| t == "dns-01") {
            return Err(problem(
                ProblemType::RejectedIdentifier,
                "wildcards need dns-01, which this directory does not offer",
            )
            .with_subproblems(vec![Subproblem {
                kind: ProblemType::RejectedIdentifier,
                detail: "wildcards are validated only by dns-01".into(),
                identifier: identifier.clone(),
            }]));
        }
    }
    super::validation::screen(ctx, config, account, &identifiers).await?;
    let mut authorizations = Vec::new();
    let mut created = Vec::new();
    for identifier in &identifiers {
        let (base_identifier, wildcard) = identifier.base();
        if let Some(reused) = acme.reusable_authorization(&account.id, &base_identifier, wildcard, now).await? {
            authorizations.push(reused.id);
            continue;
        }
        let authz = Authorization {
            id: ctx.new_id("authz_"),
            ca_id: config.ca_id,
            account_id: account.id.clone(),
            identifier: base_identifier.clone(),
            wildcard,
            status: AuthorizationStatus::Pending,
            expires_at: now + config.order_lifetime_seconds * 1000,
            created_at: now,
        };
        let mut challenges = Vec::new();
        for kind in &config.challenge_types {
            let fits = match kind.as_str() {
                "dns-01" => base_identifier.kind == "dns",
                "http-01" | "tls-alpn-01" => !wildcard,
                _ => false,
            };
            if !fits {
                continue;
            }
            let mut token = [0u8; 32];
            ctx.entropy.fill(&mut token);
            challenges.push(Challenge {
                id: ctx.new_id("chall_"),
                authz_id: authz.id.clone(),
                kind: kind.clone(),
                token: b64(&token),
                status: ChallengeStatus::Pending,
                validated_at: None,
                error: None,
                updated_at: now,
            });
        }
        authorizations.push(authz.id.clone());
        created.push((authz, challenges));
    }
    let order = Order {
        id: ctx.new_id("order_"),
        workspace_id: config.workspace_id.clone(),
        ca_id: config.ca_id,
        account_id: account.id.clone(),
        status: OrderStatus::Pending,
        identifiers,
        authorizations,
        profile,
        not_before: not_before.map(|(text, _)| text),
        not_after: not_after.map(|(text, _)| text),
        expires_at: now + config.order_lifetime_seconds * 1000,
        error: None,
        certificate_id: None,
        certificate_pem: None,
        fingerprint: None,
        request_id: None,
        cert_id: None,
        replaces,
        created_at: now,
    };
    // The unique index refuses a second live replacement that raced past `check_replaces`.
    // One transaction for the new authorizations, their challenges and the order: one
    // round trip to SQLite's writer instead of one autocommit per row, and no authorization
    // left behind by an order that failed to insert.
    match acme.insert_order_with_authorizations(&order, &created).await {
        Err(crate::store_error::StoreError::Unique(_)) if order.replaces.is_some() => {
            return Err(super::renewal_info::already_replaced())
        }
        inserted => inserted?,
    }
    // An order whose authorizations were all made just now is pending as it stands (nothing to
    // read back); one reusing a valid authorization may be ready already.
    let order = if created.len() == order.authorizations.len() { order } else { refresh_order(ctx, order).await? };
    Ok(Reply {
        created: true,
        location: Some(format!("{base}/order/{}", order.id)),
        ..Reply::json(order_json(base, &order))
    })
}

fn order_json(base: &str, order: &Order) -> Value {
    let mut body = json!({
        "status": order.status,
        "expires": rfc3339(order.expires_at),
        "identifiers": order.identifiers.iter().map(Identifier::to_value).collect::<Vec<_>>(),
        "authorizations": order.authorizations.iter().map(|id| format!("{base}/authz/{id}")).collect::<Vec<_>>(),
        "finalize": format!("{base}/order/{}/finalize", order.id),
    });
    if let Some(profile) = &order.profile {
        body["profile"] = json!(profile);
    }
    if let Some(replaces) = &order.replaces {
        body["replaces"] = json!(replaces);
    }
    if let Some(at) = &order.not_before {
        body["notBefore"] = json!(at);
    }
    if let Some(at) = &order.not_after {
        body["notAfter"] = json!(at);
    }
    if let Some(error) = &order.error {
        body["error"] = error.clone();
    }
    if order.status == OrderStatus::Valid && order.certificate_pem.is_some() {
        body["certificate"] = json!(format!("{base}/cert/{}", order.id));
    }
    body
}

/// The order's status as its authorizations (and a certificate request it waits on) say now;
/// stored when it moved.
pub(crate) async fn refresh_order(ctx: &AcmeDeps, order: Order) -> Result<Order, Problem> {
    let before = order.status;
    let order = derive_status(ctx, order).await?;
    record_status_change(ctx, &order, before).await?;
    Ok(order)
}

/// Writes a status [`derive_status`] changed from `before`.
async fn record_status_change(ctx: &AcmeDeps, order: &Order, before: OrderStatus) -> Result<(), Problem> {
    if order.status != before {
        store(ctx)?.update_order(order).await?;
        if order.status == OrderStatus::Valid {
            link_renewal(ctx, order).await;
        }
    }
    Ok(())
}

/// The order's status as its authorizations (pending) or its certificate request (processing)
/// have it now, not yet written.
async fn derive_status(ctx: &AcmeDeps, mut order: Order) -> Result<Order, Problem> {
    let acme = store(ctx)?;
    let now = ctx.now_millis();
    if order.status == OrderStatus::Pending {
        let mut all_valid = true;
        for id in &order.authorizations {
            let status = acme.authorization(order.ca_id, id).await?.map(|a| effective_status(&a, now));
            match status {
                Some(AuthorizationStatus::Valid) => {}
                Some(AuthorizationStatus::Pending) => all_valid = false,
                _ => {
                    order.status = OrderStatus::Invalid;
                    order.error = Some(
                        problem(ProblemType::Unauthorized, "an authorization of the order failed or expired")
                            .document(),
                    );
                    all_valid = false;
                    break;
                }
            }
        }
        if all_valid {
            order.status = OrderStatus::Ready;
        } else if order.status == OrderStatus::Pending && order.expires_at <= now {
            order.status = OrderStatus::Invalid;
        }
    }
    if order.status == OrderStatus::Processing {
        if let Some(request_id) = order.request_id {
            order = complete_from_request(ctx, order, request_id).await?;
        }
    }
    Ok(order)
}

/// An order left waiting on a certificate request (approval, or a CA that answered pending)
/// completes when the request does: the poller or the approver issues, this reads the result.
async fn complete_from_request(ctx: &AcmeDeps, mut order: Order, request_id: i64) -> Result<Order, Problem> {
    use crate::issuance::requests::RequestStatus;
    let Some(request) = ctx.store.find_request(&order.workspace_id, request_id).await? else { return Ok(order) };
    match request.status {
        RequestStatus::Issued => {
            if let Some(certificate_id) = request.certificate_id {
                if let Some(certificate) = ctx.store.find_certificate(&order.workspace_id, certificate_id).await? {
                    fill_certificate(&mut order, &certificate);
                }
            }
        }
        // A person's rejection is the client's lack of authorization (`unauthorized`, with the
        // approver's reason); a CA that refused or failed is no fault of the client's request as
        // Trellis judged it, so it is the server's (`serverInternal`, with the CA's words, which
        // the workspace's own users see on the request too).
        RequestStatus::Rejected => {
            order.status = OrderStatus::Invalid;
            let reason = request.decision_reason.unwrap_or_else(|| "no reason given".into());
            let detail = format!("the certificate request was rejected in Trellis: {reason}");
            order.error = Some(problem(ProblemType::Unauthorized, detail).document());
        }
        RequestStatus::Failed => {
            order.status = OrderStatus::Invalid;
            let error = request.error.unwrap_or_else(|| "no error given".into());
            let detail = format!("the CA did not issue the certificate: {error}");
            order.error = Some(problem(ProblemType::ServerInternal, detail).document());
        }
        _ => {}
    }
    Ok(order)
}

fn fill_certificate(order: &mut Order, certificate: &crate::certificates::Certificate) {
    let mut pem = certificate.certificate_pem.trim_end().to_owned();
    pem.push('\n');
    for ca in certificate.chain() {
        pem.push_str(ca.trim_end());
        pem.push('\n');
    }
    order.status = OrderStatus::Valid;
    order.certificate_id = Some(certificate.id);
    order.certificate_pem = Some(pem);
    order.fingerprint = Some(certificate.fingerprint_sha256.replace(':', "").to_ascii_lowercase());
    order.cert_id = trellis_pki::x509::pem_certificates(&certificate.certificate_pem)
        .and_then(|ders| ders.first().and_then(|der| super::renewal_info::cert_id_of(der)));
}

/// Records a replacing order's certificate as the renewal of the one it replaces; the order is
/// already valid, so a failure here is logged, never the client's answer.
async fn link_renewal(ctx: &AcmeDeps, order: &Order) {
    if let Err(problem) = super::renewal_info::link_renewal(ctx, order).await {
        tracing::error!(order = %order.id, detail = %problem.detail, "recording an ACME replacement as a renewal failed");
    }
}

/// An authorization's status, expiry applied.
fn effective_status(authz: &Authorization, now: i64) -> AuthorizationStatus {
    let expirable = matches!(authz.status, AuthorizationStatus::Pending | AuthorizationStatus::Valid);
    if expirable && authz.expires_at <= now {
        AuthorizationStatus::Expired
    } else {
        authz.status
    }
}

fn challenge_json(base: &str, challenge: &Challenge) -> Value {
    let mut body = json!({
        "type": challenge.kind,
        "url": format!("{base}/chall/{}", challenge.id),
        "token": challenge.token,
        "status": challenge.status,
    });
    if let Some(at) = challenge.validated_at {
        body["validated"] = json!(rfc3339(at));
    }
    if let Some(error) = &challenge.error {
        body["error"] = error.clone();
    }
    body
}

async fn authorization(
    ctx: &AcmeDeps,
    base: &str,
    account: &Account,
    authz: Authorization,
    jws: &Jws,
) -> Result<Reply, Problem> {
    let acme = store(ctx)?;
    let mut status = effective_status(&authz, ctx.now_millis());
    let payload = jws.payload()?;
    if !payload.is_empty() {
        let payload: Value =
            serde_json::from_slice(&payload).map_err(|_| problem(ProblemType::Malformed, "the payload is not JSON"))?;
        if payload.get("status").and_then(Value::as_str) != Some("deactivated") {
            return Err(problem(ProblemType::Malformed, "only `{\"status\": \"deactivated\"}` may be posted"));
        }
        acme.update_authorization_status(&authz.id, AuthorizationStatus::Deactivated).await?;
        audit(
            ctx,
            &account.workspace_id,
            &account.id,
            "acme.authorization.deactivate",
            Target::new("acme_authorization", &authz.id),
            json!({ "identifier": authz.identifier.value }),
        )
        .await;
        status = AuthorizationStatus::Deactivated;
    }
    let challenges = acme.challenges(&authz.id).await?;
    let mut body = json!({
        "identifier": authz.identifier.to_value(),
        "status": status,
        "expires": rfc3339(authz.expires_at),
        "challenges": challenges.iter().map(|c| challenge_json(base, c)).collect::<Vec<_>>(),
    });
    if authz.wildcard {
        body["wildcard"] = json!(true);
    }
    Ok(Reply::json(body))
}

/// RFC 8555 §7.5.1: the client says it is ready; validation runs in a task of its own. The
/// answer waits for it up to `challenge_answer_wait` (as step-ca answers): a quick validation
/// is answered `valid` or `invalid` at once, so the client's first poll of the authorization
/// finds it decided; a slower one answers `processing` and goes on, whether or not the client
/// stays connected.
async fn challenge(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    base: &str,
    account: &Account,
    id: &str,
) -> Result<Reply, Problem> {
    let acme = store(ctx)?;
    let mut challenge = acme.challenge(id).await?.ok_or_else(|| not_found("challenge"))?;
    let authz = owned_authz(ctx, config, account, &challenge.authz_id).await?;
    let up = (format!("{base}/authz/{}", authz.id), "up");
    if challenge.status == ChallengeStatus::Pending
        && effective_status(&authz, ctx.now_millis()) == AuthorizationStatus::Pending
    {
        challenge.status = ChallengeStatus::Processing;
        challenge.updated_at = ctx.now_millis();
        if acme.update_challenge(&challenge, ChallengeStatus::Pending).await? {
            // The validator is handed the rows this request holds (it would read the same three
            // again otherwise); a replica's restart resumes from the store (`resume_stale`).
            let (task_ctx, claimed, authz, account) = (ctx.clone(), challenge.clone(), authz.clone(), account.clone());
            let validation =
                tokio::spawn(async move { super::validation::run_claimed(&task_ctx, claimed, authz, account).await });
            let wait = ctx.settings.challenge_answer_wait;
            if !wait.is_zero() {
                if let Ok(Ok(Some(recorded))) = tokio::time::timeout(wait, validation).await {
                    challenge = recorded;
                }
            }
        } else if let Some(now) = acme.challenge(id).await? {
            challenge = now;
        }
    }
    let retry_after = (challenge.status == ChallengeStatus::Processing).then_some(2);
    Ok(Reply { links: vec![up], retry_after, ..Reply::json(challenge_json(base, &challenge)) })
}

/// Whether the CSR asks for a CA certificate (basicConstraints cA=TRUE).
fn csr_asks_for_ca(der: &[u8]) -> bool {
    use x509_parser::prelude::{FromDer, ParsedExtension, X509CertificationRequest};
    let Ok((_, csr)) = X509CertificationRequest::from_der(der) else { return false };
    csr.requested_extensions().is_some_and(|mut extensions| {
        extensions.any(|ext| matches!(ext, ParsedExtension::BasicConstraints(bc) if bc.ca))
    })
}

async fn finalize(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    base: &str,
    account: &Account,
    order: Order,
    jws: &Jws,
) -> Result<Reply, Problem> {
    // `ready` is not written on its own here: the claim below moves the order from its stored
    // status straight to `processing`.
    let stored_status = order.status;
    let mut order = derive_status(ctx, order).await?;
    if order.status != OrderStatus::Ready {
        record_status_change(ctx, &order, stored_status).await?;
        return Err(problem(ProblemType::OrderNotReady, format!("the order is {}, not ready", order.status)));
    }
    let payload = jws.payload_json()?;
    let der = payload
        .get("csr")
        .and_then(Value::as_str)
        .and_then(unb64)
        .ok_or_else(|| problem(ProblemType::BadCsr, "`csr` must be a base64url DER CSR"))?;
    let csr = trellis_pki::csr::parse_der(&der)
        .map_err(|err| problem(ProblemType::BadCsr, format!("the CSR is not acceptable: {err}")))?;
    if csr_asks_for_ca(&der) {
        return Err(problem(ProblemType::BadCsr, "the CSR asks for a CA certificate"));
    }
    // Names judged = names ordered: the CSR's subjectAltNames and common name are exactly the
    // order's identifiers (as (type, value), so an IP cannot stand in for a name).
    let wanted: BTreeSet<(String, String)> =
        order.identifiers.iter().map(|i| (i.kind.clone(), i.value.clone())).collect();
    let mut named = BTreeSet::new();
    for name in &csr.names {
        match name {
            trellis_pki::SubjectAltName::Dns(dns) => named.insert(("dns".to_owned(), dns.to_ascii_lowercase())),
            trellis_pki::SubjectAltName::Ip(ip) => named.insert(("ip".to_owned(), ip.to_string())),
            other => {
                return Err(problem(
                    ProblemType::BadCsr,
                    format!("the CSR names `{other}`, which ACME cannot validate"),
                ))
            }
        };
    }
    if let Some(cn) = &csr.common_name {
        let cn = cn.to_ascii_lowercase();
        let as_identifier = match cn.parse::<std::net::IpAddr>() {
            Ok(ip) => ("ip".to_owned(), ip.to_string()),
            Err(_) => ("dns".to_owned(), cn.clone()),
        };
        if !wanted.contains(&as_identifier) {
            return Err(problem(
                ProblemType::BadCsr,
                format!("the CSR's common name `{cn}` is not an identifier of the order"),
            ));
        }
        named.insert(as_identifier);
    }
    if named != wanted {
        let show = |set: Vec<&(String, String)>| set.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>().join(", ");
        return Err(problem(
            ProblemType::BadCsr,
            format!(
                "the CSR's names are not the order's (not in the order: [{}]; missing: [{}])",
                show(named.difference(&wanted).collect()),
                show(wanted.difference(&named).collect())
            ),
        ));
    }
    let template_id = match &order.profile {
        Some(profile) => config.profiles.get(profile).cloned(),
        None => config.default_template.clone(),
    };
    let validity_days = match &order.not_after {
        Some(text) => chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|at| ((at.timestamp_millis() - ctx.now_millis()).max(0) as u64).div_ceil(86_400_000).max(1) as u32),
        None => None,
    };
    let input = IssueInput {
        ca_id: Some(config.ca_id),
        csr: Some(trellis_pki::x509::pem_encode("CERTIFICATE REQUEST", &der)),
        template_id,
        validity_days,
        metadata: Some(json!({ "acme": { "accountId": account.id, "orderId": order.id } })),
        ..IssueInput::default()
    };
    let actor = Audit::by(Principal::acme_account(account.id.clone()), None);
    let run =
        Run::for_acme(&ctx.issuance, &config.workspace_id, config.ca_id, &input, actor).await.map_err(
            |err| match err {
                crate::Error::Validation { .. } => problem(ProblemType::BadCsr, err.to_string()),
                other => Problem::from(other),
            },
        )?;
    order.status = OrderStatus::Processing;
    let acme = store(ctx)?;
    // A poll of the order may have written `ready` since it was read; any other move means
    // another finalize claimed it.
    let claimed = acme.update_order_from(&order, stored_status).await?
        || (stored_status != OrderStatus::Ready && acme.update_order_from(&order, OrderStatus::Ready).await?);
    if !claimed {
        return Err(problem(ProblemType::OrderNotReady, "the order is already being finalized"));
    }
    let decided = run.decide(&ctx.issuance).await;
    let mut retry_after = None;
    match decided {
        Ok(Decision::Issued(issued)) => fill_certificate(&mut order, &issued.certificate),
        Ok(Decision::Pending(pending)) => {
            let request = crate::issuance::pending::open(&ctx.issuance, &run, &input, *pending, None).await?;
            order.request_id = Some(request.id);
            retry_after = Some(5);
        }
        Ok(Decision::NeedsApproval { reasons, template }) => {
            let request = crate::issuance::requests::open(&ctx.issuance, &run, &input, &template, reasons).await?;
            order.request_id = Some(request.id);
            retry_after = Some(30);
        }
        Ok(Decision::Refused(reasons)) => {
            order.status = OrderStatus::Invalid;
            let refused = problem(ProblemType::Unauthorized, format!("an issuance policy denied the order: {reasons}"));
            order.error = Some(refused.document());
            store(ctx)?.update_order(&order).await?;
            return Err(refused);
        }
        Err(err) => {
            order.status = OrderStatus::Invalid;
            // What the CA's connector reported (the CA refused, is down, limits us) is said in
            // its words, as the order gets them when the poller meets the same failure later:
            // the client learns why, not only an error code.
            let reported = match err.area::<crate::plugins::PluginError>() {
                Some(crate::plugins::PluginError::Reported { error, .. }) => Some(error.to_string()),
                _ => None,
            };
            let failed = match (err, reported) {
                (invalid @ crate::Error::Validation { .. }, _) => problem(ProblemType::BadCsr, invalid.to_string()),
                (_, Some(error)) => {
                    tracing::warn!(error = %error, order = %order.id, "the CA did not issue an ACME order");
                    problem(ProblemType::ServerInternal, format!("the CA did not issue the certificate: {error}"))
                }
                (other, None) => Problem::from(other),
            };
            order.error = Some(failed.document());
            store(ctx)?.update_order(&order).await?;
            return Err(failed);
        }
    }
    store(ctx)?.update_order(&order).await?;
    if order.status == OrderStatus::Valid {
        link_renewal(ctx, &order).await;
    }
    Ok(Reply {
        retry_after,
        location: Some(format!("{base}/order/{}", order.id)),
        ..Reply::json(order_json(base, &order))
    })
}

/// RFC 8555 §7.6: by the account that ordered the certificate, or by the certificate's key.
async fn revoke_cert(ctx: &AcmeDeps, config: &DirectoryConfig, verified: Verified) -> Result<Reply, Problem> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let payload = verified.jws.payload_json()?;
    let der = payload
        .get("certificate")
        .and_then(Value::as_str)
        .and_then(unb64)
        .ok_or_else(|| problem(ProblemType::Malformed, "`certificate` must be base64url DER"))?;
    let (_, parsed) = X509Certificate::from_der(&der)
        .map_err(|_| problem(ProblemType::Malformed, "`certificate` is not an X.509 certificate"))?;
    let reason = match payload.get("reason") {
        None | Some(Value::Null) => "unspecified",
        Some(code) => match code.as_u64() {
            Some(0) => "unspecified",
            Some(1) => "keyCompromise",
            Some(3) => "affiliationChanged",
            Some(4) => "superseded",
            Some(5) => "cessationOfOperation",
            _ => {
                return Err(problem(
                    ProblemType::BadRevocationReason,
                    format!("reason {code} is not accepted (0, 1, 3, 4, 5)"),
                ))
            }
        },
    };
    let fingerprint = hex::encode(Sha256::digest(&der));
    let order = store(ctx)?
        .order_by_fingerprint(config.ca_id, &fingerprint)
        .await?
        .ok_or_else(|| problem(ProblemType::Unauthorized, "this directory did not issue the certificate"))?;
    let actor_id = match (&verified.account, &verified.jws.header.jwk) {
        (Some(account), _) if account.id == order.account_id => account.id.clone(),
        (Some(_), _) => {
            return Err(problem(ProblemType::Unauthorized, "the certificate was ordered by another account"))
        }
        (None, Some(jwk)) if jwk.matches_spki(parsed.public_key()) => "certificate-key".to_owned(),
        (None, _) => return Err(problem(ProblemType::Unauthorized, "the JWS key is not the certificate's")),
    };
    let certificate_id = order.certificate_id.ok_or_else(|| not_found("certificate"))?;
    let existing = ctx
        .store
        .find_certificate(&order.workspace_id, certificate_id)
        .await?
        .ok_or_else(|| not_found("certificate"))?;
    if existing.revoked {
        return Err(problem(ProblemType::AlreadyRevoked, "the certificate is already revoked"));
    }
    let actor = Audit::by(Principal::acme_account(actor_id), None);
    crate::lifecycle::revocation::revoke_now(&ctx.lifecycle, &actor, &existing, reason).await?;
    Ok(Reply { created: false, body: ReplyBody::Empty, location: None, links: Vec::new(), retry_after: None })
}
