"""Trellis plugins in Python (contract `trellis:plugin@0.2.0`): subclass `IssuancePolicy`, `Notifier`
or `CaConnector`, test with `trellis_plugin.testing`, build with `python -m trellis_plugin build`."""

from .types import (
    CallContext,
    Check,
    ConfigIssue,
    Conflict,
    Internal,
    InvalidConfig,
    InvalidInput,
    NotFound,
    NotSupported,
    PluginError,
    PluginInfo,
    RateLimited,
    Rejected,
    SecretField,
    Subject,
    SubjectAltName,
    TestReport,
    Unauthorized,
    Upstream,
    check_schema,
)
from .policy import Allow, Decision, Deny, EvaluationRequest, IssuancePolicy, Reason, Requester, RequireApproval, SubjectKey
from .notifier import Delivery, Event, Notifier
from .connector import CaConnector, CertificateProfile, IssueRequest, Issued, Pending
from .host import Response, http, log, state

__version__ = "0.2.0"
