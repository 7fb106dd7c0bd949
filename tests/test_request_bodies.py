"""dshloop.request_bodies at the ASGI level: what the wrapped application receives, and when the
client is answered instead. The same against a real `serve` with real sockets:
tests/test_idle_clients.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from dshloop.request_bodies import BodyFirst


def scope(*headers: tuple[bytes, bytes]) -> dict:
    return {"type": "http", "method": "POST", "path": "/api/tools/loop_list", "headers": list(headers)}


class Client:
    """Feeds the middleware the messages a server would, then nothing (an idle client) unless
    `then_disconnect`."""

    def __init__(self, *bodies: bytes, more_after: bool = False, then_disconnect: bool = False):
        self.messages = [
            {"type": "http.request", "body": body, "more_body": more_after or index < len(bodies) - 1}
            for index, body in enumerate(bodies)
        ]
        self.then_disconnect = then_disconnect
        self.sent: list[dict] = []
        self.receives = 0

    async def receive(self) -> dict:
        self.receives += 1
        if self.messages:
            return self.messages.pop(0)
        if self.then_disconnect:
            return {"type": "http.disconnect"}
        await asyncio.sleep(3600)  # a client that announced more and sends nothing
        raise AssertionError("unreachable")

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def status(self) -> int | None:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)

    def body(self) -> dict:
        return json.loads(b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"))


class Recorder:
    """The wrapped application: records what it read, then answers 200."""

    def __init__(self):
        self.called = False
        self.body = b""

    async def __call__(self, scope, receive, send):
        self.called = True
        while True:
            message = await receive()
            self.body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def run(app, request_scope, client) -> None:
    asyncio.run(app(request_scope, client.receive, client.send))


def test_a_body_sent_in_pieces_reaches_the_application_whole_in_one_message():
    inner, client = Recorder(), Client(b'{"session', b'_id": "global"}')
    run(BodyFirst(inner, timeout=5, limit=1000), scope((b"content-length", b"24")), client)
    assert inner.body == b'{"session_id": "global"}'
    assert client.status() == 200


def test_a_client_that_announces_a_body_and_sends_none_gets_408_and_no_thread():
    inner, client = Recorder(), Client(b"", more_after=True)
    run(BodyFirst(inner, timeout=0.2, limit=1000), scope((b"content-length", b"100")), client)
    assert not inner.called  # the application (and its worker thread) never saw the request
    assert client.status() == 408
    assert client.body()["error"]["code"] == "request_timeout"
    start = client.sent[0]
    assert (b"connection", b"close") in start["headers"]


def test_an_idle_chunked_body_times_out_as_well():
    inner, client = Recorder(), Client(b"{", more_after=True)
    run(BodyFirst(inner, timeout=0.2, limit=1000), scope((b"transfer-encoding", b"chunked")), client)
    assert (inner.called, client.status()) == (False, 408)


def test_a_client_that_goes_away_mid_body_gets_nothing_and_the_application_is_not_called():
    inner, client = Recorder(), Client(b"{", more_after=True, then_disconnect=True)
    run(BodyFirst(inner, timeout=5, limit=1000), scope((b"transfer-encoding", b"chunked")), client)
    assert (inner.called, client.sent) == (False, [])


def test_a_declared_length_over_the_limit_is_not_read_the_application_refuses_it_from_the_header():
    class Refuser:
        async def __call__(self, scope, receive, send):
            await send({"type": "http.response.start", "status": 413, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    client = Client(b"", more_after=True)  # would time out, were it read
    run(BodyFirst(Refuser(), timeout=0.2, limit=1000), scope((b"content-length", b"1001")), client)
    assert (client.status(), client.receives) == (413, 0)


def test_an_endless_chunked_body_is_read_only_one_byte_past_the_limit():
    inner = Recorder()
    client = Client(*[b"x" * 400] * 10, more_after=True)  # and more, forever
    run(BodyFirst(inner, timeout=5, limit=1000), scope((b"transfer-encoding", b"chunked")), client)
    assert len(inner.body) == 1200  # three reads: the third passed the limit, so reading stopped
    assert client.receives == 3


@pytest.mark.parametrize("headers", [(), ((b"content-length", b"0"),)])
def test_a_request_without_a_body_passes_straight_through(headers):
    inner, client = Recorder(), Client(b"")
    run(BodyFirst(inner, timeout=0.2, limit=1000), scope(*headers), client)
    assert (inner.called, client.status()) == (True, 200)


def test_other_scopes_pass_through():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    asyncio.run(BodyFirst(app, timeout=0.2, limit=10)({"type": "lifespan"}, None, None))
    assert seen == ["lifespan"]
