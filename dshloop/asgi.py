"""The ASGI entry point (`manage.py serve`, or e.g. `uvicorn dshloop.asgi:application`).

/mcp goes to the MCP streamable HTTP app; every other path to Django. Django runs as its WSGI
application in a thread pool (a2wsgi), exactly as under runserver or gunicorn: the settings keep
persistent PostgreSQL connections (CONN_MAX_AGE), which Django's own ASGI handler would leak
(Django docs, "Persistent connections": disable them under ASGI). Only the MCP transport is async.

Every request body is read in the event loop first, within a deadline and the size limit
(dshloop.request_bodies), and a response its client stops reading is dropped after a while
(dshloop.slow_readers), so that a slow or idle client never holds one of the pool's threads for long.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from a2wsgi import WSGIMiddleware
from django.conf import settings

# isort: split
from dshloop.wsgi import application as django_wsgi  # first: it sets Django up, which the MCP app needs

# isort: split
from dshloop.request_bodies import BodyFirst
from dshloop.slow_readers import SendDeadline
from tools.mcp.http import MCP_PATH, McpHttpApp, Receive, Scope, Send


def a2wsgi_environ(app):
    """What a2wsgi's environ lacks, next to a WSGI server's (PEP 3333):

    - `wsgi.input_terminated`: a2wsgi's input ends where the ASGI body ends, so a chunked body can
      be read to its end (dshloop.wsgi does, within the upload limit);
    - PATH_INFO as the request's own bytes: a2wsgi rebuilds it from the ASGI `path`, which the
      server has already decoded with U+FFFD for bytes that are not UTF-8, so "%FF" and "%FE" would
      name one ID. From `raw_path`, Django sees what any WSGI server gives it, and dshloop.api
      refuses such a path (422).
    """

    def wrapped(environ, start_response):
        environ["wsgi.input_terminated"] = True
        raw_path = (environ.get("asgi.scope") or {}).get("raw_path")
        if raw_path is not None:
            path = unquote_to_bytes(raw_path.partition(b"?")[0])
            script_name = environ.get("SCRIPT_NAME", "").encode("latin-1")
            if script_name and path.startswith(script_name):
                path = path[len(script_name) :]
            environ["PATH_INFO"] = path.decode("latin-1")
        return app(environ, start_response)

    return wrapped


class Application:
    def __init__(self) -> None:
        self.mcp = McpHttpApp()
        bodies = {
            "timeout": settings.DSHLOOP_REQUEST_BODY_TIMEOUT_SECONDS,
            "limit": settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
        }
        self.mcp_app = BodyFirst(self.mcp, **bodies)
        bridge = WSGIMiddleware(a2wsgi_environ(django_wsgi))
        # a2wsgi types its app against its own per-event TypedDicts; as an ASGI app it takes any scope.
        django_app = BodyFirst(bridge, **bodies)  # type: ignore[arg-type]
        self.django = SendDeadline(django_app, stall=settings.DSHLOOP_RESPONSE_STALL_SECONDS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"] in {MCP_PATH, MCP_PATH + "/"}:
            await self.mcp_app(scope, receive, send)
        else:
            await self.django(scope, receive, send)

    async def lifespan(self, receive: Receive, send: Send) -> None:
        """Keep the MCP session manager running from server start-up to shutdown (one task, as anyio needs)."""
        message = await receive()
        assert message["type"] == "lifespan.startup"
        try:
            async with self.mcp.lifespan():
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
        except Exception as exc:
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                return
            raise
        await send({"type": "lifespan.shutdown.complete"})


application = Application()
