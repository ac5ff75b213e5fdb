"""The `issuance-policy` world: a pure decision over one issuance (no HTTP, no state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .types import CallContext, PluginInfo, Subject, SubjectAltName, check_schema, InvalidConfig


@dataclass
class SubjectKey:
    """`algorithm`: `rsa`, `ec`, `ed25519`, `ed448` or an OID; `curve`: `p256`, `p384`, `p521`…"""

    algorithm: str
    size_bits: int
    curve: Optional[str] = None
    server_generated: bool = False


@dataclass
class Requester:
    """`kind`: `user`, `api-key`, `agent` or `system`."""

    kind: str = "user"
    id: str = "user-1"
    display_name: Optional[str] = None


@dataclass
class EvaluationRequest:
    ca_type: str
    ca_id: str
    subject: Subject
    subject_alt_names: list[SubjectAltName]
    key: SubjectKey
    validity_days: int
    template: Optional[str] = None
    requester: Requester = field(default_factory=Requester)
    # `api`, `request-workflow`, `attestation` or `renewal`.
    source: str = "api"

    def dns_names(self) -> list[str]:
        return [san.value for san in self.subject_alt_names if san.kind == "dns"]

    def ip_addresses(self) -> list[str]:
        return [san.value for san in self.subject_alt_names if san.kind == "ip"]


@dataclass
class Reason:
    """A stable machine-readable `code` and a message for the requester (or approver)."""

    code: str
    message: str


@dataclass
class Allow:
    """Go ahead, optionally capping the validity at `max_validity_days` (never lengthening it)."""

    max_validity_days: Optional[int] = None


@dataclass
class Deny:
    reasons: list[Reason]


@dataclass
class RequireApproval:
    reasons: list[Reason]


Decision = Union[Allow, Deny, RequireApproval]


class IssuancePolicy:
    """Subclass and implement `info` and `evaluate`; `validate_config` checks `info().config_schema`
    by default. `config` arrives parsed (a dict)."""

    world = "issuance-policy"

    def info(self) -> PluginInfo:
        raise NotImplementedError

    def validate_config(self, config: dict[str, Any]) -> None:
        issues = check_schema(config, self.info().config_schema)
        if issues:
            raise InvalidConfig(issues)

    def evaluate(self, ctx: CallContext, config: dict[str, Any], request: EvaluationRequest) -> Decision:
        raise NotImplementedError
