"""What operators do to a loop (contract §9): pause and resume, run now, edit, retry.

Agents keep the spec's three loop tools; these are for people (the panel, the admin) and the
operator REST API (scope `manage`), which all call these functions. Each is one transaction that
locks the loop's row first (PostgreSQL; SQLite's IMMEDIATE transactions serialize writers), so
it is ordered with the clock's claim of the same loop: an operation never races a claim into a
double delivery or a lost update. Each records an event (loops.events) with its actor.

Each reads the clock once it holds the lock, and that moment is the event's `at` and every time
the change writes (paused_at, a run's claimed_at, the grid of a new schedule): read before the
lock, an operation that waited for another would be timed before the change it waited for, so
the trail's order by time would not be its order by revision. `now` overrides the clock (tests).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput, LoopCompleted, NotFailed, RunInFlight, UnknownLoop
from core.timeutil import truncate_to_ms
from loops import schedules
from loops.events import Actor, record_event
from loops.models import EventKind, Loop, LoopRun, LoopState, RunStatus, ScheduleKind
from loops.notify import notify_clocks
from loops.presenters import schedule_view
from loops.queue import enqueue_deliveries
from loops.runs import OPEN_STATUSES, lease, manual_occurrence_key, new_run_id
from loops.services import check_loop_quota, check_target, lock_quota_count
from sessions_app.models import ReservedTarget

OPERATOR = "operator"  # contract §9 pause_reason of a pause a person asked for (scheduler.failures: "auto: …")


def _now(now: datetime | None) -> datetime:
    """The moment a change takes effect: call it with the loop's row locked (module docstring)."""
    return truncate_to_ms(now or timezone.now())


def _locked(loop_id: str) -> Loop:
    """The loop, its row locked until the transaction ends (waiting for a claim that holds it)."""
    loop = Loop.objects.select_for_update().filter(loop_id=loop_id).first()
    if loop is None:
        raise UnknownLoop(f"No loop {loop_id!r}; loop_list shows the loops that exist.", field="loop_id")
    return loop


def _has_open_run(loop_id: str) -> bool:
    return LoopRun.objects.filter(loop_id=loop_id, status__in=OPEN_STATUSES).exists()


def _next_after(loop: Loop, now: datetime) -> datetime | None:
    """contract §9 resume: the first occurrence strictly after now; a one-shot already due fires now."""
    if loop.kind == ScheduleKind.AFTER:
        due = schedules.first_occurrence(loop.schedule, created_at=loop.anchor, host_tz=settings.TIME_ZONE)
        return now if due is None or due <= now else due
    return schedules.next_occurrence(loop.schedule, created_at=loop.anchor, after=now, host_tz=settings.TIME_ZONE)


def loop_pause(*, loop_id: str, actor: Actor, now: datetime | None = None) -> Loop:
    """Never claimed again until resumed; a run already in flight finishes. Idempotent."""
    with transaction.atomic(durable=True):
        loop = _locked(loop_id)
        now = _now(now)
        if loop.state == LoopState.PAUSED:
            return loop
        if loop.state == LoopState.COMPLETED:
            raise InvalidInput(f"{loop_id} is completed: it has no occurrence left to pause.", field="loop_id")
        loop.state, loop.next_at, loop.paused_at, loop.pause_reason = LoopState.PAUSED, None, now, OPERATOR
        loop.save(update_fields=["state", "next_at", "paused_at", "pause_reason"])
        record_event(loop, EventKind.PAUSED, actor, at=now)
    transaction.on_commit(notify_clocks)
    return loop


def loop_resume(*, loop_id: str, actor: Actor, now: datetime | None = None) -> Loop:
    """Scheduled again from now: nothing that fell due while paused is delivered or counted as
    missed (the first occurrence strictly after now), except a one-shot whose time passed, which
    fires once. Idempotent."""
    with transaction.atomic(durable=True):
        loop = _locked(loop_id)
        now = _now(now)
        if loop.state != LoopState.PAUSED:
            return loop
        # One run in flight per loop: with a run still open, the clock waits for it to finish.
        loop.state = LoopState.RUNNING if _has_open_run(loop_id) else LoopState.SCHEDULED
        loop.next_at, loop.paused_at, loop.pause_reason = _next_after(loop, now), None, ""
        # A fresh start: an operator who resumes an auto-paused loop has looked at it (issue 16).
        loop.consecutive_failures = 0
        loop.save(update_fields=["state", "next_at", "paused_at", "pause_reason", "consecutive_failures"])
        record_event(loop, EventKind.RESUMED, actor, at=now)
    transaction.on_commit(notify_clocks)
    return loop


def loop_run_now(*, loop_id: str, actor: Actor, now: datetime | None = None) -> LoopRun:
    """One manual occurrence through the same delivery path, now; next_at is not moved. Refused
    while the loop has a run open (one run in flight per loop). Works on paused loops."""
    with transaction.atomic(durable=True):
        loop = _locked(loop_id)
        if loop.state == LoopState.RUNNING or _has_open_run(loop_id):
            raise RunInFlight(f"{loop_id} has a run in flight; run it again once that one has finished.")
        # After the check that the previous run has finished: this one is claimed after that.
        now = _now(now)
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
        run.prompt = loop.prompt  # its revision's, stored by save()
        run.save(force_insert=True)
        if loop.state == LoopState.SCHEDULED:
            # The clock does not claim it while the manual run is open; it is scheduled again after.
            Loop.objects.filter(loop_id=loop_id).update(state=LoopState.RUNNING)
        record_event(loop, EventKind.RUN_NOW, actor, at=now)
        enqueue_deliveries([run_id])
    return run


def loop_retry(*, loop_id: str, actor: Actor, now: datetime | None = None) -> Loop:
    """A failed loop (spec §4 "retryable") fires once, now."""
    with transaction.atomic(durable=True):
        loop = _locked(loop_id)
        now = _now(now)
        if loop.state != LoopState.FAILED:
            raise NotFailed(f"{loop_id} is {loop.state}, not failed: only a failed loop can be retried.")
        loop.state, loop.next_at = LoopState.SCHEDULED, now
        loop.save(update_fields=["state", "next_at"])
        record_event(loop, EventKind.RETRIED, actor, at=now)
    transaction.on_commit(notify_clocks)
    return loop


EDITABLE = ("name", "prompt", "schedule", "target", "preset")


def loop_edit(*, loop_id: str, changes: dict, actor: Actor, now: datetime | None = None) -> Loop:
    """Edit any of name, prompt, schedule (a schedules.Schedule), target and preset, validated as
    loop_create validates them. A new schedule or target recomputes next_at from now (the grid
    starts again there); a new prompt or name does not. Each edit that changes something
    increments the revision; a run already in flight finishes with its old one.

    A completed loop is refused: 409 loop_completed (pause refuses it too). A failed loop given a new schedule or
    target is scheduled again from now; a new prompt or name alone leaves it failed, for a retry
    to fire."""
    unknown = set(changes) - set(EDITABLE)
    assert not unknown, unknown
    with transaction.atomic(durable=True):
        loop = _locked(loop_id)  # `before` is read from it: the revision this edit follows
        now = _now(now)
        if loop.state == LoopState.COMPLETED:
            # As pause: a completed one-shot stays history. Rewriting it would record a change
            # that never runs; re-arming it would fire a one-shot twice.
            raise LoopCompleted(
                f"{loop_id} is completed: it has no occurrence left to edit. Create a new loop "
                "(loop_create) to run it again.",
                field="loop_id",
            )
        before = _editable(loop)
        target = changes.get("target", loop.session_id)
        preset = changes["preset"] if "preset" in changes else (loop.preset or None)
        if target != ReservedTarget.NEW and "preset" not in changes:
            preset = None  # a preset goes with "new" only: leaving "new" drops it
        if "target" in changes or "preset" in changes:
            check_target(target=target, preset=preset)
        if target != loop.session_id:
            lock_quota_count(target=target, creator=loop.created_by_session_id)
            check_loop_quota(target=target, creator=loop.created_by_session_id)
        if "name" in changes:
            loop.name = changes["name"] or ""
        if "prompt" in changes:
            loop.prompt = changes["prompt"]
        if "schedule" in changes:
            schedule = changes["schedule"]
            loop.kind = schedule.kind
            loop.every_seconds = getattr(schedule, "every_seconds", None)
            loop.after_seconds = getattr(schedule, "after_seconds", None)
            loop.cron_expr = getattr(schedule, "expr", "")
            loop.tz = getattr(schedule, "tz", None) or ""
        loop.session_id, loop.preset = target, preset or ""
        after = _editable(loop)
        edited = {field: [before[field], after[field]] for field in after if before[field] != after[field]}
        if not edited:
            return loop
        if {"schedule", "session_id"} & edited.keys():
            loop.schedule_from = now
            if loop.state == LoopState.FAILED:
                # A failed loop is retryable (spec §4); a new schedule or target is the fix an
                # operator makes, so it is scheduled again on it, as any loop that is not paused.
                loop.state = LoopState.RUNNING if _has_open_run(loop_id) else LoopState.SCHEDULED
            if loop.state in (LoopState.SCHEDULED, LoopState.RUNNING):
                loop.next_at = schedules.first_occurrence(loop.schedule, created_at=now, host_tz=settings.TIME_ZONE)
        loop.revision += 1
        loop.full_clean(validate_unique=False)
        loop.save()
        record_event(loop, EventKind.EDITED, actor, at=now, changes=edited)
    transaction.on_commit(notify_clocks)
    return loop


def _editable(loop: Loop) -> dict:
    """The edited fields as the API shows them (contract §9 changes: {field: [old, new]})."""
    return {
        "name": loop.name or None,
        "prompt": loop.prompt,
        "schedule": schedule_view(loop),
        "session_id": loop.session_id,
        "preset": loop.preset or None,
    }
