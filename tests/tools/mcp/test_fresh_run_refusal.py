"""contract §15 over MCP's own transports (stdio, streamable HTTP): a session dshloop made for a
`new` loop's run gets loop_create and loop_delete refused with the REST API's 403 body."""

from __future__ import annotations

import pytest

from tests.conftest import every
from tests.tools.mcp.conftest import result_of, run, tool_error_of
from tests.tools.test_fresh_run_sessions import fresh_session

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_fresh_run_is_refused_loop_create_and_loop_delete_over_mcp(connect, api):
    fresh = fresh_session(api)
    rest = api.as_session(fresh)
    create = {"prompt": "Again and again", "schedule": every(600), "session_id": "new"}

    async def scenario():
        async with connect(session_id=fresh) as client:
            return (
                await client.call_tool("loop_create", create),
                await client.call_tool("loop_delete", {"loop_id": "loop_gone"}),
                await client.call_tool("loop_list", {"session_id": "global"}),
            )

    created, deleted, listed = run(scenario)
    assert tool_error_of(created) == rest.tool("loop_create", create).json()["error"]
    assert tool_error_of(created)["code"] == "forbidden"
    assert tool_error_of(deleted)["code"] == "forbidden"
    assert result_of(listed) == {"loops": []}  # the read-only tools stay (the one-shot has completed)
