//! Background workers. Each runs on the service's runtime, reads the clock from the
//! context, and is safe to run on several replicas at once.

use std::sync::Arc;
use std::time::Duration;

use trellis_core::certificates;
use trellis_core::clock::SharedClock;
use trellis_core::plugins::challenges::{self, ChallengeAnswers};
use trellis_core::SharedContext;

/// Runs the expiry scan now and then every `interval`, until the process stops.
pub fn spawn_expiry_scanner(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match certificates::scan_expiry(&ctx).await {
                Ok(scan) if scan.expiring + scan.expired > 0 => {
                    tracing::info!(expiring = scan.expiring, expired = scan.expired, "expiry scan emitted events");
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "expiry scan failed; retrying at the next tick"),
            }
        }
    })
}

/// Deletes delivered outbox events older than `retention`, now and then every `interval`.
pub fn spawn_outbox_retention(
    ctx: SharedContext,
    interval: Duration,
    retention: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match trellis_core::events::purge_delivered(&ctx, retention).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "outbox retention deleted delivered events"),
                Err(err) => tracing::warn!(error = %err, "outbox retention failed; retrying at the next tick"),
            }
        }
    })
}

/// Removes HTTP-01 answers older than their lifetime (a connector that trapped before its
/// cleanup), now and then every `interval`.
pub fn spawn_challenge_purge(
    answers: Arc<dyn ChallengeAnswers>,
    clock: SharedClock,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let before_ms = clock.now().timestamp_millis() - challenges::CHALLENGE_LIFETIME_MS;
            match answers.purge(before_ms).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(purged, "removed expired ACME HTTP-01 answers"),
                Err(err) => {
                    tracing::warn!(error = %err, "purging ACME HTTP-01 answers failed; retrying at the next tick")
                }
            }
        }
    })
}
