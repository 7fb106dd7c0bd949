"""dshloop.slow_readers around the real a2wsgi bridge: a client that stops reading a response gives
the worker thread back; a slow client that keeps reading gets all of it."""

from __future__ import annotations

import asyncio
import threading

from a2wsgi import WSGIMiddleware

from dshloop.slow_readers import SendDeadline
from tests.conftest import captured_log

PIECES = 50  # more than a2wsgi's queue between the thread and the event loop holds (10)


class WsgiApp:
    """A WSGI application streaming PIECES pieces; records whether its thread got to the end."""

    def __init__(self):
        self.finished = threading.Event()

    def __call__(self, environ, start_response):
        start_response("200 OK", [("Content-Type", "application/json")])
        try:
            for index in range(PIECES):
                yield b"x" * 1000 + str(index).encode()
        finally:
            self.finished.set()


SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/api/tools/loop_list",
    "raw_path": b"/api/tools/loop_list",
    "query_string": b"",
    "headers": [(b"host", b"127.0.0.1")],
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8000),
}


async def no_body():
    return {"type": "http.request", "body": b"", "more_body": False}


def test_a_client_that_stops_reading_is_dropped_and_the_thread_finishes(caplog):
    wsgi = WsgiApp()
    delivered = []

    async def stalled_send(message):
        if len(delivered) >= 3:  # the client read the start and two pieces, then nothing
            await asyncio.Event().wait()
        delivered.append(message)

    async def serve():
        app = SendDeadline(WSGIMiddleware(wsgi), stall=0.3)
        await asyncio.wait_for(app(dict(SCOPE), no_body, stalled_send), timeout=10)

    with captured_log(caplog, "dshloop.web"):
        asyncio.run(serve())
    assert wsgi.finished.wait(5), "the worker thread is still producing for a client that reads nothing"
    assert len(delivered) == 3
    assert "read nothing for 0.3 s" in caplog.text


def test_a_slow_client_that_keeps_reading_gets_the_whole_response():
    wsgi = WsgiApp()
    delivered = []

    async def slow_send(message):
        await asyncio.sleep(0.01)  # slow, but well within the deadline for each piece
        delivered.append(message)

    asyncio.run(SendDeadline(WSGIMiddleware(wsgi), stall=1)(dict(SCOPE), no_body, slow_send))
    body = b"".join(message.get("body", b"") for message in delivered if message["type"] == "http.response.body")
    assert body.endswith(str(PIECES - 1).encode())
    assert len(body) == sum(1000 + len(str(index)) for index in range(PIECES))


def test_without_the_deadline_the_thread_waits_for_the_reader():
    """The reason for the middleware, shown on the bare bridge (and so the test above can fail)."""
    wsgi = WsgiApp()
    waiting = []

    async def stalled_send(message):
        await asyncio.Event().wait()

    async def serve():
        task = asyncio.ensure_future(WSGIMiddleware(wsgi)(dict(SCOPE), no_body, stalled_send))
        await asyncio.sleep(1)
        waiting.append(not task.done() and not wsgi.finished.is_set())
        task.cancel()  # the end of the test, not anything a server does for such a client

    asyncio.run(serve())
    assert waiting == [True]
