"""Delivering occurrences into DSH (spec §6), exactly once and never counted if dropped (docs/dsh.md).

Neither way into a session deduplicates by itself (DSH takes a repeated `rpcId` twice; a plugin's
`agent.send` sends what it is given), and a message still pending in a session's inbox when DSH stops
is discarded. So a delivery counts only once a `user/message` carrying the occurrence key is in the
session's log, and nothing is sent while the log or the inbox already holds it.

- With dshloop's plugin, as DSH runs it (the hot path): one call, `POST /dshloop/deliver` (dsh_plugin).
  The plugin looks for the key in the live agent's log and pending inbox right before it sends, sends
  only if it is in neither, and answers once DSH has logged the message, with its ID. A cold session
  is `session-not-loaded` (nothing sent): it is loaded with DSH's own `session.create` (its stored
  preset and model) and rung again, and the plugin looks again. A driver that died after the plugin
  sent, or a DSH that stopped meanwhile, leaves nothing else to do: the re-driven run rings again and
  the plugin finds the message (or finds it cancelled, and sends it).
- Without it (or with a plugin too old to confirm): the session's log is read back to the
  occurrence's time first (dsh_history), then `session.prompt` (`steer` into a running turn, `queue`
  otherwise; its `rpcId` the key) or the plugin's ring, then the log is read every CONFIRM_POLL until
  the message is there.

A batch's deliveries go to DSH side by side into distinct sessions, CONCURRENCY at a time, one
session's in order: a batch takes as long as its slowest delivery (about a turn's start).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Protocol

from sessions_app.models import SessionStatus

from ..records import SessionInfo
from .base import Delivered, HostError, Message
from .dsh_history import find_occurrence
from .dsh_lookup import side_by_side
from .dsh_plugin import CONFIRM_SECONDS, PluginChannel, Rung
from .dsh_wire import DshClient, DshError

CONFIRM_POLL = 0.2  # the careful path's history reads while it waits for the message
# Deliveries one batch makes at once, into distinct sessions: each mostly waits for DSH to log its
# message, which DSH does for many sessions at once. As large as a batch (dsh.DshHost's
# delivery_batch): a batch's deliveries make no database connection of their own (deliver_many).
CONCURRENCY = 100
# Without a plugin that confirms, each delivery polls the session's log until its message is there:
# fewer at once, or the polls crowd DSH's one thread.
CAREFUL_CONCURRENCY = 16


class DshHost(Protocol):
    """What delivering needs of the host (dsh.DshHost)."""

    wire: DshClient
    plugin: PluginChannel

    def load_session(self, session_id: str) -> None: ...
    def get_session(self, session_id: str) -> SessionInfo | None: ...
    def resume_session(self, session_id: str) -> SessionInfo: ...


def deliver_many(host: DshHost, messages: list[Message]) -> list[Delivered | HostError]:
    try:
        abilities = host.plugin.abilities()
    except HostError as exc:  # DSH gives no answer: each message's attempt failed so
        return [exc for _ in messages]
    by_session: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        by_session.setdefault(message.session_id, []).append(index)
    groups = list(by_session.values())

    def deliver_group(indexes: list[int]) -> list[Delivered | HostError]:
        delivered: list[Delivered | HostError] = []
        for index in indexes:  # one session's, in order; each failure kept
            try:
                delivered.append(deliver(host, messages[index], offered=abilities.deliver))
            except HostError as exc:
                delivered.append(exc)
        return delivered

    results: list[Delivered | HostError | None] = [None] * len(messages)
    # The plugin reads each message from dshloop while it is offered: the batch's are offered in one
    # write from here, so that the deliveries side by side make DSH calls only.
    with host.plugin.offered(messages) if abilities.deliver else nullcontext():
        delivered = side_by_side(
            groups, deliver_group, workers=CONCURRENCY if abilities.confirm else CAREFUL_CONCURRENCY
        )
    for indexes, group in zip(groups, delivered, strict=True):
        for index, result in zip(indexes, group, strict=True):
            results[index] = result
    return [result for result in results if result is not None]


def deliver(host: DshHost, message: Message, *, offered: bool = False) -> Delivered:
    """One message; `offered`: it is on offer to the plugin already (deliver_many)."""
    abilities = host.plugin.abilities()
    ring = host.plugin.ring if offered else host.plugin.deliver
    if abilities.confirm:
        return _through_plugin(host, message, ring)
    return _carefully(host, message, ring if abilities.deliver else None)


def _through_plugin(host: DshHost, message: Message, ring: Callable[[Message], Rung]) -> Delivered:
    """One ring; a cold session is loaded and rung again. The plugin's answer decides."""
    try:
        rung = ring(message)
    except DshError as exc:
        if exc.code != "session-not-loaded":
            raise
        host.load_session(message.session_id)  # cold: nothing was sent
        rung = ring(message)
    if rung.message_id is None:
        # Not in the log (yet): not counted as delivered. The plugin looks again before any resend,
        # and sends only if DSH no longer holds the message. Or DSH restarted onto a plugin that does
        # not confirm: the next attempt asks it, and reads the history back if so (_carefully).
        host.plugin.recheck()
        raise DshError(
            f"DSH accepted {message.occurrence_key} but it still waits in the session's inbox after "
            f"{CONFIRM_SECONDS:g} s; it is checked again before any resend.",
            transient=True,
        )
    return Delivered(rung.message_id, rung.delivery)


def _carefully(host: DshHost, message: Message, ring: Callable[[Message], Rung] | None) -> Delivered:
    """The log is read before and after the send (module docstring)."""
    session_id, source = message.session_id, message.source
    # Its log is read first: a session DSH does not have is `session-not-found` there.
    where, message_id = find_occurrence(host.wire, session_id, source)
    delivery = "next_turn"
    if where == "absent":
        if ring is not None:
            try:
                delivery = ring(message).delivery
            except DshError as exc:
                if exc.code != "session-not-loaded":
                    raise
                host.load_session(session_id)
                delivery = ring(message).delivery
        else:
            session = host.get_session(session_id)
            if session is None:
                raise DshError(f"DSH has no session {session_id!r}.", code="session-not-found", transient=False)
            if session.status == SessionStatus.COLD:  # the batch's look-up did not ask: loaded first
                session = host.resume_session(session_id)
            delivery = "next_step" if session.status == SessionStatus.RUNNING else "next_turn"
            host.wire.call(
                "session.prompt",
                {
                    "sessionId": session_id,
                    "mode": "steer" if delivery == "next_step" else "queue",
                    "content": [{"type": "text", "text": message.text}],
                },
                rpc_id=message.occurrence_key,
            )
    if message_id is None:
        message_id = _confirmed(host, session_id, source)
    return Delivered(message_id, delivery)


def _confirmed(host: DshHost, session_id: str, source: dict) -> str:
    deadline = time.monotonic() + CONFIRM_SECONDS
    while True:
        where, message_id = find_occurrence(host.wire, session_id, source)
        if message_id is not None:
            return message_id
        if time.monotonic() > deadline:
            # Not in the log (yet): not counted as delivered. A retry looks again before it sends,
            # and sends only if DSH no longer holds the prompt.
            state = "still waits in the session's inbox" if where == "pending" else "is not in the session's log"
            raise DshError(
                f"DSH accepted {source['occurrence_key']} but it {state} after {CONFIRM_SECONDS:g} s; "
                "it is checked again before any resend.",
                transient=True,
            )
        time.sleep(CONFIRM_POLL)
