//! The port to outbound HTTP for webhook deliveries. `trellis-plugin-host` implements it with
//! the same egress policy plugins live under: DNS resolved by the host, private, loopback and
//! metadata addresses refused unless the operator allows private networks, every connection
//! made only to an address vetted at that moment (DNS rebinding), no redirects followed.

use std::time::Duration;

use async_trait::async_trait;

/// One POST.
#[derive(Debug, Clone)]
pub struct OutboundPost {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    /// Until the response's first byte (spec: 30 s).
    pub timeout: Duration,
}

/// What the receiver answered. The body is read (up to a cap) and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundResponse {
    pub status: u16,
    /// Milliseconds from sending to the response's first byte.
    pub latency_ms: i64,
}

/// Why a POST did not get a response. The message is for the delivery log: it names the
/// destination's problem and never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Refused by the egress policy before connecting (`private_address`, `metadata_address`,
    /// `scheme_not_allowed`).
    #[error("refused by the egress policy ({reason}): {message}")]
    Denied { reason: &'static str, message: String },
    #[error("timed out after {0:?} waiting for the receiver")]
    Timeout(Duration),
    #[error("{0}")]
    Failed(String),
}

#[async_trait]
pub trait WebhookTransport: Send + Sync + 'static {
    /// Checks that `url` may be delivered to now (scheme, and every address its host resolves
    /// to), without sending anything. Creation and updates of endpoints call it.
    async fn vet(&self, url: &str) -> Result<(), TransportError>;
    async fn post(&self, request: OutboundPost) -> Result<OutboundResponse, TransportError>;
}

/// A transport that refuses everything: the default of contexts built without one (tests of
/// the domain, admin commands).
#[derive(Debug, Default)]
pub struct NoTransport;

#[async_trait]
impl WebhookTransport for NoTransport {
    async fn vet(&self, _url: &str) -> Result<(), TransportError> {
        Ok(())
    }

    async fn post(&self, _request: OutboundPost) -> Result<OutboundResponse, TransportError> {
        Err(TransportError::Failed("this process has no outbound HTTP client".into()))
    }
}
