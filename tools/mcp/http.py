"""The streamable HTTP transport at /mcp, guarded like /api/: Django's host check, bearer tokens.

Every request (POST, GET or DELETE) must pass Django's ALLOWED_HOSTS check and carry a bearer
token with scope `tools` (contract §2: 401 `unauthorized`, 403 `forbidden`; the body is a JSON-RPC
error carrying the contract's error body); only then does the SDK's transport see it. The caller's session is read per tool
call from the same `X-DSH-Session-Id` header as the REST API.

The transport is stateless and answers with JSON, not SSE: the tools never call back into the
client, so there is no session to keep, and any number of server processes can share the load.
So only POST is served: a GET (an event stream) or DELETE (ending a session) is answered 405, as
the MCP spec allows. A POST body is read here first, within the API's size limit (413
`too_large`) and as strict JSON (NaN and Infinity, and nesting deeper than Python's parser follows,
are a parse error: -32700 with 400), then handed to the SDK.

When the database cannot be reached, a request is answered 503 with a JSON-RPC error of code
-32050 (tools.mcp.server.UNAVAILABLE) carrying the contract's `unavailable` body, and `Retry-After`;
a tool call that meets the outage after the token check gets the same JSON-RPC error from the SDK.
Any other exception is logged with its traceback, counted in /metrics, and answered 500 with a
JSON-RPC internal error (-32603).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.db import close_old_connections
from django.http import HttpRequest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR

from core.errors import (
    RETRY_AFTER_SECONDS,
    ApiError,
    InvalidInput,
    Unauthorized,
    Unavailable,
    UnexpectedError,
    database_unavailable,
    one_line,
)
from core.http import CALLER_HEADER
from core.jsonparse import NotAJsonNumber, json_loads
from monitoring.metrics import count_unexpected_error
from tokens.auth import tools_auth

from .server import UNAVAILABLE, build_server

MCP_PATH = "/mcp"

logger = logging.getLogger("dshloop.mcp")

# ASGI's three callables (as starlette.types spells them).
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


_CALLER_NAME = CALLER_HEADER.lower().encode()


def caller_from_header(ctx) -> str | None:
    """The X-DSH-Session-Id of the HTTP request that carries this tool call (checked by the handler).

    Read from the raw header bytes as the REST API reads it (dshloop.wsgi): UTF-8, bytes that are
    not UTF-8 kept as lone surrogates, a repeated header joined with commas; the handler's checks
    then refuse both with the REST API's 422.
    """
    scope = getattr(ctx.request, "scope", None)
    if scope is None:
        return None
    values = [value for name, value in scope.get("headers", ()) if name.lower() == _CALLER_NAME]
    return b",".join(values).decode("utf-8", "surrogateescape") if values else None


def django_request(scope: Scope) -> HttpRequest:
    """An HttpRequest with the ASGI request's headers, for Django's own host and token checks."""
    request = HttpRequest()
    request.method = scope.get("method", "GET")
    request.path = request.path_info = scope.get("path", MCP_PATH)
    server = scope.get("server") or ("127.0.0.1", 80)
    request.META.update({"SERVER_NAME": server[0], "SERVER_PORT": str(server[1])})
    for raw_name, raw_value in scope.get("headers", ()):
        # Header names and values are latin-1 on the wire; Django's WSGI environ decodes them the same way.
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        if name not in {"CONTENT_TYPE", "CONTENT_LENGTH"}:
            name = f"HTTP_{name}"
        value = raw_value.decode("latin-1")
        request.META[name] = f"{request.META[name]},{value}" if name in request.META else value
    return request


def check_request(scope: Scope) -> ApiError | None:
    """Django's ALLOWED_HOSTS check, then the tools token (as on /api/tools); None when both pass."""
    request = django_request(scope)
    try:
        request.get_host()
    except DisallowedHost:
        return InvalidInput(
            "The Host header is not one this server answers to; see DJANGO_ALLOWED_HOSTS.", field="Host", status=400
        )
    close_old_connections()
    try:
        if tools_auth(request) is None:  # a header that is not "Bearer <token>": ninja's 401
            return Unauthorized("A valid bearer token is required.")
    except ApiError as error:  # unauthorized / forbidden, with the REST API's messages
        return error
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        logger.warning("/mcp: the database is unavailable, answered 503: %s", one_line(exc))
        return Unavailable()
    finally:
        # Also closes a connection the outage broke, so the first request after it reconnects.
        close_old_connections()
    return None


async def send_error(send: Send, error: ApiError, *, rpc_code: int = INVALID_REQUEST) -> None:
    """The HTTP status of the REST API, and a body that MCP clients can show: a JSON-RPC error whose
    message names the contract's code and whose data is the contract's error body."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,  # the request was refused before its body was read
            "error": {"code": rpc_code, "message": f"{error.code}: {error.message}", "data": error.body()},
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if error.status == 503:
        headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
    if error.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="dshloop"'))  # RFC 6750 §3
    if error.status == 405:
        headers.append((b"allow", b"POST"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class McpHttpApp:
    """The ASGI app for /mcp. Its `lifespan()` must be running while it serves (see dshloop.asgi)."""

    def __init__(self) -> None:
        self.server = build_server(caller_of=caller_from_header)
        self.session_manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            json_response=True,
            # The SDK's DNS-rebinding guard knows only loopback names; Django's ALLOWED_HOSTS check
            # (check_request) is the one the rest of the service uses, so that one applies here.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with self.session_manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http", scope["type"]
        started = False

        async def tracked(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.serve(scope, receive, tracked)
        except Exception:
            # A bug: logged and counted as a REST 500 is (dshloop.middleware). The server would
            # answer a bare 500 and log it in its own format; a JSON-RPC error says it in the protocol.
            logger.exception("%s %s: unexpected error, answered 500", scope.get("method"), scope.get("path"))
            count_unexpected_error()
            if not started:  # else the answer is half sent: the server ends the connection
                await send_error(send, UnexpectedError(), rpc_code=INTERNAL_ERROR)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = await anyio.to_thread.run_sync(check_request, scope)
        if error is not None:
            await send_error(send, error, rpc_code=UNAVAILABLE if error.status == 503 else INVALID_REQUEST)
            return
        method = scope.get("method", "GET")
        if method != "POST":
            # The SDK would hold a GET open as an event stream on which nothing is ever sent.
            await send_error(
                send,
                ApiError(
                    f"{method} is not allowed here; use POST: this MCP endpoint is stateless "
                    "and answers with JSON, so it has no event stream and no session to end.",
                    status=405,
                ),
            )
            return
        body = await read_body(scope, receive)
        if isinstance(body, ApiError):
            await send_error(send, body, rpc_code=PARSE_ERROR if body.status == 400 else INVALID_REQUEST)
            return
        if body is not None:
            await self.session_manager.handle_request(scope, replay(body, receive), send)


def body_limit() -> int:
    # One limit for both transports: the REST API's (Django's DATA_UPLOAD_MAX_MEMORY_SIZE).
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or DEFAULT_MAX_REQUEST_BODY_SIZE


def too_large() -> ApiError:
    return ApiError(
        f"The request body is too large: at most {body_limit():,} bytes are read.", status=413, code="too_large"
    )


async def read_body(scope: Scope, receive: Receive) -> bytes | ApiError | None:
    """The whole body (whatever its framing), an error to answer, or None when the client left."""
    limit = body_limit()
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length" and value.isdigit() and int(value) > limit:
            return too_large()  # refused before a byte is read
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return too_large()
        if not message.get("more_body", False):
            break
    if b"NaN" in body or b"Infinity" in body:  # the only JSON Python reads that RFC 8259 does not
        try:
            json_loads(bytes(body))
        except NotAJsonNumber as exc:
            return InvalidInput(f"The request body is not valid JSON: {exc}.", status=400)
        except RecursionError:
            # Python's parser follows nesting on the C stack up to the recursion limit (~1,000 deep).
            # The REST API's parser fails the same way and answers "not valid JSON" (ninja turns any
            # parse failure into its 400); the SDK's own parser stops at 200 deep with a parse error.
            return InvalidInput("The request body is not valid JSON: it is nested too deeply.", status=400)
        except ValueError:
            pass  # not JSON at all: the SDK answers its own parse error
    return bytes(body)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that gives the body already read, then whatever the server sends next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> MutableMapping[str, Any]:
        return pending.pop() if pending else await receive()

    return replayed
