//! Polling a remote operation within the call's time budget: wait between attempts with
//! exponential backoff, or exactly as long as the server's `Retry-After` asks, and stop in
//! time to answer `pending` when the budget runs out.
//!
//! ```ignore
//! use trellis_plugin_sdk::poll::{self, Backoff, Deadline, Polled, Step};
//!
//! let deadline = Deadline::from_budget(ctx, 2_000);
//! match poll::until(&deadline, &Backoff::default(), || {
//!     let order = fetch_order()?;
//!     Ok(match order.status.as_str() {
//!         "valid" => Step::Done(order),
//!         _ => Step::Wait { retry_after_secs: order.retry_after },
//!     })
//! })? {
//!     Polled::Done(order) => { /* continue */ }
//!     Polled::OutOfTime { retry_after_secs } => { /* return IssueOutcome::Pending */ }
//! }
//! ```

use crate::{clock, CallContext, PluginError};

/// When this call must stop waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at_ms: u64,
}

impl Deadline {
    /// The call's time budget (`ctx.time_budget_ms`) less `reserve_ms` for the work that
    /// follows the wait (building the answer, cleaning up).
    pub fn from_budget(ctx: &CallContext, reserve_ms: u64) -> Deadline {
        Deadline::in_ms(u64::from(ctx.time_budget_ms).saturating_sub(reserve_ms))
    }

    /// `ms` milliseconds from now.
    pub fn in_ms(ms: u64) -> Deadline {
        Deadline { at_ms: clock::monotonic_ms().saturating_add(ms) }
    }

    /// Milliseconds left (0 when passed).
    pub fn remaining_ms(&self) -> u64 {
        self.at_ms.saturating_sub(clock::monotonic_ms())
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.remaining_ms() == 0
    }
}

/// Waits between attempts: `initial_ms`, doubling up to `max_ms`. A server's `Retry-After`
/// replaces the computed wait (servers know best), capped at `max_retry_after_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait.
    pub initial_ms: u64,
    /// The longest computed wait.
    pub max_ms: u64,
    /// The longest wait a `Retry-After` may ask for within one call; longer ones end the poll
    /// with [`Polled::OutOfTime`] so the host can come back later.
    pub max_retry_after_ms: u64,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff { initial_ms: 250, max_ms: 4_000, max_retry_after_ms: 30_000 }
    }
}

impl Backoff {
    /// A backoff from `initial_ms` doubling up to `max_ms`.
    pub fn new(initial_ms: u64, max_ms: u64) -> Backoff {
        Backoff { initial_ms, max_ms, ..Backoff::default() }
    }

    /// The wait before attempt `attempt + 1` (attempt 0 is the first retry).
    pub fn delay_ms(&self, attempt: u32, retry_after_secs: Option<u32>) -> u64 {
        match retry_after_secs {
            Some(secs) => u64::from(secs).saturating_mul(1_000),
            None => self.initial_ms.saturating_mul(1u64 << attempt.min(20)).min(self.max_ms),
        }
    }
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<T> {
    /// Finished.
    Done(T),
    /// Not yet; the server may say when to ask again (seconds).
    Wait {
        /// The server's `Retry-After`, if any.
        retry_after_secs: Option<u32>,
    },
}

/// How polling ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled<T> {
    /// The operation finished.
    Done(T),
    /// The deadline came first; `retry_after_secs` is the server's last `Retry-After`, to
    /// pass on in a `pending` outcome.
    OutOfTime {
        /// When to ask again, if the server said.
        retry_after_secs: Option<u32>,
    },
}

/// Calls `attempt` until it is done, the deadline would pass during the next wait, or it
/// fails (errors end the poll at once). The first attempt runs immediately.
pub fn until<T>(
    deadline: &Deadline,
    backoff: &Backoff,
    mut attempt: impl FnMut() -> Result<Step<T>, PluginError>,
) -> Result<Polled<T>, PluginError> {
    let mut tries = 0u32;
    loop {
        let retry_after_secs = match attempt()? {
            Step::Done(value) => return Ok(Polled::Done(value)),
            Step::Wait { retry_after_secs } => retry_after_secs,
        };
        let wait = backoff.delay_ms(tries, retry_after_secs);
        let too_long = retry_after_secs.is_some() && wait > backoff.max_retry_after_ms;
        if too_long || wait >= deadline.remaining_ms() {
            return Ok(Polled::OutOfTime { retry_after_secs });
        }
        clock::sleep_ms(wait);
        tries = tries.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn backs_off_exponentially_and_honours_retry_after() {
        let b = Backoff::new(100, 1_000);
        assert_eq!([0, 1, 2, 3, 4].map(|a| b.delay_ms(a, None)), [100, 200, 400, 800, 1_000]);
        assert_eq!(b.delay_ms(0, Some(3)), 3_000);
    }

    #[test]
    fn polls_until_done_sleeping_on_the_fake_clock() {
        testing::reset();
        let start = clock::monotonic_ms();
        let mut calls = 0;
        let polled = until(&Deadline::in_ms(10_000), &Backoff::new(100, 1_000), || {
            calls += 1;
            Ok(if calls == 3 { Step::Done("ready") } else { Step::Wait { retry_after_secs: None } })
        })
        .unwrap();
        assert_eq!(polled, Polled::Done("ready"));
        assert_eq!(clock::monotonic_ms() - start, 300, "100 ms then 200 ms");
    }

    #[test]
    fn stops_before_the_deadline_and_passes_retry_after_on() {
        testing::reset();
        let mut calls = 0;
        let polled = until(&Deadline::in_ms(2_500), &Backoff::default(), || {
            calls += 1;
            Ok(Step::<()>::Wait { retry_after_secs: Some(1) })
        })
        .unwrap();
        assert_eq!(polled, Polled::OutOfTime { retry_after_secs: Some(1) });
        assert_eq!(calls, 3, "at 0, 1 s and 2 s; the next wait would pass the deadline");

        let far = until(&Deadline::in_ms(600_000), &Backoff::default(), || {
            Ok(Step::<()>::Wait { retry_after_secs: Some(120) })
        });
        assert_eq!(far.unwrap(), Polled::OutOfTime { retry_after_secs: Some(120) });

        let failed =
            until(&Deadline::in_ms(1_000), &Backoff::default(), || Err::<Step<()>, _>(PluginError::rejected("no")));
        assert_eq!(failed, Err(PluginError::rejected("no")));
    }
}
