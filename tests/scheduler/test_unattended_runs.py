"""contract §14 at the claim: overlap `skip`, and the cap on fresh agents running at once.

The embedded host reports no turn ends itself, so here a run of a `new` loop runs while it is open
(claimed, being delivered); the DSH tests cover runs whose turn is still going after delivery.
"""

from __future__ import annotations

import threading
from datetime import datetime

import pytest
import time_machine
from django.db import close_old_connections, connection

from loops.counters import read_counters
from loops.events import Actor
from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.services.lifecycle import loop_run_now
from scheduler.claims import claim_due
from scheduler.clock import CAPACITY_POLL, Clock
from scheduler.delivery import deliver_runs
from scheduler.outcomes import record_outcome
from tests.conftest import T0, create_loop, every, s


@pytest.fixture(autouse=True)
def unattended(settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0
    settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS = 2


def claim(now: datetime) -> list[str]:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now)


def new_loop(seconds: int = 10, *, overlap: str = "allow", at: datetime = T0) -> Loop:
    loop = create_loop(every(seconds), target="new", at=at)
    Loop.objects.filter(loop_id=loop.loop_id).update(overlap=overlap)
    return loop


def runs_of(loop: Loop) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop.loop_id).order_by("scheduled_at"))


# --- overlap ----------------------------------------------------------------------------------------------
# A loop is not claimed while its own occurrence is open (state running): overlap is about the turn
# that goes on after the delivery, which a host that reports turn ends (DSH) tells. The claim only
# asks that host's capability, so these switch to it once the runs are delivered.


def delivered(loop: Loop, at: datetime) -> LoopRun:
    [run_id] = claim(at)
    with time_machine.travel(at, tick=False):
        deliver_runs([run_id])
    run = LoopRun.objects.get(run_id=run_id)
    assert run.status == RunStatus.DELIVERED and run.loop_id == loop.loop_id
    return run


@pytest.fixture
def turn_ends_reported(settings):
    """From now on the host is one that reports turn ends: a delivered run runs until its outcome."""

    def switch():
        settings.DSHLOOP_HOST = "dsh"
        settings.DSHLOOP_DSH_URL = "http://127.0.0.1:9"  # never called by a claim

    return switch


def test_skip_records_an_occurrence_while_the_last_turn_runs_and_the_next_one_goes_ahead(db, turn_ends_reported):
    loop = new_loop(overlap="skip")
    first = delivered(loop, T0 + s(10))
    turn_ends_reported()
    assert claim(T0 + s(20)) == []
    skipped = runs_of(loop)[1]
    assert skipped.status == RunStatus.SKIPPED and skipped.finished_at is not None
    assert skipped.error.startswith(
        f"Skipped (overlap): the previous run {first.run_id} in session {first.target_session_id}: "
        "its turn is still running."
    )
    assert "next occurrence tries again" in skipped.error
    assert Loop.objects.get(loop_id=loop.loop_id).state == LoopState.SCHEDULED
    assert read_counters()["skipped_overlap"] == 1

    record_outcome(run_id=first.run_id, status="succeeded", now=T0 + s(25))
    [third] = claim(T0 + s(30))
    assert [run.status for run in runs_of(loop)] == ["delivered", "skipped", "claimed"]


def test_a_turn_past_the_run_timeout_no_longer_holds_the_loop_back(db, turn_ends_reported, settings):
    settings.DSHLOOP_RUN_TIMEOUT_SECONDS = 15
    loop = new_loop(overlap="skip")
    delivered(loop, T0 + s(10))
    turn_ends_reported()
    assert claim(T0 + s(20)) == []
    assert len(claim(T0 + s(30))) == 1  # 20 s after that delivery: the timeout's to deal with


def test_allow_starts_another_run_while_the_last_turn_runs(db, turn_ends_reported):
    loop = new_loop(overlap="allow")
    delivered(loop, T0 + s(10))
    turn_ends_reported()
    assert len(claim(T0 + s(20))) == 1


# --- capacity ---------------------------------------------------------------------------------------------


def test_occurrences_over_the_cap_wait_in_deadline_order_and_go_when_a_slot_frees(db):
    loops = [new_loop(60, at=T0 + s(index)) for index in range(4)]  # due at T0+60 s .. T0+63 s
    claimed = claim(T0 + s(70))
    assert len(claimed) == 2 and claimed.waiting == 2
    assert {run.loop_id for run in LoopRun.objects.all()} == {loops[0].loop_id, loops[1].loop_id}
    # The waiting loops keep their deadline (no run, nothing skipped).
    waiting = Loop.objects.filter(loop_id__in=[loops[2].loop_id, loops[3].loop_id]).order_by("next_at")
    assert [(loop.state, loop.next_at) for loop in waiting] == [("scheduled", T0 + s(62)), ("scheduled", T0 + s(63))]
    assert claim(T0 + s(71)) == []  # still full

    with time_machine.travel(T0 + s(72), tick=False):
        deliver_runs([claimed[0]])  # its turn is over for this host: one slot frees
    [next_run] = claim(T0 + s(73))
    assert LoopRun.objects.get(run_id=next_run).loop_id == loops[2].loop_id  # the earliest deadline first
    assert LoopRun.objects.get(run_id=next_run).scheduled_at == T0 + s(62)  # delivered late, not skipped


def test_loops_into_sessions_are_not_held_back_by_the_cap(db, make_session):
    make_session("ses_target", status="idle")
    for index in range(3):
        new_loop(60, at=T0 + s(index))
    create_loop(every(60), target="ses_target", at=T0)
    claimed = claim(T0 + s(70))
    assert len(claimed) == 3 and claimed.waiting == 1
    assert LoopRun.objects.filter(target="ses_target").count() == 1


def test_a_wait_past_the_misfire_grace_is_skipped_naming_capacity(db, settings):
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = 30
    settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS = 1
    first, second = new_loop(600, at=T0), new_loop(600, at=T0 + s(1))
    assert len(claim(T0 + s(600))) == 1
    assert claim(T0 + s(620)).waiting == 1  # 19 s late: within the grace, it waits
    assert claim(T0 + s(640)) == []  # 39 s late
    [skipped] = runs_of(second)
    assert skipped.status == RunStatus.SKIPPED and skipped.error.startswith(
        "Skipped (capacity): it waited 39 s for a free slot while 1 fresh session was running"
    )
    assert "DSHLOOP_MAX_CONCURRENT_NEW_RUNS" in skipped.error
    assert Loop.objects.get(loop_id=second.loop_id).next_at == T0 + s(1201)  # on with its next occurrence
    assert read_counters()["skipped_capacity"] == 1
    assert runs_of(first)[0].status == RunStatus.CLAIMED


@pytest.mark.parametrize(("late", "words"), [(5.3, "5.3 s"), (5.001, "5.1 s"), (64.2, "1 min 5 s")])
def test_a_capacity_skip_says_how_long_it_waited_never_less_than_the_grace(db, settings, late, words):
    """The clock looks for a slot every second, so the skip comes a fraction of a second after the
    grace: the wait is shown rounded up, and said to exceed the grace, never to equal it."""
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = 5 if late < 60 else 64
    settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS = 1
    new_loop(600, at=T0)
    waiting = new_loop(600, at=T0 + s(1))
    assert len(claim(T0 + s(600))) == 1
    assert claim(T0 + s(601)).waiting == 1
    assert claim(T0 + s(601 + late)) == []
    [skipped] = runs_of(waiting)
    assert skipped.error == (
        f"Skipped (capacity): it waited {words} for a free slot while 1 fresh session was running "
        "(DSHLOOP_MAX_CONCURRENT_NEW_RUNS); the wait exceeded the misfire grace of "
        f"{settings.DSHLOOP_MISFIRE_GRACE_SECONDS} s (DSHLOOP_MISFIRE_GRACE_SECONDS), so the loop goes on with its "
        "next occurrence."
    )


def test_a_manual_run_counts_against_the_cap(db):
    loop, _, _ = (new_loop(600, at=T0 + s(index)) for index in range(3))
    with time_machine.travel(T0 + s(5), tick=False):
        loop_run_now(loop_id=loop.loop_id, actor=Actor("user", "ops"))
    claimed = claim(T0 + s(602))  # two due, one slot left
    assert len(claimed) == 1 and claimed.waiting == 1


def test_the_clock_polls_for_a_slot_rather_than_spinning(db):
    for index in range(3):
        new_loop(60, at=T0 + s(index))
    clock = Clock(instance_id="test-clock")
    with time_machine.travel(T0 + s(70), tick=False):
        delay = clock.tick()
        assert 0 < delay <= CAPACITY_POLL
        runs = LoopRun.objects.count()
        assert clock.tick() > 0 and LoopRun.objects.count() == runs == 2


@pytest.mark.django_db(transaction=True)
def test_two_schedulers_claiming_at_once_never_pass_the_cap(settings):
    """PostgreSQL: each claim locks disjoint loop rows (SKIP LOCKED), so only the advisory lock on the
    count keeps two of them from both taking the last slots."""
    if connection.vendor != "postgresql":
        pytest.skip("needs concurrent claims (PostgreSQL); SQLite serializes writers")
    settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS = 3
    for index in range(12):
        new_loop(60, at=T0 + s(index % 4))
    start, results = threading.Barrier(4), []

    def scheduler():
        try:
            start.wait()
            results.append(len(claim_due(now=T0 + s(70), limit=3)))
        finally:
            close_old_connections()

    threads = [threading.Thread(target=scheduler) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(results) == 3 == LoopRun.objects.filter(status=RunStatus.CLAIMED).count()
