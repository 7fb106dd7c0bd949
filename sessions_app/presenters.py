"""Session headers as the contract's JSON shapes (spec §7: updated_at ISO 8601; unset fields omitted)."""

from __future__ import annotations

from core.timeutil import iso

from .records import SessionInfo


def session_view(session: SessionInfo) -> dict:
    view = {
        "session_id": session.session_id,
        "title": session.title,
        "status": session.status,
        "updated_at": iso(session.updated_at),
    }
    return {key: value for key, value in view.items() if value is not None}
