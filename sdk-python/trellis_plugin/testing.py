"""A local test harness: run a plugin under CPython with fake host imports (HTTP, state, log), the
configuration passed through JSON as the host passes it, no component build needed.

    h = Harness(MyPolicy(), config={"allowedDnsSuffixes": [".example.com"]})
    decision = h.evaluate(evaluation_request(dns=["www.example.com"]))
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from . import host
from .connector import IssueOutcome, IssueRequest
from .notifier import Delivery, Event
from .policy import Decision, EvaluationRequest, SubjectKey
from .types import CallContext, Subject, SubjectAltName, TestReport


@dataclass
class Request:
    """An outbound request the plugin made."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Union[host.Response, Callable[[Request], host.Response]]


class FakeHttp:
    """Answers outbound requests from routes (`on(method, url, response_or_handler)`); an unrouted
    request fails loudly. With `real=True`, unrouted requests go out for real (a local test peer)."""

    def __init__(self, real: bool = False):
        self.routes: list[tuple[str, str, Handler]] = []
        self.requests: list[Request] = []
        self.real = real

    def on(self, method: str, url: str, answer: Handler) -> "FakeHttp":
        self.routes.append((method.upper(), url, answer))
        return self

    def __call__(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> host.Response:
        request = Request(method, url, headers, body)
        self.requests.append(request)
        for m, u, answer in self.routes:
            if m == method and (u == url or (u.endswith("*") and url.startswith(u[:-1]))):
                return answer(request) if callable(answer) else answer
        if self.real:
            sent = urllib.request.Request(url, data=body or None, method=method, headers=dict(headers))
            try:
                with urllib.request.urlopen(sent, timeout=10) as r:
                    return host.Response(r.status, [(k.lower(), v) for k, v in r.getheaders()], r.read())
            except urllib.error.HTTPError as err:
                return host.Response(err.code, [(k.lower(), v) for k, v in err.headers.items()], err.read())
        raise AssertionError(f"unexpected outbound request {method} {url}; routes: {[(m, u) for m, u, _ in self.routes]}")


class FakeHost(host.Backend):
    def __init__(self, http: Optional[FakeHttp] = None):
        self.fake_http = http or FakeHttp()
        self.state: dict[str, bytes] = {}
        self.logs: list[tuple[str, str, dict[str, str]]] = []

    def http(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> host.Response:
        return self.fake_http(method, url, headers, body)

    def state_get(self, key: str) -> Optional[bytes]:
        return self.state.get(key)

    def state_set(self, key: str, value: bytes) -> None:
        self.state[key] = bytes(value)

    def state_delete(self, key: str) -> None:
        self.state.pop(key, None)

    def log(self, level: str, message: str, fields: dict[str, str]) -> None:
        self.logs.append((level, message, fields))


class Harness:
    """Calls a plugin as the host does: `describe`'s info checked, the configuration round-tripped
    through JSON and validated before each call, the fake host installed for the call."""

    def __init__(self, plugin: Any, config: Optional[dict[str, Any]] = None, http: Optional[FakeHttp] = None,
                 ctx: Optional[CallContext] = None):
        self.plugin = plugin
        self.config = config or {}
        self.host = FakeHost(http)
        self.ctx = ctx or CallContext(workspace_id="ws-test", record_id="record-1")
        info = plugin.info()
        assert 3 <= len(info.id) <= 64, f"plugin id {info.id!r} must be 3 to 64 characters"
        json.dumps(info.config_schema)  # must be JSON

    @property
    def http(self) -> FakeHttp:
        return self.host.fake_http

    def _config(self, config: Optional[dict[str, Any]]) -> dict[str, Any]:
        return json.loads(json.dumps(self.config if config is None else config))

    def validate(self, config: Optional[dict[str, Any]] = None) -> None:
        host.set_backend(self.host)
        self.plugin.validate_config(self._config(config))

    def _call(self, run: Callable[[dict[str, Any]], Any]) -> Any:
        config = self._config(None)
        host.set_backend(self.host)
        self.plugin.validate_config(config)
        return run(config)

    def evaluate(self, request: EvaluationRequest) -> Decision:
        return self._call(lambda config: self.plugin.evaluate(self.ctx, config, request))

    def notify(self, event: Event) -> Delivery:
        return self._call(lambda config: self.plugin.notify(self.ctx, config, event))

    def test(self) -> TestReport:
        return self._call(lambda config: self.plugin.test(self.ctx, config))

    def issue(self, request: IssueRequest) -> IssueOutcome:
        return self._call(lambda config: self.plugin.issue(self.ctx, config, request))


def evaluation_request(common_name: Optional[str] = None, dns: tuple[str, ...] | list[str] = (),
                       ips: tuple[str, ...] | list[str] = (), validity_days: int = 90,
                       key: Optional[SubjectKey] = None, ca_type: str = "internal",
                       template: Optional[str] = None) -> EvaluationRequest:
    sans = [SubjectAltName.dns(d) for d in dns] + [SubjectAltName.ip(i) for i in ips]
    return EvaluationRequest(ca_type, "ca-1", Subject(common_name=common_name), sans,
                             key or SubjectKey("ec", 256, "p256"), validity_days, template)


def event(event_type: str = "certificate.expiring", summary: str = "Certificate www.example.com expires in 7 days",
          data: Optional[dict[str, Any]] = None, id: str = "evt-1") -> Event:
    payload = {"id": id, "type": event_type, "data": data or {}}
    return Event(id, event_type, int(time.time() * 1000), summary, json.dumps(payload))
