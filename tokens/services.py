"""Writes and reads for API tokens."""

from __future__ import annotations

import re
import secrets

from django.core.exceptions import ValidationError
from django.db import transaction

from .models import PLUGIN_TOKEN_NAME, SCOPES, ApiToken, hash_token

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


# What a DSH plugin makes for the dshloop it runs: the shape of token_create's, 256 random bits.
PLUGIN_TOKEN_SHAPE = re.compile(rf"{TOKEN_PREFIX}[A-Za-z0-9_-]{{43}}")


def plugin_token_adopt(*, raw: str, scopes: list[str]) -> int:
    """Make `raw`, a token a DSH plugin generated and handed over privately, the plugin's only
    token, revoking the earlier ones; return how many were revoked. Only its hash is kept. A value
    that is not a fresh token's shape (too short to be unguessable) is refused with ValueError."""
    if not PLUGIN_TOKEN_SHAPE.fullmatch(raw):
        raise ValueError(f"a plugin token is {TOKEN_PREFIX} and 43 URL-safe characters")
    key_hash = hash_token(raw)
    with transaction.atomic():
        earlier = ApiToken.objects.filter(name=PLUGIN_TOKEN_NAME, revoked=False).exclude(key_hash=key_hash)
        revoked = earlier.update(revoked=True)
        # The same value handed over again (the same DSH restarting its dshloop) keeps its row.
        ApiToken.objects.update_or_create(
            key_hash=key_hash,
            defaults={"revoked": False, "scopes": sorted(set(scopes))},
            create_defaults={
                "name": PLUGIN_TOKEN_NAME,
                "prefix": raw[: len(TOKEN_PREFIX) + 4],
                "scopes": sorted(set(scopes)),
            },
        )
    return revoked


def token_authenticate(raw: str) -> ApiToken | None:
    if not raw or len(raw) > 200:
        return None
    return ApiToken.objects.filter(key_hash=hash_token(raw), revoked=False).first()
