"""The one interface between dshloop and an agent host (embedded or DSH over HTTP).

Tools, scheduler and panel talk only to this interface, never to a host implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..records import PresetInfo, SessionInfo


@dataclass(frozen=True)
class Delivered:
    message_id: str
    delivery: str  # next_turn | next_step


# contract §10: a turn outcome's summary and error, each at most this many characters.
OUTCOME_TEXT_LIMIT = 4000


@dataclass(frozen=True)
class RunRef:
    """A delivered run whose turn outcome is asked of the host (the optional `turn_outcomes`)."""

    run_id: str
    session_id: str
    occurrence_key: str  # the delivered message's key (DSH: its rpcId)
    # Epoch ms no later than the message reached the host (the run's first delivery attempt):
    # a host reads its log back to here, never further.
    delivered_at_ms: int
    # A fresh session's run (a `new` loop's): nobody watches it, so a turn that waits for a person
    # (an approval, a question) is reported as stalled instead of being waited on.
    fresh: bool = False


@dataclass(frozen=True)
class TurnEnd:
    """How the turn a delivered message started (or joined) ended, as the host itself logged it."""

    status: str  # succeeded | failed | cancelled (loops.models.RunOutcome)
    summary: str = ""  # the turn's final assistant text, when the host has it (≤ OUTCOME_TEXT_LIMIT)
    error: str = ""  # why it failed or was cancelled (≤ OUTCOME_TEXT_LIMIT)
    # The turn has not ended, and cannot without a person: the caller cancels it, then records this.
    stalled: bool = False


def clip(text: str, limit: int = OUTCOME_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HostError(Exception):
    """A host call failed. transient=True: retrying later may succeed (timeout, 5xx, refused).
    unreachable=True: the host gave no answer at all (refused, reset, timed out), so it could not
    say whether an earlier attempt got through either: a run is never given up on such an error."""

    def __init__(self, message: str, *, transient: bool, unreachable: bool = False):
        super().__init__(message)
        self.transient = transient or unreachable
        self.unreachable = unreachable


@dataclass(frozen=True)
class Capabilities:
    """What a host can do, as it declares it: the engine asks these, never the host's name."""

    # Runs per delivery task. A host that answers in microseconds (the embedded one) takes large
    # batches, which amortize the database work; a remote host may hang for its whole timeout, so
    # it takes one run a task and a slow host holds at most one run per worker.
    delivery_batch: int
    # The host's writes live in dshloop's own database: deliveries and their records can then
    # commit together, so a crash can never leave a delivered but unrecorded run.
    transactional: bool
    # The host tells how a delivered turn ended (it implements TurnOutcomes), so the scheduler
    # asks it; other hosts report outcomes through POST /api/host/runs/{id}/outcome.
    turn_outcomes: bool = False
    # The host has workspaces and permission presets (it implements Workspaces): a fresh session is
    # started where its loop says, under its preset, and a running turn can be cancelled. Other
    # hosts start fresh sessions their own way and ignore a Placement.
    workspaces: bool = False
    # The host can make the global interface session (`self`, the creator of the panel's loops) when
    # it has none (it implements GlobalSessionMaker): the embedded host, whose sessions are dshloop's,
    # and DSH, which has no global interface of its own. An HTTP host owns its sessions and names its own.
    makes_global_session: bool = False
    # The host keeps a session's model apart from its session records (SessionInfo.model is empty)
    # and tells it for one session on request (it implements SessionModels): DSH, whose session list
    # has no model. A `new` run asks it for its source session's model (spec §2.1).
    session_models: bool = False
    # The host can archive a session: out of its list of conversations, its log kept (it implements
    # SessionArchive): DSH. A `new` run's session is archived once its turn has ended, if the
    # operator asks (DSHLOOP_ARCHIVE_FRESH_RUNS).
    archives_sessions: bool = False


@dataclass(frozen=True)
class Placement:
    """Where a fresh session starts and under which permission preset (contract §14): a `new`
    loop's; empty: the host's defaults. And the title a host that names sessions gives it, so that
    a person can tell which loop and occurrence it ran (scheduler.message.fresh_session_title)."""

    workspace: str = ""
    permission_preset: str = ""
    title: str = ""


NO_PLACEMENT = Placement()


class Host(Protocol):
    label: str  # how a person names it (DSH): health says which host cannot be reached
    capabilities: Capabilities

    def list_sessions(self, *, limit: int) -> list[SessionInfo]: ...

    def get_session(self, session_id: str) -> SessionInfo | None: ...

    def global_session(self) -> SessionInfo | None: ...

    def get_preset(self, name: str) -> PresetInfo | None: ...

    def resume_session(self, session_id: str) -> SessionInfo: ...

    def create_session(
        self, *, preset: str, model: str, first_prompt: str, source: dict, placement: Placement = NO_PLACEMENT
    ) -> str: ...

    def deliver(self, session_id: str, *, text: str, source: dict, occurrence_key: str) -> Delivered: ...

    # Batch forms, so the embedded host can use one query for many runs; a remote host loops.
    def get_sessions(self, session_ids: set[str]) -> dict[str, SessionInfo]: ...

    def deliver_many(self, messages: list[Message]) -> list[Delivered | HostError]: ...


class TurnOutcomes(Protocol):
    """The optional capability Capabilities.turn_outcomes declares: the host tells how a delivered
    turn ended."""

    def turn_outcomes(self, runs: list[RunRef]) -> dict[str, TurnEnd]:
        """Outcomes by run_id, only for runs whose turn has ended; runs still in flight, or whose
        session or message the host no longer has, are left out. Raises HostError when the host
        cannot be read at all."""
        ...


class Workspaces(Protocol):
    """The optional capability Capabilities.workspaces declares."""

    def session_workspace(self, session_id: str) -> str:
        """The directory the session works in, or "" when the host does not know the session."""
        ...

    def workspaces(self) -> list[str]:
        """The workspaces' directories the host knows, for an operator to choose from."""
        ...

    def directory_problem(self, path: str) -> str:
        """Why the host could not start a session in the absolute directory `path` (it does not
        exist, is no directory, or cannot be read), in the host's words; "" when it can. Asked
        before a workspace is stored, so that a wrong one is refused then, not at its next run.
        Raises HostError when the host cannot be asked."""
        ...

    def cancel_turn(self, session_id: str) -> None:
        """Cancel the session's running turn (nothing if it has none). Raises HostError."""
        ...


class SessionModels(Protocol):
    """The optional capability Capabilities.session_models declares."""

    def session_model(self, session_id: str) -> str:
        """The model the host runs the session on, as create_session takes it; "" when the session
        has none of its own (it follows the host's default) or the host does not know it. Asked
        without waking a cold session. Raises HostError when the host cannot be asked."""
        ...


class SessionArchive(Protocol):
    """The optional capability Capabilities.archives_sessions declares."""

    def archive_session(self, session_id: str) -> None:
        """Take the session out of the host's list of conversations, keeping its log; archiving
        one already archived changes nothing. Raises HostError when the host cannot do it."""
        ...


class GlobalSessionMaker(Protocol):
    """The optional capability Capabilities.makes_global_session declares."""

    def ensure_global_session(self) -> str:
        """Make the global interface session when the host has none, so that `self` and the panel's
        loops work from the first start. Returns what was made, as a line for the operator; "" when
        there already was one. Raises HostError when the host cannot be asked."""
        ...


@dataclass(frozen=True)
class Message:
    session_id: str
    text: str
    source: dict
    occurrence_key: str
    # For a host that can show a message as what it is rather than as its text (DSH with dshloop's
    # plugin, contract §15): one line naming the loop, and whether the session was made for this
    # run of a `new` loop (unattended: DSH then leaves it no loop-making tools).
    summary: str = ""
    fresh: bool = False
    # A failure notice about the loop (contract §16), not one of its occurrences: DSH Web draws it as one.
    notice: bool = False


def deliver_each(
    host: Host, messages: list[Message], *, one: Callable[[Message], Delivered] | None = None
) -> list[Delivered | HostError]:
    """deliver_many for a host without a batch form: one call per message (`host.deliver`, or `one`
    for a host that uses more of a Message than its text and key), each failure kept."""

    def deliver(message: Message) -> Delivered:
        return host.deliver(
            message.session_id, text=message.text, source=message.source, occurrence_key=message.occurrence_key
        )

    results: list[Delivered | HostError] = []
    for message in messages:
        try:
            results.append((one or deliver)(message))
        except HostError as exc:
            results.append(exc)
    return results
