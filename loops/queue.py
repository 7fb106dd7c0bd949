"""Delivery tasks on django-q2's queue (signalling): the claim enqueues, `scheduler.tasks` runs them.

One task delivers a batch of runs (FIELD-NOTES: one task per occurrence cannot reach thousands
per second). The task is the project's DSHLOOP_DELIVER_TASK, named by its dotted path: this module
sits below the scheduler that runs it and imports nothing of it.
"""

from __future__ import annotations

from django.conf import settings
from django_q.tasks import async_task

from sessions_app.hosts import get_host


def enqueue_deliveries(run_ids: list[str]) -> None:
    """Called inside the claim transaction: the ORM broker's row commits with the claim. One task
    a batch of the host's size (Capabilities.delivery_batch)."""
    size = get_host().capabilities.delivery_batch
    for start in range(0, len(run_ids), size):
        async_task(
            settings.DSHLOOP_DELIVER_TASK,
            run_ids[start : start + size],
            q_options={"task_name": f"deliver {run_ids[start]}"},
        )


# A task worker's turn at claiming beside a clock that found a burst (scheduler.claims.claim_burst).
CLAIM_TASK = "scheduler.tasks.claim_burst"


def enqueue_claim_help() -> None:
    """Ask a task worker to claim beside the clock (scheduler.clock, on a full claim)."""
    async_task(CLAIM_TASK, q_options={"task_name": "claim burst"})
