"""The `integration` world: deliver lifecycle events to an external system over outbound HTTP."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from .types import CallContext, PluginInfo, TestReport, check_schema, InvalidConfig


@dataclass
class Event:
    """A lifecycle event; the same `id` may arrive more than once (delivery is at least once)."""

    id: str
    event_type: str
    occurred_at: int  # milliseconds since the Unix epoch
    summary: str
    payload: str  # the webhook payload, a JSON object document

    def data(self) -> dict[str, Any]:
        """The payload's `data` member (`{}` when absent)."""
        parsed = json.loads(self.payload or "{}")
        data = parsed.get("data") if isinstance(parsed, dict) else None
        return data if isinstance(data, dict) else {}


@dataclass
class Delivery:
    """What the external system said: its HTTP status and its id for what was created."""

    status: Optional[int] = None
    reference: Optional[str] = None


class Notifier:
    """Subclass and implement `info`, `test` and `notify`."""

    world = "integration"

    def info(self) -> PluginInfo:
        raise NotImplementedError

    def validate_config(self, config: dict[str, Any]) -> None:
        issues = check_schema(config, self.info().config_schema)
        if issues:
            raise InvalidConfig(issues)

    def test(self, ctx: CallContext, config: dict[str, Any]) -> TestReport:
        raise NotImplementedError

    def notify(self, ctx: CallContext, config: dict[str, Any], event: Event) -> Delivery:
        raise NotImplementedError
