//! Events out (spec §2.7–2.9, §3.3, §6): webhook endpoints, external integrations (served by
//! integration plugins), the delivery log and the worker that drains the outbox into it.
//!
//! - [`endpoints`]: webhook endpoints (create, update, rotate the secret, test).
//! - [`integrations`]: external integrations (`{name, type, configuration}`).
//! - [`deliveries`]: the delivery log and its state machine (§3.3), redelivery.
//! - [`signing`]: the HMAC signature receivers verify.
//! - [`worker`]: fan-out of outbox events to subscribers and the attempts themselves.
//! - [`port`]: the area's storage port (and the narrower one the worker uses).
//! - [`transport`]: the port to the outbound HTTP client (SSRF-vetted, in `trellis-plugin-host`).

pub mod deliveries;
pub mod endpoints;
#[cfg(test)]
pub(crate) mod fake;
pub mod integrations;
pub mod port;
#[cfg(test)]
mod rule_tests;
pub mod signing;
pub mod transport;
pub mod worker;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::events::EventType;

/// Who receives deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetKind {
    Webhook,
    Integration,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Webhook => "webhook",
            TargetKind::Integration => "integration",
        }
    }

    pub fn parse(text: &str) -> Option<TargetKind> {
        match text {
            "webhook" => Some(TargetKind::Webhook),
            "integration" => Some(TargetKind::Integration),
            _ => None,
        }
    }
}

/// A webhook endpoint as stored (secrets sealed).
#[derive(Debug, Clone)]
pub struct WebhookEndpoint {
    pub id: String,
    pub workspace_id: String,
    pub url: String,
    pub description: Option<String>,
    pub events: Vec<String>,
    pub secret_sealed: String,
    pub previous_secret_sealed: Option<String>,
    pub previous_secret_until: Option<i64>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub failing_since: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Since when it receives its current events: created, switched back on, or given another
    /// event list. Fan-out delivers it only events emitted since.
    pub subscribed_at: i64,
}

/// Whether a change of (enabled, events) starts a new subscription: the target was switched back
/// on, or its event list changed. Events emitted before that are not delivered to it.
pub(crate) fn resubscribed(was_enabled: bool, old_events: &[String], enabled: bool, events: &[String]) -> bool {
    (enabled && !was_enabled) || old_events != events
}

/// An external integration as stored (configuration secrets sealed).
#[derive(Debug, Clone)]
pub struct ExternalIntegration {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub integration_type: String,
    pub events: Vec<String>,
    pub config: Value,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub failing_since: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Since when it receives its current events: created, switched back on, or given another
    /// event list. Fan-out delivers it only events emitted since.
    pub subscribed_at: i64,
}

/// Success over the last day of finished deliveries of one target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryStats {
    pub succeeded: i64,
    pub failed: i64,
}

impl DeliveryStats {
    /// The rolling success rate, 0–100, one decimal; 100 while nothing has finished yet.
    pub fn success_rate(&self) -> f64 {
        let total = self.succeeded + self.failed;
        if total == 0 {
            return 100.0;
        }
        (self.succeeded as f64 * 1000.0 / total as f64).round() / 10.0
    }
}

/// The window of [`DeliveryStats`].
pub const SUCCESS_RATE_WINDOW_MS: i64 = 24 * 3600 * 1000;

/// Validates a subscription list: non-empty, known types (or `*` alone), no duplicates.
pub fn check_event_list(field: &str, events: Option<Vec<String>>, default_all: bool) -> Result<Vec<String>> {
    let events = match events {
        Some(events) => events,
        None if default_all => return Ok(vec!["*".to_owned()]),
        None => return Err(Error::invalid_field(field, "is required: a non-empty list of event types, or [\"*\"]")),
    };
    if events.is_empty() {
        return Err(Error::invalid_field(field, "must not be empty: list event types, or [\"*\"] for every event"));
    }
    let mut out: Vec<String> = Vec::with_capacity(events.len());
    for event in events {
        let event = event.trim().to_owned();
        if event != "*" && event.parse::<EventType>().is_err() {
            return Err(Error::validation_with(
                format!("Unknown event type `{event}` in {field}"),
                serde_json::json!({ "field": field, "unknown": event, "knownEventTypes": EventType::ALL }),
            ));
        }
        if !out.contains(&event) {
            out.push(event);
        }
    }
    if out.len() > 1 && out.iter().any(|e| e == "*") {
        return Err(Error::invalid_field(field, "`*` subscribes to everything and stands alone"));
    }
    Ok(out)
}

/// Whether a subscription list receives `event_type`.
pub fn subscribes(events: &[String], event_type: &str) -> bool {
    events.iter().any(|e| e == "*" || e == event_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_known_types_or_a_lone_star() {
        assert_eq!(check_event_list("events", Some(vec!["*".into()]), false).unwrap(), ["*"]);
        assert!(check_event_list("events", Some(vec![]), false).is_err());
        assert!(check_event_list("events", None, false).is_err());
        assert_eq!(check_event_list("events", None, true).unwrap(), ["*"]);
        assert!(check_event_list("events", Some(vec!["certificate.exploded".into()]), false).is_err());
        assert!(check_event_list("events", Some(vec!["*".into(), "ca.created".into()]), false).is_err());
        let two = vec!["ca.created".to_owned(), "ca.created".to_owned(), "certificate.expired".to_owned()];
        assert_eq!(check_event_list("events", Some(two), false).unwrap(), ["ca.created", "certificate.expired"]);
        assert!(subscribes(&["*".to_owned()], "webhook.test"));
        assert!(!subscribes(&["ca.created".to_owned()], "ca.updated"));
    }

    #[test]
    fn success_rate_is_a_rounded_percentage() {
        assert_eq!(DeliveryStats { succeeded: 0, failed: 0 }.success_rate(), 100.0);
        assert_eq!(DeliveryStats { succeeded: 2, failed: 1 }.success_rate(), 66.7);
        assert_eq!(DeliveryStats { succeeded: 0, failed: 4 }.success_rate(), 0.0);
    }
}
