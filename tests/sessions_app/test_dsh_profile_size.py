"""What one delivery, one tool call's caller check and one status cost in a real DSH whose profile
holds many sessions: the DSH calls are counted, and none may list the whole profile (`session.list`
answers every session with its projections, and a profile only grows; STYLE §25). Also: a batch's
deliveries into distinct sessions go to DSH side by side, each still once, in order per session."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.utils import timezone

from loops.models import LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from scheduler.message import loop_message
from sessions_app.hosts import get_host
from sessions_app.hosts.base import Delivered, Message
from tests.conftest import ApiClient, every

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

PROFILE = 200  # sessions in the profile besides the ones a test delivers into


@pytest.fixture
def on_dsh(dsh, settings, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL, settings.DSHLOOP_DSH_CWD = "dsh", dsh.url, str(work)
    with ThreadPoolExecutor(8) as pool:  # DSH takes creates side by side: the profile in seconds
        list(
            pool.map(
                lambda n: dsh.call("session.create", {"sessionId": f"other-{n}", "cwd": str(work)}), range(PROFILE)
            )
        )
    return dsh, work


def test_a_delivery_a_caller_check_and_a_status_never_list_the_profile(on_dsh, dsh_calls, tools_token):
    real, work = on_dsh
    real.call("session.create", {"sessionId": "target", "cwd": str(work)})
    api = ApiClient(tools_token, session_id="target")

    made = api.tool("loop_create", {"prompt": "Check the deploy", "schedule": every(60)})
    assert made.status_code == 200, made.content
    assert dsh_calls["session.list"] == 0, f"loop_create's caller check listed the profile: {dsh_calls}"
    for _ in range(3):
        listed = api.tool("loop_list", {})  # what DSH Web's composer status asks, every few seconds
        assert listed.status_code == 200 and len(listed.json()["loops"]) == 1
    status = api.tool("check_session_status", {"session_id": "target"})
    assert status.status_code == 200 and status.json()["status"] == "idle", status.content
    assert dsh_calls["session.list"] == 0, f"a status listed the profile: {dsh_calls}"
    # subagent.list reads every persisted session's header in rc.8: asked once, then not again.
    assert dsh_calls["subagent.list"] <= 1, dsh_calls

    real.restart()  # nothing is attached any more: the status says so, whatever was seen before
    status = api.tool("check_session_status", {"session_id": "target"})
    assert status.status_code == 200 and status.json()["status"] == "cold", status.content

    dsh_calls.clear()
    run_ids = claim_due(now=timezone.now() + timedelta(seconds=61))
    assert deliver_runs(run_ids) == 1
    run = LoopRun.objects.get(run_id=run_ids[0])
    assert run.status == RunStatus.DELIVERED, run.error
    assert len(real.user_messages("target", rpc_id=run.occurrence_key)) == 1
    assert dsh_calls["session.list"] == 0, f"a delivery listed the profile: {dsh_calls}"
    # A handful of calls about this one session (look-up, log, prompt, confirmation polls), whatever
    # the profile holds: far from one per session.
    assert sum(dsh_calls.values()) < 40, dsh_calls


def test_a_batch_goes_side_by_side_into_distinct_sessions_once_each_in_order_per_session(on_dsh):
    real, work = on_dsh
    targets = [f"batch-{n}" for n in range(6)]
    for session_id in targets:
        real.call("session.create", {"sessionId": session_id, "cwd": str(work)})
    host = get_host()
    messages = [
        Message(
            session_id, loop_message(loop_id="loop_b", prompt=f"{session_id} #{n}"), source, source["occurrence_key"]
        )
        for n in range(2)
        for session_id in targets
        for source in [{"kind": "loop", "loop_id": "loop_b", "run_id": "r", "occurrence_key": f"{session_id}@{n}"}]
    ]

    results = host.deliver_many(messages)

    assert all(isinstance(result, Delivered) for result in results), results
    for session_id in targets:
        keys = [m["data"]["source"]["rpcId"] for m in real.user_messages(session_id)]
        assert keys == [f"{session_id}@0", f"{session_id}@1"]  # each once, in the batch's order
    assert host.deliver_many(messages[:3]) == results[:3]  # again: found in DSH, not sent twice
    assert [len(real.user_messages(session_id)) for session_id in targets] == [2] * len(targets)
