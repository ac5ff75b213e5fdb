//! Domain events. Each is written to the outbox in the transaction of the change that
//! caused it; delivery workers (webhooks, integrations) read the outbox later.
//!
//! [`EventType`] is the vocabulary (what a subscription may name, what the outbox's
//! `event_type` column holds); [`Event`] is what code emits: one variant per emitted type, each
//! with its payload struct, so a payload cannot be paired with the wrong name. The envelope a
//! payload travels in is built by [`envelope`] alone.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub mod port;

pub use self::port::{EventReads, EventWrites, OutboxRetention};

/// Declares [`EventType`] once: variant, wire name, in catalogue order.
macro_rules! event_types {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)+) => {
        /// Every event type a subscription may name: the spec's catalogue (§6) and the events
        /// this service emits beyond it. The wire name is [`EventType::as_str`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventType {
            $($(#[$doc])* $variant,)+
        }

        impl EventType {
            /// Every type, in the order `knownEventTypes` lists them.
            pub const ALL: &'static [EventType] = &[$(EventType::$variant,)+];

            /// The wire name (`certificate.created`), as stored and delivered.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(EventType::$variant => $name,)+
                }
            }
        }
    };
}

event_types! {
    CertificateCreated => "certificate.created",
    CertificateUpdated => "certificate.updated",
    CertificateExpiring => "certificate.expiring",
    CertificateExpired => "certificate.expired",
    CertificateRevoked => "certificate.revoked",
    CertificateRenewed => "certificate.renewed",
    /// Beyond §6.
    CertificateRenewalFailed => "certificate.renewal_failed",
    /// Beyond §6.
    CertificateDeleted => "certificate.deleted",
    CaCreated => "ca.created",
    CaUpdated => "ca.updated",
    CaHealthChanged => "ca.health_changed",
    DiscoveryScanCompleted => "discovery.scan_completed",
    DiscoveryNewCertificatesFound => "discovery.new_certificates_found",
    /// Reserved: in the spec's catalogue (§6), so subscriptions accept it, but nothing emits it
    /// until workflows exist ([`Event`] has no variant for it). See [`EventType::is_reserved`].
    WorkflowExecutionCompleted => "workflow.execution_completed",
    AttestationFailed => "attestation.failed",
    /// Delivered by the webhook test endpoint to one endpoint, never written to the outbox.
    WebhookTest => "webhook.test",
    /// Beyond §6: an endpoint failing for longer than the operator's limit was switched off.
    WebhookDisabled => "webhook.disabled",
    /// Beyond §6: the same for an external integration.
    IntegrationDisabled => "integration.disabled",
    /// Beyond §6: a plugin version was deactivated (its signing key was revoked).
    PluginVersionDeactivated => "plugin.version_deactivated",
}

impl EventType {
    /// Accepted in subscriptions but emitted by nothing yet (`workflow.execution_completed`:
    /// emitted once workflows exist).
    pub fn is_reserved(self) -> bool {
        matches!(self, EventType::WorkflowExecutionCompleted)
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no [`EventType`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event type `{0}`")]
pub struct UnknownEventType(pub String);

impl std::str::FromStr for EventType {
    type Err = UnknownEventType;

    /// The exact wire name; `*` (every event) is a subscription's, not a type.
    fn from_str(name: &str) -> Result<EventType, UnknownEventType> {
        EventType::ALL.iter().copied().find(|t| t.as_str() == name).ok_or_else(|| UnknownEventType(name.to_owned()))
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<EventType, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// An event to emit: its type and its payload (the envelope's `data`).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    CertificateCreated(CertificateData),
    CertificateUpdated(CertificateUpdated),
    CertificateExpiring(CertificateExpiring),
    CertificateExpired(CertificateData),
    CertificateRevoked(CertificateRevoked),
    CertificateRenewed(CertificateRenewed),
    CertificateRenewalFailed(CertificateRenewalFailed),
    CertificateDeleted(CertificateData),
    CaCreated(CaData),
    CaUpdated(CaData),
    CaHealthChanged(CaHealthChanged),
    DiscoveryScanCompleted(ScanCompleted),
    DiscoveryNewCertificatesFound(NewCertificatesFound),
    AttestationFailed(AttestationFailed),
    WebhookTest(WebhookTest),
    WebhookDisabled(TargetDisabled),
    IntegrationDisabled(TargetDisabled),
    PluginVersionDeactivated(PluginVersionDeactivated),
}

impl Event {
    pub fn event_type(&self) -> EventType {
        match self {
            Event::CertificateCreated(_) => EventType::CertificateCreated,
            Event::CertificateUpdated(_) => EventType::CertificateUpdated,
            Event::CertificateExpiring(_) => EventType::CertificateExpiring,
            Event::CertificateExpired(_) => EventType::CertificateExpired,
            Event::CertificateRevoked(_) => EventType::CertificateRevoked,
            Event::CertificateRenewed(_) => EventType::CertificateRenewed,
            Event::CertificateRenewalFailed(_) => EventType::CertificateRenewalFailed,
            Event::CertificateDeleted(_) => EventType::CertificateDeleted,
            Event::CaCreated(_) => EventType::CaCreated,
            Event::CaUpdated(_) => EventType::CaUpdated,
            Event::CaHealthChanged(_) => EventType::CaHealthChanged,
            Event::DiscoveryScanCompleted(_) => EventType::DiscoveryScanCompleted,
            Event::DiscoveryNewCertificatesFound(_) => EventType::DiscoveryNewCertificatesFound,
            Event::AttestationFailed(_) => EventType::AttestationFailed,
            Event::WebhookTest(_) => EventType::WebhookTest,
            Event::WebhookDisabled(_) => EventType::WebhookDisabled,
            Event::IntegrationDisabled(_) => EventType::IntegrationDisabled,
            Event::PluginVersionDeactivated(_) => EventType::PluginVersionDeactivated,
        }
    }

    /// The payload as JSON: the envelope's `data`. The payloads are plain structs with string
    /// keys, so this does not fail in practice; an error would be a bug, reported as internal.
    pub fn data(&self) -> crate::error::Result<Value> {
        let data = match self {
            Event::CertificateCreated(p) | Event::CertificateExpired(p) | Event::CertificateDeleted(p) => {
                serde_json::to_value(p)
            }
            Event::CertificateUpdated(p) => serde_json::to_value(p),
            Event::CertificateExpiring(p) => serde_json::to_value(p),
            Event::CertificateRevoked(p) => serde_json::to_value(p),
            Event::CertificateRenewed(p) => serde_json::to_value(p),
            Event::CertificateRenewalFailed(p) => serde_json::to_value(p),
            Event::CaCreated(p) | Event::CaUpdated(p) => serde_json::to_value(p),
            Event::CaHealthChanged(p) => serde_json::to_value(p),
            Event::DiscoveryScanCompleted(p) => serde_json::to_value(p),
            Event::DiscoveryNewCertificatesFound(p) => serde_json::to_value(p),
            Event::AttestationFailed(p) => serde_json::to_value(p),
            Event::WebhookTest(p) => serde_json::to_value(p),
            Event::WebhookDisabled(p) | Event::IntegrationDisabled(p) => serde_json::to_value(p),
            Event::PluginVersionDeactivated(p) => serde_json::to_value(p),
        };
        data.map_err(|err| {
            crate::error::Error::Internal(format!("cannot serialize a {} event: {err}", self.event_type()))
        })
    }
}

/// The payload envelope every event is stored and delivered in:
/// `{type, workspaceId, occurredAt, data}`, with `id` (`evt_…`) once it is delivered.
/// The one place the envelope is built.
pub fn envelope(event_id: Option<&str>, workspace_id: &str, event_type: &str, data: &Value, at: i64) -> Value {
    let mut envelope = serde_json::json!({
        "type": event_type,
        "workspaceId": workspace_id,
        "occurredAt": crate::clock::rfc3339(at),
        "data": data,
    });
    if let Some(id) = event_id {
        envelope["id"] = Value::from(id);
    }
    envelope
}

/// The certificate summary carried by the `certificate.*` events (created, expired, deleted,
/// and inside updated, expiring, revoked).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateData {
    pub certificate_id: i64,
    pub common_name: String,
    pub issuer: String,
    pub serial_number: String,
    pub fingerprint_sha256: String,
    /// RFC 3339.
    pub expires_at: String,
    /// `active`, `expiring`, `expired` or `revoked` when the event was emitted.
    pub status: &'static str,
}

/// `certificate.updated`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateUpdated {
    #[serde(flatten)]
    pub certificate: CertificateData,
    /// What changed: the changed field names, or `{autoRenewal}` / `{machineIdentityId}` (the
    /// audit row's details).
    pub changes: Value,
}

/// `certificate.expiring`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateExpiring {
    #[serde(flatten)]
    pub certificate: CertificateData,
    pub days_until_expiry: i64,
}

/// `certificate.revoked`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateRevoked {
    #[serde(flatten)]
    pub certificate: CertificateData,
    /// Given by a revoke through the API (and approved revocation requests); absent when
    /// discovery found the certificate revoked at its CA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `certificate.renewed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateRenewed {
    pub old_certificate_id: i64,
    pub new_certificate_id: i64,
    pub common_name: String,
    pub ca_id: Option<i64>,
}

/// `certificate.renewal_failed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateRenewalFailed {
    pub certificate_id: i64,
    pub common_name: String,
    pub error: String,
    /// The error's API code (`UPSTREAM_ERROR`, …).
    pub code: &'static str,
}

/// `ca.created` and `ca.updated`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaData {
    pub ca_id: i64,
    pub name: String,
    #[serde(rename = "type")]
    pub ca_type: String,
    pub status: &'static str,
    pub health_status: &'static str,
}

/// `ca.health_changed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaHealthChanged {
    pub ca_id: i64,
    pub name: String,
    /// Health before and after.
    pub previous: &'static str,
    pub current: &'static str,
    pub status: &'static str,
}

/// `discovery.scan_completed`: a scan reached a terminal state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScanCompleted {
    pub scan_id: i64,
    #[serde(rename = "type")]
    pub scan_type: String,
    pub ca_id: Option<i64>,
    pub status: crate::state::ScanStatus,
    pub found: i64,
    pub new: i64,
    pub updated: i64,
    pub failed: i64,
    /// A scan that ran to its end carries `error` (`null` without one); one cancelled through
    /// the API carries none (`None` here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Option<String>>,
}

/// `discovery.new_certificates_found`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewCertificatesFound {
    pub scan_id: i64,
    #[serde(rename = "type")]
    pub scan_type: String,
    pub ca_id: Option<i64>,
    pub count: i64,
}

/// `attestation.failed` (the audit row carries the same details).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttestationFailed {
    pub device_id: i64,
    pub attestation_id: i64,
    pub policy_id: Option<i64>,
    pub failures: Vec<String>,
}

/// `webhook.test`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookTest {
    pub webhook_id: String,
    pub message: &'static str,
}

impl WebhookTest {
    pub fn for_endpoint(webhook_id: &str) -> WebhookTest {
        WebhookTest { webhook_id: webhook_id.to_owned(), message: "This is a test delivery from Trellis." }
    }
}

/// `webhook.disabled` and `integration.disabled` (the audit row carries the same details).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetDisabled {
    /// The endpoint's or integration's id.
    pub id: String,
    pub reason: String,
    pub last_error: Option<String>,
}

/// `plugin.version_deactivated`: a version no longer served because the key that signed it was
/// revoked (plugins are instance-wide; the event goes to the revoking administrator's workspace).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginVersionDeactivated {
    pub plugin_id: String,
    pub version: String,
    pub key_id: String,
    /// `signing_key_revoked`.
    pub reason: String,
}

/// An event to append to the outbox.
pub struct NewEvent<'a> {
    pub workspace_id: &'a str,
    pub event_type: EventType,
    pub payload: &'a serde_json::Value,
    pub created_at: i64,
}

/// An outbox row as workers and tests see it.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    pub id: i64,
    pub workspace_id: String,
    pub event_type: String,
    pub payload: serde_json::Value,
    pub created_at: i64,
    pub processed_at: Option<i64>,
}

/// The workspace's event feed (what webhooks and integrations receive), newest first.
pub async fn list(
    events: &dyn EventReads,
    caller: &crate::caller::Caller,
    event_type: Option<&str>,
    page: crate::pagination::PageRequest,
) -> crate::error::Result<crate::pagination::Page<OutboxEvent>> {
    caller.require(crate::caller::Scope::IntegrationsRead)?;
    Ok(events.list_events(&caller.workspace_id, event_type, page).await?)
}

/// Retention of the outbox: deletes events delivered more than `retention` before now, in
/// batches (each its own short transaction), and returns how many went. Undelivered events are
/// never deleted, however old. Safe on several replicas: a row is deleted once.
pub async fn purge_delivered(
    outbox: &dyn OutboxRetention,
    clock: &dyn crate::clock::Clock,
    retention: std::time::Duration,
) -> crate::error::Result<u64> {
    const BATCH: i64 = 1000;
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let before = clock.now().timestamp_millis().saturating_sub(retention_ms);
    let mut purged = 0;
    loop {
        let batch = outbox.purge_delivered_batch(before, BATCH).await?;
        purged += batch;
        if batch < BATCH as u64 {
            return Ok(purged);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The names in docs/api.md's event catalogue table, in order.
    fn documented_catalogue() -> Vec<(String, String)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md");
        let doc = std::fs::read_to_string(path).expect("docs/api.md is readable");
        let start = doc.find("<!-- event-catalogue:start -->").expect("docs/api.md has the catalogue start marker");
        let end = doc.find("<!-- event-catalogue:end -->").expect("docs/api.md has the catalogue end marker");
        doc[start..end]
            .lines()
            .filter_map(|line| {
                let name = line.strip_prefix("| `")?.split_once('`')?.0;
                Some((name.to_owned(), line.to_owned()))
            })
            .collect()
    }

    #[test]
    fn docs_catalogue_lists_every_event_type() {
        let documented = documented_catalogue();
        let names: Vec<&str> = documented.iter().map(|(name, _)| name.as_str()).collect();
        let types: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names, types, "docs/api.md's event catalogue and EventType::ALL differ");
        for (name, row) in &documented {
            let reserved = name.parse::<EventType>().expect("a documented name parses").is_reserved();
            assert_eq!(row.contains("reserved"), reserved, "{name}: the docs must say reserved exactly when it is");
        }
    }

    #[test]
    fn names_parse_back_and_serialize_as_themselves() {
        for &event_type in EventType::ALL {
            assert_eq!(event_type.as_str().parse::<EventType>(), Ok(event_type));
            assert_eq!(serde_json::to_value(event_type).unwrap(), json!(event_type.as_str()));
            assert_eq!(serde_json::from_value::<EventType>(json!(event_type.as_str())).unwrap(), event_type);
        }
        assert!("*".parse::<EventType>().is_err(), "`*` is a subscription, not a type");
        assert!("certificate.issued".parse::<EventType>().is_err());
        assert!("Certificate.Created".parse::<EventType>().is_err());
        assert_eq!(EventType::ALL.len(), 19);
    }

    #[test]
    fn only_the_workflow_event_is_reserved() {
        let reserved: Vec<EventType> = EventType::ALL.iter().copied().filter(|t| t.is_reserved()).collect();
        assert_eq!(reserved, [EventType::WorkflowExecutionCompleted]);
    }

    fn certificate() -> CertificateData {
        CertificateData {
            certificate_id: 7,
            common_name: "a.example.com".into(),
            issuer: "CN=CA".into(),
            serial_number: "01".into(),
            fingerprint_sha256: "ab".into(),
            expires_at: "2030-01-01T00:00:00Z".into(),
            status: "active",
        }
    }

    /// The payloads are the JSON the events carried before they were typed.
    #[test]
    fn payloads_keep_their_json() {
        let summary = json!({ "certificateId": 7, "commonName": "a.example.com", "issuer": "CN=CA",
            "serialNumber": "01", "fingerprintSha256": "ab", "expiresAt": "2030-01-01T00:00:00Z", "status": "active" });
        assert_eq!(Event::CertificateCreated(certificate()).data().unwrap(), summary);
        let mut with_reason = summary.clone();
        with_reason["reason"] = json!("keyCompromise");
        let revoked = CertificateRevoked { certificate: certificate(), reason: Some("keyCompromise".into()) };
        assert_eq!(Event::CertificateRevoked(revoked).data().unwrap(), with_reason);
        let found_revoked = CertificateRevoked { certificate: certificate(), reason: None };
        assert_eq!(Event::CertificateRevoked(found_revoked).data().unwrap(), summary);
        let mut expiring = summary.clone();
        expiring["daysUntilExpiry"] = json!(12);
        let event =
            Event::CertificateExpiring(CertificateExpiring { certificate: certificate(), days_until_expiry: 12 });
        assert_eq!(event.data().unwrap(), expiring);
        let mut updated = summary.clone();
        updated["changes"] = json!(["location"]);
        let event =
            Event::CertificateUpdated(CertificateUpdated { certificate: certificate(), changes: json!(["location"]) });
        assert_eq!(event.data().unwrap(), updated);

        let scan = |error| ScanCompleted {
            scan_id: 3,
            scan_type: "tls_endpoints".into(),
            ca_id: None,
            status: crate::state::ScanStatus::Completed,
            found: 2,
            new: 1,
            updated: 0,
            failed: 1,
            error,
        };
        let ended = json!({ "scanId": 3, "type": "tls_endpoints", "caId": null, "status": "completed",
            "found": 2, "new": 1, "updated": 0, "failed": 1, "error": null });
        assert_eq!(Event::DiscoveryScanCompleted(scan(Some(None))).data().unwrap(), ended);
        let mut cancelled = ended.clone();
        cancelled.as_object_mut().unwrap().remove("error");
        assert_eq!(Event::DiscoveryScanCompleted(scan(None)).data().unwrap(), cancelled);

        let ca = CaData {
            ca_id: 1,
            name: "ca".into(),
            ca_type: "internal".into(),
            status: "connected",
            health_status: "healthy",
        };
        assert_eq!(
            Event::CaUpdated(ca).data().unwrap(),
            json!({ "caId": 1, "name": "ca", "type": "internal", "status": "connected", "healthStatus": "healthy" })
        );
        assert_eq!(
            Event::WebhookTest(WebhookTest::for_endpoint("whk_1")).data().unwrap(),
            json!({ "webhookId": "whk_1", "message": "This is a test delivery from Trellis." })
        );
        let disabled = TargetDisabled { id: "int_1".into(), reason: "off".into(), last_error: None };
        assert_eq!(
            Event::IntegrationDisabled(disabled).data().unwrap(),
            json!({ "id": "int_1", "reason": "off", "lastError": null })
        );
    }

    #[test]
    fn the_envelope_carries_an_id_only_once_delivered() {
        let data = json!({ "x": 1 });
        let stored = envelope(None, "ws_1", "ca.created", &data, 0);
        assert_eq!(
            stored,
            json!({ "type": "ca.created", "workspaceId": "ws_1", "occurredAt": crate::clock::rfc3339(0), "data": data })
        );
        let delivered = envelope(Some("evt_9"), "ws_1", "ca.created", &data, 0);
        let mut expected = stored;
        expected["id"] = json!("evt_9");
        assert_eq!(delivered, expected);
    }
}
