"""The embedded host: the database is the host (contract §5)."""

from __future__ import annotations

from sessions_app import selectors, services
from sessions_app.models import SessionStatus

from .base import Delivered, HostError, PresetInfo, SessionInfo


class LocalHost:
    def list_sessions(self, *, limit: int) -> list[SessionInfo]:
        return selectors.session_list(limit=limit)

    def get_session(self, session_id: str) -> SessionInfo | None:
        return selectors.session_get(session_id)

    def global_session(self) -> SessionInfo | None:
        return selectors.global_session_get()

    def get_preset(self, name: str) -> PresetInfo | None:
        return selectors.preset_get(name)

    def resume_session(self, session_id: str) -> SessionInfo:
        if selectors.session_get(session_id) is None:
            raise HostError(f"Session {session_id} does not exist.", transient=False)
        return selectors.session_info(services.session_resume(session_id=session_id))

    def create_session(self, *, preset: str, model: str, first_prompt: str, source: dict) -> str:
        header = services.session_create_for(
            occurrence_key=source["occurrence_key"], preset=preset, model=model, first_prompt=first_prompt
        )
        return header.session_id

    def deliver(self, session_id: str, *, text: str, source: dict, occurrence_key: str) -> Delivered:
        session = selectors.session_get(session_id)
        if session is None:
            raise HostError(f"Session {session_id} does not exist.", transient=False)
        # spec §6: a running target gets the message at its next safe step, others next turn.
        delivery = "next_step" if session.status == SessionStatus.RUNNING else "next_turn"
        message, created = services.inbox_deliver(
            session_id=session_id, text=text, source=source, occurrence_key=occurrence_key, delivery=delivery
        )
        return Delivered(message.message_id, message.delivery, duplicate=not created)
