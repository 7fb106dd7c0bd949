"""The embedded host: the database is the host (contract §5)."""

from __future__ import annotations

from django.conf import settings

from sessions_app import selectors, services
from sessions_app.models import SessionStatus

from ..records import PresetInfo, SessionInfo
from .base import NO_PLACEMENT, Capabilities, Delivered, HostError, Message, Placement

# The global interface a fresh install gets, unless DSHLOOP_GLOBAL_SESSION_ID names another.
GLOBAL_SESSION_ID = "ses_global"
GLOBAL_SESSION_TITLE = "Global interface"


class LocalHost:
    label = "The embedded host"
    capabilities = Capabilities(delivery_batch=250, transactional=True, makes_global_session=True)

    def list_sessions(self, *, limit: int) -> list[SessionInfo]:
        return selectors.session_list(limit=limit)

    def get_session(self, session_id: str) -> SessionInfo | None:
        return selectors.session_get(session_id)

    def global_session(self) -> SessionInfo | None:
        return selectors.global_session_get()

    def get_preset(self, name: str) -> PresetInfo | None:
        return selectors.preset_get(name)

    def ensure_global_session(self) -> str:
        # dshloop is this host, so it makes the session itself; a session of that ID that exists
        # already is only flagged, and keeps its own title.
        if selectors.global_session_get() is not None:
            return ""
        session_id = settings.DSHLOOP_GLOBAL_SESSION_ID or GLOBAL_SESSION_ID
        changes: dict[str, object] = {"global_interface": True}
        if selectors.session_get(session_id) is None:
            changes["user_title"] = GLOBAL_SESSION_TITLE
        services.session_upsert(session_id=session_id, changes=changes)
        return f'Global interface session created: {session_id} (the target "self")'

    def resume_session(self, session_id: str) -> SessionInfo:
        if selectors.session_get(session_id) is None:
            raise HostError(f"Session {session_id} does not exist.", transient=False)
        return selectors.session_info(services.session_resume(session_id=session_id))

    def create_session(
        self, *, preset: str, model: str, first_prompt: str, source: dict, placement: Placement = NO_PLACEMENT
    ) -> str:
        # No workspaces or permission presets here (Capabilities.workspaces): the placement is not used.
        # The session is the host's record (DSH keeps its own), as is the delivered text in its
        # inbox, which holds the prompt: the session keeps only the title its first prompt gives
        # (services.session_create_for), so a `new` occurrence stores the prompt once here, not
        # twice. Marked with the occurrence it was made for, the session goes with that run when
        # retention prunes it (scheduler.retention), so both are bounded by the run history.
        header = services.session_create_for(
            occurrence_key=source["occurrence_key"], preset=preset, model=model, first_prompt=first_prompt
        )
        return header.session_id

    def deliver(self, session_id: str, *, text: str, source: dict, occurrence_key: str) -> Delivered:
        [result] = self.deliver_many([Message(session_id, text, source, occurrence_key)])
        if isinstance(result, HostError):
            raise result
        return result

    def get_sessions(self, session_ids: set[str]) -> dict[str, SessionInfo]:
        return selectors.sessions_get(session_ids)

    def deliver_many(self, messages: list[Message]) -> list[Delivered | HostError]:
        """One query for the targets' states and one INSERT for all the messages."""
        statuses = selectors.session_statuses({message.session_id for message in messages})
        # spec §6: a running target gets the message at its next safe step, others next turn.
        modes = {
            m.occurrence_key: "next_step" if statuses[m.session_id] == SessionStatus.RUNNING else "next_turn"
            for m in messages
            if m.session_id in statuses
        }
        known = [m for m in messages if m.occurrence_key in modes]
        message_ids = services.inbox_deliver_many(
            [(m.session_id, m.text, m.source, m.occurrence_key, modes[m.occurrence_key]) for m in known]
        )
        delivered = dict(zip((m.occurrence_key for m in known), message_ids, strict=True))
        return [
            Delivered(delivered[m.occurrence_key], modes[m.occurrence_key])
            if m.occurrence_key in delivered
            else HostError(f"Session {m.session_id} does not exist.", transient=False)
            for m in messages
        ]
