"""The bounds on unattended runs that a claim applies (contract §14): overlap and capacity.

A `new` loop's run "is running" from its claim until its turn ends (loops.runs.running_fresh_runs,
which the gauges read too). The timeout itself is enforced by scheduler.outcome_watch, which
records an ended or cancelled turn's outcome, so a slot always frees.

Overlap (per loop, `skip`): an occurrence while the loop's last run is running is recorded skipped,
naming the run and the session it waited on; the next occurrence tries again.

Capacity (DSHLOOP_MAX_CONCURRENT_NEW_RUNS): the fresh agents running at once across the profile.
A claim counts them under a PostgreSQL advisory lock held to its commit, so that two schedulers
never both take the last slot (SQLite's IMMEDIATE transactions serialize claims anyway). Due `new`
loops beyond the free slots are not claimed: they stay due, and are claimed in deadline order as
slots free; one that waited past the misfire grace is recorded skipped.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from core.locks import lock_until_commit
from loops.humanize import fresh_sessions_running, wait_span
from loops.models import RunStatus
from loops.runs import CAPACITY, OVERLAP, running_fresh_runs, skip_prefix


def overlap_reason(loop_id: str, *, now: datetime) -> str | None:
    """Why an occurrence of a `skip` loop is not delivered now, or None when none of its runs runs."""
    busy = (
        running_fresh_runs(now=now)
        .filter(loop_id=loop_id)
        .order_by("-claimed_at")
        .values_list("run_id", "target_session_id", "status")
        .first()
    )
    if busy is None:
        return None
    run_id, session_id, status = busy
    where = f"in session {session_id}" if session_id else "(its session is being started)"
    doing = "its turn is still running" if status == RunStatus.DELIVERED else "it is still being delivered"
    return (
        f"{skip_prefix(OVERLAP)}: the previous run {run_id} {where}: {doing}. The loop's overlap is 'skip'; "
        "the next occurrence tries again."
    )


def capacity_reason(late: timedelta) -> str:
    """An occurrence that waited `late` for a slot, longer than the misfire grace: skipped."""
    limit = settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS
    return (
        f"{skip_prefix(CAPACITY)}: it waited {wait_span(late)} for a free slot while {fresh_sessions_running(limit)} "
        f"(DSHLOOP_MAX_CONCURRENT_NEW_RUNS); the wait exceeded the misfire grace of "
        f"{settings.DSHLOOP_MISFIRE_GRACE_SECONDS} s (DSHLOOP_MISFIRE_GRACE_SECONDS), so the loop goes on with "
        "its next occurrence."
    )


class Capacity:
    """The free slots for fresh agents as one claim transaction sees them; counted on first use."""

    def __init__(self, now: datetime):
        self.now = now
        self.free: int | None = None
        self.waiting = 0  # due `new` loops this claim left for a later one

    def has_free(self) -> bool:
        if self.free is None:
            _lock_count()
            self.free = settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS - running_fresh_runs(now=self.now).count()
        return self.free > 0

    def take(self) -> bool:
        """Take a slot for one occurrence; False when none is free."""
        if not self.has_free():
            return False
        assert self.free is not None
        self.free -= 1
        return True


def _lock_count() -> None:
    """Serialize the claims that count slots until their transaction ends (PostgreSQL); the count
    is read after the lock, so it sees every claim committed before."""
    lock_until_commit("dshloop-new-run-capacity")
