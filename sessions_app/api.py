"""The embedded host's registry endpoints (contract §5). The session tools are in tools/."""

from __future__ import annotations

from django.db.models import QuerySet
from ninja import Router

from dshloop.auth import host_auth
from dshloop.errors import NotFound
from dshloop.schemas import answers
from dshloop.timeutil import to_ms
from dshloop.validation import check_identifier

from . import services
from .hosts import get_host
from .models import InboxMessage
from .presenters import session_view
from .records import SessionInfo
from .schemas import (
    HostPresetIn,
    HostPresetOut,
    HostSessionIn,
    HostSessionOut,
    InboxOut,
    SessionId,
)
from .selectors import session_info

host_router = Router(auth=host_auth, tags=["host"])


def host_session_out(session: SessionInfo) -> dict:
    return {
        **session_view(session),
        "preset": session.preset or None,
        "model": session.model or None,
        "global_interface": session.global_interface,
    }


@host_router.put("/sessions/{session_id}", response=answers(HostSessionOut), exclude_none=True)
def host_session_put(request, session_id: str, payload: HostSessionIn):
    header = services.session_upsert(
        session_id=check_identifier(session_id, field="session_id", kind=SessionId),
        changes=payload.model_dump(exclude_unset=True, exclude_none=True),
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
    preset = services.preset_upsert(name=check_identifier(name, field="name"), mountable=payload.mountable)
    return {"name": preset.name, "mountable": preset.mountable}


def inbox_messages(session_id: str) -> QuerySet[InboxMessage]:
    return InboxMessage.objects.filter(session_id=session_id).order_by("created_at", "message_id")


@host_router.get("/sessions/{session_id}/inbox", response=answers(InboxOut, 404))
def host_inbox(request, session_id: str):
    if get_host().get_session(session_id) is None:
        raise NotFound(f"No session {session_id!r}.")
    return {
        "messages": [
            {
                "message_id": m.message_id,
                "text": m.text,
                "wakeup": m.wakeup,
                "delivery": m.delivery,
                "source": m.source,
                "created_at": to_ms(m.created_at),
            }
            for m in inbox_messages(session_id)
        ]
    }
