"""The due occurrences no scheduler has claimed yet, when an operator pauses their loop, gives it a
new schedule or target, or deletes it: every due occurrence ends as a run or is counted in `missed`
(contract §10, §14).

A due loop that is not claimed waits, its `next_at` still at the first occurrence it waits on: for a
free slot of DSHLOOP_MAX_CONCURRENT_NEW_RUNS (a `new` loop, scheduler.unattended), for its own run
in flight to finish (a loop that is `running`), or for a scheduler to reach it. Pausing it,
starting its grid again, or deleting it drops that deadline, and with it every occurrence it waited
on. They are recorded the way a claim records a catch-up later than the misfire grace: one
`skipped` run at the latest of them (timing.schedules.catch_up), whose error says why and whose
`missed` counts them all, itself included; it is counted in the metrics and logged like every
other occurrence. A deleted loop's run outlives it like its other runs (they have no foreign key):
in the admin's run history, in the counters and in the log.

The caller holds the loop's row (loops.services.locking), so a claim of the same loop either
committed first (the loop has its run, and no longer waits) or comes after (and finds it paused,
re-gridded or gone): an occurrence is never both claimed and recorded here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from loops.counters import Tally
from loops.humanize import fresh_sessions_running, wait_span
from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.occurrence_log import log_occurrence
from loops.runs import CAPACITY, new_run_id, occurrence_key, running_fresh_runs, skip_prefix, skip_reason
from sessions_app.models import ReservedTarget
from timing import ends, schedules

logger = logging.getLogger("dshloop.loops")

# How the reason names the change that dropped the deadline (an edit says what it gave the loop).
PAUSED = "paused"
DELETED = "deleted"

# What a due loop that is not claimed waits for.
FOR_A_SLOT, FOR_ITS_RUN, FOR_A_SCHEDULER = "slot", "run", "scheduler"


@dataclass(frozen=True)
class Unclaimed:
    """The occurrences a loop waits on, read from its row before the change: what its skipped run records."""

    loop_id: str
    revision: int
    target: str
    waiting_since: datetime  # the loop's next_at: the first of them
    latest: datetime  # the one a claim would have delivered
    count: int
    waits_for: str  # FOR_A_SLOT, FOR_ITS_RUN or FOR_A_SCHEDULER

    def record(self, *, change: str, now: datetime) -> LoopRun:
        """The skipped run that accounts for them, once the caller has made sure no claim will take
        them. Before the loop's row changes: its revision's prompt is kept once the run refers to it."""
        error = f"{self._why(change, now)}; {_occurrences(self.count)} never delivered, counted in missed."
        run = LoopRun(
            run_id=new_run_id(),
            loop_id=self.loop_id,
            occurrence_key=occurrence_key(self.loop_id, self.latest),
            scheduled_at=self.latest,
            status=RunStatus.SKIPPED,
            attempt=0,  # never handed to a driver
            missed=self.count,
            target=self.target,
            claimed_at=now,
            finished_at=now,
            error=error,
            revision=self.revision,
        )
        run.save(force_insert=True)
        tally = Tally()
        tally.finished(RunStatus.SKIPPED)
        tally.missed(self.count)
        if reason := skip_reason(error):
            tally.skipped_for(reason)
        tally.save()
        # A wait for capacity is a warning, as the claim's capacity skip is; a change that came
        # between an occurrence and its claim is as ordinary as one after it (delivery: paused first).
        level = logging.WARNING if self.waits_for == FOR_A_SLOT else logging.INFO
        log_occurrence(logger, level, run, RunStatus.SKIPPED, now=now, error=error)
        return run

    def _why(self, change: str, now: datetime) -> str:
        waited = wait_span(now - self.waiting_since)
        if self.waits_for == FOR_A_SLOT:
            # contract §14: counted as a capacity skip, as a wait past the misfire grace is.
            limit = settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS
            return (
                f"{skip_prefix(CAPACITY)}: it waited {waited} for a free slot while {fresh_sessions_running(limit)} "
                f"(DSHLOOP_MAX_CONCURRENT_NEW_RUNS), and the loop was {change} before one freed"
            )
        if self.waits_for == FOR_ITS_RUN:
            return f"Not delivered: it waited {waited} for the loop's run in flight to finish, and the loop was {change} first"
        return f"Not delivered: it was due {waited} ago, and the loop was {change} before a scheduler claimed it"


def unclaimed(loop: Loop, *, now: datetime) -> Unclaimed | None:
    """The due occurrences of `loop` (its row locked) that no claim has taken, or None."""
    if loop.state not in (LoopState.SCHEDULED, LoopState.RUNNING) or loop.next_at is None or loop.next_at > now:
        return None
    if ends.past_end(loop.next_at, loop.ends_at):
        return None  # not an occurrence of the loop: it ended before it (contract §16)
    try:
        catch_up = schedules.catch_up(
            loop.timing,
            created_at=loop.anchor,
            due_at=loop.next_at,
            now=ends.catch_up_until(now, loop.ends_at),
            host_tz=settings.TIME_ZONE,
        )
        latest, count = catch_up.deliver_at, catch_up.missed + 1
    except Exception:  # noqa: BLE001 - a schedule the claim could not compute either: its deadline alone
        latest, count = loop.next_at, 1
    if LoopRun.objects.filter(occurrence_key=occurrence_key(loop.loop_id, latest)).exists():
        return None  # it has its run already (a restored backup, a next_at moved back by hand)
    return Unclaimed(
        loop_id=loop.loop_id,
        revision=loop.revision,
        target=loop.session_id,
        waiting_since=loop.next_at,
        latest=latest,
        count=count,
        waits_for=_waits_for(loop, now=now),
    )


def _waits_for(loop: Loop, *, now: datetime) -> str:
    limit = settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS
    if loop.session_id == ReservedTarget.NEW and running_fresh_runs(now=now).count() >= limit:
        return FOR_A_SLOT
    return FOR_ITS_RUN if loop.state == LoopState.RUNNING else FOR_A_SCHEDULER


def _occurrences(count: int) -> str:
    return "this occurrence was" if count == 1 else f"this occurrence and the {count - 1:,} before it were"
