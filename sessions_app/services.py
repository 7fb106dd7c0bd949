"""Writes to the embedded host's registry (contract §5): sessions, presets, inbox."""

from __future__ import annotations

import secrets
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from dshloop.timeutil import truncate_to_ms

from .models import InboxMessage, Preset, SessionHeader, SessionStatus

_HEADER_FIELDS = ("user_title", "generated_title", "first_prompt", "status", "preset", "model", "global_interface")


def new_session_id() -> str:
    return "ses_" + secrets.token_hex(8)


@transaction.atomic
def session_upsert(*, session_id: str, changes: dict, now: datetime | None = None) -> SessionHeader:
    """Create or update one session header; at most one session is the global interface."""
    now = truncate_to_ms(now or timezone.now())  # stored as the API shows it (ISO, ms)
    unknown = set(changes) - set(_HEADER_FIELDS)
    if unknown:
        raise ValueError(f"unknown session fields {sorted(unknown)}")
    if changes.get("global_interface"):
        # Moving the flag: clear it elsewhere first (the partial unique index keeps it single).
        SessionHeader.objects.filter(global_interface=True).exclude(session_id=session_id).update(
            global_interface=False
        )
    header = SessionHeader.objects.select_for_update().filter(session_id=session_id).first()
    if header is None:
        header = SessionHeader(session_id=session_id, updated_at=now, **changes)
        header.save(force_insert=True)
        return header
    for name, value in changes.items():
        setattr(header, name, value)
    header.updated_at = now
    header.save(update_fields=[*changes, "updated_at"])
    return header


def preset_upsert(*, name: str, mountable: bool) -> Preset:
    preset, _ = Preset.objects.update_or_create(name=name, defaults={"mountable": mountable})
    return preset


def session_resume(*, session_id: str, now: datetime | None = None) -> SessionHeader:
    """Resume a cold session (-> idle) with its preset and model untouched (spec §5)."""
    now = truncate_to_ms(now or timezone.now())  # stored as the API shows it (ISO, ms)
    SessionHeader.objects.filter(session_id=session_id, status=SessionStatus.COLD).update(
        status=SessionStatus.IDLE, updated_at=now
    )
    return SessionHeader.objects.get(session_id=session_id)


def session_create_for(
    *, occurrence_key: str, preset: str, model: str, first_prompt: str, now: datetime | None = None
) -> SessionHeader:
    """A fresh session for one occurrence of a `new` loop; the same occurrence gets the same one."""
    now = truncate_to_ms(now or timezone.now())  # stored as the API shows it (ISO, ms)
    existing = SessionHeader.objects.filter(created_for=occurrence_key).first()
    if existing:
        return existing
    try:
        with transaction.atomic():
            return SessionHeader.objects.create(
                session_id=new_session_id(), created_for=occurrence_key, status=SessionStatus.IDLE,
                updated_at=now, preset=preset, model=model, first_prompt=first_prompt,
            )
    except IntegrityError:  # another worker made it first
        return SessionHeader.objects.get(created_for=occurrence_key)


def inbox_deliver(
    *, session_id: str, text: str, source: dict, occurrence_key: str, delivery: str, now: datetime | None = None
) -> tuple[InboxMessage, bool]:
    """Put one message in a session's inbox; returns (message, created). Idempotent per occurrence."""
    now = truncate_to_ms(now or timezone.now())  # stored as the API shows it (ISO, ms)
    existing = InboxMessage.objects.filter(occurrence_key=occurrence_key).first()
    if existing:
        return existing, False
    try:
        with transaction.atomic():
            message = InboxMessage.objects.create(
                message_id="msg_" + secrets.token_hex(8), session_id=session_id, text=text, wakeup=True,
                delivery=delivery, source=source, occurrence_key=occurrence_key, created_at=now,
            )
    except IntegrityError:  # a concurrent delivery of the same occurrence won
        return InboxMessage.objects.get(occurrence_key=occurrence_key), False
    # The session's updated_at is its host's business (PUT, resume); a queued message is not
    # activity yet, and bumping a hot row per delivery would serialize the workers.
    return message, True
