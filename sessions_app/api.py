"""The embedded host's registry endpoints (contract §5). The session tools are in tools/."""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone
from ninja import Query, Router

from core.errors import InvalidInput, NotFound
from core.schemas import answers
from core.timeutil import to_ms
from core.validation import check_identifier
from tokens.auth import host_auth, manage_auth

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
    InboxQuery,
    PluginDeliveryOut,
    SessionId,
)
from .selectors import plugin_delivery_get, session_info

host_router = Router(auth=host_auth, tags=["host"])
# DSH's dshloop plugin, with its token (scopes tools and manage): what it is to deliver.
plugin_router = Router(auth=manage_auth, tags=["dsh plugin"])


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


def inbox_messages(session_id: str, *, after: str | None = None, limit: int | None = None) -> QuerySet[InboxMessage]:
    """A session's messages in the order they committed (`seq`), those after `after` only.

    Not by created_at: it is taken before the delivering transaction commits, so a message can
    commit after one with a later created_at, behind a cursor that has moved past it already.
    A message's seq is given under a lock its session's next writer waits for
    (services.inbox_deliver_many), so none can commit behind a seq a reader has seen. The unique index
    inbox_session_seq (session_id, seq) serves both the anchor's lookup and the page."""
    messages = InboxMessage.objects.filter(session_id=session_id).order_by("seq")
    if after is not None:
        anchor = messages.filter(message_id=after).values_list("seq", flat=True).first()
        if anchor is None:
            raise InvalidInput(
                f"'after' is not a message of session {session_id!r}: it may have expired (messages are kept "
                f"{settings.DSHLOOP_INBOX_RETENTION_DAYS} days), so list the inbox from the start, without 'after'.",
                field="after",
            )
        messages = messages.filter(seq__gt=anchor)
    return messages[:limit] if limit is not None else messages


@host_router.get("/sessions/{session_id}/inbox", response=answers(InboxOut, 404), exclude_none=True)
def host_inbox(request, session_id: str, query: Query[InboxQuery]):
    """The session's inbox, oldest first (in the order the messages were committed). To page it,
    pass `limit` and then, as `after`, the last message_id you received: the next call returns only
    the messages after it, never skipping one that commits later. Messages expire after
    DSHLOOP_INBOX_RETENTION_DAYS; an `after` that is gone (or belongs to another session) is 422
    `invalid_input` with field `after`: list again from the start, without it."""
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
            for m in inbox_messages(session_id, after=query.after, limit=query.limit)
        ]
    }


@plugin_router.get("/deliveries/{key}", response=answers(PluginDeliveryOut, 404))
def plugin_delivery(request, key: str):
    """The message dshloop is delivering through DSH's plugin under `key` (models.PluginDelivery),
    while that delivery's call is in flight: the plugin delivers this, never what DSH's channel was
    sent. 404 when dshloop is not delivering it."""
    offered = plugin_delivery_get(key, now=timezone.now())
    if offered is None:
        raise NotFound(f"dshloop is not delivering {key!r} through the DSH plugin now.")
    return offered
