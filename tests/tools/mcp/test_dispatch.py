"""tools.call: a tool call outside ninja answers exactly as POST /api/tools/<name>."""

from __future__ import annotations

import pytest

from core.errors import ApiError
from tests.conftest import error_of
from tools import functions
from tools.call import call_tool
from tools.catalogue import TOOLS

EVERY = {"kind": "every", "every_seconds": 60}


def test_every_catalogued_tool_is_its_function():
    assert [(tool.name, tool.function) for tool in TOOLS] == [
        (name, getattr(functions, name))
        for name in ("loop_create", "loop_list", "loop_delete", "list_sessions", "check_session_status")
    ]


def answer(name, arguments, caller):
    try:
        return call_tool(name, arguments, caller=caller)
    except ApiError as error:
        return error.body()


@pytest.mark.both_hosts
@pytest.mark.parametrize(
    "name, arguments",
    [
        ("list_sessions", {}),
        ("list_sessions", {"limit": 1}),
        ("check_session_status", {"session_id": "ses_caller"}),
        ("check_session_status", {"session_id": "ses_gone"}),
        ("loop_list", {}),
        ("loop_list", {"session_id": "global"}),
        ("loop_list", {"session_id": "new"}),
        ("loop_create", {"prompt": "x", "schedule": EVERY, "session_id": "ses_gone"}),
        ("loop_delete", {"loop_id": "loop_gone"}),
        ("loop_delete", {}),
    ],
)
def test_call_tool_answers_as_the_rest_api(api, global_session, name, arguments):
    response = api.tool(name, arguments)
    assert answer(name, arguments, "ses_caller") == response.json()


def test_an_omitted_argument_object_is_empty(api):
    assert call_tool("list_sessions", None, caller=None) == api.tool("list_sessions", {}).json()


def test_an_unreachable_host_is_target_unavailable_as_in_the_rest_api(refhost, settings, api):
    settings.DSHLOOP_HOST, settings.DSHLOOP_HOST_URL, settings.DSHLOOP_HOST_TOKEN = "http", refhost.url, refhost.token
    refhost.stop()
    arguments = {"prompt": "x", "schedule": EVERY}
    error = answer("loop_create", arguments, "ses_caller")
    assert error["error"]["code"] == "target_unavailable"
    assert error["error"] == error_of(api.tool("loop_create", arguments))
