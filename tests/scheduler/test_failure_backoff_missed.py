"""The occurrences a failing loop's backoff (and its auto-pause) passes over are counted: one
`skipped` run at the latest of them, whose `missed` counts them all, itself included, so that
every occurrence ends delivered, failed, skipped or counted in `missed` (docs/RELIABILITY.md,
invariant 1). Time frozen with time-machine; the host is the embedded one, or the reference host
over loopback HTTP answering 500."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine

from loops import counters
from loops.models import Loop, LoopRun, LoopState, RunStatus
from scheduler.claims import claim_due, recover_runs
from scheduler.delivery import deliver_run
from sessions_app.models import SessionHeader
from sessions_app.services import session_upsert
from tests.conftest import T0, create_loop, every, fire_due, s


def runs_of(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id).order_by("scheduled_at"))


def assert_every_occurrence_counted(loop: Loop, until: datetime) -> None:
    """Consecutive runs leave no gap their `missed` does not account for (a skipped run counts
    itself), and nothing before `until` is left behind."""
    period, previous = timedelta(seconds=loop.every_seconds), loop.created_at
    for run in runs_of(loop.loop_id):
        folded = run.missed if run.status == RunStatus.SKIPPED else run.missed + 1
        assert run.scheduled_at - previous == period * folded, (run.scheduled_at, previous, run.status, run.missed)
        previous = run.scheduled_at
    assert until - previous <= period


def test_the_occurrences_a_backoff_passes_over_are_counted(db, settings):
    settings.DSHLOOP_FAILURE_BACKOFF_SECONDS = [30, 60]
    session_upsert(session_id="ses_target", changes={"status": "idle"})
    loop = create_loop(every(10), target="ses_target", created_by="ses_target", at=T0)
    missed_before = counters.read_counters().get(counters.MISSED, 0)
    SessionHeader.objects.filter(session_id="ses_target").delete()  # every delivery fails at once

    fire_due(loop.loop_id, T0 + s(10))  # failure 1: the next claim waits 30 s, at T0 + 40 s
    fire_due(loop.loop_id, T0 + s(40))  # failure 2: 60 s, at T0 + 100 s
    session_upsert(session_id="ses_target", changes={"status": "idle"})
    fire_due(loop.loop_id, T0 + s(100))

    runs = runs_of(loop.loop_id)
    assert [(run.scheduled_at - T0, run.status, run.missed) for run in runs] == [
        (s(10), RunStatus.FAILED, 0),
        (s(30), RunStatus.SKIPPED, 2),  # 20 and 30 s: passed over by the first backoff
        (s(40), RunStatus.FAILED, 0),
        (s(90), RunStatus.SKIPPED, 5),  # 50 … 90 s
        (s(100), RunStatus.DELIVERED, 0),
    ]
    assert "backs off for 30 s after 1 failure" in runs[1].error and "counted in missed" in runs[1].error
    assert_every_occurrence_counted(loop, T0 + s(100))
    assert counters.read_counters().get(counters.MISSED, 0) - missed_before == 7


def test_the_occurrences_due_when_the_loop_pauses_itself_are_counted(db, settings):
    settings.DSHLOOP_FAILURE_BACKOFF_SECONDS, settings.DSHLOOP_AUTO_PAUSE_AFTER = [10], 1
    session_upsert(session_id="ses_target", changes={"status": "idle"})
    loop = create_loop(every(10), target="ses_target", created_by="ses_target", at=T0)
    SessionHeader.objects.filter(session_id="ses_target").delete()
    with time_machine.travel(T0 + s(10), tick=False):
        (run_id,) = claim_due(now=T0 + s(10))
    # Its delivery is recorded 35 s late (a slow host): 20, 30 and 40 s fell due meanwhile.
    with time_machine.travel(T0 + s(45), tick=False):
        assert deliver_run(run_id) is True

    assert Loop.objects.get(loop_id=loop.loop_id).state == LoopState.PAUSED
    [failed, skipped] = runs_of(loop.loop_id)
    assert (skipped.scheduled_at, skipped.status, skipped.missed) == (T0 + s(40), RunStatus.SKIPPED, 3)
    assert "paused after 1 failure" in skipped.error
    assert_every_occurrence_counted(loop, T0 + s(45))


@pytest.mark.http_host
def test_a_run_given_up_late_backs_off_from_then_and_counts_what_fell_due_meanwhile(api, host, refhost):
    """Six attempts of a host answering 500 take 31 s of a loop due every 10 s: the backoff after
    the give-up passes over what fell due during them too."""
    host.put_session("ses_target", status="idle")
    loop = create_loop(every(10), target="ses_target", created_by="ses_caller", at=T0)
    refhost.fault = "error500"
    now = T0 + s(10)
    with time_machine.travel(now, tick=False):
        (run_id,) = claim_due(now=now)
    while True:
        with time_machine.travel(now, tick=False):
            assert deliver_run(run_id) is True
        run = LoopRun.objects.get(run_id=run_id)
        if run.status != RunStatus.CLAIMED:
            break
        now = run.retry_at
        with time_machine.travel(now, tick=False):
            assert recover_runs(now=now) == [run_id]
    assert run.status == RunStatus.FAILED and now == T0 + s(41)
    refhost.fault = "ok"
    next_at = Loop.objects.get(loop_id=loop.loop_id).next_at
    assert next_at == T0 + s(80)  # the first occurrence at or after the 30 s backoff from 41 s
    fire_due(loop.loop_id, next_at)

    assert [(r.scheduled_at - T0, r.status, r.missed) for r in runs_of(loop.loop_id)] == [
        (s(10), RunStatus.FAILED, 0),
        (s(70), RunStatus.SKIPPED, 6),  # 20 … 70 s
        (s(80), RunStatus.DELIVERED, 0),
    ]
    assert_every_occurrence_counted(loop, next_at)
