"""A loop's row locked for a change, and the moment the change takes effect.

Each change reads the clock once it holds the lock, and that moment is the event's `at` and every
time the change writes (paused_at, a run's claimed_at, the grid of a new schedule): read before the
lock, an operation that waited for another would be timed before the change it waited for, so the
trail's order by time would not be its order by revision. `now` overrides the clock (tests).
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from core.errors import LoopCompleted, UnknownLoop
from core.timeutil import truncate_to_ms
from loops.models import Loop, LoopRun, LoopState
from loops.runs import OPEN_STATUSES


def effective_now(now: datetime | None) -> datetime:
    """The moment a change takes effect: call it with the loop's row locked."""
    return truncate_to_ms(now or timezone.now())


def locked_loop(loop_id: str) -> Loop:
    """The loop, its row locked until the transaction ends (waiting for a claim that holds it)."""
    loop = Loop.objects.select_for_update().filter(loop_id=loop_id).first()
    if loop is None:
        raise UnknownLoop(f"No loop {loop_id!r}; loop_list shows the loops that exist.", field="loop_id")
    return loop


def has_open_run(loop_id: str) -> bool:
    return LoopRun.objects.filter(loop_id=loop_id, status__in=OPEN_STATUSES).exists()


def refuse_completed(loop: Loop, *, doing: str) -> None:
    """409 loop_completed for a change to a completed loop (a one-shot that fired): it is history.
    A change would record something that never runs, or fire a one-shot twice. The same answer
    for every change it refuses (edit, pause), in REST, the panel and the admin."""
    if loop.state == LoopState.COMPLETED:
        raise LoopCompleted(
            f"{loop.loop_id} is completed: it has no occurrence left to {doing}. Create a new loop "
            "(loop_create) to run it again.",
            field="loop_id",
        )
