"""POST /api/tools/<name> and GET /api/tools: a thin ninja adapter over tools.functions."""

from __future__ import annotations

from django.http import HttpResponse
from ninja import Router
from pydantic import BaseModel

from core.http import CALLER_HEADER, IDEMPOTENCY_HEADER
from core.schemas import CALLER_HEADER_DOC, answers
from loops.schemas import LoopCreateIn, LoopDeleteIn, LoopDeleteOut, LoopListIn, LoopListOut, LoopView
from sessions_app.schemas import CheckSessionStatusIn, ListSessionsIn, SessionsOut, SessionStatusView
from tokens.auth import tools_auth

from . import functions
from .catalogue import catalogue

router = Router(auth=tools_auth, tags=["tools"])


def caller_of(request) -> str | None:
    """The caller header as the server decoded it (dshloop.wsgi); the tool function checks it."""
    return request.headers.get(CALLER_HEADER)


class ToolDefinition(BaseModel):
    name: str
    description: str
    input_schema: dict


class ToolsOut(BaseModel):
    tools: list[ToolDefinition]


@router.get("", summary="Tool definitions", response=answers(ToolsOut), openapi_extra=CALLER_HEADER_DOC)
def list_tools(request):
    """The five tools as LLM function definitions (JSON Schemas of the validating models).

    With `X-DSH-Session-Id`, the tools that session may use: a session dshloop made for a `new`
    loop's run is not given `loop_create` and `loop_delete` (they answer it 403 `forbidden`) unless
    `DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS=1`.
    """
    return catalogue(caller_of(request))


IDEMPOTENCY_HEADER_DOC = {
    "parameters": [
        *CALLER_HEADER_DOC["parameters"],
        {
            "in": "header",
            "name": IDEMPOTENCY_HEADER,
            "required": False,
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            "description": "Any string, unique per request (DSH's plugin sends the tool call's ID). A retry "
            "with the same key from the same session answers what the first call answered and makes no "
            "second loop; the same key with a different request is 422 invalid_input (field Idempotency-Key).",
        },
    ]
}


@router.post(
    "/loop_create",
    response=answers(LoopView, 409),
    exclude_none=True,
    summary="loop_create",
    openapi_extra=IDEMPOTENCY_HEADER_DOC,
)
def loop_create(request, payload: LoopCreateIn):
    """Create a loop: a prompt, a schedule (every / after / cron) and a target session.

    With `Idempotency-Key`, a call whose answer was lost (a timeout) can be sent again safely: the
    same key and request from the same session answers the loop the first call made, as it answered
    then; the same key with another request is 422 `invalid_input` (field `Idempotency-Key`). Only a call that made a
    loop is remembered, so a refused one may be retried with its key.
    """
    return functions.loop_create(payload, caller_of(request), request.headers.get(IDEMPOTENCY_HEADER))


def encoded_response(output: functions.Encoded) -> HttpResponse:
    """An output the tool function encoded itself, as ninja would answer it (the route's `response`
    still documents its schema in /api/docs)."""
    return HttpResponse(output.json, content_type="application/json; charset=utf-8")


@router.post("/loop_list", response=answers(LoopListOut, 409), summary="loop_list", openapi_extra=CALLER_HEADER_DOC)
def loop_list(request, payload: LoopListIn):
    """Active loops: {} for your session, {"session_id": "global"} for all, or one session's; by
    next_at (absent last), then created_at, then loop_id.

    Without `limit`, the whole list. With `limit` (1..1000), at most that many, and `next_cursor`
    while more remain: send it back as `cursor` (with the same `session_id` and a `limit`) for the
    next page, until a page comes without one. Each page is read when asked for: a loop whose
    next_at changes while you page (it fires, is paused or edited) can be missed or listed twice;
    for one consistent snapshot, list without `limit`. A cursor that was changed, belongs to
    another list, or comes without `limit` is refused (422, field `cursor`).
    """
    # LoopListOut, already encoded (tools.functions.loop_list): at 100,000 loops, validating and
    # serializing each through the model cost seconds.
    return encoded_response(functions.loop_list(payload, caller_of(request)))


@router.post(
    "/loop_delete", response=answers(LoopDeleteOut, 404), summary="loop_delete", openapi_extra=CALLER_HEADER_DOC
)
def loop_delete(request, payload: LoopDeleteIn):
    """Delete any loop by its loop_id; its run history stays."""
    return functions.loop_delete(payload, caller_of(request))


@router.post("/list_sessions", response=answers(SessionsOut, 409), exclude_none=True, summary="list_sessions")
def list_sessions(request, payload: ListSessionsIn):
    """Sessions, newest activity first, live and cold, with durable titles (never generated on demand)."""
    return functions.list_sessions(payload, caller_of(request))


@router.post(
    "/check_session_status", response=answers(SessionStatusView, 409), exclude_none=True, summary="check_session_status"
)
def check_session_status(request, payload: CheckSessionStatusIn):
    """running, idle, cold or missing for one exact session; never resumes it."""
    return functions.check_session_status(payload, caller_of(request))
