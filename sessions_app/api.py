"""Session tools (spec §7) and the embedded host's registry endpoints (contract §5)."""

from __future__ import annotations

from django.db.models import QuerySet
from ninja import Router
from pydantic import TypeAdapter, ValidationError

from dshloop.auth import host_auth, tools_auth
from dshloop.errors import NotFound
from dshloop.schemas import answers
from dshloop.timeutil import iso, to_ms
from dshloop.validation import invalid_input_from

from . import services
from .hosts import get_host
from .hosts.base import SessionInfo
from .models import InboxMessage
from .schemas import (
    CheckSessionStatusIn,
    HostPresetIn,
    HostPresetOut,
    HostSessionIn,
    HostSessionOut,
    InboxOut,
    ListSessionsIn,
    SessionId,
    SessionsOut,
    SessionStatusView,
)
from .selectors import session_info

session_tools_router = Router(auth=tools_auth, tags=["tools"])
host_router = Router(auth=host_auth, tags=["host"])

_session_id_adapter = TypeAdapter(SessionId)


def parse_session_id(value: str) -> str:
    try:
        return _session_id_adapter.validate_python(value)
    except ValidationError as exc:
        raise invalid_input_from([{**e, "loc": ("session_id",)} for e in exc.errors()]) from exc


def session_view(session: SessionInfo) -> dict:
    return {"session_id": session.session_id, "title": session.title, "status": session.status,
            "updated_at": iso(session.updated_at)}


@session_tools_router.post("/list_sessions", response=answers(SessionsOut, 409), exclude_none=True,
                           summary="list_sessions")
def list_sessions(request, payload: ListSessionsIn):
    """Sessions, newest activity first, live and cold, with durable titles (never generated on demand)."""
    return {"sessions": [session_view(s) for s in get_host().list_sessions(limit=payload.limit)]}


@session_tools_router.post(
    "/check_session_status", response=answers(SessionStatusView, 409), exclude_none=True,
    summary="check_session_status"
)
def check_session_status(request, payload: CheckSessionStatusIn):
    """running, idle, cold or missing for one exact session; never resumes it."""
    session = get_host().get_session(payload.session_id)
    if session is None:
        return {"session_id": payload.session_id, "status": "missing"}
    return session_view(session)


def host_session_out(session: SessionInfo) -> dict:
    return {**session_view(session), "preset": session.preset or None, "model": session.model or None,
            "global_interface": session.global_interface}


@host_router.put("/sessions/{session_id}", response=answers(HostSessionOut), exclude_none=True)
def host_session_put(request, session_id: str, payload: HostSessionIn):
    header = services.session_upsert(
        session_id=parse_session_id(session_id), changes=payload.model_dump(exclude_unset=True, exclude_none=True)
    )
    return host_session_out(session_info(header))


@host_router.get("/sessions/{session_id}", response=answers(HostSessionOut, 404), exclude_none=True)
def host_session_get(request, session_id: str):
    session = get_host().get_session(session_id)
    if session is None:
        raise NotFound(f"No session {session_id!r}; create it with PUT /api/host/sessions/{{session_id}}.")
    return host_session_out(session)


@host_router.put("/presets/{name}", response=answers(HostPresetOut))
def host_preset_put(request, name: str, payload: HostPresetIn):
    from dshloop.schemas import Identifier

    try:
        name = TypeAdapter(Identifier).validate_python(name)
    except ValidationError as exc:
        raise invalid_input_from([{**e, "loc": ("name",)} for e in exc.errors()]) from exc
    preset = services.preset_upsert(name=name, mountable=payload.mountable)
    return {"name": preset.name, "mountable": preset.mountable}


def inbox_messages(session_id: str) -> QuerySet[InboxMessage]:
    return InboxMessage.objects.filter(session_id=session_id).order_by("created_at", "message_id")


@host_router.get("/sessions/{session_id}/inbox", response=answers(InboxOut, 404))
def host_inbox(request, session_id: str):
    if get_host().get_session(session_id) is None:
        raise NotFound(f"No session {session_id!r}.")
    return {"messages": [
        {"message_id": m.message_id, "text": m.text, "wakeup": m.wakeup, "delivery": m.delivery,
         "source": m.source, "created_at": to_ms(m.created_at)}
        for m in inbox_messages(session_id)
    ]}
