"""The host's side of delivery (contract §10, scope `host`): how a delivered turn ended."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from core.schemas import answers
from loops.history_schemas import OutcomeIn, RunView
from loops.presenters import run_view
from scheduler import outcomes
from tokens.auth import host_auth

host_runs_router = Router(auth=host_auth, tags=["host"])


@host_runs_router.post("/runs/{run_id}/outcome", response=answers(RunView, 404, 409), exclude_none=True)
def run_outcome(request: HttpRequest, run_id: str, payload: OutcomeIn) -> dict[str, object]:
    """Record how the turn a delivery started ended: the delivered message's `source.run_id` names
    the run. The same outcome again answers 200 and changes nothing (the first summary stays); a
    different one is 409 outcome_recorded. A `failed` outcome counts as a failure of its loop
    (backoff, auto-pause); `succeeded` and `cancelled` (someone's decision) end the streak."""
    run = outcomes.record_outcome(
        run_id=run_id, status=payload.status, summary=payload.summary or "", error=payload.error or ""
    )
    return run_view(run)
