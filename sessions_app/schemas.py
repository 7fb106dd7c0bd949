"""In/Out schemas of the session tools (spec §7) and the embedded host API (contract §5)."""

from __future__ import annotations

from typing import Annotated, Literal

from ninja import Schema
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from core.schemas import Identifier, StrictModel, Text

from .models import RESERVED_SESSION_IDS


def _not_reserved(value: str) -> str:
    if value in RESERVED_SESSION_IDS:
        raise ValueError(f"'{value}' is a reserved selector, not a session ID.")
    return value


SessionId = Annotated[Identifier, AfterValidator(_not_reserved)]
SessionStatusName = Literal["running", "idle", "cold"]


class ListSessionsIn(StrictModel):
    limit: Annotated[int, Field(ge=1, le=500, description="How many sessions, newest first.")] = 50


class CheckSessionStatusIn(StrictModel):
    session_id: Annotated[SessionId, Field(description="An exact session ID.")]


class SessionView(BaseModel):
    session_id: str
    title: str | None = None
    status: SessionStatusName
    updated_at: str = Field(description="ISO-8601 with offset.")


class SessionsOut(BaseModel):
    sessions: list[SessionView]


class SessionStatusView(BaseModel):
    session_id: str
    status: Literal["running", "idle", "cold", "missing"]
    title: str | None = None
    updated_at: str | None = None


class HostSessionIn(StrictModel):
    user_title: Annotated[str, Text(1000)] | None = None
    generated_title: Annotated[str, Text(1000)] | None = None
    first_prompt: Annotated[str, Text(100_000)] | None = None
    status: SessionStatusName | None = None
    preset: Annotated[str, Text(255)] | None = None
    model: Annotated[str, Text(255)] | None = None
    global_interface: bool | None = None


class HostSessionOut(BaseModel):
    session_id: str
    title: str | None = None
    status: SessionStatusName
    updated_at: str
    preset: str | None = None
    model: str | None = None
    global_interface: bool


class HostPresetIn(StrictModel):
    mountable: bool = True


class HostPresetOut(BaseModel):
    name: str
    mountable: bool


class InboxSource(BaseModel):
    kind: Literal["loop"]
    loop_id: str
    run_id: str
    occurrence_key: str
    scheduled_at: int
    notice: Literal[True] | None = Field(
        default=None,
        description="Present (true) only on a failure notice (contract §16): a message about the loop, not one of "
        "its occurrences. Its occurrence_key is '<loop_id>@notice:<run_id>', run_id the run that failed, "
        "scheduled_at when it failed; the text is the notice in the §7 XML's <prompt>.",
    )


class InboxMessageOut(BaseModel):
    message_id: str
    text: str
    wakeup: bool
    delivery: Literal["next_turn", "next_step"]
    source: InboxSource
    created_at: int


class InboxOut(BaseModel):
    messages: list[InboxMessageOut]


class InboxQuery(Schema):
    """contract §10: a page of a session's inbox, oldest first."""

    after: Annotated[
        Identifier | None, Field(description="A message_id of this session: only the messages after it.")
    ] = None
    limit: Annotated[int | None, Field(ge=1, le=1000, description="At most this many messages; all without it.")] = None


class PluginDeliveryLoop(BaseModel):
    loop_id: str
    run_id: str


class PluginDeliveryOut(BaseModel):
    """What DSH's plugin delivers (dsh-plugin/src/deliver.ts, DeliverRequest), as the `dsh` host offers
    it; what else the host offers with it (e.g. a fresh run's tools) passes through."""

    model_config = ConfigDict(extra="allow")

    sessionId: str
    text: str
    key: str
    summary: str
    loop: PluginDeliveryLoop
    unattended: bool
    notice: bool
