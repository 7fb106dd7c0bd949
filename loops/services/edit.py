"""Editing a loop (contract §9 PATCH): any of name, prompt, schedule, target and preset, a `new`
loop's workspace, permission preset and overlap (§14), and where it ends (§16)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput
from core.notify import notify_clocks
from core.timeutil import from_ms, to_ms, truncate_to_ms
from loops.events import Actor, record_event
from loops.models import AWAITING_APPROVAL, EventKind, Loop, LoopState, Overlap, keep_revision_prompt
from loops.presenters import schedule_view
from loops.schemas import LoopPatchIn
from loops.selectors import loop_get
from loops.services.create import check_interval, check_loop_quota, check_target, lock_quota_count, needs_approval
from loops.services.ends import check_bounds, end_if_done
from loops.services.locking import effective_now, has_open_run, locked_loop, refuse_completed
from loops.services.unattended import (
    UNATTENDED_FIELDS,
    check_permission_preset,
    check_workspace,
    unattended_defaults,
)
from loops.services.unclaimed import unclaimed
from sessions_app.models import ReservedTarget
from timing import schedules
from timing.schedule_gaps import shortest_gap

BOUNDS = ("ends_at", "max_runs")  # contract §16
EDITABLE = ("name", "prompt", "schedule", "target", "preset", *UNATTENDED_FIELDS, *BOUNDS)


def loop_edit(*, loop_id: str, changes: dict, actor: Actor, now: datetime | None = None, vouched: bool = True) -> Loop:
    """Edit any of name, prompt, schedule (a schedules.Schedule), target and preset, validated as
    loop_create validates them. A new schedule or target recomputes next_at from now (the grid
    starts again there); a new prompt or name does not. Each edit that changes something
    increments the revision; a run already in flight finishes with its old one.

    A workspace the host can tell it could not use is refused on its field (check_workspace), and
    one given is stored normalised (LoopPatchIn). A completed loop is refused: 409 loop_completed
    (pause refuses it too). A failed loop given a new schedule or
    target is scheduled again from now; a new prompt or name alone leaves it failed, for a retry
    to fire. Occurrences the old grid had due and no claim had taken are recorded skipped
    (loops.services.unclaimed).

    contract §16: `ends_at` (an aware datetime) and `max_runs` set the loop's bounds (None clears
    one); a bound already passed is refused on its field (422). An edit that leaves the loop no
    occurrence before its end completes it at once (an `ended` event after the `edited` one), or,
    with a run in flight, when that run is recorded.

    contract §14: an edit that widens a `new` loop (_widens: makes it `new`, changes what its runs do,
    or lets them come more often or for longer) by a caller whose new loops await approval
    (create.needs_approval: `vouched` false, DSH Web) leaves it paused awaiting approval, as if that
    caller had created it so."""
    unknown = set(changes) - set(EDITABLE)
    assert not unknown, unknown
    # The host first, before the loop's row is locked: the scheduler's claim of this loop waits on
    # that lock, and a slow host must not hold it (check, then record). What it says stays true
    # under the lock: a directory's state, and the creator's workspace (a loop's creator never changes).
    current = loop_get(loop_id)  # an unknown loop: 404, before anything else
    check_workspace(changes.get("workspace"))
    becoming_new = None
    if changes.get("target") == ReservedTarget.NEW and current.session_id != ReservedTarget.NEW:
        becoming_new = unattended_defaults(creator=current.created_by_session_id)
    with transaction.atomic(durable=True):
        loop = locked_loop(loop_id)  # `before` is read from it: the revision this edit follows
        now = effective_now(now)
        refuse_completed(loop, doing="edit")
        check_bounds(loop, ends_at=changes.get("ends_at"), max_runs=changes.get("max_runs"), now=now)
        before = _editable(loop)
        was_target, was_schedule = loop.session_id, loop.schedule
        # Read before the edit changes the loop it is read from, if the edit may start a new grid.
        waiting = unclaimed(loop, now=now) if {"schedule", "target"} & changes.keys() else None
        target = changes.get("target", loop.session_id)
        preset = changes["preset"] if "preset" in changes else (loop.preset or None)
        if target != ReservedTarget.NEW and "preset" not in changes:
            preset = None  # a preset goes with "new" only: leaving "new" drops it
        if "target" in changes or "preset" in changes:
            check_target(target=target, preset=preset)
        if "target" in changes or "schedule" in changes:
            check_interval(schedule=changes.get("schedule", loop.schedule), target=target, now=now)
        if target != loop.session_id:
            lock_quota_count(target=target, creator=loop.created_by_session_id)
            check_loop_quota(target=target, creator=loop.created_by_session_id)
        _edit_unattended(loop, changes, target=target, becoming_new=becoming_new)
        if "name" in changes:
            loop.name = changes["name"] or ""
        if "prompt" in changes:
            loop.prompt = changes["prompt"]
        if "schedule" in changes:
            loop.schedule = changes["schedule"]
        for bound in BOUNDS:
            if bound in changes:
                setattr(loop, bound, changes[bound])
        loop.session_id, loop.preset = target, preset or ""
        after = _editable(loop)
        edited = {field: [before[field], after[field]] for field in after if before[field] != after[field]}
        if not edited:
            return loop
        if regridded := {"schedule", "session_id"} & edited.keys():
            if waiting is not None:
                # The grid starts again from now: what the old one had due is never claimed.
                waiting.record(change=_given_new(regridded), now=now)
            loop.schedule_from = now
            if loop.state == LoopState.FAILED:
                # A failed loop is retryable (spec §4); a new schedule or target is the fix an
                # operator makes, so it is scheduled again on it, as any loop that is not paused.
                loop.state = LoopState.RUNNING if has_open_run(loop_id) else LoopState.SCHEDULED
            if loop.state in (LoopState.SCHEDULED, LoopState.RUNNING):
                loop.next_at = schedules.first_occurrence(loop.timing, created_at=now, host_tz=settings.TIME_ZONE)
        held = (
            needs_approval(target=target, actor=actor, vouched=vouched)
            and loop.pause_reason != AWAITING_APPROVAL
            and _widens(loop, edited, was_target=was_target, was_schedule=was_schedule, now=now)
        )
        if held:  # in this transaction: no claim can see it widened and not held
            loop.state, loop.next_at, loop.paused_at, loop.pause_reason = (
                LoopState.PAUSED,
                None,
                now,
                AWAITING_APPROVAL,
            )
        keep_revision_prompt(loop_id)  # the runs of the revision the loop leaves read it from here on
        loop.revision += 1
        loop.full_clean(validate_unique=False)
        loop.save()
        record_event(loop, EventKind.EDITED, actor, at=now, changes=edited)
        if held:
            record_event(loop, EventKind.PAUSED, actor, at=now)
        end_if_done(loop, actor=actor, now=now)
    transaction.on_commit(notify_clocks)
    return loop


# What a `new` loop's fresh runs do: an approval was given for these as they were.
_APPROVED_WORK = {"prompt", "preset", "workspace", "permission_preset"}


def _widens(loop: Loop, edited: dict, *, was_target: str, was_schedule: schedules.Schedule, now: datetime) -> bool:
    """Whether an edit (`edited`: {field: [old, new]}) lets a `new` loop run fresh sessions it was
    not approved for: it became `new`; what its runs do changed (prompt, preset, workspace,
    permission preset); or they may come more often, or more of them: a shorter gap (a one-shot
    made recurring counts), overlap made `allow`, a later or no end (ends_at, max_runs)."""
    if loop.session_id != ReservedTarget.NEW:
        return False
    if was_target != ReservedTarget.NEW or _APPROVED_WORK & edited.keys():
        return True
    if edited.get("overlap", [None, None])[1] == Overlap.ALLOW:
        return True
    for bound in BOUNDS:
        if bound in edited:
            old, new = edited[bound]
            if old is not None and (new is None or new > old):
                return True
    after = shortest_gap(loop.schedule, now=now, host_tz=settings.TIME_ZONE)
    if after is None:
        return False
    before = shortest_gap(was_schedule, now=now, host_tz=settings.TIME_ZONE)
    return before is None or after < before


def _given_new(fields: set[str]) -> str:
    """The words for a new grid in a skipped run's reason: "given a new schedule and target"."""
    words = {"schedule": "schedule", "session_id": "target"}
    return "given a new " + " and ".join(words[field] for field in sorted(fields))


def _editable(loop: Loop) -> dict:
    """The edited fields as the API shows them (contract §9 changes: {field: [old, new]})."""
    return {
        "name": loop.name or None,
        "prompt": loop.prompt,
        "schedule": schedule_view(loop.schedule),
        "session_id": loop.session_id,
        "preset": loop.preset or None,
        **{field: getattr(loop, field) for field in UNATTENDED_FIELDS},
        "ends_at": to_ms(loop.ends_at) if loop.ends_at else None,
        "max_runs": loop.max_runs,
    }


def _edit_unattended(loop: Loop, changes: dict, *, target: str, becoming_new: dict[str, str] | None) -> None:
    """contract §14: the workspace, permission preset and overlap of a `new` loop (a PATCH of them on
    another loop is refused). A loop that becomes `new` starts with what loop_create gives one
    (`becoming_new`, asked of the host before the lock); a loop that stops being `new` drops them."""
    given = {field: changes[field] for field in UNATTENDED_FIELDS if field in changes}
    if target != ReservedTarget.NEW:
        if given:
            field = next(iter(given))
            raise InvalidInput(
                f"'{field}' is only for loops that target \"new\" (each run a fresh session); this one targets "
                f"{target!r}.",
                field=field,
            )
        loop.workspace, loop.permission_preset, loop.overlap = "", "", Overlap.ALLOW
        return
    if loop.session_id != ReservedTarget.NEW:
        if becoming_new is None:  # another edit moved it away from `new` since loop_edit looked: rare
            becoming_new = unattended_defaults(creator=loop.created_by_session_id)
        for field, value in becoming_new.items():
            setattr(loop, field, value)
    if "permission_preset" in given:
        check_permission_preset(given["permission_preset"])
    if "workspace" in given:
        loop.workspace = given["workspace"] or ""
    if "permission_preset" in given:
        loop.permission_preset = given["permission_preset"] or ""
    if "overlap" in given:
        loop.overlap = given["overlap"] or Overlap.ALLOW


def loop_edit_from(
    loop_id: str, data: LoopPatchIn, *, actor: Actor, now: datetime | None = None, vouched: bool = True
) -> Loop:
    """loop_edit with the PATCH input (the operator API's and the panel's, validated as LoopPatchIn):
    the fields it was given; a null prompt, schedule or session_id counts as not given, a null
    name, preset, ends_at or max_runs clears it. A cron schedule is checked at `now` (default: the clock)."""
    given = data.model_fields_set
    changes: dict = {field: getattr(data, field) for field in ("name", "preset", *UNATTENDED_FIELDS) if field in given}
    if "ends_at" in given:
        changes["ends_at"] = None if data.ends_at is None else from_ms(data.ends_at)
    if "max_runs" in given:
        changes["max_runs"] = data.max_runs
    if data.prompt is not None:
        changes["prompt"] = data.prompt
    if data.schedule is not None:
        checked_at = truncate_to_ms(now or timezone.now())
        changes["schedule"] = data.schedule.to_schedule(host_tz=settings.TIME_ZONE, now=checked_at)
    if data.session_id is not None:
        changes["target"] = data.session_id
    return loop_edit(loop_id=loop_id, changes=changes, actor=actor, now=now, vouched=vouched)
