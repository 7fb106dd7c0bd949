"""DSH's HTTP API on the wire (../shared/DSH-HOST.md): every call is `POST /api/<method>` with a
`client-request` envelope; the answer is HTTP 200 with `result.ok` true (a value) or false (an
error with a `code`). DSH has no authentication: it answers only requests whose Host header is a
loopback address (403 otherwise)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import httpx

from .base import HostError

# Error codes that retrying cannot change (DSH-HOST.md §4, §6, §8); any other is retried.
PERMANENT_CODES = {
    "bad-request",
    "session-not-found",
    "session-conflict",
    "agent-preset-not-found",
    "agent-preset-conflict",
    "agent-preset-invalid",
    "workspace-not-found",
    "workspace-invalid-path",
    "title-invalid",
    "attachment-error",
    "invalid-time-zone",
}


# DSH's answers are JSON read defensively: a part of the wrong type counts as absent.
def json_object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def json_array(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def json_string(value: object) -> str:
    return value if isinstance(value, str) else ""


class DshError(HostError):
    def __init__(self, message: str, *, code: str = "", said: str = "", transient: bool, unreachable: bool = False):
        super().__init__(message, transient=transient, unreachable=unreachable)
        self.code = code
        self.said = said  # DSH's own message, for an error it answered (`code` is its code)


class DshClient:
    """One DSH server's API: `call` a method, get its value or a DshError (transient or not)."""

    def __init__(self, base_url: str, *, timeout: float):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._client: httpx.Client | None = None
        self._pid = 0

    @property
    def client(self) -> httpx.Client:
        # One pool per process: scheduler workers are forked, and a pool must not cross a fork.
        if self._client is None or self._pid != os.getpid():
            # A delivery batch's calls go side by side (dsh_delivery.CONCURRENCY): each keeps its connection.
            limits = httpx.Limits(max_connections=128, max_keepalive_connections=100)
            self._client = httpx.Client(base_url=self.base_url, timeout=self.timeout, limits=limits)
            self._pid = os.getpid()
        return self._client

    def _send(self, what: str, request: Callable[[], httpx.Response]) -> httpx.Response:
        """One request; a DSH that gives no answer (timed out, refused, reset) is a transient,
        unreachable DshError, whatever was asked."""
        try:
            return request()
        except httpx.TimeoutException as exc:
            raise DshError(
                f"DSH did not answer {what} within {self.timeout:g} s.", transient=True, unreachable=True
            ) from exc
        except httpx.HTTPError as exc:
            raise DshError(
                f"DSH is unreachable at {self.base_url} ({what}): {exc}", transient=True, unreachable=True
            ) from exc

    def get(self, path: str, params: dict[str, str]) -> bytes:
        """A plain `GET` (DSH's `session.export`, which is no RPC): its body, or a DshError; 404 is
        `session-not-found`, the only thing DSH answers it for."""
        response = self._send(path, lambda: self.client.get(path, params=params))
        if response.status_code == 404:
            raise DshError(f"DSH has nothing at {path} for {params}.", code="session-not-found", transient=False)
        if response.status_code != 200:
            detail = response.text.strip()[:300] or response.reason_phrase
            raise DshError(
                f"DSH answered {response.status_code} to {path}: {detail}", transient=response.status_code >= 500
            )
        return response.content

    def call(self, method: str, payload: dict, *, rpc_id: str | None = None, path: str = ""):
        """One `POST /api/<method>` (or `path`: a plugin's loopback channel, `/<channel>/<endpoint>`,
        which takes the same envelope); returns the value, or raises DshError (transient or not)."""
        body = {
            "type": "client-request",
            "rpcId": rpc_id or f"dshloop-{time.monotonic_ns()}",
            "method": method,
            "payload": payload,
        }
        response = self._send(method, lambda: self.client.post(path or f"/api/{method}", json=body))
        if response.status_code == 403:
            raise DshError(
                f"DSH refused {method} (403): it answers only requests whose Host header is a loopback address "
                f"(127.0.0.1 or localhost); point DSHLOOP_DSH_URL at one, or start DSH with --trusted-host.",
                transient=False,
            )
        if response.status_code != 200:
            detail = response.text.strip()[:300] or response.reason_phrase
            raise DshError(
                f"DSH answered {response.status_code} to {method}: {detail}", transient=response.status_code >= 500
            )
        try:
            result = response.json()["result"]
        except (ValueError, KeyError, TypeError) as exc:
            raise DshError(f"DSH sent a malformed answer to {method}.", transient=True) from exc
        if not isinstance(result, dict):
            raise DshError(f"DSH sent a malformed answer to {method}.", transient=True)
        if result.get("ok"):
            return result.get("value")
        error = json_object(result.get("error"))
        code = str(error.get("code") or "unknown")
        message = str(error.get("message") or "no message")
        raise DshError(
            f"DSH {method} failed with {code}: {message}",
            code=code,
            said=message,
            transient=code not in PERMANENT_CODES,
        )
