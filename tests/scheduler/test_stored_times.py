"""Deadlines stored in another form on SQLite (scheduler.stored_times): repaired off the clock's path.

Rows are written with raw SQL, as a hand edit or another tool would, in forms Django does not
write: ISO with "T" and "Z", an offset, an integer, garbage. The claim and the clock's wakeup see
only deadlines in Django's form; housekeeping's repair (and `runloops` at start-up) brings each row into Django's form
or sets it aside, and from then on the loop is claimed in truth. On PostgreSQL the column is typed,
so only the no-op of the sweep is checked there.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import connection
from django.test import Client

from loops.models import UNREADABLE_REASON, Loop, LoopEvent, LoopRun, LoopState, RunStatus, SchedulerHeartbeat
from scheduler.claims import claim_due, next_wakeup
from scheduler.housekeeping import SettleJob
from scheduler.stored_times import Repairs, django_form, parse_stored, settle_step
from tests.conftest import T0, create_loop, every, s

pytestmark = pytest.mark.django_db

sqlite_only = pytest.mark.skipif("connection.vendor != 'sqlite'", reason="only SQLite stores deadlines as text")


def write_next_at(loop: Loop, value) -> None:
    """Store `value` as the loop's next_at exactly, bypassing Django's adaptation."""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Loop._meta.db_table} SET next_at = %s WHERE loop_id = %s", [value, loop.loop_id])


def stored_next_at(loop: Loop):
    with connection.cursor() as cursor:
        # As text: sqlite3 would convert a column declared "datetime" on the way out.
        cursor.execute(f"SELECT CAST(next_at AS text) FROM {Loop._meta.db_table} WHERE loop_id = %s", [loop.loop_id])
        return cursor.fetchone()[0]


def claim(now: datetime, **kwargs) -> list[str]:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now, **kwargs)


@pytest.fixture
def loops(make_session):
    make_session("ses_a", status="idle")

    def make(count: int = 1) -> list[Loop]:
        return [create_loop(every(60), target="ses_a", at=T0) for _ in range(count)]

    return make


@pytest.mark.parametrize(
    ("raw", "moment"),
    [
        ("2025-06-02T10:00:30Z", datetime(2025, 6, 2, 10, 0, 30, tzinfo=UTC)),
        ("2025-06-02 12:00:30+02:00", datetime(2025, 6, 2, 10, 0, 30, tzinfo=UTC)),
        ("2025-06-02 10:00:30.5", datetime(2025, 6, 2, 10, 0, 30, 500000, tzinfo=UTC)),
        ("2025-06-02", datetime(2025, 6, 2, tzinfo=UTC)),
        ("  2025-06-02 10:00:30  ", datetime(2025, 6, 2, 10, 0, 30, tzinfo=UTC)),
    ],
)
def test_readable_forms_name_their_moment_in_utc(raw, moment):
    assert parse_stored(raw) == moment


@pytest.mark.parametrize("raw", [1748858400, 17.5, "soon", "2025-13-45 99:99:99", "", b"\x00", None])
def test_what_names_no_moment_parses_to_none(raw):
    assert parse_stored(raw) is None


@sqlite_only
@pytest.mark.parametrize("raw", ["2025-06-02 10:01:00Z", "2025-06-02 10:01:00+00:00", "2025-06-02 10:01:00.000"])
def test_a_due_deadline_in_another_form_is_repaired_then_claimed_once_in_djangos_form(loops, raw):
    """The claim reads only Django's form (its text order is time order); the repair brings the
    row into it, and the claim's compare-and-swap then matches it."""
    [loop] = loops()
    write_next_at(loop, raw)
    assert claim(T0 + s(61)) == []  # not yet repaired: left to the repair, not read by the claim
    assert stored_next_at(loop) == raw
    settle_step(now=T0 + s(61))
    [run_id] = claim(T0 + s(61))
    run = LoopRun.objects.get(run_id=run_id)
    assert run.scheduled_at == T0 + s(60)
    assert stored_next_at(loop) == django_form(T0 + s(120))  # advanced, in Django's form
    assert claim(T0 + s(62)) == []


@sqlite_only
def test_a_readable_deadline_not_due_in_truth_is_rewritten_and_not_claimed(loops):
    [loop] = loops()
    # By text it is due at T0 + 61 s ("2025-06-02 10…" < "2025-06-02 10:01:01"); in truth 12:01 UTC.
    write_next_at(loop, "2025-06-02 10:01:00-02:00")
    assert claim(T0 + s(61)) == []
    settle_step(now=T0 + s(61))
    assert claim(T0 + s(61)) == []
    assert stored_next_at(loop) == django_form(datetime(2025, 6, 2, 12, 1, tzinfo=UTC))
    assert Loop.objects.get(pk=loop.pk).state == LoopState.SCHEDULED


@sqlite_only
def test_rows_repaired_at_the_head_of_the_queue_do_not_hold_up_a_due_loop(loops):
    """More rows than a claim batch sort before the due loop as text (integers sort before every
    text; an offset west of UTC reads earlier than its moment): once housekeeping's pass has run,
    the first claim takes the due loop."""
    *bad, good = loops(7)
    for loop in bad[:3]:
        write_next_at(loop, 1748858400)
    for loop in bad[3:]:
        write_next_at(loop, "2025-06-02 09:00:00-12:00")  # due to text; 21:00 UTC in truth
    assert settle_step(now=T0 + s(61)) is False
    assert [LoopRun.objects.get(run_id=run_id).loop_id for run_id in claim(T0 + s(61), limit=5)] == [good.loop_id]
    assert {stored_next_at(loop) for loop in bad[3:]} == {django_form(datetime(2025, 6, 2, 21, tzinfo=UTC))}


@sqlite_only
def test_a_row_due_only_as_text_is_not_claimed_before_its_repair(loops):
    """Between a hand edit and housekeeping's next pass, the claim reads the row as Django reads it
    and leaves a deadline that is not due in truth alone."""
    [loop] = loops()
    write_next_at(loop, "2025-06-02 09:00:00-12:00")  # due to text; 21:00 UTC in truth
    assert claim(T0 + s(61)) == []
    assert stored_next_at(loop) == "2025-06-02 09:00:00-12:00"
    assert Loop.objects.get(pk=loop.pk).state == LoopState.SCHEDULED


@sqlite_only
@pytest.mark.parametrize("raw", ["2025-02-30 10:00:00", 1748858400, "2025-06-02 09:59:00+00:00"])
def test_a_row_written_by_hand_before_its_repair_neither_stops_nor_wakes_the_clock(loops, raw):
    """Until housekeeping repairs it, the clock does not see it: Django's converter would raise on an
    impossible date or an integer (every claim and wakeup failing), and a readable row due to text
    would keep the clock claiming in a loop. The other loops are claimed and woken for as usual."""
    bad, good = loops(2)
    write_next_at(bad, raw)
    with time_machine.travel(T0, tick=False):
        assert next_wakeup() == T0 + s(60)  # the good loop's deadline, not the row written by hand
    claim(T0 + s(60), deliver=True)
    assert list(LoopRun.objects.values_list("loop_id", "status")) == [(good.loop_id, RunStatus.DELIVERED)]
    assert stored_next_at(bad) == str(raw)  # housekeeping's to repair
    assert not LoopRun.objects.filter(loop_id=bad.loop_id).exists()


@sqlite_only
def test_unreadable_rows_are_set_aside_each_with_its_event(loops):
    *bad, good = loops(6)
    for loop in bad:
        write_next_at(loop, 1748858400)  # an integer: below every text, so due to the query forever
    with time_machine.travel(T0 + s(61), tick=False):
        assert settle_step(now=T0 + s(61)) is False
    assert [LoopRun.objects.get(run_id=run_id).loop_id for run_id in claim(T0 + s(61))] == [good.loop_id]
    for loop in bad:
        loop.refresh_from_db()
        assert (loop.state, loop.next_at, loop.pause_reason) == (LoopState.PAUSED, None, UNREADABLE_REASON)
        assert loop.paused_at == T0 + s(61)
        events = LoopEvent.objects.filter(loop_id=loop.loop_id).order_by("id")
        assert list(events.values_list("kind", "actor_kind", "revision")) == [
            ("created", "session", 1),
            ("auto_paused", "scheduler", 1),
        ]
    assert not LoopRun.objects.filter(loop_id__in=[loop.loop_id for loop in bad]).exists()


@sqlite_only
@pytest.mark.parametrize("raw", ["2025-06-02 09:99:00", "2025-00-01 00:00:00", "2025-02-30 10:00:00"])
def test_an_impossible_date_in_djangos_form_is_set_aside_by_the_repair_with_a_summary(loops, raw, caplog):
    """Its text has Django's shape but names no moment (Django's converter cannot read it): the
    repair sets it aside, logs one line for the pass, and the clock then wakes for the real deadline
    and claims the rest."""
    *bad, good = loops(3)
    for loop in bad:
        write_next_at(loop, raw)
    job = SettleJob()
    with time_machine.travel(T0 + s(61), tick=False), caplog.at_level(logging.DEBUG, logger="dshloop.clock"):
        assert job.step() is False
        assert next_wakeup() == T0 + s(60)
    assert [LoopRun.objects.get(run_id=run_id).loop_id for run_id in claim(T0 + s(61))] == [good.loop_id]
    assert {Loop.objects.get(pk=loop.pk).pause_reason for loop in bad} == {UNREADABLE_REASON}
    assert LoopEvent.objects.filter(loop_id__in=[loop.loop_id for loop in bad], kind="auto_paused").count() == 2
    [summary] = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert summary.getMessage().startswith("deadline repair: 2 loop(s) had a next_at that is not a timestamp")


@sqlite_only
def test_the_clock_wakes_for_the_real_deadline_once_an_unreadable_one_is_set_aside(loops):
    bad, good = loops(2)
    write_next_at(bad, "soon")  # above every date as text
    write_next_at(good, "2025-06-02T10:01:00Z")
    with time_machine.travel(T0, tick=False):
        settle_step(now=T0)
        assert next_wakeup() == T0 + s(60)
    write_next_at(good, 1748858400)
    with time_machine.travel(T0, tick=False):
        settle_step(now=T0)
        assert next_wakeup() is None  # neither names a moment the clock can sleep to: its longest sleep


@sqlite_only
def test_runloops_start_up_check_repairs_every_row_before_the_clock_starts(loops, caplog):
    """What `runloops` runs before its clock (scheduler.housekeeping.startup_checks): every row, one
    summary line per kind."""
    from scheduler.housekeeping import startup_checks

    made = loops(5)
    for loop in made[:3]:
        write_next_at(loop, "2025-06-02T10:00:30Z")
    write_next_at(made[3], "2025-02-30 10:00:00")
    with time_machine.travel(T0, tick=False), caplog.at_level(logging.WARNING, logger="dshloop.clock"):
        startup_checks()
        assert next_wakeup() == T0 + s(30)
    assert {stored_next_at(loop) for loop in made[:3]} == {django_form(T0 + s(30))}
    assert Loop.objects.get(pk=made[3].pk).pause_reason == UNREADABLE_REASON
    assert [record.getMessage()[:60] for record in caplog.records] == [
        "deadline repair: 3 loop(s) had next_at stored in another for",
        "deadline repair: 1 loop(s) had a next_at that is not a times",
    ]


@sqlite_only
def test_the_start_up_repair_ends_between_batches_once_a_stop_is_asked(loops, monkeypatch):
    """runloops promises to stop within seconds: a stop asked during a long start-up repair ends it
    after the batch in hand, and the rest waits (unseen by the clock) for housekeeping."""
    import threading

    from scheduler import stored_times
    from scheduler.housekeeping import startup_checks

    monkeypatch.setattr(stored_times, "SETTLE_BATCH", 2)
    made = loops(5)
    for loop in made:
        write_next_at(loop, "2025-06-02T10:00:30Z")
    stop = threading.Event()
    stop.set()
    with time_machine.travel(T0, tick=False):
        startup_checks(stop)
    repaired = [loop for loop in made if stored_next_at(loop) == django_form(T0 + s(30))]
    assert len(repaired) == 2
    with time_machine.travel(T0, tick=False):
        startup_checks(threading.Event())
    assert {stored_next_at(loop) for loop in made} == {django_form(T0 + s(30))}


@sqlite_only
def test_the_sweep_settles_hidden_deadlines_and_sets_aside_garbage(loops):
    hidden, garbage, fine = loops(3)
    write_next_at(hidden, "2025-06-02T10:00:30Z")  # "T" sorts after " ": due to text only tomorrow
    write_next_at(garbage, "next tuesday")
    with time_machine.travel(T0, tick=False):
        assert settle_step(now=T0) is False
    assert stored_next_at(hidden) == django_form(T0 + s(30))
    assert stored_next_at(fine) == django_form(T0 + s(60))
    assert Loop.objects.get(pk=garbage.pk).pause_reason == UNREADABLE_REASON
    assert [LoopRun.objects.get(run_id=r).loop_id for r in claim(T0 + s(31))] == [hidden.loop_id]


@sqlite_only
def test_the_sweep_works_in_bounded_batches_and_counts_each_kind(loops):
    made = loops(5)
    for loop in made[:3]:
        write_next_at(loop, "2025-06-02T10:00:30Z")
    for loop in made[3:]:
        write_next_at(loop, "garbage")
    repairs = Repairs()
    with time_machine.travel(T0, tick=False):
        assert settle_step(now=T0, repairs=repairs, limit=2) is True
        assert (repairs.rewritten + repairs.set_aside) == 2
        assert settle_step(now=T0, repairs=repairs, limit=2) is True
        assert settle_step(now=T0, repairs=repairs, limit=2) is False
    assert (repairs.rewritten, repairs.set_aside) == (3, 2)
    assert {stored_next_at(loop) for loop in made[:3]} == {django_form(T0 + s(30))}
    assert {Loop.objects.get(pk=loop.pk).state for loop in made[3:]} == {LoopState.PAUSED}


@sqlite_only
def test_a_repair_step_writes_in_a_few_statements_whatever_its_size(loops, django_assert_max_num_queries):
    """Each step holds SQLite's one write lock for a few statements, not a few per loop."""
    made = loops(40)
    for loop in made[:20]:
        write_next_at(loop, "2025-06-02T10:00:30Z")
    for loop in made[20:]:
        write_next_at(loop, 1748858400)
    with time_machine.travel(T0, tick=False), django_assert_max_num_queries(8):
        assert settle_step(now=T0, limit=100) is False
    assert LoopEvent.objects.filter(kind="auto_paused").count() == 20


@sqlite_only
def test_a_pass_of_the_repair_job_logs_one_line_per_kind(loops, caplog):
    made = loops(7)
    for loop in made[:4]:
        write_next_at(loop, "2025-06-02 12:00:30+02:00")
    for loop in made[4:]:
        write_next_at(loop, "not a time")
    job = SettleJob(limit=2)
    with time_machine.travel(T0, tick=False), caplog.at_level(logging.DEBUG, logger="dshloop.clock"):
        steps = 1
        while job.step():
            steps += 1
        assert job.step() is False  # the next pass finds nothing: logs nothing
    assert steps == 4
    loud = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert [record.levelname for record in loud] == ["WARNING", "ERROR"]
    rewritten, set_aside = (record.getMessage() for record in loud)
    # One loop of each kind named as an example, the first the pass met.
    example = re.search(r"\(e\.g\. loop (\w+): '2025-06-02 12:00:30\+02:00' as 2025-06-02 10:00:30\)$", rewritten)
    assert rewritten.startswith("deadline repair: 4 loop(s) had next_at stored in another form; rewritten as Django")
    assert example and example[1] in {loop.loop_id for loop in made[:4]}, rewritten
    example = re.search(r"\(e\.g\. loop (\w+): 'not a time'\); resume one to schedule it from now$", set_aside)
    assert set_aside.startswith(
        "deadline repair: 3 loop(s) had a next_at that is not a timestamp and were paused, each with an auto_paused event"
    )
    assert example and example[1] in {loop.loop_id for loop in made[4:]}, set_aside


def test_the_sweep_is_a_no_op_where_deadlines_are_typed(loops):
    loops()
    if connection.vendor == "sqlite":
        pytest.skip("SQLite stores text: see the tests above")
    assert settle_step(now=T0) is False


@sqlite_only
def test_health_names_the_set_aside_loops_until_they_are_resumed(loops, manage_api):
    [loop] = loops()
    SchedulerHeartbeat.objects.create(instance_id="h:1", hostname="h", pid=1, started_at=T0, last_tick_at=T0)
    write_next_at(loop, "garbage")
    with time_machine.travel(T0, tick=False):
        settle_step(now=T0)
        response = Client().get("/api/health")
    assert response.status_code == 200  # loops still fire: a problem for a person, not an outage
    [problem] = response.json()["problems"]
    assert problem.startswith("1 loop was paused because the stored next run time was not a timestamp")
    with time_machine.travel(T0 + s(1), tick=False):
        assert manage_api.post(f"/api/loops/{loop.loop_id}/resume", {}).status_code == 200
        response = Client().get("/api/health")
    assert "problems" not in response.json()
    loop.refresh_from_db()
    assert loop.state == LoopState.SCHEDULED and loop.next_at == T0 + s(60)
    assert stored_next_at(loop) == django_form(T0 + s(60))


@sqlite_only
def test_a_run_records_the_settled_moment_not_the_text(loops):
    [loop] = loops()
    write_next_at(loop, "2025-06-02 09:01:00-01:00")  # due to text; 10:01 UTC in truth
    settle_step(now=T0 + s(61))
    [run_id] = claim(T0 + s(61))
    run = LoopRun.objects.get(run_id=run_id)
    assert (run.status, run.scheduled_at) == (RunStatus.CLAIMED, T0 + s(60))
