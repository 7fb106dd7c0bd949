"""What one loop looks like in the panel: plain values for the templates (which auto-escape them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from dshloop.timeutil import iso
from loops import humanize
from loops.humanize import loop_zone, preview
from loops.models import ActorKind, EventKind, Loop, LoopEvent, LoopState
from loops.presenters import loop_state


@dataclass(frozen=True)
class Target:
    kind: str  # "self" | "new" | "session"
    label: str  # what to show: "self", "new", the session's title, or its ID
    detail: str  # the smaller line / tooltip: the global session, the preset, the ID
    session_id: str = ""


@dataclass(frozen=True)
class When:
    """A moment shown in the loop's zone, with a machine-readable form for panel.js."""

    moment: datetime
    local: str
    full: str
    iso: str


@dataclass(frozen=True)
class LoopRow:
    loop: Loop
    loop_id: str
    prompt: str
    preview: str
    schedule: str
    schedule_exact: str
    target: Target
    state: str
    zone: str
    next_run: When | None
    countdown: str
    last_run: When | None
    last_run_ago: str
    last_result: str
    last_error: str
    # contract §10: how the last run's turn ended, as its host reported it (empty until then)
    last_outcome: str
    last_summary: str
    # contract §9, the operators' fields
    name: str
    revision: int
    paused_at: When | None
    pause_reason: str
    consecutive_failures: int

    # Which controls a row offers (issue 15). The operations decide what is allowed; these only
    # leave out buttons that could not do anything: pause a paused loop, retry one that has not failed.
    @property
    def pause_words(self) -> str:
        """contract §9 pause_reason for people: "operator", or "auto: <reason>" (#13)."""
        if self.pause_reason.startswith("auto:"):
            return f"automatically: {self.pause_reason.removeprefix('auto:').strip()}"
        return "by an operator" if self.pause_reason in ("", "operator") else self.pause_reason

    @property
    def can_pause(self) -> bool:
        return self.loop.state in (LoopState.SCHEDULED, LoopState.RUNNING)

    @property
    def can_resume(self) -> bool:
        return self.loop.state == LoopState.PAUSED

    @property
    def can_retry(self) -> bool:
        return self.loop.state == LoopState.FAILED

    @property
    def can_run(self) -> bool:
        # Offered while a run is open too: the operation answers run_in_flight, which the panel shows.
        return self.loop.state != LoopState.COMPLETED

    @property
    def can_edit(self) -> bool:
        return self.loop.state != LoopState.COMPLETED


def when(moment: datetime | None, zone_name: str, now: datetime) -> When | None:
    if moment is None:
        return None
    return When(
        moment,
        humanize.local_time(moment, zone_name, now=now),
        humanize.full_local_time(moment, zone_name),
        iso(moment),
    )


def target_of(loop_session_id: str, preset: str, *, titles: dict, global_title: str | None) -> Target:
    if loop_session_id == "self":
        detail = f"global interface · {global_title}" if global_title else "global interface"
        return Target("self", "self", detail)
    if loop_session_id == "new":
        detail = f"preset {preset}" if preset else "inherits the creator's preset"
        return Target("new", "new", detail)
    title = titles.get(loop_session_id)
    # spec §8.2: the picker (and so the list) shows the title, the stable ID when there is none.
    return Target("session", title or loop_session_id, loop_session_id if title else "", loop_session_id)


def loop_row(loop: Loop, *, now: datetime, titles: dict, global_title: str | None) -> LoopRow:
    zone_name = loop_zone(loop)
    words, exact = humanize.schedule_words(loop, now=now, host_tz=settings.TIME_ZONE)
    return LoopRow(
        loop=loop,
        loop_id=loop.loop_id,
        prompt=loop.prompt,
        preview=preview(loop.prompt),
        schedule=words,
        schedule_exact=exact,
        target=target_of(loop.session_id, loop.preset, titles=titles, global_title=global_title),
        state=loop_state(loop, now),
        zone=zone_name,
        next_run=when(loop.next_at, zone_name, now),
        countdown=humanize.countdown(loop.next_at, now),
        last_run=when(loop.last_run_at, zone_name, now),
        last_run_ago=humanize.ago(loop.last_run_at, now),
        last_result=loop.last_result,
        last_error=loop.last_error,
        last_outcome=loop.last_outcome,
        last_summary=loop.last_summary,
        name=loop.name,
        revision=loop.revision,
        paused_at=when(loop.paused_at, zone_name, now),
        pause_reason=loop.pause_reason,
        consecutive_failures=loop.consecutive_failures,
    )


def loop_title(loop: Loop) -> str:
    """How a message names a loop: its display name with its ID, or the ID alone."""
    return f"“{loop.name}” ({loop.loop_id})" if loop.name else loop.loop_id


# -- the audit trail (contract §9 events) -------------------------------------------------------------

EVENT_WORDS = {
    EventKind.CREATED: "Created",
    EventKind.EDITED: "Edited",
    EventKind.PAUSED: "Paused",
    EventKind.RESUMED: "Resumed",
    EventKind.RUN_NOW: "Run now",
    EventKind.RETRIED: "Retried",
    EventKind.AUTO_PAUSED: "Paused automatically",
    EventKind.DELETED: "Deleted",
}
FIELD_WORDS = {"name": "Name", "prompt": "Prompt", "schedule": "Schedule", "session_id": "Target", "preset": "Preset"}
CHANGE_PREVIEW_CHARS = 120


@dataclass(frozen=True)
class ChangeValue:
    text: str  # what to show ("" for none)
    full: str  # the whole value, for a tooltip


@dataclass(frozen=True)
class Change:
    field: str
    label: str
    old: ChangeValue
    new: ChangeValue


@dataclass(frozen=True)
class EventRow:
    event: LoopEvent
    kind: str
    label: str
    at: When
    actor: str
    revision: int
    changes: list[Change]


def schedule_text(schedule: dict) -> str:
    """A schedule as the API shows it ({"kind": "every", "every_seconds": 600}) in words; exact,
    because an event tells what changed, not when the next run is."""
    kind = schedule.get("kind")
    if kind == "every" and isinstance(schedule.get("every_seconds"), int):
        return f"every {humanize.interval_words(schedule['every_seconds'])}"
    if kind == "after" and isinstance(schedule.get("after_seconds"), int):
        return f"once, after {humanize.duration_words(schedule['after_seconds'])}"
    if kind == "cron":
        zone = schedule.get("tz") or f"{settings.TIME_ZONE} (host time zone)"
        return f"cron {schedule.get('expr', '')} in {zone}"
    return str(schedule)


def change_value(field: str, value) -> ChangeValue:
    if value is None or value == "":
        return ChangeValue("", "")
    if field == "schedule" and isinstance(value, dict):
        text = schedule_text(value)
        return ChangeValue(text, text)
    text = str(value)
    return ChangeValue(preview(text, CHANGE_PREVIEW_CHARS), text)


def actor_text(kind: str, actor_id: str) -> str:
    if kind == ActorKind.SCHEDULER:
        return "the scheduler"
    if kind == ActorKind.USER:
        return actor_id or "a staff user"
    if kind == ActorKind.TOKEN:
        return f"API token {actor_id}" if actor_id else "an API token"
    return f"session {actor_id}" if actor_id else "an agent (no session)"


def event_row(event: LoopEvent, *, zone_name: str, now: datetime) -> EventRow:
    changes = [
        Change(field, FIELD_WORDS.get(field, field), change_value(field, pair[0]), change_value(field, pair[1]))
        for field, pair in (event.changes or {}).items()
        if isinstance(pair, list | tuple) and len(pair) == 2
    ]
    return EventRow(
        event=event,
        kind=event.kind,
        label=EVENT_WORDS.get(event.kind, event.kind),
        at=when(event.at, zone_name, now),
        actor=actor_text(event.actor_kind, event.actor_id),
        revision=event.revision,
        changes=changes,
    )
