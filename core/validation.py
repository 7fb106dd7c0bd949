"""Turn pydantic validation errors into the contract's one-sentence error body."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypeGuard

from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from core.errors import InvalidInput
from core.limits import MAX_SAFE_INTEGER
from core.schemas import Identifier

# Path parts that ninja adds around a body and that the caller never wrote.
_WRAPPERS = {"body", "payload", "query", "path", "header"}
# Discriminated unions put the tag in the location; the caller's path has no such part.
_UNION_TAGS = {"every", "after", "cron"}
_MODEL_FIELDS = {"model", "model_effort", "effort", "reasoning_effort"}


def field_path(loc: Sequence[int | str]) -> str:
    parts = [str(part) for part in loc]
    while parts and parts[0] in _WRAPPERS:
        parts.pop(0)
    if len(parts) > 1 and parts[0] == "schedule" and parts[1] in _UNION_TAGS:
        del parts[1]
    return ".".join(parts)


def _message(error: Mapping[str, Any], field: str) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    loc = error.get("loc") or ("",)
    if loc[0] in {"query", "path", "header"} and kind in {"int_type", "int_from_float", "int_parsing"}:
        return f"'{field}' must be an integer."  # text in a URL or header: there is no JSON there
    if kind == "extra_forbidden":
        last = field.rsplit(".", 1)[-1]
        if last in _MODEL_FIELDS:
            return f"'{field}' is not accepted: the model and its effort are always inherited from the target."
        return f"Unknown property '{field}'; remove it (every object accepts only its documented properties)."
    if kind == "missing":
        # An empty request body leaves the whole payload missing: no field to name.
        return f"'{field}' is required." if field else "The request body must be a JSON object; send {} for none."
    if kind in {"int_type", "int_from_float", "int_parsing"}:
        return f"'{field}' must be a JSON integer."
    if kind == "greater_than_equal":
        return f"'{field}' must be at least {ctx.get('ge')}."
    if kind == "less_than_equal":
        limit = ctx.get("le")
        return f"'{field}' must be at most {limit}" + (" (2^53-1)." if limit == MAX_SAFE_INTEGER else ".")
    if kind in {"string_type", "string_sub_type"}:
        return f"'{field}' must be a string."
    if kind == "bool_type":
        return f"'{field}' must be true or false."
    if kind == "string_unicode":  # e.g. a lone surrogate such as "\ud800" in the JSON
        return f"'{field}' is not valid Unicode text (it holds a lone surrogate)."
    if kind == "string_too_short":
        return f"'{field}' must not be empty."
    if kind == "string_too_long":
        return f"'{field}' is too long: at most {ctx.get('max_length')} characters."
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return f"'{field}' must be a JSON object." if field else "The request body must be a JSON object."
    if kind == "union_tag_invalid":
        return f"'{field}.kind' must be one of every, after, cron."
    if kind == "union_tag_not_found":
        return f"'{field}.kind' is required: every, after or cron."
    if kind == "literal_error":
        return f"'{field}' must be one of {ctx.get('expected')}."
    if kind == "value_error":
        return str(ctx.get("error", error.get("msg", "Invalid value.")))
    return f"'{field}': {error.get('msg', 'invalid value')}." if field else str(error.get("msg", "Invalid input."))


def invalid_input_from(errors: Sequence[Mapping[str, Any]]) -> InvalidInput:
    """The first error is reported: one clear sentence beats a wall of them. The errors are pydantic's
    (ErrorDetails) or ninja's dicts of the same shape."""
    error = errors[0] if errors else {}
    field = field_path(error.get("loc", ()))
    if error.get("type") == "union_tag_not_found" or error.get("type") == "union_tag_invalid":
        field = field or "schedule"
    return InvalidInput(_message(error, field), field=field or None)


@cache
def _adapter(kind: Any) -> TypeAdapter[str]:
    # Every kind is str under its constraints (Identifier or narrower).
    return TypeAdapter(kind)


def check_identifier(value: object, *, field: str, kind: Any = Identifier) -> str:
    """The one identifier check for values that come without a schema (path segments, the caller
    header, a command's flag, a v1 record's id): `kind` is Identifier or a narrower Annotated type
    (a session ID is not one of the reserved names). Returns the value; raises the contract's 422."""
    try:
        return _adapter(kind).validate_python(value)
    except PydanticValidationError as exc:
        raise invalid_input_from([{**error, "loc": (field,)} for error in exc.errors()]) from exc


def is_identifier(value: object, kind: Any = Identifier) -> TypeGuard[str]:
    try:
        _adapter(kind).validate_python(value)
    except PydanticValidationError:
        return False
    return True
