"""The one interface between dshloop and an agent host (embedded or DSH over HTTP).

Tools, scheduler and panel talk only to this interface, never to a host implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..records import PresetInfo, SessionInfo


@dataclass(frozen=True)
class Delivered:
    message_id: str
    delivery: str  # next_turn | next_step


class HostError(Exception):
    """A host call failed. transient=True: retrying later may succeed (timeout, 5xx, refused)."""

    def __init__(self, message: str, *, transient: bool):
        super().__init__(message)
        self.transient = transient


class Host(Protocol):
    # True when the host's writes live in dshloop's own database: deliveries and their records
    # can then commit together, so a crash can never leave a delivered but unrecorded run.
    transactional: bool

    def list_sessions(self, *, limit: int) -> list[SessionInfo]: ...

    def get_session(self, session_id: str) -> SessionInfo | None: ...

    def global_session(self) -> SessionInfo | None: ...

    def get_preset(self, name: str) -> PresetInfo | None: ...

    def resume_session(self, session_id: str) -> SessionInfo: ...

    def create_session(self, *, preset: str, model: str, first_prompt: str, source: dict) -> str: ...

    def deliver(self, session_id: str, *, text: str, source: dict, occurrence_key: str) -> Delivered: ...

    # Batch forms, so the embedded host can use one query for many runs; a remote host loops.
    def get_sessions(self, session_ids: set[str]) -> dict[str, SessionInfo]: ...

    def deliver_many(self, messages: list[Message]) -> list[Delivered | HostError]: ...


@dataclass(frozen=True)
class Message:
    session_id: str
    text: str
    source: dict
    occurrence_key: str


def deliver_each(host: Host, messages: list[Message]) -> list[Delivered | HostError]:
    """deliver_many for a host without a batch form: one call per message, each failure kept."""
    results: list[Delivered | HostError] = []
    for message in messages:
        try:
            results.append(
                host.deliver(
                    message.session_id, text=message.text, source=message.source, occurrence_key=message.occurrence_key
                )
            )
        except HostError as exc:
            results.append(exc)
    return results
