"""What django-q2 runs: one task delivers a batch of runs (FIELD-NOTES: one task per
occurrence cannot reach thousands per second)."""

from __future__ import annotations

import logging

from django_q.tasks import async_task

logger = logging.getLogger("dshloop.delivery")

DELIVERY_BATCH = 25


def enqueue_deliveries(run_ids: list[str]) -> None:
    """Called inside the claim transaction: the ORM broker's row commits with the claim."""
    for start in range(0, len(run_ids), DELIVERY_BATCH):
        async_task("loops.tasks.deliver_runs", run_ids[start:start + DELIVERY_BATCH],
                   q_options={"task_name": f"deliver {run_ids[start]}"})


def deliver_runs(run_ids: list[str]) -> int:
    from .delivery import deliver_run

    driven = 0
    for run_id in run_ids:
        try:
            driven += deliver_run(run_id)
        except Exception:  # noqa: BLE001 - one bad run must not strand the rest of its batch
            # The run stays open; the clock re-drives it when its lease ends (claims.recover_runs).
            logger.exception("delivery of run %s raised; it will be retried after its lease", run_id)
    return driven
