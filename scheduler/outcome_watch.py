"""Turn outcomes read from the host itself, for hosts that log how a turn ended.

A host that declares the `turn_outcomes` capability (the `dsh` host: DSH's session log) is asked,
every few seconds, how the turns of recently delivered runs ended; each answer is recorded as if the
host had called `POST /api/host/runs/{run_id}/outcome` (scheduler.outcomes.record_outcome). Hosts
without it report outcomes through that endpoint only, and this poll does nothing for them.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import cast

from django.utils import timezone

from core.errors import ApiError
from core.timeutil import to_ms
from loops.models import LoopRun, RunStatus
from scheduler.outcomes import record_outcome
from sessions_app.hosts import get_host
from sessions_app.hosts.base import HostError, RunRef, TurnOutcomes

logger = logging.getLogger("dshloop.delivery")

# Runs delivered longer ago than this get no outcome from the poll (a turn that ran longer, or a
# host that was down all that while, leaves the run without one). The window bounds the host's
# work: each poll reads each session's log back to its oldest run in the window, no further.
WINDOW = timedelta(hours=1)


def poll_outcomes(*, now: datetime | None = None, limit: int = 200) -> int:
    """Ask the host how the turns of delivered runs without an outcome ended, and record the
    answers; how many outcomes were recorded. A host that cannot be read is logged, not raised."""
    host = get_host()
    if not host.capabilities.turn_outcomes:
        return 0
    now = now or timezone.now()
    # No index serves this filter, on purpose: one would cost every delivery an index write, for a
    # query only DSH deployments run. Those are single-machine (DSH answers loopback only), their
    # run table is bounded by retention (DSHLOOP_RUN_HISTORY_LIMIT per loop), and the window keeps
    # both the rows that match and the host's log reads small.
    pending = (
        LoopRun.objects.filter(status=RunStatus.DELIVERED, outcome="", finished_at__gte=now - WINDOW)
        .exclude(target_session_id="")
        .order_by("finished_at")  # the oldest first: they leave the window soonest
        .values_list("run_id", "target_session_id", "occurrence_key", "started_at", "finished_at")[:limit]
    )
    refs = []
    for run_id, session_id, key, started_at, finished_at in pending:
        # The message cannot predate the run's first delivery attempt (started_at).
        sent = started_at or finished_at
        assert sent is not None  # a delivered run has finished (the filter above)
        refs.append(RunRef(run_id, session_id, key, to_ms(sent)))
    if not refs:
        return 0
    try:
        answers = cast(TurnOutcomes, host).turn_outcomes(refs)
    except HostError as exc:
        logger.warning("turn outcomes not read (%d runs waiting): %s", len(refs), exc)
        return 0
    recorded = 0
    for ref in refs:
        ended = answers.get(ref.run_id)
        if ended is None:
            continue  # still running, or the host cannot tell
        try:
            record_outcome(run_id=ref.run_id, status=ended.status, summary=ended.summary, error=ended.error)
        except ApiError as exc:  # outcome_recorded (another report came first), not_found (deleted)
            logger.info("turn outcome of run %s not recorded: %s", ref.run_id, exc)
            continue
        recorded += 1
    return recorded
