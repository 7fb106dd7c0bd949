"""What the tools and the operator API show of a loop's history: its runs (and the outcome a host
reports of one) and its events. Runs and events outlive their loop (spec §4)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from core.schemas import StrictModel, Text
from sessions_app.hosts.base import OUTCOME_TEXT_LIMIT


class ActorView(BaseModel):
    kind: Literal["session", "user", "token", "scheduler"]
    id: str | None = None


class EventView(BaseModel):
    at: int
    kind: Literal[
        "created", "edited", "paused", "resumed", "run_now", "retried", "auto_paused", "deleted", "approved", "ended"
    ]
    actor: ActorView
    revision: int
    changes: dict[str, list] | None = None


class EventsOut(BaseModel):
    events: list[EventView]


class RunView(BaseModel):
    run_id: str
    loop_id: str
    occurrence_key: str
    scheduled_at: int
    status: Literal["claimed", "delivering", "delivered", "failed", "skipped"]
    attempt: int
    missed: int | None = None
    target_session_id: str | None = None
    started_at: int | None = None
    finished_at: int | None = None
    error: str | None = None
    fallback: str | None = None
    revision: int
    manual: bool
    outcome: Literal["succeeded", "failed", "cancelled"] | None = None
    summary: str | None = None
    outcome_at: int | None = None


class OutcomeIn(StrictModel):
    """contract §10: how the turn a delivery started ended, as its host saw it."""

    status: Literal["succeeded", "failed", "cancelled"]
    summary: Annotated[str, Text(OUTCOME_TEXT_LIMIT)] | None = Field(
        None, description="What the turn did, in a sentence or a paragraph."
    )
    error: Annotated[str, Text(OUTCOME_TEXT_LIMIT)] | None = Field(
        None, description="Why the turn failed, when it did."
    )


class RunsOut(BaseModel):
    runs: list[RunView]


class DeliveredRunView(RunView):
    """A RunView as the operator API lists runs by session (beyond contract §9): with its loop's
    name and whether the loop was deleted, since runs outlive their loop (spec §4)."""

    loop_deleted: bool = Field(
        description="True when the run's loop has been deleted: its runs stay, its page and actions do not."
    )
    loop_name: str | None = Field(
        None, description="The loop's name (as it was when deleted, for a deleted loop); omitted when it had none."
    )


class DeliveredRunsOut(BaseModel):
    runs: list[DeliveredRunView]
