"""GET /api/tools: the five tools as LLM function definitions, from the validating models."""

from __future__ import annotations

from ninja import Router

from dshloop.auth import tools_auth
from loops.schemas import LoopCreateIn, LoopDeleteIn, LoopListIn
from sessions_app.schemas import CheckSessionStatusIn, ListSessionsIn

router = Router(auth=tools_auth, tags=["tools"])

TOOLS = [
    ("loop_create", LoopCreateIn,
     "Schedule a prompt to be sent to a session. schedule is one of {kind: every, every_seconds}, "
     "{kind: after, after_seconds} (once) or {kind: cron, expr, tz?}; durations in seconds. session_id: omit "
     "for your own session, \"self\" for the global interface session, \"new\" for a fresh session per "
     "run (optionally with preset), or an existing session ID. Example: {\"prompt\": \"Check the deploy\", "
     "\"schedule\": {\"kind\": \"every\", \"every_seconds\": 600}}."),
    ("loop_list", LoopListIn,
     "List active loops: {} for loops targeting your session, {\"session_id\": \"global\"} for every loop, "
     "or {\"session_id\": \"<id>\"} for one session's."),
    ("loop_delete", LoopDeleteIn, "Delete a loop by its loop_id (any loop, from any session)."),
    ("list_sessions", ListSessionsIn,
     "List sessions (live and cold), newest activity first, with their durable titles. Read-only."),
    ("check_session_status", CheckSessionStatusIn,
     "Status of one exact session: running, idle, cold or missing. Never resumes it."),
]


def tool_definitions() -> list[dict]:
    return [
        {"name": name, "description": description, "input_schema": model.model_json_schema()}
        for name, model, description in TOOLS
    ]


@router.get("", summary="Tool definitions")
def list_tools(request):
    return {"tools": tool_definitions()}
