"""Shared pydantic building blocks: strict objects and identifier strings (spec §9)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from annotated_types import GroupedMetadata
from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from core.http import CALLER_HEADER
from core.limits import MAX_ID_CHARS


class StrictModel(BaseModel):
    """Every tool object rejects unknown properties (spec §9) and never coerces types."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _printable_identifier(value: str) -> str:
    if value != value.strip():
        raise ValueError("Identifiers must not start or end with whitespace.")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise ValueError("Identifiers must not contain control or unassigned characters.")
    return value


Identifier = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=MAX_ID_CHARS),
    AfterValidator(_printable_identifier),
]


def _no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL; refuse it at the edge instead of failing on save.
    if "\x00" in value:
        raise ValueError("Text must not contain NUL characters.")
    return value


@dataclass(frozen=True)
class Text(GroupedMetadata):
    """Free text of at most `max_length` characters, never coerced and without NUL:
    `Annotated[str, Text(200)]`. Pydantic unpacks it into its two rules, in this order; metadata
    rather than a function returning the Annotated type, which a type checker cannot read."""

    max_length: int

    def __iter__(self) -> Iterator[object]:
        yield StringConstraints(strict=True, max_length=self.max_length)
        yield AfterValidator(_no_nul)


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorOut(BaseModel):
    """contract §3: the body of every 4xx from /api/."""

    error: ErrorDetail


def answers(ok: type[BaseModel], *error_statuses: int) -> dict[int, type[BaseModel]]:
    """An operation's documented responses: `ok` for 200, the error body for 401, 403, 422 and the rest."""
    return {200: ok, **{status: ErrorOut for status in sorted({401, 403, 422, *error_statuses})}}


# contract §2: the calling agent's session, documented on the operations that read it.
CALLER_HEADER_DOC = {
    "parameters": [
        {
            "in": "header",
            "name": CALLER_HEADER,
            "required": False,
            "schema": {"type": "string"},
            "description": "The calling agent's session (the current local session).",
        }
    ]
}
