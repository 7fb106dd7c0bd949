"""Deliver one claimed occurrence: the durable sequence of spec §5.

claim (loops.claims) -> start (take the run's lease) -> resolve and wake the target ->
deliver to the inbox with the occurrence key -> record the run -> update the loop.

Failure policy: a transient host failure (unreachable, timeout, 5xx) is retried with
exponential backoff inside the occurrence; a permanent one (target or preset gone, no global
interface) fails at once. every/cron loops keep their schedule either way.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sessions_app.hosts import get_host
from sessions_app.hosts.base import HostError

from .claims import OPEN_STATUSES, lease
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


def _start(run_id: str, now: datetime) -> LoopRun | None:
    """Take the run's lease (compare-and-swap), so one driver at a time delivers it."""
    taken = LoopRun.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lte=now), run_id=run_id, status__in=OPEN_STATUSES
    ).update(status=RunStatus.DELIVERING, lease_until=now + lease(), retry_at=now + lease())
    if not taken:
        return None
    run = LoopRun.objects.get(run_id=run_id)
    run.attempt += 1
    run.started_at = run.started_at or now
    run.save(update_fields=["attempt", "started_at"])
    return run


def _finish(run: LoopRun, *, delivered: bool, error: str, now: datetime) -> None:
    with transaction.atomic():
        status = RunStatus.DELIVERED if delivered else RunStatus.FAILED
        closed = LoopRun.objects.filter(run_id=run.run_id, status__in=OPEN_STATUSES).update(
            status=status, error=error, finished_at=now, retry_at=None, lease_until=None,
            target_session_id=run.target_session_id, fallback=run.fallback,
        )
        if not closed:  # another driver finished it first
            return
        # Locked (PostgreSQL): a loop_delete committing between this read and the save below would
        # otherwise make the save fail and leave a delivered run to be re-driven as "failed".
        loop = Loop.objects.select_for_update().filter(loop_id=run.loop_id).first()
        if loop is None:
            return
        loop.last_run_at, loop.last_result, loop.last_error = now, status, error
        if loop.kind == ScheduleKind.AFTER:
            # spec §3: a delivered `after` loop is completed and leaves the active list; a failed
            # one stays visible as failed.
            loop.state = LoopState.COMPLETED if delivered else LoopState.FAILED
        elif loop.state == LoopState.RUNNING:
            loop.state = LoopState.SCHEDULED
        loop.save(update_fields=["last_run_at", "last_result", "last_error", "state"])
        if loop.state == LoopState.SCHEDULED and loop.next_at and loop.next_at - now < timedelta(seconds=MAX_SLEEP):
            # The loop is claimable again: a clock sleeping past its deadline must wake up.
            transaction.on_commit(notify_clocks)
    logger.info(
        "loop=%s scheduled=%s outcome=%s target=%s attempt=%d missed=%d%s",
        run.loop_id, run.scheduled_at.isoformat(), status, run.target_session_id or "-", run.attempt,
        run.missed, f" error={error!r}" if error else "",
    )


def _retry_later(run: LoopRun, *, error: str, now: datetime) -> None:
    LoopRun.objects.filter(run_id=run.run_id, status__in=OPEN_STATUSES).update(
        status=RunStatus.CLAIMED, error=error, lease_until=None, retry_at=now + backoff(run.attempt),
        target_session_id=run.target_session_id,
    )
    logger.warning("loop=%s scheduled=%s outcome=retrying attempt=%d error=%r",
                   run.loop_id, run.scheduled_at.isoformat(), run.attempt, error)


def deliver_run(run_id: str, *, now: datetime | None = None) -> bool:
    """Drive one run to delivered, failed or a later retry. False if it was not ours to drive.

    `now` pins the clock for the whole run (STYLE §7); without it each step reads the clock,
    because host calls take real time and a backoff counts from the failure.
    """

    def clock() -> datetime:
        return now or timezone.now()

    run = _start(run_id, clock())
    if run is None:
        return False
    if run.attempt > MAX_ATTEMPTS:
        # Every earlier driver died mid-delivery (its lease ran out): a poison occurrence must
        # not keep its loop `running` and be re-driven forever.
        error = f"Its process kept stopping before recording an outcome (gave up after {MAX_ATTEMPTS} attempts)."
        _finish(run, delivered=False, error=error, now=clock())
        return True
    host = get_host()
    loop = Loop.objects.filter(loop_id=run.loop_id).first()
    source = run_source(run)
    try:
        if loop is None:
            raise PermanentFailure("The loop was deleted before this occurrence was delivered.")
        target = resolve_target(host, loop, run, source)
        run.target_session_id, run.fallback = target.session_id, target.fallback or run.fallback
        # Remember the target first: a retry of a `new` loop must reuse the session just made.
        LoopRun.objects.filter(run_id=run_id).update(target_session_id=run.target_session_id, fallback=run.fallback)
        host.deliver(target.session_id, text=loop_message(loop_id=loop.loop_id, prompt=loop.prompt),
                     source=source, occurrence_key=run.occurrence_key)
    except PermanentFailure as exc:
        _finish(run, delivered=False, error=str(exc), now=clock())
    except HostError as exc:
        _fail_or_retry(run, error=str(exc), transient=exc.transient, now=clock())
    except Exception as exc:  # noqa: BLE001 - an unexpected error is retried, never lost
        logger.exception("delivery of %s raised", run.occurrence_key)
        _fail_or_retry(run, error=f"Unexpected error: {exc}", transient=True, now=clock())
    else:
        _finish(run, delivered=True, error="", now=clock())
    return True


def _fail_or_retry(run: LoopRun, *, error: str, transient: bool, now: datetime) -> None:
    if transient and run.attempt < MAX_ATTEMPTS:
        _retry_later(run, error=error, now=now)
    else:
        suffix = f" (gave up after {run.attempt} attempts)" if transient else ""
        _finish(run, delivered=False, error=error + suffix, now=now)
