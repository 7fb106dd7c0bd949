"""Failing loops back off, and pause themselves (contract §10).

A recurring loop whose occurrences keep failing (a failed delivery, or a turn its host reports
failed) must neither hammer a broken target on its own schedule nor fail forever unseen. After
the n-th failure in a row its next claim waits DSHLOOP_FAILURE_BACKOFF_SECONDS[n-1] (the last
repeats), never earlier than the schedule; after DSHLOOP_AUTO_PAUSE_AFTER in a row it is paused,
with the reason and an `auto_paused` event. A success resets the count.

Manual runs (run now) do not count: they are an operator's test, not the schedule's. Skipped runs
were never sent, so they neither fail nor succeed.

An auto-pause, and a failed scheduled run of a `new` loop (a fresh session nobody watches), is a
failure episode (contract §16): recorded here, in the same transaction (scheduler.episodes).

The callers hold the transaction and the loop rows' locks (delivery records, outcome reports).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings

from core.timeutil import truncate_to_ms
from loops.counters import Tally
from loops.events import SCHEDULER, record_event
from loops.humanize import short_span
from loops.models import EventKind, FailureEvent, Loop, LoopEvent, LoopRun, LoopState, RunOutcome, RunStatus
from loops.occurrence_log import log_occurrence
from loops.runs import new_run_id, occurrence_key
from loops.services.ends import end_if_done
from scheduler.episodes import FailedRun, record_episode
from sessions_app.models import ReservedTarget
from timing import ends, schedules

logger = logging.getLogger("dshloop.delivery")

AUTO = "auto: "  # contract §9: the pause_reason of a pause the scheduler made
_REASON_LENGTH = Loop._meta.get_field("pause_reason").max_length


def failure_backoff(failures: int) -> timedelta:
    """How long the next claim waits after this many failures in a row (1 → the first step)."""
    steps = settings.DSHLOOP_FAILURE_BACKOFF_SECONDS
    return timedelta(seconds=steps[min(failures, len(steps)) - 1])


def is_failure(status: str, outcome: str) -> bool:
    """A run's verdict: the host's outcome once it is known, else how its delivery ended. A
    cancelled turn is someone's decision, not a broken loop."""
    if outcome:
        return outcome == RunOutcome.FAILED
    return status == RunStatus.FAILED


def auto_pause_reason(error: str) -> str:
    reason = AUTO + (error or "failed").strip()
    if _REASON_LENGTH is None or len(reason) <= _REASON_LENGTH:  # None: a field without a limit
        return reason
    return reason[: _REASON_LENGTH - 1] + "…"


def after_failures(
    loop: Loop, failures: int, *, run: FailedRun, error: str, now: datetime, tally: Tally | None = None
) -> None:
    """Set a locked loop's count to `failures` (the streak including `run`, the newest) and apply
    the policy: pause after DSHLOOP_AUTO_PAUSE_AFTER in a row (an episode), else push its next claim
    back. The occurrences either passes over are counted into `tally` (a delivery's record: saved
    with its own), else saved here."""
    loop.consecutive_failures = failures
    fields = ["consecutive_failures"]
    active = loop.state in (LoopState.SCHEDULED, LoopState.RUNNING)
    if not loop.schedule.one_shot and active:
        limit = settings.DSHLOOP_AUTO_PAUSE_AFTER
        if limit and failures >= limit:
            if loop.next_at is not None:  # what was due by now will never be: resume starts after now
                skip_passed(
                    loop,
                    since=loop.next_at,
                    before=now + _JUST_AFTER,
                    why=f"the loop was {_paused_after(failures)}",
                    now=now,
                    tally=tally,
                )
            loop.state, loop.next_at, loop.paused_at = LoopState.PAUSED, None, now
            loop.pause_reason = auto_pause_reason(error)
            fields += ["state", "next_at", "paused_at", "pause_reason"]
            record_event(loop, EventKind.AUTO_PAUSED, SCHEDULER, at=now)
            loop.save(update_fields=fields)
            record_episode(loop, run, event=FailureEvent.LOOP_AUTO_PAUSED, error=error, now=now)
            return
        if loop.next_at is not None:
            # Up to the next whole millisecond (run times are whole ms): a run failed in the claim,
            # within the millisecond of its deadline, still waits its whole backoff.
            not_before = truncate_to_ms(now + failure_backoff(failures) + _UNDER_A_MS)
            if loop.next_at < not_before:
                # The first occurrence at or after the backoff: the grid is kept (never earlier than
                # the schedule), the occurrences in between are not attempted, and are counted.
                passed = loop.next_at
                loop.next_at = schedules.next_occurrence(
                    loop.timing,
                    created_at=loop.anchor,
                    after=not_before - _JUST_AFTER,
                    host_tz=settings.TIME_ZONE,
                )
                fields.append("next_at")
                why = f"the loop backs off for {short_span(failure_backoff(failures) // timedelta(seconds=1))} after {_failures(failures)} (DSHLOOP_FAILURE_BACKOFF_SECONDS)"
                skip_passed(loop, since=passed, before=loop.next_at or not_before, why=why, now=now, tally=tally)
                # contract §16: a backoff past the loop's end leaves it nothing to run.
                if end_if_done(loop, now=now):
                    fields.remove("next_at")
    loop.save(update_fields=fields)


_JUST_AFTER = timedelta(milliseconds=1)  # run times are whole milliseconds
_UNDER_A_MS = timedelta(microseconds=999)


def _failures(count: int) -> str:
    return "1 failure" if count == 1 else f"{count} failures in a row"


def _paused_after(count: int) -> str:
    return f"paused after {_failures(count)} (DSHLOOP_AUTO_PAUSE_AFTER)"


def skip_passed(
    loop: Loop, *, since: datetime, before: datetime, why: str, now: datetime, tally: Tally | None = None
) -> LoopRun | None:
    """A locked loop's occurrences from `since` (its deadline) to just before `before` that the
    failure policy passes over, never to be attempted: recorded as one `skipped` run at the latest
    of them, whose `missed` counts them all, itself included (as loops.services.unclaimed records
    what an operator's pause drops), so that every occurrence ends as a run or counted in `missed`
    (docs/RELIABILITY.md, invariant 1). Those after the loop's end are none of its occurrences.
    Returns the run, or None when nothing was passed over."""
    until = ends.catch_up_until(before - _JUST_AFTER, loop.ends_at)
    if since > until:
        return None
    catch_up = schedules.catch_up(
        loop.timing, created_at=loop.anchor, due_at=since, now=until, host_tz=settings.TIME_ZONE
    )
    latest, count = catch_up.deliver_at, catch_up.missed + 1
    key = occurrence_key(loop.loop_id, latest)
    if LoopRun.objects.filter(occurrence_key=key).exists():
        return None  # it has its run already (a next_at moved back by hand)
    occurrences = "this occurrence was" if count == 1 else f"this occurrence and the {count - 1:,} before it were"
    error = f"Not delivered: {why}; {occurrences} not attempted, counted in missed."
    run = LoopRun(
        run_id=new_run_id(),
        loop_id=loop.loop_id,
        occurrence_key=key,
        scheduled_at=latest,
        status=RunStatus.SKIPPED,
        attempt=0,  # never handed to a driver
        missed=count,
        target=loop.session_id,
        claimed_at=now,
        finished_at=now,
        error=error,
        revision=loop.revision,
    )
    run.save(force_insert=True)
    counts = tally if tally is not None else Tally()
    counts.finished(RunStatus.SKIPPED)
    counts.missed(count)
    if tally is None:
        counts.save()
    log_occurrence(logger, logging.WARNING, run, RunStatus.SKIPPED, now=now, error=error)
    return run


def count_failures(loop_id: str) -> int:
    """The loop's current streak from its history: failures since its newest non-failure, among
    its finished scheduled runs claimed since it was last resumed (a resume starts a fresh count),
    newest first. Bounded by the run history kept (retention)."""
    finished = LoopRun.objects.filter(
        loop_id=loop_id, manual=False, status__in=(RunStatus.DELIVERED, RunStatus.FAILED)
    ).order_by("-scheduled_at")
    resumed = (
        LoopEvent.objects.filter(loop_id=loop_id, kind=EventKind.RESUMED).order_by("-at").values_list("at", flat=True)
    ).first()
    if resumed is not None:
        finished = finished.filter(claimed_at__gte=resumed)
    verdicts = finished.values_list("status", "outcome")
    streak = 0
    for status, outcome in verdicts.iterator(chunk_size=50):
        if not is_failure(status, outcome):
            break
        streak += 1
    return streak


def fresh_run_failed(loop: Loop, run: FailedRun, *, target: str, error: str, now: datetime) -> None:
    """A scheduled run of a locked loop failed (its delivery, or its turn, a timeout included): if
    it ran in a fresh session (`target` "new", the loop's when the run was claimed), nobody saw it,
    so it is an episode (unless the same failure paused the loop, an episode already)."""
    if target == ReservedTarget.NEW:
        record_episode(loop, run, event=FailureEvent.RUN_FAILED, error=error, now=now)


class ReportedRun(Protocol):
    """What the policy reads of a run whose turn's outcome its host reported: a LoopRun (the
    report itself), or a delivery's run row (a report that came before the delivery's record)."""

    @property
    def run_id(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def target_session_id(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def error(self) -> str: ...
    @property
    def manual(self) -> bool: ...


def failed_turn(outcome: str) -> bool:
    """contract §15: a turn that ended in an error (or timed out) or was cancelled did not do what
    the loop asked, so the loop shows it as failed, although only an error counts towards the
    streak (is_failure)."""
    return outcome in (RunOutcome.FAILED, RunOutcome.CANCELLED)


_UNEXPLAINED = {
    RunOutcome.FAILED: "The turn ended in an error; the host gave no reason.",
    RunOutcome.CANCELLED: "The turn was cancelled before it finished.",
}


def take_outcome(
    loop: Loop, run: ReportedRun, *, now: datetime, latest: bool = True, tally: Tally | None = None
) -> None:
    """A locked loop takes in a turn outcome its host reported for `run`: the loop row shows it
    while the run is its latest — a failed or cancelled turn as last_result "failed" with the
    reason; a succeeded one leaves the delivery's result — and a scheduled run's verdict changes
    the streak (recounted from the history, since the delivery may already have reset or raised
    it). A manual run is shown like a scheduled one, as its delivery is (scheduler.delivery)."""
    if latest:
        loop.last_outcome, loop.last_summary = run.outcome, run.summary
        fields = ["last_outcome", "last_summary"]
        if failed_turn(run.outcome):
            loop.last_result = RunStatus.FAILED
            loop.last_error = run.error or _UNEXPLAINED[RunOutcome(run.outcome)]
            fields += ["last_result", "last_error"]
        loop.save(update_fields=fields)
    if run.manual:
        return
    streak = count_failures(loop.loop_id)
    if streak > loop.consecutive_failures:
        after_failures(loop, streak, run=run, error=run.error, now=now, tally=tally)
    elif streak != loop.consecutive_failures:
        loop.consecutive_failures = streak
        loop.save(update_fields=["consecutive_failures"])
    if run.outcome == RunOutcome.FAILED:
        fresh_run_failed(loop, run, target=run.target or loop.session_id, error=run.error, now=now)


def locked_loops(loop_ids: Iterable[str]) -> list[Loop]:
    """Loops for the policy, locked in key order (as every writer of loops locks them)."""
    return list(Loop.objects.select_for_update().filter(loop_id__in=set(loop_ids)).order_by("loop_id"))
