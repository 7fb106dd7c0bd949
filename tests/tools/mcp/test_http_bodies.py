"""Bodies /mcp cannot parse are a JSON-RPC parse error, never a 500: here a deeply nested body with a
NaN in it, which the REST API answers 422 "not valid JSON" (tests/test_malformed_input.py).

The NaN sends the body through the strict parser of core.jsonparse (the SDK's own would read it
as a number), whose recursion must not escape as a RecursionError: an HTML 500 from the server.
"""

from __future__ import annotations

import httpx
import pytest
from mcp_types import PARSE_ERROR

from tests.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db(transaction=True)

MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def nested(depth: int, leaf: bytes) -> bytes:
    return b"[" * depth + leaf + b"]" * depth


def tool_call(arguments: bytes) -> bytes:
    head = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "loop_list", "arguments": '
    return head + arguments + b"}}"


@pytest.mark.parametrize("depth", [1_000, 100_000])
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(lambda depth: tool_call(b'{"x": ' + nested(depth, b"NaN") + b"}"), id="in-the-arguments"),
        pytest.param(lambda depth: nested(depth, b"NaN"), id="the-whole-body"),
        pytest.param(lambda depth: nested(depth, b"1") + b"Infinity", id="infinity-after-it"),
    ],
)
def test_a_deeply_nested_body_with_a_nan_is_a_json_rpc_parse_error(mcp_http_server, tools_token, depth, body):
    answer = httpx.post(
        f"{mcp_http_server.url}/mcp",
        content=body(depth),
        headers={**MCP_HEADERS, "Authorization": f"Bearer {tools_token}"},
        timeout=30,
    )
    assert answer.status_code == 400, answer.text[:500]
    reply = answer.json()
    assert reply["jsonrpc"] == "2.0" and reply["id"] is None
    assert reply["error"]["code"] == PARSE_ERROR, reply
    assert reply["error"]["data"]["error"] == {
        "code": "invalid_input",
        "message": "The request body is not valid JSON: it is nested too deeply.",
    }
    # The REST API refuses the same arguments as "not valid JSON" (422), not with a 5xx either.
    rest = ApiClient(tools_token).tool("loop_list", raw=b'{"x": ' + nested(depth, b"NaN") + b"}")
    assert rest.status_code == 422 and "not valid JSON" in error_of(rest)["message"]


def test_a_nan_at_ordinary_depth_is_still_named(mcp_http_server, tools_token):
    answer = httpx.post(
        f"{mcp_http_server.url}/mcp",
        content=tool_call(b'{"x": ' + nested(10, b"NaN") + b"}"),
        headers={**MCP_HEADERS, "Authorization": f"Bearer {tools_token}"},
        timeout=30,
    )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == PARSE_ERROR
    assert "NaN is not a JSON number" in answer.json()["error"]["message"]
