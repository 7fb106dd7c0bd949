"""The audit trail (contract §9): every change to a loop, who made it, and the revision after it.

Events outlive their loop (no foreign key), as runs do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from core.errors import UnknownLoop
from loops.models import ActorKind, EventKind, Loop, LoopEvent


@dataclass(frozen=True)
class Actor:
    """Who changed a loop: the calling session (tools), a staff user (panel, admin), a token's name
    (the operator REST API), or the scheduler (automatic actions). `id` may be unknown."""

    kind: ActorKind
    id: str | None = None

    @classmethod
    def user(cls, user) -> Actor:
        """A person signed in to the panel or the admin."""
        return cls(ActorKind.USER, user.get_username() or None)

    @classmethod
    def session(cls, session_id: str | None) -> Actor:
        return cls(ActorKind.SESSION, session_id)


SCHEDULER = Actor(ActorKind.SCHEDULER)


def _event(loop: Loop, kind: EventKind, actor: Actor, *, at: datetime, changes: dict | None = None) -> LoopEvent:
    return LoopEvent(
        loop_id=loop.loop_id,
        at=at,
        kind=kind,
        actor_kind=actor.kind,
        actor_id=actor.id or "",
        revision=loop.revision,
        changes=changes,
    )


def record_event(loop: Loop, kind: EventKind, actor: Actor, *, at: datetime, changes: dict | None = None) -> LoopEvent:
    event = _event(loop, kind, actor, at=at, changes=changes)
    event.save(force_insert=True)
    return event


def record_events(loops: Iterable[Loop], kind: EventKind, actor: Actor, *, at: datetime) -> None:
    """The same event for each of `loops` (an automatic action over a batch), in one statement."""
    LoopEvent.objects.bulk_create([_event(loop, kind, actor, at=at) for loop in loops])


def loop_events(loop_id: str, *, limit: int) -> QuerySet[LoopEvent]:
    """Newest first. Events outlive their loop, so a deleted loop's trail still answers."""
    events = LoopEvent.objects.filter(loop_id=loop_id).order_by("-at", "-id")[:limit]
    if not events and not Loop.objects.filter(loop_id=loop_id).exists():
        raise UnknownLoop(f"No loop {loop_id!r} and no events recorded for it.", field="loop_id")
    return events
