"""The adapter between the bindings componentize-py generates (`wit_world`, present only while a
component is built) and the SDK's plain types. `python -m trellis_plugin build` writes an `app.py`
that calls `export(plugin)`; nothing here runs under CPython tests."""

from __future__ import annotations

import ipaddress
import json
import urllib.parse
from typing import Any, Optional

from componentize_py_types import Err

from . import host as _host
from . import types as t
from . import policy as p
from . import notifier as n
from . import connector as c

# The world's shared types: `types`, unless another import of the world is also called `types`
# (wasi:http's), in which case componentize-py names it after its package.
try:
    from wit_world.imports import trellis_plugin_types as wt
except ImportError:  # the issuance-policy world imports no wasi:http
    from wit_world.imports import types as wt  # type: ignore[no-redef]
from wit_world.imports import logging as wlog

# Every import happens here, while componentize-py pre-initialises the module: with `--stub-wasi`
# the component has no filesystem, so an import (or anything reading a file, such as formatting
# a traceback with source lines) during a call would trap.
try:
    from wit_world.imports import outgoing_handler as _handler
    from wit_world.imports import wasi_http_types as _h
except ImportError:  # a world without outbound HTTP
    _handler = _h = None
try:
    from wit_world.imports import state as _wstate
except ImportError:  # a world without state
    _wstate = None


def _enum_name(member: Any) -> str:
    return member.name.lower().replace("_", "-")


def _enum(enum_type: Any, name: str) -> Any:
    return enum_type[name.upper().replace("-", "_")]


# --- host imports ---------------------------------------------------------------------------


class GuestBackend(_host.Backend):
    def http(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> _host.Response:
        if _handler is None:
            raise t.NotSupported("this plugin's world has no outbound HTTP")
        return _http(_h, _handler, method, url, headers, body)

    def state_get(self, key: str) -> Optional[bytes]:
        return _state_call("get", key)

    def state_set(self, key: str, value: bytes) -> None:
        _state_call("set", key, value)

    def state_delete(self, key: str) -> None:
        _state_call("delete", key)

    def log(self, level: str, message: str, fields: dict[str, str]) -> None:
        wlog.log(_enum(wlog.Level, level), message, [wlog.Field(k, v) for k, v in fields.items()])


def _state_call(name: str, *args: Any) -> Any:
    if _wstate is None:
        raise t.NotSupported("this plugin's world has no state")
    try:
        return getattr(_wstate, name)(*args)
    except Err as err:
        raise t.Internal(f"state {name} failed: {err.value}") from None


def _http(h: Any, handler: Any, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> _host.Response:
    target = urllib.parse.urlsplit(url)
    if target.scheme not in ("http", "https") or not target.netloc:
        raise t.InvalidInput(f"not an http(s) URL: {url}")
    names = {k.lower() for k, _ in headers}
    entries = [(k, v.encode()) for k, v in headers]
    if "content-length" not in names and (body or method not in ("GET", "HEAD")):
        # A declared length lets servers that do not take chunked uploads read the body.
        entries.append(("content-length", str(len(body)).encode()))
    methods = {"GET": h.Method_Get, "HEAD": h.Method_Head, "POST": h.Method_Post, "PUT": h.Method_Put,
               "DELETE": h.Method_Delete, "PATCH": h.Method_Patch, "OPTIONS": h.Method_Options}
    fields = h.Fields()
    for name, value in entries:
        fields.append(name, value)
    request = h.OutgoingRequest(fields)
    request.set_method(methods[method]() if method in methods else h.Method_Other(method))
    request.set_scheme(h.Scheme_Https() if target.scheme == "https" else h.Scheme_Http())
    request.set_authority(target.netloc)
    request.set_path_with_query((target.path or "/") + (f"?{target.query}" if target.query else ""))
    outgoing = request.body()
    # `handle` before the body is written: the host buffers only a little of it and drains it
    # into the connection `handle` opens.
    try:
        future = handler.handle(request, None)
    except Err as err:
        raise _transport_error(err.value) from None
    write_error: Optional[Exception] = None
    try:
        with outgoing.write() as stream:
            for start in range(0, len(body), 4096):
                stream.blocking_write_and_flush(body[start:start + 4096])
        h.OutgoingBody.finish(outgoing, None)
    except Err as err:  # the response future carries the real reason when the host refused
        write_error = err
    while True:
        result = future.get()
        if result is not None:
            break
        with future.subscribe() as pollable:
            pollable.block()
    # Ok(Ok(response)), Ok(Err(error-code)), or Err(()) when the response was already taken.
    if isinstance(result, Err):
        raise t.Upstream("the response was already taken", None, False)
    inner = result.value
    if isinstance(inner, Err):
        raise _transport_error(inner.value)
    response = inner.value
    if write_error is not None:
        raise t.Upstream(f"sending the request body failed: {write_error}", None, True)
    status = response.status()
    with response.headers() as fields:
        out_headers = [(k.lower(), v.decode("latin-1")) for k, v in fields.entries()]
    chunks = []
    incoming = response.consume()
    with incoming.stream() as stream:
        while True:
            try:
                chunks.append(stream.blocking_read(65536))
            except Err:
                break  # closed (or failed: what arrived is what the plugin gets)
    return _host.Response(status, out_headers, b"".join(chunks))


def _transport_error(code: Any) -> t.PluginError:
    name = type(code).__name__.replace("ErrorCode_", "")
    if name in ("HttpRequestDenied", "DestinationIpProhibited"):
        return t.Upstream("the host refused the outbound request (not an allowed destination)", None, False)
    return t.Upstream(f"outbound request failed: {name}", None, True)


_host.set_backend(GuestBackend())

# --- conversions in -------------------------------------------------------------------------


def _ctx(ctx: Any) -> t.CallContext:
    return t.CallContext(ctx.workspace_id, ctx.record_id, ctx.request_id, ctx.endpoint, ctx.time_budget_ms)


def _config(config: str) -> dict[str, Any]:
    try:
        value = json.loads(config)
    except ValueError as err:
        raise t.InvalidConfig([t.ConfigIssue("", f"not JSON: {err}")]) from None
    if not isinstance(value, dict):
        raise t.InvalidConfig([t.ConfigIssue("", "the configuration must be a JSON object")])
    return value


def _subject(s: Any) -> t.Subject:
    return t.Subject(s.common_name, s.organization, s.organizational_unit, s.country, s.state, s.locality,
                     [(a.oid, a.value) for a in s.other])


def _san(san: Any) -> t.SubjectAltName:
    kind = type(san).__name__.split("_")[-1].lower()
    if kind == "ip":
        ip = san.value
        if type(ip).__name__.endswith("Ipv4"):
            text = str(ipaddress.IPv4Address(bytes(ip.value)))
        else:
            text = str(ipaddress.IPv6Address(b"".join(g.to_bytes(2, "big") for g in ip.value)))
        return t.SubjectAltName("ip", text)
    return t.SubjectAltName(kind, san.value)


def _key_usages(flags: Any) -> set[str]:
    return {_enum_name(member) for member in type(flags) if member in flags and member.value}


def _issue_request(r: Any) -> c.IssueRequest:
    profile = c.CertificateProfile(_subject(r.profile.subject), [_san(s) for s in r.profile.subject_alt_names],
                                   _key_usages(r.profile.key_usages), list(r.profile.extended_key_usages),
                                   r.profile.validity_days)
    return c.IssueRequest(r.idempotency_key, bytes(r.csr.der), r.csr.pem, profile, r.template, r.metadata)


# --- conversions out ------------------------------------------------------------------------


def _info(plugin: Any, kind: str) -> Any:
    info: t.PluginInfo = plugin.info()
    capabilities = wt.Capabilities(0)
    for name in info.capabilities:
        capabilities |= _enum(wt.Capabilities, name)
    return wt.PluginInfo(
        id=info.id, version=info.version, kind=_enum(wt.PluginKind, kind), name=info.name,
        description=info.description, serves=list(info.serves), config_schema=json.dumps(info.config_schema),
        secret_fields=[wt.SecretField(f.pointer, f.withheld) for f in info.secret_fields],
        capabilities=capabilities, default_issuer_patterns=list(info.default_issuer_patterns),
        outbound_hosts=list(info.outbound_hosts),
    )


def _error(err: BaseException) -> Err:
    """Every exception out of plugin code as a `plugin-error` (never a trap)."""
    if isinstance(err, t.InvalidConfig):
        return Err(wt.PluginError_InvalidConfig([wt.ConfigIssue(i.field, i.message) for i in err.issues]))
    if isinstance(err, t.Upstream):
        return Err(wt.PluginError_Upstream(wt.UpstreamFailure(status=err.status, message=err.message, retryable=err.retryable)))
    if isinstance(err, t.RateLimited):
        return Err(wt.PluginError_RateLimited(err.retry_after))
    simple = {"invalid-input": wt.PluginError_InvalidInput, "unauthorized": wt.PluginError_Unauthorized,
              "not-found": wt.PluginError_NotFound, "not-supported": wt.PluginError_NotSupported,
              "conflict": wt.PluginError_Conflict, "rejected": wt.PluginError_Rejected}
    if isinstance(err, t.PluginError) and err.kind in simple:
        return Err(simple[err.kind](err.message))
    if isinstance(err, t.PluginError):
        return Err(wt.PluginError_Internal(err.message))
    return Err(wt.PluginError_Internal(f"{type(err).__name__}: {err}"))


def _frames(err: BaseException) -> str:
    """Where an exception came from, without source lines (reading them would need files)."""
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}")
        tb = tb.tb_next
    return " <- ".join(reversed(frames[-12:]))


def _guarded(call: Any) -> Any:
    try:
        return call()
    except Err:
        raise
    except BaseException as err:  # noqa: BLE001 - every failure is reported, none traps
        if not isinstance(err, t.PluginError):
            wlog.log(wlog.Level.ERROR, "plugin raised", [wlog.Field("traceback", _frames(err))])
        raise _error(err) from None


def _report(report: t.TestReport) -> Any:
    return wt.TestReport(report.success, report.message,
                         [wt.Check(ch.name, _enum(wt.CheckStatus, ch.status), ch.message) for ch in report.checks],
                         json.dumps(report.details))


def _pem_data(pem: str) -> Any:
    return wt.CertificateData_Pem(pem)


# --- exports --------------------------------------------------------------------------------


def policy_export(plugin: Any) -> type:
    # Called from app.py at pre-initialisation, so these imports happen then.
    from wit_world import exports
    from wit_world.exports import policy as wp

    def decision(d: p.Decision) -> Any:
        reasons = lambda rs: [wp.Reason(r.code, r.message) for r in rs]  # noqa: E731
        if isinstance(d, p.Allow):
            return wp.Decision_Allow(d.max_validity_days)
        if isinstance(d, p.Deny):
            return wp.Decision_Deny(reasons(d.reasons))
        if isinstance(d, p.RequireApproval):
            return wp.Decision_RequireApproval(reasons(d.reasons))
        raise t.Internal(f"evaluate returned {type(d).__name__}, not Allow, Deny or RequireApproval")

    def request(r: Any) -> p.EvaluationRequest:
        key = p.SubjectKey(r.key.algorithm, r.key.size_bits, r.key.curve, r.key.server_generated)
        requester = p.Requester(_enum_name(r.requester.kind), r.requester.id, r.requester.display_name)
        return p.EvaluationRequest(r.ca_type, r.ca_id, _subject(r.subject), [_san(s) for s in r.subject_alt_names],
                                   key, r.validity_days, r.template, requester, _enum_name(r.source))

    class Policy(exports.Policy):
        def describe(self) -> Any:
            return _info(plugin, "issuance-policy")

        def validate_config(self, config: str) -> None:
            _guarded(lambda: plugin.validate_config(_config(config)))

        def evaluate(self, ctx: Any, config: str, req: Any) -> Any:
            return _guarded(lambda: decision(plugin.evaluate(_ctx(ctx), _config(config), request(req))))

    return Policy


def notifier_export(plugin: Any) -> type:
    from wit_world import exports
    from wit_world.exports import notifier as wn

    class Notifier(exports.Notifier):
        def describe(self) -> Any:
            return _info(plugin, "integration")

        def validate_config(self, config: str) -> None:
            _guarded(lambda: plugin.validate_config(_config(config)))

        def test(self, ctx: Any, config: str) -> Any:
            return _guarded(lambda: _report(plugin.test(_ctx(ctx), _config(config))))

        def notify(self, ctx: Any, config: str, event: Any) -> Any:
            def run() -> Any:
                e = n.Event(event.id, event.event_type, event.occurred_at, event.summary, event.payload)
                d = plugin.notify(_ctx(ctx), _config(config), e)
                return wn.Delivery(d.status, d.reference)
            return _guarded(run)

    return Notifier


def connector_export(plugin: Any) -> type:
    from wit_world import exports
    from wit_world.exports import connector as wc

    def outcome(o: c.IssueOutcome) -> Any:
        if isinstance(o, c.Issued):
            return wc.IssueOutcome_Issued(wc.IssuedCertificate(_pem_data(o.certificate_pem),
                                                               [_pem_data(x) for x in o.chain_pem], o.ca_reference))
        if isinstance(o, c.Pending):
            return wc.IssueOutcome_Pending(wc.PendingIssue(o.reference, o.retry_after_seconds, o.status_message))
        raise t.Internal(f"issue returned {type(o).__name__}, not Issued or Pending")

    def unsupported(name: str) -> Any:
        raise _error(t.NotSupported(f"{name} is not implemented by this connector"))

    class Connector(exports.Connector):
        def describe(self) -> Any:
            return _info(plugin, "ca-connector")

        def validate_config(self, config: str) -> None:
            _guarded(lambda: plugin.validate_config(_config(config)))

        def setup(self, ctx: Any, config: str) -> None:
            _guarded(lambda: plugin.setup(_ctx(ctx), _config(config)))

        def test_connection(self, ctx: Any, config: str) -> Any:
            return _guarded(lambda: _report(plugin.test_connection(_ctx(ctx), _config(config))))

        def issue(self, ctx: Any, config: str, request: Any) -> Any:
            return _guarded(lambda: outcome(plugin.issue(_ctx(ctx), _config(config), _issue_request(request))))

        def poll_issue(self, ctx: Any, config: str, reference: str, request: Any) -> Any:
            return _guarded(lambda: outcome(plugin.poll_issue(_ctx(ctx), _config(config), reference, _issue_request(request))))

        def fetch_certificate(self, ctx: Any, config: str, ca_reference: str) -> Any:
            return unsupported("fetch-certificate")

        def ca_chain(self, ctx: Any, config: str) -> Any:
            return _guarded(lambda: [_pem_data(pem) for pem in plugin.ca_chain(_ctx(ctx), _config(config))])

        def revoke(self, ctx: Any, config: str, request: Any) -> None:
            return unsupported("revoke")

        def list_certificates(self, ctx: Any, config: str, page: Any) -> Any:
            return unsupported("list-certificates")

        def renewal_info(self, ctx: Any, config: str, certificate: Any) -> Any:
            return unsupported("renewal-info")

    return Connector



