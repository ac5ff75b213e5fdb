//! One issuance: order → authorizations → challenges → finalize → certificate, within the
//! call's time budget, resumable from the order URL by `poll-issue`.

use serde::{Deserialize, Serialize};
use serde_json::json;
use trellis_plugin_sdk::challenge::{self, Challenge};
use trellis_plugin_sdk::poll::{self, Backoff, Deadline, Polled, Step};
use trellis_plugin_sdk::prelude::*;

use crate::client::{Client, Problem};
use crate::Config;

/// State key of the chain the CA delivered last (`ca-chain`).
pub(crate) const CHAIN_STATE: &str = "chain";
/// Budget kept back for what follows the last wait (download, cleanup, answering).
const RESERVE_MS: u64 = 3_000;
/// Order states visited in one call before giving up on a CA going round in circles.
const MAX_STEPS: usize = 32;

/// What the record keeps per idempotency key: the order, and the authorizations whose answers
/// are presented and not yet cleaned up (an answer stays up across a `pending` so the CA can
/// still validate it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OrderState {
    pub(crate) order_url: String,
    #[serde(default)]
    pub(crate) presented: Vec<String>,
    /// When the order was placed and when its certificate was downloaded (Unix seconds), so
    /// old entries can be pruned (see [`prune`]).
    #[serde(default)]
    pub(crate) placed_at: i64,
    #[serde(default)]
    pub(crate) issued_at: Option<i64>,
}

impl OrderState {
    fn new(order_url: &str) -> OrderState {
        OrderState {
            order_url: order_url.to_owned(),
            presented: Vec::new(),
            placed_at: clock::unix_seconds(),
            issued_at: None,
        }
    }
}

/// State key of the pruning cursor.
const PRUNE_CURSOR: &str = "prune-cursor";
/// Order entries looked at per new order.
const PRUNE_BATCH: u32 = 8;
/// An issued order's entry is kept this long for retries with its idempotency key...
const KEEP_ISSUED_SECS: i64 = 7 * 86_400;
/// ...and an unfinished one this long (ACME orders expire within days).
const KEEP_OPEN_SECS: i64 = 30 * 86_400;

/// Removes a few stale order entries, walking the keys with a cursor kept in state, so the
/// record's state stays bounded (its quota is 1 MiB) however many certificates it issues: each
/// new order looks at `PRUNE_BATCH` old ones. Failures only log: pruning is housekeeping.
pub(crate) fn prune(now: i64) {
    let walk = || -> Result<(), PluginError> {
        let cursor: Option<String> = state::get_json(PRUNE_CURSOR)?;
        let keys = state::list_keys("order/", cursor.as_deref(), PRUNE_BATCH)?;
        for key in &keys {
            let Some(entry) = state::get_json::<OrderState>(key)? else { continue };
            let stale = match entry.issued_at {
                Some(at) => now - at > KEEP_ISSUED_SECS,
                None => entry.placed_at > 0 && now - entry.placed_at > KEEP_OPEN_SECS,
            };
            if stale {
                state::delete(key)?;
            }
        }
        match keys.last().filter(|_| keys.len() == PRUNE_BATCH as usize) {
            Some(last) => state::set_json(PRUNE_CURSOR, last),
            None => Ok(state::delete(PRUNE_CURSOR)?),
        }
    };
    if let Err(err) = walk() {
        log::warn("ACME state pruning failed", &[("error", &err.to_string())]);
    }
}

#[derive(Debug, Deserialize)]
struct Order {
    status: String,
    #[serde(default)]
    authorizations: Vec<String>,
    #[serde(default)]
    finalize: String,
    certificate: Option<String>,
    error: Option<Problem>,
}

#[derive(Debug, Deserialize)]
struct Authorization {
    status: String,
    identifier: Identifier,
    #[serde(default)]
    challenges: Vec<AcmeChallenge>,
}

#[derive(Debug, Deserialize)]
struct Identifier {
    value: String,
}

#[derive(Debug, Deserialize)]
struct AcmeChallenge {
    #[serde(rename = "type")]
    kind: String,
    url: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    status: String,
    error: Option<Problem>,
}

pub(crate) fn order_key(idempotency_key: &str) -> String {
    format!("order/{idempotency_key}")
}

/// `issue` (`reference` `None`) and `poll-issue`: the order under the request's idempotency
/// key (placed now if there is none), driven as far as the budget allows.
pub(crate) fn issue(
    ctx: &CallContext,
    config: &Config,
    request: &IssueRequest,
    reference: Option<&str>,
) -> Result<IssueOutcome, PluginError> {
    let deadline = Deadline::from_budget(ctx, RESERVE_MS);
    let mut client = Client::connect(&config.directory_url(ctx)?)?;
    client.ensure_account(config)?;
    let key = order_key(&request.idempotency_key);
    let mut saved = match state::get_json::<OrderState>(&key)? {
        Some(saved) => saved,
        None => match reference {
            Some(order_url) => OrderState::new(order_url),
            None => place_order(&mut client, request, &key)?,
        },
    };
    drive(&mut client, config, request, &key, &mut saved, &deadline)
}

/// The order's identifiers: the profile's DNS names and IP addresses (RFC 8738).
fn identifiers(request: &IssueRequest) -> Result<Vec<serde_json::Value>, PluginError> {
    let mut found = Vec::new();
    for name in &request.profile.subject_alt_names {
        match name {
            SubjectAltName::Dns(dns) => found.push(json!({ "type": "dns", "value": dns })),
            SubjectAltName::Ip(ip) => found.push(json!({ "type": "ip", "value": ip.to_string() })),
            other => {
                return Err(PluginError::invalid_input(format!(
                    "ACME certifies DNS names and IP addresses only, not {other}"
                )))
            }
        }
    }
    if found.is_empty() {
        match &request.profile.common_name {
            Some(cn) if !cn.is_empty() => found.push(json!({ "type": "dns", "value": cn })),
            _ => return Err(PluginError::invalid_input("ACME needs at least one DNS name or IP address")),
        }
    }
    Ok(found)
}

fn place_order(client: &mut Client, request: &IssueRequest, key: &str) -> Result<OrderState, PluginError> {
    prune(clock::unix_seconds());
    let mut payload = json!({ "identifiers": identifiers(request)? });
    if client.directory.renewal_info.is_some() {
        if let Some(id) = request.replaces.as_ref().and_then(ari_certificate_id) {
            payload["replaces"] = serde_json::Value::String(id);
        }
    }
    let new_order = client.directory.new_order.clone();
    let response = client.post(&new_order, Some(&payload))?;
    let order_url = response.header("location").ok_or_else(|| {
        PluginError::upstream(Some(response.status), "newOrder answered without the order URL", false)
    })?;
    let saved = OrderState::new(&order_url);
    let bytes = serde_json::to_vec(&saved).map_err(|err| PluginError::internal(err.to_string()))?;
    // A concurrent call with the same key may have placed an order first: follow that one.
    if !state::compare_and_swap(key, None, Some(&bytes))? {
        if let Some(theirs) = state::get_json::<OrderState>(key)? {
            return Ok(theirs);
        }
    }
    log::info("ACME order placed", &[("order", &saved.order_url)]);
    Ok(saved)
}

fn pending(saved: &OrderState, retry_after_secs: Option<u32>, what: &str) -> IssueOutcome {
    IssueOutcome::Pending { reference: saved.order_url.clone(), retry_after_secs, status_message: what.to_owned() }
}

fn drive(
    client: &mut Client,
    config: &Config,
    request: &IssueRequest,
    key: &str,
    saved: &mut OrderState,
    deadline: &Deadline,
) -> Result<IssueOutcome, PluginError> {
    let backoff = Backoff::new(200, 2_000);
    for _ in 0..MAX_STEPS {
        let (order, response) = client.get_json::<Order>(&saved.order_url.clone())?;
        match order.status.as_str() {
            "pending" => {
                for authz_url in &order.authorizations {
                    if let Some(retry_after) = authorize(client, config, authz_url, key, saved, deadline)? {
                        return Ok(pending(saved, retry_after, "waiting for the CA to validate the challenges"));
                    }
                }
                // Each step may take a while; once the budget is spent, the next poll goes on.
                if deadline.expired() {
                    return Ok(pending(saved, None, "the challenges are validated; the order is next"));
                }
            }
            "ready" => {
                clean_up_presented(client, config, key, saved)?;
                let csr = jws::base64url(&request.csr_der);
                let finalized = client.post(&order.finalize, Some(&json!({ "csr": csr })))?;
                if deadline.expired() {
                    return Ok(pending(saved, finalized.retry_after_secs(), "the CA is issuing the certificate"));
                }
            }
            "processing" => {
                let retry_after = response.retry_after_secs();
                if retry_after.is_some_and(|secs| u64::from(secs) * 1_000 >= deadline.remaining_ms())
                    || deadline.expired()
                {
                    return Ok(pending(saved, retry_after, "the CA is issuing the certificate"));
                }
                let polled = poll::until(deadline, &backoff, || {
                    let (order, response) = client.get_json::<Order>(&saved.order_url)?;
                    Ok(if order.status == "processing" {
                        Step::Wait { retry_after_secs: response.retry_after_secs() }
                    } else {
                        Step::Done(())
                    })
                })?;
                if let Polled::OutOfTime { retry_after_secs } = polled {
                    return Ok(pending(saved, retry_after_secs, "the CA is issuing the certificate"));
                }
            }
            "valid" => {
                clean_up_presented(client, config, key, saved)?;
                if saved.issued_at.is_none() {
                    saved.issued_at = Some(clock::unix_seconds());
                    state::set_json(key, saved)?;
                }
                let url = order.certificate.ok_or_else(|| {
                    PluginError::upstream(Some(response.status), "a valid order without a certificate URL", false)
                })?;
                return download(client, &url).map(IssueOutcome::Issued);
            }
            _ => {
                clean_up_presented(client, config, key, saved)?;
                let why = order.error.map(|p| p.describe()).unwrap_or_else(|| format!("order {}", order.status));
                return Err(PluginError::rejected(format!("the ACME CA refused the order: {why}")));
            }
        }
    }
    Err(PluginError::upstream(None, "the ACME order did not progress", true))
}

fn key_authorization(client: &Client, token: &str) -> String {
    format!("{token}.{}", client.key.jwk_thumbprint)
}

/// The solver challenge answering `authz` with the configured type, and the CA's challenge.
fn chosen<'a>(
    client: &Client,
    config: &Config,
    authz: &'a Authorization,
) -> Result<(Challenge, &'a AcmeChallenge), PluginError> {
    let wanted = if config.dns01() { "dns-01" } else { "http-01" };
    let found = authz.challenges.iter().find(|c| c.kind == wanted).ok_or_else(|| {
        PluginError::rejected(format!(
            "the CA offers no {wanted} challenge for {}{}",
            authz.identifier.value,
            if wanted == "http-01" { " (wildcard names need dns-01)" } else { "" }
        ))
    })?;
    let key_authorization = key_authorization(client, &found.token);
    let answer = if wanted == "dns-01" {
        Challenge::dns01(&authz.identifier.value, &key_authorization, config.dns_provider.as_ref())
    } else {
        Challenge::http01(&authz.identifier.value, &found.token, &key_authorization)
    };
    Ok((answer, found))
}

fn remember_presented(key: &str, saved: &mut OrderState, authz_url: &str, presented: bool) -> Result<(), PluginError> {
    let had = saved.presented.iter().any(|u| u == authz_url);
    if had == presented {
        return Ok(());
    }
    if presented {
        saved.presented.push(authz_url.to_owned());
    } else {
        saved.presented.retain(|u| u != authz_url);
    }
    state::set_json(key, saved)
}

/// Gets one authorization validated: presents the answer, tells the CA to validate, waits
/// for the verdict and removes the answer. `Some(retry_after)` when the budget ran out first.
fn authorize(
    client: &mut Client,
    config: &Config,
    authz_url: &str,
    key: &str,
    saved: &mut OrderState,
    deadline: &Deadline,
) -> Result<Option<Option<u32>>, PluginError> {
    let (authz, _) = client.get_json::<Authorization>(authz_url)?;
    if authz.status != "pending" {
        return settle(client, config, authz_url, key, saved, &authz).map(|()| None);
    }
    let (answer, acme_challenge) = chosen(client, config, &authz)?;
    if acme_challenge.status == "pending" {
        let presented = challenge::present(&answer)?;
        remember_presented(key, saved, authz_url, true)?;
        let settle_ms = u64::from(presented.settle_seconds) * 1_000;
        if settle_ms > 0 {
            if settle_ms >= deadline.remaining_ms() {
                return Ok(Some(Some(presented.settle_seconds)));
            }
            clock::sleep_ms(settle_ms);
        }
        let challenge_url = acme_challenge.url.clone();
        client.post(&challenge_url, Some(&json!({})))?;
    }
    let polled = poll::until(deadline, &Backoff::new(200, 2_000), || {
        let (authz, response) = client.get_json::<Authorization>(authz_url)?;
        Ok(if authz.status == "pending" {
            Step::Wait { retry_after_secs: response.retry_after_secs() }
        } else {
            Step::Done(authz)
        })
    })?;
    match polled {
        Polled::OutOfTime { retry_after_secs } => Ok(Some(retry_after_secs)),
        Polled::Done(authz) => settle(client, config, authz_url, key, saved, &authz).map(|()| None),
    }
}

/// An authorization the CA decided: its answer removed, and an error unless it is valid.
fn settle(
    client: &Client,
    config: &Config,
    authz_url: &str,
    key: &str,
    saved: &mut OrderState,
    authz: &Authorization,
) -> Result<(), PluginError> {
    if saved.presented.iter().any(|u| u == authz_url) {
        if let Ok((answer, _)) = chosen(client, config, authz) {
            if let Err(err) = challenge::cleanup(&answer) {
                log::warn("ACME challenge cleanup failed", &[("error", &err.to_string())]);
            }
        }
        remember_presented(key, saved, authz_url, false)?;
    }
    if authz.status == "valid" {
        return Ok(());
    }
    let why = authz
        .challenges
        .iter()
        .find_map(|c| c.error.as_ref().map(Problem::describe))
        .unwrap_or_else(|| format!("authorization {}", authz.status));
    Err(PluginError::rejected(format!("the CA did not validate {}: {why}", authz.identifier.value)))
}

/// Removes the answers still presented for this order (after a `pending`).
fn clean_up_presented(
    client: &mut Client,
    config: &Config,
    key: &str,
    saved: &mut OrderState,
) -> Result<(), PluginError> {
    for authz_url in saved.presented.clone() {
        let (authz, _) = client.get_json::<Authorization>(&authz_url)?;
        if let Ok((answer, _)) = chosen(client, config, &authz) {
            let _ = challenge::cleanup(&answer);
        }
        remember_presented(key, saved, &authz_url, false)?;
    }
    Ok(())
}

/// The certificate at `url`, with its chain (RFC 8555 §7.4.2: PEM, leaf first).
pub(crate) fn download(client: &mut Client, url: &str) -> Result<IssuedCertificate, PluginError> {
    let response = client.post_raw(url, None, Some("application/pem-certificate-chain"))?;
    if !response.is_success() {
        return Err(crate::client::problem_error(&response, &crate::client::problem(&response)));
    }
    let mut blocks = util::pem_certificates(&response.text());
    if blocks.is_empty() {
        return Err(PluginError::upstream(
            Some(response.status),
            "the certificate download holds no certificate",
            false,
        ));
    }
    let leaf = blocks.remove(0);
    if !blocks.is_empty() && state::get_json::<Vec<String>>(CHAIN_STATE)?.as_ref() != Some(&blocks) {
        state::set_json(CHAIN_STATE, &blocks)?;
    }
    Ok(IssuedCertificate::pem(leaf).with_chain(blocks).with_ca_reference(url))
}

/// The RFC 9773 certificate identifier: base64url(authority key identifier) "."
/// base64url(serial number's DER integer bytes).
pub(crate) fn ari_certificate_id(certificate: &CertificateRef) -> Option<String> {
    let from_pem = || certificate.pem.as_deref().and_then(util::pem_to_der).and_then(|der| authority_key_id(&der));
    let aki = certificate.authority_key_id.clone().filter(|k| !k.is_empty()).or_else(from_pem)?;
    let aki = &aki;
    let hex = certificate.serial_number.trim_start_matches("0x");
    let hex = if hex.len() % 2 == 1 { format!("0{hex}") } else { hex.to_owned() };
    let mut serial = Vec::with_capacity(hex.len() / 2 + 1);
    for pair in hex.as_bytes().chunks(2) {
        serial.push(u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?);
    }
    while serial.len() > 1 && serial[0] == 0 && serial[1] < 0x80 {
        serial.remove(0);
    }
    if serial.first().is_none_or(|b| *b >= 0x80) {
        serial.insert(0, 0);
    }
    Some(format!("{}.{}", jws::base64url(aki), jws::base64url(&serial)))
}

/// A DER length at `at`: (length, bytes it took).
fn der_length(der: &[u8], at: usize) -> Option<(usize, usize)> {
    let first = *der.get(at)?;
    if first < 0x80 {
        return Some((usize::from(first), 1));
    }
    let count = usize::from(first & 0x7f);
    if count == 0 || count > 4 {
        return None;
    }
    let mut len = 0usize;
    for i in 0..count {
        len = (len << 8) | usize::from(*der.get(at + 1 + i)?);
    }
    Some((len, 1 + count))
}

/// The keyIdentifier of a certificate's authorityKeyIdentifier extension (2.5.29.35), found by
/// its OID: `OID [critical BOOLEAN] OCTET STRING { SEQUENCE { [0] keyIdentifier … } }`.
pub(crate) fn authority_key_id(der: &[u8]) -> Option<Vec<u8>> {
    const OID: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x23];
    let mut at = der.windows(OID.len()).position(|w| w == OID)? + OID.len();
    if der.get(at) == Some(&0x01) {
        at += 3;
    }
    if der.get(at) != Some(&0x04) {
        return None;
    }
    at += 1 + der_length(der, at + 1)?.1;
    if der.get(at) != Some(&0x30) {
        return None;
    }
    at += 1 + der_length(der, at + 1)?.1;
    if der.get(at) != Some(&0x80) {
        return None;
    }
    let (len, took) = der_length(der, at + 1)?;
    let start = at + 1 + took;
    der.get(start..start + len).map(<[u8]>::to_vec)
}
