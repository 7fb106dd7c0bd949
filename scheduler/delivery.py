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
from collections import defaultdict
from datetime import datetime, timedelta

from django.db import DatabaseError, transaction
from django.db.models import Case, F, Q, QuerySet, Value, When
from django.db.models.expressions import CombinedExpression
from django.utils import timezone

from core.backoff import doubling
from core.bulk import update_rows
from core.errors import one_line
from core.notify import CLOCK_MAX_SLEEP, notify_clocks
from loops.counters import Tally
from loops.models import ONE_SHOT_KINDS, Loop, LoopRun, LoopState, RunStatus
from loops.occurrence_log import log_occurrence
from loops.runs import OPEN_STATUSES, free_rows
from loops.services.ends import loops_end
from scheduler.failures import after_failures, fresh_run_failed, locked_loops, take_outcome
from scheduler.leases import lease_runs, still_leased
from scheduler.prepare import Attempt, NotAsExpected, host_failed, prepare_batch, refused
from scheduler.rows import LOOP_COLUMNS, OPEN_RUN_COLUMNS, DeliveryLoop, RunRow
from scheduler.targets import host_savepoint
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Delivered, Host, HostError, Message
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


def _deliver(runs: list[RunRow], loops: dict[str, DeliveryLoop], host: Host) -> list[Attempt]:
    return _attempts(host, prepare_batch(runs, loops, host))


def _attempts(host: Host, prepared: list[tuple[RunRow, Attempt | Message]]) -> list[Attempt]:
    """Deliver the prepared messages; each run's attempt, in order."""
    pending = [(run, item) for run, item in prepared if isinstance(item, Message)]
    results = _deliver_isolating(host, [message for _, message in pending]) if pending else []
    delivered = {
        run.run_id: (Attempt(run, delivered=True) if not isinstance(result, HostError) else host_failed(run, result))
        for (run, _), result in zip(pending, results, strict=True)
    }
    return [delivered[run.run_id] if isinstance(item, Message) else item for run, item in prepared]


# What recording a run changes on its row (_settle): put back when records written first are undone.
_SETTLED = ("status", "error", "retry_at", "finished_at", "lease_until")


def _deliver_and_record(runs: list[RunRow], loops: dict[str, DeliveryLoop], host: Host, now: datetime) -> None:
    """The embedded host, in the caller's transaction: the records first, the messages last.

    A message's inbox number is taken under a lock on its session that the next delivery to that
    session waits for until this transaction commits (sessions_app.services.inbox_deliver_many),
    so the messages go last: the lock is held for their INSERT and the commit only, not for the
    records too, and concurrent deliveries (several schedulers) that share sessions queue for less.
    The records are written as if every message is taken, which the host's own answer to the
    batch's target look-up has made nearly certain; if one is not (a session gone meanwhile, a
    write the database refuses), the savepoint undoes records and messages together and the batch
    is delivered first and recorded after, each message alone if need be (_deliver_isolating)."""
    prepared = prepare_batch(runs, loops, host)
    messages = [item for _, item in prepared if isinstance(item, Message)]
    expected = [Attempt(run, delivered=True) if isinstance(item, Message) else item for run, item in prepared]
    settled = [(run, [getattr(run, name) for name in _SETTLED]) for run in runs]
    try:
        with transaction.atomic():
            _record(expected, loops, now, finish=False).save()  # before the inbox locks (Tally.save)
            if messages and any(isinstance(result, HostError) for result in host.deliver_many(messages)):
                raise NotAsExpected
    except Exception as exc:  # noqa: BLE001 - whatever it was, the careful order finds the one that fails
        if not isinstance(exc, NotAsExpected):
            logger.warning("delivering a batch of %d raised (%s); delivering, then recording", len(runs), one_line(exc))
        for run, values in settled:
            for name, value in zip(_SETTLED, values, strict=True):
                setattr(run, name, value)
        _record(_attempts(host, prepared), loops, now, after_inbox=True)
        return
    _log(expected, now)


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
    attempts: list[Attempt],
    loops: dict[str, DeliveryLoop],
    now: datetime,
    *,
    finish: bool = True,
    after_inbox: bool = False,
) -> Tally:
    """Record a batch of attempts and update their loops; the caller holds the transaction and
    the runs' rows (taken or still leased). Then the batch's metric counters and one log line per
    occurrence, unless `finish` is False: the caller finishes with the Tally returned and _log.
    `after_inbox`: the transaction took inbox locks (an embedded host's messages delivered first)."""
    tally = Tally()
    for attempt in attempts:
        # A host may report the turn's end before the delivery is recorded (contract §10).
        if attempt.run.outcome:
            attempt.error = attempt.error or attempt.run.error
        _settle(attempt, now)
        if not attempt.retry:
            tally.finished(attempt.run.status)
        if attempt.delivered:
            tally.delivered_late(attempt.run.scheduled_at, now)
    update_rows(LoopRun, _RUN_FIELDS, [[o.run.run_id, *(getattr(o.run, f) for f in _RUN_FIELDS)] for o in attempts])
    _update_loops(attempts, loops, now, tally)
    if finish:
        # After the messages of an embedded host's batch that did not go as expected: the shard kept
        # for holders of inbox locks. A remote host's takes none: any shard, as the claims'.
        tally.save(after_inbox=after_inbox)
        _log(attempts, now)
    return tally


def _log(attempts: list[Attempt], now: datetime) -> None:
    """One line per occurrence, as recorded."""
    for attempt in attempts:
        run = attempt.run
        if attempt.retry:
            log_occurrence(logger, logging.WARNING, run, "retrying", now=now, error=attempt.error)
        else:
            log_occurrence(logger, logging.INFO, run, run.status, now=now, error=attempt.error)


_RUN_FIELDS = (
    "status",
    "error",
    "retry_at",
    "finished_at",
    "lease_until",
    "started_at",
    "target_session_id",
    "fallback",
)


def _settle(attempt: Attempt, now: datetime) -> None:
    """Set a run's fields from its delivery attempt."""
    run = attempt.run
    if attempt.retry:
        run.status, run.retry_at = RunStatus.CLAIMED, now + backoff(run.attempt)
    else:
        run.status = RunStatus.DELIVERED if attempt.delivered else RunStatus.FAILED
        run.retry_at, run.finished_at = None, now
    run.error, run.lease_until = attempt.error, None


def _update_loops(attempts: list[Attempt], loops: dict[str, DeliveryLoop], now: datetime, tally: Tally) -> None:
    """One UPDATE per distinct result: a batch that all went well is one statement. What the
    failure policy passes over is counted into the batch's `tally`."""
    finished = [attempt for attempt in attempts if not attempt.retry]
    by_result = defaultdict(list)
    for attempt in finished:
        by_result[attempt.run.status, attempt.error, attempt.run.manual].append(attempt.run.loop_id)
    for (status, error, manual), loop_ids in by_result.items():
        # spec §3: a delivered one-shot (`after`) loop is completed and leaves the active list; a failed one
        # stays visible as failed. A manual run (run now) is not the loop's occurrence: it changes
        # neither. A loop deleted meanwhile is simply not updated; a paused one stays paused.
        after_state = LoopState.COMPLETED if status == RunStatus.DELIVERED else LoopState.FAILED
        states = [] if manual else [When(kind__in=ONE_SHOT_KINDS, then=Value(after_state))]
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
            **_delivered_changes(status, manual=manual),
        )
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


def _delivered_changes(status: str, *, manual: bool) -> dict[str, Value | CombinedExpression]:
    """What a delivered scheduled run changes on its loop. It rides in the UPDATE that records the
    run, which writes the loop's row once per occurrence anyway (its last result): no row of its
    own. It ends the loop's failure streak, and counts the run (contract §16 runs_delivered): a loop
    has at most one scheduled run open (it is `running` until that run is recorded), so each loop of
    the UPDATE counts one. A manual run (run now) is an operator's test, not one of the loop's runs:
    it counts towards nothing, as it changes no state."""
    if manual or status != RunStatus.DELIVERED:
        return {}
    return {"consecutive_failures": Value(0), "runs_delivered": F("runs_delivered") + 1}


def _end_last_runs(attempts: list[Attempt], loops: dict[str, DeliveryLoop], now: datetime) -> None:
    """contract §16: a loop whose recorded run was its last is completed. Foreseen from the loop row
    the batch read (no read or write for any other run): the run that brings runs_delivered to
    max_runs, or, delivered or failed, the run whose loop's next occurrence lies past its ends_at
    (the claim found it the last, scheduler.claims). loops_end checks each against its row, locked."""
    ending = {}
    for attempt in attempts:
        run, loop = attempt.run, loops.get(attempt.run.loop_id)
        if run.manual or loop is None or loop.kind in ONE_SHOT_KINDS:
            continue
        delivered = loop.runs_delivered + (1 if run.status == RunStatus.DELIVERED else 0)
        if ends.runs_reached(delivered, loop.max_runs):
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
    attempts = _deliver(runs, loops, host)
    with transaction.atomic(durable=True):
        ours = {run.run_id for run in still_leased(runs)}
        recorded = [attempt for attempt in attempts if attempt.run.run_id in ours]
        # Runs, then loops, each in key order, as _take: the record's UPDATEs of the loops go by
        # result, in the runs' order, and must not be the first to lock them.
        list(_locked_loops([attempt.run for attempt in recorded]).values_list("loop_id", flat=True))
        _record(recorded, loops, clock())
    return len(runs) + skipped


def deliver_run(run_id: str, *, now: datetime | None = None) -> bool:
    """Drive one run. False if it was not ours to drive (finished, or leased by another driver);
    True once delivered, failed, skipped or due again after a backoff."""
    return deliver_runs([run_id], now=now) == 1
