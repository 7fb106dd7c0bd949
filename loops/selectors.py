"""Reads of the loop registry (spec §2.2) and of run history."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import F, Q, QuerySet

from dshloop.errors import InvalidInput, UnknownLoop
from sessions_app.hosts import get_host
from sessions_app.models import ReservedTarget

from . import schedules
from .models import Loop, LoopRun, LoopState


def _ordered(loops: QuerySet[Loop]) -> QuerySet[Loop]:
    # contract §3: by next_at (absent last), then created_at; loop_id makes ties stable.
    return loops.order_by(F("next_at").asc(nulls_last=True), "created_at", "loop_id")


def active_loops() -> QuerySet[Loop]:
    # spec §4: completed `after` loops keep their history but leave the active list.
    return Loop.objects.exclude(state=LoopState.COMPLETED)


def loops_targeting(session_id: str) -> QuerySet[Loop]:
    """Active loops that deliver to one session, including `self` loops for the global interface."""
    target = Q(session_id=session_id)
    global_session = get_host().global_session()
    if global_session and global_session.session_id == session_id:
        target |= Q(session_id=ReservedTarget.SELF)
    return _ordered(active_loops().filter(target))


def loop_list(*, scope: str) -> QuerySet[Loop]:
    """spec §2.2: every active loop (scope "global"), or those that deliver to one session."""
    if scope == ReservedTarget.GLOBAL:
        return _ordered(active_loops())
    if scope in {ReservedTarget.SELF, ReservedTarget.NEW}:
        raise InvalidInput(
            f"'{scope}' is a loop_create target, not a list scope; use {{}} for your session, "
            '"global" for all loops, or a session ID.',
            field="session_id",
        )
    return loops_targeting(scope)


def loop_get(loop_id: str) -> Loop:
    loop = Loop.objects.filter(loop_id=loop_id).first()
    if loop is None:
        raise UnknownLoop(f"No loop {loop_id!r}; loop_list shows the loops that exist.", field="loop_id")
    return loop


def loop_runs(loop_id: str, *, limit: int) -> QuerySet[LoopRun]:
    """Newest first. Runs outlive their loop, so an unknown loop with history still answers."""
    runs = LoopRun.objects.filter(loop_id=loop_id).order_by("-scheduled_at", "-claimed_at")[:limit]
    if not runs and not Loop.objects.filter(loop_id=loop_id).exists():
        raise UnknownLoop(f"No loop {loop_id!r} and no runs recorded for it.", field="loop_id")
    return runs


def fire_times(loop: Loop, *, now: datetime, count: int) -> list[datetime]:
    """The next `count` fire times, as the scheduler will use them (contract §4)."""
    if loop.next_at is None or loop.state in {LoopState.COMPLETED, LoopState.FAILED}:
        return []
    start = loop.next_at
    times = []
    if start <= now:
        # Overdue: the clock will deliver one catch-up occurrence now (spec §3 anti-burst).
        catch_up = schedules.catch_up(
            loop.schedule, created_at=loop.anchor, due_at=start, now=now, host_tz=settings.TIME_ZONE
        )
        times.append(catch_up.deliver_at)
        if catch_up.next_at is None or count == 1:
            return times
        start = catch_up.next_at
    return times + schedules.upcoming(
        loop.schedule, created_at=loop.anchor, start=start, count=count - len(times), host_tz=settings.TIME_ZONE
    )


def active_loops_in_quota(*, target: str, created_by: str | None) -> int:
    """How many active loops count against the quota a new loop for `target` would join (issue 12).

    An actual session ID: the active loops whose target is that session. "new" and "self" name no
    session that could answer for them, so they are counted per creator: the active "new" and "self"
    loops `created_by` created, together (one bucket, so alternating the two does not double it).
    Each count is one index range: the session_id index, or loop_creator_idx.
    """
    per_creator = [ReservedTarget.NEW, ReservedTarget.SELF]
    if target in per_creator:
        loops = active_loops().filter(created_by_session_id=created_by, session_id__in=per_creator)
    else:
        loops = active_loops().filter(session_id=target)
    return loops.count()
