"""The five tools: name, input and output models, the function, and the description an agent reads.

One list, read by the REST router (tools.api), GET /api/tools, and the MCP server (tools.mcp).
The JSON Schemas handed to agents are generated from the same models that validate the inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from loops.schemas import LoopCreateIn, LoopDeleteIn, LoopDeleteOut, LoopListIn, LoopListOut, LoopView
from sessions_app.schemas import CheckSessionStatusIn, ListSessionsIn, SessionsOut, SessionStatusView

from . import functions

# The input model of a tool: its function takes a validated instance of it.
_In = TypeVar("_In", bound=BaseModel)


@dataclass(frozen=True)
class Tool(Generic[_In]):
    name: str
    input: type[_In]
    output: type[BaseModel]
    # Returns the output model, or (loop_list: 100,000 loops are too many to validate one by one)
    # the output model's JSON, encoded by the presenter that defines the shape (functions.Encoded).
    function: Callable[[_In, str | None], BaseModel | functions.Encoded]
    description: str
    # contract §15: refused to a session made for a `new` run unless the operator allows it
    # (functions.may_make_loops), and left out of the catalogue that session is given.
    makes_loops: bool = False

    def definition(self) -> dict:
        """As an LLM function definition (GET /api/tools)."""
        return {"name": self.name, "description": self.description, "input_schema": self.input.model_json_schema()}


# Each description teaches an agent the call: the targets, the schedule kinds and one example of each.
TOOLS: tuple[Tool[Any], ...] = (
    Tool(
        "loop_create",
        LoopCreateIn,
        LoopView,
        functions.loop_create,
        "Schedule a prompt to be sent to an agent session, repeatedly or once. "
        "schedule is one of three kinds (durations in whole seconds): "
        'every N seconds, e.g. {"kind": "every", "every_seconds": 600} (every 10 minutes, the first one '
        '10 minutes from now); once after N seconds, e.g. {"kind": "after", "after_seconds": 3600} (in an '
        'hour); or a 5-field cron in an IANA time zone (the host\'s if tz is omitted), e.g. {"kind": "cron", '
        '"expr": "30 9 * * 1-5", "tz": "Asia/Shanghai"} (09:30 on weekdays). '
        'session_id is the target: omit it for your own session; "self" for the global interface session; '
        '"new" for a fresh session on every run (optionally with "preset": "<name>"; a recurring "new" loop '
        "runs at most every 5 minutes by default); or an existing session ID from list_sessions, e.g. "
        '"ses_123". '
        'Example: {"prompt": "Check the deploy", "schedule": {"kind": "every", "every_seconds": 600}}. '
        "Returns the loop with its loop_id and next_at (epoch ms).",
        makes_loops=True,
    ),
    Tool(
        "loop_list",
        LoopListIn,
        LoopListOut,
        functions.loop_list,
        "List active loops, soonest next_at first (loops without one last): {} for the loops that target "
        'your session, {"session_id": "global"} for every loop, or {"session_id": "ses_123"} for one '
        'session\'s. "self" and "new" are loop_create targets, not list scopes. The whole list by default; '
        'for pages, add "limit" (1..1000) and pass each answer\'s "next_cursor" back as "cursor" until an '
        'answer has none, e.g. {"session_id": "global", "limit": 100}. Read-only.',
    ),
    Tool(
        "loop_delete",
        LoopDeleteIn,
        LoopDeleteOut,
        functions.loop_delete,
        'Delete a loop by its loop_id, e.g. {"loop_id": "loop_3f9a1c2b7d4e6a80"}: any loop, from any session '
        "(loop_list shows the IDs). Its run history is kept.",
        makes_loops=True,
    ),
    Tool(
        "list_sessions",
        ListSessionsIn,
        SessionsOut,
        functions.list_sessions,
        'List sessions (live and cold), newest activity first, with their durable titles, e.g. {"limit": 20}; '
        "a session_id from here is a loop_create target. Read-only.",
    ),
    Tool(
        "check_session_status",
        CheckSessionStatusIn,
        SessionStatusView,
        functions.check_session_status,
        'Status of one exact session, e.g. {"session_id": "ses_123"}: running, idle, cold or missing. '
        "Read-only: it never resumes the session.",
    ),
)
BY_NAME = {tool.name: tool for tool in TOOLS}


def catalogue(caller: str | None = None) -> dict:
    """GET /api/tools's body, the tools `caller` may use (all five without one); also built into
    the DSH plugin (manage.py tools_catalogue)."""
    everything = functions.may_make_loops(functions.checked_caller(caller))
    return {"tools": [tool.definition() for tool in TOOLS if everything or not tool.makes_loops]}
