"""Loop tools (spec §2) and read-only loop extras (contract §4). Thin: parse, call, present."""

from __future__ import annotations

from typing import Annotated

from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from dshloop.auth import tools_auth
from dshloop.errors import InvalidInput
from dshloop.schemas import CALLER_HEADER_DOC, answers
from dshloop.timeutil import to_ms
from sessions_app.models import RESERVED_SESSION_IDS

from . import services
from .presenters import loop_view, run_view
from .schemas import (
    LoopCreateIn,
    LoopDeleteIn,
    LoopDeleteOut,
    LoopListIn,
    LoopListOut,
    LoopView,
    RunsOut,
    UpcomingOut,
)
from .selectors import fire_times, loop_get, loop_list as select_loops, loop_runs

tools_router = Router(auth=tools_auth, tags=["tools"])
loops_router = Router(auth=tools_auth, tags=["loops"])

CALLER_HEADER = "X-DSH-Session-Id"


def caller_session(request) -> str | None:
    value = request.headers.get(CALLER_HEADER, "").strip()
    if value in RESERVED_SESSION_IDS:
        # spec §9: no actual session is called "self", "new" or "global"; as the caller they would
        # silently turn {} into a self/new target (or a global list) and be recorded as the creator.
        raise InvalidInput(f"{CALLER_HEADER} must name the calling session, not the reserved {value!r}.",
                           field=CALLER_HEADER)
    return value or None


@tools_router.post("/loop_create", response=answers(LoopView, 409), exclude_none=True, summary="loop_create",
                   openapi_extra=CALLER_HEADER_DOC)
def loop_create(request, payload: LoopCreateIn):
    """Create a loop: a prompt, a schedule (every / after / cron) and a target session."""
    loop = services.loop_create(data=payload, caller_session_id=caller_session(request))
    return loop_view(loop, now=timezone.now())


@tools_router.post("/loop_list", response=answers(LoopListOut, 409), exclude_none=True, summary="loop_list",
                   openapi_extra=CALLER_HEADER_DOC)
def loop_list(request, payload: LoopListIn):
    """Active loops: {} for your session, {"session_id": "global"} for all, or one session's."""
    now = timezone.now()
    loops = select_loops(selector=payload.session_id, caller_session_id=caller_session(request))
    return {"loops": [loop_view(loop, now=now) for loop in loops]}


@tools_router.post("/loop_delete", response=answers(LoopDeleteOut, 404), summary="loop_delete",
                   openapi_extra=CALLER_HEADER_DOC)
def loop_delete(request, payload: LoopDeleteIn):
    """Delete any loop by its loop_id; its run history stays."""
    if payload.loop_id is not None and payload.v1_id is not None:
        raise InvalidInput("Give 'loop_id' or the deprecated 'id', not both.", field="id")
    loop_id = payload.loop_id if payload.loop_id is not None else payload.v1_id
    if loop_id is None:
        raise InvalidInput("'loop_id' is required.", field="loop_id")
    if payload.v1_id is not None:
        # The raw header, not caller_session(): loop_delete needs no caller, so none is refused here.
        caller = request.headers.get(CALLER_HEADER, "").strip() or None
        services.log_deprecated_alias("loop_delete {id}", caller_session_id=caller)
    return {"deleted": True, "loop_id": services.loop_delete(loop_id=loop_id)}


class RunsQuery(Schema):
    limit: Annotated[int, Field(ge=1, le=500)] = 50


class UpcomingQuery(Schema):
    count: Annotated[int, Field(ge=1, le=500)] = 5


@loops_router.get("/{loop_id}/runs", response=answers(RunsOut, 404), exclude_none=True)
def runs(request, loop_id: str, query: Query[RunsQuery]):
    """Run history, newest first; it outlives the loop."""
    return {"runs": [run_view(run) for run in loop_runs(loop_id, limit=query.limit)]}


@loops_router.get("/{loop_id}/upcoming", response=answers(UpcomingOut, 404))
def upcoming(request, loop_id: str, query: Query[UpcomingQuery]):
    """The next fire times the scheduler will use (the same schedule code)."""
    times = fire_times(loop_get(loop_id), now=timezone.now(), count=query.count)
    return {"fire_times": [to_ms(moment) for moment in times]}
