"""A remote host's runs are leased: held by one driver while it delivers them outside any
transaction, and recorded only while the lease is still its own (scheduler.delivery)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Value
from django.db.models.functions import Coalesce

from loops.models import LoopRun, RunStatus
from loops.runs import OPEN_STATUSES, lease
from scheduler.rows import RunRow


def lease_runs(runs: list[RunRow], now: datetime) -> None:
    """A remote host's runs: held by this driver until the lease runs out (the caller commits it
    before delivering), so that no other driver delivers them meanwhile."""
    until = now + lease()
    LoopRun.objects.filter(run_id__in=[run.run_id for run in runs]).update(
        status=RunStatus.DELIVERING,
        started_at=Coalesce("started_at", Value(now)),
        lease_until=until,
        retry_at=until,
    )
    for run in runs:
        run.lease_until = until


def still_leased(runs: list[RunRow]) -> list[RunRow]:
    """A remote host's runs still under this driver's lease, locked, with what a host may have
    reported meanwhile; the caller holds the record's transaction. If a lease ran out and another
    driver took over, its record wins. These rows are ours (leased), so wait for a lock another
    transaction holds on one rather than skip it, in key order like every writer of runs."""
    leases = {run.run_id: run.lease_until for run in runs}
    current = {
        run_id: (turn, summary, error)
        for run_id, lease_until, turn, summary, error in LoopRun.objects.select_for_update()
        .filter(run_id__in=list(leases), status__in=OPEN_STATUSES)
        .order_by("run_id")
        .values_list("run_id", "lease_until", "outcome", "summary", "error")
        if lease_until == leases[run_id]
    }
    for run in runs:
        if run.run_id in current:
            run.outcome, run.summary, run.error = current[run.run_id]
    return [run for run in runs if run.run_id in current]
