"""The global interface session in DSH (base.GlobalSessionMaker): the one session that plays `self`,
since DSH has no global interface of its own (contract §11). Made once by `manage.py bootstrap`,
titled so that a person finds it in DSH Web, and given a first turn.

Why a first turn: DSH Web opens, as a person's new chat, a session of the workspace in which no turn
has run yet (`blank` in session.list; DSH's `sessionBlank`, and the client's `connectWorkspace`
reuses such a session rather than make one), and lists a blank session only as "New Session": an
empty global session would take the person's first conversation, and every `self` loop after it. A
first turn makes it a conversation like any other, shown by its title. Its message is sent once: a
retry looks for its key in the session's log first.
"""

from __future__ import annotations

import time
from typing import Protocol

from .dsh_history import find_occurrence
from .dsh_wire import DshClient, DshError

# How a person finds the global interface session in DSH Web.
GLOBAL_SESSION_TITLE = "dshloop: global interface"
GLOBAL_SESSION_INTRO_KEY = "dshloop-global-interface-intro"
GLOBAL_SESSION_INTRO = (
    "This conversation is dshloop's global interface. Loops whose target is `self`, and loops made in "
    "dshloop's panel or in DSH Web's Loops panel, are delivered here. Nothing to do now: answer in one short line."
)
INTRO_SECONDS = 30.0  # for its turn to start (about a second), then to end (one short answer)
INTRO_POLL = 0.2


class DshHost(Protocol):
    """What the global session needs of the host (dsh.DshHost)."""

    wire: DshClient
    cwd: str
    global_session_id: str

    def find(self, session_id: str) -> dict | None: ...
    def placement(self, directory: str) -> dict: ...


def ensure_global_session(host: DshHost) -> str:
    """The configured global interface session, made in DSH when it is missing and given its first
    turn; one found with no turn yet (an earlier dshloop made it) gets its first turn now. Returns
    what was done, or "" when nothing was."""
    session_id = host.global_session_id
    if not session_id:
        return ""
    item = host.find(session_id)
    if item is not None and not item.get("blank"):
        return ""
    if item is None:
        host.wire.call("session.create", {"sessionId": session_id, **host.placement(host.cwd)})
        # A title the user sets (source `user`) is pinned: the first prompt's automatic one never replaces it.
        host.wire.call("session.rename", {"sessionId": session_id, "title": GLOBAL_SESSION_TITLE})
    _first_turn(host, session_id)
    if item is None:
        return f'Global interface session created in DSH: {session_id} ("{GLOBAL_SESSION_TITLE}", the target "self")'
    return (
        f"Global interface session {session_id} had no turn yet, and DSH Web would open it "
        "as a new chat: it has had its first"
    )


def _first_turn(host: DshHost, session_id: str) -> None:
    """Send the global session its introduction (once) and wait until its turn has started, so that
    DSH no longer counts it blank; then, a while, until the turn has ended, so that the first `self`
    delivery starts a turn of its own."""
    where, _ = find_occurrence(host.wire, session_id, {"occurrence_key": GLOBAL_SESSION_INTRO_KEY, "scheduled_at": 0})
    if where == "absent":
        prompt = {"sessionId": session_id, "mode": "queue", "content": [{"type": "text", "text": GLOBAL_SESSION_INTRO}]}
        host.wire.call("session.prompt", prompt, rpc_id=GLOBAL_SESSION_INTRO_KEY)
    deadline = time.monotonic() + INTRO_SECONDS
    while True:
        item = host.find(session_id) or {}
        if not item.get("blank", True) and not item.get("running"):
            return
        if time.monotonic() > deadline:
            if item.get("blank", True):
                raise DshError(
                    f"DSH has not started the first turn of {session_id} after {INTRO_SECONDS:g} s; "
                    "the next bootstrap tries again.",
                    transient=True,
                )
            return  # started, still answering: no longer blank, which is what counts
        time.sleep(INTRO_POLL)
