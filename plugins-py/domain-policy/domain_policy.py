"""The core rules of the first-party domain policy (plugins/domain-policy), in Python: allowed DNS
suffixes, wildcards, and a validity cap. Same reason codes and messages as the Rust policy, so one
conformance suite (tests/tests/it/policy_conformance.rs) holds all three builds to the same answers.
IP ranges, key rules, approval patterns and `appliesTo` are not part of the core set: a
configuration naming them is refused (never silently ignored)."""

from __future__ import annotations

import ipaddress
from typing import Any, Optional

from trellis_plugin import (
    Allow, CallContext, ConfigIssue, Decision, Deny, EvaluationRequest, InvalidConfig, IssuancePolicy, PluginInfo,
    Reason, check_schema,
)

DNS_SUFFIX_NOT_ALLOWED = "dns_suffix_not_allowed"
WILDCARD_NOT_ALLOWED = "wildcard_not_allowed"
INVALID_WILDCARD = "invalid_wildcard"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "allowedDnsSuffixes": {
            "type": ["array", "null"], "items": {"type": "string"},
            "description": "Every DNS name must equal one of these (without its leading dot) or end with it dotted.",
        },
        "allowWildcards": {"type": ["boolean", "null"], "default": True,
                           "description": "Whether `*.name` wildcard names are allowed."},
        "maxValidityDays": {"type": ["integer", "null"], "minimum": 1,
                            "description": "Longer requests are shortened to this many days (not denied)."},
    },
}

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_DNS_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _normalize(name: str) -> str:
    return (name[:-1] if name.endswith(".") else name).translate(_ASCII_LOWER)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _dns_looking(normalized: str) -> bool:
    """A common name judged as a DNS name: DNS characters only, at least one dot, not an address."""
    return ("." in normalized and not _is_ip(normalized) and all(normalized.split("."))
            and all(c in _DNS_CHARS or c == "*" for c in normalized))


def _suffix(written: str) -> tuple[Optional[tuple[str, str]], Optional[str]]:
    """(written, bare) or the problem."""
    trimmed = written[1:] if written.startswith(".") else written
    bare = (trimmed[:-1] if trimmed.endswith(".") else trimmed).translate(_ASCII_LOWER)
    if not bare:
        return None, f"`{written}` is empty: name a domain, e.g. `.example.com`"
    if any(c.isspace() for c in bare):
        return None, f"`{written}` contains spaces"
    if "*" in bare:
        return None, (f"`{written}` contains `*`: suffixes take no wildcards "
                      "(`.example.com` allows every name under example.com)")
    if not bare.isascii():
        return None, f"`{written}` is not ASCII: write internationalized names as A-labels (`xn--…`)"
    bad = next((c for c in bare if c not in _DNS_CHARS), None)
    if bad is not None:
        return None, f"`{written}` contains `{bad}`, which no DNS name contains"
    if not all(bare.split(".")):
        return None, f"`{written}` has an empty label"
    return (written, bare), None


class Rules:
    def __init__(self, config: dict[str, Any]):
        issues = check_schema(config, SCHEMA)
        self.suffixes: Optional[list[tuple[str, str]]] = None
        suffixes = config.get("allowedDnsSuffixes")
        if isinstance(suffixes, list) and all(isinstance(s, str) for s in suffixes):
            self.suffixes = []
            for index, written in enumerate(suffixes):
                compiled, problem = _suffix(written)
                if problem:
                    issues.append(ConfigIssue(f"/allowedDnsSuffixes/{index}", problem))
                elif compiled:
                    self.suffixes.append(compiled)
        wildcards = config.get("allowWildcards")
        self.allow_wildcards = wildcards if isinstance(wildcards, bool) else True
        max_days = config.get("maxValidityDays")
        self.max_validity_days = max_days if isinstance(max_days, int) and not isinstance(max_days, bool) else None
        if max_days == 0 and not any(i.field == "/maxValidityDays" for i in issues):
            issues.append(ConfigIssue("/maxValidityDays", "must be at least 1 day"))
        if issues:
            raise InvalidConfig(issues)

    def decide(self, request: EvaluationRequest) -> Decision:
        common_name = request.subject.common_name or None
        names: list[tuple[str, str, str]] = []  # (shown, normalized, what)
        for name in request.dns_names():
            normalized = _normalize(name)
            if all(seen != normalized for _, seen, _ in names):
                names.append((name, normalized, "DNS name"))
        if common_name:
            normalized = _normalize(common_name)
            if _dns_looking(normalized) and all(seen != normalized for _, seen, _ in names):
                names.append((common_name, normalized, "common name"))

        denied: list[Reason] = []
        for shown, normalized, what in names:
            self._wildcard(shown, normalized, what, denied)
            self._suffix(shown, normalized, what, denied)
        if denied:
            return Deny(denied)
        if self.max_validity_days is not None and request.validity_days > self.max_validity_days:
            return Allow(self.max_validity_days)
        return Allow()

    def _wildcard(self, shown: str, normalized: str, what: str, denied: list[Reason]) -> None:
        if "*" not in normalized:
            return
        rest = normalized[2:] if normalized.startswith("*.") else None
        if not rest or "*" in rest:
            denied.append(Reason(INVALID_WILDCARD, f"{what} {shown} has a wildcard that is not the whole left-most "
                                                   "label (only `*.name` is allowed)"))
        elif not self.allow_wildcards:
            denied.append(Reason(WILDCARD_NOT_ALLOWED, f"{what} {shown} is a wildcard, and this policy allows no wildcards"))

    def _suffix(self, shown: str, normalized: str, what: str, denied: list[Reason]) -> None:
        if self.suffixes is None:
            return
        for _, bare in self.suffixes:
            if normalized == bare or (normalized.endswith(bare) and normalized[: -len(bare)].endswith(".")):
                return
        if not self.suffixes:
            message = f"{what} {shown} is not allowed: this policy allows no DNS names"
        else:
            allowed = ", ".join(written for written, _ in self.suffixes)
            message = f"{what} {shown} is not under an allowed DNS suffix ({allowed})"
        denied.append(Reason(DNS_SUFFIX_NOT_ALLOWED, message))


class DomainPolicy(IssuancePolicy):
    def info(self) -> PluginInfo:
        return PluginInfo(
            id="trellis.domain-policy-py",
            version="0.1.0",
            name="Domain policy (Python)",
            serves=["domain-policy-py"],
            description="The domain policy's core rules in Python: allowed DNS suffixes, wildcards, a validity cap.",
            config_schema=SCHEMA,
        )

    def validate_config(self, config: dict[str, Any]) -> None:
        Rules(config)

    def evaluate(self, ctx: CallContext, config: dict[str, Any], request: EvaluationRequest) -> Decision:
        # Compiled again on every call: cheap, and a configuration that slipped past validation
        # fails the call (which the host counts as a denial) rather than allowing everything.
        return Rules(config).decide(request)
