"""One DSH session asked of DSH by its ID, and a batch of DSH calls made side by side.

DSH 0.1.0-rc.8 has no call for one session's summary: `session.list` answers every session of the
profile with its projections (3 s for 1,100 sessions here), and a profile only grows. So a session
is read from what dshloop's plugin answers for a loaded one (`sessions`, dsh_plugin: `loaded_item`),
else from calls that take its ID (DSH-HOST.md §5, §7; `log_item`):
- `session.history {sessionId, maxMessages: 1}`: whether it exists (`session-not-found`), its
  projections (title, blank) and its log's tail, the page from its last message on;
- `subagent.list {parentSessionId}`: whether it has a live agent (attached: idle or running);
- `GET /api/session.export?sessionId=…` (once per session and process): its header, the cwd and
  preset `session.list` shows, which no other call for one session carries. It reads the log
  without attaching the session.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.db import connections

from .dsh_wire import DshClient, DshError, json_array, json_object

# Events that happen inside a turn: the last of them after the last `turn/end` means a turn is open.
_IN_TURN = {
    "turn/start",
    "step/start",
    "user/message",
    "assistant/chunk",
    "assistant/message",
    "tool/call",
    "tool/result",
}


def turn_open(tail: list[dict]) -> bool:
    """Whether the log's tail (the page from the last message on, oldest first) ends inside a turn.
    DSH writes every message inside a turn and closes each turn with `turn/end`, so the tail of a
    session whose turn ended holds that `turn/end` after its last message."""
    for event in reversed(tail):
        kind = event.get("type")
        if kind == "turn/end":
            return False
        if kind in _IN_TURN:
            return True
    return False


def header_of(exported: bytes) -> dict:
    """The session's header (`{"type": "session", "cwd", "agentPreset", …}`) and the preset its
    turns run under, from `session.export`'s zip: DSH's own rule (resolveSessionPreset), the last
    `agent-preset/selected` event, else the header's preset. {} when it is not readable."""
    try:
        with zipfile.ZipFile(io.BytesIO(exported)) as archive:
            lines = archive.read("session.jsonl").decode().splitlines()
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError):
        return {}
    records = []
    for line in lines:
        try:
            records.append(json_object(json.loads(line)))
        except ValueError:
            continue
    header = next((record for record in records if record.get("type") == "session"), {})
    preset = header.get("agentPreset")
    blank = True
    for record in records:
        if record.get("type") == "agent-preset/selected":
            preset = json_object(record.get("data")).get("agentPreset", preset)
        elif record.get("type") == "turn/start":
            blank = False
    return {**header, "agentPreset": preset, "blank": blank}


def loaded_item(found: dict, *, idle_if_stored: bool = False) -> dict | None:
    """A session as the plugin answered it (dsh-plugin/src/sessions.ts), as `session.list` shows it:
    loaded (attached), or read from its stored log (`found`: cold, or told idle with
    `idle_if_stored`); None when the plugin could not tell, or the answer lacks DSH's projections
    (then DSH's own calls are asked)."""
    projections = json_object(found.get("projections"))
    listed = json_object(json_object(projections.get("values")).get("sessionListMetadata"))
    attached = found.get("attached") is True
    if not listed or not (attached or found.get("found") is True):
        return None
    last_prompt, created = listed.get("lastPromptAt"), found.get("createdAt")
    return {
        "sessionId": found["sessionId"],
        "running": attached and found.get("running") is True,
        "attached": attached or idle_if_stored,
        "blank": listed["blank"] if isinstance(listed.get("blank"), bool) else False,
        "updatedAt": last_prompt if isinstance(last_prompt, int) else created if isinstance(created, int) else None,
        "cwd": found.get("cwd"),
        "agentPreset": found.get("agentPreset"),
        "projections": projections,
    }


def log_item(
    wire: DshClient, session_id: str, *, attached: bool | Callable[[], bool], header: Callable[[], dict]
) -> dict | None:
    """One session from the tail of its log and its header, as `session.list` shows it; None when DSH
    has no such session. `attached`: known, or asked only once the session is found to exist."""
    try:
        value = json_object(wire.call("session.history", {"sessionId": session_id, "maxMessages": 1}))
    except DshError as exc:
        if exc.code == "session-not-found":
            return None
        raise
    entries = [json_object(entry).get("event") for entry in json_array(value.get("events"))]
    tail = [event for event in entries if isinstance(event, dict)]
    projections = json_object(value.get("projections"))
    listed = json_object(json_object(projections.get("values")).get("sessionListMetadata"))
    live = attached if isinstance(attached, bool) else attached()
    known = header()
    times = [event["time"] for event in tail if isinstance(event.get("time"), int)]
    last_prompt = listed.get("lastPromptAt")
    return {
        "sessionId": session_id,
        "running": live and turn_open(tail),
        "attached": live,
        "blank": listed["blank"] if isinstance(listed.get("blank"), bool) else False,
        "updatedAt": last_prompt if isinstance(last_prompt, int) else min(times, default=known.get("createdAt")),
        "cwd": known.get("cwd"),
        "agentPreset": known.get("agentPreset"),
        "projections": projections,
    }


T = TypeVar("T")
R = TypeVar("R")


def side_by_side(groups: Sequence[T], one: Callable[[T], R], *, workers: int) -> list[R]:
    """`one(group)` for each group, at most `workers` at a time, the results in the groups' order.

    DSH answers many sessions at once (one Node process, its work mostly waiting on its disk and
    its model): a batch waits for its slowest call, not for the sum of them. A single group runs in
    the caller's thread. A worker thread that touched the database closes its connection when done:
    it would otherwise stay open until the thread is collected."""
    if len(groups) <= 1 or workers <= 1:
        return [one(group) for group in groups]

    def run(group: T) -> R:
        try:
            return one(group)
        finally:
            connections.close_all()  # this thread's connections only (Django's are per thread)

    with ThreadPoolExecutor(max_workers=min(workers, len(groups)), thread_name_prefix="dsh") as pool:
        return list(pool.map(run, groups))
