//! Slack integration: one formatted message per certificate lifecycle event,
//! posted to an incoming webhook.

#![forbid(unsafe_code)]

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// The integration record's configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Slack incoming-webhook URL (`https://hooks.slack.com/services/…`). It is the credential:
    /// kept encrypted and never shown again.
    #[schemars(extend("writeOnly" = true, "pattern" = "^https://", "format" = "uri"))]
    webhook_url: String,
    /// Channel override, e.g. `#certificates`.
    #[serde(default)]
    channel: Option<String>,
    /// Bot name override.
    #[serde(default)]
    username: Option<String>,
    /// Prepended to critical events, e.g. `<!here>`.
    #[serde(default)]
    mention_on_critical: Option<String>,
}

/// The plugin.
pub struct Slack;

impl Integration for Slack {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::integration("io.trellis.slack", env!("CARGO_PKG_VERSION"), "Slack", &["slack"])
            .with_description("Posts certificate lifecycle events to a Slack channel through an incoming webhook.")
            .with_outbound_hosts(&["hooks.slack.com"])
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        if !config.webhook_url.starts_with("https://") {
            return Err(PluginError::invalid_config("/webhookUrl", "must be an https:// URL"));
        }
        Ok(())
    }

    fn test(_ctx: &CallContext, config: &Config) -> Result<TestReport, PluginError> {
        let mut checks = vec![Check::pass("config", "configuration is valid")];
        let body =
            message(config, ":white_check_mark: Trellis connection test", "This is a test message from Trellis.", None);
        match post(config, &body) {
            Ok(status) => {
                checks.push(Check::pass("webhook-delivery", format!("Slack accepted the message (HTTP {status})")))
            }
            Err(err) => checks.push(Check::fail("webhook-delivery", err.to_string())),
        }
        let report = TestReport::from_checks("Slack webhook test", checks);
        Ok(report)
    }

    fn notify(ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
        let (emoji, critical) = match event.event_type.as_str() {
            "certificate.issued" | "certificate.renewed" => (":white_check_mark:", false),
            "certificate.expiring" => (":warning:", false),
            "certificate.expired" => (":red_circle:", true),
            "certificate.revoked" => (":no_entry:", true),
            "certificate.failed" | "certificate.renewal_failed" => (":x:", true),
            _ => (":information_source:", false),
        };
        let mention = if critical { config.mention_on_critical.as_deref() } else { None };
        let headline = format!("{emoji} {}", event.summary);
        let payload = &event.payload;
        // Webhook payloads carry the subject under `data`; flat payloads at the top level.
        let data = payload.get("data").filter(|data| data.is_object());
        let mut details =
            format!("Event `{}` · workspace `{}` · id `{}`", event.event_type, ctx.workspace_id, event.id);
        for (key, label) in [
            ("commonName", "Common name"),
            ("serialNumber", "Serial"),
            ("notAfter", "Expires"),
            ("expiresAt", "Expires"),
        ] {
            let value = data.and_then(|data| data.get(key)).or_else(|| payload.get(key)).and_then(Value::as_str);
            if let Some(value) = value {
                details.push_str(&format!("\n{label}: `{value}`"));
            }
        }
        let body = message(config, &headline, &details, mention);
        let status = post(config, &body)?;
        log::info("slack message posted", &[("event", &event.id), ("status", &status.to_string())]);
        Ok(Delivery::delivered(Some(status)))
    }
}

fn message(config: &Config, headline: &str, details: &str, mention: Option<&str>) -> Value {
    let text = match mention {
        Some(mention) => format!("{mention} {headline}"),
        None => headline.to_owned(),
    };
    let mut body = json!({
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": format!("*{text}*")}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": details}]}
        ]
    });
    if let (Some(channel), Some(obj)) = (&config.channel, body.as_object_mut()) {
        obj.insert("channel".into(), Value::String(channel.clone()));
    }
    if let (Some(username), Some(obj)) = (&config.username, body.as_object_mut()) {
        obj.insert("username".into(), Value::String(username.clone()));
    }
    body
}

fn post(config: &Config, body: &Value) -> Result<u16, PluginError> {
    let res = http::Request::post(&config.webhook_url).json(body)?.timeout_ms(10_000).send()?;
    match res.status {
        200..=299 => Ok(res.status),
        429 => Err(PluginError::RateLimited(res.header("retry-after").and_then(|v| v.trim().parse().ok()))),
        403 | 404 | 410 => Err(PluginError::unauthorized(format!(
            "Slack rejected the webhook (HTTP {}): {}",
            res.status,
            util::truncate(&res.text(), 200)
        ))),
        status => Err(PluginError::upstream(
            Some(status),
            format!("Slack answered HTTP {status}: {}", util::truncate(&res.text(), 200)),
            status >= 500,
        )),
    }
}

trellis_plugin_sdk::export_integration!(Slack);

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_plugin_sdk::testing;

    use super::*;

    const HOOK: &str = "https://hooks.slack.com/services/T0/B0/X";

    #[test]
    fn the_webhook_url_is_a_secret_of_the_derived_schema() {
        assert_eq!(testing::secret_fields::<Config>(), [("/webhookUrl".to_owned(), false)]);
        let schema = testing::config_schema::<Config>();
        assert_eq!(schema["required"], json!(["webhookUrl"]));
        assert_eq!(schema["additionalProperties"], json!(false));
    }

    #[test]
    fn critical_events_mention_and_carry_the_details() {
        testing::http::respond("POST", HOOK, 200, "ok");
        let config: Config =
            testing::config(json!({"webhookUrl": HOOK, "mentionOnCritical": "<!here>"})).expect("config");
        let event = Event::for_test(
            "certificate.expired",
            "Certificate api.example.com expired",
            json!({
                "id": "evt_123",
                "type": "certificate.expired",
                "workspaceId": "ws_test",
                "occurredAt": "2026-11-25T10:00:00.000Z",
                "data": {
                    "certificateId": "crt_1",
                    "commonName": "api.example.com",
                    "serialNumber": "0a",
                    "expiresAt": "2026-11-25T10:00:00.000Z",
                    "status": "expired"
                }
            }),
        );
        let delivery = Slack::notify(&testing::context("int_1"), &config, &event).expect("delivered");
        assert_eq!(delivery.status(), Some(200));
        let sent = testing::http::requests();
        let text = sent[0].json()["text"].as_str().unwrap_or_default().to_owned();
        assert_eq!(text, "<!here> :red_circle: Certificate api.example.com expired");
        let context = sent[0].json()["blocks"][1]["elements"][0]["text"].as_str().unwrap_or_default().to_owned();
        for expected in ["Common name: `api.example.com`", "Serial: `0a`", "Expires: `2026-11-25T10:00:00.000Z`"] {
            assert!(context.contains(expected), "{expected} in {context}");
        }
        assert!(testing::logs().iter().any(|line| line.starts_with("INFO slack message posted")));
    }

    #[test]
    fn flat_payloads_still_carry_the_details() {
        testing::http::respond("POST", HOOK, 200, "ok");
        let config: Config = testing::config(json!({"webhookUrl": HOOK})).expect("config");
        let event = Event::for_test(
            "certificate.expiring",
            "Certificate api.example.com expires in 7 days",
            json!({"commonName": "api.example.com", "notAfter": "2026-01-08T00:00:00Z"}),
        );
        Slack::notify(&testing::context("int_1"), &config, &event).expect("delivered");
        let body = testing::http::requests()[0].json();
        let context = body["blocks"][1]["elements"][0]["text"].as_str().unwrap_or_default().to_owned();
        assert!(context.contains("Common name: `api.example.com`"), "{context}");
        assert!(context.contains("Expires: `2026-01-08T00:00:00Z`"), "{context}");
    }

    #[test]
    fn a_revoked_webhook_is_unauthorized_and_throttling_is_rate_limited() {
        let config: Config = testing::config(json!({"webhookUrl": HOOK})).expect("config");
        let event = Event::for_test("certificate.issued", "issued", json!({}));
        testing::http::respond("POST", HOOK, 404, "no_team");
        let err = Slack::notify(&testing::context("int_1"), &config, &event).expect_err("gone");
        assert!(matches!(err, PluginError::Unauthorized(_)), "{err}");
        testing::reset();
        testing::http::respond("POST", HOOK, 429, "slow down");
        let err = Slack::notify(&testing::context("int_1"), &config, &event).expect_err("throttled");
        assert_eq!(err, PluginError::RateLimited(None));
        assert_eq!(err.to_string(), "rate limited");
    }
}
