"""No recursive unattended work (contract §15): a session dshloop made for a `new` loop's run may
not create or delete loops, on every transport, and GET /api/tools leaves those two tools out
for it, unless DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS is on. The read-only tools stay."""

from __future__ import annotations

import pytest
import time_machine

from core.errors import ApiError
from loops.models import Loop, LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from tests.conftest import T0, after, create_loop, error_of, every, s
from tools.call import call_tool

ALL = ["loop_create", "loop_list", "loop_delete", "list_sessions", "check_session_status"]
READ_ONLY = ["loop_list", "list_sessions", "check_session_status"]


def fresh_session(api) -> str:
    """The session the scheduler makes for one run of a `new` loop (an agent's, from ses_caller)."""
    with time_machine.travel(T0, tick=False):
        created = api.tool(
            "loop_create", {"prompt": "Summarise the alerts", "schedule": after(10), "session_id": "new"}
        )
    assert created.status_code == 200, created.content
    with time_machine.travel(T0 + s(10), tick=False):
        deliver_runs(claim_due(now=T0 + s(10)), now=T0 + s(10))
    run = LoopRun.objects.get(loop_id=created.json()["loop_id"])
    assert run.status == RunStatus.DELIVERED and run.target_session_id
    return run.target_session_id


@pytest.fixture
def victim(make_session) -> str:
    """A loop a fresh run might want to delete."""
    make_session("ses_target", status="idle")
    return create_loop(every(600), target="ses_target").loop_id


def tool_names(api, session_id: str | None = None) -> list[str]:
    response = api.client.get("/api/tools", headers=api.as_session(session_id).headers())
    assert response.status_code == 200, response.content
    return [tool["name"] for tool in response.json()["tools"]]


@pytest.mark.both_hosts
def test_a_fresh_run_may_neither_create_nor_delete_loops_over_rest(api, victim):
    fresh = api.as_session(fresh_session(api))
    before = Loop.objects.count()
    created = fresh.tool("loop_create", {"prompt": "Again and again", "schedule": every(600), "session_id": "new"})
    assert (created.status_code, error_of(created)["code"]) == (403, "forbidden")
    message = error_of(created)["message"]
    assert "unattended run" in message and "DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS=1" in message
    # Its own session as the target ({}), and any other, are refused alike.
    assert fresh.tool("loop_create", {"prompt": "Me again", "schedule": every(600)}).status_code == 403
    deleted = fresh.tool("loop_delete", {"loop_id": victim})
    assert (deleted.status_code, error_of(deleted)["code"]) == (403, "forbidden")
    assert fresh.tool("loop_delete", {"loop_id": "loop_gone"}).status_code == 403  # refused before the lookup
    assert Loop.objects.count() == before and Loop.objects.filter(loop_id=victim).exists()
    # The read-only tools stay.
    assert fresh.tool("loop_list", {"session_id": "global"}).status_code == 200
    assert fresh.tool("list_sessions", {}).status_code == 200
    assert fresh.tool("check_session_status", {"session_id": "ses_target"}).status_code == 200
    # Any other session still may.
    assert api.tool("loop_delete", {"loop_id": victim}).status_code == 200


@pytest.mark.both_hosts
def test_the_catalogue_leaves_the_loop_making_tools_out_for_a_fresh_run(api):
    fresh = fresh_session(api)
    assert tool_names(api, fresh) == READ_ONLY
    assert tool_names(api, "ses_caller") == ALL
    assert tool_names(api) == ALL  # no caller: the whole catalogue, as manage.py tools_catalogue builds it
    bad = api.client.get("/api/tools", headers={**api.headers(), "X-DSH-Session-Id": "a,b"})
    assert (bad.status_code, error_of(bad)["field"]) == (422, "X-DSH-Session-Id")


def test_the_operator_can_let_fresh_runs_make_loops(api, victim, settings):
    fresh = fresh_session(api)
    settings.DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS = True
    assert tool_names(api, fresh) == ALL
    created = api.as_session(fresh).tool("loop_create", {"prompt": "Follow up", "schedule": every(600)})
    assert created.status_code == 200, created.content
    assert created.json()["created_by_session_id"] == fresh
    assert api.as_session(fresh).tool("loop_delete", {"loop_id": victim}).status_code == 200
    assert call_tool("loop_list", {"session_id": "global"}, caller=fresh)["loops"]


def test_the_mcp_dispatch_refuses_a_fresh_run_as_rest_does(api, victim, settings):
    fresh = fresh_session(api)
    for name, arguments in (
        ("loop_create", {"prompt": "Again", "schedule": every(600), "session_id": "new"}),
        ("loop_delete", {"loop_id": victim}),
    ):
        with pytest.raises(ApiError) as refused:
            call_tool(name, arguments, caller=fresh)
        assert refused.value.body() == api.as_session(fresh).tool(name, arguments).json()
        assert refused.value.status == 403
    assert call_tool("list_sessions", {}, caller=fresh)["sessions"]
    settings.DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS = True
    assert call_tool("loop_delete", {"loop_id": victim}, caller=fresh) == {"deleted": True, "loop_id": victim}
