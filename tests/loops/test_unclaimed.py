"""Due occurrences that no claim took, when their loop is paused, given a new schedule or target, or
deleted (loops.services.unclaimed): each ends as a skipped run that says why, counted in `missed`
(contract §10, §14), as a wait past the misfire grace is — never nothing.

The loop that waits is a `new` loop over DSHLOOP_MAX_CONCURRENT_NEW_RUNS: the one slot is held by
another loop's run, open on the embedded host (where a fresh agent runs while its run is open).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

import pytest
import time_machine
from django.db import connection, connections, transaction

from loops.counters import read_counters
from loops.events import Actor
from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.services.lifecycle import loop_delete, loop_pause, loop_resume
from scheduler.claims import Claimed, claim_due
from scheduler.delivery import deliver_runs
from tests.conftest import T0, after, captured_log, create_loop, every, s
from tests.processes import wait_for

OPERATOR = Actor("user", "ada")
DUE = T0 + s(601)  # the waiting loop's first occurrence; then every 10 s
CHANGED = T0 + s(657)  # 56 s later: six occurrences due (601 … 651), none claimed
LATEST = T0 + s(651)


@pytest.fixture(autouse=True)
def one_slot(settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0
    settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS = 1


def claim(now: datetime) -> Claimed:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now)


def holding_the_slot() -> str:
    """A `new` loop's run claimed at T0+600 s and still open: it holds the only slot."""
    create_loop(every(600), target="new", at=T0)
    [run_id] = claim(T0 + s(600))
    return run_id


def waiting_loop(schedule: dict | None = None) -> Loop:
    """A `new` loop due since DUE that has waited for a slot, its deadline kept, nothing recorded."""
    loop = create_loop(schedule or every(10), target="new", at=T0 + s(591))
    for moment in (DUE, T0 + s(620), T0 + s(640)):
        claimed = claim(moment)
        assert (list(claimed), claimed.waiting) == ([], 1)
    assert Loop.objects.filter(loop_id=loop.loop_id, state=LoopState.SCHEDULED, next_at=DUE).exists()
    assert not LoopRun.objects.filter(loop_id=loop.loop_id).exists()
    return loop


@pytest.fixture
def slot_taken(db) -> str:
    return holding_the_slot()


@pytest.fixture
def waiting(slot_taken) -> Loop:
    return waiting_loop()


def capacity_skip(change: str) -> str:
    return (
        "Skipped (capacity): it waited 56 s for a free slot while 1 fresh session was running "
        f"(DSHLOOP_MAX_CONCURRENT_NEW_RUNS), and the loop was {change} before one freed; "
        "this occurrence and the 5 before it were never delivered, counted in missed."
    )


def the_skipped_run(loop: Loop, error: str) -> LoopRun:
    """The one run that accounts for the six occurrences: at the latest, all six in `missed`."""
    [run] = LoopRun.objects.filter(loop_id=loop.loop_id)
    assert (run.status, run.scheduled_at, run.occurrence_key, run.missed) == (
        RunStatus.SKIPPED,
        LATEST,
        f"{loop.loop_id}@{int(LATEST.timestamp() * 1000)}",
        6,
    )
    assert (run.error, run.finished_at, run.attempt, run.target) == (error, CHANGED, 0, "new")
    return run


def counted(*, capacity: int = 1) -> dict[str, int]:
    totals = read_counters()
    assert {name: totals.get(name, 0) for name in ("occurrences_skipped", "missed", "skipped_capacity")} == {
        "occurrences_skipped": 1,
        "missed": 6,
        "skipped_capacity": capacity,
    }
    return totals


def test_a_pause_while_waiting_for_a_slot_records_the_occurrences_it_waited_on(waiting, slot_taken, ops, caplog):
    with captured_log(caplog, "dshloop.loops"):
        paused = ops("POST", waiting.loop_id, "pause", at=CHANGED)

    assert paused.status_code == 200, paused.content
    assert (paused.json()["state"], "next_at" in paused.json()) == ("paused", False)
    run = the_skipped_run(waiting, capacity_skip("paused"))
    assert run.revision == 1 and run.prompt == "Check the deploy"
    counted()
    [line] = [record for record in caplog.records if record.name == "dshloop.loops"]
    assert line.levelno == logging.WARNING
    assert line.occurrence["run_id"] == run.run_id and line.occurrence["outcome"] == "skipped"
    assert line.occurrence["missed"] == 6

    # Resumed once the slot freed: the next occurrence is delivered, and nothing is counted twice.
    with time_machine.travel(T0 + s(690), tick=False):
        deliver_runs([slot_taken])
        resumed = loop_resume(loop_id=waiting.loop_id, actor=OPERATOR)
    assert resumed.next_at == T0 + s(691)  # strictly after now (contract §9 resume)
    [next_run] = claim(T0 + s(691))
    assert LoopRun.objects.get(run_id=next_run).missed == 0
    assert read_counters()["missed"] == 6


@pytest.mark.parametrize(
    ("body", "change"),
    [
        ({"schedule": every(20), "prompt": "Check it twice"}, "given a new schedule"),
        ({"session_id": "ses_target"}, "given a new target"),
    ],
)
def test_a_new_schedule_or_target_while_waiting_records_what_the_old_grid_had_due(
    waiting, ops, make_session, body, change
):
    make_session("ses_target", status="idle")

    edited = ops("PATCH", waiting.loop_id, body=body, at=CHANGED)

    assert edited.status_code == 200, edited.content
    assert edited.json()["revision"] == 2
    run = the_skipped_run(waiting, capacity_skip(change))
    # The occurrences were the old revision's: its prompt, not the one this edit gave the loop.
    assert (run.revision, run.prompt) == (1, "Check the deploy")
    counted()
    # The new grid starts from the edit, as every new schedule or target does.
    period = 20 if "schedule" in body else 10
    assert Loop.objects.get(loop_id=waiting.loop_id).next_at == CHANGED + s(period)


def test_a_delete_while_waiting_records_the_occurrences_in_a_run_that_outlives_the_loop(waiting, caplog):
    with captured_log(caplog, "dshloop.loops"):
        loop_delete(loop_id=waiting.loop_id, actor=OPERATOR, now=CHANGED)

    assert not Loop.objects.filter(loop_id=waiting.loop_id).exists()
    run = the_skipped_run(waiting, capacity_skip("deleted"))
    assert run.prompt == "Check the deploy"  # stored from the loop's row before it went
    counted()
    assert [record.occurrence["run_id"] for record in caplog.records if record.name == "dshloop.loops"] == [run.run_id]


def test_an_edit_that_keeps_the_grid_keeps_the_loop_waiting_and_the_claim_catches_up(waiting, slot_taken, ops):
    """A new prompt or name does not move next_at: the occurrences are still the claim's to count."""
    assert ops("PATCH", waiting.loop_id, body={"prompt": "Check it twice"}, at=CHANGED).status_code == 200
    assert not LoopRun.objects.filter(loop_id=waiting.loop_id).exists()

    with time_machine.travel(CHANGED, tick=False):
        deliver_runs([slot_taken])
    [run_id] = claim(CHANGED)
    run = LoopRun.objects.get(run_id=run_id)
    assert (run.scheduled_at, run.missed, run.revision, run.prompt) == (LATEST, 5, 2, "Check it twice")


def test_a_paused_one_shot_keeps_its_occurrence_for_its_resume(slot_taken):
    loop = waiting_loop(after(10))

    with time_machine.travel(CHANGED, tick=False):
        loop_pause(loop_id=loop.loop_id, actor=OPERATOR)
        assert not LoopRun.objects.filter(loop_id=loop.loop_id).exists()  # not lost: resume fires it
        deliver_runs([slot_taken])
        loop_resume(loop_id=loop.loop_id, actor=OPERATOR)
    [run_id] = claim(CHANGED)
    assert LoopRun.objects.get(run_id=run_id).loop_id == loop.loop_id


def test_a_loop_no_scheduler_reached_says_so_and_is_not_counted_as_capacity(db, ops, make_session):
    """With no scheduler running, an ordinary loop is due and not claimed: the same accounting."""
    make_session("ses_target", status="idle")
    loop = create_loop(every(10), target="ses_target", at=T0 + s(591))

    assert ops("POST", loop.loop_id, "pause", at=CHANGED).status_code == 200

    [run] = LoopRun.objects.filter(loop_id=loop.loop_id)
    assert (run.status, run.scheduled_at, run.missed, run.target) == (RunStatus.SKIPPED, LATEST, 6, "ses_target")
    assert run.error == (
        "Not delivered: it was due 56 s ago, and the loop was paused before a scheduler claimed it; "
        "this occurrence and the 5 before it were never delivered, counted in missed."
    )
    counted(capacity=0)


def test_occurrences_due_behind_a_run_in_flight_are_recorded_by_a_pause(db, make_session):
    """One run in flight per loop: a loop whose run is still open is not claimed again, its next
    occurrences wait for that run (and are caught up after it), unless it is paused first."""
    make_session("ses_target", status="idle")
    loop = create_loop(every(10), target="ses_target", at=T0 + s(591))
    [in_flight] = claim(DUE)  # claimed, not yet delivered: the loop is running, next_at T0+611 s

    with time_machine.travel(CHANGED, tick=False):
        loop_pause(loop_id=loop.loop_id, actor=OPERATOR)

    skipped = LoopRun.objects.exclude(run_id=in_flight).get(loop_id=loop.loop_id)
    assert (skipped.status, skipped.scheduled_at, skipped.missed) == (RunStatus.SKIPPED, LATEST, 5)
    assert skipped.error == (
        "Not delivered: it waited 46 s for the loop's run in flight to finish, and the loop was paused first; "
        "this occurrence and the 4 before it were never delivered, counted in missed."
    )


def test_a_loop_claimed_before_its_pause_is_not_recorded_twice(slot_taken):
    """The claim took the occurrence first: the pause finds nothing due, and its delivery skips the
    run (the loop was paused before it started), so the occurrence has exactly one run."""
    loop = waiting_loop()
    with time_machine.travel(CHANGED, tick=False):
        deliver_runs([slot_taken])
    [run_id] = claim(CHANGED)

    with time_machine.travel(CHANGED, tick=False):
        loop_pause(loop_id=loop.loop_id, actor=OPERATOR)
        deliver_runs([run_id])

    [run] = LoopRun.objects.filter(loop_id=loop.loop_id)
    assert (run.run_id, run.status, run.scheduled_at, run.missed) == (run_id, RunStatus.SKIPPED, LATEST, 5)


# --- PostgreSQL: a pause that waits for a claim holding the loop's row ---------------------------------


def waiting_for_a_lock(kind: str) -> bool:
    """Whether another backend of this database waits for a lock of this kind (advisory, tuple, …)."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND wait_event_type = 'Lock' AND wait_event = %s",
            [kind],
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_a_pause_that_waited_for_the_claim_still_records_the_wait():
    """PostgreSQL. A claim locks the due loops' rows, then counts the slots under an advisory lock;
    here a test transaction holds that lock, so the claim stops with the waiting loop's row locked.
    A pause then waits for the row. The claim finds no free slot and commits leaving the loop due;
    only then does the pause read it, and it records what the loop waited on."""
    if connection.vendor != "postgresql":
        pytest.skip("needs row and advisory locks (PostgreSQL); SQLite serializes writers")
    holding_the_slot()
    loop = waiting_loop()
    release, errors, claimed = threading.Event(), [], []

    def in_thread(work):
        def run():
            try:
                work()
            except Exception as exc:
                errors.append(exc)
            finally:
                connection.close()  # this thread's own: the test database is dropped after the test

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def hold_the_count():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["dshloop-new-run-capacity"])
            held.set()
            release.wait(30)

    held = threading.Event()
    holder = in_thread(hold_the_count)
    assert held.wait(10)
    claimer = in_thread(lambda: claimed.append(claim_due(now=CHANGED)))
    # The claim holds the loop's row, waiting to count the slots.
    wait_for(lambda: waiting_for_a_lock("advisory"), timeout=10, message="the claim to wait for the count")
    pauser = in_thread(lambda: loop_pause(loop_id=loop.loop_id, actor=OPERATOR, now=CHANGED))
    wait_for(
        lambda: waiting_for_a_lock("transactionid") or waiting_for_a_lock("tuple"),
        timeout=10,
        message="the pause to wait for the loop's row",
    )
    release.set()
    for thread in (holder, claimer, pauser):
        thread.join(30)

    assert errors == []
    assert [(list(c), c.waiting) for c in claimed] == [([], 1)]
    assert Loop.objects.get(loop_id=loop.loop_id).state == LoopState.PAUSED
    the_skipped_run(loop, capacity_skip("paused"))
    counted()
