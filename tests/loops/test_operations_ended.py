"""Editing a one-shot that has ended (contract §9 PATCH; the panel's edit form calls the same
operation). A completed loop is refused (409 loop_completed; pause answers the same): it
has no occurrence left, and an edit would record a change that never runs. A failed loop is retryable (spec §4): a new schedule
or target schedules it again from now; a new prompt or name alone leaves it failed, for a retry."""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine
from django.test import Client

from core.timeutil import to_ms
from loops.models import Loop, LoopEvent, LoopRun, LoopState
from panel.edit_forms import initial_for
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from tests.conftest import T0, after, error_of, every, s
from tests.panel.test_create import form


def claim(at: datetime) -> list[str]:
    with time_machine.travel(at, tick=False):
        return claim_due(now=at)


def deliver(run_ids: list[str], at: datetime) -> None:
    with time_machine.travel(at, tick=False):
        deliver_runs(run_ids, now=at)


@pytest.fixture
def completed(make):
    """A one-shot that fired: delivered, so completed."""
    loop_id = make(after(30))["loop_id"]
    deliver(claim(T0 + s(30)), T0 + s(31))
    assert Loop.objects.get(loop_id=loop_id).state == LoopState.COMPLETED
    return loop_id


@pytest.fixture
def failed(make, settings):
    """A one-shot that failed: claimed beyond the misfire grace, so not delivered (retryable)."""
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = 10
    loop_id = make(after(30))["loop_id"]
    assert claim(T0 + s(300)) == []  # nothing handed out: its run is recorded skipped
    assert LoopRun.objects.get(loop_id=loop_id).status == "skipped"
    assert Loop.objects.get(loop_id=loop_id).state == LoopState.FAILED
    return loop_id


@pytest.mark.parametrize("body", [{"schedule": after(60)}, {"prompt": "Check it again"}, {"name": "Deploy"}])
def test_an_edit_of_a_completed_one_shot_is_refused_with_409_and_changes_nothing(completed, ops, body):
    before = ops("GET", completed).json()

    refused = ops("PATCH", completed, body=body, at=T0 + s(100))
    paused = ops("POST", completed, "pause", at=T0 + s(100))

    assert (refused.status_code, paused.status_code) == (409, 409)
    error = error_of(refused)
    assert (error["code"], error["field"]) == ("loop_completed", "loop_id")
    assert error["message"] == (
        f"{completed} is completed: it has no occurrence left to edit. Create a new loop (loop_create) to run it again."
    )
    assert error_of(paused) == {
        "code": "loop_completed",
        "field": "loop_id",
        "message": f"{completed} is completed: it has no occurrence left to pause. Create a new loop (loop_create) "
        "to run it again.",
    }
    assert ops("GET", completed).json() == before  # revision 1, completed, no next_at
    assert list(LoopEvent.objects.filter(loop_id=completed).values_list("kind", flat=True)) == ["created"]


def test_the_panel_refuses_to_edit_a_completed_one_shot_with_the_same_message(completed, django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user("ada", is_staff=True))
    loop = Loop.objects.get(loop_id=completed)
    data = form(**{key: "" if value is None else str(value) for key, value in initial_for(loop).items()})
    data["prompt"] = "Check it again"

    response = client.post(f"/panel/loops/{completed}/edit", data)

    assert response.status_code == 422  # the panel's answer to any refused form
    assert f"{completed} is completed: it has no occurrence left to edit." in response.content.decode()
    assert Loop.objects.get(loop_id=completed).revision == 1


@pytest.mark.parametrize("body", [{"schedule": after(60)}, {"session_id": "ses_other"}])
def test_a_new_schedule_or_target_schedules_a_failed_one_shot_again_from_now(failed, ops, make_session, body):
    make_session("ses_other", status="idle")

    edited = ops("PATCH", failed, body=body, at=T0 + s(400))

    assert edited.status_code == 200, edited.content
    detail = edited.json()
    fires_at = T0 + s(400 + (60 if "schedule" in body else 30))  # the (new) schedule, from the edit
    assert (detail["state"], detail["revision"], detail["next_at"]) == ("scheduled", 2, to_ms(fires_at))
    assert claim(fires_at - s(1)) == []
    [run_id] = claim(fires_at)
    deliver([run_id], fires_at)
    run = LoopRun.objects.get(run_id=run_id)
    assert (run.revision, run.status) == (2, "delivered")
    assert Loop.objects.get(loop_id=failed).state == LoopState.COMPLETED


def test_a_new_prompt_alone_leaves_a_failed_one_shot_failed_and_a_retry_fires_it(failed, ops):
    edited = ops("PATCH", failed, body={"prompt": "Check it again"}, at=T0 + s(400))

    assert edited.status_code == 200, edited.content
    assert (edited.json()["state"], edited.json()["revision"], "next_at" in edited.json()) == ("failed", 2, False)
    assert claim(T0 + s(3600)) == []
    assert ops("POST", failed, "retry", at=T0 + s(3600)).status_code == 200
    [run_id] = claim(T0 + s(3600))
    assert LoopRun.objects.get(run_id=run_id).prompt == "Check it again"


def test_a_failed_recurring_loop_is_scheduled_again_by_a_new_schedule(make, ops):
    """A recurring loop fails when its schedule cannot be computed; a new one is the fix."""
    loop_id = make(every(60))["loop_id"]
    Loop.objects.filter(loop_id=loop_id).update(state=LoopState.FAILED, next_at=None, last_result="failed")

    edited = ops("PATCH", loop_id, body={"schedule": every(120)}, at=T0 + s(1000))

    assert (edited.json()["state"], edited.json()["next_at"]) == ("scheduled", to_ms(T0 + s(1120)))
