"""Idle and slow clients against a real `manage.py serve` (what `make run` runs), on real sockets.

Clients that announce a body and send none once held every thread of the WSGI bridge, and every
Django page froze until they closed. Now the body is read in the event loop with a deadline
(dshloop.request_bodies): the pages answer while such clients wait, and the clients get 408.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from tests.test_serve import Serve
from tokens.services import token_create

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

BODY_TIMEOUT = 10  # seconds; long enough that the idle clients are still waiting while we check
IDLE_CLIENTS = 12  # more than the bridge's 10 threads


@pytest.fixture
def serve(transactional_db, tmp_path):
    server = Serve(tmp_path, DSHLOOP_REQUEST_BODY_TIMEOUT_SECONDS=str(BODY_TIMEOUT))
    server.wait_serving()
    yield server
    server.close()


def idle_client(port: int, token: str, index: int) -> socket.socket:
    """Request headers that announce a body, and then nothing: half chunked, half a Content-Length."""
    framing = "Transfer-Encoding: chunked" if index % 2 else "Content-Length: 100"
    sock = socket.create_connection(("127.0.0.1", port), timeout=BODY_TIMEOUT + 20)
    sock.sendall(
        (
            f"POST /api/tools/loop_list HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n\r\n"
        ).encode()
    )
    return sock


def has_answer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_idle_clients_hold_no_thread_pages_answer_and_the_clients_get_408(serve):
    token = token_create(name="tools", scopes=["tools", "manage"])[1]
    url = f"http://127.0.0.1:{serve.port}"
    idle = [idle_client(serve.port, token, index) for index in range(IDLE_CLIENTS)]
    try:
        with httpx.Client(base_url=url, timeout=BODY_TIMEOUT - 2) as client:
            # Every kind of Django page, while all the idle clients wait: none of these may wait for
            # a thread until the idle clients close.
            assert client.get("/api/health").status_code in (200, 503)
            listed = client.post(
                "/api/tools/loop_list",
                json={"session_id": "global"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert listed.status_code == 200, listed.text
            assert client.get("/panel/").status_code in (200, 302)
            assert client.get("/admin/login/").status_code == 200
        assert not any(has_answer(sock) for sock in idle), "the idle clients were answered before their deadline"

        started = time.monotonic()
        answers = [read_answer(sock) for sock in idle]
        assert all(status == 408 for status, _ in answers), answers
        assert {body["error"]["code"] for _, body in answers} == {"request_timeout"}
        assert time.monotonic() - started < BODY_TIMEOUT + 10
    finally:
        for sock in idle:
            sock.close()


def test_a_slow_body_that_arrives_in_time_is_served(serve):
    token = token_create(name="tools", scopes=["tools"])[1]
    body = json.dumps({"session_id": "global"}).encode()
    with socket.create_connection(("127.0.0.1", serve.port), timeout=30) as sock:
        sock.sendall(
            (
                f"POST /api/tools/loop_list HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
        )
        for byte in body:  # one byte at a time, with pauses: slow, but within the deadline
            sock.sendall(bytes([byte]))
            time.sleep(0.05)
        status, answer = read_answer(sock)
    assert (status, answer) == (200, {"loops": []})


def test_a_declared_body_over_the_limit_is_refused_at_once_without_being_sent(serve, settings):
    token = token_create(name="tools", scopes=["tools"])[1]
    too_big = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    with socket.create_connection(("127.0.0.1", serve.port), timeout=BODY_TIMEOUT - 2) as sock:
        sock.sendall(
            (
                f"POST /api/tools/loop_list HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {too_big}\r\n\r\n"
            ).encode()
        )
        status, answer = read_answer(sock)
    assert (status, answer["error"]["code"]) == (413, "too_large")
