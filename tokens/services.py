"""Writes and reads for API tokens."""

from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError

from .models import SCOPES, ApiToken, hash_token

TOKEN_PREFIX = "dsh_"


def token_create(*, name: str, scopes: list[str]) -> tuple[ApiToken, str]:
    """Create a token and return it with its raw value (the only time the raw value exists)."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s) {unknown}; choose from {list(SCOPES)}")
    if not scopes:
        raise ValueError("a token needs at least one scope")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name, key_hash=hash_token(raw), prefix=raw[: len(TOKEN_PREFIX) + 4], scopes=sorted(set(scopes))
    )
    try:
        token.full_clean()  # e.g. a name over 100 characters: PostgreSQL would refuse it on save
    except ValidationError as exc:
        raise ValueError("; ".join(exc.messages)) from exc
    token.save(force_insert=True)
    return token, raw


def token_authenticate(raw: str) -> ApiToken | None:
    if not raw or len(raw) > 200:
        return None
    return ApiToken.objects.filter(key_hash=hash_token(raw), revoked=False).first()
