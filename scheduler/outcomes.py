"""How the turn a delivery started ended (contract §10).

"Delivered" only means the message reached the inbox. The host reports the turn's end — through
`POST /api/host/runs/{run_id}/outcome`, or (the `dsh` host) read from DSH's own session log by
scheduler.outcome_watch — and the run, its loop's row and the loop's failure streak take it in.
Recording is idempotent for the same outcome; a different one is refused: the first report wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput, NotFound, OutcomeRecorded
from core.timeutil import truncate_to_ms
from loops.counters import Tally
from loops.models import Loop, LoopRun, RunOutcome, RunStatus
from scheduler.failures import locked_loops, take_outcome

logger = logging.getLogger("dshloop.delivery")


def record_outcome(
    *, run_id: str, status: str, summary: str = "", error: str = "", now: datetime | None = None
) -> LoopRun:
    """Record a run's turn outcome (one transaction); the run as it now is."""
    assert status in RunOutcome.values, status
    now = truncate_to_ms(now or timezone.now())
    with transaction.atomic(durable=True):
        run = LoopRun.objects.select_for_update().filter(run_id=run_id).first()
        if run is None:
            raise NotFound(f"No run {run_id!r}: the delivered message's source.run_id names the run.", field="run_id")
        if run.outcome:
            if run.outcome != status:
                raise OutcomeRecorded(
                    f"Run {run_id} already has the outcome {run.outcome!r}; the first report stands.", field="status"
                )
            return run
        if run.status == RunStatus.SKIPPED:
            raise InvalidInput(f"Run {run_id} was skipped: nothing was delivered, so no turn ended.", field="run_id")
        run.outcome, run.summary, run.outcome_at = status, summary, now
        run.error = error or run.error
        run.save(update_fields=["outcome", "summary", "outcome_at", "error"])
        logger.info(
            "loop=%s scheduled=%s turn=%s run=%s%s",
            run.loop_id,
            run.scheduled_at.isoformat(),
            status,
            run.run_id,
            f" error={error!r}" if error else "",
        )
        if run.status in (RunStatus.DELIVERED, RunStatus.FAILED):
            # An open run takes its outcome in when its delivery is recorded (scheduler.delivery).
            _update_loop(run, now)
    return run


def _update_loop(run: LoopRun, now: datetime) -> None:
    for loop in locked_loops([run.loop_id]):
        take_outcome(loop, run, now=now, latest=_shown_by(loop, run))


def _shown_by(loop: Loop, run: LoopRun) -> bool:
    """The loop row still shows this run: no other run of it was recorded finished since. Every
    record of a finished run sets the loop's last_run_at to the run's finished_at (scheduler.delivery,
    scheduler.claims), so an outcome that comes late for an older run leaves a newer run's result."""
    if run.finished_at is None:
        return False  # still open: its delivery's record takes the outcome in (scheduler.delivery)
    return loop.last_run_at is None or run.finished_at >= loop.last_run_at


def end_turn(*, run_id: str, error: str, cancel: Callable[[], None], timed_out: bool, now: datetime) -> bool:
    """dshloop ends a run's turn itself (contract §14: a fresh session's turn past the run timeout,
    or stuck waiting for a person): `cancel` it in the host while the run's row is locked, then
    record the run failed, with outcome failed and `error`. The lock keeps an outcome the host
    reports meanwhile from coming first; a HostError from `cancel` records nothing (the next pass
    tries again). False when the run has an outcome already."""
    now = truncate_to_ms(now)
    with transaction.atomic(durable=True):
        run = LoopRun.objects.select_for_update().filter(run_id=run_id, outcome="").first()
        if run is None:
            return False
        cancel()
        run.status, run.outcome, run.outcome_at, run.error = RunStatus.FAILED, RunOutcome.FAILED, now, error
        run.save(update_fields=["status", "outcome", "outcome_at", "error"])
        logger.warning(
            "loop=%s scheduled=%s turn=failed run=%s error=%r", run.loop_id, run.scheduled_at.isoformat(), run_id, error
        )
        _update_loop(run, now)
        if timed_out:
            tally = Tally()
            tally.timed_out()
            tally.save()
    return True


def note_no_outcome(*, run_ids: list[str], error: str) -> int:
    """Runs into existing sessions whose turn outlived the run timeout: never cancelled by dshloop
    (a person's conversation), only marked, so that they say why no outcome came and leave the
    watch. An outcome reported later through the API is still taken."""
    return LoopRun.objects.filter(run_id__in=run_ids, outcome="", error="").update(error=error)
