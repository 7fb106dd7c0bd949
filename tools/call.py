"""One tool call by name, for transports that are not ninja (MCP): validate, run, shape the result.

The same steps ninja takes around a tool route: the input model validates the arguments, the
tool's function does the work, a host that could not answer is `target_unavailable`, and the
result is the output model's JSON with unset fields omitted (loop_list's function encodes it itself).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from core.errors import host_unavailable
from core.validation import invalid_input_from
from sessions_app.hosts.base import HostError

from .catalogue import BY_NAME
from .functions import Encoded


def call_tool(name: str, arguments: Mapping[str, Any] | None, *, caller: str | None) -> dict:
    """Run tool `name` for the calling session; returns its JSON result or raises ApiError.

    Synchronous and ORM-bound: async callers run it in a worker thread.
    """
    tool = BY_NAME[name]
    try:
        # An omitted argument object is {} (MCP clients leave it out for argument-less calls).
        payload = tool.input.model_validate(dict(arguments or {}))
    except PydanticValidationError as exc:
        raise invalid_input_from(exc.errors()) from exc
    try:
        result = tool.function(payload, caller)
    except HostError as exc:
        raise host_unavailable(exc) from exc  # as dshloop.api.on_host_error answers REST
    if isinstance(result, Encoded):  # loop_list: the very bytes REST sends
        return json.loads(result.json)
    return result.model_dump(mode="json", exclude_none=True)
