"""The clock's unit of work: claim due occurrences, and re-enqueue runs that need driving.

An occurrence's life reads top to bottom here and in scheduler.delivery: claim (claim_due: the due
loops locked, each one's catch-up decided, scheduler.catch_ups) -> resolve its target
(scheduler.prepare) -> deliver -> record (scheduler.records, the one definition of what a run and
its loop record). A host whose writes are rows of this database (Capabilities.transactional, the
embedded host) has the clock's claim take all four steps in its own transaction: a run is inserted
already recorded, its loop moved on and recorded in one UPDATE, its message inserted last. Any
other host's runs are enqueued, in the claim's transaction, for a worker (scheduler.delivery
.deliver_runs), which takes the same steps.

Correctness rests on the unique occurrence key and on a claim that changes exactly one row:
`SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL (so concurrent clocks take disjoint rows), a
compare-and-swap UPDATE on SQLite (where row locks do not exist; IMMEDIATE transactions
serialize writers). The delivery is enqueued on django-q2's ORM broker inside the same
transaction, so a crash can neither lose nor double an occurrence (django-q2 #293).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime
from operator import attrgetter

from django.db import DatabaseError, connection, transaction
from django.db.models import F, Min
from django.utils import timezone

from core.bulk import insert_rows, update_rows
from core.errors import one_line
from loops.counters import Tally
from loops.events import SCHEDULER, record_event
from loops.models import SCHEDULE_COLUMNS, EventKind, Loop, LoopRun, LoopState, RunStatus
from loops.occurrence_log import log_occurrence
from loops.queue import enqueue_deliveries
from loops.runs import OPEN_STATUSES, free_rows, lease, skip_reason, skipped_occurrence_key
from scheduler.catch_ups import advance, bound_fresh_run, deadline, finish_unsent, new_run
from scheduler.delivery import deliver_last, expected
from scheduler.prepare import NotAsExpected, prepare_batch
from scheduler.records import RUN_FIELDS, log_attempts, record_loops, settle_runs
from scheduler.rows import LOOP_COLUMNS, NEW_RUN_COLUMNS, OPEN_RUN_COLUMNS, DeliveryLoop, NewRun, RunRow
from scheduler.stored_times import in_clock_form
from scheduler.unattended import Capacity
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Host
from sessions_app.models import ReservedTarget
from timing import ends

logger = logging.getLogger("dshloop.clock")

CLAIM_BATCH = 500  # loops per claim transaction: two delivery tasks (scheduler.tasks)
HELP_SECONDS = 5.0  # the longest a task worker claims beside a clock (claim_burst)


RUN_COLUMNS = NEW_RUN_COLUMNS  # every column of a run, in the order a claim inserts them


_columns_of = attrgetter(*RUN_COLUMNS)
# A recorded run's columns: what its record set (scheduler.records.RUN_FIELDS) in place of the claim's.
_RECORDED = [(index, name) for index, name in enumerate(RUN_COLUMNS) if name in RUN_FIELDS]


def _insert(runs: list[NewRun], *, skip_conflicts: bool = False, recorded: dict[str, RunRow] | None = None) -> set[str]:
    """INSERT the runs; returns the IDs of those inserted (see core.bulk.insert_rows). skip_conflicts:
    a run whose occurrence key is taken is left out; any other conflict raises. `recorded`: the runs
    a claim drove itself, by run ID, inserted as recorded."""
    rows = [list(_columns_of(run)) for run in runs]
    for run, row in zip(runs, rows, strict=True):
        if recorded and (settled := recorded.get(run.run_id)) is not None:
            for index, name in _RECORDED:
                row[index] = getattr(settled, name)
    skip_on = ("occurrence_key",) if skip_conflicts else ()
    return insert_rows(LoopRun, RUN_COLUMNS, rows, skip_conflicts_on=skip_on)


def _record_broken(loop: Loop, error: Exception, now: datetime, tally: Tally) -> None:
    """One loop whose schedule cannot be computed fails alone (its own savepoint)."""
    message = f"The schedule could not be computed: {error}"
    run = new_run(loop, scheduled_at=deadline(loop), now=now)
    finish_unsent(run, RunStatus.FAILED, message, now)
    log_occurrence(logger, logging.ERROR, run, RunStatus.FAILED, now=now, error=message)
    with transaction.atomic():
        _insert([run])
        Loop.objects.filter(loop_id=loop.loop_id).update(
            state=LoopState.FAILED, next_at=None, last_run_at=now, last_result=RunStatus.FAILED, last_error=message
        )
    tally.finished(RunStatus.FAILED)


# What a claim reads of a loop: its schedule and what its run snapshots (parsing the other columns
# of every claimed loop would cost more than the schedule maths). Not the prompt: a run reads its
# loop's while the loop is at the run's revision (loops.models.keep_revision_prompt).
_CLAIM_FIELDS = ["loop_id", "state", "next_at", *SCHEDULE_COLUMNS]
_CLAIM_FIELDS += ["created_at", "schedule_from", "session_id", "revision", "overlap"]
_CLAIM_FIELDS += ["ends_at", "max_runs", "runs_delivered"]
# And what delivering its run reads of it (scheduler.rows.DeliveryLoop), for a claim that delivers.
_DELIVERY_FIELDS = [name for name in LOOP_COLUMNS if name not in _CLAIM_FIELDS]


class Claimed(list[str]):
    """The run IDs a claim enqueued for a worker; how many runs it drove itself (claim_due's
    `deliver`: recorded delivered, failed, or to retry); and how many due `new` loops it left waiting
    for a free slot (scheduler.unattended): while some wait, the clock polls for a freed slot."""

    recorded = 0
    waiting = 0

    @property
    def taken(self) -> int:
        """The occurrences it took, enqueued or driven: a full claim means more is due now."""
        return len(self) + self.recorded


def claim_due(*, now: datetime, limit: int = CLAIM_BATCH, deliver: bool = False) -> Claimed:
    """Claim up to `limit` due loops in one short transaction; returns the run IDs it enqueued.

    `deliver` (the clock's claims): on a host whose writes are rows of this database
    (Capabilities.transactional), the claim resolves, delivers and records its runs itself, in its
    own transaction (_Batch.write_delivered); a remote host's deliveries are side effects, never
    made inside a claim: its runs are enqueued for a worker, as are everyone's without `deliver`."""
    capacity = Capacity(now)
    host = get_host() if deliver else None
    if host is not None and not host.capabilities.transactional:
        host = None
    with transaction.atomic(durable=True):
        loops = _due_loops(now, limit, for_delivery=host is not None)
        runs, advanced, tally, misfired = [], [], Tally(), set()
        ended: list[tuple[Loop, str]] = []  # contract §16: loops this claim completed, and their bound
        for loop in loops:
            due_at = loop.next_at
            assert due_at is not None  # next_at <= now
            try:
                run, bound = advance(loop, now)
            except Exception as exc:  # noqa: BLE001 - any bad row must not block the batch
                loop.next_at = due_at
                try:
                    _record_broken(loop, exc, now, tally)
                except DatabaseError:  # its savepoint rolled back; the others still go ahead
                    logger.exception("could not record the failure of loop %s", loop.loop_id)
                continue
            if run is not None and run.status == RunStatus.SKIPPED:
                misfired.add(run.run_id)
            if (
                run is not None
                and loop.session_id == ReservedTarget.NEW
                and not bound_fresh_run(loop, run, due_at, now, capacity)
            ):
                continue  # waits for a slot, due as it was
            if connection.vendor != "postgresql":
                # Compare-and-swap: only the clock that still sees the old deadline wins.
                won = Loop.objects.filter(loop_id=loop.loop_id, state=LoopState.SCHEDULED, next_at=due_at).update(
                    state=loop.state, next_at=loop.next_at
                )
                if not won:  # another clock took it first
                    continue
            else:
                advanced.append(loop)
            if bound is not None:
                ended.append((loop, bound))
            if run is not None:
                runs.append(run)
        batch = _Batch(runs, advanced, ended, {loop.loop_id: loop for loop in loops}, tally, misfired, now)
        delivered = batch.write_delivered(host) if host is not None else None
        claimed = delivered if delivered is not None else batch.write()
        claimed.waiting = capacity.waiting
    return claimed


def claim_burst(*, seconds: float = HELP_SECONDS, batch: int = CLAIM_BATCH) -> int:
    """A task worker's help with a burst that a clock found (scheduler.clock): claim as the clock
    does, beside it, until a claim is not full or `seconds` have passed (a worker has deliveries to
    run too); returns the occurrences claimed. Claims are safe side by side (SKIP LOCKED), so a
    second claimer puts the other core to work while the first waits for PostgreSQL. The same claim
    as the clock's, for any host: on the embedded host it delivers, on any other it enqueues."""
    until, total = time.monotonic() + seconds, 0
    while True:
        claimed = claim_due(now=timezone.now(), limit=batch, deliver=True)
        total += claimed.taken
        if claimed.taken < batch or time.monotonic() >= until:
            return total


def _due_loops(now: datetime, limit: int, *, for_delivery: bool) -> list[Loop]:
    """The due loops this claim takes, locked (PostgreSQL). Uses loop_due_idx. A deadline written by
    hand in another form (SQLite) is not seen here until housekeeping has repaired it
    (scheduler.stored_times): read as it is, it could stop every claim."""
    fields = [*_CLAIM_FIELDS, *(_DELIVERY_FIELDS if for_delivery else ())]
    due = in_clock_form(Loop.objects.filter(state=LoopState.SCHEDULED, next_at__lte=now))
    return list(free_rows(due.order_by("next_at").only(*fields))[:limit])


_open_columns_of = attrgetter(*OPEN_RUN_COLUMNS)
_loop_columns_of = attrgetter(*LOOP_COLUMNS)


def _run_row(run: NewRun, now: datetime) -> RunRow:
    """A run just claimed, as its driver sees it once taken (scheduler.delivery._take)."""
    row = RunRow(*_open_columns_of(run))
    row.started_at = now
    return row


class _Batch:
    """What one claim has decided, to be written: its runs, its loops moved on, those it ended."""

    def __init__(
        self,
        runs: list[NewRun],
        advanced: list[Loop],
        ended: list[tuple[Loop, str]],
        loops: dict[str, Loop],
        tally: Tally,
        misfired: set[str],
        now: datetime,
    ):
        self.runs, self.advanced, self.ended, self.loops = runs, advanced, ended, loops
        self.tally, self.misfired, self.now = tally, misfired, now

    def write(self) -> Claimed:
        """Write the claim: its runs are enqueued for a worker to deliver (scheduler.delivery)."""
        now, tally, runs = self.now, self.tally, self.runs
        # The unique occurrence key is the last guard against a double dispatch: a run that holds
        # one of these keys already (a restored backup, a next_at moved back by hand) keeps it,
        # and only the runs inserted here are delivered.
        inserted = _insert(runs, skip_conflicts=True)
        update_rows(Loop, ("state", "next_at"), [[loop.loop_id, loop.state, loop.next_at] for loop in self.advanced])
        self._record_ended()
        skipped = _skip_taken(
            [run for run in runs if run.run_id not in inserted], self.loops, now, tally, self.misfired
        )
        misfires = [run for run in runs if run.run_id in inserted and run.status == RunStatus.SKIPPED]
        _record_misfires(misfires, self.loops, now, tally)
        tally.missed(sum(run.missed for run in runs if run.run_id in inserted) + sum(run.missed for run in skipped))
        tally.save()
        # Only the claimed runs are delivered; misfires were inserted already finished (skipped).
        claimed = Claimed(run.run_id for run in runs if run.run_id in inserted and run.status == RunStatus.CLAIMED)
        enqueue_deliveries(claimed)
        _log_misfires(misfires, now)
        return claimed

    def write_delivered(self, host: Host) -> Claimed | None:
        """Write the claim with its runs delivered here, in a savepoint: None if that did not go as
        expected (undone: the caller writes the claim again with write(), and a worker's careful
        order finds the run that fails, scheduler.delivery)."""
        counts = Counter(self.tally.counts)
        try:
            with transaction.atomic():
                return self._deliver(host)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the delivery path finds the one that fails
            if not isinstance(exc, NotAsExpected):
                logger.warning("a claim delivering its runs raised (%s); enqueueing them instead", one_line(exc))
            self.tally.counts = counts
            return None

    def _deliver(self, host: Host) -> Claimed:
        """resolve -> record -> deliver, the delivery path's own steps, on the runs as claimed: each
        run is inserted once, already recorded; its loop moved on and recorded in one UPDATE; its
        message inserted last (scheduler.delivery.deliver_last). Three rows an occurrence."""
        now, tally = self.now, self.tally
        rows = [_run_row(run, now) for run in self.runs if run.status == RunStatus.CLAIMED]
        loops = {row.loop_id: DeliveryLoop(*_loop_columns_of(self.loops[row.loop_id])) for row in rows}
        prepared = prepare_batch(rows, loops, host)
        attempts = expected(prepared)  # as if the host takes every message, as a worker records them
        settle_runs(attempts, now, tally)
        if len(_insert(self.runs, skip_conflicts=True, recorded={row.run_id: row for row in rows})) < len(self.runs):
            raise NotAsExpected  # an occurrence that has a run already: write() skips it, visibly
        recorded = record_loops(attempts, loops, now, tally, moved_on=True)
        moved = [[loop.loop_id, loop.state, loop.next_at] for loop in self.advanced if loop.loop_id not in recorded]
        update_rows(Loop, ("state", "next_at"), moved)
        self._record_ended()
        misfires = [run for run in self.runs if run.status == RunStatus.SKIPPED]
        _record_misfires(misfires, self.loops, now, tally)
        tally.missed(sum(run.missed for run in self.runs))
        tally.save()  # before the inbox locks (Tally.save)
        deliver_last(host, prepared)
        log_attempts(attempts, now)
        _log_misfires(misfires, now)
        claimed = Claimed()
        claimed.recorded = len(attempts)
        return claimed

    def _record_ended(self) -> None:
        for loop, bound in self.ended:
            changes = ends.ended_changes(
                bound, ends_at=loop.ends_at, max_runs=loop.max_runs, runs_delivered=loop.runs_delivered, now=self.now
            )
            record_event(loop, EventKind.ENDED, SCHEDULER, at=self.now, changes=changes)


def _record_misfires(runs: list[NewRun], loops: dict[str, Loop], now: datetime, tally: Tally) -> None:
    """Catch-ups later than the misfire grace, and occurrences skipped for overlap or capacity
    (scheduler.unattended), now recorded as skipped runs: say so in the counters (and, once the
    claim is written, the log: _log_misfires). A recurring loop was already moved on to its next
    occurrence and keeps its last result (the reason is on the run); a failed one-shot shows the
    reason itself."""
    for run in runs:
        tally.finished(RunStatus.SKIPPED)
        if reason := skip_reason(run.error):
            tally.skipped_for(reason)
        if loops[run.loop_id].schedule.one_shot:
            Loop.objects.filter(loop_id=run.loop_id).update(
                last_run_at=now, last_result=RunStatus.FAILED, last_error=run.error
            )


def _log_misfires(runs: list[NewRun], now: datetime) -> None:
    """One line per misfire, written after the claim that recorded them, so that a claim undone to
    its savepoint and written again (write_delivered, then write) says it once."""
    for run in runs:
        log_occurrence(logger, logging.WARNING, run, RunStatus.SKIPPED, now=now, error=run.error)


def _skip_taken(
    runs: list[NewRun], loops: dict[str, Loop], now: datetime, tally: Tally, misfired: set[str]
) -> list[NewRun]:
    """Occurrences that already have a run are skipped, visibly: a `skipped` run says why, and so
    does the loop, which goes on to its next occurrence (a one-shot has none: it is failed).
    Returns the skipped runs inserted (copies: the claim's own runs stay as they were)."""
    skipped = []
    for taken_run in runs:
        taken = LoopRun.objects.filter(occurrence_key=taken_run.occurrence_key).values_list("run_id", "status").first()
        message = (
            f"Occurrence {taken_run.occurrence_key} already has run {taken[0] if taken else '?'} "
            f"({taken[1] if taken else 'unknown'}), so it was skipped rather than delivered twice."
        )
        # Its own key names the occurrence it stands for; the original key stays with the first run.
        run = replace(taken_run, occurrence_key=skipped_occurrence_key(taken_run.occurrence_key, taken_run.run_id))
        if run.run_id in misfired:
            run.missed -= 1  # a misfire counted itself as missed, but its occurrence has a run
        finish_unsent(run, RunStatus.SKIPPED, message, now)
        log_occurrence(logger, logging.ERROR, run, RunStatus.SKIPPED, now=now, error=message)
        _insert([run])
        skipped.append(run)
        tally.finished(RunStatus.SKIPPED)
        loop = loops[run.loop_id]
        state = LoopState.FAILED if loop.schedule.one_shot else LoopState.SCHEDULED
        Loop.objects.filter(loop_id=loop.loop_id).update(
            state=state, last_run_at=now, last_result=RunStatus.FAILED, last_error=message
        )
    return skipped


def recover_runs(*, now: datetime, limit: int = CLAIM_BATCH) -> list[str]:
    """Re-enqueue open runs whose retry time has come (a backoff ended, or their driver died)."""
    with transaction.atomic(durable=True):
        stale = LoopRun.objects.filter(status__in=OPEN_STATUSES, retry_at__lte=now).order_by("retry_at")
        run_ids = list(free_rows(stale).values_list("run_id", flat=True)[:limit])
        if not run_ids:
            return []
        # Pushing retry_at forward is what stops another clock from enqueueing them too (the
        # rows are locked on PostgreSQL; SQLite's IMMEDIATE transactions serialize the clocks).
        # Each hand-out is an attempt: a driver that died before recording one left no count.
        LoopRun.objects.filter(run_id__in=run_ids).update(retry_at=now + lease(), attempt=F("attempt") + 1)
        enqueue_deliveries(run_ids)
    logger.info("re-enqueued %d open run(s)", len(run_ids))
    return run_ids


def next_wakeup(*, fresh_waiting: bool = False) -> datetime | None:
    """The earliest moment the clock has work: a loop deadline or a run's retry time. With
    `fresh_waiting`, due `new` loops wait for a free slot, not for their deadline: left out."""
    # Uses loop_due_idx and run_open_idx.
    scheduled = Loop.objects.filter(state=LoopState.SCHEDULED)
    if fresh_waiting:
        scheduled = scheduled.exclude(session_id=ReservedTarget.NEW)
    # The first in loop_due_idx's order, of the deadlines the clock can read (in_clock_form).
    next_loop = in_clock_form(scheduled).order_by("next_at").values_list("next_at", flat=True).first()
    next_retry = LoopRun.objects.filter(status__in=OPEN_STATUSES).aggregate(at=Min("retry_at"))["at"]
    moments = [moment for moment in (next_loop, next_retry) if moment is not None]
    return min(moments) if moments else None
