"""Deliver one claimed occurrence: the durable sequence of spec §5.

claim (loops.claims) -> start (take the run's lease) -> resolve and wake the target ->
deliver to the inbox with the occurrence key -> record the run -> update the loop.

Failure policy: a transient host failure (unreachable, timeout, 5xx) is retried with
exponential backoff inside the occurrence; a permanent one (target or preset gone, no global
interface) fails at once. every/cron loops keep their schedule either way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from sessions_app.hosts import get_host
from sessions_app.hosts.base import HostError

from .claims import OPEN_STATUSES, lease, locked
from .clock import MAX_SLEEP, notify_clocks
from .message import loop_message, run_source
from .models import Loop, LoopRun, LoopState, RunStatus, ScheduleKind
from .targets import PermanentFailure, resolve_target

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


def _start(run_ids: list[str], now: datetime) -> list[LoopRun]:
    """Take the runs' leases in one transaction, so one driver at a time delivers each."""
    with transaction.atomic():
        free = LoopRun.objects.filter(
            Q(lease_until__isnull=True) | Q(lease_until__lte=now), run_id__in=run_ids, status__in=OPEN_STATUSES
        ).order_by("run_id")
        runs = list(locked(free))
        LoopRun.objects.filter(run_id__in=[run.run_id for run in runs]).update(
            status=RunStatus.DELIVERING, attempt=F("attempt") + 1, started_at=Coalesce("started_at", Value(now)),
            lease_until=now + lease(), retry_at=now + lease(),
        )
    for run in runs:
        run.status, run.attempt, run.started_at = RunStatus.DELIVERING, run.attempt + 1, run.started_at or now
    return runs


def _attempt(run: LoopRun, loop: Loop | None, host, clock) -> Outcome:
    """Resolve, wake and deliver one run. Host calls only; the outcome is recorded by _record."""
    if run.attempt > MAX_ATTEMPTS:
        # Every earlier driver died mid-delivery (its lease ran out): a poison occurrence must
        # not keep its loop `running` and be re-driven forever.
        return Outcome(run, error=f"Its process kept stopping before recording an outcome (gave up after "
                                  f"{MAX_ATTEMPTS} attempts).")
    source = run_source(run)
    try:
        if loop is None:
            raise PermanentFailure("The loop was deleted before this occurrence was delivered.")
        target = resolve_target(host, loop, run, source)
        run.target_session_id, run.fallback = target.session_id, target.fallback or run.fallback
        if loop.session_id == "new":
            # Remember the new session first: a retry of this occurrence must reuse it.
            LoopRun.objects.filter(run_id=run.run_id).update(target_session_id=run.target_session_id,
                                                              fallback=run.fallback)
        host.deliver(target.session_id, text=loop_message(loop_id=loop.loop_id, prompt=loop.prompt),
                     source=source, occurrence_key=run.occurrence_key)
    except PermanentFailure as exc:
        return Outcome(run, error=str(exc))
    except HostError as exc:
        return _failure(run, error=str(exc), transient=exc.transient)
    except Exception as exc:  # noqa: BLE001 - an unexpected error is retried, never lost
        logger.exception("delivery of %s raised", run.occurrence_key)
        return _failure(run, error=f"Unexpected error: {exc}", transient=True)
    return Outcome(run, delivered=True)


def _failure(run: LoopRun, *, error: str, transient: bool) -> Outcome:
    if transient and run.attempt < MAX_ATTEMPTS:
        return Outcome(run, error=error, retry=True)
    return Outcome(run, error=error + (f" (gave up after {run.attempt} attempts)" if transient else ""))


def _record(outcomes: list[Outcome], now: datetime) -> None:
    """Record a batch of outcomes and update their loops in one transaction."""
    with transaction.atomic():
        # Locked, in a stable order (no deadlock between batches): a loop_delete committing between
        # this read and the saves below would otherwise make a save fail.
        loop_ids = {outcome.run.loop_id for outcome in outcomes}
        loops = {loop.loop_id: loop for loop in
                 Loop.objects.select_for_update().filter(loop_id__in=loop_ids).order_by("loop_id")}
        for outcome in outcomes:
            _record_one(outcome, loops.get(outcome.run.loop_id), now)


def _record_one(outcome: Outcome, loop: Loop | None, now: datetime) -> None:
    run = outcome.run
    still_open = LoopRun.objects.filter(run_id=run.run_id, status__in=OPEN_STATUSES)
    if outcome.retry:
        still_open.update(status=RunStatus.CLAIMED, error=outcome.error, lease_until=None,
                          retry_at=now + backoff(run.attempt), target_session_id=run.target_session_id)
        logger.warning("loop=%s scheduled=%s outcome=retrying attempt=%d error=%r",
                       run.loop_id, run.scheduled_at.isoformat(), run.attempt, outcome.error)
        return
    status = RunStatus.DELIVERED if outcome.delivered else RunStatus.FAILED
    closed = still_open.update(status=status, error=outcome.error, finished_at=now, retry_at=None, lease_until=None,
                               target_session_id=run.target_session_id, fallback=run.fallback)
    if not closed:  # another driver finished it first
        return
    logger.info(
        "loop=%s scheduled=%s outcome=%s target=%s attempt=%d missed=%d%s",
        run.loop_id, run.scheduled_at.isoformat(), status, run.target_session_id or "-", run.attempt,
        run.missed, f" error={outcome.error!r}" if outcome.error else "",
    )
    if loop is None:
        return
    loop.last_run_at, loop.last_result, loop.last_error = now, status, outcome.error
    if loop.kind == ScheduleKind.AFTER:
        # spec §3: a delivered `after` loop is completed and leaves the active list; a failed one
        # stays visible as failed.
        loop.state = LoopState.COMPLETED if outcome.delivered else LoopState.FAILED
    elif loop.state == LoopState.RUNNING:
        loop.state = LoopState.SCHEDULED
    loop.save(update_fields=["last_run_at", "last_result", "last_error", "state"])
    if loop.state == LoopState.SCHEDULED and loop.next_at and loop.next_at - now < timedelta(seconds=MAX_SLEEP):
        # The loop is claimable again: a clock sleeping past its deadline must wake up (PostgreSQL
        # folds identical notifications of one transaction into one).
        transaction.on_commit(notify_clocks)


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
    outcomes = [_attempt(run, loops.get(run.loop_id), host, clock) for run in runs]
    _record(outcomes, clock())
    return len(runs)


def deliver_run(run_id: str, *, now: datetime | None = None) -> bool:
    """Drive one run. False if it was not ours to drive (finished, or leased by another driver)."""
    return deliver_runs([run_id], now=now) == 1
