"""A run's whole life (contract §10): turn outcomes reported by the host, failure backoff
and auto-pause. The scheduler's side is driven with claim_due and deliver_runs under a frozen
clock; the target "breaks" by disappearing from the embedded host."""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine

from core.timeutil import to_ms
from loops.models import Loop, LoopRun, LoopState, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from scheduler.failures import failure_backoff
from sessions_app.models import SessionHeader
from tests.conftest import T0, after, error_of, every, fire_due, s

MISSING = "Target session 'ses_target' no longer exists."


def break_target() -> None:
    SessionHeader.objects.filter(session_id="ses_target").delete()


def mend_target(make_session) -> None:
    make_session("ses_target", status="idle")


def loop_row(loop_id: str) -> Loop:
    return Loop.objects.get(loop_id=loop_id)


@pytest.fixture
def outcome(host_api):
    def post(run_id: str, body: dict, *, at: datetime | None = None):
        with time_machine.travel(at or T0 + s(3600), tick=False):
            return host_api.post(f"/api/host/runs/{run_id}/outcome", body)

    return post


# -- failure backoff and auto-pause ---------------------------------------------------------------


def test_failures_back_off_on_the_grid_then_pause_the_loop_with_the_reason(make, ops):
    loop_id = make(every(10))["loop_id"]
    break_target()
    at, attempts = T0 + s(10), []
    for failures in range(1, 5):
        fire_due(loop_id, at)
        run = LoopRun.objects.get(loop_id=loop_id, scheduled_at=at)  # the newest is the backoff's skip
        assert (run.status, run.error) == (RunStatus.FAILED, MISSING)
        attempts.append(at)
        loop = loop_row(loop_id)
        assert loop.consecutive_failures == failures
        # The next claim waits the backoff (30 s, 1 m, 5 m, 15 m), on the every-10 s grid.
        assert loop.next_at == at + failure_backoff(failures)
        assert loop.state == LoopState.SCHEDULED
        with time_machine.travel(loop.next_at - s(0.001), tick=False):
            assert claim_due(now=loop.next_at - s(0.001)) == []
        at = loop.next_at
    assert [b - a for a, b in zip(attempts, attempts[1:], strict=False)] == [s(30), s(60), s(300)]

    fire_due(loop_id, at)  # the fifth failure in a row
    loop = loop_row(loop_id)
    assert (loop.state, loop.next_at, loop.paused_at) == (LoopState.PAUSED, None, at)
    assert loop.pause_reason == f"auto: {MISSING}"
    detail = ops("GET", loop_id, at=at).json()
    assert (detail["state"], detail["pause_reason"], detail["consecutive_failures"]) == (
        "paused",
        f"auto: {MISSING}",
        5,
    )
    [event] = [e for e in ops("GET", loop_id, "events", at=at).json()["events"] if e["kind"] == "auto_paused"]
    assert event == {"at": to_ms(at), "kind": "auto_paused", "actor": {"kind": "scheduler"}, "revision": 1}
    with time_machine.travel(at + s(86400), tick=False):
        assert claim_due(now=at + s(86400)) == []


def test_a_success_in_between_resets_the_count_and_the_schedule(make, make_session):
    loop_id = make(every(10))["loop_id"]
    break_target()
    fire_due(loop_id, T0 + s(10))
    fire_due(loop_id, T0 + s(40))
    assert loop_row(loop_id).consecutive_failures == 2
    mend_target(make_session)
    run = fire_due(loop_id, T0 + s(100))
    assert run.status == RunStatus.DELIVERED
    loop = loop_row(loop_id)
    assert (loop.consecutive_failures, loop.next_at) == (0, T0 + s(110))  # back on its own schedule
    break_target()
    fire_due(loop_id, T0 + s(110))
    assert (loop_row(loop_id).consecutive_failures, loop_row(loop_id).next_at) == (1, T0 + s(140))


def test_the_backoff_never_brings_a_claim_earlier_than_the_schedule(make):
    loop_id = make(every(3600))["loop_id"]
    break_target()
    fire_due(loop_id, T0 + s(3600))
    loop = loop_row(loop_id)
    assert (loop.consecutive_failures, loop.next_at) == (1, T0 + s(7200))


def test_a_cron_loop_backs_off_to_its_next_occurrence_after_the_backoff(make):
    loop_id = make({"kind": "cron", "expr": "* * * * *"})["loop_id"]
    break_target()
    first = loop_row(loop_id).next_at
    fire_due(loop_id, first)
    fire_due(loop_id, first + s(60))  # the second failure waits 60 s: the very next minute
    fire_due(loop_id, first + s(120))  # the third waits 5 min
    assert loop_row(loop_id).next_at == first + s(120 + 300)


def test_resume_after_an_auto_pause_starts_a_fresh_count(make, ops, make_session, settings):
    settings.DSHLOOP_AUTO_PAUSE_AFTER = 2
    loop_id = make(every(10))["loop_id"]
    break_target()
    fire_due(loop_id, T0 + s(10))
    fire_due(loop_id, T0 + s(40))
    assert loop_row(loop_id).state == LoopState.PAUSED
    resumed = ops("POST", loop_id, "resume", at=T0 + s(1000)).json()
    assert (resumed["state"], resumed["consecutive_failures"], resumed["next_at"]) == (
        "scheduled",
        0,
        to_ms(T0 + s(1010)),
    )
    assert "pause_reason" not in resumed


def test_auto_pause_after_zero_never_pauses(make, settings):
    settings.DSHLOOP_AUTO_PAUSE_AFTER = 0
    loop_id = make(every(10))["loop_id"]
    break_target()
    at = T0 + s(10)
    for _ in range(7):
        fire_due(loop_id, at)
        at = loop_row(loop_id).next_at
    loop = loop_row(loop_id)
    assert (loop.state, loop.consecutive_failures) == (LoopState.SCHEDULED, 7)
    assert at - loop.last_run_at == s(3600)  # the last backoff step repeats


def test_manual_runs_neither_count_nor_reset_failures(make, ops, make_session):
    loop_id = make(every(3600))["loop_id"]
    break_target()
    fire_due(loop_id, T0 + s(3600))
    ops("POST", loop_id, "run", at=T0 + s(3700))
    with time_machine.travel(T0 + s(3700), tick=False):
        deliver_runs(list(LoopRun.objects.filter(manual=True).values_list("run_id", flat=True)), now=T0 + s(3700))
    assert LoopRun.objects.get(manual=True).status == RunStatus.FAILED
    assert loop_row(loop_id).consecutive_failures == 1
    mend_target(make_session)
    ops("POST", loop_id, "run", at=T0 + s(3800))
    with time_machine.travel(T0 + s(3800), tick=False):
        run_ids = list(LoopRun.objects.filter(manual=True, status="claimed").values_list("run_id", flat=True))
        deliver_runs(run_ids, now=T0 + s(3800))
    assert loop_row(loop_id).consecutive_failures == 1


def test_a_failing_one_shot_fails_as_before_and_is_not_paused(make):
    loop_id = make(after(10))["loop_id"]
    break_target()
    fire_due(loop_id, T0 + s(10))
    loop = loop_row(loop_id)
    assert (loop.state, loop.consecutive_failures, loop.pause_reason) == (LoopState.FAILED, 1, "")


# -- outcomes reported by the host ---------------------------------------------------------------


def test_an_outcome_is_recorded_once_and_shown_on_the_run_and_the_loop(make, outcome, api):
    loop_id = make(every(60))["loop_id"]
    run = fire_due(loop_id, T0 + s(60))
    report = {"status": "succeeded", "summary": "Deploy is green."}
    first = outcome(run.run_id, report, at=T0 + s(75))
    assert first.status_code == 200, first.content
    view = first.json()
    assert (view["status"], view["outcome"], view["summary"], view["outcome_at"]) == (
        "delivered",
        "succeeded",
        "Deploy is green.",
        to_ms(T0 + s(75)),
    )
    again = outcome(run.run_id, {"status": "succeeded", "summary": "Something else"}, at=T0 + s(90))
    assert again.status_code == 200 and again.json() == view  # idempotent: the first report stands
    conflict = outcome(run.run_id, {"status": "failed", "error": "boom"})
    assert conflict.status_code == 409 and error_of(conflict)["code"] == "outcome_recorded"
    with time_machine.travel(T0 + s(100), tick=False):
        [listed] = api.get(f"/api/loops/{loop_id}/runs").json()["runs"]
    assert listed == view
    loop = loop_row(loop_id)
    assert (loop.last_outcome, loop.last_summary) == ("succeeded", "Deploy is green.")


def test_outcome_errors(make, outcome, api, tools_token):
    loop_id = make(every(60))["loop_id"]
    run = fire_due(loop_id, T0 + s(60))
    missing = outcome("run_nope", {"status": "failed"})
    assert (missing.status_code, error_of(missing)["code"]) == (404, "not_found")
    for body in ({"status": "done"}, {}, {"status": "failed", "extra": 1}, {"status": "failed", "summary": "x" * 4001}):
        response = outcome(run.run_id, body)
        assert (response.status_code, error_of(response)["code"]) == (422, "invalid_input"), body
    # The host reports outcomes; an agent's tools token may not.
    response = api.post(f"/api/host/runs/{run.run_id}/outcome", {"status": "failed"})
    assert (response.status_code, error_of(response)["code"]) == (403, "forbidden")
    assert LoopRun.objects.get(run_id=run.run_id).outcome == ""


def test_a_skipped_run_takes_no_outcome(make, outcome):
    loop_id = make(every(60))["loop_id"]
    run = fire_due(loop_id, T0 + s(60))
    LoopRun.objects.filter(run_id=run.run_id).update(status=RunStatus.SKIPPED)
    response = outcome(run.run_id, {"status": "succeeded"})
    assert (response.status_code, error_of(response)["field"]) == (422, "run_id")


def test_failed_outcomes_count_as_failures_and_pause_the_loop(make, outcome, ops):
    loop_id = make(every(10))["loop_id"]
    at = T0 + s(10)
    for failures in range(1, 6):
        run = fire_due(loop_id, at)
        assert run.status == RunStatus.DELIVERED
        assert outcome(run.run_id, {"status": "failed", "error": "MISSING_CREDENTIAL"}, at=at + s(1)).status_code == 200
        loop = loop_row(loop_id)
        assert loop.consecutive_failures == failures
        if failures < 5:
            # The backoff counts from the report (at + 1 s), up to the every-10 s grid.
            not_before = at + s(1) + failure_backoff(failures)
            assert loop.next_at == not_before + s(9)
            at = loop.next_at
    assert (loop.state, loop.pause_reason) == (LoopState.PAUSED, "auto: MISSING_CREDENTIAL")
    assert [e["kind"] for e in ops("GET", loop_id, "events", at=at).json()["events"]][0] == "auto_paused"


def test_a_succeeded_or_cancelled_outcome_ends_the_streak(make, outcome):
    loop_id = make(every(10))["loop_id"]
    first = fire_due(loop_id, T0 + s(10))
    outcome(first.run_id, {"status": "failed"}, at=T0 + s(11))
    assert loop_row(loop_id).consecutive_failures == 1
    second = fire_due(loop_id, loop_row(loop_id).next_at)
    assert loop_row(loop_id).consecutive_failures == 0  # delivered: a success until told otherwise
    outcome(second.run_id, {"status": "failed"}, at=second.scheduled_at + s(1))
    assert loop_row(loop_id).consecutive_failures == 2
    third = fire_due(loop_id, loop_row(loop_id).next_at)
    outcome(third.run_id, {"status": "cancelled"}, at=third.scheduled_at + s(1))
    assert loop_row(loop_id).consecutive_failures == 0


def test_an_outcome_reported_before_the_delivery_is_recorded_is_kept(make, outcome):
    loop_id = make(every(10))["loop_id"]
    with time_machine.travel(T0 + s(10), tick=False):
        [run_id] = claim_due(now=T0 + s(10))
    early = outcome(run_id, {"status": "failed", "error": "the turn broke"}, at=T0 + s(10))
    assert early.status_code == 200 and early.json()["status"] == "claimed"
    with time_machine.travel(T0 + s(10), tick=False):
        deliver_runs([run_id], now=T0 + s(10))
    run = LoopRun.objects.get(run_id=run_id)
    assert (run.status, run.outcome, run.error) == (RunStatus.DELIVERED, "failed", "the turn broke")
    loop = loop_row(loop_id)
    assert (loop.consecutive_failures, loop.last_outcome, loop.next_at) == (1, "failed", T0 + s(40))


def test_an_older_runs_outcome_leaves_the_loop_row_to_the_newest(make, outcome):
    loop_id = make(every(10))["loop_id"]
    older = fire_due(loop_id, T0 + s(10))
    fire_due(loop_id, T0 + s(20))
    outcome(older.run_id, {"status": "succeeded", "summary": "old news"}, at=T0 + s(21))
    assert loop_row(loop_id).last_outcome == ""
    assert LoopRun.objects.get(run_id=older.run_id).summary == "old news"


def test_a_late_failed_outcome_after_a_resume_counts_from_the_resume(make, ops, outcome, make_session, settings):
    settings.DSHLOOP_AUTO_PAUSE_AFTER = 2
    loop_id = make(every(10))["loop_id"]
    break_target()
    fire_due(loop_id, T0 + s(10))
    fire_due(loop_id, T0 + s(40))
    assert loop_row(loop_id).state == LoopState.PAUSED
    mend_target(make_session)
    ops("POST", loop_id, "resume", at=T0 + s(1000))
    run = fire_due(loop_id, T0 + s(1010))
    assert run.status == RunStatus.DELIVERED
    outcome(run.run_id, {"status": "failed", "error": "the turn broke"}, at=T0 + s(1011))
    loop = loop_row(loop_id)
    # One failure since the resume: backed off, not paused again by the failures before it.
    assert (loop.state, loop.consecutive_failures) == (LoopState.SCHEDULED, 1)
