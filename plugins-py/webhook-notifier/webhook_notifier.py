"""An integration in Python (`trellis:plugin/integration@0.2.0`, type `json-webhook-py`): each lifecycle
event is POSTed as JSON to the configured HTTPS URL with the token as a bearer credential and the event
id as `Idempotency-Key` (delivery is at least once: receivers deduplicate on it)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from trellis_plugin import (
    CallContext, Check, ConfigIssue, Delivery, Event, InvalidConfig, Notifier, PluginInfo, RateLimited, SecretField,
    TestReport, Unauthorized, Upstream, check_schema, http, log,
)

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {"type": "string", "format": "uri", "description": "HTTPS URL the events are POSTed to."},
        "token": {"type": "string", "writeOnly": True, "description": "Sent as `Authorization: Bearer …` (secret)."},
    },
}


def _problems(config: dict[str, Any]) -> list[ConfigIssue]:
    issues = check_schema(config, SCHEMA)
    url = config.get("url")
    if isinstance(url, str):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            issues.append(ConfigIssue("/url", "must be an https:// URL with a host"))
    return issues


def _post(config: dict[str, Any], body: dict[str, Any], idempotency_key: str) -> Delivery:
    headers = {"idempotency-key": idempotency_key, "user-agent": "trellis-webhook-notifier-py/0.1"}
    if config.get("token"):
        headers["authorization"] = f"Bearer {config['token']}"
    response = http.post_json(config["url"], body, headers)
    if response.status in (401, 403):
        raise Unauthorized(f"the receiver refused the token (HTTP {response.status})")
    if response.status == 429:
        retry = response.header("retry-after")
        raise RateLimited(int(retry) if retry and retry.isdigit() else None)
    if response.status >= 300:
        # 5xx and 408 may pass on a later attempt; other 4xx will not.
        retryable = response.status >= 500 or response.status == 408
        raise Upstream(f"the receiver answered HTTP {response.status}", response.status, retryable)
    reference = None
    if "json" in (response.header("content-type") or ""):
        answer = response.json()
        if isinstance(answer, dict) and isinstance(answer.get("id"), str):
            reference = answer["id"]
    return Delivery(response.status, reference)


class WebhookNotifier(Notifier):
    def info(self) -> PluginInfo:
        return PluginInfo(
            id="trellis.json-webhook-py",
            version="0.1.0",
            name="JSON webhook (Python)",
            serves=["json-webhook-py"],
            description="POSTs each lifecycle event as JSON to an HTTPS URL with a bearer token.",
            config_schema=SCHEMA,
            secret_fields=[SecretField("/token")],
        )

    def validate_config(self, config: dict[str, Any]) -> None:
        issues = _problems(config)
        if issues:
            raise InvalidConfig(issues)

    def test(self, ctx: CallContext, config: dict[str, Any]) -> TestReport:
        checks = [Check("config", "pass", "the configuration is complete")]
        try:
            delivery = _post(config, {"eventType": "trellis.test", "summary": "Trellis connection test"}, f"test-{ctx.request_id}")
            checks.append(Check("delivery", "pass", f"the receiver answered HTTP {delivery.status}"))
        except (Upstream, Unauthorized, RateLimited) as err:
            checks.append(Check("delivery", "fail", err.message))
        return TestReport.from_checks("JSON webhook test", checks)

    def notify(self, ctx: CallContext, config: dict[str, Any], event: Event) -> Delivery:
        body = {
            "eventId": event.id,
            "eventType": event.event_type,
            "occurredAt": event.occurred_at,
            "summary": event.summary,
            "workspaceId": ctx.workspace_id,
            "data": event.data(),
        }
        delivery = _post(config, body, event.id)
        log.info("event delivered", event_type=event.event_type, status=delivery.status)
        return delivery
