"""Failures in plain sight against a real DSH (contract §15): a delivered loop message whose turn the
model refuses (the stub's FAILNOW) makes loop_list say `last_result: "failed"` with DSH's error,
once the outcome watch has read the turn's end; the loop's next turn, which succeeds, clears it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from loops.events import Actor
from loops.models import LoopRun, RunStatus
from loops.services.edit import loop_edit
from scheduler.claims import claim_due
from scheduler.delivery import deliver_run
from scheduler.outcome_watch import poll_outcomes
from tests.conftest import ApiClient, create_loop, every
from tests.dsh import DshHost as RealDsh
from tests.processes import wait_for

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

SESSION = "fail-then-ok"


@pytest.fixture
def on_dsh(modelled, settings, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL, settings.DSHLOOP_DSH_CWD = "dsh", modelled.url, str(work)
    modelled.call("session.create", {"sessionId": SESSION, "cwd": str(work)})
    return modelled


def turn_ended(real: RealDsh, key: str) -> bool:
    events = real.history(SESSION)
    [start] = [e["seq"] for e in events if e["type"] == "user/message" and e["data"]["source"].get("rpcId") == key]
    return any(e["type"] == "turn/end" and e["seq"] > start for e in events)


def fire_and_read_outcome(real: RealDsh, *, claim_at) -> LoopRun:
    """The loop's next occurrence claimed (as of `claim_at`) and delivered into DSH, its turn run by
    the stub model, and its end read back by the outcome watch."""
    [run_id] = claim_due(now=claim_at)
    assert deliver_run(run_id) is True
    run = LoopRun.objects.get(run_id=run_id)
    assert run.status == RunStatus.DELIVERED
    wait_for(lambda: turn_ended(real, run.occurrence_key), timeout=30, message="the turn to end")
    assert poll_outcomes() == 1
    run.refresh_from_db()
    return run


def listed(api: ApiClient, loop_id: str) -> dict:
    [view] = [
        loop for loop in api.tool("loop_list", {"session_id": SESSION}).json()["loops"] if loop["loop_id"] == loop_id
    ]
    return view


def test_a_refused_turn_shows_failed_in_loop_list_and_the_next_good_turn_clears_it(on_dsh, tools_token):
    api = ApiClient(tools_token)
    loop = create_loop(every(60), prompt="FAILNOW: the model refuses this one", target=SESSION)

    failed = fire_and_read_outcome(on_dsh, claim_at=timezone.now() + timedelta(seconds=61))
    assert failed.outcome == "failed"
    view = listed(api, loop.loop_id)
    assert view["last_result"] == "failed"
    assert view["last_error"] == failed.error
    assert view["last_error"].startswith("DSH ended the turn with an error") and "stub refuses" in view["last_error"]

    loop_edit(loop_id=loop.loop_id, changes={"prompt": "Check the deployment status"}, actor=Actor.session(None))
    # Past the failure's backoff: the next occurrence, delivered and answered.
    succeeded = fire_and_read_outcome(on_dsh, claim_at=timezone.now() + timedelta(minutes=10))
    assert succeeded.outcome == "succeeded", succeeded.error
    view = listed(api, loop.loop_id)
    assert view["last_result"] == "delivered" and "last_error" not in view
