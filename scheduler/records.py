"""Recording a delivery attempt: the one definition of what a run and its loop record, whoever drove
the run (a worker, scheduler.delivery, or a claim that delivered it in its own transaction,
scheduler.claims).

A run's fields come from its attempt (settle_runs): delivered, failed, or claimed again with a
backoff. Its loop's come from the run's result (record_loops): the last result, the state a
one-shot or a running loop goes to, and for a delivered scheduled run the end of its failure streak
and one more `runs_delivered` (contract §16), in one UPDATE for the batch; then a loop whose run was
its last ends, and a failed run meets the failure policy (scheduler.failures). One line per
occurrence in the log (log_attempts). The caller holds the transaction and the loops' row locks.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction

from core.backoff import doubling
from core.bulk import update_rows
from core.notify import CLOCK_MAX_SLEEP, notify_clocks
from loops.counters import Tally
from loops.models import ONE_SHOT_KINDS, Loop, LoopRun, LoopState, RunStatus
from loops.occurrence_log import log_occurrence
from loops.services.ends import loops_end
from scheduler.failures import after_failures, fresh_run_failed, locked_loops, take_outcome
from scheduler.prepare import Attempt
from scheduler.rows import DeliveryLoop, RunRow
from timing import ends

logger = logging.getLogger("dshloop.delivery")

BACKOFF_BASE = timedelta(seconds=1)
# A host that gives no answer is retried at this pace past attempt 5, until it answers: found
# within 16 s of its return.
BACKOFF_CAP = timedelta(seconds=16)


def backoff(attempt: int) -> timedelta:
    """1 s, 2 s, 4 s, 8 s, 16 s after attempts 1..5 (about 31 s of patience for a host that
    answers with errors), then 16 s after each further attempt."""
    return doubling(attempt, base=BACKOFF_BASE, cap=BACKOFF_CAP)


# What recording a run changes on its row (settle_runs), in the order they are written.
RUN_FIELDS = (
    "status",
    "error",
    "retry_at",
    "finished_at",
    "lease_until",
    "started_at",
    "target_session_id",
    "fallback",
)


def settle_runs(attempts: list[Attempt], now: datetime, tally: Tally) -> None:
    """Set each run's fields from its attempt, in memory, and count the finished ones into `tally`;
    the caller writes the rows (write_runs, or a claim's INSERT)."""
    for attempt in attempts:
        run = attempt.run
        # A host may report the turn's end before the delivery is recorded (contract §10).
        if run.outcome:
            attempt.error = attempt.error or run.error
        if attempt.retry:
            run.status, run.retry_at = RunStatus.CLAIMED, now + backoff(run.attempt)
        else:
            run.status = RunStatus.DELIVERED if attempt.delivered else RunStatus.FAILED
            run.retry_at, run.finished_at = None, now
            tally.finished(run.status)
        run.error, run.lease_until = attempt.error, None
        if attempt.delivered:
            tally.delivered_late(run.scheduled_at, now)


def write_runs(attempts: list[Attempt]) -> None:
    """The settled runs' rows, in one UPDATE."""
    rows = [[attempt.run.run_id, *(getattr(attempt.run, name) for name in RUN_FIELDS)] for attempt in attempts]
    update_rows(LoopRun, RUN_FIELDS, rows)


def _state_after(run: RunRow, loop: DeliveryLoop) -> str:
    """spec §3: a delivered one-shot (`after`) loop is completed and leaves the active list; a failed
    one stays visible as failed. A manual run (run now) is not the loop's occurrence: it changes
    neither. A loop `running` its occurrence is scheduled again; a paused one stays paused."""
    if not run.manual and loop.kind in ONE_SHOT_KINDS:
        return LoopState.COMPLETED if run.status == RunStatus.DELIVERED else LoopState.FAILED
    return LoopState.SCHEDULED if loop.state == LoopState.RUNNING else loop.state


def record_loops(
    attempts: list[Attempt], loops: dict[str, DeliveryLoop], now: datetime, tally: Tally, *, moved_on: bool = False
) -> set[str]:
    """Record the finished runs on their loops (`loops`: read under their row locks, so the counts
    are exact), in one UPDATE per set of fields: a batch that all went well is one statement.
    `moved_on`: the loops' next deadline is written too (a claim's: one write of the loop for the
    whole occurrence). Returns the IDs of the loops written; what the failure policy passes over is
    counted into `tally`."""
    finished = [attempt for attempt in attempts if not attempt.retry]
    changes: dict[str, dict[str, object]] = {}
    for attempt in finished:
        run, loop = attempt.run, loops.get(attempt.run.loop_id)
        if loop is None:  # deleted meanwhile: nothing to record on
            continue
        loop.state = _state_after(run, loop)
        row = changes.setdefault(loop.loop_id, {"state": loop.state, **({"next_at": loop.next_at} if moved_on else {})})
        row.update(
            state=loop.state,
            last_run_at=now,
            last_result=run.status,
            last_error=run.error,
            last_outcome="",
            last_summary="",
        )
        if run.status == RunStatus.DELIVERED and not run.manual:
            # It ends the loop's failure streak and counts (contract §16 runs_delivered): a loop has
            # at most one scheduled run open. A manual run is an operator's test: it counts for nothing.
            loop.runs_delivered += 1
            row.update(consecutive_failures=0, runs_delivered=loop.runs_delivered)
    groups: defaultdict[tuple[str, ...], list[list[object]]] = defaultdict(list)
    for loop_id in sorted(changes):
        groups[tuple(changes[loop_id])].append([loop_id, *changes[loop_id].values()])
    for fields, rows in groups.items():
        update_rows(Loop, fields, rows)
    _end_last_runs(finished, loops, now)
    _apply_failure_policy([attempt.run for attempt in finished], now, tally)
    soon = now + timedelta(seconds=CLOCK_MAX_SLEEP)
    if any(
        loop.kind not in ONE_SHOT_KINDS and loop.next_at and loop.next_at < soon
        for loop in (loops.get(attempt.run.loop_id) for attempt in finished)
        if loop
    ):
        # Claimable again soon: a clock sleeping past that deadline must wake up.
        transaction.on_commit(notify_clocks)
    return set(changes)


def _end_last_runs(attempts: list[Attempt], loops: dict[str, DeliveryLoop], now: datetime) -> None:
    """contract §16: a loop whose recorded run was its last is completed. Foreseen from the loop as
    recorded (no read or write for any other run): the run that brought runs_delivered to max_runs,
    or, delivered or failed, the run whose loop's next occurrence lies past its ends_at (the claim
    found it the last, scheduler.catch_ups). loops_end checks each against its row, locked."""
    ending = {}
    for attempt in attempts:
        run, loop = attempt.run, loops.get(attempt.run.loop_id)
        if run.manual or loop is None or loop.kind in ONE_SHOT_KINDS:
            continue
        if ends.runs_reached(loop.runs_delivered, loop.max_runs):
            ending[loop.loop_id] = ends.MAX_RUNS
        elif ends.past_end(loop.next_at, loop.ends_at):
            ending[loop.loop_id] = ends.ENDS_AT
    if ending:
        loops_end(ending, now=now)


def _apply_failure_policy(runs: list[RunRow], now: datetime, tally: Tally) -> None:
    """Back off or pause loops whose scheduled run failed (scheduler.failures). The rare runs whose
    turn's outcome the host reported before this record take it from the history instead."""
    reported = {run.loop_id: run for run in runs if run.outcome}
    failed = {run.loop_id: run for run in runs if run.status == RunStatus.FAILED and not run.outcome and not run.manual}
    if not reported and not failed:
        return
    for loop in locked_loops([*reported, *failed]):
        if loop.loop_id in reported:
            take_outcome(loop, reported[loop.loop_id], now=now, tally=tally)
        else:
            run = failed[loop.loop_id]
            after_failures(loop, loop.consecutive_failures + 1, run=run, error=run.error, now=now, tally=tally)
            fresh_run_failed(loop, run, target=run.target or loop.session_id, error=run.error, now=now)


def log_attempts(attempts: list[Attempt], now: datetime) -> None:
    """One line per occurrence, as recorded."""
    for attempt in attempts:
        run = attempt.run
        if attempt.retry:
            log_occurrence(logger, logging.WARNING, run, "retrying", now=now, error=attempt.error)
        else:
            log_occurrence(logger, logging.INFO, run, run.status, now=now, error=attempt.error)
