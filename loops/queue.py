"""Delivery tasks on django-q2's queue (signalling): the claim enqueues, `scheduler.tasks` runs them.

One task delivers a batch of runs (FIELD-NOTES: one task per occurrence cannot reach thousands
per second). The task is named by its dotted path, so this module imports nothing that runs it.
"""

from __future__ import annotations

from django.conf import settings
from django_q.tasks import async_task

DELIVER_TASK = "scheduler.tasks.deliver_runs"

# Runs per task. The embedded host answers in microseconds, so batches amortize the database
# work (B1 in docs/BENCHMARKS.md: 250 a task and 500 a claim use a fifth less CPU per occurrence
# than 100 and 200, and a 10k burst is delivered ~1.5x faster); a remote host may hang for its
# whole timeout, so there each run gets its own task and a slow host can hold at most one run per
# worker (issue 4: it never stalls the others beyond that).
DELIVERY_BATCH = {"local": 250, "http": 1, "dsh": 1}


def enqueue_deliveries(run_ids: list[str]) -> None:
    """Called inside the claim transaction: the ORM broker's row commits with the claim."""
    size = DELIVERY_BATCH[settings.DSHLOOP_HOST]
    for start in range(0, len(run_ids), size):
        async_task(DELIVER_TASK, run_ids[start : start + size], q_options={"task_name": f"deliver {run_ids[start]}"})
