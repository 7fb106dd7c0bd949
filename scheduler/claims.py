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
import math
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Min
from django.utils import timezone

from core.bulk import insert_rows, update_rows
from core.errors import one_line
from loops import ends, schedules
from loops.counters import Tally
from loops.events import SCHEDULER, record_event
from loops.humanize import short_span
from loops.models import ONE_SHOT_KINDS, SCHEDULE_COLUMNS, EventKind, Loop, LoopRun, LoopState, Overlap, RunStatus
from loops.occurrence_log import log_occurrence
from loops.queue import enqueue_deliveries
from loops.runs import (
    OPEN_STATUSES,
    free_rows,
    lease,
    new_run_id,
    occurrence_key,
    skip_reason,
    skipped_occurrence_key,
)
from scheduler.prepare import prepare
from scheduler.rows import LOOP_COLUMNS, NEW_RUN_COLUMNS, OPEN_RUN_COLUMNS, DeliveryLoop, NewRun, RunRow
from scheduler.stored_times import Repairs, earliest_deadline, in_stored_form, settle, stored, stores_text
from scheduler.targets import BatchView
from scheduler.unattended import Capacity, capacity_reason, overlap_reason
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Host, HostError, Message
from sessions_app.models import ReservedTarget

logger = logging.getLogger("dshloop.clock")
delivery_logger = logging.getLogger("dshloop.delivery")  # a claim's own deliveries log as the others

CLAIM_BATCH = 500  # loops per claim transaction: two delivery tasks (scheduler.tasks)
HELP_SECONDS = 5.0  # the longest a task worker claims beside a clock (claim_burst)


RUN_COLUMNS = NEW_RUN_COLUMNS  # every column of a run, in the order a claim inserts them


def _new_run(loop: Loop, *, scheduled_at: datetime, now: datetime, missed: int = 0) -> NewRun:
    return NewRun(
        run_id=new_run_id(),
        loop_id=loop.loop_id,
        occurrence_key=occurrence_key(loop.loop_id, scheduled_at),
        scheduled_at=scheduled_at,
        status=RunStatus.CLAIMED,
        attempt=1,  # handed out to a driver by the claim's enqueue (scheduler.delivery: attempts)
        missed=missed,
        target=loop.session_id,
        claimed_at=now,
        retry_at=now + lease(),
        revision=loop.revision,
    )


def _insert(runs: list[NewRun], *, skip_conflicts: bool = False) -> set[str]:
    """INSERT the runs; returns the IDs of those inserted (see core.bulk.insert_rows). skip_conflicts:
    a run whose occurrence key is taken is left out; any other conflict raises."""
    rows = [[getattr(run, name) for name in RUN_COLUMNS] for run in runs]
    skip_on = ("occurrence_key",) if skip_conflicts else ()
    return insert_rows(LoopRun, RUN_COLUMNS, rows, skip_conflicts_on=skip_on)


def _deadline(loop: Loop) -> datetime:
    """The deadline a claim takes: every due loop has one (next_at <= now, or settled from its text)."""
    assert loop.next_at is not None, loop.loop_id
    return loop.next_at


def _finish_unsent(run: NewRun, status: str, error: str, now: datetime) -> None:
    """A run that is recorded finished at its claim and never handed to a driver."""
    run.status, run.error, run.finished_at, run.retry_at, run.attempt = status, error, now, None, 0


def _record_broken(loop: Loop, error: Exception, now: datetime, tally: Tally) -> None:
    """One loop whose schedule cannot be computed fails alone (its own savepoint)."""
    message = f"The schedule could not be computed: {error}"
    run = _new_run(loop, scheduled_at=_deadline(loop), now=now)
    _finish_unsent(run, RunStatus.FAILED, message, now)
    log_occurrence(logger, logging.ERROR, run, RunStatus.FAILED, now=now, error=message)
    with transaction.atomic():
        _insert([run])
        Loop.objects.filter(loop_id=loop.loop_id).update(
            state=LoopState.FAILED, next_at=None, last_run_at=now, last_result=RunStatus.FAILED, last_error=message
        )
    tally.finished(RunStatus.FAILED)


def _misfire(late: timedelta, grace: int | None, *, one_shot: bool) -> str | None:
    """Why a catch-up this late is not delivered, or None to deliver it (contract §10,
    DSHLOOP_MISFIRE_GRACE_SECONDS; unset: the spec's one catch-up however late)."""
    if grace is None or late <= timedelta(seconds=grace):
        return None
    # Rounded up, so the lateness shown is never the grace itself.
    late_words = short_span(math.ceil(late.total_seconds()))
    then = (
        "a one-shot loop has no next occurrence: retry it to deliver it now"
        if one_shot
        else "the loop goes on with its next occurrence"
    )
    return (
        f"Not delivered: {late_words} late, beyond the misfire grace of {grace} s "
        f"(DSHLOOP_MISFIRE_GRACE_SECONDS); {then}."
    )


def _advance(loop: Loop, now: datetime) -> tuple[NewRun | None, str | None]:
    """spec §3 anti-burst: deliver the latest due occurrence only, fold the rest into `missed`.

    With DSHLOOP_MISFIRE_GRACE_SECONDS set, a catch-up later than the grace is not delivered: the
    run is returned already `skipped` (the reason in `error`, itself counted in `missed`) and the
    loop goes on with its next occurrence; a one-shot has none, so it fails (retryable).

    contract §16 (loops.ends): the catch-up looks no further than the loop's ends_at, so its run is
    the last occurrence before the end however long the downtime. A loop with nothing left to run
    (a deadline past its end, its max_runs delivered) returns no run, completed; the second item
    names the bound that completed the loop (its `ended` event), else None. A run whose next
    occurrence lies past the end is the loop's last: its record ends the loop
    (scheduler.delivery); one skipped here for the misfire grace ends it now."""
    due_at = _deadline(loop)
    bound = ends.bound_reached(
        next_at=due_at, ends_at=loop.ends_at, runs_delivered=loop.runs_delivered, max_runs=loop.max_runs
    )
    if bound is not None:
        _end(loop)
        return None, bound
    timing = loop.timing
    catch_up = schedules.catch_up(
        timing,
        created_at=loop.anchor,
        due_at=due_at,
        now=ends.catch_up_until(now, loop.ends_at),
        host_tz=settings.TIME_ZONE,
    )
    run = _new_run(loop, scheduled_at=catch_up.deliver_at, now=now, missed=catch_up.missed)
    one_shot = timing.one_shot
    loop.next_at = None if one_shot else catch_up.next_at
    reason = _misfire(now - catch_up.deliver_at, settings.DSHLOOP_MISFIRE_GRACE_SECONDS, one_shot=one_shot)
    if reason is None:
        loop.state = LoopState.RUNNING
        return run, None
    _finish_unsent(run, RunStatus.SKIPPED, reason, now)
    run.missed += 1  # the occurrences this outage cost: the folded ones and this one
    loop.state = LoopState.FAILED if one_shot else LoopState.SCHEDULED
    if not one_shot and ends.past_end(loop.next_at, loop.ends_at):
        _end(loop)
        return run, ends.ENDS_AT
    return run, None


def _end(loop: Loop) -> None:
    """Mark a claimed loop completed; claim_due writes it with the others, and its `ended` event."""
    loop.state, loop.next_at = LoopState.COMPLETED, None


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


def _bound_fresh_run(loop: Loop, run: NewRun, due_at: datetime | None, now: datetime, capacity: Capacity) -> bool:
    """contract §14 for an occurrence of a `new` loop: skipped while its last run runs (overlap
    `skip`); delivered if a slot for a fresh agent is free; else it waits (returns False, and the
    loop keeps its deadline) or, past the misfire grace, is skipped. True: the run goes ahead,
    delivered or recorded skipped."""
    one_shot = loop.schedule.one_shot
    if run.status == RunStatus.SKIPPED:  # a misfire: beyond the grace already
        if not capacity.has_free():
            run.error = capacity_reason(now - run.scheduled_at)
        return True
    if loop.overlap == Overlap.SKIP and (reason := overlap_reason(loop.loop_id, now=now)):
        _finish_unsent(run, RunStatus.SKIPPED, reason, now)
        loop.state = LoopState.FAILED if one_shot else LoopState.SCHEDULED
        return True
    if capacity.take():
        return True
    loop.next_at, loop.state = due_at, LoopState.SCHEDULED
    capacity.waiting += 1
    return False


def claim_due(*, now: datetime, limit: int = CLAIM_BATCH, deliver: bool = False) -> Claimed:
    """Claim up to `limit` due loops in one short transaction; returns the run IDs it enqueued.

    `deliver` (the clock's claims): on the embedded host, whose messages are rows in this database,
    the claim delivers what it can itself, in its own transaction (_deliver_here), and enqueues
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
                run, bound = _advance(loop, now)
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
                and not _bound_fresh_run(loop, run, due_at, now, capacity)
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


class _NotAsExpected(Exception):
    """The embedded host did not take every message a claim delivered itself."""


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
            if not isinstance(exc, _NotAsExpected):
                logger.warning("a claim delivering its runs raised (%s); enqueueing them instead", one_line(exc))
            self.tally.counts = counts
            for run in self.runs:
                if run.status == RunStatus.DELIVERED:  # set so by _deliver_here: back to claimed
                    _reclaim(run, self.now)
            return None

    def _write(self, host: Host | None) -> Claimed:
        now, tally, runs = self.now, self.tally, self.runs
        here = _deliver_here(runs, self.loops, host, now) if host is not None else {}
        # The unique occurrence key is the last guard against a double dispatch: a run that holds
        # one of these keys already (a restored backup, a next_at moved back by hand) keeps it,
        # and only the runs inserted here are delivered.
        inserted = _insert(runs, skip_conflicts=True)
        for run in runs:
            if run.run_id in here and run.run_id not in inserted:
                del here[run.run_id]
                _reclaim(run, now)
        delivered = {run.loop_id: run for run in runs if run.run_id in here}
        update_rows(
            Loop,
            ("state", "next_at"),
            [[loop.loop_id, loop.state, loop.next_at] for loop in self.advanced if loop.loop_id not in delivered],
        )
        _record_delivered([self.loops[loop_id] for loop_id in delivered], now)
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
                raise _NotAsExpected
            for run in delivered.values():
                log_occurrence(delivery_logger, logging.INFO, run, RunStatus.DELIVERED, now=now)
        return claimed


def _deliverable(run: NewRun, loop: Loop) -> bool:
    """Whether a claim delivers this run itself: a recurring loop's occurrence into a session that
    exists (or `self`), which is not the loop's last. The others take the delivery path, which
    knows about fresh sessions, their slots and outcomes, and ending a loop (scheduler.delivery)."""
    return (
        run.status == RunStatus.CLAIMED
        and loop.session_id != ReservedTarget.NEW
        and loop.kind not in ONE_SHOT_KINDS
        and not ends.runs_reached(loop.runs_delivered + 1, loop.max_runs)
        and not ends.past_end(loop.next_at, loop.ends_at)
    )


def _deliver_here(runs: list[NewRun], loops: dict[str, Loop], host: Host, now: datetime) -> dict[str, Message]:
    """The messages of the runs this claim delivers itself, by run ID; each of those runs is set
    delivered. A run whose target cannot be had now (gone, or a host error) is left claimed: the
    delivery path records why, or retries it."""
    candidates = [run for run in runs if _deliverable(run, loops[run.loop_id])]
    if not candidates:
        return {}
    view = BatchView(host, {loops[run.loop_id].session_id for run in candidates})
    messages = {}
    for run in candidates:
        loop = loops[run.loop_id]
        row = RunRow(*(getattr(run, name) for name in OPEN_RUN_COLUMNS))
        # Just claimed: the run is at its loop's revision, whose prompt the loop row holds.
        prepared = prepare(row, DeliveryLoop(*(getattr(loop, name) for name in LOOP_COLUMNS)), view, loop.prompt)
        if isinstance(prepared, Message):
            messages[run.run_id] = prepared
            run.status, run.retry_at, run.started_at, run.finished_at = RunStatus.DELIVERED, None, now, now
            run.target_session_id, run.fallback = row.target_session_id, row.fallback
    return messages


def _reclaim(run: NewRun, now: datetime) -> None:
    """A run _deliver_here set delivered, back to what a claim makes: its occurrence turned out
    taken (it is then recorded skipped, _skip_taken), or the claim's deliveries were undone."""
    run.status, run.retry_at, run.started_at, run.finished_at = RunStatus.CLAIMED, now + lease(), None, None
    run.target_session_id = run.fallback = ""


# What a delivered scheduled run changes on its loop (scheduler.delivery._update_loops), with the
# claim's own change (the next deadline): one write of the loop for the whole occurrence.
_DELIVERED_LOOP_FIELDS = (
    "state",
    "next_at",
    "last_run_at",
    "last_result",
    "last_error",
    "last_outcome",
    "last_summary",
    "consecutive_failures",
    "runs_delivered",
)


def _record_delivered(loops: list[Loop], now: datetime) -> None:
    """The loops whose runs the claim delivered: moved on and recorded in one UPDATE. The counter is
    read under the row's lock (the claim's), so adding one to it here is exact."""
    update_rows(
        Loop,
        _DELIVERED_LOOP_FIELDS,
        [
            [
                loop.loop_id,
                LoopState.SCHEDULED,
                loop.next_at,
                now,
                RunStatus.DELIVERED,
                "",
                "",
                "",
                0,
                loop.runs_delivered + 1,
            ]
            for loop in loops
        ],
    )


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
        _finish_unsent(run, RunStatus.SKIPPED, message, now)
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
