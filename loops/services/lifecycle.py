"""What moves a loop through its states (contract §9, spec §2.3): pause and resume, run now,
retry, delete. Agents keep the spec's three loop tools; these are for people (the panel, the admin)
and the operator REST API (scope `manage`); loop_delete is also the loop_delete tool's.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction

from core.errors import NotFailed, RunInFlight
from core.notify import notify_clocks
from loops.events import Actor, record_event
from loops.models import (
    AWAITING_APPROVAL,
    DeletedLoop,
    EventKind,
    Loop,
    LoopRun,
    LoopState,
    RunStatus,
    keep_revision_prompt,
)
from loops.queue import enqueue_deliveries
from loops.runs import lease, manual_occurrence_key, new_run_id
from loops.services.create import refuse_unvouched_approval
from loops.services.ends import end_if_done
from loops.services.locking import effective_now, has_open_run, locked_loop, refuse_completed
from loops.services.unclaimed import DELETED, PAUSED, unclaimed
from timing import schedules

OPERATOR = "operator"  # contract §9 pause_reason of a pause a person asked for (scheduler.failures: "auto: …")


def _next_after(loop: Loop, now: datetime) -> datetime | None:
    """contract §9 resume: the first occurrence strictly after now; a one-shot already due fires now."""
    if loop.timing.one_shot:
        due = schedules.first_occurrence(loop.timing, created_at=loop.anchor, host_tz=settings.TIME_ZONE)
        return now if due is None or due <= now else due
    return schedules.next_occurrence(loop.timing, created_at=loop.anchor, after=now, host_tz=settings.TIME_ZONE)


def loop_pause(*, loop_id: str, actor: Actor, now: datetime | None = None) -> Loop:
    """Never claimed again until resumed; a run already in flight finishes. Idempotent. A
    recurring loop's occurrences that were due and not yet claimed (waiting for a free slot, say)
    are recorded skipped: resume starts after now, so they would never be delivered. A one-shot
    keeps its occurrence: resume fires it."""
    with transaction.atomic(durable=True):
        loop = locked_loop(loop_id)
        now = effective_now(now)
        if loop.state == LoopState.PAUSED:
            return loop
        refuse_completed(loop, doing="pause")
        if not loop.schedule.one_shot and (waiting := unclaimed(loop, now=now)):
            waiting.record(change=PAUSED, now=now)
        loop.state, loop.next_at, loop.paused_at, loop.pause_reason = LoopState.PAUSED, None, now, OPERATOR
        loop.save(update_fields=["state", "next_at", "paused_at", "pause_reason"])
        record_event(loop, EventKind.PAUSED, actor, at=now)
    transaction.on_commit(notify_clocks)
    return loop


def loop_resume(*, loop_id: str, actor: Actor, now: datetime | None = None, vouched: bool = True) -> Loop:
    """Scheduled again from now: nothing that fell due while paused is delivered or counted as
    missed (the first occurrence strictly after now), except a one-shot whose time passed, which
    fires once. The resume of a loop awaiting approval is recorded as its approval. Idempotent.
    contract §16: a loop left with no occurrence before its end (its ends_at passed while it was
    paused, or comes before its next occurrence) is completed instead, with an `ended` event."""
    with transaction.atomic(durable=True):
        loop = locked_loop(loop_id)
        now = effective_now(now)
        if loop.state != LoopState.PAUSED:
            return loop
        refuse_unvouched_approval(loop, vouched=vouched, doing="approve")  # contract §14: a person's
        approved = loop.pause_reason == AWAITING_APPROVAL  # its first resume is a person's approval
        # One run in flight per loop: with a run still open, the clock waits for it to finish.
        loop.state = LoopState.RUNNING if has_open_run(loop_id) else LoopState.SCHEDULED
        loop.next_at, loop.paused_at, loop.pause_reason = _next_after(loop, now), None, ""
        # A fresh start: an operator who resumes an auto-paused loop has looked at it.
        loop.consecutive_failures = 0
        if end_if_done(loop, actor=actor, now=now):
            return loop
        loop.save(update_fields=["state", "next_at", "paused_at", "pause_reason", "consecutive_failures"])
        record_event(loop, EventKind.APPROVED if approved else EventKind.RESUMED, actor, at=now)
    transaction.on_commit(notify_clocks)
    return loop


def loop_run_now(*, loop_id: str, actor: Actor, now: datetime | None = None, vouched: bool = True) -> LoopRun:
    """One manual occurrence through the same delivery path, now; next_at is not moved. Refused
    while the loop has a run open (one run in flight per loop). Works on paused loops."""
    with transaction.atomic(durable=True):
        loop = locked_loop(loop_id)
        refuse_unvouched_approval(loop, vouched=vouched, doing="run")  # a run would skip the approval
        if loop.state == LoopState.RUNNING or has_open_run(loop_id):
            raise RunInFlight(f"{loop_id} has a run in flight; run it again once that one has finished.")
        # After the check that the previous run has finished: this one is claimed after that.
        now = effective_now(now)
        run_id = new_run_id()
        run = LoopRun(
            run_id=run_id,
            loop_id=loop_id,
            occurrence_key=manual_occurrence_key(loop_id, run_id),
            scheduled_at=now,
            status=RunStatus.CLAIMED,
            attempt=1,  # handed out by the enqueue below (scheduler.delivery: attempts)
            target=loop.session_id,
            claimed_at=now,
            retry_at=now + lease(),
            revision=loop.revision,
            manual=True,
        )
        run.save(force_insert=True)
        if loop.state == LoopState.SCHEDULED:
            # The clock does not claim it while the manual run is open; it is scheduled again after.
            Loop.objects.filter(loop_id=loop_id).update(state=LoopState.RUNNING)
        record_event(loop, EventKind.RUN_NOW, actor, at=now)
        enqueue_deliveries([run_id])
    return run


def loop_retry(*, loop_id: str, actor: Actor, now: datetime | None = None) -> Loop:
    """A failed loop (spec §4 "retryable") fires once, now. Refused (409 run_in_flight), as run now
    is, while the loop has a run open (a run now of the failed loop): one run in flight per loop, and
    "now" cannot be kept. Scheduling it anyway would let a clock claim a second run beside the open
    one; deferring it until that run ends (as resume does) would deliver the one-shot twice when the
    operator's test run succeeds. Once that run has finished, the loop, still failed, can be retried."""
    with transaction.atomic(durable=True):
        loop = locked_loop(loop_id)
        now = effective_now(now)
        if loop.state != LoopState.FAILED:
            raise NotFailed(f"{loop_id} is {loop.state}, not failed: only a failed loop can be retried.")
        if has_open_run(loop_id):
            raise RunInFlight(f"{loop_id} has a run in flight; retry it once that one has finished.")
        loop.state, loop.next_at = LoopState.SCHEDULED, now
        loop.save(update_fields=["state", "next_at"])
        record_event(loop, EventKind.RETRIED, actor, at=now)
    transaction.on_commit(notify_clocks)
    return loop


def loop_delete(*, loop_id: str, actor: Actor, now: datetime | None = None) -> str:
    """Delete by globally unique ID, from any caller (spec §2.3). Run history and events stay, and
    what the runs need of the loop (its target and name: DeletedLoop);
    occurrences that were due and not yet claimed are recorded skipped (loops.services.unclaimed).

    Of deletes racing for one loop exactly one deletes it and records the event; the others answer
    unknown_loop. The row is locked first: on PostgreSQL a delete that waited for another finds the
    row gone once that one commits (without the lock both read it, and the second DELETE matched
    nothing yet still answered and recorded a deletion); SQLite's IMMEDIATE transactions serialize.
    The event's time is read after the lock (loops.services.locking); `now` overrides it (tests)."""
    with transaction.atomic():
        loop = locked_loop(loop_id)
        now = effective_now(now)
        if waiting := unclaimed(loop, now=now):
            waiting.record(change=DELETED, now=now)  # before the prompt is kept: its run refers to it
        keep_revision_prompt(loop_id)  # its runs read it from the loop until now
        DeletedLoop.remember(loop, at=now)  # its runs are still found and shown as a deleted loop's
        Loop.objects.filter(loop_id=loop_id).delete()
        record_event(loop, EventKind.DELETED, actor, at=now)
    transaction.on_commit(notify_clocks)
    return loop_id
