"""A client that stops reading a response gives its worker thread back.

a2wsgi hands each piece of Django's response from the worker thread to the event loop through a
small queue; when the client stops reading, the socket's buffers fill, the server's `send` waits,
the queue fills and the thread waits with it, for as long as the client stays connected. A few
clients asking for a large answer (the whole `loop_list`) and reading none of it could so hold
every thread. Here each `send` must make progress within DSHLOOP_RESPONSE_STALL_SECONDS: past
that, the client is abandoned (logged), the rest of the response is discarded so the thread
finishes at once, and the server closes the connection because the response never completed.

The deadline is per piece, not for the whole response: a slow but reading client is served.
"""

from __future__ import annotations

import asyncio
import logging

from dshloop.request_bodies import App, Message, Receive, Scope, Send

logger = logging.getLogger("dshloop.web")


class SendDeadline:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app: App, *, stall: float):
        self.app = app
        self.stall = stall

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        abandoned = False

        async def send_within(message: Message) -> None:
            nonlocal abandoned
            if abandoned:
                return  # discarded: the thread producing it must not wait for a reader that is gone
            try:
                async with asyncio.timeout(self.stall):
                    await send(message)
            except TimeoutError:
                abandoned = True
                client = scope.get("client") or ("?", 0)
                logger.warning(
                    "%s %s: the client (%s:%s) read nothing for %g s; its response is dropped and the connection closed",
                    scope.get("method"),
                    scope.get("path"),
                    client[0],
                    client[1],
                    self.stall,
                )

        await self.app(scope, receive, send_within)
