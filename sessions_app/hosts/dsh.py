"""A real DeepSeek Harness host over its HTTP API (contract §11; ../shared/DSH-HOST.md), and over
dshloop's plugin inside it where it is mounted (dsh_plugin). Beside this module: the wire (dsh_wire),
one session's look-up by its ID (dsh_lookup), a session's log read back (dsh_history), delivering
(dsh_delivery), the global interface session (dsh_global), models (dsh_models), turn outcomes (dsh_turns).

What maps to what:
- the sessions (list_sessions) <- `session.list` (all sessions, attached and persisted, newest
  first), which grows with the profile: only the list a person or an agent asks for reads it.
- one session (a delivery's target, a tool call's caller, a status) <- asked by its ID, never by
  listing the profile. With the plugin: its `sessions` endpoint answers, one call for a whole batch,
  from DSH's memory for a loaded session and from its own stored log for a cold one (status,
  projections, cwd, preset; or not found), where DSH's `session.history` and `session.export` of a
  cold session read every persisted header first (rc.8). Without it:
  that tail, `subagent.list {parentSessionId}` for a live agent (rc.8 reads every persisted header for
  it) and once per session and process `session.export`'s header (cwd, preset). The title is
  `projections.values.title`, DSH's own fold: a title the user set (`session.rename`) is pinned.
  Status: running when attached with a turn open; otherwise idle when attached, else cold
  (DSH-HOST.md §7). A delivery batch's targets are told idle when not loaded: the delivery wakes them.
- resume a cold session <- `session.create {sessionId, cwd}` with its recorded cwd: DSH keeps its
  stored preset and model (no override, spec §5).
- `new` <- `session.create {sessionId, workspaceId, agentPreset}` in the workspace of the loop's
  directory (else DSHLOOP_DSH_CWD's), the session ID derived from the occurrence key, so that a
  retried occurrence adopts the session it made (DSH merges a create of an existing ID into that
  session); then `/permission <preset>` through `commands/execute`, before any prompt (contract §14,
  docs/dsh-unattended.md §2); then its title (Placement.title) with `session.rename`; then the
  source session's model with `session.selectModel`, DSH's default model kept as it was (dsh_models).
- archiving a finished `new` run's session (SessionArchive) <- `workspace.archiveSession`.
- a session's model (SessionModels) <- a live session's `session.models`, a cold one's newest
  `request/header` in `session.history` (dsh_models).
- a session's workspace <- its header's `cwd`; the workspaces <- `workspace.list`; whether a
  directory can be one <- `host.listDirectory {path}`; cancelling a turn <- `session.cancel`.
- deliver <- dsh_delivery: through the plugin's `deliver`, which answers once DSH has logged the
  message; without it, `session.prompt` and the session's log read back.
- presets <- `agentPreset.list` (mountable unless `broken`).
- turn outcomes <- `session.history`: the first `turn/end` after the occurrence's `user/message`,
  its `reason.kind` mapped by `turn_end_of` (kinds: DSH's TurnEndReasonMap).
"""

from __future__ import annotations

import hashlib

from django.conf import settings

from core.timeutil import from_ms
from core.validation import is_identifier
from sessions_app.models import SessionHeader, SessionStatus
from sessions_app.services import session_headers_cache

from ..records import PresetInfo, SessionInfo
from .base import NO_PLACEMENT, Capabilities, Delivered, HostError, Message, Placement, RunRef, TurnEnd
from .dsh_delivery import deliver, deliver_many
from .dsh_global import GLOBAL_SESSION_INTRO, GLOBAL_SESSION_INTRO_KEY, GLOBAL_SESSION_TITLE, ensure_global_session
from .dsh_history import turn_outcomes
from .dsh_lookup import header_of, loaded_item, log_item, side_by_side
from .dsh_models import read_session_model, select_model, selection_of
from .dsh_plugin import PluginChannel
from .dsh_wire import DshClient, DshError, json_array, json_object, json_string

__all__ = ["GLOBAL_SESSION_INTRO", "GLOBAL_SESSION_INTRO_KEY", "GLOBAL_SESSION_TITLE", "DshHost", "new_session_id"]


# Look-ups of one batch made at once without the plugin: DSH answers on one thread, and a crowd of
# log reads would queue past the timeout. (With it, one call answers the whole batch.)
LOOKUP_CONCURRENCY = 4
LOADED_CHUNK = 200  # sessions per `sessions` call of the plugin (its own limit)


def new_session_id(occurrence_key: str) -> str:
    """The DSH session for one occurrence of a `new` loop: the same occurrence, the same session."""
    return "loop-" + hashlib.sha256(occurrence_key.encode()).hexdigest()[:24]


class DshHost:
    label = "DSH"
    capabilities = Capabilities(
        # A batch's messages go to DSH side by side (dsh_delivery.deliver_many, CONCURRENCY at a time):
        # with the queue's two workers, 200 due together are all in DSH at once (B5).
        delivery_batch=100,
        transactional=False,
        turn_outcomes=True,
        workspaces=True,
        makes_global_session=True,
        session_models=True,
        archives_sessions=True,
    )

    def __init__(self, base_url: str, *, cwd: str = "", global_session_id: str = "", timeout: float = 10.0):
        self.wire = DshClient(base_url, timeout=timeout)
        self.plugin = PluginChannel(self.wire)
        self.cwd = cwd
        self.global_session_id = global_session_id
        self._headers: dict[str, dict] = {}  # session ID -> its header (_header), this process's
        self._live: set[str] = set()  # sessions seen with a live agent (_attached, without the plugin)
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
        """Whether the session has a live agent in DSH: the plugin's answer when it gives one. Else
        rc.8's only per-session answer, subagent.list, which reads every persisted session's header;
        but a session once attached stays so until DSH stops (DSH-HOST.md §7: nothing detaches one),
        so a session seen attached is asked again only with host.describe, whose live-agent count
        drops when DSH has restarted (then all are asked anew)."""
        if self.plugin.abilities().sessions:
            return bool(self._loaded([session_id]).get(session_id, {}).get("attached"))
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
        # A session looked up by its ID (find) says whether it is attached; a listed one is asked.
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
        if items and self.plugin.abilities().sessions:  # which of them have a live agent: one call
            answered = self._loaded([item["sessionId"] for item in items])
            items = [
                {**item, "attached": answered.get(item["sessionId"], {}).get("attached") is True} for item in items
            ]
        sessions = [self._info(item) for item in items]
        self._cache(sessions)
        return sessions

    def _loaded(self, session_ids: list[str]) -> dict[str, dict]:
        """The plugin's `sessions` answer for these sessions, a call per LOADED_CHUNK. The header (cwd,
        preset) of each it found and is no longer blank is kept, as `session.export`'s (_header)."""
        answers: dict[str, dict] = {}
        for start in range(0, len(session_ids), LOADED_CHUNK):
            answers.update(self.plugin.loaded(session_ids[start : start + LOADED_CHUNK]))
        for session_id, found in answers.items():
            item = loaded_item(found)
            if item is not None and not item["blank"] and isinstance(item["cwd"], str):
                self._headers[session_id] = {"cwd": item["cwd"], "agentPreset": item["agentPreset"], "blank": False}
        return answers

    def find(self, session_id: str, *, idle_if_not_loaded: bool = False) -> dict | None:
        """One session as `session.list` shows it, asked of DSH for that session alone. None when DSH
        has no such session. `idle_if_not_loaded`: a session DSH has not loaded is told idle rather
        than cold (a delivery loads it itself)."""
        if not is_identifier(session_id):
            return None  # no dshloop session has such an ID (as _items leaves them out)
        if self.plugin.abilities().sessions:
            found = self._loaded([session_id]).get(session_id, {})
            if found.get("found") is False:
                return None
            if item := loaded_item(found, idle_if_stored=idle_if_not_loaded):
                return item
            return self._from_log(session_id, attached=idle_if_not_loaded)
        return self._from_log(session_id, attached=True if idle_if_not_loaded else None)

    def _from_log(self, session_id: str, *, attached: bool | None) -> dict | None:
        """`attached` given: whether it has a live agent is not asked (subagent.list reads every
        persisted session's header in rc.8)."""
        live = (lambda: self._attached(session_id)) if attached is None else attached
        return log_item(self.wire, session_id, attached=live, header=lambda: self._header(session_id))

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
        item = self.find(session_id)
        return None if item is None else self._info(item)

    def get_sessions(self, session_ids: set[str]) -> dict[str, SessionInfo]:
        """A delivery batch's targets (scheduler.targets.BatchView): with the plugin, one call for all of
        them, loaded or stored (any it cannot tell about are read from their log). One not loaded is
        told `idle`, so a cold one is woken by its delivery (dsh_delivery), side by side with the
        batch's others. What a person or an agent asks (get_session) is told cold as it is."""
        ids = sorted(session_id for session_id in session_ids if is_identifier(session_id))
        answered: dict[str, dict] = {}
        if ids and self.plugin.abilities().sessions:
            answered = self._loaded(ids)

        def lookup(session_id: str) -> SessionInfo | None:
            found = answered.get(session_id, {})
            if found.get("found") is False:
                return None
            item = loaded_item(found, idle_if_stored=True) or self._from_log(session_id, attached=True)
            return None if item is None else self._info(item)

        found = side_by_side(ids, lookup, workers=LOOKUP_CONCURRENCY)
        sessions = {session.session_id: session for session in found if session is not None}
        self._cache(list(sessions.values()))  # the panel shows a delivery's target by its title
        return sessions

    def global_session(self) -> SessionInfo | None:
        # DSH has no global interface: it is configured (contract §11); unset -> none.
        return self.get_session(self.global_session_id) if self.global_session_id else None

    def ensure_global_session(self) -> str:
        """(base.GlobalSessionMaker) dsh_global."""
        return ensure_global_session(self)

    def placement(self, directory: str) -> dict:
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

    def load_session(self, session_id: str) -> None:
        """Load a cold session with DSH's own `session.create` and its recorded cwd (a different one is
        session-conflict) and no preset: the stored one and its model stay. `session-not-found` when
        DSH has no such session."""
        try:
            cwd = self._header(session_id).get("cwd")
        except DshError as exc:
            if exc.code == "session-not-found":
                raise DshError(
                    f"DSH has no session {session_id!r}.", code="session-not-found", transient=False
                ) from exc
            raise
        self.wire.call("session.create", {"sessionId": session_id, "cwd": cwd or self.cwd})

    def resume_session(self, session_id: str) -> SessionInfo:
        self.load_session(session_id)
        session = self.get_session(session_id)
        if session is None:
            raise DshError(f"Session {session_id} disappeared while being resumed.", transient=False)
        return session

    def create_session(
        self, *, preset: str, model: str, first_prompt: str, source: dict, placement: Placement = NO_PLACEMENT
    ) -> str:
        directory = placement.workspace or self.cwd
        payload = {"sessionId": new_session_id(source["occurrence_key"]), **self.placement(directory)}
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

    # -- delivery (dsh_delivery) -------------------------------------------------------------------

    def deliver(self, session_id: str, *, text: str, source: dict, occurrence_key: str) -> Delivered:
        return deliver(self, Message(session_id, text, source, occurrence_key))

    def deliver_many(self, messages: list[Message]) -> list[Delivered | HostError]:
        return deliver_many(self, messages)

    # -- turn outcomes (base.TurnOutcomes) ------------------------------------------------------------

    def turn_outcomes(self, runs: list[RunRef]) -> dict[str, TurnEnd]:
        return turn_outcomes(self.wire, runs)
