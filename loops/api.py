"""Loop extras (contract §4: run history, upcoming fire times; scope `tools`) and the operator API
(contract §9: pause, resume, run now, edit, retry, events; scope `manage`). Thin: parse, call,
present. The loop tools themselves are in tools/."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from django.conf import settings
from django.utils import timezone
from ninja import Query, Router, Schema, Status
from pydantic import Field

from core.errors import InvalidInput
from core.schemas import Text, answers
from core.timeutil import to_ms, truncate_to_ms
from loops.events import Actor, loop_events
from loops.filters import TEXT_FILTER_MAX, Filters, filtered_loops
from loops.history_schemas import DeliveredRunsOut, EventsOut, RunsOut, RunView
from loops.models import ActorKind
from loops.presenters import delivered_run_views, event_view, loop_detail_view, run_view
from loops.schemas import (
    LoopCreateIn,
    LoopDeleteOut,
    LoopDetail,
    LoopPageOut,
    LoopPatchIn,
    UpcomingOut,
)
from loops.selectors import fire_times, loop_get, loop_runs, runs_delivered_into
from loops.services import create, edit, lifecycle
from sessions_app.hosts import global_session_id
from sessions_app.models import ReservedTarget
from sessions_app.selectors import sessions_get
from tokens.auth import manage_auth, tools_auth
from tokens.models import PLUGIN_TOKEN_NAME

loops_router = Router(auth=tools_auth, tags=["loops"])
manage_router = Router(auth=manage_auth, tags=["operate"])
runs_router = Router(auth=manage_auth, tags=["operate"])


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


# The client a token acts through, as a caller may add it to the actor's name (DSH's plugin sends
# "DSH Web" for what a person does in DSH Web's Loops panel): a short plain label, nothing to render.
VIA_HEADER = "X-Dshloop-Via"
_VIA = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}")


def token_actor(request) -> Actor:
    """The audit trail names the operator API's caller by its token's name, and, when the caller
    says through which client it acts (X-Dshloop-Via), by both: "dsh-plugin via DSH Web". A label
    that is not a short plain one is left out rather than refused: it only names, never grants."""
    via = request.headers.get(VIA_HEADER, "").strip()
    if _VIA.fullmatch(via):
        return Actor(ActorKind.TOKEN, f"{request.auth.name} via {via}")
    return Actor(ActorKind.TOKEN, request.auth.name)


def vouched(request) -> bool:
    """Whether a person is known to stand behind an operator call (contract §14). Not behind the DSH
    plugin's token: it calls for DSH Web's Loops panel, on a channel of DSH that any local process can
    call (DSH hands the handler no caller, only the request's body), an agent's bash included. Its
    `new` loops then await approval as an agent's do, and it may not approve or run one that awaits
    it, unless the operator says DSH Web is a person's (DSHLOOP_TRUST_DSH_WEB)."""
    return request.auth.name != PLUGIN_TOKEN_NAME or settings.DSHLOOP_TRUST_DSH_WEB


def detail(loop) -> dict:
    return loop_detail_view(loop, now=timezone.now())


class EventsQuery(Schema):
    limit: Annotated[int, Field(ge=1, le=500)] = 50


class LoopPageQuery(Schema):
    state: Literal["", "scheduled", "running", "overdue", "paused", "failed", "last_failed", "completed"] = Field(
        "", description='A state, "last_failed" (the latest finished run failed) or "completed" (history).'
    )
    target: Literal["", "self", "new", "session"] = Field(
        "", description='"self", "new", or "session" for loops targeting an actual session.'
    )
    # Text: no NUL, which PostgreSQL's text cannot hold (a 422 here, never a 500 at the query).
    session: Annotated[str, Text(200)] = Field(
        "", description="One session's loops: what loop_list with that session_id lists."
    )
    q: Annotated[str, Text(TEXT_FILTER_MAX)] = Field(
        "", description="Text in the prompt (any case), or a loop_id exactly."
    )
    limit: Annotated[int, Field(ge=1, le=200)] = 50


@manage_router.get("", response=answers(LoopPageOut), exclude_unset=True)
def loop_page(request, query: Query[LoopPageQuery]):
    """The loops a person's filters select (state, target, session, text; as dshloop's panel filters
    them), the first `limit` in loop_list's order, each as LoopDetail, with their targets' titles.
    One read of the loop index and one of the session headers, whatever the registry's size: what
    DSH Web's Loops panel reads on every refresh."""
    filters = Filters(state=query.state, target=query.target, session=query.session.strip(), q=query.q.strip())
    now = timezone.now()
    loops = list(filtered_loops(filters, now=now, global_session_id=global_session_id())[: query.limit + 1])
    targets = {loop.session_id for loop in loops[: query.limit]} - {ReservedTarget.SELF, ReservedTarget.NEW}
    titles = {sid: info.title for sid, info in sessions_get(targets).items() if info.title} if targets else {}
    return {
        "loops": [loop_detail_view(loop, now=now) for loop in loops[: query.limit]],
        "more": len(loops) > query.limit,
        "titles": titles,
    }


@manage_router.post("", response={201: LoopDetail, **answers(LoopDetail, 409)}, exclude_unset=True)
def loop_create_operated(request, payload: LoopCreateIn):
    """An operator's loop_create (the same input and checks): `session_id` is required, since an
    operator has no session of its own. The creator recorded is the global interface session, as
    for a loop made in dshloop's panel (contract §2); the trail's actor is the token. A `new` loop made
    with the DSH plugin's token awaits approval as an agent's would (vouched)."""
    if payload.session_id is None:
        raise InvalidInput(
            'Name the target: a session ID, "self" or "new" (an operator has no current session).', field="session_id"
        )
    now = truncate_to_ms(timezone.now())
    loop = create.loop_create_from(
        payload,
        target=payload.session_id,
        created_by=create.default_creator(),
        actor=token_actor(request),
        now=now,
        vouched=vouched(request),
    )
    return Status(201, detail(loop))


@manage_router.delete("/{loop_id}", response=answers(LoopDeleteOut, 404), exclude_none=True)
def loop_delete_operated(request, loop_id: str):
    """loop_delete as an operator: the trail names the token, not a session. Runs and events stay."""
    return {"deleted": True, "loop_id": lifecycle.loop_delete(loop_id=loop_id, actor=token_actor(request))}


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
    POST …/retry fires it with them.

    A `new` loop widened with the DSH plugin's token (made `new`; its prompt, preset, workspace or
    permission preset changed; made to fire more often or for longer) awaits approval again, as when
    created so (vouched)."""
    return detail(edit.loop_edit_from(loop_id, payload, actor=token_actor(request), vouched=vouched(request)))


@manage_router.post("/{loop_id}/pause", response=answers(LoopDetail, 404, 409), exclude_unset=True)
def loop_pause(request, loop_id: str):
    """Never claimed until resumed (state "paused", no next_at); a run in flight finishes. Idempotent.
    Occurrences that were due and not yet claimed (waiting for a free slot) are recorded as one
    skipped run, counted in missed. A completed loop cannot be paused: 409 loop_completed, as PATCH."""
    return detail(lifecycle.loop_pause(loop_id=loop_id, actor=token_actor(request)))


@manage_router.post("/{loop_id}/resume", response=answers(LoopDetail, 404), exclude_unset=True)
def loop_resume(request, loop_id: str):
    """Scheduled from now: the first occurrence strictly after now; a one-shot already due fires once.
    The resume of a loop awaiting approval approves it: 403 forbidden with the DSH plugin's token (vouched)."""
    return detail(lifecycle.loop_resume(loop_id=loop_id, actor=token_actor(request), vouched=vouched(request)))


@manage_router.post("/{loop_id}/run", response={202: RunView, **answers(RunView, 404, 409)}, exclude_none=True)
def loop_run(request, loop_id: str):
    """One manual occurrence now (manual: true); next_at does not move; 409 run_in_flight while one is open;
    403 forbidden for a loop awaiting approval with the DSH plugin's token (vouched)."""
    run = lifecycle.loop_run_now(loop_id=loop_id, actor=token_actor(request), vouched=vouched(request))
    return Status(202, run_view(run))


@manage_router.post("/{loop_id}/retry", response=answers(LoopDetail, 404, 409), exclude_unset=True)
def loop_retry(request, loop_id: str):
    """A failed loop fires once, now; any other loop is 409 not_failed. 409 run_in_flight while the
    loop has a run open (a run now of it): retry once that run has finished."""
    return detail(lifecycle.loop_retry(loop_id=loop_id, actor=token_actor(request)))


@manage_router.get("/{loop_id}/events", response=answers(EventsOut, 404), exclude_none=True)
def loop_events_list(request, loop_id: str, query: Query[EventsQuery]):
    """The audit trail, newest first; it outlives the loop."""
    return {"events": [event_view(event) for event in loop_events(loop_id, limit=query.limit)]}


class SessionRunsQuery(Schema):
    session: Annotated[str, Text(200), Field(min_length=1)] = Field(
        description="The session whose delivered runs to list."
    )
    limit: Annotated[int, Field(ge=1, le=100)] = 20


@runs_router.get("", response=answers(DeliveredRunsOut), exclude_none=True)
def session_runs(request, query: Query[SessionRunsQuery]):
    """The runs delivered into one session, newest first: its loops' (self loops too when it is the
    global interface; deleted loops' too, as runs outlive their loop) and the fresh runs that made it.
    Each is a RunView with `loop_deleted` and `loop_name`. What a DSH conversation's Loops tab shows."""
    runs = runs_delivered_into(query.session, global_session_id=global_session_id(), limit=query.limit)
    return {"runs": delivered_run_views(list(runs))}
