"""The bounds on unattended runs that a claim applies (contract §14): overlap and capacity.

A `new` loop's run "is running" from its claim until its turn ends: open (claimed, or being
delivered: about to start a fresh agent), or delivered with no outcome yet, within
DSHLOOP_RUN_TIMEOUT_SECONDS. The last part needs a host that tells when a turn ended
(Capabilities.turn_outcomes, the DSH host); with the others, whose turn outcomes arrive only if
someone reports them, a run stops counting once it is delivered. The timeout itself is enforced by
scheduler.outcome_watch, which records an ended or cancelled turn's outcome, so a slot always frees.

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
from django.db import connection
from django.db.models import Q, QuerySet

from loops.humanize import short_span
from loops.models import LoopRun, RunStatus
from loops.runs import OPEN_STATUSES
from sessions_app.hosts import get_host
from sessions_app.models import ReservedTarget

OVERLAP = "overlap"
CAPACITY = "capacity"


def run_timeout() -> timedelta:
    return timedelta(seconds=settings.DSHLOOP_RUN_TIMEOUT_SECONDS)


def running_fresh_runs(*, now: datetime) -> QuerySet[LoopRun]:
    """The runs of `new` loops whose fresh agent counts as running (see the module docstring)."""
    running = Q(status__in=OPEN_STATUSES)
    if get_host().capabilities.turn_outcomes:
        running |= Q(status=RunStatus.DELIVERED, finished_at__gte=now - run_timeout())
    # Within run_fresh_idx (a run whose outcome a host reported early has ended, even while open).
    return LoopRun.objects.filter(running, target=ReservedTarget.NEW, outcome="")


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
        f"Skipped (overlap): the previous run {run_id} {where}: {doing}. The loop's overlap is 'skip'; "
        "the next occurrence tries again."
    )


def capacity_reason(late: timedelta) -> str:
    limit = settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS
    return (
        f"Skipped (capacity): it waited {short_span(max(1, round(late.total_seconds())))} for a free slot while "
        f"{limit} fresh sessions were running (DSHLOOP_MAX_CONCURRENT_NEW_RUNS), beyond the misfire grace of "
        f"{settings.DSHLOOP_MISFIRE_GRACE_SECONDS} s (DSHLOOP_MISFIRE_GRACE_SECONDS); the loop goes on with "
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


def skip_reason(error: str) -> str | None:
    """The §14 reason a skipped run's error names (overlap, capacity), or None for another skip."""
    return next((reason for reason in (OVERLAP, CAPACITY) if error.startswith(f"Skipped ({reason})")), None)


def _lock_count() -> None:
    """Serialize the claims that count slots until their transaction ends (PostgreSQL); the count
    is read after the lock, so it sees every claim committed before."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["dshloop-new-run-capacity"])
