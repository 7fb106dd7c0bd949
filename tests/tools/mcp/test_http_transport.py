"""Streamable HTTP at /mcp: the same tokens and caller header as /api/, and `manage.py serve` serving it."""

from __future__ import annotations

import os
import sys

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import ApiClient, error_of
from tests.processes import MANAGE, wait_for
from tests.tools.mcp.conftest import Connector, HttpServer, run, tool_error_of
from tokens.models import ApiToken
from tokens.services import token_create

pytestmark = pytest.mark.django_db(transaction=True)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def post_initialize(url: str, **headers) -> httpx.Response:
    return httpx.post(f"{url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=10)


def refusal_of(response: httpx.Response) -> dict:
    """A refused /mcp request: a JSON-RPC error whose data is the contract's error body."""
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None, body
    error = body["error"]["data"]["error"]
    assert body["error"]["message"] == f"{error['code']}: {error['message']}"
    return error


@pytest.fixture
def host_only_token(db) -> str:
    return token_create(name="host", scopes=["host"])[1]


def test_mcp_needs_a_bearer_token_with_the_tools_scope(mcp_http_server, tools_token, host_only_token):
    url = mcp_http_server.url
    missing = post_initialize(url)
    assert missing.status_code == 401 and refusal_of(missing)["code"] == "unauthorized"
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert post_initialize(url, Authorization="Basic dXNlcjpwYXNz").status_code == 401
    unknown = post_initialize(url, Authorization="Bearer dsh_not_a_token")
    assert unknown.status_code == 401 and refusal_of(unknown)["code"] == "unauthorized"
    forbidden = post_initialize(url, Authorization=f"Bearer {host_only_token}")
    assert forbidden.status_code == 403 and refusal_of(forbidden)["code"] == "forbidden"
    # The same refusals, word for word, as the REST API's.
    assert refusal_of(unknown) == error_of(ApiClient("dsh_not_a_token").tool("list_sessions"))
    assert refusal_of(forbidden) == error_of(ApiClient(host_only_token).tool("list_sessions"))
    assert post_initialize(url, Authorization=f"Bearer {tools_token}").status_code == 200
    ApiToken.objects.update(revoked=True)
    assert post_initialize(url, Authorization=f"Bearer {tools_token}").status_code == 401
    # Every method, not only POST.
    assert httpx.get(f"{url}/mcp", timeout=10).status_code == 401
    assert httpx.delete(f"{url}/mcp", timeout=10).status_code == 401


def test_the_sdk_client_sees_the_refusal(mcp_http_server, tmp_path, host_only_token):
    connect = Connector("http", log_dir=tmp_path, http_url=mcp_http_server.url, token=host_only_token)

    async def scenario():
        try:
            async with connect(session_id="ses_caller", mode="legacy"):
                pass
        except BaseException as exc:  # the client's task group may wrap it in an exception group
            return exc
        raise AssertionError("the client connected with a host-only token")

    refused = run(scenario)
    while isinstance(refused, BaseExceptionGroup) and len(refused.exceptions) == 1:
        refused = refused.exceptions[0]
    assert isinstance(refused, MCPError), refused
    assert refused.message.startswith("forbidden: This token lacks the 'tools' scope")


def test_mcp_answers_only_to_allowed_hosts(mcp_http_server, tools_token):
    refused = post_initialize(mcp_http_server.url, Host="evil.example:8000", Authorization=f"Bearer {tools_token}")
    assert refused.status_code == 400
    assert refusal_of(refused)["code"] == "invalid_input" and refusal_of(refused)["field"] == "Host"


def test_a_reserved_caller_header_is_refused_as_in_the_rest_api(mcp_http_server, tmp_path, tools_token, make_session):
    make_session("ses_caller")
    connect = Connector("http", log_dir=tmp_path, http_url=mcp_http_server.url, token=tools_token)

    async def scenario():
        async with connect(session_id="self") as client:
            return await client.call_tool("loop_list", {})

    error = tool_error_of(run(scenario))
    assert error["code"] == "invalid_input" and error["field"] == "X-DSH-Session-Id"
    assert error == error_of(ApiClient(tools_token, "self").tool("loop_list", {}))


@pytest.mark.process
def test_serve_answers_the_api_and_mcp_on_one_port_and_stops_on_sigterm(tmp_path, tools_token):
    """What `make run` runs: uvicorn with /mcp and Django, plus a scheduler, in one process group."""
    server = HttpServer(tmp_path)
    server.argv = [sys.executable, str(MANAGE), "serve", f"127.0.0.1:{server.port}"]
    server.start()
    try:
        assert httpx.get(f"{server.url}/api/health", timeout=10).json()["database"] == "ok"
        assert post_initialize(server.url).status_code == 401
        connect = Connector("http", log_dir=tmp_path, http_url=server.url, token=tools_token)

        async def scenario():
            async with connect(session_id="ses_caller") as client:
                return [tool.name for tool in (await client.list_tools()).tools]

        assert len(run(scenario)) == 5
        # Stop a scheduler that is running, not one still starting (a SIGTERM before runloops sets
        # its handlers ends it at once, with no graceful stop to see).
        wait_for(
            lambda: httpx.get(f"{server.url}/api/health", timeout=10).json()["scheduler"]["alive"],
            timeout=30,
            interval=0.2,
            message="the scheduler's first heartbeat",
        )
    finally:
        took = server.stop()
    assert server.process.returncode == 0, server.log()
    assert took < 15, server.log()
    assert "scheduler stopped" in server.log()
    with pytest.raises(ProcessLookupError):  # nothing of the group is left: no orphaned scheduler
        os.killpg(server.process.pid, 0)
