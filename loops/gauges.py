"""What GET /metrics and /api/health read at the moment they are asked (issue 18): the due
backlog, the open runs, the loops by state and the schedulers, in one statement.

One statement is one snapshot, so the states add up, and one round trip. Each part reads an
index, never the run history: the due backlog and the scheduled count `loop_due_idx`, the loops
not completed `loop_list_idx`, the paused and failed `loop_stopped_idx`, the open runs
`run_open_idx`. Its cost at 1M loops is measured in the benchmarks (docs/BENCHMARKS-METRICS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .models import Loop, LoopRun, LoopState, SchedulerHeartbeat

# A scheduler is alive if it ticked in the last 60 s (contract §4).
ALIVE_WINDOW = timedelta(seconds=60)


@dataclass(frozen=True)
class Gauges:
    at: datetime
    due_backlog: int  # scheduled loops whose next occurrence is due and not yet claimed
    open_runs: int  # claimed or being delivered
    oldest_open_run_claimed_at: datetime | None
    loops: dict[str, int]  # by state (LoopState), every state present
    scheduler_instances: int  # alive: ticked within ALIVE_WINDOW
    last_tick_at: datetime | None  # the newest heartbeat of any scheduler, alive or not

    @property
    def oldest_open_run_age_seconds(self) -> float:
        if self.oldest_open_run_claimed_at is None:
            return 0.0
        return max((self.at - self.oldest_open_run_claimed_at).total_seconds(), 0.0)


def _statement() -> str:
    loops, runs, beats = Loop._meta.db_table, LoopRun._meta.db_table, SchedulerHeartbeat._meta.db_table
    return f"""
        SELECT
          (SELECT COUNT(*) FROM {loops} WHERE state = 'scheduled' AND next_at <= %(now)s),
          (SELECT COUNT(*) FROM {loops} WHERE state = 'scheduled'),
          (SELECT COUNT(*) FROM {loops} WHERE state <> 'completed'),
          (SELECT COUNT(*) FROM {loops} WHERE state = 'paused'),
          (SELECT COUNT(*) FROM {loops} WHERE state = 'failed'),
          (SELECT COUNT(*) FROM {loops}),
          (SELECT COUNT(*) FROM {runs} WHERE status IN ('claimed', 'delivering')),
          (SELECT MIN(claimed_at) FROM {runs} WHERE status IN ('claimed', 'delivering')),
          (SELECT COUNT(*) FROM {beats} WHERE last_tick_at >= %(alive_since)s),
          (SELECT MAX(last_tick_at) FROM {beats})
    """


def read_gauges(now: datetime | None = None) -> Gauges:
    now = now or timezone.now()
    with connection.cursor() as cursor:
        # Adapted as the ORM would: SQLite compares stored timestamps as text, in Django's form.
        adapt = connection.ops.adapt_datetimefield_value
        cursor.execute(_statement(), {"now": adapt(now), "alive_since": adapt(now - ALIVE_WINDOW)})
        row = cursor.fetchone()
    due, scheduled, not_completed, paused, failed, total, open_runs, oldest, instances, last_tick = row
    loops = {
        LoopState.SCHEDULED: scheduled,
        # A running loop is any other loop that is not completed: no index needed for the
        # transient state every claim passes through.
        LoopState.RUNNING: not_completed - scheduled - paused - failed,
        LoopState.PAUSED: paused,
        LoopState.FAILED: failed,
        LoopState.COMPLETED: total - not_completed,
    }
    return Gauges(
        at=now,
        due_backlog=due,
        open_runs=open_runs,
        oldest_open_run_claimed_at=_moment(oldest),
        loops={str(state): count for state, count in loops.items()},
        scheduler_instances=instances,
        last_tick_at=_moment(last_tick),
    )


def _moment(value) -> datetime | None:
    """A timestamp from the raw statement: PostgreSQL returns a datetime; SQLite the text Django
    stored, in UTC."""
    if value is None or isinstance(value, datetime):
        return value
    return parse_datetime(value).replace(tzinfo=UTC)
