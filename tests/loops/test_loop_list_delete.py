"""loop_list and loop_delete through the HTTP API (spec §2.2, §2.3, §4, §10; contract §3, §4)."""

from datetime import timedelta

import pytest
import time_machine

from loops.models import Loop, LoopRun
from tests.conftest import T0, error_of, every

T0_MS = 1748858400000
MAX_SAFE = 2**53 - 1

# The acceptance set runs against both hosts.
pytestmark = pytest.mark.both_hosts


def create(api, session_id: str | None = None, *, seconds: int = 600, prompt: str = "p") -> str:
    body = {"prompt": prompt, "schedule": every(seconds)}
    if session_id is not None:
        body["session_id"] = session_id
    response = api.tool("loop_create", body)
    assert response.status_code == 200, response.content
    return response.json()["loop_id"]


def listed(api, body=None, *, session_id: str | None = None) -> list[str]:
    response = api.tool("loop_list", body if body is not None else {}, session_id=session_id)
    assert response.status_code == 200, response.content
    assert set(response.json()) == {"loops"}
    return [view["loop_id"] for view in response.json()["loops"]]


@pytest.fixture
def world(api, global_session, make_session):
    """One loop per kind of target, created by ses_caller."""
    make_session("ses_other")
    return {
        "caller": create(api),
        "other": create(api, "ses_other"),
        "self": create(api, "self"),
        "new": create(api, "new"),
        "global": create(api, "ses_global"),  # the global interface by its actual ID
    }


# --- loop_list: the three forms (spec §2.2, §12) -----------------------------------------------


def test_list_empty_object_returns_loops_targeting_the_caller(api, world):
    assert listed(api) == [world["caller"]]


def test_list_for_another_caller_returns_only_its_loops(api, world):
    assert listed(api, session_id="ses_other") == [world["other"]]


def test_list_empty_object_for_the_global_interface_includes_self_loops(api, world):
    assert set(listed(api, session_id="ses_global")) == {world["self"], world["global"]}


def test_list_global_returns_every_loop(api, world):
    assert set(listed(api, {"session_id": "global"})) == set(world.values())
    assert len(listed(api, {"session_id": "global"})) == 5


def test_list_exact_session_returns_only_that_session(api, world):
    assert listed(api, {"session_id": "ses_other"}) == [world["other"]]
    assert listed(api, {"session_id": "ses_caller"}, session_id="ses_other") == [world["caller"]]


def test_list_exact_global_interface_session_includes_self_loops(api, world):
    assert set(listed(api, {"session_id": "ses_global"})) == {world["self"], world["global"]}


def test_list_exact_unknown_session_is_empty(api, world):
    assert listed(api, {"session_id": "ses_nobody"}) == []


def test_list_self_loops_are_not_shown_to_other_sessions(api, world):
    assert world["self"] not in listed(api)
    assert world["new"] not in listed(api, {"session_id": "ses_caller"})


@pytest.mark.parametrize("selector", ["self", "new"])
def test_list_rejects_create_targets_as_selectors(api, world, selector):
    response = api.tool("loop_list", {"session_id": selector})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "session_id")


def test_list_empty_object_without_caller_is_no_current_session(api, world):
    response = api.as_session(None).tool("loop_list", {})
    assert response.status_code == 422
    assert error_of(response)["code"] == "no_current_session"


@pytest.mark.parametrize("header", ["self", "new", "global"])
def test_list_empty_object_rejects_a_reserved_caller_header(api, world, header):
    response = api.tool("loop_list", {}, session_id=header)
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "X-DSH-Session-Id")


def test_list_global_needs_no_caller(api, world):
    assert len(listed(api.as_session(None), {"session_id": "global"})) == 5


def test_list_rejects_unknown_keys(api, world):
    response = api.tool("loop_list", {"session_id": "global", "state": "scheduled"})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "state")


def test_list_omits_completed_loops(api, world):
    Loop.objects.filter(loop_id=world["caller"]).update(state="completed")
    Loop.objects.filter(loop_id=world["other"]).update(state="failed")
    assert listed(api) == []
    everything = listed(api, {"session_id": "global"})
    assert world["caller"] not in everything
    assert world["other"] in everything  # a failed loop stays visible (spec §4)


# --- loop_list: ordering (contract §3) ---------------------------------------------------------


def test_list_orders_by_next_at_absent_last_then_created_at(api):
    with time_machine.travel(T0, tick=False) as clock:
        never = create(api, seconds=MAX_SAFE)  # next_at past year 9999: absent
        late = create(api, seconds=300)  # next_at T0+300
        clock.shift(timedelta(seconds=1))
        early = create(api, seconds=60)  # next_at T0+61
        tie_second = create(api, seconds=299)  # next_at T0+300 too, created later
        clock.shift(timedelta(seconds=1))
        never_second = create(api, seconds=MAX_SAFE)
        assert listed(api) == [early, late, tie_second, never, never_second]


def test_list_shows_next_at_and_omits_it_when_absent(api):
    with time_machine.travel(T0, tick=False):
        create(api, seconds=60)
        create(api, seconds=MAX_SAFE)
        views = api.tool("loop_list", {}).json()["loops"]
    assert views[0]["next_at"] == T0_MS + 60_000
    assert "next_at" not in views[1] and None not in views[1].values()


# --- loop_list: overdue is derived (spec §4, contract §3) --------------------------------------


def states(api) -> list[str]:
    return [view["state"] for view in api.tool("loop_list", {}).json()["loops"]]


def test_overdue_only_after_next_at_is_more_than_30_seconds_past(api):
    with time_machine.travel(T0, tick=False) as clock:
        loop_id = create(api, seconds=60)  # next_at = T0 + 60 s
        assert states(api) == ["scheduled"]
        clock.move_to(T0 + timedelta(seconds=90))  # exactly 30 s late
        assert states(api) == ["scheduled"]
        clock.move_to(T0 + timedelta(seconds=90, milliseconds=1))
        assert states(api) == ["overdue"]
        assert Loop.objects.get(loop_id=loop_id).state == "scheduled"  # derived, never stored


def test_claimed_loop_is_running_not_overdue(api):
    with time_machine.travel(T0, tick=False) as clock:
        loop_id = create(api, seconds=60)
        Loop.objects.filter(loop_id=loop_id).update(state="running")
        clock.move_to(T0 + timedelta(hours=1))
        assert states(api) == ["running"]


# --- loop_delete (spec §2.3, §10) --------------------------------------------------------------


def delete(api, body, *, session_id: str | None = None):
    return api.tool("loop_delete", body, session_id=session_id)


def test_delete_any_loop_from_any_caller(api, world, make_session):
    make_session("ses_stranger")
    for loop_id in world.values():
        response = delete(api, {"loop_id": loop_id}, session_id="ses_stranger")
        assert response.status_code == 200, response.content
        assert response.json() == {"deleted": True, "loop_id": loop_id}
    assert not Loop.objects.exists()


def test_delete_needs_no_caller_session(api, world):
    response = api.as_session(None).tool("loop_delete", {"loop_id": world["other"]})
    assert response.status_code == 200, response.content
    assert listed(api, {"session_id": "ses_other"}) == []


def test_delete_removes_only_that_loop(api, world):
    delete(api, {"loop_id": world["self"]})
    assert set(listed(api, {"session_id": "global"})) == set(world.values()) - {world["self"]}


def test_second_delete_is_unknown_loop(api, world):
    assert delete(api, {"loop_id": world["caller"]}).status_code == 200
    response = delete(api, {"loop_id": world["caller"]})
    assert response.status_code == 404
    error = error_of(response)
    assert (error["code"], error["field"]) == ("unknown_loop", "loop_id")


def test_delete_unknown_id_is_unknown_loop(api):
    response = delete(api, {"loop_id": "loop_doesnotexist"})
    assert response.status_code == 404
    assert error_of(response)["code"] == "unknown_loop"


def test_delete_accepts_deprecated_id(api, world):
    response = delete(api, {"id": world["caller"]})
    assert response.status_code == 200, response.content
    assert response.json() == {"deleted": True, "loop_id": world["caller"]}
    assert not Loop.objects.filter(loop_id=world["caller"]).exists()


def test_delete_with_both_loop_id_and_id_is_rejected(api, world):
    response = delete(api, {"loop_id": world["caller"], "id": world["caller"]})
    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_input"
    assert Loop.objects.filter(loop_id=world["caller"]).exists()


def test_delete_with_neither_is_rejected(api):
    response = delete(api, {})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "loop_id")


@pytest.mark.parametrize("body", [{"loop_id": ""}, {"loop_id": 7}, {"loop_id": "x", "session_id": "ses_caller"}])
def test_delete_rejects_malformed_input(api, body):
    response = delete(api, body)
    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_input"


def test_runs_outlive_their_deleted_loop(api):
    with time_machine.travel(T0, tick=False):
        loop_id = create(api, seconds=60)
    scheduled = T0 + timedelta(seconds=60)
    LoopRun.objects.create(
        run_id="run_1",
        loop_id=loop_id,
        occurrence_key=f"{loop_id}@{T0_MS + 60_000}",
        scheduled_at=scheduled,
        status="delivered",
        attempt=1,
        target_session_id="ses_caller",
        claimed_at=scheduled,
        started_at=scheduled,
        finished_at=scheduled + timedelta(seconds=2),
    )
    with time_machine.travel(scheduled + timedelta(seconds=5), tick=False):  # before its next occurrence
        assert delete(api, {"loop_id": loop_id}).status_code == 200

    response = api.get(f"/api/loops/{loop_id}/runs")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "runs": [
            {
                "run_id": "run_1",
                "loop_id": loop_id,
                "occurrence_key": f"{loop_id}@{T0_MS + 60_000}",
                "scheduled_at": T0_MS + 60_000,
                "status": "delivered",
                "attempt": 1,
                "target_session_id": "ses_caller",
                "started_at": T0_MS + 60_000,
                "finished_at": T0_MS + 62_000,
                "revision": 1,
                "manual": False,
            }
        ]
    }
    assert LoopRun.objects.filter(loop_id=loop_id).count() == 1


def test_runs_of_a_deleted_loop_without_history_is_unknown_loop(api):
    loop_id = create(api)
    delete(api, {"loop_id": loop_id})
    response = api.get(f"/api/loops/{loop_id}/runs")
    assert response.status_code == 404
    assert error_of(response)["code"] == "unknown_loop"
