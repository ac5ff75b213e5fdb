//! Background workers. Each runs on the service's runtime, reads the clock from the
//! context, and is safe to run on several replicas at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use trellis_core::certificates;
use trellis_core::clock::SharedClock;
use trellis_core::plugins::challenges::{self, ChallengeAnswers};
use trellis_core::SharedContext;

/// Runs `tick` now and then every `interval` until the process stops. A tick that fails is
/// logged and tried again at the next one; a missed tick is not made up.
fn spawn_periodic<F, Fut, E>(job: &'static str, interval: Duration, mut tick: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: std::fmt::Display,
{
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            // A panic fails this tick only: the job runs again at the next one.
            match std::panic::AssertUnwindSafe(tick()).catch_unwind().await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(job, error = %err, "background job failed; retrying at the next tick"),
                Err(_) => {
                    tracing::error!(job, code = "WORKER_PANIC", "background job panicked; retrying at the next tick")
                }
            }
        }
    })
}

/// Runs the expiry scan now and then every `interval`, until the process stops.
pub fn spawn_expiry_scanner(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    spawn_periodic("expiry scan", interval, move || {
        let ctx = ctx.clone();
        async move {
            let scan = certificates::scan_expiry(&ctx.certificate_deps()).await?;
            if scan.expiring + scan.expired > 0 {
                tracing::info!(expiring = scan.expiring, expired = scan.expired, "expiry scan emitted events");
            }
            Ok::<_, trellis_core::Error>(())
        }
    })
}

/// Writes the internal PKI's ledger backlog (rows of signed certificates whose issuance went
/// away before writing them, see `trellis_core::pki::ledger`) every `interval`. An empty
/// backlog costs no I/O.
pub fn spawn_pki_ledger_backlog(ctx: SharedContext, interval: Duration) -> Option<tokio::task::JoinHandle<()>> {
    let pki = ctx.pki.clone()?;
    Some(spawn_periodic("pki ledger backlog", interval, move || {
        let pki = pki.clone();
        async move { pki.record_ledger_backlog().await.map(|_| ()) }
    }))
}

/// Validates again the ACME challenges a stopped replica left `processing`, and forgets the
/// expired spent nonces, every `interval`.
pub fn spawn_acme_validation(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    spawn_periodic("acme validation", interval, move || {
        let ctx = ctx.clone();
        async move {
            trellis_core::acme::validation::resume_stale(&ctx.acme_deps()).await;
            if let Err(problem) = trellis_core::acme::server::sweep_nonces(&ctx.acme_deps()).await {
                tracing::error!(detail = %problem.detail, "sweeping expired ACME nonces failed");
            }
            Ok::<_, trellis_core::Error>(())
        }
    })
}

/// Renews due auto-renewing certificates now and then every `interval`.
pub fn spawn_renewal(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    spawn_periodic("renewal", interval, move || {
        let ctx = ctx.clone();
        async move {
            let run = trellis_core::issuance::renewal::run(&ctx.issuance_deps(), 100).await?;
            if run.renewed + run.failed > 0 {
                tracing::info!(renewed = run.renewed, failed = run.failed, "renewal run finished");
            }
            Ok::<_, trellis_core::Error>(())
        }
    })
}

/// Probes every CA not checked within `interval` (status, health, `ca.health_changed`), every
/// `interval`; the first round comes one interval after start, so a restart is not a burst of
/// probes.
pub fn spawn_ca_health(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match trellis_core::cas::service::check_health(&ctx.ca_deps(), interval).await {
                Ok(run) if run.changed > 0 => {
                    tracing::info!(checked = run.checked, changed = run.changed, "CA health check moved some CAs")
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(job = "ca health", error = %err, "background job failed; retrying at the next tick")
                }
            }
        }
    })
}

/// Polls CAs about pending orders (`issuing` certificate requests) that are due, now and then
/// every `interval`; `owner` names this process's leases.
pub fn spawn_issuance_poller(ctx: SharedContext, interval: Duration, owner: String) -> tokio::task::JoinHandle<()> {
    spawn_periodic("issuance poller", interval, move || {
        let (ctx, owner) = (ctx.clone(), owner.clone());
        async move {
            loop {
                let run = trellis_core::issuance::pending::poll(&ctx.issuance_deps(), &owner, 50).await?;
                let polled = run.issued + run.pending + run.retrying + run.failed;
                if run.issued + run.failed > 0 {
                    tracing::info!(
                        issued = run.issued,
                        failed = run.failed,
                        pending = run.pending,
                        "pending issuances polled"
                    );
                }
                // A full batch may leave more due requests behind.
                if polled < 50 {
                    return Ok::<_, trellis_core::Error>(());
                }
            }
        }
    })
}

/// Runs discovery scans nobody is running: pending ones whose starter is gone, and running ones
/// whose heartbeat stopped (their process died), now and then every `interval`.
pub fn spawn_discovery(ctx: SharedContext, interval: Duration) -> tokio::task::JoinHandle<()> {
    spawn_periodic("discovery", interval, move || {
        let ctx = ctx.clone();
        async move {
            while trellis_core::discovery::claim_and_run(&ctx.discovery_deps(), None).await? {}
            Ok::<_, trellis_core::Error>(())
        }
    })
}

/// Deletes delivered outbox events older than `retention`, now and then every `interval`.
pub fn spawn_outbox_retention(
    ctx: SharedContext,
    interval: Duration,
    retention: Duration,
) -> tokio::task::JoinHandle<()> {
    spawn_periodic("outbox retention", interval, move || {
        let ctx = ctx.clone();
        async move {
            let purged = trellis_core::events::purge_delivered(&ctx.store, ctx.clock.as_ref(), retention).await?;
            if purged > 0 {
                tracing::info!(purged, "outbox retention deleted delivered events");
            }
            Ok::<_, trellis_core::Error>(())
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
    spawn_periodic("HTTP-01 answer purge", interval, move || {
        let (answers, clock) = (answers.clone(), clock.clone());
        async move {
            let before_ms = clock.now().timestamp_millis() - challenges::CHALLENGE_LIFETIME_MS;
            let purged = answers.purge(before_ms).await?;
            if purged > 0 {
                tracing::info!(purged, "removed expired ACME HTTP-01 answers");
            }
            Ok::<_, trellis_core::plugins::StateError>(())
        }
    })
}
