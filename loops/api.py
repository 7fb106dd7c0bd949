"""Loop extras (contract §4: run history, upcoming fire times; scope `tools`) and the operator API
(contract §9: pause, resume, run now, edit, retry, events; scope `manage`). Thin: parse, call,
present. The loop tools themselves are in tools/."""

from __future__ import annotations

from typing import Annotated

from django.utils import timezone
from ninja import Query, Router, Schema, Status
from pydantic import Field

from core.schemas import answers
from core.timeutil import to_ms
from loops.events import Actor, loop_events
from loops.models import ActorKind
from loops.presenters import event_view, loop_detail_view, run_view
from loops.schemas import EventsOut, LoopDetail, LoopPatchIn, RunsOut, RunView, UpcomingOut
from loops.selectors import fire_times, loop_get, loop_runs
from loops.services import edit, lifecycle
from tokens.auth import manage_auth, tools_auth

loops_router = Router(auth=tools_auth, tags=["loops"])
manage_router = Router(auth=manage_auth, tags=["operate"])


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
    """The next fire times the scheduler will use (the same schedule code): for a cron loop under
    DSHLOOP_CRON_JITTER_SECONDS, the delayed times its runs are delivered at; they stop at the loop's
    end (ends_at, and the runs max_runs leaves it)."""
    times = fire_times(loop_get(loop_id), now=timezone.now(), count=query.count)
    return {"fire_times": [to_ms(moment) for moment in times]}


# -- contract §9: operating loops (scope `manage`) ---------------------------------------------------


def token_actor(request) -> Actor:
    """The audit trail names the operator API's caller by its token's name."""
    return Actor(ActorKind.TOKEN, request.auth.name)


def detail(loop) -> dict:
    return loop_detail_view(loop, now=timezone.now())


class EventsQuery(Schema):
    limit: Annotated[int, Field(ge=1, le=500)] = 50


@manage_router.get("/{loop_id}", response=answers(LoopDetail, 404), exclude_unset=True)
def loop_detail(request, loop_id: str):
    """A loop with its operators' fields: name, revision, pause state, consecutive failures."""
    return detail(loop_get(loop_id))


@manage_router.patch("/{loop_id}", response=answers(LoopDetail, 404, 409), exclude_unset=True)
def loop_patch(request, loop_id: str, payload: LoopPatchIn):
    """Edit any of name, prompt, schedule, session_id and preset (validated as loop_create), and
    where the loop ends (ends_at, max_runs; null clears one, a bound already passed is 422
    invalid_input on its field); the revision goes up by one. A new schedule or target recomputes
    next_at from now. A loop left with no occurrence before its end is completed (event `ended`).

    A completed loop (a one-shot that fired) cannot be edited: 409 loop_completed (it has no
    occurrence left, and re-arming it would fire a one-shot twice); create a new loop to run it
    again. A failed loop given a new schedule or
    session_id is scheduled again from now; a new prompt or name alone leaves it failed, and
    POST …/retry fires it with them."""
    return detail(edit.loop_edit_from(loop_id, payload, actor=token_actor(request)))


@manage_router.post("/{loop_id}/pause", response=answers(LoopDetail, 404, 409), exclude_unset=True)
def loop_pause(request, loop_id: str):
    """Never claimed until resumed (state "paused", no next_at); a run in flight finishes. Idempotent.
    Occurrences that were due and not yet claimed (waiting for a free slot) are recorded as one
    skipped run, counted in missed. A completed loop cannot be paused: 409 loop_completed, as PATCH."""
    return detail(lifecycle.loop_pause(loop_id=loop_id, actor=token_actor(request)))


@manage_router.post("/{loop_id}/resume", response=answers(LoopDetail, 404), exclude_unset=True)
def loop_resume(request, loop_id: str):
    """Scheduled from now: the first occurrence strictly after now; a one-shot already due fires once."""
    return detail(lifecycle.loop_resume(loop_id=loop_id, actor=token_actor(request)))


@manage_router.post("/{loop_id}/run", response={202: RunView, **answers(RunView, 404, 409)}, exclude_none=True)
def loop_run(request, loop_id: str):
    """One manual occurrence now (manual: true); next_at does not move; 409 run_in_flight while one is open."""
    return Status(202, run_view(lifecycle.loop_run_now(loop_id=loop_id, actor=token_actor(request))))


@manage_router.post("/{loop_id}/retry", response=answers(LoopDetail, 404, 409), exclude_unset=True)
def loop_retry(request, loop_id: str):
    """A failed loop fires once, now; any other loop is 409 not_failed."""
    return detail(lifecycle.loop_retry(loop_id=loop_id, actor=token_actor(request)))


@manage_router.get("/{loop_id}/events", response=answers(EventsOut, 404), exclude_none=True)
def loop_events_list(request, loop_id: str, query: Query[EventsQuery]):
    """The audit trail, newest first; it outlives the loop."""
    return {"events": [event_view(event) for event in loop_events(loop_id, limit=query.limit)]}
