"""Turn outcomes read from the host itself, for hosts that log how a turn ended.

A host that declares the `turn_outcomes` capability (the `dsh` host: DSH's session log) is asked,
every few seconds, how the turns of recently delivered runs ended; each answer is recorded as if the
host had called `POST /api/host/runs/{run_id}/outcome` (scheduler.outcomes.record_outcome). Hosts
without it report outcomes through that endpoint only, and this poll does nothing for them.

The same poll bounds unattended turns (contract §14): a fresh session's turn that waits for a
person (an approval, a question) is cancelled at once, and one still going after
DSHLOOP_RUN_TIMEOUT_SECONDS is cancelled then; both runs are failed. So a `new` run never waits
forever, and its slot (scheduler.unattended) always frees.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import cast

from django.conf import settings
from django.utils import timezone

from core.errors import ApiError
from core.timeutil import to_ms
from loops.humanize import short_span
from loops.models import LoopRun, RunStatus
from loops.runs import run_timeout
from scheduler.outcomes import end_turn, note_no_outcome, record_outcome
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Host, HostError, RunRef, SessionArchive, TurnOutcomes, Workspaces
from sessions_app.models import ReservedTarget

logger = logging.getLogger("dshloop.delivery")


def poll_outcomes(*, now: datetime | None = None, limit: int = 200) -> int:
    """Ask the host how the turns of delivered runs without an outcome ended, and record the
    answers; then end the turns past the run timeout (contract §14). Returns how many outcomes were
    recorded. A host that cannot be read is logged, not raised."""
    host = get_host()
    if not host.capabilities.turn_outcomes:
        return 0
    now = now or timezone.now()
    recorded = _read_outcomes(host, now=now, limit=limit)
    return recorded + _enforce_timeout(host, now=now, limit=limit)


_RUN_FIELDS = ("run_id", "target_session_id", "occurrence_key", "started_at", "finished_at", "target")


def _read_outcomes(host: Host, *, now: datetime, limit: int) -> int:
    # Runs delivered within the run timeout are asked about: each poll reads each session's log back
    # to its oldest run in that window, no further; older ones are the timeout's (_enforce_timeout).
    # No index serves this filter, on purpose: one would cost every delivery an index write, for a
    # query only DSH deployments run. Those are single-machine (DSH answers loopback only), their
    # run table is bounded by retention (DSHLOOP_RUN_HISTORY_LIMIT per loop), and the window keeps
    # both the rows that match and the host's log reads small.
    pending = (
        LoopRun.objects.filter(status=RunStatus.DELIVERED, outcome="", finished_at__gte=now - run_timeout())
        .exclude(target_session_id="")
        .order_by("finished_at")  # the oldest first: they leave the window soonest
        .values_list(*_RUN_FIELDS)[:limit]
    )
    asked = _ask(host, _refs(pending), now=now)
    return asked[0] if asked else 0


def _refs(rows: Iterable[tuple[str, str, str, datetime | None, datetime | None, str]]) -> list[RunRef]:
    refs = []
    for run_id, session_id, key, started_at, finished_at, target in rows:
        # The message cannot predate the run's first delivery attempt (started_at).
        sent = started_at or finished_at
        assert sent is not None  # a delivered run has finished
        refs.append(RunRef(run_id, session_id, key, to_ms(sent), fresh=target == ReservedTarget.NEW))
    return refs


def _ask(host: Host, refs: list[RunRef], *, now: datetime) -> tuple[int, list[RunRef]] | None:
    """Ask the host how these runs' turns ended and record the answers (a stalled fresh turn is
    ended). Returns how many were recorded and the runs it gave no end for (still running, or it
    cannot tell); None when the host could not be read."""
    if not refs:
        return 0, []
    try:
        answers = cast(TurnOutcomes, host).turn_outcomes(refs)
    except HostError as exc:
        logger.warning("turn outcomes not read (%d runs waiting): %s", len(refs), exc)
        return None
    recorded, unanswered = 0, []
    for ref in refs:
        ended = answers.get(ref.run_id)
        if ended is None:
            unanswered.append(ref)
            continue
        if ended.stalled:
            recorded += _end(host, ref.run_id, ref.session_id, ended.error, timed_out=False, now=now)
            continue
        try:
            record_outcome(run_id=ref.run_id, status=ended.status, summary=ended.summary, error=ended.error)
        except ApiError as exc:  # outcome_recorded (another report came first), not_found (deleted)
            logger.info("turn outcome of run %s not recorded: %s", ref.run_id, exc)
            continue
        recorded += 1
        if ref.fresh:
            _put_away(host, ref.session_id)
    return recorded, unanswered


def _put_away(host: Host, session_id: str) -> None:
    """A `new` run's session, its turn over, archived when the operator asks it
    (DSHLOOP_ARCHIVE_FRESH_RUNS): nobody goes on in it, and each run would add a conversation to
    the person's list. The run keeps naming it. A failure changes nothing of the run's outcome."""
    if not (settings.DSHLOOP_ARCHIVE_FRESH_RUNS and host.capabilities.archives_sessions):
        return
    try:
        cast(SessionArchive, host).archive_session(session_id)
    except HostError as exc:
        logger.warning("the session %s of a finished fresh run was not archived: %s", session_id, exc)


def _enforce_timeout(host: Host, *, now: datetime, limit: int) -> int:
    """Delivered runs whose turn is still going after DSHLOOP_RUN_TIMEOUT_SECONDS: a fresh session's
    turn is cancelled and its run failed ("timed out after …"); a run into an existing session is
    only marked ("no outcome within …"), never cancelled. The host is asked first, so a turn that
    ended just before the timeout (or while the host could not be read) takes its own outcome; if
    it cannot be read, nothing is cancelled this pass. Returns how many outcomes were recorded."""
    timeout = settings.DSHLOOP_RUN_TIMEOUT_SECONDS
    overdue = (
        LoopRun.objects.filter(status=RunStatus.DELIVERED, outcome="", error="", finished_at__lt=now - run_timeout())
        .exclude(target_session_id="")
        .order_by("finished_at")
        .values_list(*_RUN_FIELDS)[:limit]
    )
    asked = _ask(host, _refs(overdue), now=now)
    if asked is None:
        return 0
    recorded, running = asked
    span = short_span(timeout)
    for ref in running:
        if ref.fresh:
            error = (
                f"timed out after {span} (DSHLOOP_RUN_TIMEOUT_SECONDS): the turn was still running, so dshloop "
                "cancelled it in the host."
            )
            recorded += _end(host, ref.run_id, ref.session_id, error, timed_out=True, now=now)
    existing = [ref.run_id for ref in running if not ref.fresh]
    if existing:
        note_no_outcome(
            run_ids=existing,
            error=f"no outcome within {span} (DSHLOOP_RUN_TIMEOUT_SECONDS): the turn had not ended. dshloop never "
            "cancels a turn in an existing session, and stops reading it from the host; an outcome reported "
            "through the API is still recorded.",
        )
    return recorded


def _end(host: Host, run_id: str, session_id: str, error: str, *, timed_out: bool, now: datetime) -> int:
    try:
        ended = end_turn(
            run_id=run_id,
            error=error,
            cancel=lambda: cast(Workspaces, host).cancel_turn(session_id),
            timed_out=timed_out,
            now=now,
        )
    except HostError as exc:
        logger.warning("the turn of run %s in session %s could not be cancelled: %s", run_id, session_id, exc)
        return 0
    if ended:  # only fresh runs' turns are ended
        _put_away(host, session_id)
    return int(ended)
