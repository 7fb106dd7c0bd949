"""Failure episodes (contract §16): what is owed when a loop fails in a way a person must hear of.

An episode is a loop's auto-pause after failures in a row (scheduler.failures), or a failed or
timed-out run of a `new` loop (nobody watches a fresh session). It is recorded in the transaction
that records the failure, under the loop's row lock, as one FailureEpisode row: a notice owed to a
session (unless DSHLOOP_FAILURE_NOTICES=0) and an event owed to the operators' webhook (when
DSHLOOP_FAILURE_WEBHOOK_URL is set). So an episode exists exactly when its failure does, whatever
dies afterwards, and the senders (scheduler.failure_notices, scheduler.failure_webhook) deliver
from the row until it says they did: once per episode, however often a scheduler restarts.

The key is the failing run's: one run is at most one episode, so a `new` loop's run that both
fails and pauses its loop is told once, as the pause (recorded first). A notice is no run: its
delivery never counts towards a failure streak, so it can never cause another notice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.db import transaction
from django.db.models import F

from loops.models import FailureEpisode, FailureEvent, Loop, NoticeStatus, WebhookStatus
from loops.runs import free_rows
from scheduler.message import message_summary


class FailedRun(Protocol):
    """What an episode names of the run that failed (a LoopRun, or a delivery's RunRow)."""

    @property
    def run_id(self) -> str: ...
    @property
    def target_session_id(self) -> str: ...


def episode_key(loop_id: str, run_id: str) -> str:
    """The episode's key, and its notice's occurrence key: never one a loop's occurrence has."""
    return f"{loop_id}@notice:{run_id}"


def record_episode(loop: Loop, run: FailedRun, *, event: FailureEvent, error: str, now: datetime) -> bool:
    """Record an episode for `run` of the locked `loop` (its streak already counted) in the
    caller's transaction; False when nothing is owed (notices off, no webhook) or the run already
    has its episode."""
    notice = settings.DSHLOOP_FAILURE_NOTICES
    webhook = bool(settings.DSHLOOP_FAILURE_WEBHOOK_URL)
    if not notice and not webhook:
        return False
    key = episode_key(loop.loop_id, run.run_id)
    if FailureEpisode.objects.filter(key=key).exists():  # the loop's lock serializes its episodes
        return False
    FailureEpisode.objects.create(
        key=key,
        loop_id=loop.loop_id,
        run_id=run.run_id,
        event=event,
        at=now,
        error=error or loop.last_error or "It failed without an error message.",
        consecutive_failures=loop.consecutive_failures,
        loop_summary=message_summary(name=loop.name, prompt=loop.prompt),
        target=loop.session_id,
        failed_session_id=run.target_session_id,
        creator_session_id=loop.created_by_session_id,
        notice_status=NoticeStatus.PENDING if notice else "",
        notice_due_at=now if notice else None,
        webhook_status=WebhookStatus.PENDING if webhook else "",
        webhook_due_at=now if webhook else None,
    )
    return True


def lease_pending(channel: str, *, pending: str, now: datetime, until: datetime, limit: int) -> list[FailureEpisode]:
    """Lease up to `limit` episodes whose `channel` (notice, webhook) is `pending` and due, that no
    other scheduler holds: each one's due time moves to `until` by a compare-and-swap, and its
    attempts count one more."""
    status, due_at, attempts = f"{channel}_status", f"{channel}_due_at", f"{channel}_attempts"
    taken = []
    with transaction.atomic(durable=True):
        due = FailureEpisode.objects.filter(**{status: pending, f"{due_at}__lte": now})
        for episode in free_rows(due.order_by(due_at))[:limit]:
            swapped = FailureEpisode.objects.filter(key=episode.key, **{due_at: getattr(episode, due_at)}).update(
                **{due_at: until, attempts: F(attempts) + 1}
            )
            if swapped:
                setattr(episode, due_at, until)
                setattr(episode, attempts, getattr(episode, attempts) + 1)
                taken.append(episode)
    return taken
