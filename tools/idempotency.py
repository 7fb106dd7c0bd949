"""loop_create under an `Idempotency-Key` (docs/tools-and-api.md, "Retrying loop_create").

A loop_create whose answer never arrived (a timeout, a dropped connection) may have made its loop.
Sent again with the same key by the same session, it answers what the first call answered and
makes nothing; the same key with a different request is 422 `invalid_input` (field `Idempotency-Key`). Only a call
that made a loop is remembered: a refused one (422, 409 quota_exceeded …) may be retried as is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, transaction
from pydantic import BaseModel

from core.errors import IdempotencyKeyReused
from core.http import IDEMPOTENCY_HEADER

from .models import CreateKey


def request_hash(payload: BaseModel) -> str:
    """What "the same request" means: the input as validated (an explicit null and an omitted
    field are the same), in the model's field order."""
    return hashlib.sha256(payload.model_dump_json().encode()).hexdigest()


def earlier_answer(*, session_id: str, key: str, fingerprint: str) -> str | None:
    """The answer the key's first call got, or None when the session has not used the key."""
    row = CreateKey.objects.filter(session_id=session_id, key=key).only("request_hash", "loop_id", "answer").first()
    if row is None:
        return None
    if row.request_hash != fingerprint:
        raise IdempotencyKeyReused(
            f"{IDEMPOTENCY_HEADER} {key!r} was already used by this session for another loop_create (it made "
            f"{row.loop_id}); a retry must send the same request, a new loop needs a new key.",
            field=IDEMPOTENCY_HEADER,
        )
    return row.answer


def create_once(
    *, session_id: str, key: str, fingerprint: str, now: datetime, create: Callable[[], tuple[str, str]]
) -> str:
    """The answer of the session's loop_create under `key`: the earlier one, or `create()`'s (which
    makes the loop and returns its ID and answer), stored with the key in the same transaction."""
    if (answer := earlier_answer(session_id=session_id, key=key, fingerprint=fingerprint)) is not None:
        return answer
    try:
        with transaction.atomic():
            loop_id, answer = create()
            CreateKey.objects.create(
                session_id=session_id, key=key, request_hash=fingerprint, loop_id=loop_id, answer=answer, created_at=now
            )
    except IntegrityError:
        # The same key raced in from a concurrent retry, which committed first (PostgreSQL makes this
        # insert wait for it; SQLite runs one writer at a time): this call's loop is undone with its
        # transaction, and the first call's answer stands.
        answer = earlier_answer(session_id=session_id, key=key, fingerprint=fingerprint)
        if answer is None:
            raise
    return answer
