"""Reads of the loop registry (spec §2.2) and of run history."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import F, Q, QuerySet

from dshloop.errors import InvalidInput, UnknownLoop, UnknownSession
from sessions_app.hosts import get_host

from . import schedules
from .models import Loop, LoopRun, LoopState

GLOBAL_SELECTOR = "global"


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
        target |= Q(session_id="self")
    return _ordered(active_loops().filter(target))


def loop_list(*, selector: str | None, caller_session_id: str | None) -> QuerySet[Loop]:
    """The three spec §2.2 forms: {} (caller), {"session_id": "global"}, {"session_id": X}."""
    from .services import require_caller  # the same rule as loop_create

    if selector is None:
        caller = require_caller(caller_session_id)
        if get_host().get_session(caller) is None:
            # As loop_create {} does: an unknown caller is a mistake to name, not an empty list.
            raise UnknownSession(f"The host knows no session {caller!r}; list_sessions shows the ones it knows.")
        return loops_targeting(caller)
    if selector == GLOBAL_SELECTOR:
        return _ordered(active_loops())
    if selector in {"self", "new"}:
        raise InvalidInput(
            f"'{selector}' is a loop_create target, not a list scope; use {{}} for your session, "
            "\"global\" for all loops, or a session ID.",
            field="session_id",
        )
    return loops_targeting(selector)


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
        catch_up = schedules.catch_up(loop.schedule, created_at=loop.created_at, due_at=start, now=now,
                                      host_tz=settings.TIME_ZONE)
        times.append(catch_up.deliver_at)
        if catch_up.next_at is None or count == 1:
            return times
        start = catch_up.next_at
    return times + schedules.upcoming(loop.schedule, created_at=loop.created_at, start=start,
                                      count=count - len(times), host_tz=settings.TIME_ZONE)


def active_loops_in_quota(*, target: str, created_by: str | None) -> int:
    """How many active loops count against the quota a new loop for `target` would join (issue 12).

    An actual session ID: the active loops whose target is that session. "new" and "self" name no
    session that could answer for them, so they are counted per creator: the active "new" and "self"
    loops `created_by` created, together (one bucket, so alternating the two does not double it).
    Each count is one index range: the session_id index, or loop_creator_idx.
    """
    if target in {"new", "self"}:
        loops = active_loops().filter(created_by_session_id=created_by, session_id__in=["new", "self"])
    else:
        loops = active_loops().filter(session_id=target)
    return loops.count()
