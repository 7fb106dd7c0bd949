"""One DSH session asked of DSH by its ID, and a batch of DSH calls made side by side.

DSH 0.1.0-rc.8 has no call for one session's summary: `session.list` answers every session of the
profile with its projections (3 s for 1,100 sessions here), and a profile only grows. So a session
is read from calls that take its ID (DSH-HOST.md §5, §7):
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

from .dsh_wire import json_object

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
