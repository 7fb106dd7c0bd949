"""Failure notices (contract §16): an episode's notice, delivered into a session like a loop message.

The notice says what failed, how many times, the last error and what to do; it is §7's XML (the
notice in the `<prompt>`), its source the loop's with `"notice": true` (on DSH, the plugin's source
with `notice: true`, so that DSH Web draws it as a notice card). It goes to the loop's creator
session, or to the global interface session (`self`) when the creator is gone, unknown, or is the
session whose run failed; with neither, it is skipped.

Sent from the episode's row (scheduler.episodes) by `runloops`' housekeeping thread, off the
clock's thread: a batch is leased (notice_due_at pushed out, as a run's lease), delivered, then
recorded while the lease is still its own. A scheduler killed in between leaves the lease to run
out; the next delivery uses the same occurrence key (the episode's), by which the host keeps one
message, so the notice is delivered exactly once. A transient host failure is retried with
backoff, a permanent one fails the notice; either way the failure is logged and counted, never
recorded as a run, so a notice can never cause another.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core.errors import one_line
from core.timeutil import to_ms
from loops.counters import Tally
from loops.models import FailureEpisode, FailureEvent, NoticeStatus
from loops.runs import lease
from scheduler.episodes import lease_pending
from scheduler.message import Source, loop_message, message_summary
from scheduler.prepare import MAX_ATTEMPTS
from scheduler.records import backoff
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Host, HostError, Message
from sessions_app.models import ReservedTarget, SessionStatus
from sessions_app.records import SessionInfo

logger = logging.getLogger("dshloop.notices")

NOTICE_BATCH = 20  # notices one step takes


def notice_text(episode: FailureEpisode) -> str:
    """What failed, how many times, the last error, and what to do (resume, edit, delete)."""
    loop_id, what = episode.loop_id, f'loop {episode.loop_id} ("{episode.loop_summary}")'
    failures = episode.consecutive_failures
    in_a_row = f"{failures} failure{'s' if failures != 1 else ''} in a row"
    if episode.event == FailureEvent.LOOP_AUTO_PAUSED:
        head = f"dshloop failure notice: {what} paused itself after {in_a_row}. It runs no more until resumed."
        act = "Once the cause is fixed, resume it"
    else:
        where = f"in the fresh session {episode.failed_session_id}" if episode.failed_session_id else "(no session)"
        head = (
            f"dshloop failure notice: run {episode.run_id} of {what}, a fresh session's run {where}, failed "
            f"({in_a_row}). A recurring loop stays scheduled: its next runs back off, and it pauses itself if "
            "they keep failing; a one-shot loop is now failed."
        )
        act = "Fix the cause; then resume it if it paused, or retry it if it was a one-shot"
    return (
        f"{head}\n"
        f"Last error: {episode.error}\n"
        f"What to do: {act} (the dshloop panel's page /panel/loops/{loop_id}/, or POST /api/loops/{loop_id}/resume); "
        f"edit its prompt, schedule or target there (or PATCH /api/loops/{loop_id}); or delete it "
        f'(loop_delete {{"loop_id": "{loop_id}"}}).'
    )


def notice_source(episode: FailureEpisode) -> Source:
    """The loop's source (contract §5) for the run that failed, under the episode's key, marked a notice."""
    return {
        "kind": "loop",
        "loop_id": episode.loop_id,
        "run_id": episode.run_id,
        "occurrence_key": episode.key,
        "scheduled_at": to_ms(episode.at),
        "notice": True,
    }


def notice_message(episode: FailureEpisode, session_id: str) -> Message:
    return Message(
        session_id,
        loop_message(loop_id=episode.loop_id, prompt=notice_text(episode)),
        notice_source(episode),
        episode.key,
        summary=message_summary(name=f"Loop failed: {episode.loop_summary}", prompt=""),
        notice=True,
    )


@dataclass
class Sent:
    """How one attempt at an episode's notice went."""

    episode: FailureEpisode
    status: str  # a NoticeStatus; pending: try again at retry_at
    session_id: str = ""
    error: str = ""
    retry_at: datetime | None = None


def recipient(host: Host, episode: FailureEpisode) -> SessionInfo | None:
    """The creator session, unless it is gone or is the one whose run failed; else `self`."""
    creator = episode.creator_session_id
    if creator and creator != episode.failed_session_id and creator not in ReservedTarget.values:
        session = host.get_session(creator)
        if session is not None:
            return session
    return host.global_session()


def _attempt(host: Host, episode: FailureEpisode) -> Sent:
    chosen = ""  # the session this attempt delivers into, kept for a retry
    try:
        # A retry goes where the first attempt went, if that session is still there: a host that
        # took the message but did not answer keeps one copy per session only.
        earlier = host.get_session(episode.notice_session_id) if episode.notice_session_id else None
        session = earlier or recipient(host, episode)
        if session is None:
            why = "its creator session is gone" if episode.creator_session_id else "the loop has no creator session"
            return Sent(
                episode, NoticeStatus.SKIPPED, error=f"Not sent: {why} and there is no global interface session."
            )
        chosen = session.session_id
        if session.status == SessionStatus.COLD:  # spec §5: woken like a loop's target
            session = host.resume_session(session.session_id)
        [result] = host.deliver_many([notice_message(episode, session.session_id)])
        if isinstance(result, HostError):
            raise result
        return Sent(episode, NoticeStatus.DELIVERED, session_id=session.session_id)
    except HostError as exc:
        error, transient = str(exc), exc.transient
    except Exception as exc:
        logger.exception("delivering the failure notice %s raised", episode.key)
        error, transient = f"Unexpected error: {one_line(exc)}", True
    if transient and episode.notice_attempts < MAX_ATTEMPTS:
        return Sent(
            episode,
            NoticeStatus.PENDING,
            session_id=chosen,
            error=error,
            retry_at=timezone.now() + backoff(episode.notice_attempts),
        )
    return Sent(episode, NoticeStatus.FAILED, error=error)


def _take(now: datetime, limit: int) -> list[FailureEpisode]:
    """Lease the due pending notices no other scheduler holds."""
    return lease_pending("notice", pending=NoticeStatus.PENDING, now=now, until=now + lease(), limit=limit)


def _record(sent: list[Sent]) -> None:
    """Record each attempt while its lease is still ours (else another scheduler took over)."""
    tally = Tally()
    with transaction.atomic(durable=True):
        for attempt in sent:
            episode = attempt.episode
            ours = FailureEpisode.objects.filter(
                key=episode.key, notice_status=NoticeStatus.PENDING, notice_due_at=episode.notice_due_at
            )
            if not ours.update(
                notice_status=attempt.status,
                notice_due_at=attempt.retry_at,
                notice_session_id=attempt.session_id,
                notice_error=attempt.error,
            ):
                continue
            level = logging.INFO if attempt.status == NoticeStatus.DELIVERED else logging.WARNING
            logger.log(
                level,
                "failure notice loop=%s run=%s event=%s %s%s%s",
                episode.loop_id,
                episode.run_id,
                episode.event,
                "retrying" if attempt.status == NoticeStatus.PENDING else attempt.status,
                f" session={attempt.session_id}" if attempt.session_id else "",
                f" error={attempt.error!r}" if attempt.error else "",
            )
            if attempt.status != NoticeStatus.PENDING:
                tally.notice(attempt.status)
        tally.save()


def send_notices(*, limit: int = NOTICE_BATCH) -> int:
    """Deliver the due failure notices; returns how many were tried (a full batch: more may wait)."""
    episodes = _take(timezone.now(), limit)
    if episodes:
        host = get_host()
        _record([_attempt(host, episode) for episode in episodes])
    return len(episodes)
