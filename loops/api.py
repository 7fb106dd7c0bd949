"""Read-only loop extras (contract §4): run history and upcoming fire times. Thin: parse, call,
present. The loop tools themselves are in tools/."""

from __future__ import annotations

from typing import Annotated

from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from dshloop.auth import tools_auth
from dshloop.schemas import answers
from dshloop.timeutil import to_ms

from .presenters import run_view
from .schemas import RunsOut, UpcomingOut
from .selectors import fire_times, loop_get, loop_runs

loops_router = Router(auth=tools_auth, tags=["loops"])


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
