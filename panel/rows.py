"""What one loop looks like in the panel: plain values for the templates (which auto-escape them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import overload
from urllib.parse import quote

from django.conf import settings
from django.urls import reverse
from django.utils.http import RFC3986_SUBDELIMS
from django.utils.text import Truncator

from core.timeutil import iso
from loops import humanize
from loops.humanize import loop_zone, preview
from loops.models import AWAITING_APPROVAL, ActorKind, EventKind, Loop, LoopEvent, LoopState
from loops.presenters import loop_state
from sessions_app.models import ReservedTarget


class _ReadByName:
    """Fields a template reads as a dictionary lookup, the first its variables try: for an object
    without __getitem__, Django raises and catches a TypeError on every attribute before it falls
    back to getattr, a large share of the time a page of rows takes to render."""

    def __getitem__(self, name: str):
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None


@dataclass(frozen=True)
class TargetCell(_ReadByName):
    kind: str  # "self" | "new" | "session"
    label: str  # what to show: "self", "new", the session's title, or its ID
    detail: str  # the smaller line / tooltip: the global session, the preset, the ID
    session_id: str = ""


@dataclass(frozen=True)
class When(_ReadByName):
    """A moment shown in the loop's zone, with a machine-readable form for panel.js."""

    moment: datetime
    local: str
    full: str
    iso: str


@dataclass(frozen=True)
class LoopUrls(_ReadByName):
    """A loop's pages in the panel: its own, and the others, paths beside it (panel/urls.py;
    tests/panel/test_list_page.py checks each against reverse())."""

    page: str

    @property
    def delete(self) -> str:
        return self.page + "delete"

    @property
    def edit(self) -> str:
        return self.page + "edit"

    @property
    def pause(self) -> str:
        return self.page + "pause"

    @property
    def resume(self) -> str:
        return self.page + "resume"

    @property
    def run_now(self) -> str:
        return self.page + "run"

    @property
    def retry(self) -> str:
        return self.page + "retry"


def loop_urls(loop_id: str) -> LoopUrls:
    return LoopUrls(reverse("panel:detail", args=[loop_id]))


_ANY_ID = "LOOP-ID"
# What reverse() leaves unquoted in a path (RFC 3986 pchar, as django.urls.resolvers quotes it).
_PATH_SAFE = RFC3986_SUBDELIMS + "/~:@"


def loop_urls_maker() -> Callable[[str], LoopUrls]:
    """loop_urls for a page of rows: reverse() once, then each loop's ID quoted into its place as
    reverse() quotes it: a reverse() is slow, and a row has seven links.
    tests/panel/test_list_page.py checks the two agree."""
    before, after = reverse("panel:detail", args=[_ANY_ID]).split(_ANY_ID)

    def urls(loop_id: str) -> LoopUrls:
        if not loop_id or "/" in loop_id:
            return loop_urls(loop_id)  # no such path: reverse() says so
        return LoopUrls(before + quote(loop_id, safe=_PATH_SAFE) + after)

    return urls


def truncated(text: str, length: int) -> str:
    """What the template filter truncatechars:<length> shows, computed once for a row: at most
    `length` characters, the last an ellipsis when cut. Short ASCII text, the usual, is as it is."""
    if len(text) <= length and text.isascii():
        return text
    return Truncator(text).chars(length)


# How much of a long text a list row shows, and its tooltip (the loop's page shows all of it).
TITLE_CHARS = 600
CELL_CHARS = 90


@dataclass(frozen=True)
class LoopTableRow(_ReadByName):
    loop: Loop
    loop_id: str
    urls: LoopUrls
    prompt: str
    prompt_title: str
    preview: str
    schedule: str
    schedule_exact: str
    target: TargetCell
    state: str
    zone: str
    next_run: When | None
    countdown: str
    last_run: When | None
    last_run_ago: str
    last_result: str
    last_error: str
    error_title: str
    error_cell: str
    # contract §10: how the last run's turn ended, as its host reported it (empty until then)
    last_outcome: str
    last_summary: str
    summary_title: str
    summary_cell: str
    # contract §9, the operators' fields
    name: str
    revision: int
    paused_at: When | None
    pause_reason: str
    consecutive_failures: int

    # Which controls a row offers. The operations decide what is allowed; these only
    # leave out buttons that could not do anything: pause a paused loop, retry one that has not failed.
    @property
    def pause_words(self) -> str:
        """contract §9 pause_reason for people: "operator", or "auto: <reason>"."""
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
    def awaiting_approval(self) -> bool:
        """contract §14: paused until an operator approves it (its resume is the approval)."""
        return self.can_resume and self.pause_reason == AWAITING_APPROVAL

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


@overload
def when(moment: datetime, zone_name: str, now: datetime) -> When: ...
@overload
def when(moment: datetime | None, zone_name: str, now: datetime) -> When | None: ...
def when(moment: datetime | None, zone_name: str, now: datetime) -> When | None:
    if moment is None:
        return None
    return When(
        moment,
        humanize.local_time(moment, zone_name, now=now),
        humanize.full_local_time(moment, zone_name),
        iso(moment),
    )


def target_of(loop_session_id: str, preset: str, *, titles: dict, global_title: str | None) -> TargetCell:
    if loop_session_id == ReservedTarget.SELF:
        detail = f"global interface · {global_title}" if global_title else "global interface"
        return TargetCell(ReservedTarget.SELF, ReservedTarget.SELF, detail)
    if loop_session_id == ReservedTarget.NEW:
        detail = f"preset {preset}" if preset else "inherits the creator's preset"
        return TargetCell(ReservedTarget.NEW, ReservedTarget.NEW, detail)
    title = titles.get(loop_session_id)
    # spec §8.2: the picker (and so the list) shows the title, the stable ID when there is none.
    return TargetCell("session", title or loop_session_id, loop_session_id if title else "", loop_session_id)


def loop_row(
    loop: Loop, *, now: datetime, titles: dict, global_title: str | None, urls: Callable[[str], LoopUrls] = loop_urls
) -> LoopTableRow:
    zone_name = loop_zone(loop)
    words, exact = humanize.schedule_words(loop, now=now, host_tz=settings.TIME_ZONE)
    return LoopTableRow(
        loop=loop,
        loop_id=loop.loop_id,
        urls=urls(loop.loop_id),
        prompt=loop.prompt,
        prompt_title=truncated(loop.prompt, TITLE_CHARS),
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
        error_title=truncated(loop.last_error, TITLE_CHARS),
        error_cell=truncated(loop.last_error, CELL_CHARS),
        last_outcome=loop.last_outcome,
        last_summary=loop.last_summary,
        summary_title=truncated(loop.last_summary, TITLE_CHARS),
        summary_cell=truncated(loop.last_summary, CELL_CHARS),
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

EVENT_WORDS: dict[str, str] = {
    EventKind.CREATED: "Created",
    EventKind.EDITED: "Edited",
    EventKind.PAUSED: "Paused",
    EventKind.RESUMED: "Resumed",
    EventKind.RUN_NOW: "Run now",
    EventKind.RETRIED: "Retried",
    EventKind.AUTO_PAUSED: "Paused automatically",
    EventKind.DELETED: "Deleted",
    EventKind.APPROVED: "Approved",
}
FIELD_WORDS = {
    "name": "Name",
    "prompt": "Prompt",
    "schedule": "Schedule",
    "session_id": "Target",
    "preset": "Preset",
    "workspace": "Workspace",
    "permission_preset": "Permission preset",
    "overlap": "Overlap",
}
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
