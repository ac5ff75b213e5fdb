//! Login throttling: failed attempts per account and per client address within a window.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Client addresses get more room than accounts: many users may share a NAT.
const ADDRESS_MULTIPLIER: u32 = 4;

pub struct LoginLimiter {
    max_failures: u32,
    window: Duration,
    failures: Mutex<HashMap<String, VecDeque<DateTime<Utc>>>>,
}

impl LoginLimiter {
    pub fn new(max_failures: u32, window: Duration) -> Self {
        LoginLimiter { max_failures, window, failures: Mutex::new(HashMap::new()) }
    }

    /// Seconds until another attempt is allowed, if the account or address is locked out.
    pub fn retry_after(&self, email: &str, address: &str, now: DateTime<Utc>) -> Option<u64> {
        let mut failures = self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let checks =
            [(account_key(email), self.max_failures), (address_key(address), self.max_failures * ADDRESS_MULTIPLIER)];
        let mut wait: Option<u64> = None;
        for (key, limit) in checks {
            let Some(times) = failures.get_mut(&key) else {
                continue;
            };
            prune(times, now, self.window);
            if times.len() >= limit as usize {
                if let Some(oldest) = times.front() {
                    let until = *oldest + self.window;
                    let secs = (until - now).num_seconds().max(1) as u64;
                    wait = Some(wait.map_or(secs, |w| w.max(secs)));
                }
            }
        }
        failures.retain(|_, times| !times.is_empty());
        wait
    }

    pub fn record_failure(&self, email: &str, address: &str, now: DateTime<Utc>) {
        let mut failures = self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for key in [account_key(email), address_key(address)] {
            failures.entry(key).or_default().push_back(now);
        }
    }

    pub fn record_success(&self, email: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        failures.remove(&account_key(email));
    }
}

fn account_key(email: &str) -> String {
    format!("account:{}", email.trim().to_lowercase())
}

fn address_key(address: &str) -> String {
    format!("address:{address}")
}

fn prune(times: &mut VecDeque<DateTime<Utc>>, now: DateTime<Utc>, window: Duration) {
    let window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    while times.front().is_some_and(|t| *t + window <= now) {
        times.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_after_max_failures_and_unlocks_after_window() {
        let limiter = LoginLimiter::new(3, Duration::from_secs(60));
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        for _ in 0..3 {
            assert_eq!(limiter.retry_after("a@x.io", "1.2.3.4", t0), None);
            limiter.record_failure("A@x.io", "1.2.3.4", t0);
        }
        assert_eq!(limiter.retry_after("a@x.io", "5.6.7.8", t0), Some(60));
        assert_eq!(limiter.retry_after("a@x.io", "5.6.7.8", t0 + chrono::Duration::seconds(61)), None);
    }

    #[test]
    fn success_clears_the_account() {
        let limiter = LoginLimiter::new(1, Duration::from_secs(60));
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        limiter.record_failure("a@x.io", "1.2.3.4", t0);
        limiter.record_success("a@x.io");
        assert_eq!(limiter.retry_after("a@x.io", "9.9.9.9", t0), None);
    }
}
