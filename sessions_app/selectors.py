"""Reads of cached session headers and presets."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from .models import PluginDelivery, Preset, SessionHeader
from .records import PresetInfo, SessionInfo
from .titles import fold_title

# What a SessionInfo is made of, in _info's order.
_INFO_COLUMNS: tuple[str, ...] = ("session_id", "status", "updated_at", "user_title", "generated_title", "first_prompt")
_INFO_COLUMNS += ("preset", "model", "global_interface")


def _info(
    session_id, status, updated_at, user_title, generated_title, first_prompt, preset, model, global_interface
) -> SessionInfo:
    return SessionInfo(
        session_id=session_id,
        status=status,
        updated_at=updated_at,
        title=fold_title(user_title=user_title, generated_title=generated_title, first_prompt=first_prompt),
        preset=preset,
        model=model,
        global_interface=global_interface,
    )


def session_info(header: SessionHeader) -> SessionInfo:
    return _info(*(getattr(header, name) for name in _INFO_COLUMNS))


def session_get(session_id: str) -> SessionInfo | None:
    header = SessionHeader.objects.filter(session_id=session_id).first()
    return session_info(header) if header else None


def sessions_get(session_ids: set[str]) -> dict[str, SessionInfo]:
    """A delivery batch's sessions (scheduler.targets.BatchView): read as rows, not model instances,
    because the scheduler's hot path reads one per occurrence."""
    rows = SessionHeader.objects.filter(session_id__in=session_ids).values_list(*_INFO_COLUMNS)
    return {row[0]: _info(*row) for row in rows}


def session_statuses(session_ids: set[str]) -> dict[str, str]:
    return dict(SessionHeader.objects.filter(session_id__in=session_ids).values_list("session_id", "status"))


def session_list(*, limit: int) -> list[SessionInfo]:
    return [session_info(h) for h in SessionHeader.objects.order_by("-updated_at", "session_id")[:limit]]


def global_session_get() -> SessionInfo | None:
    """DSHLOOP_GLOBAL_SESSION_ID when set, else the session flagged global_interface."""
    if settings.DSHLOOP_GLOBAL_SESSION_ID:
        return session_get(settings.DSHLOOP_GLOBAL_SESSION_ID)
    header = SessionHeader.objects.filter(global_interface=True).first()
    return session_info(header) if header else None


def preset_get(name: str) -> PresetInfo | None:
    preset = Preset.objects.filter(name=name).first()
    return PresetInfo(preset.name, preset.mountable) if preset else None


# How long an offer to DSH's plugin may be read (models.PluginDelivery): the call that rings the
# plugin lasts at most DSHLOOP_HOST_TIMEOUT_SECONDS, and its offer is withdrawn when it returns; one
# a killed scheduler left behind is not served after this, nor needed (the run is re-driven, and the
# re-drive offers it again).
OFFER_SECONDS = 120


def plugin_delivery_get(key: str, *, now: datetime) -> dict | None:
    """What dshloop offers DSH's plugin to deliver under `key` now, or None."""
    since = now - timedelta(seconds=max(OFFER_SECONDS, 2 * settings.DSHLOOP_HOST_TIMEOUT_SECONDS))
    row = PluginDelivery.objects.filter(key=key, created_at__gte=since).values_list("request", flat=True).first()
    return row if isinstance(row, dict) else None
