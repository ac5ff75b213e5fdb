//! Time inside a call: a monotonic clock for time budgets and waits, and the wall clock.
//!
//! In the component these read `wasi:clocks`; in native builds (`cargo test`) the monotonic
//! clock is [`crate::testing::clock`]'s fake, which [`sleep_ms`] advances instead of sleeping,
//! so polling code is tested without waiting.

/// Milliseconds on a monotonic clock (only differences are meaningful).
pub fn monotonic_ms() -> u64 {
    backend::monotonic_ms()
}

/// Blocks the call for `ms` milliseconds (the host's wall-clock limit still applies).
pub fn sleep_ms(ms: u64) {
    backend::sleep_ms(ms)
}

/// Seconds since the Unix epoch, from the wall clock.
pub fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(target_arch = "wasm32")]
mod backend {
    use crate::bindings::imports::wasi::clocks::monotonic_clock;

    pub(super) fn monotonic_ms() -> u64 {
        monotonic_clock::now() / 1_000_000
    }

    pub(super) fn sleep_ms(ms: u64) {
        if ms > 0 {
            monotonic_clock::subscribe_duration(ms.saturating_mul(1_000_000)).block();
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
use crate::testing::clock as backend;
