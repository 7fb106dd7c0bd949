"""What one loop looks like in the panel: plain values for the templates (which auto-escape them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from dshloop.timeutil import iso
from loops import humanize
from loops.humanize import loop_zone, preview
from loops.models import Loop
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
    )
