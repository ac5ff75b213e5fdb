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

/// `n` random bytes, hex-encoded.
pub fn random_hex(entropy: &dyn Entropy, n: usize) -> String {
    let mut buf = vec![0u8; n];
    entropy.fill(&mut buf);
    hex::encode(buf)
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
