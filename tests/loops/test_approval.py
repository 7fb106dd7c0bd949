"""contract §14 approval: with DSHLOOP_APPROVE_AGENT_NEW_LOOPS on, a `new` loop an agent creates
starts paused, "awaiting approval"; an operator's resume runs it and is recorded as an approval
(event kind `approved`, with the approving user or token). The panel's Approve: tests/panel/test_approve.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine

from loops.models import AWAITING_APPROVAL, Loop, LoopEvent, LoopState
from scheduler.claims import claim_due
from tests.conftest import T0, ApiClient

EVERY_10_MINUTES = {"kind": "every", "every_seconds": 600}


@pytest.fixture
def approval_on(settings):
    settings.DSHLOOP_APPROVE_AGENT_NEW_LOOPS = True


def create(api: ApiClient, session_id: str = "new") -> dict:
    with time_machine.travel(T0, tick=False):
        response = api.tool(
            "loop_create", {"prompt": "Triage the new issues", "schedule": EVERY_10_MINUTES, "session_id": session_id}
        )
    assert response.status_code == 200, response.content
    return response.json()


def events(loop_id: str) -> list[tuple[str, str, str]]:
    return list(
        LoopEvent.objects.filter(loop_id=loop_id).order_by("at", "id").values_list("kind", "actor_kind", "actor_id")
    )


def test_an_agents_new_loop_waits_paused_for_approval_and_is_never_claimed(api, approval_on):
    view = create(api)
    assert view["state"] == "paused" and "next_at" not in view
    loop = Loop.objects.get(loop_id=view["loop_id"])
    assert (loop.state, loop.pause_reason, loop.paused_at, loop.next_at) == (
        LoopState.PAUSED,
        AWAITING_APPROVAL,
        T0,
        None,
    )
    assert events(loop.loop_id) == [("created", "session", "ses_caller")]
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        assert claim_due(now=T0 + timedelta(hours=2)) == []


def test_an_operators_resume_through_the_api_is_recorded_as_the_tokens_approval(api, approval_on, manage_api):
    loop_id = create(api)["loop_id"]
    approved_at = T0 + timedelta(minutes=25)
    with time_machine.travel(approved_at, tick=False):
        response = manage_api.post(f"/api/loops/{loop_id}/resume")
    assert response.status_code == 200, response.content
    detail = response.json()
    # Its grid counts from creation: the first point after the approval, not a burst of the missed ones.
    assert detail["state"] == "scheduled" and detail["next_at"] == int((T0 + timedelta(minutes=30)).timestamp() * 1000)
    assert "pause_reason" not in detail
    assert events(loop_id) == [("created", "session", "ses_caller"), ("approved", "token", "ops")]
    # A later pause and resume is an ordinary one.
    manage_api.post(f"/api/loops/{loop_id}/pause")
    manage_api.post(f"/api/loops/{loop_id}/resume")
    assert [kind for kind, _, _ in events(loop_id)][-2:] == ["paused", "resumed"]


def test_only_an_agents_new_loops_wait(api, approval_on, make_session):
    make_session("ses_target", status="idle")
    assert create(api, session_id="ses_target")["state"] == "scheduled"
    assert create(api, session_id="ses_caller")["state"] == "scheduled"


def test_off_by_default(api):
    assert create(api)["state"] == "scheduled"


def test_the_event_kind_is_in_the_api_and_its_schema(api, approval_on, manage_api):
    loop_id = create(api)["loop_id"]
    manage_api.post(f"/api/loops/{loop_id}/resume")
    body = manage_api.get(f"/api/loops/{loop_id}/events").json()
    assert body["events"][0]["kind"] == "approved"
    schema = json.dumps(manage_api.get("/api/openapi.json").json())
    assert '"approved"' in schema
