//! Time and randomness are injected so that tests (and replays) control them.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use rand::RngCore;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock stopped at one instant: tests, and scans run "as of" a given time.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub DateTime<Utc>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// A source of cryptographically secure random bytes: the PKI crate's trait, so that what the
/// services hold is what the signer takes (serials).
pub use trellis_pki::Entropy;

/// The operating system's CSPRNG.
#[derive(Debug, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) {
        rand::rngs::OsRng.fill_bytes(buf);
    }
}

pub type SharedClock = Arc<dyn Clock>;
pub type SharedEntropy = Arc<dyn Entropy>;

/// Now, in milliseconds since the Unix epoch (every record's unit).
pub fn now_millis(clock: &dyn Clock) -> i64 {
    clock.now().timestamp_millis()
}

/// A fresh random identifier with a readable prefix, e.g. `ws_3f9c…`.
pub fn new_id(entropy: &dyn Entropy, prefix: &str) -> String {
    format!("{prefix}{}", random_hex(entropy, 12))
}

/// `n` random bytes, hex-encoded.
pub fn random_hex(entropy: &dyn Entropy, n: usize) -> String {
    let mut buf = vec![0u8; n];
    entropy.fill(&mut buf);
    hex::encode(buf)
}

/// An instant as milliseconds since the Unix epoch: the unit of every record's timestamps.
///
/// Records still holding a bare `i64` mean this unit; the type keeps the one place that stores
/// another unit (the PKI ledger and its CRL rows keep seconds, the precision of X.509 times)
/// from leaking it: the store converts at its edge, and seconds reach only the X.509 and
/// plugin calls that want them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct UnixMillis(i64);

impl UnixMillis {
    pub const fn from_millis(ms: i64) -> UnixMillis {
        UnixMillis(ms)
    }

    pub const fn from_secs(secs: i64) -> UnixMillis {
        UnixMillis(secs.saturating_mul(1000))
    }

    pub fn from_time(t: DateTime<Utc>) -> UnixMillis {
        UnixMillis(t.timestamp_millis())
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds, rounded down (towards the past, also before 1970).
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// `secs` seconds later (saturating: a validity far in the future stays the latest instant).
    pub const fn plus_secs(self, secs: i64) -> UnixMillis {
        UnixMillis(self.0.saturating_add(secs.saturating_mul(1000)))
    }

    /// The API's form of it ([`rfc3339`]).
    pub fn rfc3339(self) -> String {
        rfc3339(self.0)
    }
}

impl std::fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.rfc3339())
    }
}

/// Milliseconds since the Unix epoch: the storage representation of every timestamp.
pub fn to_millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The API's timestamp format: RFC 3339, UTC, millisecond precision.
pub fn rfc3339(ms: i64) -> String {
    from_millis(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::UnixMillis;

    #[test]
    fn seconds_convert_both_ways_rounding_towards_the_past() {
        assert_eq!(UnixMillis::from_secs(1_700_000_000).as_millis(), 1_700_000_000_000);
        assert_eq!(UnixMillis::from_millis(1_700_000_000_999).as_secs(), 1_700_000_000);
        assert_eq!(UnixMillis::from_millis(-1).as_secs(), -1, "before 1970 it rounds down, not towards zero");
        assert_eq!(UnixMillis::from_secs(10).plus_secs(5), UnixMillis::from_secs(15));
        assert_eq!(UnixMillis::from_secs(i64::MAX).as_millis(), i64::MAX, "saturates");
        assert_eq!(UnixMillis::from_millis(i64::MAX - 1).plus_secs(60).as_millis(), i64::MAX);
    }

    #[test]
    fn it_reads_as_the_apis_timestamps_and_serialises_as_a_number() {
        assert_eq!(UnixMillis::from_millis(1_700_000_000_123).rfc3339(), "2023-11-14T22:13:20.123Z");
        assert_eq!(serde_json::to_value(UnixMillis::from_millis(5)).unwrap(), serde_json::json!(5));
    }
}
