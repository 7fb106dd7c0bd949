"""Strict JSON for request bodies (REST and /mcp): RFC 8259 numbers only."""

from __future__ import annotations

import json
from typing import Any, NoReturn


class NotAJsonNumber(ValueError):
    pass


def _not_a_json_number(constant: str) -> NoReturn:
    raise NotAJsonNumber(f"{constant} is not a JSON number")


def json_loads(raw: bytes | str) -> Any:
    """JSON as RFC 8259 has it: Python's json also reads NaN, Infinity and -Infinity, which no JSON
    number is (NotAJsonNumber)."""
    return json.loads(raw, parse_constant=_not_a_json_number)
