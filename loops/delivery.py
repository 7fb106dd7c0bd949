"""Deliver claimed occurrences: the durable sequence of spec §5, a batch at a time.

claim (loops.claims) -> start (take the runs' leases) -> resolve and wake each target ->
deliver to the inboxes with the occurrence keys -> record the runs -> update the loops.

Failure policy: a transient host failure (unreachable, timeout, 5xx) is retried with
exponential backoff inside the occurrence; a permanent one (target or preset gone, no global
interface) fails at once. every/cron loops keep their schedule either way.

With the embedded host (transactional) a whole batch — target changes, messages and records —
commits at once: a crash re-drives the batch and delivers nothing twice. A remote host's
deliveries are side effects: the inbox's occurrence-key idempotency absorbs a re-drive.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from dshloop.bulk import update_rows
from sessions_app.hosts import get_host
from sessions_app.hosts.base import HostError, Message

from .claims import OPEN_STATUSES, free_rows, lease
from .failures import after_failures, locked_loops, take_outcome
from .message import loop_message, run_source
from .models import Loop, LoopRun, LoopState, RunStatus, ScheduleKind
from .notify import CLOCK_MAX_SLEEP, notify_clocks
from .targets import BatchView, PermanentFailure, resolve_target

logger = logging.getLogger("dshloop.delivery")

MAX_ATTEMPTS = 6
BACKOFF_BASE = timedelta(seconds=1)
BACKOFF_CAP = timedelta(seconds=60)


def backoff(attempt: int) -> timedelta:
    """1 s, 2 s, 4 s, 8 s, 16 s after attempts 1..5: about 31 s of patience in all."""
    return min(BACKOFF_BASE * 2 ** (attempt - 1), BACKOFF_CAP)


@dataclass
class Outcome:
    run: LoopRun
    delivered: bool = False
    error: str = ""
    retry: bool = False  # transient: back to claimed, due again after a backoff


PAUSED_FIRST = "The loop was paused before this occurrence started, so it was not delivered."


def _start(run_ids: list[str], now: datetime) -> list[LoopRun]:
    """Take the runs' leases in one transaction, so one driver at a time delivers each.

    A scheduled occurrence of a loop paused before it started is skipped here, not delivered: the
    loop rows are locked too, so a pause that commits first is seen, and one that commits later
    finds the run started (it then finishes, as a run in flight does; contract §9).
    """
    with transaction.atomic(durable=True):
        free = LoopRun.objects.filter(
            Q(lease_until__isnull=True) | Q(lease_until__lte=now), run_id__in=run_ids, status__in=OPEN_STATUSES
        ).order_by("run_id")
        runs = list(free_rows(free))
        paused = set(
            Loop.objects.select_for_update()
            .filter(loop_id__in={run.loop_id for run in runs if not run.manual}, state=LoopState.PAUSED)
            .order_by("loop_id")
            .values_list("loop_id", flat=True)
        )
        skipped = [run for run in runs if run.loop_id in paused and not run.manual]
        runs = [run for run in runs if run.loop_id not in paused or run.manual]
        for run in skipped:
            logger.info(
                "loop=%s scheduled=%s outcome=skipped error=%r", run.loop_id, run.scheduled_at.isoformat(), PAUSED_FIRST
            )
        LoopRun.objects.filter(run_id__in=[run.run_id for run in skipped]).update(
            status=RunStatus.SKIPPED, error=PAUSED_FIRST, finished_at=now, retry_at=None, lease_until=None
        )
        LoopRun.objects.filter(run_id__in=[run.run_id for run in runs]).update(
            status=RunStatus.DELIVERING,
            attempt=F("attempt") + 1,
            started_at=Coalesce("started_at", Value(now)),
            lease_until=now + lease(),
            retry_at=now + lease(),
        )
    for run in runs:
        run.status, run.attempt, run.started_at = RunStatus.DELIVERING, run.attempt + 1, run.started_at or now
        run.lease_until = now + lease()
    return runs


def _failure(run: LoopRun, *, error: str, transient: bool) -> Outcome:
    if transient and run.attempt < MAX_ATTEMPTS:
        return Outcome(run, error=error, retry=True)
    return Outcome(run, error=error + (f" (gave up after {run.attempt} attempts)" if transient else ""))


def _prepare(run: LoopRun, loop: Loop | None, host) -> Outcome | Message:
    """Resolve and wake one run's target: the message to deliver, or the outcome already known."""
    if run.attempt > MAX_ATTEMPTS:
        # Every earlier driver died mid-delivery (its lease ran out): a poison occurrence must
        # not keep its loop `running` and be re-driven forever.
        return Outcome(
            run, error=f"Its process kept stopping before recording an outcome (gave up after {MAX_ATTEMPTS} attempts)."
        )
    source = run_source(run)
    try:
        if loop is None:
            raise PermanentFailure("The loop was deleted before this occurrence was delivered.")
        target = resolve_target(host, loop, run, source)
        run.target_session_id, run.fallback = target.session_id, target.fallback or run.fallback
        if (run.target or loop.session_id) == "new" and not host.transactional:
            # Remember the new session first: a retry of this occurrence must reuse it.
            LoopRun.objects.filter(run_id=run.run_id).update(
                target_session_id=run.target_session_id, fallback=run.fallback
            )
    except PermanentFailure as exc:
        return Outcome(run, error=str(exc))
    except HostError as exc:
        return _failure(run, error=str(exc), transient=exc.transient)
    except Exception as exc:
        logger.exception("resolving the target of %s raised", run.occurrence_key)
        return _failure(run, error=f"Unexpected error: {exc}", transient=True)
    return Message(
        target.session_id,
        loop_message(loop_id=loop.loop_id, prompt=run.prompt or loop.prompt),
        source,
        run.occurrence_key,
    )


def _deliver(runs: list[LoopRun], loops: dict[str, Loop], host) -> list[Outcome]:
    view = BatchView(
        host,
        {loop.session_id for loop in loops.values()}
        | {run.target for run in runs}
        | {loop.created_by_session_id for loop in loops.values()}
        | {run.target_session_id for run in runs},
    )
    prepared = [(run, _prepare(run, loops.get(run.loop_id), view)) for run in runs]
    pending = [(run, item) for run, item in prepared if isinstance(item, Message)]
    try:
        results = host.deliver_many([message for _, message in pending]) if pending else []
    except Exception as exc:
        logger.exception("delivering a batch of %d raised", len(pending))
        results = [HostError(f"Unexpected error: {exc}", transient=True)] * len(pending)
    delivered = {
        run.run_id: (
            Outcome(run, delivered=True)
            if not isinstance(result, HostError)
            else _failure(run, error=str(result), transient=result.transient)
        )
        for (run, _), result in zip(pending, results, strict=True)
    }
    return [delivered.get(run.run_id) or item for run, item in prepared]


def _record(outcomes: list[Outcome], loops: dict[str, Loop], now: datetime) -> None:
    """Record a batch of outcomes and update their loops; the caller holds the transaction."""
    # Only runs still under our lease are ours to record: if ours ran out and another driver took
    # over, its record wins. These rows are ours (leased), so wait for a lock another transaction
    # holds on one rather than skip it, in primary-key order like every writer of runs.
    leases = {outcome.run.run_id: outcome.run.lease_until for outcome in outcomes}
    ours = {
        run_id: (turn, summary, error)
        for run_id, lease_until, turn, summary, error in LoopRun.objects.select_for_update()
        .filter(run_id__in=list(leases), status__in=OPEN_STATUSES)
        .order_by("run_id")
        .values_list("run_id", "lease_until", "outcome", "summary", "error")
        if lease_until == leases[run_id]
    }
    outcomes = [outcome for outcome in outcomes if outcome.run.run_id in ours]
    for outcome in outcomes:
        # A host may report the turn's end before the delivery is recorded (contract §10).
        turn, outcome.run.summary, error = ours[outcome.run.run_id]
        if turn:
            outcome.run.outcome, outcome.error = turn, outcome.error or error
    for outcome in outcomes:
        _settle(outcome, now)
    update_rows(LoopRun, _RUN_FIELDS, [[o.run.run_id, *(getattr(o.run, f) for f in _RUN_FIELDS)] for o in outcomes])
    _update_loops(outcomes, loops, now)


_RUN_FIELDS = ("status", "error", "retry_at", "finished_at", "lease_until", "target_session_id", "fallback")


def _settle(outcome: Outcome, now: datetime) -> None:
    """Set a run's fields from its outcome, and log it: one line per occurrence."""
    run = outcome.run
    if outcome.retry:
        run.status, run.retry_at = RunStatus.CLAIMED, now + backoff(run.attempt)
        logger.warning(
            "loop=%s scheduled=%s outcome=retrying attempt=%d error=%r",
            run.loop_id,
            run.scheduled_at.isoformat(),
            run.attempt,
            outcome.error,
        )
    else:
        run.status = RunStatus.DELIVERED if outcome.delivered else RunStatus.FAILED
        run.retry_at, run.finished_at = None, now
        logger.info(
            "loop=%s scheduled=%s outcome=%s target=%s attempt=%d missed=%d%s",
            run.loop_id,
            run.scheduled_at.isoformat(),
            run.status,
            run.target_session_id or "-",
            run.attempt,
            run.missed,
            f" error={outcome.error!r}" if outcome.error else "",
        )
    run.error, run.lease_until = outcome.error, None


def _update_loops(outcomes: list[Outcome], loops: dict[str, Loop], now: datetime) -> None:
    """One UPDATE per distinct result: a batch that all went well is one statement."""
    finished = [outcome for outcome in outcomes if not outcome.retry]
    by_result = defaultdict(list)
    for outcome in finished:
        by_result[outcome.run.status, outcome.error, outcome.run.manual].append(outcome.run.loop_id)
    for (status, error, manual), loop_ids in by_result.items():
        # spec §3: a delivered `after` loop is completed and leaves the active list; a failed one
        # stays visible as failed. A manual run (run now) is not the loop's occurrence: it changes
        # neither. A loop deleted meanwhile is simply not updated; a paused one stays paused.
        after_state = LoopState.COMPLETED if status == RunStatus.DELIVERED else LoopState.FAILED
        states = [] if manual else [When(kind=ScheduleKind.AFTER, then=Value(after_state))]
        # A scheduled run that went well ends its loop's failure streak (issue 16).
        streak = {} if manual or status != RunStatus.DELIVERED else {"consecutive_failures": 0}
        Loop.objects.filter(loop_id__in=loop_ids).update(
            last_run_at=now,
            last_result=status,
            last_error=error,
            last_outcome="",
            last_summary="",
            state=Case(
                *states,
                When(state=LoopState.RUNNING, then=Value(LoopState.SCHEDULED)),
                default=F("state"),
            ),
            **streak,
        )
    _apply_failure_policy([outcome.run for outcome in finished], now)
    soon = now + timedelta(seconds=CLOCK_MAX_SLEEP)
    if any(
        loop.kind != ScheduleKind.AFTER and loop.next_at and loop.next_at < soon
        for loop in (loops.get(outcome.run.loop_id) for outcome in finished)
        if loop
    ):
        # Claimable again soon: a clock sleeping past that deadline must wake up.
        transaction.on_commit(notify_clocks)


def _apply_failure_policy(runs: list[LoopRun], now: datetime) -> None:
    """Back off or pause loops whose scheduled run failed (loops.failures). The rare runs whose
    turn's outcome the host reported before this record take it from the history instead."""
    reported = {run.loop_id: run for run in runs if run.outcome}
    failed = {run.loop_id: run for run in runs if run.status == RunStatus.FAILED and not run.outcome and not run.manual}
    if not reported and not failed:
        return
    for loop in locked_loops([*reported, *failed]):
        if loop.loop_id in reported:
            take_outcome(loop, reported[loop.loop_id], now=now)
        else:
            after_failures(loop, loop.consecutive_failures + 1, error=failed[loop.loop_id].error, now=now)


def deliver_runs(run_ids: list[str], *, now: datetime | None = None) -> int:
    """Drive a batch of runs to delivered, failed or a later retry; returns how many were ours.

    `now` pins the clock for the whole batch (STYLE §7); without it each step reads the clock,
    because host calls take real time and a backoff counts from the failure.
    """

    def clock() -> datetime:
        return now or timezone.now()

    runs = _start(run_ids, clock())
    if not runs:
        return 0
    host = get_host()
    loops = {loop.loop_id: loop for loop in Loop.objects.filter(loop_id__in={run.loop_id for run in runs})}
    if host.transactional:
        # The embedded host: messages, target changes and records commit together.
        with transaction.atomic(durable=True):
            _record(_deliver(runs, loops, host), loops, clock())
    else:
        # A remote host's deliveries are side effects: no transaction is held open across them.
        outcomes = _deliver(runs, loops, host)
        with transaction.atomic(durable=True):
            _record(outcomes, loops, clock())
    return len(runs)


def deliver_run(run_id: str, *, now: datetime | None = None) -> bool:
    """Drive one run. False if it was not ours to drive (finished, or leased by another driver)."""
    return deliver_runs([run_id], now=now) == 1
