"""Deliver claimed occurrences: the durable sequence of spec §5, a batch at a time.

claim (scheduler.claims) -> take the runs -> resolve and wake each target -> deliver to the inboxes
with the occurrence keys -> record the runs -> update the loops.

Failure policy: a transient host failure (a 5xx, a malformed answer) is retried with
exponential backoff inside the occurrence, and given up after MAX_ATTEMPTS; a host that gives no
answer at all (refused, reset, timed out) is retried on the same backoff until it answers, since
only its answer can tell whether an earlier attempt got through (scheduler.prepare.host_failed); a
permanent failure (target or preset gone, no global interface) fails at once. every/cron loops
keep their schedule either way.

With the embedded host (transactional) a whole batch — the runs taken, target changes, messages
and records — is one transaction, and the runs' row locks are their lease: a crash rolls the
messages back with the records and leaves the runs free for the clock to re-drive (no
separate lease-taking write). A remote host's deliveries are side effects made outside any
transaction, so its runs are leased first (`lease_until`) and recorded only while the lease is
still theirs; the inbox's occurrence-key idempotency absorbs a re-drive.

`attempt` counts the times a run was handed to a driver: the claim (or run now) hands it out
once, and each re-enqueue by the clock's recovery once more (scheduler.claims.recover_runs). So on
the embedded host a run whose driver keeps dying before it records anything still runs out of
attempts and is given up, although its crashed attempts leave no write behind (and no message). A
remote host's run past its attempts is asked of the host instead (scheduler.prepare): a lease that
ran out may hide a message that was sent.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from django.db import DatabaseError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.errors import one_line
from loops.counters import Tally
from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.occurrence_log import log_occurrence
from loops.runs import OPEN_STATUSES, free_rows
from scheduler.leases import lease_runs, still_leased
from scheduler.prepare import Attempt, NotAsExpected, host_failed, prepare_batch, refused
from scheduler.records import RUN_FIELDS, log_attempts, record_loops, settle_runs, write_runs
from scheduler.rows import LOOP_COLUMNS, OPEN_RUN_COLUMNS, DeliveryLoop, RunRow
from scheduler.targets import host_savepoint
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Delivered, Host, HostError, Message

logger = logging.getLogger("dshloop.delivery")

PAUSED_FIRST = "The loop was paused before this occurrence started, so it was not delivered."


def _take(run_ids: list[str], now: datetime) -> tuple[list[RunRow], dict[str, DeliveryLoop], int]:
    """Lock the batch's open runs that no other driver holds, and their loops; the caller holds
    the transaction. Returns the runs to deliver, their loops (a deleted loop is missing), and how
    many runs it recorded skipped instead.

    A scheduled occurrence of a loop paused before it started is skipped here, not delivered: the
    loop rows are locked too, so a pause that commits first is seen, and one that commits later
    finds the run started or finished (a run in flight finishes; contract §9).
    """
    free = LoopRun.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lte=now), run_id__in=run_ids, status__in=OPEN_STATUSES
    ).order_by("run_id")
    runs = [RunRow(*row) for row in free_rows(free).values_list(*OPEN_RUN_COLUMNS)]
    if not runs:
        return [], {}, 0
    # Runs, then loops, each in key order: the order of every writer of both (no deadlocks).
    loops = {row[0]: DeliveryLoop(*row) for row in _locked_loops(runs).values_list(*LOOP_COLUMNS)}

    def paused_first(run: RunRow) -> bool:
        loop = loops.get(run.loop_id)
        return not run.manual and loop is not None and loop.state == LoopState.PAUSED

    skipped = [run for run in runs if paused_first(run)]
    for run in skipped:
        log_occurrence(logger, logging.INFO, run, RunStatus.SKIPPED, now=now, error=PAUSED_FIRST)
    if skipped:
        LoopRun.objects.filter(run_id__in=[run.run_id for run in skipped]).update(
            status=RunStatus.SKIPPED, error=PAUSED_FIRST, finished_at=now, retry_at=None, lease_until=None
        )
        tally = Tally()
        tally.finished(RunStatus.SKIPPED, len(skipped))
        tally.save()
    for run in runs:
        run.started_at = run.started_at or now
    return [run for run in runs if not paused_first(run)], loops, len(skipped)


def _locked_loops(runs: list[RunRow]) -> QuerySet[Loop]:
    """The runs' loops, locked in key order when read: after the runs, as every writer of both."""
    return Loop.objects.select_for_update().filter(loop_id__in={run.loop_id for run in runs}).order_by("loop_id")


def _attempts(host: Host, prepared: list[tuple[RunRow, Attempt | Message]]) -> list[Attempt]:
    """Deliver the prepared messages; each run's attempt, in order."""
    pending = [(run, item) for run, item in prepared if isinstance(item, Message)]
    results = _deliver_isolating(host, [message for _, message in pending]) if pending else []
    delivered = {
        run.run_id: (Attempt(run, delivered=True) if not isinstance(result, HostError) else host_failed(run, result))
        for (run, _), result in zip(pending, results, strict=True)
    }
    return [delivered[run.run_id] if isinstance(item, Message) else item for run, item in prepared]


def expected(prepared: list[tuple[RunRow, Attempt | Message]]) -> list[Attempt]:
    """Each run's attempt as if the host takes every message: what a transactional host's batch
    records first, before its messages (deliver_last)."""
    return [Attempt(run, delivered=True) if isinstance(item, Message) else item for run, item in prepared]


def deliver_last(host: Host, prepared: list[tuple[RunRow, Attempt | Message]]) -> None:
    """The messages of a batch recorded as expected, last: on the embedded host a message's inbox
    number is taken under a lock on its session held to the commit (sessions_app.services
    .inbox_deliver_many), so the lock covers only the INSERT and the commit, not the records too.
    NotAsExpected if the host did not take one: the caller's savepoint undoes the batch."""
    messages = [item for _, item in prepared if isinstance(item, Message)]
    if messages and any(isinstance(result, HostError) for result in host.deliver_many(messages)):
        raise NotAsExpected


def _deliver_and_record(runs: list[RunRow], loops: dict[str, DeliveryLoop], host: Host, now: datetime) -> None:
    """The embedded host, in the caller's transaction: the records first, the messages last
    (deliver_last). The records are written as if every message is taken, which the host's own
    answer to the batch's target look-up has made nearly certain; if one is not (a session gone
    meanwhile, a write the database refuses), the savepoint undoes records and messages together and
    the batch is delivered first and recorded after, each message alone if need be
    (_deliver_isolating)."""
    prepared = prepare_batch(runs, loops, host)
    attempts = expected(prepared)
    settled = [(run, [getattr(run, name) for name in RUN_FIELDS]) for run in runs]
    trial = {loop_id: replace(loop) for loop_id, loop in loops.items()}  # record_loops counts on them
    try:
        with transaction.atomic():
            _record(attempts, trial, now)  # its counters before the inbox locks (Tally.save)
            deliver_last(host, prepared)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the careful order finds the one that fails
        if not isinstance(exc, NotAsExpected):
            logger.warning("delivering a batch of %d raised (%s); delivering, then recording", len(runs), one_line(exc))
        for run, values in settled:
            for name, value in zip(RUN_FIELDS, values, strict=True):
                setattr(run, name, value)
        attempts = _attempts(host, prepared)
        _record(attempts, loops, now, after_inbox=True)
    log_attempts(attempts, now)


def _deliver_isolating(host: Host, messages: list[Message]) -> list[Delivered | HostError]:
    """The host's deliver_many, with a message that makes it raise failing alone.

    On the embedded host the messages are written in the batch's own transaction, where one
    refused insert (a constraint, a trigger) would doom the whole transaction, and with it the
    records of every run beside it. So the call runs in a savepoint; if it raises, the savepoint is
    rolled back and each message is delivered again on its own (in its own savepoint), so the others
    are delivered as if nothing happened and the one that raises fails with its own error. A remote
    host needs no savepoint: a message it did take is found again by its occurrence key."""
    try:
        with host_savepoint(host):
            return host.deliver_many(messages)
    except Exception as exc:
        if len(messages) > 1:
            logger.warning("delivering a batch of %d raised (%s); delivering each alone", len(messages), one_line(exc))
            return [result for message in messages for result in _deliver_isolating(host, [message])]
        if isinstance(exc, DatabaseError):
            logger.warning("the database refused the message of %s: %s", messages[0].occurrence_key, one_line(exc))
            return [refused(exc)]
        logger.exception("delivering %s raised", messages[0].occurrence_key)
        return [HostError(f"Unexpected error: {exc}", transient=True)]


def _record(
    attempts: list[Attempt], loops: dict[str, DeliveryLoop], now: datetime, *, after_inbox: bool = False
) -> None:
    """Record a batch of attempts and their loops (scheduler.records), then the batch's metric
    counters; the caller holds the transaction and the runs' rows (taken or still leased), and logs
    the attempts once it commits. `after_inbox`: the transaction took inbox locks (an embedded host's
    messages delivered first): the counters go to the shard kept for holders of inbox locks."""
    tally = Tally()
    settle_runs(attempts, now, tally)
    write_runs(attempts)
    record_loops(attempts, loops, now, tally)
    tally.save(after_inbox=after_inbox)


def deliver_runs(run_ids: list[str], *, now: datetime | None = None) -> int:
    """Drive a batch of runs to delivered, failed, skipped (their loop paused first) or a later
    retry; returns how many were ours.

    `now` pins the clock for the whole batch (STYLE §7); without it each step reads the clock,
    because host calls take real time and a backoff counts from the failure.
    """

    def clock() -> datetime:
        return now or timezone.now()

    host = get_host()
    if host.capabilities.transactional:
        # The embedded host: runs taken, messages, target changes and records commit together.
        with transaction.atomic(durable=True):
            runs, loops, skipped = _take(run_ids, clock())
            if runs:
                _deliver_and_record(runs, loops, host, clock())
        return len(runs) + skipped
    # A remote host's deliveries are side effects: no transaction is held open across them.
    with transaction.atomic(durable=True):
        runs, loops, skipped = _take(run_ids, clock())
        lease_runs(runs, clock())
    if not runs:
        return skipped
    attempts = _attempts(host, prepare_batch(runs, loops, host))
    with transaction.atomic(durable=True):
        ours = {run.run_id for run in still_leased(runs)}
        recorded = [attempt for attempt in attempts if attempt.run.run_id in ours]
        # Runs, then loops, each in key order, as _take; read again under the lock, so that the
        # record counts on the loops as they are now (an operator may have paused one meanwhile).
        locked = _locked_loops([attempt.run for attempt in recorded]).values_list(*LOOP_COLUMNS)
        _record(recorded, {row[0]: DeliveryLoop(*row) for row in locked}, clock())
    log_attempts(recorded, clock())
    return len(runs) + skipped


def deliver_run(run_id: str, *, now: datetime | None = None) -> bool:
    """Drive one run. False if it was not ours to drive (finished, or leased by another driver);
    True once delivered, failed, skipped or due again after a backoff."""
    return deliver_runs([run_id], now=now) == 1
