"""One tool call, exactly as `POST /api/tools/<name>` runs it, for callers that are not ninja.

The tool's pydantic model validates the arguments, the REST handler itself does the work (it
calls the services, selectors and presenters), and the handler's response model shapes the
result with unset fields omitted. So a rule lives in one place whichever way an agent calls:
the caller header check, the deprecated-alias handling of loop_delete, the host-error mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from dshloop.api import CALLER_HEADER, refuse_impossible_ids
from dshloop.errors import host_unavailable
from dshloop.tools import TOOLS
from dshloop.validation import invalid_input_from
from loops import api as loop_tools
from loops.schemas import LoopDeleteOut, LoopListOut, LoopView
from sessions_app import api as session_tools
from sessions_app.hosts.base import HostError
from sessions_app.schemas import SessionsOut, SessionStatusView

INPUTS: dict[str, type[BaseModel]] = {name: model for name, model, _ in TOOLS}

# The REST handler of each tool and the response model its route declares (contract §3).
HANDLERS: dict[str, tuple[Callable[[HttpRequest, Any], Any], type[BaseModel]]] = {
    "loop_create": (loop_tools.loop_create, LoopView),
    "loop_list": (loop_tools.loop_list, LoopListOut),
    "loop_delete": (loop_tools.loop_delete, LoopDeleteOut),
    "list_sessions": (session_tools.list_sessions, SessionsOut),
    "check_session_status": (session_tools.check_session_status, SessionStatusView),
}
assert HANDLERS.keys() == INPUTS.keys(), "every catalogued tool needs a handler"

OUTPUTS: dict[str, type[BaseModel]] = {name: output for name, (_, output) in HANDLERS.items()}

_CALLER_META_KEY = "HTTP_" + CALLER_HEADER.upper().replace("-", "_")


def tool_request(*, caller_session_id: str | None) -> HttpRequest:
    """The request a REST handler reads: only the caller's session header matters to the tools."""
    request = HttpRequest()
    request.method = "POST"
    if caller_session_id:
        request.META[_CALLER_META_KEY] = caller_session_id
    return request


def call_tool(name: str, arguments: Mapping[str, Any] | None, *, caller_session_id: str | None) -> dict:
    """Run tool `name` for the calling session; returns its JSON result or raises ApiError.

    Synchronous and ORM-bound: async callers run it in a worker thread.
    """
    model = INPUTS[name]
    try:
        # An omitted argument object is {} (MCP clients leave it out for argument-less calls).
        payload = model.model_validate(dict(arguments or {}))
    except PydanticValidationError as exc:
        raise invalid_input_from(exc.errors()) from exc
    handler, output = HANDLERS[name]
    try:
        # The same order as ninja: the body is validated first, then the caller header is checked.
        result = refuse_impossible_ids(handler)(tool_request(caller_session_id=caller_session_id), payload)
    except HostError as exc:
        # As dshloop.api.on_host_error: the host could not answer a lookup the tool needs.
        raise host_unavailable(exc) from exc
    return output.model_validate(result).model_dump(mode="json", exclude_none=True)
