"""The rows the scheduler's hot path makes and reads: plain slotted objects, not model instances
(building ~1,000 model instances a batch of 250, with every column of every row
parsed, cost a quarter of the scheduler's CPU per occurrence)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime


@dataclass(slots=True)
class NewRun:
    """A run as a claim (or run now) makes it: every LoopRun column, inserted in bulk."""

    run_id: str
    loop_id: str
    occurrence_key: str
    scheduled_at: datetime
    status: str
    attempt: int
    missed: int
    target: str
    claimed_at: datetime
    retry_at: datetime | None
    revision: int
    target_session_id: str = ""
    lease_until: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str = ""
    fallback: str = ""
    manual: bool = False
    outcome: str = ""
    summary: str = ""
    outcome_at: datetime | None = None


@dataclass(slots=True)
class RunRow:
    """An open run as its driver sees it: what delivery reads, and the fields its record writes."""

    run_id: str
    loop_id: str
    occurrence_key: str
    scheduled_at: datetime
    attempt: int
    missed: int
    # Its prompt is its revision's (loops.models.LoopPrompt): the loop's own while it is still at it.
    revision: int
    target: str
    target_session_id: str
    fallback: str
    manual: bool
    started_at: datetime | None
    lease_until: datetime | None
    # Set by a host that reported the turn's end before the delivery was recorded (contract §10).
    outcome: str
    summary: str
    error: str
    status: str = ""
    retry_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(slots=True)
class DeliveryLoop:
    """The loop of a run being delivered: its target, and whether it is due again soon."""

    loop_id: str
    name: str
    kind: str
    state: str
    revision: int
    prompt: str  # this revision's
    session_id: str
    preset: str
    created_by_session_id: str
    next_at: datetime | None
    workspace: str  # where and how its fresh sessions start (contract §14)
    permission_preset: str
    tz: str  # its schedule's zone, "" for none: a fresh session's title tells its time there
    # contract §16: whether the run being recorded is its last (timing.ends).
    ends_at: datetime | None
    max_runs: int | None
    runs_delivered: int


NEW_RUN_COLUMNS = tuple(field.name for field in fields(NewRun))  # every column of loops.LoopRun
# The columns to read, in field order (RunRow's last three are written, not read).
OPEN_RUN_COLUMNS = tuple(field.name for field in fields(RunRow))[:-3]
LOOP_COLUMNS = tuple(field.name for field in fields(DeliveryLoop))
