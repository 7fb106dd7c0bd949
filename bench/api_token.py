"""Bearer tokens for the harness's own API calls, made by the product's service."""

from __future__ import annotations


def api_token(name: str, scope: str) -> str:
    """A fresh bearer token with one scope: `tools` for the agent API, `manage` for GET /metrics."""
    from tokens.services import token_create

    _, raw = token_create(name=name, scopes=[scope])
    return raw
