"""A claim that delivers by itself, on a host whose messages are rows of this database: which of
its runs it delivers in its own transaction, their messages, and their loops recorded with the
claim's own move to the next deadline (scheduler.claims._Batch.write_delivering)."""

from __future__ import annotations

from datetime import datetime

from core.bulk import update_rows
from loops.models import ONE_SHOT_KINDS, Loop, LoopState, RunStatus
from loops.runs import lease
from scheduler.prepare import prepare
from scheduler.rows import LOOP_COLUMNS, OPEN_RUN_COLUMNS, DeliveryLoop, NewRun, RunRow
from scheduler.targets import BatchView
from sessions_app.hosts.base import Host, Message
from sessions_app.models import ReservedTarget
from timing import ends


def deliverable(run: NewRun, loop: Loop) -> bool:
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


def deliver_here(runs: list[NewRun], loops: dict[str, Loop], host: Host, now: datetime) -> dict[str, Message]:
    """The messages of the runs this claim delivers itself, by run ID; each of those runs is set
    delivered. A run whose target cannot be had now (gone, or a host error) is left claimed: the
    delivery path records why, or retries it."""
    candidates = [run for run in runs if deliverable(run, loops[run.loop_id])]
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


def reclaim(run: NewRun, now: datetime) -> None:
    """A run deliver_here set delivered, back to what a claim makes: its occurrence turned out
    taken (it is then recorded skipped, _skip_taken), or the claim's deliveries were undone."""
    run.status, run.retry_at, run.started_at, run.finished_at = RunStatus.CLAIMED, now + lease(), None, None
    run.target_session_id = run.fallback = ""


# What a delivered scheduled run changes on its loop (scheduler.delivery._update_loops), with the
# claim's own change (the next deadline): one write of the loop for the whole occurrence.
DELIVERED_LOOP_FIELDS = (
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


def record_delivered(loops: list[Loop], now: datetime) -> None:
    """The loops whose runs the claim delivered: moved on and recorded in one UPDATE. The counter is
    read under the row's lock (the claim's), so adding one to it here is exact."""
    update_rows(
        Loop,
        DELIVERED_LOOP_FIELDS,
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
