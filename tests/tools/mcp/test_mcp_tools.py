"""The five tools over MCP, with the SDK's client, over stdio and streamable HTTP.

Every answer is checked against the REST API's answer to the same input: one definition of each
tool, two ways to call it.
"""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from loops.models import Loop
from tests.conftest import ApiClient, error_of
from tests.tools.mcp.conftest import MODES, result_of, run, tool_error_of
from tests.tools.test_catalogue import object_schemas
from tools.catalogue import TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

EVERY = {"kind": "every", "every_seconds": 600}
AFTER = {"kind": "after", "after_seconds": 3600}
CRON = {"kind": "cron", "expr": "30 9 * * 1-5", "tz": "Asia/Shanghai"}


@pytest.fixture
def sessions(make_session, make_preset):
    make_session("ses_caller", status="running", preset="coder", model="m1", user_title="The caller")
    make_session("ses_other", status="cold", preset="coder", model="m1")
    make_preset("reviewer")


@pytest.fixture
def rest(tools_token) -> ApiClient:
    return ApiClient(tools_token, "ses_caller")


@pytest.mark.parametrize("mode", MODES)
def test_tools_list_gives_the_five_tools_with_the_catalogue_schemas_and_hints(connect, mode):
    async def scenario():
        async with connect(session_id="ses_caller", mode=mode) as client:
            return (await client.list_tools()).tools

    tools = run(scenario)
    catalogue = [tool.definition() for tool in TOOLS]  # what GET /api/tools serves
    assert [tool.name for tool in tools] == [entry["name"] for entry in catalogue]
    for tool, entry in zip(tools, catalogue, strict=True):
        assert tool.description == entry["description"]
        assert tool.input_schema == entry["input_schema"]
        for path, schema in object_schemas(tool.input_schema):
            assert schema.get("additionalProperties") is False, (tool.name, path)
        assert tool.output_schema["type"] == "object"
    hints = {tool.name: tool.annotations for tool in tools}
    for name in ("loop_list", "list_sessions", "check_session_status"):
        assert hints[name].read_only_hint is True, name
    assert hints["loop_delete"].destructive_hint is True and hints["loop_delete"].read_only_hint is False
    assert hints["loop_create"].read_only_hint is False and hints["loop_create"].destructive_hint is False
    create = next(tool.description for tool in tools if tool.name == "loop_create")
    for taught in ('"self"', '"new"', '"every_seconds": 600', '"after_seconds": 3600', '"expr": "30 9 * * 1-5"'):
        assert taught in create


def test_create_one_loop_of_each_kind_list_with_each_selector_and_delete(connect, sessions, global_session, rest):
    async def scenario():
        seen = {}
        async with connect(session_id="ses_caller") as client:

            async def call(name, arguments):
                return result_of(await client.call_tool(name, arguments))

            seen["every"] = await call("loop_create", {"prompt": "  Check the deploy  ", "schedule": EVERY})
            seen["after"] = await call(
                "loop_create",
                {"prompt": "Review the PRs", "schedule": AFTER, "session_id": "new", "preset": "reviewer"},
            )
            seen["cron"] = await call(
                "loop_create", {"prompt": "Morning report", "schedule": CRON, "session_id": "self"}
            )
            seen["other"] = await call("loop_create", {"prompt": "Nudge", "schedule": EVERY, "session_id": "ses_other"})
            seen["mine"] = await call("loop_list", {})
            seen["all"] = await call("loop_list", {"session_id": "global"})
            seen["other_list"] = await call("loop_list", {"session_id": "ses_other"})
            seen["global_list"] = await call("loop_list", {"session_id": "ses_global"})
            seen["sessions"] = await call("list_sessions", {"limit": 10})
            seen["status"] = await call("check_session_status", {"session_id": "ses_other"})
            seen["missing"] = await call("check_session_status", {"session_id": "ses_gone"})
        return seen

    seen = run(scenario)
    every, after, cron, other = seen["every"], seen["after"], seen["cron"], seen["other"]
    assert every["prompt"] == "Check the deploy" and every["schedule"] == EVERY
    assert every["session_id"] == "ses_caller" and every["created_by_session_id"] == "ses_caller"
    assert every["state"] == "scheduled" and every["next_at"] == every["created_at"] + 600_000
    assert every["loop_id"].startswith("loop_") and "preset" not in every and "last_run_at" not in every
    assert after["schedule"] == AFTER and after["session_id"] == "new" and after["preset"] == "reviewer"
    assert after["next_at"] == after["created_at"] + 3_600_000
    assert cron["schedule"] == CRON and cron["session_id"] == "self"
    assert other["session_id"] == "ses_other"
    assert Loop.objects.count() == 4

    def ids(listing):
        return {loop["loop_id"] for loop in listing["loops"]}

    assert ids(seen["mine"]) == {every["loop_id"]}
    assert ids(seen["all"]) == {every["loop_id"], after["loop_id"], cron["loop_id"], other["loop_id"]}
    assert ids(seen["other_list"]) == {other["loop_id"]}
    assert ids(seen["global_list"]) == {cron["loop_id"]}  # "self" loops belong to the global interface
    # The same answers as the REST API gives now (no loop is near its next_at, so nothing changed).
    assert seen["all"] == rest.tool("loop_list", {"session_id": "global"}).json()
    assert seen["mine"] == rest.tool("loop_list", {}).json()
    assert seen["sessions"] == rest.tool("list_sessions", {"limit": 10}).json()
    assert seen["status"] == rest.tool("check_session_status", {"session_id": "ses_other"}).json()
    assert seen["missing"] == {"session_id": "ses_gone", "status": "missing"}

    async def delete():
        async with connect(session_id="ses_caller") as client:
            deleted = result_of(await client.call_tool("loop_delete", {"loop_id": every["loop_id"]}))
            v1_alias = result_of(await client.call_tool("loop_delete", {"id": other["loop_id"]}))
            again = tool_error_of(await client.call_tool("loop_delete", {"loop_id": every["loop_id"]}))
            mine = result_of(await client.call_tool("loop_list", {}))
            return deleted, v1_alias, again, mine

    deleted, v1_alias, again, mine = run(delete)
    assert deleted == {"deleted": True, "loop_id": every["loop_id"]}
    assert v1_alias == {"deleted": True, "loop_id": other["loop_id"]}
    assert again["code"] == "unknown_loop"
    assert mine == {"loops": []}
    assert set(Loop.objects.values_list("loop_id", flat=True)) == {after["loop_id"], cron["loop_id"]}


# One call per contract error code of the tools (contract §3), and the field it names.
ERROR_CASES = [
    ("loop_create", {"prompt": "x", "schedule": EVERY, "model": "m2"}, "invalid_input", "model"),
    # contract §14: a fresh agent at most every DSHLOOP_MIN_NEW_INTERVAL_SECONDS.
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "every", "every_seconds": 60}, "session_id": "new"},
        "interval_too_short",
        "schedule",
    ),
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "every", "every_seconds": 0}},
        "invalid_input",
        "schedule.every_seconds",
    ),
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "every", "every_seconds": True}},
        "invalid_input",
        "schedule.every_seconds",
    ),
    ("loop_create", {"prompt": "   ", "schedule": EVERY}, "invalid_input", "prompt"),
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "every", "every_seconds": 60, "extra": 1}},
        "invalid_input",
        "schedule.extra",
    ),
    ("loop_create", {"prompt": "x", "schedule": EVERY, "time_in_seconds": 60}, "invalid_input", "time_in_seconds"),
    ("loop_create", {"prompt": "x"}, "invalid_input", "schedule"),
    ("loop_create", {"prompt": "a\x00b", "schedule": EVERY}, "invalid_input", "prompt"),
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "every", "every_seconds": 2**53}},
        "invalid_input",
        "schedule.every_seconds",
    ),
    ("loop_create", {"prompt": "x", "schedule": {"kind": "hourly"}}, "invalid_input", "schedule"),
    ("loop_create", {"prompt": "x", "schedule": EVERY, "session_id": "global"}, "invalid_input", "session_id"),
    ("loop_create", {"prompt": "x", "schedule": EVERY, "preset": "reviewer"}, "invalid_input", "preset"),
    ("loop_list", {"session_id": "self"}, "invalid_input", "session_id"),
    ("loop_list", {"session_id": "ses\x01x"}, "invalid_input", "session_id"),
    ("loop_list", {"session_id": [[[]]]}, "invalid_input", "session_id"),
    ("loop_delete", {"loop_id": "loop_a", "id": "loop_a"}, "invalid_input", "id"),
    ("list_sessions", {"limit": 501}, "invalid_input", "limit"),
    ("check_session_status", {"session_id": "new"}, "invalid_input", "session_id"),
    ("loop_create", {"prompt": "x", "schedule": EVERY, "session_id": "ses_nope"}, "unknown_session", "session_id"),
    (
        "loop_create",
        {"prompt": "x", "schedule": EVERY, "session_id": "new", "preset": "nope"},
        "unknown_preset",
        "preset",
    ),
    ("loop_create", {"prompt": "x", "schedule": EVERY, "session_id": "self"}, "target_unavailable", "session_id"),
    ("loop_delete", {"loop_id": "loop_nope"}, "unknown_loop", "loop_id"),
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "cron", "expr": "61 * * * *"}},
        "invalid_cron",
        "schedule.expr",
    ),
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "cron", "expr": "0 9 * * *", "tz": "Mars/Olympus"}},
        "invalid_time_zone",
        "schedule.tz",
    ),
    (
        "loop_create",
        {"prompt": "x", "schedule": {"kind": "cron", "expr": "0 0 30 2 *"}},
        "no_future_occurrence",
        "schedule.expr",
    ),
]


def test_each_contract_error_comes_back_as_a_tool_error_with_the_rest_body(connect, sessions, rest):
    """No global interface session here, so "self" is target_unavailable."""

    async def scenario():
        async with connect(session_id="ses_caller") as client:
            return [await client.call_tool(name, arguments) for name, arguments, _, _ in ERROR_CASES]

    results = run(scenario)
    for (name, arguments, code, field), result in zip(ERROR_CASES, results, strict=True):
        error = tool_error_of(result)
        assert (error["code"], error.get("field")) == (code, field), (name, arguments, error)
        assert error == error_of(rest.tool(name, arguments)), (name, arguments)
    assert not Loop.objects.exists()


def test_without_a_caller_session_there_is_no_current_session(connect, sessions):
    """stdio without --session, HTTP without X-DSH-Session-Id: as a REST call without the header."""

    async def scenario():
        async with connect(session_id=None) as client:
            listed = await client.call_tool("loop_list", {})
            created = await client.call_tool("loop_create", {"prompt": "x", "schedule": EVERY})
            named = await client.call_tool("loop_create", {"prompt": "x", "schedule": EVERY, "session_id": "ses_other"})
            return listed, created, named

    listed, created, named = run(scenario)
    assert tool_error_of(listed)["code"] == "no_current_session"
    assert tool_error_of(created)["code"] == "no_current_session"  # no target: "the current session" is needed
    # contract §2: only "the current session" needs the header; a named target does not, and with
    # no global interface either the loop records no creator.
    assert result_of(named)["created_by_session_id"] == ""
    assert list(Loop.objects.values_list("session_id", "created_by_session_id")) == [("ses_other", "")]


def test_an_unknown_tool_is_a_protocol_error(connect):
    async def scenario():
        async with connect(session_id="ses_caller") as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("loop_update", {})
            return raised.value

    error = run(scenario)
    assert "Unknown tool 'loop_update'" in error.message
