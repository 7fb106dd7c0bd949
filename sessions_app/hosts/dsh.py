"""A real DeepSeek Harness host over its HTTP API (contract §11; ../shared/DSH-HOST.md; the
wire itself in dsh_wire, turn outcomes in dsh_turns).

What maps to what:
- the sessions (list_sessions) <- `session.list` (all sessions, attached and persisted, newest
  first), which grows with the profile: only the list a person or an agent asks for reads it.
- one session (a delivery's target, a tool call's caller, a status) <- calls that take its ID
  (dsh_lookup): the tail of `session.history` (missing: `session-not-found`; its projections; a turn
  still open), `subagent.list {parentSessionId}` (`parentAvailable`: a live agent), and once per
  session and process `session.export`'s header (cwd, preset). The title is
  `projections.values.title`, DSH's own fold: a title the user set (`session.rename`) is pinned and
  wins over a generated one. Status: running when attached with a turn open; otherwise idle when
  attached, else cold (DSH-HOST.md §7).
- resume a cold session <- `session.create {sessionId, cwd}` with its recorded cwd: DSH keeps its
  stored preset and model (no override, spec §5).
- `new` <- `session.create {sessionId, workspaceId, agentPreset}` in the workspace of the loop's
  directory (else DSHLOOP_DSH_CWD's), the session ID derived from the occurrence key, so that a
  retried occurrence adopts the session it made (DSH merges a create of an existing ID into that
  session); then `/permission <preset>` through `commands/execute`, before any prompt (contract §14,
  docs/dsh-unattended.md §2); then its title (Placement.title) with `session.rename`; then the
  source session's model with `session.selectModel`, DSH's default model kept as it was (dsh_models).
- archiving a finished `new` run's session (SessionArchive) <- `workspace.archiveSession`.
- the global interface session (GlobalSessionMaker) <- `session.create` and `session.rename`, then
  one first turn (`session.prompt`), without which DSH Web would open it as a person's new chat.
- a session's model (SessionModels) <- not in `session.list`: a live session's `session.models`,
  a cold one's newest `request/header` in `session.history` (dsh_models).
- a session's workspace <- its `cwd` in `session.list`; the workspaces <- `workspace.list`;
  whether a directory can be one <- `host.listDirectory {path}` (`directory-unreadable` if not);
  cancelling a turn <- `session.cancel`.
- a batch's deliveries <- side by side into distinct sessions (dsh_lookup.side_by_side, CONCURRENCY
  at a time), one session's in order; each as follows.
- deliver <- with dshloop's plugin mounted (its channel answers `hello`): `POST /dshloop/deliver`,
  and the plugin sends the message to the session's live agent with a plugin source carrying the
  occurrence key as `deliveryKey` (contract §15), so that DSH Web draws a loop card; without it,
  `session.prompt` with `steer` for a running target (next step) and `queue` otherwise (next
  turn), its `rpcId` the occurrence key. Neither deduplicates by itself, and a message still
  pending when DSH stops is discarded; so a delivery counts only once a `user/message` carrying
  the key is in `session.history`, and before sending, the history is searched for it.
- presets <- `agentPreset.list` (mountable unless `broken`).
- turn outcomes <- `session.history`: the first `turn/end` after the occurrence's
  `user/message` (a steered message ends with the turn it joined, a queued one with the later turn
  it started), its `reason.kind` mapped by `turn_end_of` (kinds: DSH's TurnEndReasonMap).
"""

from __future__ import annotations

import hashlib
import logging
import time

from django.conf import settings

from core.timeutil import from_ms
from core.validation import is_identifier
from sessions_app.models import SessionHeader, SessionStatus
from sessions_app.services import plugin_delivery_offered, session_headers_cache

from ..records import PresetInfo, SessionInfo
from .base import (
    NO_PLACEMENT,
    Capabilities,
    Delivered,
    HostError,
    Message,
    Placement,
    RunRef,
    TurnEnd,
    deliver_each,
)
from .dsh_lookup import header_of, side_by_side, turn_open
from .dsh_models import read_session_model, select_model, selection_of
from .dsh_turns import carries, stall_of, turn_end_of
from .dsh_wire import DshClient, DshError, json_array, json_object, json_string

logger = logging.getLogger("dshloop.hosts")

# How long a delivery waits for its message to show in the session's history: an idle session
# starts its turn at once (about a second); a steered one at the running turn's next step.
CONFIRM_SECONDS = 8.0
CONFIRM_POLL = 0.2
HISTORY_PAGE = 200  # messages per history page when looking for an occurrence's message
# DSH's event times and dshloop's run times come from two clocks (one machine: DSH answers only
# loopback); a log is read back this much further than a run's time.
CLOCK_MARGIN_MS = 10 * 60 * 1000
# dshloop's plugin's loopback channel in DSH (dsh-plugin/src/index.ts), and how often a scheduler
# asks again whether it is there.
PLUGIN_CHANNEL = "/dshloop"
PLUGIN_RECHECK_SECONDS = 60.0
# DSH calls one batch makes at once: its deliveries into distinct sessions (each mostly waits for its
# message to show in the log), and its look-ups, fewer: DSH answers on one thread, and subagent.list
# reads every persisted session's header (rc.8), so a crowd of them would queue past the timeout.
CONCURRENCY = 16
LOOKUP_CONCURRENCY = 4


def fresh_run_extra_tools() -> list[str]:
    """The tools a fresh run may call beyond the plugin's built-in set: the operator's
    DSHLOOP_FRESH_RUN_TOOLS, and the loop-making tools when DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS is on."""
    making = ["loop_create", "loop_delete"] if settings.DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS else []
    return [*settings.DSHLOOP_FRESH_RUN_TOOLS, *making]


def new_session_id(occurrence_key: str) -> str:
    """The DSH session for one occurrence of a `new` loop: the same occurrence, the same session."""
    return "loop-" + hashlib.sha256(occurrence_key.encode()).hexdigest()[:24]


# How a person finds the global interface session in DSH Web (ensure_global_session).
GLOBAL_SESSION_TITLE = "dshloop: global interface"
# The global interface session's first turn. DSH Web opens, as a person's new chat, a session of the
# workspace in which no turn has run yet (`blank` in session.list; DSH's `sessionBlank`, and the
# client's `connectWorkspace` reuses such a session rather than make one), and lists a blank session
# only as "New Session": an empty global session would take the person's first conversation, and
# every `self` loop after it. A first turn makes it a conversation like any other, shown by its
# title. Its message is sent once: a retry looks for this key in the session's log first.
GLOBAL_SESSION_INTRO_KEY = "dshloop-global-interface-intro"
GLOBAL_SESSION_INTRO = (
    "This conversation is dshloop's global interface. Loops whose target is `self`, and loops made in "
    "dshloop's panel or in DSH Web's Loops panel, are delivered here. Nothing to do now: answer in one short line."
)
INTRO_SECONDS = 30.0  # for its turn to start (about a second), then to end (one short answer)


class DshHost:
    label = "DSH"
    capabilities = Capabilities(
        # A batch's messages go to DSH side by side (deliver_many), CONCURRENCY at a time.
        delivery_batch=16,
        transactional=False,
        turn_outcomes=True,
        workspaces=True,
        makes_global_session=True,
        session_models=True,
        archives_sessions=True,
    )

    def __init__(self, base_url: str, *, cwd: str = "", global_session_id: str = "", timeout: float = 10.0):
        self.wire = DshClient(base_url, timeout=timeout)
        self.cwd = cwd
        self.global_session_id = global_session_id
        self._plugin = False
        self._plugin_checked_at: float | None = None
        self._headers: dict[str, dict] = {}  # session ID -> its header (_header), this process's
        self._live: set[str] = set()  # sessions seen with a live agent (_attached)
        self._live_count = 0  # DSH's live-agent count when last seen

    # -- sessions ----------------------------------------------------------------------------------

    def _items(self) -> list[dict]:
        value = self.wire.call("session.list", {})
        items = value.get("items") if isinstance(value, dict) else None
        if not isinstance(items, list):
            raise DshError("DSH sent no session list for session.list.", transient=True)
        # An ID no dshloop session can have (too long, control characters) is left out, not cached.
        return [item for item in items if isinstance(item, dict) and is_identifier(item.get("sessionId"))]

    def _attached(self, session_id: str) -> bool:
        """Whether the session has a live agent in DSH. rc.8's only per-session answer, subagent.list,
        reads every persisted session's header; but a session once attached stays so until DSH stops
        (DSH-HOST.md §7: nothing detaches one), so a session seen attached is asked again only with
        host.describe, whose live-agent count drops when DSH has restarted (then all are asked anew)."""
        if session_id in self._live:
            count = self._live_agents()
            if count >= self._live_count:
                self._live_count = count
                return True
            self._live.clear()  # DSH restarted (or agents went away): nothing is known to be live
        value = self.wire.call("subagent.list", {"parentSessionId": session_id})
        attached = bool(isinstance(value, dict) and value.get("parentAvailable"))
        if attached:
            self._live_count = self._live_agents()
            self._live.add(session_id)
        return attached

    def _live_agents(self) -> int:
        count = json_object(self.wire.call("host.describe", {})).get("attachedSessions")
        return count if isinstance(count, int) else 0

    def _info(self, item: dict, *, with_status: bool = True) -> SessionInfo:
        session_id = item["sessionId"]
        # A session looked up by its ID (_find) says whether it is attached; a listed one is asked.
        attached = item["attached"] if "attached" in item else with_status and self._attached(session_id)
        if item.get("running"):
            status = SessionStatus.RUNNING
        elif attached:
            status = SessionStatus.IDLE
        else:
            status = SessionStatus.COLD
        projections = json_object(item.get("projections"))
        values = json_object(projections.get("values"))
        title = values.get("title") if isinstance(values.get("title"), str) else None
        updated = item.get("updatedAt")
        updated_at = (
            from_ms(int(updated)) if isinstance(updated, int | float) and not isinstance(updated, bool) else None
        )
        return SessionInfo(
            session_id=session_id,
            status=str(status),
            updated_at=updated_at or from_ms(0),
            title=title.strip() or None if title else None,
            preset=json_string(item.get("agentPreset")),
            global_interface=session_id == self.global_session_id,
        )

    def _cache(self, sessions: list[SessionInfo]) -> None:
        """Keep the headers the panel and a DSH outage read (one bulk upsert); DSH's folded title is
        stored as the title a host already folded (as the HTTP host does)."""
        session_headers_cache(
            headers=[
                SessionHeader(
                    session_id=s.session_id,
                    status=s.status,
                    updated_at=s.updated_at,
                    preset=s.preset,
                    model=s.model,
                    user_title=s.title or "",
                    generated_title="",
                    first_prompt="",
                )
                for s in sessions
            ]
        )

    def list_sessions(self, *, limit: int) -> list[SessionInfo]:
        # session.list has no limit parameter (DSH-HOST.md §9): it is sliced here, newest first.
        items = sorted(self._items(), key=lambda item: item.get("updatedAt") or 0, reverse=True)[:limit]
        sessions = [self._info(item) for item in items]
        self._cache(sessions)
        return sessions

    def _find(self, session_id: str, *, attached: bool | None = None) -> dict | None:
        """One session as `session.list` shows it, asked of DSH for that session alone (dsh_lookup).
        None when DSH has no such session. `attached` given: whether it has a live agent is not asked
        (subagent.list reads every persisted session's header in rc.8: its cost grows with the profile)."""
        if not is_identifier(session_id):
            return None  # no dshloop session has such an ID (as _items leaves them out)
        try:
            value = json_object(self.wire.call("session.history", {"sessionId": session_id, "maxMessages": 1}))
        except DshError as exc:
            if exc.code == "session-not-found":
                return None
            raise
        entries = [json_object(entry).get("event") for entry in json_array(value.get("events"))]
        tail = [event for event in entries if isinstance(event, dict)]
        projections = json_object(value.get("projections"))
        listed = json_object(json_object(projections.get("values")).get("sessionListMetadata"))
        if attached is None:
            attached = self._attached(session_id)
        header = self._header(session_id)
        times = [event["time"] for event in tail if isinstance(event.get("time"), int)]
        last_prompt = listed.get("lastPromptAt")
        return {
            "sessionId": session_id,
            "running": attached and turn_open(tail),
            "attached": attached,
            "blank": listed["blank"] if isinstance(listed.get("blank"), bool) else False,
            "updatedAt": last_prompt if isinstance(last_prompt, int) else min(times, default=header.get("createdAt")),
            "cwd": header.get("cwd"),
            "agentPreset": header.get("agentPreset"),
            "projections": projections,
        }

    def _header(self, session_id: str) -> dict:
        """The session's header (cwd, preset), which only session.list and session.export carry:
        exported once per session and process, its log read without attaching it. The cwd never
        changes, nor the preset once a turn has run (DSH switches a preset only while blank)."""
        if session_id in self._headers:
            return self._headers[session_id]
        header = header_of(self.wire.get("/api/session.export", {"sessionId": session_id}))
        if header and not header["blank"]:
            self._headers[session_id] = header
        return header

    def get_session(self, session_id: str) -> SessionInfo | None:
        item = self._find(session_id)
        return None if item is None else self._info(item)

    def get_sessions(self, session_ids: set[str]) -> dict[str, SessionInfo]:
        """A delivery batch's targets (scheduler.targets.BatchView): not asked whether they have a live
        agent, so a cold one is told `idle` here; the delivery wakes it itself (_deliver), as DSH's own
        session.prompt does. What a person or an agent asks (get_session) is told cold as it is."""

        def lookup(session_id: str) -> SessionInfo | None:
            item = self._find(session_id, attached=True)
            return None if item is None else self._info(item)

        found = side_by_side(sorted(session_ids), lookup, workers=LOOKUP_CONCURRENCY)
        sessions = {session.session_id: session for session in found if session is not None}
        self._cache(list(sessions.values()))  # the panel shows a delivery's target by its title
        return sessions

    def global_session(self) -> SessionInfo | None:
        # DSH has no global interface: it is configured (contract §11); unset -> none.
        return self.get_session(self.global_session_id) if self.global_session_id else None

    def ensure_global_session(self) -> str:
        """(base.GlobalSessionMaker) The configured global interface session, made in DSH when it is
        missing, titled so that a person finds it in DSH Web, and given its first turn so that DSH
        Web never takes it for a new chat (GLOBAL_SESSION_INTRO_KEY). DSH has no global interface of
        its own (contract §11): this one session plays it for `self`. One found with no turn yet (an
        earlier dshloop made it) gets its first turn now."""
        if not self.global_session_id:
            return ""
        item = self._find(self.global_session_id)
        if item is not None and not item.get("blank"):
            return ""
        if item is None:
            self.wire.call("session.create", {"sessionId": self.global_session_id, **self._placement(self.cwd)})
            # A title the user sets (source `user`) is pinned: the first prompt's automatic one never replaces it.
            self.wire.call("session.rename", {"sessionId": self.global_session_id, "title": GLOBAL_SESSION_TITLE})
        self._first_turn(self.global_session_id)
        if item is None:
            return (
                f'Global interface session created in DSH: {self.global_session_id} ("{GLOBAL_SESSION_TITLE}", '
                'the target "self")'
            )
        return (
            f"Global interface session {self.global_session_id} had no turn yet, and DSH Web would open it "
            "as a new chat: it has had its first"
        )

    def _first_turn(self, session_id: str) -> None:
        """Send the global session its introduction (once) and wait until its turn has started, so
        that DSH no longer counts it blank; then, a while, until the turn has ended, so that the
        first `self` delivery starts a turn of its own."""
        where, _ = self._find_occurrence(session_id, {"occurrence_key": GLOBAL_SESSION_INTRO_KEY, "scheduled_at": 0})
        if where == "absent":
            prompt = {
                "sessionId": session_id,
                "mode": "queue",
                "content": [{"type": "text", "text": GLOBAL_SESSION_INTRO}],
            }
            self.wire.call("session.prompt", prompt, rpc_id=GLOBAL_SESSION_INTRO_KEY)
        deadline = time.monotonic() + INTRO_SECONDS
        while True:
            item = self._find(session_id) or {}
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
            time.sleep(CONFIRM_POLL)

    def _placement(self, directory: str) -> dict:
        """Where a session dshloop makes goes: the workspace of `directory` (found or made), since
        DSH Web lists a workspace's sessions and a session made with a bare cwd joins none; with no
        directory, DSH's own default. A directory that does not exist is a permanent DshError."""
        if not directory:
            return {}
        value = self.wire.call("workspace.create", {"path": directory})
        workspace = value.get("workspace") if isinstance(value, dict) else None
        workspace_id = workspace.get("workspaceId") if isinstance(workspace, dict) else None
        if not isinstance(workspace_id, str) or not workspace_id:
            raise DshError("DSH made a workspace but sent no workspaceId.", transient=True)
        return {"workspaceId": workspace_id}

    def get_preset(self, name: str) -> PresetInfo | None:
        value = self.wire.call("agentPreset.list", {})
        presets = value.get("presets") if isinstance(value, dict) else None
        for preset in presets if isinstance(presets, list) else []:
            if isinstance(preset, dict) and preset.get("id") == name:
                return PresetInfo(name, not preset.get("broken"))
        return None

    def resume_session(self, session_id: str) -> SessionInfo:
        item = self._find(session_id)
        if item is None:
            raise DshError(f"DSH has no session {session_id!r} to resume.", code="session-not-found", transient=False)
        # Its recorded cwd (a different one is session-conflict) and no preset: the stored one wins.
        self.wire.call("session.create", {"sessionId": session_id, "cwd": item.get("cwd") or self.cwd})
        session = self.get_session(session_id)
        if session is None:
            raise DshError(f"Session {session_id} disappeared while being resumed.", transient=False)
        return session

    def create_session(
        self, *, preset: str, model: str, first_prompt: str, source: dict, placement: Placement = NO_PLACEMENT
    ) -> str:
        directory = placement.workspace or self.cwd
        payload = {"sessionId": new_session_id(source["occurrence_key"]), **self._placement(directory)}
        if preset and preset != settings.DSHLOOP_DEFAULT_PRESET:
            payload["agentPreset"] = preset  # the profile default: DSH's own default preset
        value = self.wire.call("session.create", payload)
        session_id = value.get("sessionId") if isinstance(value, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise DshError("DSH created a session but sent no sessionId.", transient=True)
        if placement.permission_preset:
            # Before the first prompt: no turn may run under DSH's default preset. Applying it again
            # (a retried occurrence adopting its session) changes nothing.
            self._set_permission_preset(session_id, placement.permission_preset)
        if placement.title:
            # A plugin's delivery gives DSH no first prompt to title it by, so DSH Web would name it
            # after its workspace. A title set this way is pinned (source `user`): nothing replaces it.
            self.wire.call("session.rename", {"sessionId": session_id, "title": placement.title})
        if selection := selection_of(model):  # else the profile default: DSH's own default model
            # Before the first prompt too: the first request logs the model, and DSH keeps it from then on.
            select_model(self.wire, session_id, selection)
        return session_id

    def archive_session(self, session_id: str) -> None:
        """(base.SessionArchive) `workspace.archiveSession`: DSH Web lists it no more; its log, and its
        place in its workspace, stay. DSH rc.8 has no unarchive."""
        self.wire.call("workspace.archiveSession", {"sessionId": session_id})

    def session_model(self, session_id: str) -> str:
        """(base.SessionModels) The model DSH runs the session on (dsh_models)."""
        return read_session_model(self.wire, session_id, attached=self._attached(session_id))

    def _set_permission_preset(self, session_id: str, preset: str) -> None:
        """`/permission <preset>` for one session: DSH has no session.create field for it, and its
        host-wide default is the user's setting, not dshloop's (docs/dsh-unattended.md §2)."""
        value = self.wire.call(
            "commands/execute",
            {"args": {"agentId": session_id, "line": f"/permission {preset}", "images": []}},
        )
        result = json_object(json_object(value).get("result"))
        if result.get("kind") != "success":
            said = json_string(result.get("text")) or "no reason given"
            raise DshError(f"DSH refused the permission preset {preset!r} for {session_id}: {said}", transient=False)

    # -- workspaces (base.Workspaces) -------------------------------------------------------------------

    def session_workspace(self, session_id: str) -> str:
        try:
            return json_string(self._header(session_id).get("cwd"))
        except DshError as exc:
            if exc.code == "session-not-found":
                return ""
            raise

    def workspaces(self) -> list[str]:
        value = self.wire.call("workspace.list", {})
        items = json_array(json_object(value).get("items"))
        return sorted({path for item in items if (path := json_string(json_object(item).get("path")))})

    def directory_problem(self, path: str) -> str:
        # DSH's own look at the directory (host.listDirectory opens it, read-only, and lists at most
        # 1,000 subdirectories): what DSH's process sees is what a session there gets, whatever
        # dshloop's view of the filesystem (another OS user, a container on the same loopback).
        try:
            self.wire.call("host.listDirectory", {"path": path})
        except DshError as exc:
            if exc.code == "directory-unreadable":  # ENOENT, ENOTDIR, EACCES, … in DSH's words
                return exc.said
            raise
        return ""

    def cancel_turn(self, session_id: str) -> None:
        try:
            self.wire.call("session.cancel", {"sessionId": session_id})
        except DshError as exc:
            if exc.code != "session-not-found":  # not attached: no turn of it is running
                raise

    # -- delivery ----------------------------------------------------------------------------------

    def _events_since(self, session_id: str, since_ms: int) -> list[dict]:
        """The session's log events from about `since_ms` on, oldest first: history pages are read
        from the tail back until they reach that time (a cold session is read without resuming it)."""
        events: list[dict] = []
        before = None
        while True:
            payload = {"sessionId": session_id, "maxMessages": HISTORY_PAGE}
            if before is not None:
                payload["beforeSeq"] = before
            value = self.wire.call("session.history", payload)
            page = value.get("events") if isinstance(value, dict) else None
            if not isinstance(page, list):
                raise DshError("DSH sent no events for session.history.", transient=True)
            page = [
                entry["event"] for entry in page if isinstance(entry, dict) and isinstance(entry.get("event"), dict)
            ]
            page = [event for event in page if isinstance(event.get("seq"), int)]
            events = page + events
            times = [event["time"] for event in page if isinstance(event.get("time"), int)]
            if not value.get("hasMore") or not page or (times and min(times) < since_ms):
                return sorted(events, key=lambda event: event["seq"])
            before = min(event["seq"] for event in page)

    def _find_occurrence(self, session_id: str, source: dict) -> tuple[str, str | None]:
        """Where the occurrence's message is in DSH: ("delivered", its message ID) once a
        `user/message` carries its rpcId; ("pending", None) while DSH still holds it in the session's
        inbox (accepted, waiting for a turn or a step); ("absent", None) if it was never sent, or DSH
        dropped it (a prompt still queued when DSH stops is cancelled)."""
        key = source["occurrence_key"]
        # A message for this occurrence cannot predate its scheduled time; a margin covers clock skew.
        events = self._events_since(session_id, int(source.get("scheduled_at") or 0) - CLOCK_MARGIN_MS)
        queued_on = None  # (inbox target, seq) of the splice that queued it
        for event in events:
            data = json_object(event.get("data"))
            if event.get("type") == "user/message":
                if carries(data.get("source"), key):
                    return "delivered", str(data.get("id") or event["seq"])
            elif event.get("type") == "agent/inbox/spliced":
                inserted = json_array(data.get("inserted"))
                if any(carries(json_object(item).get("source"), key) for item in inserted):
                    queued_on = data.get("target")
                elif queued_on is not None and data.get("target") == queued_on and data.get("outcome") == "canceled":
                    queued_on = None  # DSH stopped with it still queued: lost (DSH-HOST.md §6.5)
        return ("pending", None) if queued_on is not None else ("absent", None)

    def deliver(self, session_id: str, *, text: str, source: dict, occurrence_key: str) -> Delivered:
        return self._deliver(Message(session_id, text, source, occurrence_key))

    def _deliver(self, message: Message) -> Delivered:
        """spec §6 adaptive delivery, at most once per occurrence (see the module docstring)."""
        session_id, source = message.session_id, message.source
        # Its log is read first: a session DSH does not have is `session-not-found` there.
        where, message_id = self._find_occurrence(session_id, source)
        delivery = "next_turn"
        if where == "absent":
            if self._plugin_delivers():
                # The plugin sees the live agent, running or not, and says how it delivered.
                try:
                    delivery = self._deliver_through_plugin(message)
                except DshError as exc:
                    if exc.code != "session-not-loaded":
                        raise
                    # Cold: nothing was sent. Loaded with DSH's own session.create (its stored preset and
                    # model), then rung again; the plugin looks for the key once more before it sends.
                    self.resume_session(session_id)
                    delivery = self._deliver_through_plugin(message)
            else:
                session = self.get_session(session_id)
                if session is None:
                    raise DshError(f"DSH has no session {session_id!r}.", code="session-not-found", transient=False)
                if session.status == SessionStatus.COLD:  # the batch's look-up did not ask: loaded as above
                    session = self.resume_session(session_id)
                delivery = "next_step" if session.status == SessionStatus.RUNNING else "next_turn"
                self.wire.call(
                    "session.prompt",
                    {
                        "sessionId": session_id,
                        "mode": "steer" if delivery == "next_step" else "queue",
                        "content": [{"type": "text", "text": message.text}],
                    },
                    rpc_id=message.occurrence_key,
                )
        if message_id is None:
            message_id = self._confirmed(session_id, source)
        return Delivered(message_id, delivery)

    def _plugin_delivers(self) -> bool:
        """Whether dshloop's plugin is mounted in this DSH and can deliver (its channel answers
        `hello`): asked once, then again every PLUGIN_RECHECK_SECONDS, since DSH may be restarted
        with or without it. DSH unreachable: a transient DshError, as any call."""
        now = time.monotonic()
        if self._plugin_checked_at is None or now - self._plugin_checked_at > PLUGIN_RECHECK_SECONDS:
            try:
                value = self.wire.call("hello", {}, path=PLUGIN_CHANNEL + "/hello")
                self._plugin = json_object(value).get("deliver") is True
            except DshError as exc:
                if exc.transient:
                    raise
                self._plugin = False  # no such channel (405), or a plugin without the endpoint
            self._plugin_checked_at = now
        return self._plugin

    def _deliver_through_plugin(self, message: Message) -> str:
        """`POST /dshloop/deliver`: the plugin sends the message with its own source (contract §15)
        to the session's live agent; the adapter loaded a cold session first. Returns how it was
        delivered (next_turn, or next_step into a running turn)."""
        source = message.source
        request = {
            "sessionId": message.session_id,
            "text": message.text,
            "key": message.occurrence_key,
            "summary": message.summary,
            "loop": {"loop_id": source.get("loop_id", ""), "run_id": source.get("run_id", "")},
            # A fresh run's tools are bounded by the plugin (contract §14, dsh-plugin/src/boundary.ts):
            # its built-in set, plus what the operator allows here.
            "unattended": message.fresh,
            "extraTools": fresh_run_extra_tools() if message.fresh else [],
            "notice": message.notice,
        }
        # Any local process can call DSH's channel, so it carries only the key: the plugin reads the
        # message from dshloop with its token (GET /api/dsh/deliveries/{key}), while this call lasts.
        with plugin_delivery_offered(key=message.occurrence_key, session_id=message.session_id, request=request):
            value = self.wire.call("deliver", {"key": message.occurrence_key}, path=PLUGIN_CHANNEL + "/deliver")
        delivery = json_object(value).get("delivery")
        return delivery if delivery in ("next_turn", "next_step") else "next_turn"

    def _confirmed(self, session_id: str, source: dict) -> str:
        deadline = time.monotonic() + CONFIRM_SECONDS
        while True:
            where, message_id = self._find_occurrence(session_id, source)
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

    def deliver_many(self, messages: list[Message]) -> list[Delivered | HostError]:
        """Deliveries into distinct sessions go to DSH side by side, CONCURRENCY at a time, each
        with its own exactly-once check; one session's messages go one after another, in order. A
        batch takes as long as its slowest delivery (about a turn's start), not their sum."""
        by_session: dict[str, list[int]] = {}
        for index, message in enumerate(messages):
            by_session.setdefault(message.session_id, []).append(index)
        groups = list(by_session.values())

        def deliver_group(indexes: list[int]) -> list[Delivered | HostError]:
            return deliver_each(self, [messages[index] for index in indexes], one=self._deliver)

        results: list[Delivered | HostError | None] = [None] * len(messages)
        for indexes, delivered in zip(groups, side_by_side(groups, deliver_group, workers=CONCURRENCY), strict=True):
            for index, result in zip(indexes, delivered, strict=True):
                results[index] = result
        return [result for result in results if result is not None]

    # -- turn outcomes (base.TurnOutcomes) ------------------------------------------------------------

    def turn_outcomes(self, runs: list[RunRef]) -> dict[str, TurnEnd]:
        """How each run's turn ended, from its session's log: one history read per session, back to
        its oldest run's delivery. Runs whose turn has not ended, whose message is not in the log,
        or whose session DSH no longer has are left out. DSH unreachable -> DshError (transient)."""
        by_session: dict[str, list[RunRef]] = {}
        for run in runs:
            by_session.setdefault(run.session_id, []).append(run)
        outcomes: dict[str, TurnEnd] = {}
        for session_id, session_runs in by_session.items():
            since = min(run.delivered_at_ms for run in session_runs) - CLOCK_MARGIN_MS
            try:
                events = self._events_since(session_id, since)
            except DshError as exc:
                if exc.transient:
                    raise
                if exc.code != "session-not-found":  # one session's permanent error spares the others
                    logger.warning("turn outcomes of session %s not read: %s", session_id, exc)
                continue
            for run in session_runs:
                ended = turn_end_of(events, run.occurrence_key)
                if ended is None and run.fresh:
                    ended = stall_of(events, run.occurrence_key)
                if ended is not None:
                    outcomes[run.run_id] = ended
        return outcomes
