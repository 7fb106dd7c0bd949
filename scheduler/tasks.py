"""What django-q2 runs (an entry point): the delivery tasks that loops.queue enqueues, and a
worker's turn at claiming beside a clock that found a burst."""

from __future__ import annotations

from scheduler import claims, delivery


def deliver_runs(run_ids: list[str]) -> int:
    return delivery.deliver_runs(run_ids)


def claim_burst() -> int:
    return claims.claim_burst()
