"""The `ca-connector` world: issue (and optionally revoke, discover) through a CA over outbound HTTP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .types import CallContext, PluginInfo, Subject, SubjectAltName, TestReport, NotSupported, check_schema, InvalidConfig


@dataclass
class CertificateProfile:
    subject: Subject
    subject_alt_names: list[SubjectAltName]
    key_usages: set[str]  # e.g. {"digital-signature", "key-encipherment"}
    extended_key_usages: list[str]  # dotted OIDs
    validity_days: int


@dataclass
class IssueRequest:
    idempotency_key: str
    csr_der: bytes
    csr_pem: str
    profile: CertificateProfile
    template: Optional[str] = None
    metadata: str = "{}"


@dataclass
class Issued:
    """The leaf (PEM text may carry its chain after it), the chain, and the CA's reference."""

    certificate_pem: str
    chain_pem: list[str] = field(default_factory=list)
    ca_reference: Optional[str] = None


@dataclass
class Pending:
    reference: str
    status_message: str
    retry_after_seconds: Optional[int] = None


IssueOutcome = Union[Issued, Pending]


class CaConnector:
    """Subclass and implement `info` and `issue` (declare `capabilities={"issue"}`); every other
    operation answers `not-supported` unless overridden."""

    world = "ca-connector"

    def info(self) -> PluginInfo:
        raise NotImplementedError

    def validate_config(self, config: dict[str, Any]) -> None:
        issues = check_schema(config, self.info().config_schema)
        if issues:
            raise InvalidConfig(issues)

    def setup(self, ctx: CallContext, config: dict[str, Any]) -> None:
        return None

    def test_connection(self, ctx: CallContext, config: dict[str, Any]) -> TestReport:
        raise NotSupported("test-connection")

    def issue(self, ctx: CallContext, config: dict[str, Any], request: IssueRequest) -> IssueOutcome:
        raise NotSupported("issue")

    def poll_issue(self, ctx: CallContext, config: dict[str, Any], reference: str, request: IssueRequest) -> IssueOutcome:
        raise NotSupported("poll-issue")

    def ca_chain(self, ctx: CallContext, config: dict[str, Any]) -> list[str]:
        """The CA's own chain as PEM texts, issuing CA first."""
        raise NotSupported("ca-chain")
