"""Several `runloops` processes on one database, and kill -9 in the middle of the work.

Invariants (spec §5.6, §3): every due occurrence is delivered exactly once or, after a stall,
folded into the next delivery and counted in `missed`; no inbox message twice; nothing stuck.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from loops.clock import notify_clocks
from loops.models import Loop, LoopRun, LoopState
from loops.services import new_loop_id
from sessions_app.models import InboxMessage
from tests.processes import wait_for

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def make_loops(count: int, every: int, sessions: list[str]) -> list[Loop]:
    """Loops whose first occurrences are spread over one period, starting two seconds from now."""
    start = timezone.now() + timedelta(seconds=2) - timedelta(seconds=every)
    loops = []
    for i in range(count):
        created_at = start + timedelta(milliseconds=i * every * 1000 // count)
        loops.append(Loop(
            loop_id=new_loop_id(), prompt=f"load {i}", kind="every", every_seconds=every,
            session_id=sessions[i % len(sessions)], created_by_session_id=sessions[0], created_at=created_at,
            next_at=created_at + timedelta(seconds=every), state=LoopState.SCHEDULED,
        ))
    created = Loop.objects.bulk_create(loops)
    notify_clocks()  # bulk_create bypasses loop_create, which wakes sleeping clocks
    return created


def settled(before: datetime) -> bool:
    """Every occurrence scheduled before `before` has reached a terminal state."""
    return not LoopRun.objects.filter(scheduled_at__lt=before, status__in=["claimed", "delivering"]).exists()


def describe(loop_id: str, until: datetime) -> str:
    loop = Loop.objects.filter(loop_id=loop_id).first()
    runs = LoopRun.objects.filter(loop_id=loop_id).order_by("-scheduled_at")[:4]
    return f"until={until} loop={loop and (loop.state, loop.next_at)} runs=" + "; ".join(
        f"{r.scheduled_at:%H:%M:%S.%f} {r.status} a={r.attempt} m={r.missed} claimed={r.claimed_at:%H:%M:%S.%f} "
        f"finished={r.finished_at and f'{r.finished_at:%H:%M:%S.%f}'} err={r.error!r}" for r in runs)


def check_invariants(loops: list[Loop], *, until: datetime, allow_missed: bool) -> Counter:
    """`until`: every occurrence scheduled before it must be over (later ones may be in flight)."""
    all_runs = list(LoopRun.objects.order_by("loop_id", "scheduled_at"))
    runs = [run for run in all_runs if run.scheduled_at < until]
    statuses = Counter(run.status for run in runs)
    assert set(statuses) == {"delivered"}, statuses

    # The host's view: one inbox message per delivered occurrence, never two.
    keys = [run.occurrence_key for run in runs]
    per_key = dict(InboxMessage.objects.filter(occurrence_key__in=keys).values_list("occurrence_key")
                   .annotate(n=Count("message_id")))
    assert len(per_key) == len(keys) and set(per_key.values()) == {1}

    # Per loop: consecutive runs leave no gap that is not accounted for by `missed`.
    by_loop = defaultdict(list)
    for run in all_runs:
        by_loop[run.loop_id].append(run)
    for loop in loops:
        period = timedelta(seconds=loop.every_seconds)
        previous = loop.created_at
        for run in by_loop[loop.loop_id]:
            assert run.scheduled_at - previous == period * (1 + run.missed), describe(loop.loop_id, until)
            previous = run.scheduled_at
        # ...and no tail was dropped: the last grid point before `until` was claimed or folded.
        assert until - previous <= period, describe(loop.loop_id, until)
    missed = sum(run.missed for run in runs)
    if not allow_missed:
        assert missed == 0
    return Counter(delivered=len(runs), missed=missed)


def load_shape():
    # Four schedulers on PostgreSQL (the multi-scheduler engine), two on SQLite.
    if connection.vendor == "postgresql":
        return {"processes": 4, "loops": 1000, "every": 5}
    return {"processes": 2, "loops": 300, "every": 5}


def test_concurrent_schedulers_deliver_every_occurrence_exactly_once(schedulers, make_session):
    shape = load_shape()
    sessions = [make_session(f"ses_{i:03d}").session_id for i in range(100)]
    schedulers.start(shape["processes"])
    loops = make_loops(shape["loops"], shape["every"], sessions)

    time.sleep(32)  # the scenario: half a minute of steady load
    until = timezone.now() - timedelta(seconds=1)
    wait_for(lambda: settled(until), timeout=30, message="in-flight deliveries to finish")
    for scheduler in schedulers.started:
        assert scheduler.terminate() < 10

    counts = check_invariants(loops, until=until, allow_missed=False)
    assert counts["delivered"] >= shape["loops"] * 5  # several occurrences of every loop


def test_kill_minus_nine_at_random_moments_loses_and_duplicates_nothing(tmp_path, make_session):
    from tests.processes import Schedulers

    sessions = [make_session(f"ses_{i:03d}").session_id for i in range(50)]
    # A short lease, so that a killed process's runs are re-driven within the test.
    schedulers = Schedulers(tmp_path, DSHLOOP_RUN_LEASE_SECONDS="3")
    try:
        count = 2 if connection.vendor == "sqlite" else 3
        running = schedulers.start(count)
        loops = make_loops(300, 2, sessions)
        rng = random.Random(20261130)
        for _ in range(10):
            time.sleep(rng.uniform(0.5, 3.0))
            victim = running.pop(rng.randrange(len(running)))
            victim.kill9()
            running += schedulers.start(1)
        until = timezone.now()
        wait_for(lambda: settled(until), timeout=60, message="stuck runs to be recovered")
        for scheduler in running:
            scheduler.terminate()
        check_invariants(loops, until=until, allow_missed=True)
    finally:
        schedulers.close()
