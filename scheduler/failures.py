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

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings

from loops import schedules
from loops.events import SCHEDULER, record_event
from loops.models import EventKind, FailureEvent, Loop, LoopEvent, LoopRun, LoopState, RunOutcome, RunStatus
from scheduler.episodes import FailedRun, record_episode
from sessions_app.models import ReservedTarget

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


def after_failures(loop: Loop, failures: int, *, run: FailedRun, error: str, now: datetime) -> None:
    """Set a locked loop's count to `failures` (the streak including `run`, the newest) and apply
    the policy: pause after DSHLOOP_AUTO_PAUSE_AFTER in a row (an episode), else push its next claim
    back."""
    loop.consecutive_failures = failures
    fields = ["consecutive_failures"]
    active = loop.state in (LoopState.SCHEDULED, LoopState.RUNNING)
    if not loop.schedule.one_shot and active:
        limit = settings.DSHLOOP_AUTO_PAUSE_AFTER
        if limit and failures >= limit:
            loop.state, loop.next_at, loop.paused_at = LoopState.PAUSED, None, now
            loop.pause_reason = auto_pause_reason(error)
            fields += ["state", "next_at", "paused_at", "pause_reason"]
            record_event(loop, EventKind.AUTO_PAUSED, SCHEDULER, at=now)
            loop.save(update_fields=fields)
            record_episode(loop, run, event=FailureEvent.LOOP_AUTO_PAUSED, error=error, now=now)
            return
        if loop.next_at is not None:
            not_before = now + failure_backoff(failures)
            if loop.next_at < not_before:
                # The first occurrence at or after the backoff: the grid is kept (never earlier than
                # the schedule), the occurrences in between are not attempted.
                loop.next_at = schedules.next_occurrence(
                    loop.schedule,
                    created_at=loop.anchor,
                    after=not_before - timedelta(milliseconds=1),
                    host_tz=settings.TIME_ZONE,
                )
                fields.append("next_at")
    loop.save(update_fields=fields)


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


def take_outcome(loop: Loop, run: ReportedRun, *, now: datetime, latest: bool = True) -> None:
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
        after_failures(loop, streak, run=run, error=run.error, now=now)
    elif streak != loop.consecutive_failures:
        loop.consecutive_failures = streak
        loop.save(update_fields=["consecutive_failures"])
    if run.outcome == RunOutcome.FAILED:
        fresh_run_failed(loop, run, target=run.target or loop.session_id, error=run.error, now=now)


def locked_loops(loop_ids: Iterable[str]) -> list[Loop]:
    """Loops for the policy, locked in key order (as every writer of loops locks them)."""
    return list(Loop.objects.select_for_update().filter(loop_id__in=set(loop_ids)).order_by("loop_id"))
