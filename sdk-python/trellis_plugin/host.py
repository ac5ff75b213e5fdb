"""What the host offers a plugin during a call: outbound HTTP (connectors and integrations), per-record
state (the same), and logging (every world). Inside a component these go to the host's imports; under
`trellis_plugin.testing` they go to fakes. Plugin code uses the module-level `http`, `state`, `log`."""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> Optional[str]:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return _json.loads(self.body or b"null")


class Backend:
    """What a backend implements (the component's imports, or the test fakes)."""

    def http(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> Response:
        raise NotImplementedError

    def state_get(self, key: str) -> Optional[bytes]:
        raise NotImplementedError

    def state_set(self, key: str, value: bytes) -> None:
        raise NotImplementedError

    def state_delete(self, key: str) -> None:
        raise NotImplementedError

    def log(self, level: str, message: str, fields: dict[str, str]) -> None:
        raise NotImplementedError


_backend: Optional[Backend] = None


def set_backend(backend: Backend) -> None:
    global _backend
    _backend = backend


def _current() -> Backend:
    if _backend is None:
        raise RuntimeError("no host: run plugin code inside a component or under trellis_plugin.testing")
    return _backend


class _Http:
    """Blocking outbound HTTP. The host checks every request (the record's endpoint and granted
    hosts only); a refused request is an exception, reported as the host classifies it."""

    def request(self, method: str, url: str, headers: Optional[dict[str, str]] = None, body: bytes = b"") -> Response:
        return _current().http(method.upper(), url, list((headers or {}).items()), body)

    def get(self, url: str, headers: Optional[dict[str, str]] = None) -> Response:
        return self.request("GET", url, headers)

    def post_json(self, url: str, value: Any, headers: Optional[dict[str, str]] = None) -> Response:
        merged = {"content-type": "application/json", **(headers or {})}
        return self.request("POST", url, merged, _json.dumps(value).encode())


class _State:
    """Per-record key/value state (bytes), encrypted at rest by the host."""

    def get(self, key: str) -> Optional[bytes]:
        return _current().state_get(key)

    def set(self, key: str, value: bytes) -> None:
        _current().state_set(key, value)

    def delete(self, key: str) -> None:
        _current().state_delete(key)


class _Log:
    """Structured log lines into the host's pipeline. Never log secrets."""

    def _emit(self, level: str, message: str, fields: dict[str, Any]) -> None:
        _current().log(level, message, {k: str(v) for k, v in fields.items()})

    def debug(self, message: str, **fields: Any) -> None:
        self._emit("debug", message, fields)

    def info(self, message: str, **fields: Any) -> None:
        self._emit("info", message, fields)

    def warn(self, message: str, **fields: Any) -> None:
        self._emit("warn", message, fields)

    def error(self, message: str, **fields: Any) -> None:
        self._emit("error", message, fields)


http = _Http()
state = _State()
log = _Log()
