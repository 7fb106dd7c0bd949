"""The schedulers' "what is due?" queries, captured as the product sends them, and timed.

The SQL is captured from the real code paths (CaptureQueriesContext) rather than copied, so the
bench times what runs in production and follows the code when it changes. django-q2's query is
built from its own Schedule model exactly as django_q.scheduler.scheduler() builds it.
"""

from __future__ import annotations

import time

from django.db import connection, transaction
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone


def captured_sql(run) -> list[str]:
    """The SQL `run` sends, as sent, in a transaction rolled back afterwards."""
    with CaptureQueriesContext(connection) as captured:
        with transaction.atomic():
            run()
            transaction.set_rollback(True)  # capture only: lock nothing, change nothing
    return [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith(("BEGIN", "SAVEPOINT", "RELEASE", "ROLLBACK"))
    ]


def dshloop_claim_sql() -> str:
    """scheduler.claims.claim_due's SELECT … FOR UPDATE SKIP LOCKED of the earliest due loops."""
    from loops.models import Loop, LoopState
    from loops.runs import free_rows
    from scheduler.claims import CLAIM_BATCH

    due = Loop.objects.filter(state=LoopState.SCHEDULED, next_at__lte=timezone.now()).order_by("next_at")
    [sql] = captured_sql(lambda: list(free_rows(due)[:CLAIM_BATCH]))
    return sql


def dshloop_deadline_sql() -> list[str]:
    """scheduler.claims.next_wakeup: the two MIN() queries every clock tick runs, due or not."""
    from scheduler.claims import next_wakeup

    return captured_sql(next_wakeup)


def baseline_scheduler_sql() -> str:
    """django_q.scheduler.scheduler()'s query, which it runs every ~30 s in one transaction."""
    from django_q.models import Schedule

    due = (
        Schedule.objects.select_for_update()
        .exclude(repeats=0)
        .filter(next_run__lt=timezone.now())
        .filter(Q(cluster__isnull=True))
    )  # the default cluster's schedules
    [sql] = captured_sql(lambda: list(due))
    return sql


def time_queries(conn, statements: list[str], *, repeat: int) -> list[float]:
    """Milliseconds per run of `statements` (one transaction each, rolled back: locks nothing
    for longer than the query, and leaves the data as it was)."""
    times = []
    for _ in range(repeat):
        with conn.transaction(force_rollback=True):
            started = time.perf_counter()
            for sql in statements:
                conn.execute(sql).fetchall()
            times.append((time.perf_counter() - started) * 1000)
    return times
