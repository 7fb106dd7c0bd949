"""The benchmark's seeding follows the schema (bench.seeding): a few hundred loops seeded the
bench's way go through the real claim and delivery, so a migration the bench does not fit fails
here, in `make test`, not in the next `make bench`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from bench.seeding import insert_select
from bench.sizes import SESSIONS
from bench.systems import Dshloop
from loops.models import Loop, LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.models import InboxMessage

LOOPS = 300


@pytest.fixture
def bench_dshloop(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("the bench seeds PostgreSQL (generate_series, interval arithmetic)")
    system = Dshloop()
    system.conn = connection.cursor()  # the test database, through Django's connection
    system.reset()
    return system


def test_loops_seeded_the_benchmarks_way_are_claimed_and_delivered(bench_dshloop):
    now = timezone.now()
    bench_dshloop.add_every(LOOPS, period_s=60, first_at=now - timedelta(seconds=1), spread_s=0.5)

    assert Loop.objects.count() == LOOPS
    run_ids = claim_due(now=now)
    assert len(run_ids) == LOOPS
    for start in range(0, LOOPS, 100):
        deliver_runs(run_ids[start : start + 100], now=now)

    assert LoopRun.objects.filter(status=RunStatus.DELIVERED).count() == LOOPS
    assert InboxMessage.objects.count() == LOOPS
    assert InboxMessage.objects.values("session_id").distinct().count() == min(LOOPS, SESSIONS)
    # The columns the bench does not name took the model's defaults, as loop_create would store them.
    loop = Loop.objects.get(loop_id="loop_bench_00000000")
    assert (loop.revision, loop.consecutive_failures, loop.name) == (1, 0, "")


def test_a_column_without_a_default_or_one_that_is_gone_stops_the_seeding(db):
    with pytest.raises(ValueError, match="scheduled_at has no default"):
        insert_select(LoopRun, {"run_id": "'r'"}, "generate_series(1, 1) AS i")
    with pytest.raises(ValueError, match="no columns \\['retired_column'\\]"):
        insert_select(Loop, {"loop_id": "'l'", "retired_column": "1"}, "generate_series(1, 1) AS i")
