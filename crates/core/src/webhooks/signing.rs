//! The signature receivers verify (spec §6): HMAC-SHA256 keyed by the endpoint's secret over
//! `<timestamp>.<raw-body>`.
//!
//! Wire format (docs/api.md, "Webhook deliveries"):
//! - `Trellis-Timestamp`: Unix seconds, decimal; the `<timestamp>` of the signed string.
//! - `Trellis-Signature`: `v1=<lowercase hex HMAC-SHA256>`; during a secret rotation's grace
//!   period one `v1=` entry per valid secret, comma-separated, newest first. A receiver accepts
//!   the delivery when any entry matches, compared in constant time.
//! - The HMAC key is the whole secret string as UTF-8 bytes, `whsec_` prefix included.

use ring::hmac;

use crate::clock::Entropy;

/// Secret prefix (spec §2.7).
pub const SECRET_PREFIX: &str = "whsec_";
/// Entropy of a secret (spec §8).
pub const SECRET_BYTES: usize = 40;

pub const HEADER_TIMESTAMP: &str = "Trellis-Timestamp";
pub const HEADER_SIGNATURE: &str = "Trellis-Signature";
pub const HEADER_EVENT_ID: &str = "Trellis-Event-Id";
pub const HEADER_EVENT_TYPE: &str = "Trellis-Event-Type";
pub const HEADER_DELIVERY_ID: &str = "Trellis-Delivery-Id";

/// A fresh signing secret: `whsec_` and 40 random bytes, hex (80 characters).
pub fn new_secret(entropy: &dyn Entropy) -> String {
    format!("{SECRET_PREFIX}{}", crate::clock::random_hex(entropy, SECRET_BYTES))
}

/// `v1=<hex>` for one secret.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let mut context = hmac::Context::with_key(&key);
    context.update(timestamp.to_string().as_bytes());
    context.update(b".");
    context.update(body);
    format!("v1={}", hex::encode(context.sign().as_ref()))
}

/// The `Trellis-Signature` value for every secret currently valid (newest first).
pub fn signature_header(secrets: &[&str], timestamp: i64, body: &[u8]) -> String {
    secrets.iter().map(|secret| sign(secret, timestamp, body)).collect::<Vec<_>>().join(",")
}

/// What a receiver does: true when some `v1=` entry of `header` is the HMAC of the body under
/// `secret`. Constant-time per comparison.
pub fn verify(secret: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    let expected = sign(secret, timestamp, body);
    header.split(',').map(str::trim).any(|entry| crate::crypto::constant_time_eq(entry.as_bytes(), expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer_and_rotation() {
        // HMAC-SHA256("whsec_test", "1700000000.{}"), computed independently with Python's hmac.
        let header = sign("whsec_test", 1_700_000_000, b"{}");
        assert_eq!(header, "v1=35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91");
        assert!(verify("whsec_test", 1_700_000_000, b"{}", &header));
        assert!(!verify("whsec_test", 1_700_000_001, b"{}", &header));
        assert!(!verify("whsec_other", 1_700_000_000, b"{}", &header));
        let both = signature_header(&["whsec_new", "whsec_old"], 5, b"body");
        assert!(verify("whsec_new", 5, b"body", &both) && verify("whsec_old", 5, b"body", &both));
        assert_eq!(new_secret(&crate::clock::OsEntropy).len(), 6 + 80);
    }
}
