"""The MCP server: the five tools of tools.catalogue, their functions shared with the REST API.

A tool's input schema is its pydantic model's JSON Schema (the one GET /api/tools serves, so
unknown properties are refused there too), its description is the catalogue's, and a call runs
tools.call.call_tool. Only the MCP-specific hints live here: titles and annotations.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import mcp_types as types
from django.db import close_old_connections
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from core.errors import ApiError, Unavailable, database_unavailable, one_line
from monitoring.metrics import count_unexpected_error

from ..call import call_tool
from ..catalogue import TOOLS

logger = logging.getLogger("dshloop.mcp")

# JSON-RPC's range for implementation-defined server errors is -32000..-32099; MCP and the SDK use
# -32000, -32001, -32002, -32020..-32022 and -32042. This one says "the database cannot be reached
# right now: retry later" (the REST API's 503 `unavailable`, whose body the error's data carries).
UNAVAILABLE = -32050


def unavailable_error() -> MCPError:
    error = Unavailable()
    return MCPError(UNAVAILABLE, f"{error.code}: {error.message}", data=error.body())


# How the transport names the calling session for a request (the --session flag on stdio, the
# X-DSH-Session-Id header over HTTP); None when there is none, as for a REST call without the header.
CallerOf = Callable[[ServerRequestContext[Any, Any]], "str | None"]

SERVER_NAME = "dshloop"
INSTRUCTIONS = (
    "dshloop sends prompts to agent sessions on a schedule: every N seconds, once after N seconds, or on "
    "a cron expression in a time zone. Use loop_create to schedule (to yourself by default, to the global "
    'interface with "self", to a fresh session per run with "new", or to any session ID), loop_list and '
    "loop_delete to manage loops, list_sessions and check_session_status to find sessions. A failed call "
    "returns an error whose JSON says the code, the message and the field to fix."
)

# MCP hints (spec: hints, not guarantees). The domain is dshloop's own registry and its host's
# sessions, so none of the tools is open-world. Deleting twice leaves the same state: idempotent.
_HINTS: dict[str, types.ToolAnnotations] = {
    "loop_create": types.ToolAnnotations(
        title="Create a loop",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=False,
        open_world_hint=False,
    ),
    "loop_list": types.ToolAnnotations(title="List loops", read_only_hint=True, open_world_hint=False),
    "loop_delete": types.ToolAnnotations(
        title="Delete a loop", read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
    "list_sessions": types.ToolAnnotations(title="List sessions", read_only_hint=True, open_world_hint=False),
    "check_session_status": types.ToolAnnotations(
        title="Check a session's status", read_only_hint=True, open_world_hint=False
    ),
}
assert _HINTS.keys() == {tool.name for tool in TOOLS}, "every catalogued tool needs its MCP hints"


def tool_definitions() -> list[types.Tool]:
    return [
        types.Tool(
            name=tool.name,
            title=_HINTS[tool.name].title,
            description=tool.description,
            input_schema=tool.input.model_json_schema(),
            output_schema=tool.output.model_json_schema(mode="serialization"),
            annotations=_HINTS[tool.name],
        )
        for tool in TOOLS
    ]


TOOL_DEFINITIONS = tool_definitions()
_INPUT_SCHEMAS = {tool.name: tool.input_schema for tool in TOOL_DEFINITIONS}


def _call_in_thread(name: str, arguments: dict[str, Any] | None, caller_session_id: str | None) -> dict:
    # What Django does around each request (request_started/finished): drop connections that are
    # too old or broken, so a worker thread's persistent connection obeys CONN_MAX_AGE.
    close_old_connections()
    try:
        return call_tool(name, arguments, caller=caller_session_id)
    finally:
        close_old_connections()


def _text(body: dict) -> list[types.ContentBlock]:
    return [types.TextContent(text=json.dumps(body, ensure_ascii=False))]


def tool_result(body: dict) -> types.CallToolResult:
    return types.CallToolResult(content=_text(body), structured_content=body)


def tool_error(error: ApiError) -> types.CallToolResult:
    """A tool error (isError) carrying the contract's error body, as text and as structured content."""
    body = error.body()
    return types.CallToolResult(content=_text(body), structured_content=body, is_error=True)


def build_server(*, caller_of: CallerOf, instructions: str = INSTRUCTIONS) -> Server:
    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOL_DEFINITIONS)

    async def call_tool_handler(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in _INPUT_SCHEMAS:
            # An unknown tool is a protocol error (MCP spec), not a tool result.
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool {params.name!r}; tools/list shows the five tools.")
        caller = caller_of(ctx)
        try:
            # The ORM is synchronous: the call runs in a worker thread (anyio's pool), never on the event loop.
            result = await anyio.to_thread.run_sync(_call_in_thread, params.name, params.arguments, caller)
        except ApiError as error:
            return tool_error(error)
        except Exception as exc:
            if database_unavailable(exc):  # _call_in_thread closed the broken connection
                logger.warning("MCP tool %s: the database is unavailable: %s", params.name, one_line(exc))
                raise unavailable_error() from None
            # A bug, not the caller's fault: the details stay in the log, as for a REST 500.
            logger.exception("MCP tool %s failed", params.name)
            count_unexpected_error()
            raise MCPError(types.INTERNAL_ERROR, "Internal error; the dshloop log has the details.") from None
        return tool_result(result)

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=instructions,
        get_tool_input_schema=_INPUT_SCHEMAS.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool_handler,
    )


def _version() -> str:
    try:
        return version("dshloop")
    except PackageNotFoundError:  # a checkout that was never installed
        return "0"
