"""A real `runloops` on SQLite repairs 20,000 deadlines stored in other forms before its clock starts, in a few log lines.

The rows are written with raw SQL, as another tool would, in forms Django does not write: ISO with
"T" and "Z", "+08:00" and "-12:00" offsets, integers. `runloops` repairs them before its clock's
first tick (scheduler.housekeeping.startup_checks; the claim and the wakeup see only Django's form). An
ordinary loop falls due a second after the scheduler is ready: it fires on time, and the log says
what the repair did in a few summary lines, not one line per row. The unreadable loops still each
get their `auto_paused` event (what an operator reads per loop).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from loops.models import UNREADABLE_REASON, EventKind, Loop, LoopEvent, LoopRun, LoopState
from tests.conftest import create_loop, every
from tests.processes import wait_for

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif("connection.vendor != 'sqlite'", reason="PostgreSQL's typed column cannot hold these forms"),
]

# How many rows of each form (20,000 in all): most at the head of the claim's queue as text.
COUNTS = {"integer": 9_500, "west": 9_500, "iso": 500, "east": 500}
DUE_IN_TRUTH = 50  # a few of them due in truth: repaired, then fired once
ON_TIME = timedelta(seconds=10)
DJANGOS_FORM = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]"  # GLOB


def copy_loop(template: str, next_ats: list[tuple[str, object]]) -> None:
    """Bulk copies of the loop `template` with the given (loop_id, stored next_at), in one statement each."""
    table = Loop._meta.db_table
    columns = [field.column for field in Loop._meta.concrete_fields if field.column not in ("loop_id", "next_at")]
    names = ", ".join(columns)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (loop_id, next_at, {names}) SELECT %s, %s, {names} FROM {table} WHERE loop_id = %s",
            [(loop_id, next_at, template) for loop_id, next_at in next_ats],
        )


def not_in_djangos_form() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM {Loop._meta.db_table} WHERE state = 'scheduled' AND next_at IS NOT NULL "
            "AND NOT (typeof(next_at) = 'text' AND (next_at GLOB ? OR next_at GLOB ?))",
            [DJANGOS_FORM, DJANGOS_FORM + ".[0-9][0-9][0-9][0-9][0-9][0-9]"],
        )
        return cursor.fetchone()[0]


def test_runloops_repairs_20000_stored_deadlines_at_start_up_then_fires_an_ordinary_loop_on_time(
    schedulers, make_session
):
    make_session("ses_a", status="idle")
    now = timezone.now().replace(microsecond=0)
    template = create_loop(every(3600), target="ses_a").loop_id
    ordinary = create_loop(every(3600), target="ses_a", prompt="tick").loop_id
    Loop.objects.filter(loop_id__in=[template, ordinary]).update(next_at=now + timedelta(days=1))
    forms = {
        # Hidden from the due query as text ("T" sorts after " "), an hour ahead in truth.
        "iso": (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        # Hidden as text too, an hour ahead in truth.
        "east": (now + timedelta(hours=9)).strftime("%Y-%m-%d %H:%M:%S+08:00"),
        # Due as text (an hour ago, written west of UTC), eleven hours ahead in truth: at the head
        # of the claim's queue, and not to be fired.
        "west": (now - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S-12:00"),
        # Not a timestamp: below every text, so due to the query forever; set aside (paused).
        "integer": 1764658800,
    }
    ids = {kind: [f"lp_{kind}_{i:05d}" for i in range(count)] for kind, count in COUNTS.items()}
    for kind, value in forms.items():
        copy_loop(template, [(loop_id, value) for loop_id in ids[kind]])
    due = [f"lp_due_{i:03d}" for i in range(DUE_IN_TRUTH)]
    copy_loop(template, [(loop_id, (now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")) for loop_id in due])
    assert not_in_djangos_form() == sum(COUNTS.values()) + DUE_IN_TRUTH

    [scheduler] = schedulers.start_ready(1)
    deadline = timezone.now() + timedelta(seconds=1)
    Loop.objects.filter(loop_id=ordinary).update(next_at=deadline)

    run = wait_for(
        lambda: LoopRun.objects.filter(loop_id=ordinary, status="delivered").first(),
        timeout=60,
        message="the ordinary loop to fire",
    )
    assert run.scheduled_at == deadline
    assert run.started_at - deadline <= ON_TIME, (run.started_at - deadline, scheduler.output()[-3000:])
    assert run.finished_at - deadline <= ON_TIME, run.finished_at - deadline

    wait_for(lambda: not_in_djangos_form() == 0, timeout=120, message="every stored deadline to be repaired")
    wait_for(
        lambda: LoopRun.objects.filter(loop_id__in=due, status="delivered").count() == DUE_IN_TRUTH,
        timeout=30,
        message="the loops due in truth to fire",
    )
    # What was only due as text was not fired; each unreadable loop is paused with its event.
    assert not LoopRun.objects.filter(loop_id__in=ids["west"] + ids["iso"] + ids["east"]).exists()
    west = Loop.objects.filter(loop_id__in=ids["west"]).values_list("next_at", flat=True).distinct()
    assert list(west) == [now + timedelta(hours=11)]
    paused = Loop.objects.filter(loop_id__in=ids["integer"], state=LoopState.PAUSED, pause_reason=UNREADABLE_REASON)
    assert paused.count() == COUNTS["integer"]
    events = LoopEvent.objects.filter(loop_id__in=ids["integer"], kind=EventKind.AUTO_PAUSED)
    assert events.count() == COUNTS["integer"]

    log = scheduler.output()
    loud = [line for line in log.splitlines() if re.search(r" (WARNING|ERROR) ", line)]
    assert len(loud) <= 20, (len(loud), loud[:5])
    # One pass repaired them all: a line per kind of repair, with the counts.
    rewritten = COUNTS["west"] + COUNTS["iso"] + COUNTS["east"] + DUE_IN_TRUTH
    assert sum(f"deadline repair: {rewritten} loop(s) had next_at stored in another form" in line for line in loud) == 1
    set_aside = f"deadline repair: {COUNTS['integer']} loop(s) had a next_at that is not a timestamp and were paused"
    assert sum(set_aside in line for line in loud) == 1
    # The summary names one loop of each kind as an example; the events name every paused one.
    named = [loop_id for loop_id in ids["west"] + ids["integer"] if loop_id in log]
    assert len(named) <= 2, named
