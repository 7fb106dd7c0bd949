"""Request bodies are read in the event loop, with a deadline, before a worker thread is taken.

Django runs in a2wsgi's pool of worker threads (dshloop.asgi). A WSGI application reads its body
from the thread, so a client that announces a body (Content-Length, or chunked) and then sends
nothing holds a thread for as long as it likes, before routing and auth could refuse it: ten such
clients held the whole pool and froze every page. Here the body is read first, by this ASGI
middleware, in the server's event loop, where a waiting client costs a coroutine, not a thread:

- the whole body must arrive within DSHLOOP_REQUEST_BODY_TIMEOUT_SECONDS, or the client gets
  408 `request_timeout` with the contract's error body, and the connection is closed;
- at most DATA_UPLOAD_MAX_MEMORY_SIZE + 1 bytes are read. A declared Content-Length over the
  limit is not read at all: Django refuses it from the header alone (413 `too_large` on /api/),
  as it does for an over-long chunked body once it holds one byte more than the limit;
- a client that disconnects while sending gets no answer and costs nothing more.

The wrapped application then receives the whole body in one message, as if the client had been
fast. Requests that announce no body pass straight through.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Disconnected(Exception):
    """The client went away before its body was complete."""


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


def _declared_length(scope: Scope) -> int | None:
    """Content-Length as a number; None when absent or not a number (the server has refused
    the latter already; treat it as unknown)."""
    value = _header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class BodyFirst:
    """ASGI middleware: see the module docstring. `limit` None reads any size (Django's meaning
    of DATA_UPLOAD_MAX_MEMORY_SIZE = None)."""

    def __init__(self, app: App, *, timeout: float, limit: int | None):
        self.app = app
        self.timeout = timeout
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._needs_reading(scope):
            await self.app(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._read(receive)
        except TimeoutError:
            await _request_timeout(send, self.timeout)
            return
        except _Disconnected:
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the server's http.disconnect, when it comes

        await self.app(scope, replay, send)

    def _needs_reading(self, scope: Scope) -> bool:
        if _header(scope, b"transfer-encoding") is not None:
            return True
        length = _declared_length(scope)
        if not length:
            return False
        # Over the limit: the application refuses it from the header without reading a byte.
        return self.limit is None or length <= self.limit

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False):
                break
            if self.limit is not None and size > self.limit:
                break  # one byte over is enough for the application to refuse it; the rest is not read
        return b"".join(chunks)


async def _request_timeout(send: Send, timeout: float) -> None:
    message = (
        f"The request body did not arrive within {timeout:g} s; send it whole, promptly, "
        "and try again (DSHLOOP_REQUEST_BODY_TIMEOUT_SECONDS)."
    )
    body = json.dumps({"error": {"code": "request_timeout", "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 408,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
