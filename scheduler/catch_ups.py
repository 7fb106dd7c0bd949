"""What a claim decides for one due loop, before anything is written: its occurrence's run (the
latest due one, the others folded into `missed`), whether it is delivered, skipped for the misfire
grace or for a `new` loop's bounds, and where the loop goes next (scheduler.claims writes it)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings

from loops.humanize import short_span
from loops.models import Loop, LoopState, Overlap, RunStatus
from loops.runs import lease, new_run_id, occurrence_key
from scheduler.rows import NewRun
from scheduler.unattended import Capacity, capacity_reason, overlap_reason
from timing import ends, schedules


def new_run(loop: Loop, *, scheduled_at: datetime, now: datetime, missed: int = 0) -> NewRun:
    return NewRun(
        run_id=new_run_id(),
        loop_id=loop.loop_id,
        occurrence_key=occurrence_key(loop.loop_id, scheduled_at),
        scheduled_at=scheduled_at,
        status=RunStatus.CLAIMED,
        attempt=1,  # handed out to a driver by the claim's enqueue (scheduler.delivery: attempts)
        missed=missed,
        target=loop.session_id,
        claimed_at=now,
        retry_at=now + lease(),
        revision=loop.revision,
    )


def deadline(loop: Loop) -> datetime:
    """The deadline a claim takes: every due loop has one (next_at <= now)."""
    assert loop.next_at is not None, loop.loop_id
    return loop.next_at


def finish_unsent(run: NewRun, status: str, error: str, now: datetime) -> None:
    """A run that is recorded finished at its claim and never handed to a driver."""
    run.status, run.error, run.finished_at, run.retry_at, run.attempt = status, error, now, None, 0


def _misfire(late: timedelta, grace: int | None, *, one_shot: bool) -> str | None:
    """Why a catch-up this late is not delivered, or None to deliver it (contract §10,
    DSHLOOP_MISFIRE_GRACE_SECONDS; unset: the spec's one catch-up however late)."""
    if grace is None or late <= timedelta(seconds=grace):
        return None
    # Rounded up, so the lateness shown is never the grace itself.
    late_words = short_span(math.ceil(late.total_seconds()))
    then = (
        "a one-shot loop has no next occurrence: retry it to deliver it now"
        if one_shot
        else "the loop goes on with its next occurrence"
    )
    return (
        f"Not delivered: {late_words} late, beyond the misfire grace of {grace} s "
        f"(DSHLOOP_MISFIRE_GRACE_SECONDS); {then}."
    )


def advance(loop: Loop, now: datetime) -> tuple[NewRun | None, str | None]:
    """spec §3 anti-burst: deliver the latest due occurrence only, fold the rest into `missed`.

    With DSHLOOP_MISFIRE_GRACE_SECONDS set, a catch-up later than the grace is not delivered: the
    run is returned already `skipped` (the reason in `error`, itself counted in `missed`) and the
    loop goes on with its next occurrence; a one-shot has none, so it fails (retryable).

    contract §16 (timing.ends): the catch-up looks no further than the loop's ends_at, so its run is
    the last occurrence before the end however long the downtime. A loop with nothing left to run
    (a deadline past its end, its max_runs delivered) returns no run, completed; the second item
    names the bound that completed the loop (its `ended` event), else None. A run whose next
    occurrence lies past the end is the loop's last: its record ends the loop
    (scheduler.delivery); one skipped here for the misfire grace ends it now."""
    due_at = deadline(loop)
    bound = ends.bound_reached(
        next_at=due_at, ends_at=loop.ends_at, runs_delivered=loop.runs_delivered, max_runs=loop.max_runs
    )
    if bound is not None:
        _end_loop(loop)
        return None, bound
    timing = loop.timing
    catch_up = schedules.catch_up(
        timing,
        created_at=loop.anchor,
        due_at=due_at,
        now=ends.catch_up_until(now, loop.ends_at),
        host_tz=settings.TIME_ZONE,
    )
    run = new_run(loop, scheduled_at=catch_up.deliver_at, now=now, missed=catch_up.missed)
    one_shot = timing.one_shot
    loop.next_at = None if one_shot else catch_up.next_at
    reason = _misfire(now - catch_up.deliver_at, settings.DSHLOOP_MISFIRE_GRACE_SECONDS, one_shot=one_shot)
    if reason is None:
        loop.state = LoopState.RUNNING
        return run, None
    finish_unsent(run, RunStatus.SKIPPED, reason, now)
    run.missed += 1  # the occurrences this outage cost: the folded ones and this one
    loop.state = LoopState.FAILED if one_shot else LoopState.SCHEDULED
    if not one_shot and ends.past_end(loop.next_at, loop.ends_at):
        _end_loop(loop)
        return run, ends.ENDS_AT
    return run, None


def _end_loop(loop: Loop) -> None:
    """Mark a claimed loop completed; claim_due writes it with the others, and its `ended` event."""
    loop.state, loop.next_at = LoopState.COMPLETED, None


def bound_fresh_run(loop: Loop, run: NewRun, due_at: datetime | None, now: datetime, capacity: Capacity) -> bool:
    """contract §14 for an occurrence of a `new` loop: skipped while its last run runs (overlap
    `skip`); delivered if a slot for a fresh agent is free; else it waits (returns False, and the
    loop keeps its deadline) or, past the misfire grace, is skipped. True: the run goes ahead,
    delivered or recorded skipped."""
    one_shot = loop.schedule.one_shot
    if run.status == RunStatus.SKIPPED:  # a misfire: beyond the grace already
        if not capacity.has_free():
            run.error = capacity_reason(now - run.scheduled_at)
        return True
    if loop.overlap == Overlap.SKIP and (reason := overlap_reason(loop.loop_id, now=now)):
        finish_unsent(run, RunStatus.SKIPPED, reason, now)
        loop.state = LoopState.FAILED if one_shot else LoopState.SCHEDULED
        return True
    if capacity.take():
        return True
    loop.next_at, loop.state = due_at, LoopState.SCHEDULED
    capacity.waiting += 1
    return False
