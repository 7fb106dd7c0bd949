"""What GET /metrics and /api/health read at the moment they are asked: the due
backlog, the open runs, the fresh agents running, the loops set aside for an unreadable deadline,
the loops by state and the schedulers, in one statement.

One statement is one snapshot, so the states add up, and one round trip. The due backlog reads
`loop_due_idx`, the open and retrying runs (and those waiting for a host that gives no answer) `run_open_idx`, the fresh agents running
`run_fresh_idx`, the runs failed lately `run_failed_idx`, the set-aside loops
`loop_unreadable_idx`, never the rest of the run history. The loops by state are
one pass over the loop table (no index holds every state, and one that did would cost every
claim a write), on one backend (no parallel workers); docs/BENCHMARKS-METRICS.md measures it at
1M loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from loops.models import UNREADABLE_REASON, Loop, LoopRun, LoopState, RunStatus, SchedulerHeartbeat
from loops.runs import OPEN_STATUSES, WAITING_FOR_HOST, running_fresh_runs

# A scheduler is alive if it ticked in the last 60 s (contract §4).
ALIVE_WINDOW = timedelta(seconds=60)
# Health names the deliveries that failed within this window: long enough for a monitor polling
# every few minutes to see a burst of failures, short enough to clear soon after they stop.
FAILED_WINDOW = timedelta(minutes=15)


@dataclass(frozen=True)
class Gauges:
    at: datetime
    due_backlog: int  # scheduled loops whose next occurrence is due and not yet claimed
    open_runs: int  # claimed or being delivered
    oldest_open_run_claimed_at: datetime | None
    fresh_runs_running: int  # runs of `new` loops holding a slot of DSHLOOP_MAX_CONCURRENT_NEW_RUNS
    loops: dict[str, int]  # by state (LoopState), every state present; empty unless asked for
    unreadable_loops: int  # paused because their stored next_at named no moment (scheduler.stored_times)
    retrying_runs: int  # open runs whose last delivery attempt failed: due again after a backoff
    waiting_for_host: int  # of those, the ones whose host gave no answer (it is down): retried until it answers
    failed_recently: int  # runs that failed within FAILED_WINDOW
    scheduler_instances: int  # alive: ticked within ALIVE_WINDOW
    last_tick_at: datetime | None  # the newest heartbeat of any scheduler, alive or not

    @property
    def oldest_open_run_age_seconds(self) -> float:
        if self.oldest_open_run_claimed_at is None:
            return 0.0
        return max((self.at - self.oldest_open_run_claimed_at).total_seconds(), 0.0)


def _sql(queryset: QuerySet, column: str) -> tuple[str, list]:
    """The SELECT of one column of `queryset`'s rows, compiled as the ORM would run it: the rule it
    filters by is the one its home defines (loops.runs), not a second spelling of it here."""
    sql, params = queryset.order_by().values(column).query.get_compiler(connection=connection).as_sql()
    return sql, list(params)


def _statement(now: datetime, *, by_state: bool) -> tuple[str, list]:
    loops, beats = Loop._meta.db_table, SchedulerHeartbeat._meta.db_table
    # Adapted as the ORM would: SQLite compares stored timestamps as text, in Django's form.
    adapt = connection.ops.adapt_datetimefield_value
    open_rows = LoopRun.objects.filter(status__in=OPEN_STATUSES)
    open_runs, open_params = _sql(open_rows, "claimed_at")
    # The claim's own count of fresh agents (scheduler.unattended.Capacity counts the same rows).
    fresh, fresh_params = _sql(running_fresh_runs(now=now), "run_id")
    # Open runs whose last attempt failed and waits for its retry, and runs failed lately.
    retrying, retrying_params = _sql(open_rows.exclude(error=""), "run_id")
    # Of those, the ones whose host gave no answer (scheduler.prepare.host_failed): the host is down.
    waiting, waiting_params = _sql(open_rows.filter(error__startswith=WAITING_FOR_HOST), "run_id")
    failed, failed_params = _sql(
        LoopRun.objects.filter(status=RunStatus.FAILED, finished_at__gte=now - FAILED_WINDOW), "run_id"
    )
    counts = ", ".join(f"COUNT(CASE WHEN state = '{state}' THEN 1 END)" for state in LoopState.values)
    statement = f"""
        SELECT
          (SELECT COUNT(*) FROM {loops} WHERE state = 'scheduled' AND next_at <= %s),
          (SELECT COUNT(*) FROM ({open_runs}) AS open_runs),
          (SELECT MIN(claimed_at) FROM ({open_runs}) AS open_runs),
          (SELECT COUNT(*) FROM ({fresh}) AS fresh_runs),
          (SELECT COUNT(*) FROM {loops} WHERE state = 'paused' AND pause_reason = %s),
          (SELECT COUNT(*) FROM ({retrying}) AS retrying_runs),
          (SELECT COUNT(*) FROM ({waiting}) AS waiting_runs),
          (SELECT COUNT(*) FROM ({failed}) AS failed_runs),
          (SELECT COUNT(*) FROM {beats} WHERE last_tick_at >= %s),
          (SELECT MAX(last_tick_at) FROM {beats})
          {f", states.* FROM (SELECT {counts} FROM {loops}) AS states" if by_state else ""}
    """
    params = [
        adapt(now),
        *open_params,
        *open_params,
        *fresh_params,
        UNREADABLE_REASON,
        *retrying_params,
        *waiting_params,
        *failed_params,
        adapt(now - ALIVE_WINDOW),
    ]
    return statement, params


def read_gauges(now: datetime | None = None, *, by_state: bool = True) -> Gauges:
    """The gauges at `now`. Without `by_state` (health's question) the loop table is not scanned:
    `loops` is empty and the cost does not grow with the number of loops."""
    now = now or timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A monitoring read, every 15 s: one backend's scan, not two more workers taking every
            # core for it (the same rows counted in parallel cost more CPU in all).
            cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        cursor.execute(*_statement(now, by_state=by_state))
        row = cursor.fetchone()
    due, open_runs, oldest, fresh, unreadable, retrying, waiting, failed, instances, last_tick, *states = row
    return Gauges(
        at=now,
        due_backlog=due,
        open_runs=open_runs,
        oldest_open_run_claimed_at=_moment(oldest),
        fresh_runs_running=fresh,
        loops=dict(zip(LoopState.values, states, strict=True)) if by_state else {},
        unreadable_loops=unreadable,
        retrying_runs=retrying,
        waiting_for_host=waiting,
        failed_recently=failed,
        scheduler_instances=instances,
        last_tick_at=_moment(last_tick),
    )


def _moment(value: datetime | str | None) -> datetime | None:
    """A timestamp from the raw statement: PostgreSQL returns a datetime; SQLite the text Django
    stored, in UTC."""
    if value is None or isinstance(value, datetime):
        return value
    moment = parse_datetime(value)
    assert moment is not None, value  # Django wrote it, in its own form
    return moment.replace(tzinfo=UTC)
