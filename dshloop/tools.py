"""GET /api/tools: the five tools as LLM function definitions, from the validating models."""

from __future__ import annotations

from ninja import Router
from pydantic import BaseModel

from dshloop.auth import tools_auth
from dshloop.schemas import answers
from loops.schemas import LoopCreateIn, LoopDeleteIn, LoopListIn
from sessions_app.schemas import CheckSessionStatusIn, ListSessionsIn

router = Router(auth=tools_auth, tags=["tools"])

# Each description teaches an agent the call: the targets, the schedule kinds and one example of each.
TOOLS = [
    ("loop_create", LoopCreateIn,
     "Schedule a prompt to be sent to an agent session, repeatedly or once. "
     "schedule is one of three kinds (durations in whole seconds): "
     "every N seconds, e.g. {\"kind\": \"every\", \"every_seconds\": 600} (every 10 minutes, the first one "
     "10 minutes from now); once after N seconds, e.g. {\"kind\": \"after\", \"after_seconds\": 3600} (in an "
     "hour); or a 5-field cron in an IANA time zone (the host's if tz is omitted), e.g. {\"kind\": \"cron\", "
     "\"expr\": \"30 9 * * 1-5\", \"tz\": \"Asia/Shanghai\"} (09:30 on weekdays). "
     "session_id is the target: omit it for your own session; \"self\" for the global interface session; "
     "\"new\" for a fresh session on every run (optionally with \"preset\": \"<name>\"); or an existing "
     "session ID from list_sessions, e.g. \"ses_123\". "
     "Example: {\"prompt\": \"Check the deploy\", \"schedule\": {\"kind\": \"every\", \"every_seconds\": 600}}. "
     "Returns the loop with its loop_id and next_at (epoch ms)."),
    ("loop_list", LoopListIn,
     "List active loops, soonest next_at first: {} for the loops that target your session, "
     "{\"session_id\": \"global\"} for every loop, or {\"session_id\": \"ses_123\"} for one session's. "
     "\"self\" and \"new\" are loop_create targets, not list scopes. Read-only."),
    ("loop_delete", LoopDeleteIn,
     "Delete a loop by its loop_id, e.g. {\"loop_id\": \"loop_3f9a1c2b7d4e6a80\"}: any loop, from any session "
     "(loop_list shows the IDs). Its run history is kept."),
    ("list_sessions", ListSessionsIn,
     "List sessions (live and cold), newest activity first, with their durable titles, e.g. {\"limit\": 20}; "
     "a session_id from here is a loop_create target. Read-only."),
    ("check_session_status", CheckSessionStatusIn,
     "Status of one exact session, e.g. {\"session_id\": \"ses_123\"}: running, idle, cold or missing. "
     "Read-only: it never resumes the session."),
]


def tool_definitions() -> list[dict]:
    return [
        {"name": name, "description": description, "input_schema": model.model_json_schema()}
        for name, model, description in TOOLS
    ]


class ToolDefinition(BaseModel):
    name: str
    description: str
    input_schema: dict


class ToolsOut(BaseModel):
    tools: list[ToolDefinition]


@router.get("", summary="Tool definitions", response=answers(ToolsOut))
def list_tools(request):
    return {"tools": tool_definitions()}
