"""A tool call that meets a database out of reach, or a bug, over MCP (in-process, through the SDK's
own client): a JSON-RPC error either way, never a tool result that pretends; the outage with the code
tools.mcp.server.UNAVAILABLE and the contract's `unavailable` body, the bug logged and counted."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from monitoring import metrics
from tests.conftest import captured_log
from tests.tools.mcp.conftest import run
from tools.mcp import server as mcp_server


def raising(exc: Exception):
    def call_tool(*args, **kwargs):
        raise exc

    return call_tool


def outage() -> OperationalError:
    try:
        raise OperationalError("connection refused") from psycopg.OperationalError("connection refused")
    except OperationalError as exc:
        return exc


def call_error(monkeypatch, exc: Exception) -> MCPError:
    monkeypatch.setattr(mcp_server, "call_tool", raising(exc))

    async def scenario():
        async with Client(mcp_server.build_server(caller_of=lambda ctx: "ses_a")) as client:
            try:
                await client.call_tool("loop_list", {})
            except MCPError as error:
                return error
        raise AssertionError("the call succeeded")

    return run(scenario)


def test_a_database_out_of_reach_is_the_unavailable_json_rpc_error(monkeypatch):
    before = metrics._unexpected_errors.value
    error = call_error(monkeypatch, outage())
    assert error.code == mcp_server.UNAVAILABLE == -32050
    assert error.error.data == {
        "error": {
            "code": "unavailable",
            "message": "The database cannot be reached right now; try again in a few seconds.",
        }
    }
    assert error.message.startswith("unavailable: ")
    assert metrics._unexpected_errors.value == before  # an outage is not a bug


@pytest.mark.django_db
def test_a_bug_is_an_internal_json_rpc_error_logged_and_counted(monkeypatch, caplog):
    before = metrics._unexpected_errors.value
    with captured_log(caplog, "dshloop.mcp"):
        error = call_error(monkeypatch, RuntimeError("a bug"))
    assert error.code == INTERNAL_ERROR and "a bug" not in error.message
    [record] = [r for r in caplog.records if r.name == "dshloop.mcp"]
    assert record.exc_info[0] is RuntimeError
    assert metrics._unexpected_errors.value == before + 1
