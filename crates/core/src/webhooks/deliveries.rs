//! The delivery log and its state machine (spec §2.8, §3.3).
//!
//! A delivery is one event to one target. It starts `pending`; an attempt that gets a 2xx
//! (or, for an integration, a plugin that reports it delivered) makes it `success`; any other
//! outcome schedules the next attempt, and the fifth failed attempt makes it `failed`.
//!
//! The schedule (the "off-by-one" of §6): the spec lists five retry times (30 s, 2 min, 10 min,
//! 1 h, 6 h) but caps deliveries at five attempts in all, and §3.3 says `failed` comes with the
//! final attempt. We keep the cap: attempts happen 0 s, 30 s, 2 min, 10 min and 1 h after the
//! first try, `attempts` is 5 when the delivery is `failed`, and the 6 h step is never reached.

use serde_json::Value;

use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::{Entity, Error, Result};
use crate::pagination::{Page, PageRequest};
use crate::unit_of_work::Target;

use super::worker::WebhookDeps;
use super::TargetKind;

crate::state::state_enum! {
    /// Where a delivery is in its life (§3.3): `pending` until an attempt succeeds (`success`) or
    /// the final attempt fails (`failed`). The names are the stored and served ones.
    pub enum DeliveryStatus {
        Pending => "pending",
        Success => "success",
        Failed => "failed",
    }
}

/// Attempts per delivery, the first included (spec §6, §8).
pub const MAX_ATTEMPTS: i64 = 5;
/// When retry `n` (1-based) is due, measured from the first attempt.
pub const RETRY_OFFSETS_MS: [i64; 5] = [30_000, 120_000, 600_000, 3_600_000, 21_600_000];
/// How long a receiver has to answer (spec §2.7, §8).
pub const RECEIVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A delivery record.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub workspace_id: String,
    pub target_kind: TargetKind,
    pub target_id: String,
    pub event_id: String,
    pub event_type: String,
    /// The exact JSON body that was or will be POSTed.
    pub payload: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub http_status: Option<i64>,
    pub latency_ms: Option<i64>,
    pub error: Option<String>,
    /// The external system's id of what an integration created (message, incident, ticket).
    pub reference: Option<String>,
    pub redelivery_of: Option<String>,
    pub created_at: i64,
    pub first_attempt_at: Option<i64>,
    pub last_attempt_at: Option<i64>,
    pub completed_at: Option<i64>,
    /// From the first attempt to the end of the last one, retries included.
    pub duration_ms: Option<i64>,
}

/// A delivery to insert.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub id: String,
    pub workspace_id: String,
    pub target_kind: TargetKind,
    pub target_id: String,
    pub event_id: String,
    pub event_type: String,
    pub payload: String,
    pub redelivery_of: Option<String>,
    pub created_at: i64,
}

/// Filters of the delivery list.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    /// Webhook endpoint or integration ids a delivery's target must equal (all of them: two
    /// different ids match nothing).
    pub target_ids: Vec<String>,
    pub status: Option<String>,
    pub event_type: Option<String>,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptResult {
    Delivered {
        http_status: Option<u16>,
        latency_ms: Option<i64>,
        reference: Option<String>,
    },
    /// `retry_after_ms`: the receiver asked for at least this long before the next attempt.
    Failed {
        http_status: Option<u16>,
        latency_ms: Option<i64>,
        error: String,
        retry_after_ms: Option<i64>,
    },
    /// Failed in a way no retry on the schedule can change (the target is gone or off, the
    /// integration's plugin refused the configuration or the event): the delivery ends `failed`.
    Refused {
        http_status: Option<u16>,
        latency_ms: Option<i64>,
        error: String,
    },
}

/// The state a finished attempt moves its delivery to (applied by the store).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub id: String,
    pub lease_owner: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub http_status: Option<i64>,
    pub latency_ms: Option<i64>,
    pub error: Option<String>,
    pub reference: Option<String>,
    pub first_attempt_at: i64,
    pub last_attempt_at: i64,
    pub completed_at: Option<i64>,
    pub duration_ms: Option<i64>,
}

/// §3.3: the delivery's next state after attempt number `attempts_before + 1`, which started
/// at `started_at` and ended at `ended_at`.
pub fn complete(
    id: &str,
    lease_owner: &str,
    attempts_before: i64,
    first_attempt_at: Option<i64>,
    started_at: i64,
    ended_at: i64,
    result: AttemptResult,
) -> Completion {
    let attempts = attempts_before + 1;
    let first = first_attempt_at.unwrap_or(started_at);
    let base = Completion {
        id: id.to_owned(),
        lease_owner: lease_owner.to_owned(),
        status: DeliveryStatus::Pending,
        attempts,
        next_attempt_at: ended_at,
        http_status: None,
        latency_ms: None,
        error: None,
        reference: None,
        first_attempt_at: first,
        last_attempt_at: started_at,
        completed_at: None,
        duration_ms: None,
    };
    match result {
        AttemptResult::Delivered { http_status, latency_ms, reference } => Completion {
            status: DeliveryStatus::Success,
            http_status: http_status.map(i64::from),
            latency_ms,
            reference,
            completed_at: Some(ended_at),
            duration_ms: Some(ended_at - first),
            ..base
        },
        AttemptResult::Refused { http_status, latency_ms, error } => Completion {
            status: DeliveryStatus::Failed,
            http_status: http_status.map(i64::from),
            latency_ms,
            error: Some(error),
            completed_at: Some(ended_at),
            duration_ms: Some(ended_at - first),
            ..base
        },
        AttemptResult::Failed { http_status, latency_ms, error, retry_after_ms } => {
            let http_status = http_status.map(i64::from);
            if attempts >= MAX_ATTEMPTS {
                return Completion {
                    status: DeliveryStatus::Failed,
                    http_status,
                    latency_ms,
                    error: Some(error),
                    completed_at: Some(ended_at),
                    duration_ms: Some(ended_at - first),
                    ..base
                };
            }
            let offset = RETRY_OFFSETS_MS[usize::try_from(attempts - 1).unwrap_or(0).min(RETRY_OFFSETS_MS.len() - 1)];
            let scheduled = (first + offset).max(ended_at);
            let next_attempt_at = retry_after_ms.map_or(scheduled, |wait| scheduled.max(ended_at + wait));
            Completion { http_status, latency_ms, error: Some(error), next_attempt_at, ..base }
        }
    }
}

pub async fn list(
    ctx: &WebhookDeps,
    caller: &Caller,
    filter: &DeliveryFilter,
    page: PageRequest,
) -> Result<Page<Delivery>> {
    caller.require(Scope::IntegrationsRead)?;
    if let Some(status) = filter.status.as_deref() {
        if DeliveryStatus::parse(status).is_none() {
            return Err(Error::invalid_field("status", "must be pending, success or failed"));
        }
    }
    Ok(ctx.store.reads().list_deliveries(&caller.workspace_id, filter, page).await?)
}

pub async fn get(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<Delivery> {
    caller.require(Scope::IntegrationsRead)?;
    ctx.store.reads().find_delivery(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::WebhookDelivery))
}

/// Sends a delivery's payload again, as a new delivery (same event id, so receivers can
/// deduplicate; `redeliveryOf` names the original). Its target must still exist.
pub async fn redeliver(ctx: &WebhookDeps, caller: &Caller, id: &str) -> Result<Delivery> {
    caller.require(Scope::IntegrationsWrite)?;
    let original = get(ctx, caller, id).await?;
    let target_exists = match original.target_kind {
        TargetKind::Webhook => {
            ctx.store.reads().find_webhook(&caller.workspace_id, &original.target_id).await?.is_some()
        }
        TargetKind::Integration => {
            ctx.store.reads().find_integration(&caller.workspace_id, &original.target_id).await?.is_some()
        }
    };
    if !target_exists {
        return Err(Error::Conflict(format!(
            "The {} this delivery went to has been deleted; nothing to redeliver to",
            original.target_kind.as_str()
        )));
    }
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let now = change.at();
    let new = NewDelivery {
        id: ctx.new_id("dlv_"),
        workspace_id: original.workspace_id.clone(),
        target_kind: original.target_kind,
        target_id: original.target_id.clone(),
        event_id: original.event_id.clone(),
        event_type: original.event_type.clone(),
        payload: original.payload.clone(),
        redelivery_of: Some(original.id.clone()),
        created_at: now,
    };
    let delivery = change.tx().webhooks().insert_delivery(&new).await?;
    change.audit(
        "webhook_delivery.redelivered",
        Target::new("webhook_delivery", &delivery.id),
        serde_json::json!({ "original": original.id, "target": original.target_id }),
    );
    change.commit().await?;
    Ok(delivery)
}

/// The payload as JSON, for responses (the stored text is the exact body sent).
pub fn payload_json(delivery: &Delivery) -> Value {
    serde_json::from_str(&delivery.payload).unwrap_or(Value::String(delivery.payload.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> AttemptResult {
        AttemptResult::Failed {
            http_status: Some(500),
            latency_ms: Some(3),
            error: "HTTP 500".into(),
            retry_after_ms: None,
        }
    }

    #[test]
    fn five_attempts_on_the_spec_schedule_then_failed() {
        let t0 = 1_000_000;
        let mut first = None;
        let mut attempts = 0;
        let mut due = t0;
        let mut seen = Vec::new();
        loop {
            let done = complete("d", "w", attempts, first, due, due + 10, failed());
            seen.push(due - t0);
            first = Some(done.first_attempt_at);
            attempts = done.attempts;
            if done.status == DeliveryStatus::Failed {
                assert_eq!(done.attempts, 5);
                assert_eq!(done.duration_ms, Some(due + 10 - t0));
                assert_eq!(done.completed_at, Some(due + 10));
                break;
            }
            assert_eq!(done.status, DeliveryStatus::Pending);
            due = done.next_attempt_at;
        }
        assert_eq!(seen, [0, 30_000, 120_000, 600_000, 3_600_000]);
    }

    #[test]
    fn a_refusal_fails_at_the_first_attempt() {
        let refused = AttemptResult::Refused { http_status: Some(401), latency_ms: Some(4), error: "no".into() };
        let done = complete("d", "w", 0, None, 1_000, 1_010, refused);
        assert_eq!((done.status, done.attempts, done.completed_at), (DeliveryStatus::Failed, 1, Some(1_010)));
        assert_eq!((done.http_status, done.error.as_deref(), done.duration_ms), (Some(401), Some("no"), Some(10)));
    }

    #[test]
    fn success_ends_it_and_retry_after_is_honoured() {
        let ok = AttemptResult::Delivered { http_status: Some(204), latency_ms: Some(2), reference: None };
        let done = complete("d", "w", 1, Some(0), 30_000, 30_050, ok);
        assert_eq!((done.status, done.attempts, done.duration_ms), (DeliveryStatus::Success, 2, Some(30_050)));
        let throttled = AttemptResult::Failed {
            http_status: Some(429),
            latency_ms: None,
            error: "HTTP 429".into(),
            retry_after_ms: Some(300_000),
        };
        let done = complete("d", "w", 0, None, 0, 100, throttled);
        assert_eq!(done.next_attempt_at, 300_100);
        // An attempt that overran its slot is retried at once, not in the past.
        let late = complete("d", "w", 0, Some(0), 0, 45_000, failed());
        assert_eq!(late.next_attempt_at, 45_000);
    }
}
