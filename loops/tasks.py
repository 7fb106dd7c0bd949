"""What django-q2 runs: one task delivers a batch of runs (FIELD-NOTES: one task per
occurrence cannot reach thousands per second)."""

from __future__ import annotations

from django_q.tasks import async_task

DELIVERY_BATCH = 25


def enqueue_deliveries(run_ids: list[str]) -> None:
    """Called inside the claim transaction: the ORM broker's row commits with the claim."""
    for start in range(0, len(run_ids), DELIVERY_BATCH):
        async_task("loops.tasks.deliver_runs", run_ids[start:start + DELIVERY_BATCH],
                   q_options={"task_name": f"deliver {run_ids[start]}"})


def deliver_runs(run_ids: list[str]) -> int:
    from .delivery import deliver_runs as deliver

    return deliver(run_ids)
