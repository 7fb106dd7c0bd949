"""What django-q2 runs (an entry point): the delivery tasks that loops.queue enqueues."""

from __future__ import annotations

from scheduler import delivery


def deliver_runs(run_ids: list[str]) -> int:
    return delivery.deliver_runs(run_ids)
