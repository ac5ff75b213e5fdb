//! Login throttling. Three counters of failed attempts within a window:
//!
//! - per (account, client address): the tight one, `max_failures`. A client that guesses one
//!   account's password is stopped; every other client can still sign in to that account, so a
//!   stranger cannot lock a user out by failing on purpose.
//! - per client address: `max_failures × 4` (many users may share a NAT).
//! - per account: `max_failures × 20`, so that guessing spread over many addresses still ends.
//!
//! An attempt is *reserved* (counted as a failure) before the password is checked, under one
//! lock: concurrent attempts cannot all pass the check before any failure is recorded. A
//! success gives its reservation back. A pair locked out again soon after a lockout stays
//! locked twice as long each time (up to a day): progressive delay.
//!
//! The map is bounded: expired entries are swept every `SWEEP_EVERY` operations and whenever
//! it holds more than `MAX_ENTRIES` keys, so lookups stay O(1) and memory stays flat.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

const ADDRESS_MULTIPLIER: u32 = 4;
const ACCOUNT_MULTIPLIER: u32 = 20;
const MAX_ENTRIES: usize = 100_000;
const SWEEP_EVERY: u64 = 4096;
const MAX_LOCKOUT: chrono::Duration = chrono::Duration::days(1);

#[derive(Debug, Default)]
struct Counter {
    failures: VecDeque<DateTime<Utc>>,
    /// Consecutive lockouts of this key (pairs only); doubles the next lockout.
    lockouts: u32,
    locked_until: Option<DateTime<Utc>>,
}

#[derive(Default)]
struct State {
    counters: HashMap<String, Counter>,
    operations: u64,
}

pub struct LoginLimiter {
    max_failures: u32,
    window: chrono::Duration,
    state: Mutex<State>,
}

/// A reserved attempt: counted as a failure until [`LoginLimiter::succeeded`] gives it back.
#[must_use]
#[derive(Debug)]
pub struct Reservation {
    keys: [String; 3],
    at: DateTime<Utc>,
}

impl LoginLimiter {
    pub fn new(max_failures: u32, window: Duration) -> Self {
        LoginLimiter {
            max_failures: max_failures.max(1),
            window: chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX),
            state: Mutex::new(State::default()),
        }
    }

    /// Reserves an attempt for `email` from `address`, or says how many seconds to wait.
    pub fn reserve(&self, email: &str, address: &str, now: DateTime<Utc>) -> Result<Reservation, u64> {
        let keys = [pair_key(email, address), address_key(address), account_key(email)];
        let limits = [
            self.max_failures,
            self.max_failures.saturating_mul(ADDRESS_MULTIPLIER),
            self.max_failures.saturating_mul(ACCOUNT_MULTIPLIER),
        ];
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.maintain(&mut state, now);
        let mut wait: Option<i64> = None;
        for (key, limit) in keys.iter().zip(limits) {
            let Some(counter) = state.counters.get_mut(key) else { continue };
            prune(counter, now, self.window);
            let until = match counter.locked_until {
                Some(until) if until > now => Some(until),
                _ if counter.failures.len() >= limit as usize => counter.failures.front().map(|t| *t + self.window),
                _ => None,
            };
            if let Some(until) = until {
                let secs = (until - now).num_seconds().max(1);
                wait = Some(wait.map_or(secs, |w| w.max(secs)));
            }
        }
        if let Some(secs) = wait {
            return Err(secs as u64);
        }
        for (key, limit) in keys.iter().zip(limits) {
            let counter = state.counters.entry(key.clone()).or_default();
            counter.failures.push_back(now);
            // The attempt that reaches a pair's limit starts its (progressive) lockout.
            if key == &keys[0] && counter.failures.len() >= limit as usize {
                let factor = 1i32 << counter.lockouts.min(16);
                let lockout = (self.window * factor).min(MAX_LOCKOUT).max(self.window);
                counter.locked_until = Some(now + lockout);
                counter.lockouts = counter.lockouts.saturating_add(1);
            }
        }
        Ok(Reservation { keys, at: now })
    }

    /// The password was right: the pair's record is cleared and the reservation given back.
    pub fn succeeded(&self, reservation: Reservation) {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let [pair, address, account] = reservation.keys;
        state.counters.remove(&pair);
        for key in [address, account] {
            if let Some(counter) = state.counters.get_mut(&key) {
                if let Some(index) = counter.failures.iter().rposition(|t| *t == reservation.at) {
                    counter.failures.remove(index);
                }
            }
        }
    }

    fn maintain(&self, state: &mut State, now: DateTime<Utc>) {
        state.operations = state.operations.wrapping_add(1);
        if state.operations.is_multiple_of(SWEEP_EVERY) || state.counters.len() > MAX_ENTRIES {
            let window = self.window;
            state.counters.retain(|_, counter| {
                prune(counter, now, window);
                !counter.failures.is_empty() || counter.locked_until.is_some_and(|until| until > now)
            });
        }
    }

    #[cfg(test)]
    fn entries(&self) -> usize {
        self.state.lock().map(|s| s.counters.len()).unwrap_or_default()
    }
}

fn pair_key(email: &str, address: &str) -> String {
    format!("pair:{}|{address}", email.trim().to_lowercase())
}

fn account_key(email: &str) -> String {
    format!("account:{}", email.trim().to_lowercase())
}

fn address_key(address: &str) -> String {
    format!("address:{address}")
}

fn prune(counter: &mut Counter, now: DateTime<Utc>, window: chrono::Duration) {
    while counter.failures.front().is_some_and(|t| *t + window <= now) {
        counter.failures.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap_or_default()
    }

    fn fail(limiter: &LoginLimiter, email: &str, address: &str, at: DateTime<Utc>) -> Result<(), u64> {
        limiter.reserve(email, address, at).map(drop)
    }

    #[test]
    fn a_client_is_locked_out_of_an_account_and_unlocked_after_the_window() {
        let limiter = LoginLimiter::new(3, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(fail(&limiter, "a@x.io", "1.2.3.4", t0()), Ok(()));
        }
        assert_eq!(fail(&limiter, "A@x.io", "1.2.3.4", t0()), Err(60));
        assert_eq!(fail(&limiter, "a@x.io", "1.2.3.4", t0() + chrono::Duration::seconds(61)), Ok(()));
    }

    #[test]
    fn another_client_is_not_locked_out_by_a_strangers_failures() {
        let limiter = LoginLimiter::new(3, Duration::from_secs(60));
        for _ in 0..3 {
            let _ = fail(&limiter, "victim@x.io", "6.6.6.6", t0());
        }
        assert!(limiter.reserve("victim@x.io", "6.6.6.6", t0()).is_err());
        let reservation = limiter.reserve("victim@x.io", "1.1.1.1", t0());
        assert!(reservation.is_ok(), "the victim's own client must still get in");
    }

    #[test]
    fn success_gives_the_attempt_back_and_clears_the_pair() {
        let limiter = LoginLimiter::new(2, Duration::from_secs(60));
        let _ = fail(&limiter, "a@x.io", "1.2.3.4", t0());
        let reservation = limiter.reserve("a@x.io", "1.2.3.4", t0()).unwrap_or_else(|_| panic!("allowed"));
        limiter.succeeded(reservation);
        assert_eq!(fail(&limiter, "a@x.io", "1.2.3.4", t0()), Ok(()));
    }

    #[test]
    fn lockouts_grow_progressively() {
        let limiter = LoginLimiter::new(1, Duration::from_secs(60));
        assert_eq!(fail(&limiter, "a@x.io", "1.2.3.4", t0()), Ok(()));
        assert_eq!(fail(&limiter, "a@x.io", "1.2.3.4", t0()), Err(60));
        let later = t0() + chrono::Duration::seconds(61);
        assert_eq!(fail(&limiter, "a@x.io", "1.2.3.4", later), Ok(()));
        assert_eq!(fail(&limiter, "a@x.io", "1.2.3.4", later), Err(120));
    }

    #[test]
    fn spread_out_guessing_of_one_account_still_ends() {
        let limiter = LoginLimiter::new(1, Duration::from_secs(60));
        for i in 0..ACCOUNT_MULTIPLIER {
            assert_eq!(fail(&limiter, "a@x.io", &format!("10.0.0.{i}"), t0()), Ok(()));
        }
        assert!(fail(&limiter, "a@x.io", "10.0.1.1", t0()).is_err());
    }

    #[test]
    fn the_map_is_swept_of_expired_entries() {
        let limiter = LoginLimiter::new(5, Duration::from_secs(60));
        for i in 0..(SWEEP_EVERY as usize) {
            let _ = fail(&limiter, &format!("u{i}@x.io"), &format!("10.{}.{}.1", i / 256, i % 256), t0());
        }
        assert!(limiter.entries() > 1000);
        let _ = fail(&limiter, "late@x.io", "9.9.9.9", t0() + chrono::Duration::hours(1));
        for _ in 0..SWEEP_EVERY {
            let _ = fail(&limiter, "late@x.io", "9.9.9.9", t0() + chrono::Duration::hours(1));
        }
        assert!(limiter.entries() < 10, "{} entries left", limiter.entries());
    }
}
