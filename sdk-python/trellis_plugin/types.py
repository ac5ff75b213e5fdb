"""Types every world shares (contract `trellis:plugin@0.2.0`), as plain Python: plugin code and its
tests never touch the bindings componentize-py generates (the adapter in `_guest.py` converts)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class SecretField:
    """A configuration member holding a secret (JSON pointer, e.g. `/apiKey`). `withheld`: the
    value never enters the sandbox (only host imports that take the pointer read it)."""

    pointer: str
    withheld: bool = False


@dataclass
class PluginInfo:
    """What `describe` returns. The kind is filled in from the world the plugin is built for."""

    id: str
    version: str
    name: str
    serves: list[str]
    description: str = ""
    config_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    secret_fields: list[SecretField] = field(default_factory=list)
    # Connectors only: any of "issue", "revoke", "discover", "renew", "renewal-info".
    capabilities: set[str] = field(default_factory=set)
    default_issuer_patterns: list[str] = field(default_factory=list)
    # Hosts asked for (granting is the operator's); the record's own endpoint is always reachable.
    outbound_hosts: list[str] = field(default_factory=list)


@dataclass
class CallContext:
    """Who a call is made for and which record it serves (filled in by the host)."""

    workspace_id: str
    record_id: str
    request_id: str = "test-request"
    endpoint: Optional[str] = None
    time_budget_ms: int = 10_000


@dataclass
class ConfigIssue:
    """One problem of a configuration: JSON pointer (empty for the whole object) and message."""

    field: str
    message: str


class PluginError(Exception):
    """An error the plugin reports on purpose; the host maps each kind to a status. Any other
    exception escaping plugin code is reported as `internal` with its message."""

    kind = "internal"

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message


class InvalidConfig(PluginError):
    """The configuration is unusable (400): every problem found."""

    kind = "invalid-config"

    def __init__(self, issues: list[ConfigIssue]):
        super().__init__("; ".join(f"{i.field or '/'}: {i.message}" for i in issues))
        self.issues = issues


class InvalidInput(PluginError):
    kind = "invalid-input"


class Unauthorized(PluginError):
    kind = "unauthorized"


class NotFound(PluginError):
    kind = "not-found"


class NotSupported(PluginError):
    kind = "not-supported"


class Conflict(PluginError):
    kind = "conflict"


class Rejected(PluginError):
    """The remote system refused on its own grounds; repeating will not help (a 4xx)."""

    kind = "rejected"


class Internal(PluginError):
    kind = "internal"


class Upstream(PluginError):
    """The remote system failed or answered unexpectedly (`retryable`: the same call may succeed later)."""

    kind = "upstream"

    def __init__(self, message: str, status: Optional[int] = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class RateLimited(PluginError):
    kind = "rate-limited"

    def __init__(self, retry_after: Optional[int] = None):
        super().__init__(f"rate limited (retry after {retry_after} s)" if retry_after else "rate limited")
        self.retry_after = retry_after


@dataclass
class SubjectAltName:
    """A SAN: `kind` is `dns`, `ip`, `email` or `uri`; an IP address is in text form."""

    kind: str
    value: str

    @staticmethod
    def dns(name: str) -> "SubjectAltName":
        return SubjectAltName("dns", name)

    @staticmethod
    def ip(address: str) -> "SubjectAltName":
        return SubjectAltName("ip", str(ipaddress.ip_address(address)))


@dataclass
class Subject:
    common_name: Optional[str] = None
    organization: Optional[str] = None
    organizational_unit: Optional[str] = None
    country: Optional[str] = None
    state: Optional[str] = None
    locality: Optional[str] = None
    # (oid, value) pairs of every other attribute.
    other: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Check:
    """One named check of a test: status is `pass`, `warn`, `fail` or `skip`."""

    name: str
    status: str
    message: str


@dataclass
class TestReport:
    success: bool
    message: str
    checks: list[Check] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_checks(message: str, checks: list[Check]) -> "TestReport":
        """Successful exactly when no check failed."""
        return TestReport(all(c.status != "fail" for c in checks), message, checks)


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def check_schema(value: Any, schema: dict[str, Any], pointer: str = "") -> list[ConfigIssue]:
    """The subset of JSON Schema the SDK checks before `validate_config` (`type`, `properties`,
    `required`, `additionalProperties: false`, `items`, `enum`, `minimum`, `maximum`), every
    problem at its JSON pointer. The host checks the full schema as well; the plugin's own
    `validate_config` stays the authority."""
    issues: list[ConfigIssue] = []
    expected = schema.get("type")
    if expected:
        types = expected if isinstance(expected, list) else [expected]
        ok = any(
            isinstance(value, _TYPES[t]) and not (t in ("integer", "number") and isinstance(value, bool))
            for t in types
            if t in _TYPES
        ) or ("null" in types and value is None)
        if not ok:
            return [ConfigIssue(pointer, f"wrong type: expected {' or '.join(types)}")]
    if "enum" in schema and value not in schema["enum"]:
        issues.append(ConfigIssue(pointer, f"must be one of {', '.join(map(str, schema['enum']))}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            issues.append(ConfigIssue(pointer, f"must be at least {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            issues.append(ConfigIssue(pointer, f"must be at most {schema['maximum']}"))
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                issues.append(ConfigIssue(f"{pointer}/{name}", "required member is missing"))
        for name, member in value.items():
            escaped = name.replace("~", "~0").replace("/", "~1")
            if name in properties:
                if member is not None:
                    issues.extend(check_schema(member, properties[name], f"{pointer}/{escaped}"))
            elif schema.get("additionalProperties") is False:
                issues.append(
                    ConfigIssue(f"{pointer}/{escaped}", f"unknown member; known members: {', '.join(properties)}")
                )
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            issues.extend(check_schema(item, schema["items"], f"{pointer}/{index}"))
    return issues
