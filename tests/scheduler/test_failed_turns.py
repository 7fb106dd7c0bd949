"""Failures in plain sight (contract §15): a loop whose latest finished run's turn failed, was
cancelled or timed out reads `last_result: "failed"` with the reason, in loop_list and LoopDetail,
until a later run is delivered without failing; an outcome that comes late for an older run
leaves the newer run's result. Driven with claim_due and deliver_runs under a frozen clock."""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine

from loops.models import LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from scheduler.outcomes import end_turn
from tests.conftest import T0, every, fire_due, s


@pytest.fixture
def outcome(host_api):
    def post(run_id: str, body: dict, *, at: datetime):
        with time_machine.travel(at, tick=False):
            response = host_api.post(f"/api/host/runs/{run_id}/outcome", body)
        assert response.status_code == 200, response.content
        return response.json()

    return post


@pytest.fixture
def shown(api, ops):
    """(last_result, last_error) of a loop as loop_list and LoopDetail show it; both must agree."""

    def read(loop_id: str, *, at: datetime) -> tuple[str | None, str | None]:
        with time_machine.travel(at, tick=False):
            listed = api.tool("loop_list", {"session_id": "ses_target"}).json()["loops"]
        [view] = [loop for loop in listed if loop["loop_id"] == loop_id]
        detail = ops("GET", loop_id, at=at).json()
        pair = (view.get("last_result"), view.get("last_error"))
        assert (detail.get("last_result"), detail.get("last_error")) == pair
        return pair

    return read


def test_a_failed_turn_shows_failed_with_its_error_until_a_later_run_is_delivered(make, outcome, shown):
    loop_id = make(every(60))["loop_id"]
    first = fire_due(loop_id, T0 + s(60))
    assert shown(loop_id, at=T0 + s(61)) == ("delivered", None)
    error = "DSH ended the turn with an error (invalid_request_error): stub refuses"
    outcome(first.run_id, {"status": "failed", "error": error}, at=T0 + s(62))
    assert shown(loop_id, at=T0 + s(63)) == ("failed", error)

    # The next occurrence (after the backoff) is delivered: the loop reads delivered again, and
    # a succeeded turn leaves it so.
    second = fire_due(loop_id, T0 + s(120))
    assert second.run_id != first.run_id
    assert shown(loop_id, at=T0 + s(121)) == ("delivered", None)
    outcome(second.run_id, {"status": "succeeded", "summary": "ack"}, at=T0 + s(122))
    assert shown(loop_id, at=T0 + s(123)) == ("delivered", None)


def test_a_cancelled_turn_shows_failed_without_counting_towards_the_pause(make, outcome, shown, ops):
    loop_id = make(every(60))["loop_id"]
    run = fire_due(loop_id, T0 + s(60))
    outcome(run.run_id, {"status": "cancelled"}, at=T0 + s(62))
    assert shown(loop_id, at=T0 + s(63)) == ("failed", "The turn was cancelled before it finished.")
    # Someone's decision, not a broken loop (scheduler.failures.is_failure): no streak.
    assert ops("GET", loop_id, at=T0 + s(63)).json()["consecutive_failures"] == 0


def test_a_failed_turn_without_a_reason_says_so(make, outcome, shown):
    loop_id = make(every(60))["loop_id"]
    run = fire_due(loop_id, T0 + s(60))
    outcome(run.run_id, {"status": "failed"}, at=T0 + s(62))
    assert shown(loop_id, at=T0 + s(63)) == ("failed", "The turn ended in an error; the host gave no reason.")


def test_a_timed_out_turn_shows_failed_with_the_timeout(make, shown):
    loop_id = make(every(60))["loop_id"]
    run = fire_due(loop_id, T0 + s(60))
    error = "timed out after 1h (DSHLOOP_RUN_TIMEOUT_SECONDS): the turn was still running, so dshloop cancelled it."
    assert end_turn(run_id=run.run_id, error=error, cancel=lambda: None, timed_out=True, now=T0 + s(3700))
    assert shown(loop_id, at=T0 + s(3701)) == ("failed", error)


def test_a_late_outcome_of_an_older_run_leaves_the_newer_runs_result(make, outcome, shown):
    loop_id = make(every(60))["loop_id"]
    older = fire_due(loop_id, T0 + s(60))
    newer = fire_due(loop_id, T0 + s(120))
    outcome(older.run_id, {"status": "failed", "error": "the old turn broke"}, at=T0 + s(121))
    assert shown(loop_id, at=T0 + s(122)) == ("delivered", None)
    # And the other way round: the newer run failed, the older one's success comes later.
    outcome(newer.run_id, {"status": "cancelled", "error": "DSH aborted the turn (user)."}, at=T0 + s(123))
    assert shown(loop_id, at=T0 + s(124)) == ("failed", "DSH aborted the turn (user).")
    late = fire_due(loop_id, T0 + s(180))
    outcome(late.run_id, {"status": "failed", "error": "the latest turn broke"}, at=T0 + s(181))
    assert shown(loop_id, at=T0 + s(182)) == ("failed", "the latest turn broke")


def test_an_outcome_reported_before_the_delivery_is_recorded_shows_at_the_record(make, outcome, shown):
    loop_id = make(every(60))["loop_id"]
    with time_machine.travel(T0 + s(60), tick=False):
        [run_id] = claim_due(now=T0 + s(60))
    assert outcome(run_id, {"status": "failed", "error": "the turn broke"}, at=T0 + s(60))["status"] == "claimed"
    with time_machine.travel(T0 + s(60), tick=False):
        deliver_runs([run_id], now=T0 + s(60))
    assert LoopRun.objects.get(run_id=run_id).status == RunStatus.DELIVERED
    assert shown(loop_id, at=T0 + s(61)) == ("failed", "the turn broke")


def test_a_manual_runs_failed_turn_shows_like_its_delivery_does(make, outcome, shown, ops):
    # A manual run (run now) sets the loop's last result when it is delivered (scheduler.delivery):
    # its turn's outcome does too, but it counts towards no streak.
    loop_id = make(every(3600))["loop_id"]
    run_id = ops("POST", loop_id, "run", at=T0 + s(10)).json()["run_id"]
    with time_machine.travel(T0 + s(10), tick=False):
        deliver_runs([run_id], now=T0 + s(10))
    outcome(run_id, {"status": "failed", "error": "the operator's test broke"}, at=T0 + s(12))
    assert shown(loop_id, at=T0 + s(13)) == ("failed", "the operator's test broke")
    assert ops("GET", loop_id, at=T0 + s(13)).json()["consecutive_failures"] == 0
