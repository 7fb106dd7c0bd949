"""A hostile client against the real server: what only a real socket can send.

The Django test client hands Django text, never the bytes a server reads: it cannot send a chunked
body, raw UTF-8 or undecodable header bytes, a header twice, or a path whose percent-escapes are not
UTF-8. So these tests start `uvicorn dshloop.asgi:application` (what `manage.py serve` runs) on a
free loopback port and speak HTTP/1.1 to it with http.client.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from django.conf import settings

from dshloop.wsgi import server_fixes
from loops.models import Loop
from sessions_app.models import SessionHeader
from sessions_app.services import session_upsert
from tests.tools.mcp.conftest import HttpServer
from tokens.services import token_create

pytestmark = pytest.mark.django_db(transaction=True)

CALLER = "X-DSH-Session-Id"
CREATE = {"prompt": "Check the deploy", "schedule": {"kind": "every", "every_seconds": 60}}
MCP_ACCEPT = ("Accept", "application/json, text/event-stream")


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    server = HttpServer(tmp_path_factory.mktemp("hostile")).start()
    yield server
    server.stop()


@pytest.fixture
def token(db) -> str:
    return token_create(name="all", scopes=["tools", "host"])[1]


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self):
        return json.loads(self.body)

    def error(self) -> dict:
        body = self.json()
        assert set(body) == {"error"}, body
        return body["error"]


def send(
    server: HttpServer,
    method: str,
    path: str,
    *,
    body: bytes | Iterable[bytes] | None = None,
    headers: Iterable[tuple[str, str | bytes]] = (),
    token: str | None = None,
) -> Answer:
    """One request, byte for byte: header values given as bytes go out unchanged (http.client
    would encode a str as Latin-1), a body given as an iterable goes out chunked."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=15)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        if token:
            conn.putheader("Authorization", f"Bearer {token}")
        for name, value in headers:
            conn.putheader(name, value)
        chunked = body is not None and not isinstance(body, bytes)
        if chunked:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Transfer-Encoding", "chunked")
        elif body is not None:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if chunked:
            for piece in body:
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        elif body:
            conn.send(body)
        response = conn.getresponse()
        return Answer(response.status, response.headers, response.read())
    finally:
        conn.close()


def pieces(raw: bytes, size: int = 7) -> Iterable[bytes]:
    return (raw[i : i + size] for i in range(0, len(raw), size))


def tool(server, token, name: str, payload: dict, *, caller: bytes | list[bytes] | None = None, chunked=False):
    callers = [] if caller is None else caller if isinstance(caller, list) else [caller]
    raw = json.dumps(payload).encode()
    return send(
        server,
        "POST",
        f"/api/tools/{name}",
        body=pieces(raw) if chunked else raw,
        token=token,
        headers=[(CALLER, value) for value in callers],
    )


def mcp_call(server, token, name: str, arguments: dict, *, callers: list[bytes] = ()) -> Answer:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return send(
        server,
        "POST",
        "/mcp",
        body=json.dumps(message).encode(),
        token=token,
        headers=[MCP_ACCEPT, *[(CALLER, value) for value in callers]],
    )


def mcp_tool_error(answer: Answer) -> dict:
    assert answer.status == 200, answer
    result = answer.json()["result"]
    assert result["isError"] is True, result
    return result["structuredContent"]["error"]


# --- chunked bodies -------------------------------------------------------------------------------


def test_a_chunked_body_is_read(server, token):
    session_upsert(session_id="ses_caller", changes={"status": "idle"})
    answer = tool(server, token, "loop_create", CREATE, caller=b"ses_caller", chunked=True)
    assert answer.status == 200, answer
    assert answer.json()["prompt"] == "Check the deploy"
    listed = tool(server, token, "loop_list", {}, caller=b"ses_caller", chunked=True)
    assert [loop["prompt"] for loop in listed.json()["loops"]] == ["Check the deploy"]


def test_a_chunked_body_over_the_limit_is_413_too_large(server, token):
    raw = json.dumps({**CREATE, "prompt": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}).encode()
    answer = send(server, "POST", "/api/tools/loop_create", body=pieces(raw, 64 * 1024), token=token)
    assert answer.status == 413, answer
    assert answer.error()["code"] == "too_large"
    assert not Loop.objects.exists()


def test_a_body_over_the_limit_is_413_too_large(server, token):
    raw = json.dumps({**CREATE, "prompt": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}).encode()
    answer = send(server, "POST", "/api/tools/loop_create", body=raw, token=token)
    assert answer.status == 413, answer
    assert answer.error()["code"] == "too_large"


# --- the caller header ----------------------------------------------------------------------------


def test_a_utf8_caller_header_names_its_session(server, token):
    session_upsert(session_id="ses_é", changes={"status": "idle"})
    created = tool(server, token, "loop_create", CREATE, caller="ses_é".encode())
    assert created.status == 200, created
    assert created.json()["session_id"] == "ses_é"
    assert Loop.objects.get().created_by_session_id == "ses_é"
    listed = tool(server, token, "loop_list", {}, caller="ses_é".encode())
    assert [loop["session_id"] for loop in listed.json()["loops"]] == ["ses_é"]


def test_loop_list_from_an_unknown_caller_is_unknown_session_like_loop_create(server, token):
    created = tool(server, token, "loop_create", CREATE, caller=b"ses_nobody")
    listed = tool(server, token, "loop_list", {}, caller=b"ses_nobody")
    assert (created.status, listed.status) == (422, 422), (created, listed)
    assert listed.error() == created.error()
    assert listed.error()["code"] == "unknown_session"


@pytest.mark.parametrize("name", ["loop_create", "loop_list", "loop_delete", "list_sessions"])
def test_a_caller_header_that_is_not_utf8_is_422(server, token, name):
    payload = {"loop_create": CREATE, "loop_delete": {"loop_id": "loop_x"}}.get(name, {})
    answer = tool(server, token, name, payload, caller=b"ses_\xe9")  # Latin-1, not UTF-8
    assert answer.status == 422, answer
    error = answer.error()
    assert (error["code"], error["field"]) == ("invalid_input", CALLER), error
    assert "UTF-8" in error["message"], error


@pytest.mark.parametrize("name", ["loop_create", "loop_list"])
def test_two_caller_headers_are_422(server, token, name):
    session_upsert(session_id="ses_a", changes={"status": "idle"})
    session_upsert(session_id="ses_b", changes={"status": "idle"})
    answer = tool(server, token, name, CREATE if name == "loop_create" else {}, caller=[b"ses_a", b"ses_b"])
    assert answer.status == 422, answer
    assert answer.error()["field"] == CALLER
    assert not Loop.objects.exists()


def test_mcp_reads_the_caller_header_as_utf8(server, token):
    session_upsert(session_id="ses_é", changes={"status": "idle"})
    answer = mcp_call(server, token, "loop_create", CREATE, callers=["ses_é".encode()])
    assert answer.status == 200, answer
    result = answer.json()["result"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["session_id"] == "ses_é"


@pytest.mark.parametrize("callers", [[b"ses_\xe9"], [b"ses_a", b"ses_b"]], ids=["latin-1", "twice"])
def test_mcp_refuses_the_caller_header_as_the_rest_api_does(server, token, callers):
    rest = tool(server, token, "loop_list", {}, caller=callers)
    error = mcp_tool_error(mcp_call(server, token, "loop_list", {}, callers=callers))
    assert error == rest.error()
    assert error["field"] == CALLER


# --- path IDs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw_id", ["%FF", "%FE", "ses_%C3", "%ED%A0%80"])
def test_a_path_id_that_is_not_utf8_is_422(server, token, raw_id):
    answer = send(server, "PUT", f"/api/host/sessions/{raw_id}", body=b"{}", token=token)
    assert answer.status == 422, answer
    assert answer.error()["field"] == "session_id"
    assert not SessionHeader.objects.exists()


def test_a_valid_utf8_path_id_still_works(server, token):
    answer = send(server, "PUT", "/api/host/sessions/ses_%C3%A9%F0%9F%99%82", body=b"{}", token=token)
    assert answer.status == 200, answer
    assert answer.json()["session_id"] == "ses_é🙂"


# --- /mcp -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_mcp_answers_only_post_and_never_opens_a_stream(server, token, method):
    # Stateless JSON mode has no stream to offer: the MCP spec lets the server answer 405.
    answer = send(server, method, "/mcp", token=token, headers=[("Accept", "text/event-stream")])
    assert answer.status == 405, answer
    assert answer.headers["Allow"] == "POST"
    assert answer.headers["Content-Type"].startswith("application/json")
    assert answer.json()["error"]["data"]["error"]["code"] == "invalid_input"


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_mcp_refuses_non_json_numbers(server, token, constant):
    session_upsert(session_id="ses_caller", changes={"status": "idle"})
    raw = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_sessions", '
        b'"arguments": {"limit": %s}}}' % constant
    )
    answer = send(server, "POST", "/mcp", body=raw, token=token, headers=[MCP_ACCEPT])
    assert answer.status == 400, answer
    body = answer.json()
    assert body["error"]["code"] == -32700  # JSON-RPC parse error
    assert body["error"]["data"]["error"]["code"] == "invalid_input"


def test_mcp_body_over_the_limit_is_413_too_large(server, token):
    raw = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "loop_create", "arguments": {**CREATE, "prompt": "x" * 5_000_000}},
        }
    )
    answer = send(server, "POST", "/mcp", body=pieces(raw.encode(), 64 * 1024), token=token, headers=[MCP_ACCEPT])
    assert answer.status == 413, answer
    assert answer.json()["error"]["data"]["error"]["code"] == "too_large"


# --- HEAD -----------------------------------------------------------------------------------------


def test_head_health_is_a_status_without_a_body(server):
    # A raw socket: http.client would not read a body after HEAD even if one were sent.
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(b"HEAD /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    # No scheduler runs beside this server: the verdict is 503, with no body all the same.
    assert head.startswith(b"HTTP/1.1 503 "), received
    assert b"content-type: application/json" in head.lower()
    assert rest == b""


# --- the WSGI layer alone: what any server that de-chunks (gunicorn, mod_wsgi) gets too ------------


def through_server_fixes(**environ) -> dict:
    seen = {}

    def app(environ, start_response):
        seen.update(environ, body=environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
        start_response("200 OK", [])
        return [b""]

    server_fixes(app)(
        {"PATH_INFO": "/api/tools/loop_list", "wsgi.input": io.BytesIO(b""), **environ}, lambda *args: None
    )
    return seen


def test_a_terminated_input_is_read_to_its_end_within_the_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    seen = through_server_fixes(**{"wsgi.input_terminated": True, "wsgi.input": io.BytesIO(b"0123456789")})
    assert (seen["CONTENT_LENGTH"], seen["body"]) == ("10", b"0123456789")
    # One byte over is enough for Django to refuse it (RequestDataTooBig: 413) without reading more.
    seen = through_server_fixes(**{"wsgi.input_terminated": True, "wsgi.input": io.BytesIO(b"x" * 10_000)})
    assert seen["CONTENT_LENGTH"] == "11"
    # A server that does not promise an end (wsgiref) is never read past CONTENT_LENGTH.
    assert "CONTENT_LENGTH" not in through_server_fixes(**{"wsgi.input": io.BytesIO(b"{}")})


def test_the_caller_header_is_decoded_as_utf8_and_the_path_kept_as_bytes():
    utf8 = through_server_fixes(HTTP_X_DSH_SESSION_ID="ses_é".encode().decode("latin-1"))
    assert utf8["HTTP_X_DSH_SESSION_ID"] == "ses_é"
    latin1 = through_server_fixes(HTTP_X_DSH_SESSION_ID="ses_\xe9")
    assert latin1["HTTP_X_DSH_SESSION_ID"] == "ses_\udce9"  # refused by dshloop.api, never guessed at
    raw_path = through_server_fixes(PATH_INFO="/api/host/sessions/\xff")["dshloop.raw_path_info"]
    assert raw_path == "/api/host/sessions/\xff"
