"""The ASGI entry point (`manage.py serve`, or e.g. `uvicorn dshloop.asgi:application`).

/mcp goes to the MCP streamable HTTP app; every other path to Django. Django runs as its WSGI
application in a thread pool (a2wsgi), exactly as under runserver or gunicorn: the settings keep
persistent PostgreSQL connections (CONN_MAX_AGE), which Django's own ASGI handler would leak
(Django docs, "Persistent connections": disable them under ASGI). Only the MCP transport is async.
"""

from __future__ import annotations

from a2wsgi import WSGIMiddleware

# isort: split
from dshloop.wsgi import application as django_wsgi  # first: it sets Django up, which the MCP app needs

# isort: split
from dshloop.mcp.http import MCP_PATH, McpHttpApp, Receive, Scope, Send


class Application:
    def __init__(self) -> None:
        self.mcp = McpHttpApp()
        self.django = WSGIMiddleware(django_wsgi)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"] in {MCP_PATH, MCP_PATH + "/"}:
            await self.mcp(scope, receive, send)
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
