//! Attestation nonces (spec §2.4, §3.4): 32 random bytes, hex, bound to one device and one
//! purpose, valid for `ttlSeconds`, consumed exactly once. Consumption is one conditional
//! UPDATE (`consumed_at IS NULL`), so of any number of concurrent submissions, on any number of
//! replicas, one wins and the others get `nonce_already_used`.

use serde_json::json;

use super::AttestationDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::Result;
use crate::unit_of_work::Target;

use super::AttestationError;

pub const ATTESTATION: &str = "attestation";
pub const AK_ENROLLMENT: &str = "ak_enrollment";
pub const DEFAULT_TTL_SECONDS: i64 = 300;
/// The longest a challenge may live (1 hour); the shortest is 1 second.
pub const MAX_TTL_SECONDS: i64 = 3600;

/// A stored nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce {
    pub nonce: String,
    pub workspace_id: String,
    pub device_id: i64,
    pub purpose: String,
    pub issued_at: i64,
    pub expires_at: i64,
    pub consumed_at: Option<i64>,
}

/// Issues a challenge for a device of the caller's workspace.
pub async fn challenge(
    ctx: &AttestationDeps,
    caller: &Caller,
    device_id: i64,
    ttl_seconds: Option<i64>,
    purpose: Option<&str>,
) -> Result<Nonce> {
    caller.require(Scope::AttestationWrite)?;
    let ttl = ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS);
    if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
        return Err(AttestationError::invalid("ttlSeconds", format!("must be between 1 and {MAX_TTL_SECONDS}")).into());
    }
    let purpose = match purpose.unwrap_or(ATTESTATION) {
        ATTESTATION => ATTESTATION,
        AK_ENROLLMENT => AK_ENROLLMENT,
        _ => return Err(AttestationError::invalid("purpose", "must be attestation or ak_enrollment").into()),
    };
    super::devices::find(ctx, &caller.workspace_id, device_id).await?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let nonce = Nonce {
        nonce: crate::clock::random_hex(ctx.entropy.as_ref(), 32),
        workspace_id: caller.workspace_id.to_string(),
        device_id,
        purpose: purpose.to_owned(),
        issued_at: at,
        expires_at: at + ttl * 1000,
        consumed_at: None,
    };
    change.tx().insert_nonce(&nonce).await?;
    change.audit(
        "attestation.challenge_issued",
        Target::new("device", device_id),
        json!({ "purpose": purpose, "ttlSeconds": ttl }),
    );
    change.commit().await?;
    Ok(nonce)
}

/// Consumes `nonce` for `device_id` and `purpose`, or says which §3.4 rule refuses it. The
/// refusals leave the nonce as it was.
pub async fn consume(
    ctx: &AttestationDeps,
    workspace_id: &str,
    device_id: i64,
    nonce: &str,
    purpose: &'static str,
) -> Result<Nonce> {
    let text = nonce.trim().to_ascii_lowercase();
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AttestationError::NonceNotFound.into());
    }
    let now = ctx.now_millis();
    let mut tx = ctx.store.begin_attestation().await?;
    let stored = tx.find_nonce(workspace_id, &text).await?.ok_or(AttestationError::NonceNotFound)?;
    if stored.device_id != device_id {
        return Err(AttestationError::NonceDeviceMismatch.into());
    }
    if stored.consumed_at.is_some() {
        return Err(AttestationError::NonceAlreadyUsed.into());
    }
    if stored.expires_at <= now {
        return Err(AttestationError::NonceExpired.into());
    }
    if stored.purpose != purpose {
        return Err(AttestationError::NoncePurposeMismatch { expected: purpose, actual: stored.purpose }.into());
    }
    if !tx.consume_nonce(workspace_id, &text, now).await? {
        // Another submission consumed it between our read and our write.
        return Err(AttestationError::NonceAlreadyUsed.into());
    }
    tx.commit().await?;
    Ok(Nonce { consumed_at: Some(now), ..stored })
}
