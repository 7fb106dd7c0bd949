"""A real `runloops` on SQLite is not starved by loop rows whose deadline it cannot claim as stored.

More due rows than one claim batch hold next_at in forms Django does not write (ISO with "T"/"Z",
an integer, garbage), written by hand as another tool would. The same batch must not come back on
every tick while nothing else fires: the readable ones fire once and are stored in Django's form,
the unreadable ones are set aside (paused with an event each, one summary line in the log, a
health problem), and an ordinary loop created after them fires on time. `runloops` repairs them before
its clock's first tick (scheduler.housekeeping.startup_checks).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from loops.models import UNREADABLE_REASON, EventKind, Loop, LoopEvent, LoopRun, LoopState
from scheduler.claims import CLAIM_BATCH
from tests.conftest import create_loop, every
from tests.processes import wait_for

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif("connection.vendor != 'sqlite'", reason="PostgreSQL's typed column cannot hold these forms"),
]


def write_next_at(loop_ids: list[str], value) -> None:
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {Loop._meta.db_table} SET next_at = %s WHERE loop_id = %s",
            [(value, loop_id) for loop_id in loop_ids],
        )


def test_rows_the_claim_cannot_take_do_not_starve_a_real_scheduler(schedulers, make_session):
    make_session("ses_a", status="idle")
    past = timezone.now() - timedelta(minutes=5)
    iso_due = [create_loop(every(3600), target="ses_a").loop_id for _ in range(CLAIM_BATCH)]
    garbage = [create_loop(every(3600), target="ses_a").loop_id for _ in range(20)]
    write_next_at(iso_due, past.strftime("%Y-%m-%dT%H:%M:%SZ"))  # due, in another form, at the head of the queue
    write_next_at(garbage[:10], "not a time")
    write_next_at(garbage[10:], 1748858400)  # an integer: sorts before every text
    ordinary = create_loop(every(1), target="ses_a", prompt="tick").loop_id

    schedulers.start_ready(1)

    wait_for(
        lambda: LoopRun.objects.filter(loop_id=ordinary, status="delivered").count() >= 2,
        timeout=30,
        message="the ordinary loop to fire twice",
    )
    wait_for(
        lambda: LoopRun.objects.filter(loop_id__in=iso_due, status="delivered").count() == len(iso_due),
        timeout=30,
        message="every loop due in another form to fire",
    )
    # Once each: their next deadline is an hour on, in Django's form.
    assert LoopRun.objects.filter(loop_id__in=iso_due).count() == len(iso_due)
    assert all(loop.next_at > timezone.now() for loop in Loop.objects.filter(loop_id__in=iso_due))

    set_aside = Loop.objects.filter(loop_id__in=garbage)
    assert {(loop.state, loop.pause_reason) for loop in set_aside} == {(LoopState.PAUSED, UNREADABLE_REASON)}
    assert not LoopRun.objects.filter(loop_id__in=garbage).exists()
    health = Client().get("/api/health").json()
    assert any("20 loops were paused" in problem for problem in health["problems"]), health
    events = LoopEvent.objects.filter(loop_id__in=garbage, kind=EventKind.AUTO_PAUSED)
    assert sorted(events.values_list("loop_id", flat=True)) == sorted(garbage)
    log = schedulers.started[0].output()
    assert "deadline repair: 20 loop(s) had a next_at that is not a timestamp and were paused" in log


def test_rows_written_by_hand_while_it_runs_are_repaired_by_housekeeping_then_fire(schedulers, make_session):
    """The claim and the clock's wakeup see only Django's form: a row written by hand while the scheduler
    runs waits for housekeeping's next pass (every SETTLE_INTERVAL_SECONDS), then fires once; an
    integer the clock's queries cannot read is set aside by that pass, and the loops go on firing."""
    from scheduler.housekeeping import SETTLE_INTERVAL_SECONDS

    make_session("ses_a", status="idle")
    ordinary = create_loop(every(1), target="ses_a", prompt="tick").loop_id
    iso_due = create_loop(every(3600), target="ses_a").loop_id
    garbage = create_loop(every(3600), target="ses_a").loop_id
    [scheduler] = schedulers.start_ready(1)

    written_at = timezone.now()
    write_next_at([iso_due], (written_at - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    write_next_at([garbage], 1748858400)
    wait_for(
        lambda: LoopRun.objects.filter(loop_id=iso_due, status="delivered").exists(),
        timeout=2 * SETTLE_INTERVAL_SECONDS + 10,
        message="the loop written by hand to fire after the repair",
    )
    assert LoopRun.objects.filter(loop_id=iso_due).count() == 1
    assert Loop.objects.get(loop_id=garbage).pause_reason == UNREADABLE_REASON
    after_repair = timezone.now()
    wait_for(
        lambda: LoopRun.objects.filter(loop_id=ordinary, status="delivered", scheduled_at__gt=after_repair).exists(),
        timeout=10,
        message="the ordinary loop to go on firing",
    )
    assert "deadline repair: 1 loop(s) had a next_at that is not a timestamp" in scheduler.output()
