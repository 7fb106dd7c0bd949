"""The clock's unit of work: claim due occurrences, and re-enqueue runs that need driving.

Correctness rests on the unique occurrence key and on a claim that changes exactly one row:
`SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL (so concurrent clocks take disjoint rows), a
compare-and-swap UPDATE on SQLite (where row locks do not exist; IMMEDIATE transactions
serialize writers). The delivery is enqueued on django-q2's ORM broker inside the same
transaction, so a crash can neither lose nor double an occurrence (django-q2 #293); on the
embedded host a clock's claim delivers what it can itself, the messages committing with the claim.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime

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
from loops.runs import (
    OPEN_STATUSES,
    free_rows,
    lease,
    skip_reason,
    skipped_occurrence_key,
)
from scheduler.catch_ups import advance, bound_fresh_run, deadline, finish_unsent, new_run
from scheduler.claim_delivery import deliver_here, reclaim, record_delivered
from scheduler.prepare import NotAsExpected
from scheduler.rows import LOOP_COLUMNS, NEW_RUN_COLUMNS, NewRun
from scheduler.stored_times import Repairs, earliest_deadline, in_stored_form, settle, stored, stores_text
from scheduler.unattended import Capacity
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Host, HostError
from sessions_app.models import ReservedTarget
from timing import ends

logger = logging.getLogger("dshloop.clock")
delivery_logger = logging.getLogger("dshloop.delivery")  # a claim's own deliveries log as the others

CLAIM_BATCH = 500  # loops per claim transaction: two delivery tasks (scheduler.tasks)
HELP_SECONDS = 5.0  # the longest a task worker claims beside a clock (claim_burst)


RUN_COLUMNS = NEW_RUN_COLUMNS  # every column of a run, in the order a claim inserts them


def _insert(runs: list[NewRun], *, skip_conflicts: bool = False) -> set[str]:
    """INSERT the runs; returns the IDs of those inserted (see core.bulk.insert_rows). skip_conflicts:
    a run whose occurrence key is taken is left out; any other conflict raises."""
    rows = [[getattr(run, name) for name in RUN_COLUMNS] for run in runs]
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
    """The run IDs a claim enqueued to deliver; how many it delivered itself (claim_due's
    `deliver`); and how many due `new` loops it left waiting for a free slot
    (scheduler.unattended): while some wait, the clock polls for a freed slot."""

    delivered = 0
    waiting = 0

    @property
    def taken(self) -> int:
        """The occurrences it took, enqueued or delivered: a full claim means more is due now."""
        return len(self) + self.delivered


def claim_due(*, now: datetime, limit: int = CLAIM_BATCH, deliver: bool = False) -> Claimed:
    """Claim up to `limit` due loops in one short transaction; returns the run IDs it enqueued.

    `deliver` (the clock's claims): on the embedded host, whose messages are rows in this database,
    the claim delivers what it can itself, in its own transaction (deliver_here), and enqueues
    only the rest."""
    capacity = Capacity(now)
    host = get_host() if deliver else None
    if host is not None and not host.capabilities.transactional:
        host = None  # a remote host's deliveries are side effects: never inside a claim
    with transaction.atomic(durable=True):
        loops = _due_loops(now, limit, for_delivery=host is not None)
        runs, advanced, tally, misfired = [], [], Tally(), set()
        ended: list[tuple[Loop, str]] = []  # contract §16: loops this claim completed, and their bound
        for loop in loops:
            due_at = loop.next_at
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
                if not won:  # another clock took it first (its deadline is in Django's form: no form mismatch)
                    continue
            else:
                advanced.append(loop)
            if bound is not None:
                ended.append((loop, bound))
            if run is not None:
                runs.append(run)
        batch = _Batch(runs, advanced, ended, {loop.loop_id: loop for loop in loops}, tally, misfired, now)
        delivered = batch.write_delivering(host) if host is not None else None
        claimed = delivered if delivered is not None else batch.write()
        claimed.waiting = capacity.waiting
    return claimed


def claim_burst(*, seconds: float = HELP_SECONDS, batch: int = CLAIM_BATCH) -> int:
    """A task worker's help with a burst that a clock found (scheduler.clock): claim as the clock
    does, beside it, until a claim is not full or `seconds` have passed (a worker has deliveries to
    run too); returns the occurrences claimed. Claims are safe side by side (SKIP LOCKED), so a
    second claimer puts the other core to work while the first waits for PostgreSQL."""
    until, total = time.monotonic() + seconds, 0
    while True:
        claimed = claim_due(now=timezone.now(), limit=batch, deliver=True)
        total += claimed.taken
        if claimed.taken < batch or time.monotonic() >= until:
            return total


def _due_loops(now: datetime, limit: int, *, for_delivery: bool) -> list[Loop]:
    """The due loops this claim takes, locked (PostgreSQL) and each with a deadline in Django's form."""
    fields = [*_CLAIM_FIELDS, *(_DELIVERY_FIELDS if for_delivery else ())]
    due = Loop.objects.filter(state=LoopState.SCHEDULED, next_at__lte=now).order_by("next_at")
    if not stores_text():
        return list(free_rows(due.only(*fields))[:limit])
    # Only deadlines in Django's form, whose text order is time order: the others wait for their
    # repair (scheduler.stored_times), however many, and never hold up due work. Read as stored,
    # not through Django's converter: an impossible date in that form ("2026-13-45 …") must not
    # fail the batch.
    loops = list(free_rows(stored(in_stored_form(due)).only(*(name for name in fields if name != "next_at")))[:limit])
    repairs = Repairs()
    raws = [(loop, loop.stored_next_at) for loop in loops]
    moments = settle(raws, now=now, repairs=repairs)
    repairs.log("claim")
    settled: list[Loop] = [loop for loop in loops if loop.loop_id in moments]  # the others were set aside
    for loop in settled:
        loop.next_at = moments[loop.loop_id]
    return settled


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
        """Write the claim: its runs are enqueued for the delivery path."""
        return self._write(None)

    def write_delivering(self, host: Host) -> Claimed | None:
        """Write the claim, delivering on the embedded host what it can itself, in a savepoint: None
        if that did not go as expected (undone: the caller writes the claim again with write())."""
        counts = Counter(self.tally.counts)
        try:
            with transaction.atomic():
                return self._write(host)
        except Exception as exc:  # noqa: BLE001 - whatever it was, the delivery path finds the one that fails
            if not isinstance(exc, NotAsExpected):
                logger.warning("a claim delivering its runs raised (%s); enqueueing them instead", one_line(exc))
            self.tally.counts = counts
            for run in self.runs:
                if run.status == RunStatus.DELIVERED:  # set so by deliver_here: back to claimed
                    reclaim(run, self.now)
            return None

    def _write(self, host: Host | None) -> Claimed:
        now, tally, runs = self.now, self.tally, self.runs
        here = deliver_here(runs, self.loops, host, now) if host is not None else {}
        # The unique occurrence key is the last guard against a double dispatch: a run that holds
        # one of these keys already (a restored backup, a next_at moved back by hand) keeps it,
        # and only the runs inserted here are delivered.
        inserted = _insert(runs, skip_conflicts=True)
        for run in runs:
            if run.run_id in here and run.run_id not in inserted:
                del here[run.run_id]
                reclaim(run, now)
        delivered = {run.loop_id: run for run in runs if run.run_id in here}
        update_rows(
            Loop,
            ("state", "next_at"),
            [[loop.loop_id, loop.state, loop.next_at] for loop in self.advanced if loop.loop_id not in delivered],
        )
        record_delivered([self.loops[loop_id] for loop_id in delivered], now)
        for loop, bound in self.ended:
            changes = ends.ended_changes(
                bound, ends_at=loop.ends_at, max_runs=loop.max_runs, runs_delivered=loop.runs_delivered, now=now
            )
            record_event(loop, EventKind.ENDED, SCHEDULER, at=now, changes=changes)
        skipped = _skip_taken(
            [run for run in runs if run.run_id not in inserted], self.loops, now, tally, self.misfired
        )
        _record_misfires(
            [run for run in runs if run.run_id in inserted and run.status == RunStatus.SKIPPED], self.loops, now, tally
        )
        for run in delivered.values():
            tally.finished(RunStatus.DELIVERED)
            tally.delivered_late(run.scheduled_at, now)
        tally.missed(sum(run.missed for run in runs if run.run_id in inserted) + sum(run.missed for run in skipped))
        tally.save()  # before the inbox locks (Tally.save)
        # Only the claimed runs are delivered; misfires were inserted already finished (skipped).
        claimed = Claimed(run.run_id for run in runs if run.run_id in inserted and run.status == RunStatus.CLAIMED)
        claimed.delivered = len(delivered)
        enqueue_deliveries(claimed)
        if here and host is not None:
            # Last, as a delivery's messages (scheduler.delivery): their inbox locks are held for the
            # INSERT and the commit only.
            if any(isinstance(result, HostError) for result in host.deliver_many(list(here.values()))):
                raise NotAsExpected
            for run in delivered.values():
                log_occurrence(delivery_logger, logging.INFO, run, RunStatus.DELIVERED, now=now)
        return claimed


def _record_misfires(runs: list[NewRun], loops: dict[str, Loop], now: datetime, tally: Tally) -> None:
    """Catch-ups later than the misfire grace, and occurrences skipped for overlap or capacity
    (scheduler.unattended), now recorded as skipped runs: say so in the log and the counters.
    A recurring loop was already moved on to its next occurrence and keeps its last result (the
    reason is on the run); a failed one-shot shows the reason itself."""
    for run in runs:
        log_occurrence(logger, logging.WARNING, run, RunStatus.SKIPPED, now=now, error=run.error)
        tally.finished(RunStatus.SKIPPED)
        if reason := skip_reason(run.error):
            tally.skipped_for(reason)
        if loops[run.loop_id].schedule.one_shot:
            Loop.objects.filter(loop_id=run.loop_id).update(
                last_run_at=now, last_result=RunStatus.FAILED, last_error=run.error
            )


def _skip_taken(
    runs: list[NewRun], loops: dict[str, Loop], now: datetime, tally: Tally, misfired: set[str]
) -> list[NewRun]:
    """Occurrences that already have a run are skipped, visibly: a `skipped` run says why, and so
    does the loop, which goes on to its next occurrence (a one-shot has none: it is failed).
    Returns the skipped runs inserted (copies: the claim's own runs stay as they were, should the
    claim be written again, _Batch.write_delivering)."""
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


def next_wakeup(*, now: datetime | None = None, fresh_waiting: bool = False) -> datetime | None:
    """The earliest moment the clock has work: a loop deadline or a run's retry time. With
    `fresh_waiting`, due `new` loops wait for a free slot, not for their deadline: left out.
    `now`: the tick's, for what settling a stored deadline records (scheduler.stored_times)."""
    # Uses loop_due_idx and run_open_idx.
    scheduled = Loop.objects.filter(state=LoopState.SCHEDULED)
    if fresh_waiting:
        scheduled = scheduled.exclude(session_id=ReservedTarget.NEW)
    if stores_text():
        next_loop = earliest_deadline(scheduled, now=now or timezone.now())
    else:
        next_loop = scheduled.aggregate(at=Min("next_at"))["at"]
    next_retry = LoopRun.objects.filter(status__in=OPEN_STATUSES).aggregate(at=Min("retry_at"))["at"]
    moments = [moment for moment in (next_loop, next_retry) if moment is not None]
    return min(moments) if moments else None
