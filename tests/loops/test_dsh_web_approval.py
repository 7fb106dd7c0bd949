"""contract §14 through DSH Web: the DSH plugin's token calls the operator API for DSH Web's Loops
panel, on a channel any local process can call (an agent's bash included), so with
DSHLOOP_APPROVE_AGENT_NEW_LOOPS on its `new` loops, made or widened, await approval as an agent's do,
and it can neither approve nor run one that awaits it; an operator's own token, or dshloop's panel,
can. DSHLOOP_TRUST_DSH_WEB=1 takes DSH Web as a person's again. The real channel:
tests/dsh_plugin/test_channel_forgery.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine

from loops.models import AWAITING_APPROVAL, Loop, LoopEvent, LoopRun, LoopState
from tests.conftest import T0, ApiClient
from tokens.models import PLUGIN_TOKEN_NAME
from tokens.services import token_create

EVERY_10_MINUTES = {"kind": "every", "every_seconds": 600}


class DshWeb(ApiClient):
    """The DSH plugin's calls for DSH Web's Loops panel (dsh-plugin/src/panel.ts): its token, and
    X-Dshloop-Via: DSH Web."""

    def headers(self, session_id: str | None = None) -> dict:
        return {**super().headers(session_id), "X-Dshloop-Via": "DSH Web"}

    def patch(self, path: str, body: dict):
        return self.client.patch(path, data=json.dumps(body), content_type="application/json", headers=self.headers())


@pytest.fixture
def dsh_web(db) -> DshWeb:
    return DshWeb(token_create(name=PLUGIN_TOKEN_NAME, scopes=["tools", "manage"])[1])


@pytest.fixture
def approval_on(settings):
    settings.DSHLOOP_APPROVE_AGENT_NEW_LOOPS = True


def create(client: ApiClient, session_id: str = "new", schedule: dict = EVERY_10_MINUTES) -> dict:
    with time_machine.travel(T0, tick=False):
        response = client.post("/api/loops", {"prompt": "Triage", "schedule": schedule, "session_id": session_id})
    assert response.status_code == 201, response.content
    return response.json()


def held(loop_id: str) -> bool:
    loop = Loop.objects.get(loop_id=loop_id)
    return (loop.state, loop.pause_reason, loop.next_at) == (LoopState.PAUSED, AWAITING_APPROVAL, None)


def test_a_new_loop_made_in_dsh_web_awaits_approval_like_an_agents(dsh_web, manage_api, approval_on, make_session):
    view = create(dsh_web)
    assert view["state"] == "paused" and held(view["loop_id"])
    # An operator's own token is a person's, and loops into an existing session never wait.
    assert create(manage_api)["state"] == "scheduled"
    make_session("ses_target", status="idle")
    assert create(dsh_web, session_id="ses_target")["state"] == "scheduled"


def test_with_the_approval_off_dsh_webs_new_loops_run(dsh_web, host):
    assert create(dsh_web)["state"] == "scheduled"


def test_dsh_web_can_neither_approve_nor_run_a_loop_awaiting_approval(dsh_web, manage_api, approval_on):
    loop_id = create(dsh_web)["loop_id"]

    for action in ("resume", "run"):
        refused = dsh_web.post(f"/api/loops/{loop_id}/{action}")
        assert refused.status_code == 403, refused.content
        assert refused.json()["error"]["code"] == "forbidden"
        assert "dshloop's own panel" in refused.json()["error"]["message"]
    assert held(loop_id) and not LoopRun.objects.filter(loop_id=loop_id).exists()

    approved = manage_api.post(f"/api/loops/{loop_id}/resume")
    assert approved.status_code == 200 and approved.json()["state"] == "scheduled"
    kinds = list(LoopEvent.objects.filter(loop_id=loop_id).order_by("id").values_list("kind", "actor_id"))
    assert kinds == [("created", "dsh-plugin via DSH Web"), ("approved", "ops")]
    # What is not an approval stays DSH Web's to do: pause, resume, run now.
    assert dsh_web.post(f"/api/loops/{loop_id}/pause").status_code == 200
    assert dsh_web.post(f"/api/loops/{loop_id}/resume").json()["state"] == "scheduled"
    assert dsh_web.post(f"/api/loops/{loop_id}/run").status_code == 202


def test_widening_a_new_loop_in_dsh_web_puts_it_back_to_await_approval(dsh_web, manage_api, approval_on, make_session):
    approved = create(manage_api)["loop_id"]
    longer = dsh_web.patch(f"/api/loops/{approved}", {"schedule": {"kind": "every", "every_seconds": 900}})
    assert longer.json()["state"] == "scheduled"  # less often: nothing new to approve
    shorter = dsh_web.patch(f"/api/loops/{approved}", {"schedule": {"kind": "every", "every_seconds": 300}})
    assert shorter.status_code == 200 and shorter.json()["state"] == "paused" and held(approved)
    events = list(LoopEvent.objects.filter(loop_id=approved).order_by("id").values_list("kind", flat=True))
    assert events[-2:] == ["edited", "paused"]
    assert dsh_web.post(f"/api/loops/{approved}/resume").status_code == 403

    make_session("ses_target", status="idle")
    into_session = create(dsh_web, session_id="ses_target")["loop_id"]
    becoming_new = dsh_web.patch(f"/api/loops/{into_session}", {"session_id": "new"})
    assert becoming_new.status_code == 200, becoming_new.content
    assert held(into_session)

    # A person's own edits are theirs to make.
    mine = create(manage_api)["loop_id"]
    edited = manage_api.client.patch(
        f"/api/loops/{mine}",
        data=json.dumps({"schedule": {"kind": "every", "every_seconds": 300}}),
        content_type="application/json",
        headers=manage_api.headers(),
    )
    assert edited.json()["state"] == "scheduled"


def test_a_one_shot_made_recurring_is_a_widening(dsh_web, manage_api, approval_on):
    loop_id = create(manage_api, schedule={"kind": "after", "after_seconds": 3600})["loop_id"]
    with time_machine.travel(T0 + timedelta(seconds=1), tick=False):
        response = dsh_web.patch(f"/api/loops/{loop_id}", {"schedule": EVERY_10_MINUTES})
    assert response.status_code == 200, response.content
    assert held(loop_id)


def test_an_operator_may_take_dsh_web_as_a_persons(dsh_web, approval_on, settings):
    settings.DSHLOOP_TRUST_DSH_WEB = True
    assert create(dsh_web)["state"] == "scheduled"
    settings.DSHLOOP_TRUST_DSH_WEB = False
    loop_id = create(dsh_web)["loop_id"]
    settings.DSHLOOP_TRUST_DSH_WEB = True
    assert dsh_web.post(f"/api/loops/{loop_id}/resume").json()["state"] == "scheduled"


@pytest.mark.parametrize(
    ("change", "held_after"),
    [
        ({"prompt": "Delete the old branches"}, True),
        ({"permission_preset": "workspace-write"}, True),
        ({"overlap": "allow"}, True),
        ({"max_runs": None}, True),
        ({"max_runs": 3}, False),
        ({"name": "Triage"}, False),
    ],
)
def test_what_an_approval_covered_is_widened_by_any_change_to_what_runs_or_how_much(
    dsh_web, manage_api, approval_on, change, held_after
):
    loop_id = create(manage_api)["loop_id"]
    start = {"overlap": "skip", "max_runs": 5}
    bounded = manage_api.client.patch(
        f"/api/loops/{loop_id}", data=json.dumps(start), content_type="application/json", headers=manage_api.headers()
    )
    assert bounded.status_code == 200, bounded.content
    response = dsh_web.patch(f"/api/loops/{loop_id}", change)
    assert response.status_code == 200, response.content
    assert held(loop_id) is held_after
