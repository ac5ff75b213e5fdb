//! Slack integration: one formatted message per certificate lifecycle event,
//! posted to an incoming webhook.

use serde::Deserialize;
use serde_json::{json, Value};
use trellis_plugin_sdk::prelude::*;

/// The integration record's configuration.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    webhook_url: String,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    username: Option<String>,
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
            .with_config_schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "required": ["webhookUrl"],
                "additionalProperties": false,
                "properties": {
                    "webhookUrl": {"type": "string", "format": "uri", "pattern": "^https://",
                                   "description": "Slack incoming-webhook URL", "x-secret": true},
                    "channel": {"type": "string"},
                    "username": {"type": "string"},
                    "mentionOnCritical": {"type": "string", "examples": ["<!here>"]}
                }
            }))
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
            Err(err) => checks.push(Check::fail("webhook-delivery", plugin_error_text(&err))),
        }
        let report = TestReport::from_checks("Slack webhook test", checks);
        Ok(report)
    }

    fn notify(_ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
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
        let payload = event.payload_json().unwrap_or(Value::Null);
        let mut details =
            format!("Event `{}` · workspace `{}` · id `{}`", event.event_type, event.workspace_id, event.id);
        for (key, label) in [
            ("commonName", "Common name"),
            ("serialNumber", "Serial"),
            ("notAfter", "Expires"),
            ("expiresAt", "Expires"),
        ] {
            if let Some(value) = payload.get(key).and_then(Value::as_str) {
                details.push_str(&format!("\n{label}: `{value}`"));
            }
        }
        let body = message(config, &headline, &details, mention);
        let status = post(config, &body)?;
        log::info("slack message posted", &[("event", &event.id), ("status", &status.to_string())]);
        Ok(Delivery { status: Some(status), reference: None })
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
            truncate(&res.text())
        ))),
        status => Err(PluginError::upstream(
            Some(status),
            format!("Slack answered HTTP {status}: {}", truncate(&res.text())),
            status >= 500,
        )),
    }
}

fn plugin_error_text(err: &PluginError) -> String {
    match err {
        PluginError::Upstream(failure) => failure.message.clone(),
        PluginError::Unauthorized(message) => message.clone(),
        PluginError::RateLimited(_) => "Slack is rate limiting this webhook".to_owned(),
        other => format!("{other:?}"),
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(200).collect()
}

trellis_plugin_sdk::export_integration!(Slack);
