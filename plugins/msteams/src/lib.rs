//! Microsoft Teams integration: one card per certificate lifecycle event, posted to a Teams
//! incoming webhook or a Power Automate "Workflows" webhook.
//!
//! Adaptive Cards (the default) work with both; the legacy MessageCard format only with the
//! retiring Office 365 connectors.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// The integration record's configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Teams incoming-webhook URL (`https://<tenant>.webhook.office.com/…`) or Power Automate
    /// Workflows URL (`https://….logic.azure.com/workflows/…`, `https://….powerplatform.com/…`).
    /// It is the credential: kept encrypted and never shown again.
    #[schemars(extend("writeOnly" = true, "pattern" = "^https://", "format" = "uri"))]
    webhook_url: String,
    /// Card format: `adaptiveCard` (default; incoming webhooks and Workflows) or `messageCard`
    /// (legacy Office 365 connector cards).
    #[serde(default)]
    format: Option<Format>,
}

/// The card format posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Format {
    /// An Adaptive Card 1.4 in a `message` attachment.
    #[default]
    AdaptiveCard,
    /// A legacy connector MessageCard.
    MessageCard,
}

/// The plugin.
pub struct MsTeams;

impl Integration for MsTeams {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::integration("io.trellis.msteams", env!("CARGO_PKG_VERSION"), "Microsoft Teams", &["msteams"])
            .with_description(
                "Posts certificate lifecycle events to a Microsoft Teams channel through an incoming webhook \
                 or a Power Automate Workflows webhook, as Adaptive Cards or MessageCards.",
            )
            .with_outbound_hosts(&["*.webhook.office.com", "*.logic.azure.com", "*.powerplatform.com"])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        let mut issues = Vec::new();
        if let Some(problem) = http::https_url_problem(&config.webhook_url) {
            issues.push(ConfigIssue { field: "/webhookUrl".into(), message: problem.into() });
        }
        if issues.is_empty() {
            Ok(())
        } else {
            Err(PluginError::InvalidConfig(issues))
        }
    }

    fn test(_ctx: &CallContext, config: &Config) -> Result<TestReport, PluginError> {
        let mut checks = vec![Check::pass("config", "configuration is valid")];
        let facts = vec![("Event", "webhook.test".to_owned())];
        let body = card(config, Tone::Good, "Trellis connection test", "This is a test message from Trellis.", &facts);
        match post(config, &body) {
            Ok(status) => {
                checks.push(Check::pass("webhook-delivery", format!("Teams accepted the message (HTTP {status})")))
            }
            Err(err) => checks.push(Check::fail("webhook-delivery", err.to_string())),
        }
        Ok(TestReport::from_checks("Microsoft Teams webhook test", checks))
    }

    fn notify(ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
        let tone = tone(event);
        let mut facts = vec![("Event", event.event_type.clone())];
        facts.extend(details(event));
        facts.push(("Workspace", event.workspace_id(ctx).to_owned()));
        facts.push(("Occurred", event.occurred_at()));
        facts.push(("Event ID", event.id.clone()));
        let title = if event.summary.is_empty() { event.event_type.as_str() } else { event.summary.as_str() };
        let body = card(config, tone, title, "", &facts);
        let status = post(config, &body)?;
        log::info("teams message posted", &[("event", &event.id), ("status", &status.to_string())]);
        Ok(Delivery::delivered(Some(status)))
    }
}

/// How an event is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tone {
    Attention,
    Warning,
    Good,
    Default,
}

fn tone(event: &Event) -> Tone {
    match event.event_type.as_str() {
        "certificate.expired" | "certificate.revoked" | "certificate.renewal_failed" | "attestation.failed" => {
            Tone::Attention
        }
        "certificate.expiring" => Tone::Warning,
        "certificate.renewed" | "certificate.created" => Tone::Good,
        "ca.health_changed" => match event.health().as_deref() {
            Some("unhealthy") => Tone::Attention,
            Some("degraded") => Tone::Warning,
            Some("healthy") => Tone::Good,
            _ => Tone::Default,
        },
        _ => Tone::Default,
    }
}

/// The card to post; `subtitle` may be empty.
fn card(config: &Config, tone: Tone, title: &str, subtitle: &str, facts: &[(&str, String)]) -> Value {
    match config.format.unwrap_or_default() {
        Format::AdaptiveCard => {
            let color = match tone {
                Tone::Attention => "Attention",
                Tone::Warning => "Warning",
                Tone::Good => "Good",
                Tone::Default => "Default",
            };
            let mut body = vec![
                json!({"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium", "wrap": true, "color": color}),
            ];
            if !subtitle.is_empty() {
                body.push(json!({"type": "TextBlock", "text": subtitle, "wrap": true}));
            }
            let facts: Vec<Value> =
                facts.iter().map(|(title, value)| json!({"title": title, "value": value})).collect();
            body.push(json!({"type": "FactSet", "facts": facts}));
            json!({
                "type": "message",
                "attachments": [{
                    "contentType": "application/vnd.microsoft.card.adaptive",
                    "contentUrl": null,
                    "content": {
                        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                        "type": "AdaptiveCard",
                        "version": "1.4",
                        "body": body,
                        "msteams": {"width": "Full"}
                    }
                }]
            })
        }
        Format::MessageCard => {
            let theme = match tone {
                Tone::Attention => "D13438",
                Tone::Warning => "FFB900",
                Tone::Good => "107C10",
                Tone::Default => "0078D7",
            };
            let facts: Vec<Value> = facts.iter().map(|(name, value)| json!({"name": name, "value": value})).collect();
            let mut section = json!({"activityTitle": title, "facts": facts, "markdown": false});
            if !subtitle.is_empty() {
                section["text"] = Value::String(subtitle.to_owned());
            }
            json!({
                "@type": "MessageCard",
                "@context": "https://schema.org/extensions",
                "summary": util::truncate(title, 200),
                "themeColor": theme,
                "title": title,
                "sections": [section]
            })
        }
    }
}

fn post(config: &Config, body: &Value) -> Result<u16, PluginError> {
    let res = http::Request::post(&config.webhook_url).json(body)?.timeout_ms(10_000).send()?;
    classify(&res)?;
    Ok(res.status)
}

/// Maps Teams' answer. Legacy connectors report some failures, throttling included, as
/// HTTP 200 with the error in the body text.
fn classify(res: &http::Response) -> Result<(), PluginError> {
    let text = res.text();
    match res.status {
        200..=299 if text.contains("HTTP error 429") => Err(PluginError::RateLimited(res.retry_after_secs())),
        200..=299 if text.contains("returned HTTP error") => Err(PluginError::upstream(
            Some(res.status),
            format!("Teams refused the message: {}", util::truncate(&text, 200)),
            false,
        )),
        200..=299 => Ok(()),
        429 => Err(PluginError::RateLimited(res.retry_after_secs())),
        401 | 403 | 404 | 410 => Err(PluginError::unauthorized(format!(
            "Teams rejected the webhook (HTTP {}): {}",
            res.status,
            util::truncate(&text, 200)
        ))),
        status => Err(PluginError::upstream(
            Some(status),
            format!("Teams answered HTTP {status}: {}", util::truncate(&text, 200)),
            status >= 500 || status == 408,
        )),
    }
}

/// Labelled details of the event's subject, in display order.
const DETAILS: &[(&str, &str)] = &[
    ("commonName", "Common name"),
    ("name", "Name"),
    ("issuer", "Issuer"),
    ("serialNumber", "Serial number"),
    ("expiresAt", "Expires"),
    ("notAfter", "Expires"),
    ("daysUntilExpiry", "Days until expiry"),
    ("status", "Status"),
    ("reason", "Reason"),
    ("error", "Error"),
    ("healthStatus", "Health"),
    ("previous", "Previous health"),
    ("current", "Health"),
    ("fingerprintSha256", "SHA-256 fingerprint"),
    ("certificateId", "Certificate ID"),
    ("oldCertificateId", "Renewed certificate ID"),
    ("newCertificateId", "New certificate ID"),
    ("caId", "CA ID"),
    ("deviceId", "Device ID"),
];

fn details(event: &Event) -> Vec<(&'static str, String)> {
    let data = event.data();
    DETAILS.iter().filter_map(|(key, label)| util::text(data, key).map(|value| (*label, value))).collect()
}

trellis_plugin_sdk::export_integration!(MsTeams);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_plugin_sdk::testing;

    use super::*;

    const HOOK: &str = "https://contoso.webhook.office.com/webhookb2/a@b/IncomingWebhook/c/d";

    fn expiring() -> Event {
        Event::for_test(
            "certificate.expiring",
            "Certificate api.example.com expires in 7 days",
            json!({
                "id": "evt_123",
                "type": "certificate.expiring",
                "workspaceId": "ws_1",
                "occurredAt": "2026-11-25T10:00:00.000Z",
                "data": {
                    "certificateId": "crt_1",
                    "commonName": "api.example.com",
                    "issuer": "CN=Example CA",
                    "serialNumber": "0a1b",
                    "fingerprintSha256": "ab:cd",
                    "expiresAt": "2026-12-02T10:00:00.000Z",
                    "status": "active",
                    "daysUntilExpiry": 7
                }
            }),
        )
    }

    fn facts(body: &Value) -> Vec<(String, String)> {
        body["attachments"][0]["content"]["body"][1]["facts"]
            .as_array()
            .map(|facts| {
                facts
                    .iter()
                    .map(|f| {
                        (f["title"].as_str().unwrap_or("").to_owned(), f["value"].as_str().unwrap_or("").to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn the_webhook_url_is_a_secret_of_the_derived_schema() {
        assert_eq!(testing::secret_fields::<Config>(), [("/webhookUrl".to_owned(), false)]);
        let schema = testing::config_schema::<Config>();
        assert_eq!(schema["required"], json!(["webhookUrl"]));
        assert_eq!(schema["additionalProperties"], json!(false));
        let info = MsTeams::describe();
        assert_eq!(info.id(), "io.trellis.msteams");
    }

    #[test]
    fn configs_are_checked() {
        let config: Config = testing::config(json!({"webhookUrl": "http://example.com/hook"})).expect("config");
        let err = MsTeams::validate_config(&config).expect_err("http refused");
        assert!(matches!(&err, PluginError::InvalidConfig(issues) if issues[0].field == "/webhookUrl"), "{err}");
        let config: Config =
            testing::config(json!({"webhookUrl": "https://localhost:8443/hook", "format": "messageCard"}))
                .expect("config");
        assert_eq!(MsTeams::validate_config(&config), Ok(()));
        let config: Config = testing::config(json!({"webhookUrl": HOOK})).expect("config");
        assert_eq!(MsTeams::validate_config(&config), Ok(()), "an @ in the path is no credential");
        assert!(testing::config::<Config>(json!({"webhookUrl": HOOK, "format": "html"})).is_err());
        assert!(testing::config::<Config>(json!({"webhookUrl": HOOK, "channel": "x"})).is_err());
    }

    #[test]
    fn an_expiring_certificate_is_an_adaptive_card_with_its_details() {
        testing::http::respond("POST", HOOK, 200, "1");
        let config: Config = testing::config(json!({"webhookUrl": HOOK})).expect("config");
        let delivery = MsTeams::notify(&testing::context("int_1"), &config, &expiring()).expect("delivered");
        assert_eq!(delivery.status(), Some(200));
        let sent = testing::http::requests();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].method, "POST");
        assert_eq!(sent[0].header("content-type").as_deref(), Some("application/json"));
        let body = sent[0].json();
        assert_eq!(body["type"], "message");
        assert_eq!(body["attachments"][0]["contentType"], "application/vnd.microsoft.card.adaptive");
        let content = &body["attachments"][0]["content"];
        assert_eq!(content["type"], "AdaptiveCard");
        assert_eq!(content["version"], "1.4");
        assert_eq!(content["$schema"], "http://adaptivecards.io/schemas/adaptive-card.json");
        assert_eq!(content["body"][0]["type"], "TextBlock");
        assert_eq!(content["body"][0]["text"], "Certificate api.example.com expires in 7 days");
        assert_eq!(content["body"][0]["color"], "Warning");
        assert_eq!(content["body"][1]["type"], "FactSet");
        let facts = facts(&body);
        for expected in [
            ("Event", "certificate.expiring"),
            ("Common name", "api.example.com"),
            ("Serial number", "0a1b"),
            ("Expires", "2026-12-02T10:00:00.000Z"),
            ("Days until expiry", "7"),
            ("Workspace", "ws_1"),
            ("Occurred", "2026-11-25T10:00:00.000Z"),
        ] {
            assert!(facts.contains(&(expected.0.to_owned(), expected.1.to_owned())), "{expected:?} in {facts:?}");
        }
        assert!(testing::logs().iter().any(|line| line.starts_with("INFO teams message posted")));
    }

    #[test]
    fn the_legacy_format_is_a_message_card_and_flat_payloads_still_work() {
        testing::http::respond("POST", HOOK, 200, "1");
        let config: Config = testing::config(json!({"webhookUrl": HOOK, "format": "messageCard"})).expect("config");
        let event =
            Event::for_test("certificate.expired", "Certificate a.example expired", json!({"commonName": "a.example"}));
        MsTeams::notify(&testing::context("int_1"), &config, &event).expect("delivered");
        let body = testing::http::requests()[0].json();
        assert_eq!(body["@type"], "MessageCard");
        assert_eq!(body["@context"], "https://schema.org/extensions");
        assert_eq!(body["themeColor"], "D13438");
        assert_eq!(body["title"], "Certificate a.example expired");
        let facts = body["sections"][0]["facts"].as_array().cloned().unwrap_or_default();
        assert!(facts.contains(&json!({"name": "Common name", "value": "a.example"})), "{facts:?}");
        assert!(facts.contains(&json!({"name": "Workspace", "value": "ws_test"})), "{facts:?}");
        assert!(facts.contains(&json!({"name": "Occurred", "value": "2026-01-01T00:00:00.000Z"})), "{facts:?}");
    }

    #[test]
    fn errors_map_to_plugin_errors() {
        let config: Config = testing::config(json!({"webhookUrl": HOOK})).expect("config");
        for (status, body) in [(404, "not found"), (401, ""), (403, "")] {
            testing::reset();
            testing::http::respond("POST", HOOK, status, body);
            let err = MsTeams::notify(&testing::context("int_1"), &config, &expiring()).expect_err("refused");
            assert!(matches!(err, PluginError::Unauthorized(_)), "{status}: {err}");
        }
        testing::reset();
        testing::http::respond("POST", HOOK, 503, "busy");
        let err = MsTeams::notify(&testing::context("int_1"), &config, &expiring()).expect_err("down");
        assert!(matches!(err, PluginError::Upstream { status: Some(503), retryable: true, .. }), "{err}");
        testing::reset();
        testing::http::respond("POST", HOOK, 400, "bad card");
        let err = MsTeams::notify(&testing::context("int_1"), &config, &expiring()).expect_err("bad");
        assert!(matches!(err, PluginError::Upstream { status: Some(400), retryable: false, .. }), "{err}");
        testing::reset();
        testing::http::respond("POST", HOOK, 200, "Microsoft Teams endpoint returned HTTP error 429 with ContextId x");
        let err = MsTeams::notify(&testing::context("int_1"), &config, &expiring()).expect_err("throttled");
        assert_eq!(err, PluginError::RateLimited(None));
    }

    #[test]
    fn throttling_carries_retry_after() {
        let res =
            http::Response { status: 429, headers: vec![("retry-after".into(), b"30".to_vec())], body: Vec::new() };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(Some(30))));
        let res = http::Response { status: 429, headers: Vec::new(), body: Vec::new() };
        assert_eq!(classify(&res), Err(PluginError::RateLimited(None)));
    }

    #[test]
    fn the_test_posts_a_test_card_and_reports_failures_as_checks() {
        let config: Config = testing::config(json!({"webhookUrl": HOOK})).expect("config");
        testing::http::respond("POST", HOOK, 202, "");
        let report = MsTeams::test(&testing::context("int_1"), &config).expect("report");
        assert!(report.success(), "{report:?}");
        let names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["config", "webhook-delivery"]);
        let body = testing::http::requests()[0].json();
        assert_eq!(body["attachments"][0]["content"]["body"][0]["text"], "Trellis connection test");
        testing::reset();
        testing::http::respond("POST", HOOK, 404, "");
        let report = MsTeams::test(&testing::context("int_1"), &config).expect("report");
        assert!(!report.success());
    }

    #[test]
    fn timestamps_render_as_rfc3339() {
        assert_eq!(util::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(util::rfc3339(1_767_225_600_000), "2026-01-01T00:00:00.000Z");
        assert_eq!(util::rfc3339(1_795_946_400_123), "2026-11-29T10:00:00.123Z");
        assert_eq!(util::rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
