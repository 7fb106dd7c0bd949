"""What a run is, said once: its id, the key of the occurrence it stands for, the statuses in
which it is still open, its lease, when a `new` loop's run holds a slot for a fresh agent, and the
reasons such a run is skipped. The registry (a manual run, an operator's change), the scheduler
(claims, delivery, retention) and monitoring (its gauges and counters) all use these."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet

from core.timeutil import to_ms
from loops.models import LoopRun, RunStatus
from sessions_app.hosts import get_host
from sessions_app.models import ReservedTarget

OPEN_STATUSES = (RunStatus.CLAIMED, RunStatus.DELIVERING)

# contract §14: why a `new` loop's run is skipped (the claim's scheduler.unattended, an operator's
# change while it waited: loops.services.unclaimed). Each error begins "Skipped (<reason>)", which
# is how a recorded run is counted under its reason (dshloop_runs_skipped_total).
OVERLAP = "overlap"
CAPACITY = "capacity"
SKIP_REASONS = (OVERLAP, CAPACITY)

# How the error of a delivery attempt that its host gave no answer to (refused, reset, timed out)
# begins (scheduler.prepare): such a run is retried until the host answers, and health and the
# metrics count the runs stalled so by these words (monitoring.gauges).
WAITING_FOR_HOST = "Waiting for the host, which gave no answer: "

_Rows = TypeVar("_Rows", bound=QuerySet[Any, Any])


def new_run_id() -> str:
    return "run_" + secrets.token_hex(8)


def occurrence_key(loop_id: str, scheduled_at: datetime) -> str:
    """The unique key of a scheduled occurrence: the last guard against a double dispatch."""
    return f"{loop_id}@{to_ms(scheduled_at)}"


def manual_occurrence_key(loop_id: str, run_id: str) -> str:
    """A manual run stands for no scheduled occurrence: its own key, never one a claim makes."""
    return f"{loop_id}@manual:{run_id}"


def skipped_occurrence_key(key: str, run_id: str) -> str:
    """A run skipped because its occurrence already has a run: the original key stays with that one."""
    return f"{key}:skipped:{run_id}"


def lease() -> timedelta:
    """How long a claimed or started run may stay open before the clock enqueues it again."""
    return timedelta(seconds=settings.DSHLOOP_RUN_LEASE_SECONDS)


def free_rows(queryset: _Rows) -> _Rows:
    """The rows no other transaction holds, locked for this one: for taking work (claims, leases)
    that any of several schedulers may take. Rows another transaction has locked are skipped.

    On PostgreSQL the LIMIT sits in the top-level SELECT … FOR UPDATE SKIP LOCKED, not in a
    subquery (where it may lock more rows than the limit). SQLite has no row locks: there the
    callers' compare-and-swap updates and IMMEDIATE transactions do this job."""
    if connection.vendor == "postgresql":
        return queryset.select_for_update(skip_locked=True)
    return queryset


def run_timeout() -> timedelta:
    """contract §14: how long a fresh agent's turn may run after its delivery."""
    return timedelta(seconds=settings.DSHLOOP_RUN_TIMEOUT_SECONDS)


def running_fresh_runs(*, now: datetime) -> QuerySet[LoopRun]:
    """The runs of `new` loops whose fresh agent counts as running at `now`: each holds a slot of
    DSHLOOP_MAX_CONCURRENT_NEW_RUNS (the claim counts them, the gauge reports them).

    A run runs from its claim until its turn ends: open (claimed, or being delivered: about to
    start a fresh agent), or delivered with no outcome yet, within the run timeout. The last part
    needs a host that tells when a turn ended (Capabilities.turn_outcomes, the DSH host); with the
    others, whose turn outcomes arrive only if someone reports them, a run stops counting once it
    is delivered. A run whose outcome a host reported early has ended, even while open."""
    running = Q(status__in=OPEN_STATUSES)
    if get_host().capabilities.turn_outcomes:
        running |= Q(status=RunStatus.DELIVERED, finished_at__gte=now - run_timeout())
    # Within run_fresh_idx.
    return LoopRun.objects.filter(running, target=ReservedTarget.NEW, outcome="")


def skip_prefix(reason: str) -> str:
    """How the error of a run skipped for a contract §14 reason begins."""
    return f"Skipped ({reason})"


def skip_reason(error: str) -> str | None:
    """The contract §14 reason a skipped run's error names (overlap, capacity), or None for another skip."""
    return next((reason for reason in SKIP_REASONS if error.startswith(skip_prefix(reason))), None)
