"""Reads of cached session headers and presets."""

from __future__ import annotations

from django.conf import settings

from .models import Preset, SessionHeader
from .records import PresetInfo, SessionInfo
from .titles import fold_title


def session_info(header: SessionHeader) -> SessionInfo:
    return SessionInfo(
        session_id=header.session_id,
        status=header.status,
        updated_at=header.updated_at,
        title=fold_title(
            user_title=header.user_title, generated_title=header.generated_title, first_prompt=header.first_prompt
        ),
        preset=header.preset,
        model=header.model,
        global_interface=header.global_interface,
    )


def session_get(session_id: str) -> SessionInfo | None:
    header = SessionHeader.objects.filter(session_id=session_id).first()
    return session_info(header) if header else None


def sessions_get(session_ids: set[str]) -> dict[str, SessionInfo]:
    return {h.session_id: session_info(h) for h in SessionHeader.objects.filter(session_id__in=session_ids)}


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
