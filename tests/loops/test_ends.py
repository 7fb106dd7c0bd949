"""contract §16: loops that end. `ends_at` lets the last occurrence at or before it run, `max_runs`
ends a loop after that many delivered runs; at its bound a loop is completed with an `ended` event
naming the bound, never deleted, its runs and trail kept; `upcoming` stops at the end; a bound
already passed is refused on its field. Through the real claim and delivery, on both engines."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from core.timeutil import to_ms
from loops.models import Loop, LoopRun, RunStatus
from loops.services.ends import end_passed_loops
from scheduler.claims import claim_due
from scheduler.delivery import deliver_run, deliver_runs
from tests.conftest import T0, error_of, every, fire_due, s


def detail(ops, loop_id: str, at: datetime = T0) -> dict:
    response = ops("GET", loop_id, at=at)
    assert response.status_code == 200, response.content
    return response.json()


def patch(ops, loop_id: str, body: dict, at: datetime = T0) -> dict:
    response = ops("PATCH", loop_id, body=body, at=at)
    assert response.status_code == 200, response.content
    return response.json()


def events(ops, loop_id: str) -> list[dict]:
    return ops("GET", loop_id, "events").json()["events"]


def upcoming(api, loop_id: str, at: datetime, count: int = 10) -> list[int]:
    with time_machine.travel(at, tick=False):
        response = api.get(f"/api/loops/{loop_id}/upcoming", count=count)
    assert response.status_code == 200, response.content
    return response.json()["fire_times"]


def nothing_due(at: datetime) -> bool:
    with time_machine.travel(at, tick=False):
        return claim_due(now=at) == []


def active_ids(api) -> set[str]:
    loops = api.tool("loop_list", {"session_id": "ses_target"}).json()["loops"]
    return {loop["loop_id"] for loop in loops}


def test_max_runs_ends_the_loop_after_its_last_delivered_run(make, ops, api):
    loop_id = make(every(60))["loop_id"]
    assert patch(ops, loop_id, {"max_runs": 3})["max_runs"] == 3
    assert upcoming(api, loop_id, T0) == [to_ms(T0 + s(60 * k)) for k in (1, 2, 3)]

    for k in (1, 2):
        assert fire_due(loop_id, T0 + s(60 * k)).status == RunStatus.DELIVERED
        assert detail(ops, loop_id)["state"] == "scheduled"
    assert detail(ops, loop_id)["runs_delivered"] == 2
    assert loop_id in active_ids(api)

    fire_due(loop_id, T0 + s(180))
    ended = detail(ops, loop_id, at=T0 + s(180))
    assert (ended["state"], ended["runs_delivered"], ended["max_runs"]) == ("completed", 3, 3)
    assert "next_at" not in ended
    latest = events(ops, loop_id)[0]
    assert (latest["kind"], latest["changes"], latest["actor"]) == (
        "ended",
        {"max_runs": [3, 3]},
        {"kind": "scheduler"},
    )
    # Never deleted: its runs and trail are kept; it leaves the agents' active list; nothing more is due.
    assert LoopRun.objects.filter(loop_id=loop_id, status=RunStatus.DELIVERED).count() == 3
    assert loop_id not in active_ids(api)
    assert nothing_due(T0 + s(240))
    assert upcoming(api, loop_id, T0 + s(200)) == []


def test_ends_at_lets_the_last_occurrence_at_or_before_it_run(make, ops, api):
    loop_id = make(every(60))["loop_id"]
    end = T0 + s(180)  # exactly on an occurrence: it is the last
    assert patch(ops, loop_id, {"ends_at": to_ms(end)})["ends_at"] == to_ms(end)
    assert upcoming(api, loop_id, T0) == [to_ms(T0 + s(60 * k)) for k in (1, 2, 3)]

    for k in (1, 2, 3):
        assert fire_due(loop_id, T0 + s(60 * k)).scheduled_at == T0 + s(60 * k)
    ended = detail(ops, loop_id, at=end)
    assert (ended["state"], ended["runs_delivered"]) == ("completed", 3)
    assert events(ops, loop_id)[0]["changes"] == {"ends_at": [to_ms(end), to_ms(end)]}
    assert nothing_due(T0 + s(240))


def test_a_catch_up_after_downtime_counts_once_and_stops_at_the_end(make, ops):
    capped = make(every(60))["loop_id"]
    counted = make(every(60))["loop_id"]
    patch(ops, capped, {"ends_at": to_ms(T0 + s(300))})
    patch(ops, counted, {"max_runs": 3})
    fire_due(capped, T0 + s(60))  # both loops' first run

    # Down from T0+60 s to T0+1,000 s: one catch-up each, never a burst.
    with time_machine.travel(T0 + s(1000), tick=False):
        claimed = claim_due(now=T0 + s(1000))
        assert len(claimed) == 2
        deliver_runs(claimed, now=T0 + s(1000))

    last = LoopRun.objects.filter(loop_id=capped).order_by("-scheduled_at").first()
    # The last occurrence at or before ends_at is delivered; the ones after it are none of the loop's.
    assert (last.scheduled_at, last.missed, last.status) == (T0 + s(300), 3, RunStatus.DELIVERED)
    assert detail(ops, capped, at=T0 + s(1000))["state"] == "completed"

    caught_up = detail(ops, counted, at=T0 + s(1000))
    # 15 occurrences due (one delivered, 14 missed): one run counted.
    assert (caught_up["state"], caught_up["runs_delivered"]) == ("scheduled", 2)
    fire_due(counted, T0 + s(1020))
    assert detail(ops, counted, at=T0 + s(1020))["state"] == "completed"
    assert LoopRun.objects.filter(loop_id=counted, status=RunStatus.DELIVERED).count() == 3


def test_a_paused_loop_that_passes_its_ends_at_completes_without_a_run(make, ops):
    loop_id = make(every(60))["loop_id"]
    end = T0 + s(300)
    patch(ops, loop_id, {"ends_at": to_ms(end)})
    assert ops("POST", loop_id, "pause", at=T0 + s(10)).json()["state"] == "paused"

    assert end_passed_loops(now=end - s(1)) == 0
    assert end_passed_loops(now=end) == 1
    ended = detail(ops, loop_id, at=end)
    assert (ended["state"], ended["runs_delivered"]) == ("completed", 0)
    assert "paused_at" not in ended and "pause_reason" not in ended
    assert not LoopRun.objects.filter(loop_id=loop_id).exists()
    assert [event["kind"] for event in events(ops, loop_id)][:2] == ["ended", "paused"]


def test_a_paused_loop_whose_run_is_still_open_ends_once_that_run_is_recorded(make, ops):
    """Paused while its run waits for a retry: the run is recorded skipped at its next attempt (the
    loop was paused first), never delivered to a completed loop; then the loop ends."""
    loop_id = make(every(60))["loop_id"]
    end = T0 + s(90)
    patch(ops, loop_id, {"ends_at": to_ms(end)})
    with time_machine.travel(T0 + s(60), tick=False):
        [run_id] = claim_due(now=T0 + s(60))
    LoopRun.objects.filter(run_id=run_id).update(retry_at=T0 + s(120))  # a transient failure's backoff
    ops("POST", loop_id, "pause", at=T0 + s(70))

    assert end_passed_loops(now=end + s(10)) == 0
    assert detail(ops, loop_id, at=end + s(10))["state"] == "paused"
    with time_machine.travel(T0 + s(120), tick=False):
        deliver_runs([run_id])
    run = LoopRun.objects.get(run_id=run_id)
    assert run.status == RunStatus.SKIPPED and run.finished_at is not None
    assert end_passed_loops(now=T0 + s(121)) == 1
    ended = detail(ops, loop_id, at=T0 + s(121))
    assert (ended["state"], ended["runs_delivered"]) == ("completed", 0)


def test_a_scheduled_loop_left_waiting_past_its_end_is_completed_but_a_due_one_is_left_to_the_claim(make, ops):
    # Its ends_at was edited while its last run was being delivered to a remote host, whose record
    # read the loop before the edit: it waits on a deadline past its end.
    waiting = make(every(600))["loop_id"]
    due = make(every(60))["loop_id"]
    Loop.objects.filter(loop_id__in=[waiting, due]).update(ends_at=T0 + s(90))
    assert end_passed_loops(now=T0 + s(89)) == 0
    assert end_passed_loops(now=T0 + s(90)) == 1
    assert (detail(ops, waiting)["state"], detail(ops, due)["state"]) == ("completed", "scheduled")
    # The due one's last occurrence (T0+60 s, before the end) is the claim's to deliver; then it ends.
    assert fire_due(due, T0 + s(95)).scheduled_at == T0 + s(60)
    assert detail(ops, due, at=T0 + s(95))["state"] == "completed"


def test_resuming_a_loop_past_its_end_completes_it(make, ops):
    loop_id = make(every(60))["loop_id"]
    patch(ops, loop_id, {"ends_at": to_ms(T0 + s(300))})
    ops("POST", loop_id, "pause", at=T0 + s(10))
    resumed = ops("POST", loop_id, "resume", at=T0 + s(400)).json()
    assert resumed["state"] == "completed"
    assert events(ops, loop_id)[0]["kind"] == "ended"
    assert not LoopRun.objects.filter(loop_id=loop_id).exists()


def test_an_end_before_the_next_occurrence_completes_the_loop_at_once(make, ops):
    loop_id = make(every(3600))["loop_id"]
    edited = patch(ops, loop_id, {"ends_at": to_ms(T0 + s(1800))}, at=T0 + s(60))
    assert edited["state"] == "completed"
    assert [event["kind"] for event in events(ops, loop_id)][:2] == ["ended", "edited"]


def test_null_clears_a_bound_and_the_edit_is_in_the_trail(make, ops):
    loop_id = make(every(60))["loop_id"]
    patch(ops, loop_id, {"ends_at": to_ms(T0 + s(600)), "max_runs": 5})
    cleared = patch(ops, loop_id, {"ends_at": None, "max_runs": None})
    assert (cleared["ends_at"], cleared["max_runs"], cleared["revision"]) == (None, None, 3)
    assert events(ops, loop_id)[0]["changes"] == {"ends_at": [to_ms(T0 + s(600)), None], "max_runs": [5, None]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ends_at": to_ms(T0)}, "ends_at"),  # now has passed too: the end must be later
        ({"ends_at": to_ms(T0) - 1}, "ends_at"),
        ({"ends_at": "tomorrow"}, "ends_at"),
        ({"ends_at": 1.5e12}, "ends_at"),
        ({"ends_at": True}, "ends_at"),
        ({"ends_at": 10**20}, "ends_at"),
        ({"max_runs": 0}, "max_runs"),
        ({"max_runs": -1}, "max_runs"),
        ({"max_runs": 2**31}, "max_runs"),
        ({"max_runs": "3"}, "max_runs"),
    ],
)
def test_a_bad_or_passed_bound_is_refused_on_its_field(make, ops, body, field):
    loop_id = make(every(60))["loop_id"]
    response = ops("PATCH", loop_id, body=body)
    assert response.status_code == 422, response.content
    assert error_of(response) | {"message": ""} == {"code": "invalid_input", "field": field, "message": ""}
    assert Loop.objects.get(loop_id=loop_id).revision == 1  # nothing half-written


def test_max_runs_already_reached_is_refused(make, ops):
    loop_id = make(every(60))["loop_id"]
    fire_due(loop_id, T0 + s(60))
    fire_due(loop_id, T0 + s(120))
    response = ops("PATCH", loop_id, body={"max_runs": 2}, at=T0 + s(130))
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "max_runs")
    assert "delivered 2" in error["message"]
    assert patch(ops, loop_id, {"max_runs": 3}, at=T0 + s(130))["max_runs"] == 3


def test_a_manual_run_does_not_count_towards_max_runs(make, ops):
    loop_id = make(every(600))["loop_id"]
    patch(ops, loop_id, {"max_runs": 1})
    run_id = ops("POST", loop_id, "run", at=T0 + s(5)).json()["run_id"]
    with time_machine.travel(T0 + s(6), tick=False):
        deliver_run(run_id, now=T0 + s(6))
    assert (detail(ops, loop_id)["runs_delivered"], detail(ops, loop_id)["state"]) == (0, "scheduled")


def test_ends_at_across_a_dst_change_ends_on_the_local_occurrence(make, ops, api):
    # New York leaves DST on 2025-11-02: 09:00 local is 13:00 UTC before, 14:00 UTC after.
    created = datetime(2025, 10, 31, 12, 0, tzinfo=UTC)
    loop_id = make({"kind": "cron", "expr": "0 9 * * *", "tz": "America/New_York"}, at=created)["loop_id"]
    end = datetime(2025, 11, 3, 14, 0, tzinfo=UTC)  # 09:00 EST on 3 November: the last occurrence
    patch(ops, loop_id, {"ends_at": to_ms(end)}, at=created)
    expected = [datetime(2025, 10, 31, 13, tzinfo=UTC), datetime(2025, 11, 1, 13, tzinfo=UTC)]
    expected += [datetime(2025, 11, 2, 14, tzinfo=UTC), end]
    assert upcoming(api, loop_id, created) == [to_ms(moment) for moment in expected]
    for moment in expected:
        assert fire_due(loop_id, moment).scheduled_at == moment
    ended = detail(ops, loop_id, at=end)
    assert (ended["state"], ended["runs_delivered"]) == ("completed", 4)
    assert nothing_due(datetime(2025, 11, 4, 14, tzinfo=UTC))
