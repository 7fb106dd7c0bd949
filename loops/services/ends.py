"""Loops that reach their end (contract §16, the rules in timing.ends): completed, never deleted, with
an `ended` event naming the bound; their runs and trail kept.

The claim (scheduler.claims) ends a loop it finds with nothing left to run, and the record of a
delivery (scheduler.delivery) the loop whose run was its last. These are the other ways: an
operator's change that leaves a loop no occurrence (an edit of its bounds or schedule, a resume), a
backoff that pushes its next claim past its end (scheduler.failures), and a housekeeping pass for a
loop whose ends_at passes while it is paused, or while it waits on a deadline past its end (its
bounds edited while its last run was being delivered to a remote host). The callers hold the loop
rows' locks.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q

from core.errors import InvalidInput
from core.timeutil import to_ms
from loops.events import SCHEDULER, Actor, record_event
from loops.models import EventKind, Loop, LoopRun, LoopState
from loops.runs import OPEN_STATUSES, free_rows
from loops.services.locking import has_open_run
from timing import ends

_ENDABLE = (LoopState.SCHEDULED, LoopState.RUNNING, LoopState.PAUSED)


def loop_end(loop: Loop, bound: str, *, actor: Actor = SCHEDULER, now: datetime) -> None:
    """Complete a locked loop at its bound, with the `ended` event."""
    changes = ends.ended_changes(
        bound, ends_at=loop.ends_at, max_runs=loop.max_runs, runs_delivered=loop.runs_delivered, now=now
    )
    loop.state, loop.next_at, loop.paused_at, loop.pause_reason = LoopState.COMPLETED, None, None, ""
    loop.save(update_fields=["state", "next_at", "paused_at", "pause_reason"])
    record_event(loop, EventKind.ENDED, actor, at=now, changes=changes)


def end_if_done(loop: Loop, *, actor: Actor = SCHEDULER, now: datetime) -> bool:
    """A locked, active loop whose deadline was just computed (resume, an edit, a backoff) and that
    has no occurrence left within its bounds ends now, unless a run of it is in flight: that run's
    record ends it (scheduler.delivery). True if it ended. The caller saves the loop otherwise."""
    if loop.state not in (LoopState.SCHEDULED, LoopState.RUNNING) or loop.schedule.one_shot:
        return False
    bound = ends.bound_reached(
        next_at=loop.next_at, ends_at=loop.ends_at, runs_delivered=loop.runs_delivered, max_runs=loop.max_runs
    )
    if bound is None or loop.state == LoopState.RUNNING or has_open_run(loop.loop_id):
        return False
    loop_end(loop, bound, actor=actor, now=now)
    return True


def loops_end(ending: Mapping[str, str], *, now: datetime) -> list[str]:
    """The loops whose last run a delivery record just recorded (loop ID → the bound it predicted
    from the row it read), each ended if its row, locked now, still says so: a change an operator
    made meanwhile wins. Returns the IDs ended."""
    ended = []
    for loop in Loop.objects.select_for_update().filter(loop_id__in=list(ending)).order_by("loop_id"):
        if loop.state not in _ENDABLE:
            continue
        bound = ends.bound_reached(
            next_at=loop.next_at, ends_at=loop.ends_at, runs_delivered=loop.runs_delivered, max_runs=loop.max_runs
        )
        if bound is None or (loop.state == LoopState.PAUSED and bound == ends.ENDS_AT):
            continue  # a paused loop ends when its ends_at passes (end_passed_loops)
        loop_end(loop, bound, now=now)
        ended.append(loop.loop_id)
    return ended


END_BATCH = 200  # paused loops ended per housekeeping step


def end_passed_loops(*, now: datetime, limit: int = END_BATCH) -> int:
    """contract §16: a paused loop whose ends_at has passed completes without a run, as does a
    scheduled one whose next deadline lies past it (a due one is left to the claim, which delivers
    its last occurrence). A loop with a run still open (a paused loop's run in retry, or leased to a
    remote host) waits for it: that run's record (skipped, for a paused loop) comes first, and the
    next pass ends the loop. One bounded batch (loop_ends_idx); returns how many it ended (a full
    batch: more may remain)."""
    nothing_left = Q(state=LoopState.SCHEDULED) & (Q(next_at__isnull=True) | Q(next_at__gt=F("ends_at")))
    open_run = LoopRun.objects.filter(loop_id=OuterRef("loop_id"), status__in=OPEN_STATUSES)
    with transaction.atomic(durable=True):
        due = Loop.objects.filter(Q(state=LoopState.PAUSED) | nothing_left, ends_at__lte=now).exclude(Exists(open_run))
        due = due.order_by("ends_at")
        loops = list(free_rows(due)[:limit])
        for loop in loops:
            loop_end(loop, ends.ENDS_AT, now=now)
    return len(loops)


def check_bounds(loop: Loop, *, ends_at: datetime | None, max_runs: int | None, now: datetime) -> None:
    """contract §16: a bound already passed is refused on its field (422 invalid_input). Called with
    the loop's row locked: runs_delivered cannot move under it."""
    if ends_at is not None and ends_at <= now:
        raise InvalidInput(
            f"ends_at {to_ms(ends_at)} has already passed (now is {to_ms(now)}): give a later instant, "
            "or null for no end.",
            field="ends_at",
        )
    if max_runs is not None and max_runs < 1:
        raise InvalidInput(f"max_runs must be at least 1, not {max_runs}; null for no limit.", field="max_runs")
    if max_runs is not None and ends.runs_reached(loop.runs_delivered, max_runs):
        raise InvalidInput(
            f"max_runs {max_runs} has already been reached: this loop has delivered {loop.runs_delivered} "
            f"run(s); give more than {loop.runs_delivered}, or null for no limit.",
            field="max_runs",
        )
