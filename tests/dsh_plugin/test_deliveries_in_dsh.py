"""Deliveries through the plugin in a real DSH (contract §15): each occurrence is one message with
dshloop's plugin source and its occurrence key, never a second one, whatever is retried or restarted.

The scheduler-level test runs a real `serve` (its `runloops`) on DSHLOOP_HOST=dsh; the retry and
restart cases drive the `dsh` adapter directly, at the moments a killed scheduler or a stopped DSH
leaves behind, which real time could only hit by chance.
"""

from __future__ import annotations

import json
import time

import pytest

from loops.models import LoopRun, RunStatus
from sessions_app.hosts.base import HostError, Message
from sessions_app.hosts.dsh import DshHost
from sessions_app.hosts.dsh_plugin import Abilities
from tests.conftest import after, create_loop, every
from tests.processes import wait_for
from tests.stub_model import text_of

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]


def delivered(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id, status=RunStatus.DELIVERED).order_by("scheduled_at"))


def message_for(session_id: str, key: str, **fields) -> Message:
    loop_id = key.split("@")[0]
    source = {"kind": "loop", "loop_id": loop_id, "run_id": f"run_{key}", "occurrence_key": key, "scheduled_at": 0}
    return Message(session_id, f"<loop><loop_id>{loop_id}</loop_id></loop>", source, key, **fields)


def test_each_occurrence_is_one_plugin_message_also_into_a_cold_session(plugin_dsh, dshloop, workspace, settings):
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url  # what `serve` runs on
    plugin_dsh.call("session.create", {"sessionId": "ses-cards", "cwd": str(workspace)})
    loop = create_loop(every(2), target="ses-cards", created_by="ses-cards", prompt="Check the build and report")

    wait_for(lambda: len(delivered(loop.loop_id)) >= 2, timeout=40, message="two deliveries")
    plugin_dsh.restart()  # every session is now cold: the next delivery loads it first
    assert not plugin_dsh.attached("ses-cards")
    before = len(delivered(loop.loop_id))
    wait_for(lambda: len(delivered(loop.loop_id)) >= before + 2, timeout=40, message="two deliveries after a restart")

    for run in delivered(loop.loop_id):
        [message] = plugin_dsh.loop_messages("ses-cards", key=run.occurrence_key)
        source = message["data"]["source"]
        assert source["form"] == "notice" and source["summary"] == "Check the build and report"
        assert source["loop"] == {"loop_id": loop.loop_id, "run_id": run.run_id}
        assert f"<loop_id>{loop.loop_id}</loop_id>" in message["data"]["content"][0]["text"]
    # Nothing of dshloop's looks like something the person typed.
    assert not [m for m in plugin_dsh.user_messages("ses-cards") if loop.loop_id in str(m["data"])]


def test_a_delivery_retried_after_its_scheduler_died_makes_no_second_message(plugin_dsh, dshloop, workspace):
    plugin_dsh.call("session.create", {"sessionId": "ses-retry", "cwd": str(workspace)})
    host = DshHost(plugin_dsh.url, cwd=str(workspace))
    message = message_for("ses-retry", "loop_retry@1000", summary="retry")

    # A scheduler killed after the plugin sent the message, before it recorded anything: its lease
    # runs out and another driver delivers the same occurrence again.
    host.plugin.deliver(message)
    [result] = host.deliver_many([message])
    [again] = host.deliver_many([message])

    assert not isinstance(result, HostError) and not isinstance(again, HostError)
    assert result.message_id == again.message_id
    assert len(plugin_dsh.loop_messages("ses-retry", key="loop_retry@1000")) == 1


def test_a_delivery_pending_when_dsh_stops_is_not_delivered_and_is_delivered_after_the_restart(
    plugin_dsh, dshloop, workspace
):
    plugin_dsh.call("session.create", {"sessionId": "ses-pending", "cwd": str(workspace)})
    host = DshHost(plugin_dsh.url, cwd=str(workspace))
    # A turn that runs for a while: the delivery joins it at its next step, and waits meanwhile.
    plugin_dsh.call(
        "session.prompt", {"sessionId": "ses-pending", "mode": "queue", "content": [{"type": "text", "text": "SLOW30"}]}
    )
    wait_for(lambda: plugin_dsh.sessions()["ses-pending"]["running"], timeout=15, message="the slow turn")
    message = message_for("ses-pending", "loop_pending@1000")

    [pending] = host.deliver_many([message])  # waits out its confirmation: still in DSH's inbox
    assert isinstance(pending, HostError) and pending.transient and "inbox" in str(pending), pending
    plugin_dsh.restart()  # DSH cancels what its inbox still held
    assert plugin_dsh.loop_messages("ses-pending", key="loop_pending@1000") == []

    host.resume_session("ses-pending")  # as resolve_target does with a cold target
    started = time.monotonic()
    [result] = host.deliver_many([message])
    assert not isinstance(result, HostError), result
    assert time.monotonic() - started < 15
    assert len(plugin_dsh.loop_messages("ses-pending", key="loop_pending@1000")) == 1


def test_without_the_plugin_dshloop_still_delivers_with_session_prompt(dsh, workspace):
    dsh.call("session.create", {"sessionId": "ses-plain", "cwd": str(workspace)})
    host = DshHost(dsh.url, cwd=str(workspace))

    [result] = host.deliver_many([message_for("ses-plain", "loop_plain@1000")])

    assert not isinstance(result, HostError), result
    [message] = dsh.user_messages("ses-plain", rpc_id="loop_plain@1000")
    assert message["data"]["source"]["kind"] == "user"


def offered_tools(stub_model, loop_id: str) -> set[str] | None:
    """The tool names of the first model request that carried the loop's message (None: none yet)."""
    for body in stub_model.requests():
        request = json.loads(body)
        if any(f"<loop_id>{loop_id}</loop_id>" in text_of(m.get("content")) for m in request.get("messages", [])):
            return {tool["function"]["name"] for tool in request.get("tools", [])}
    return None


@pytest.mark.parametrize("may_create", [False, True])
def test_a_fresh_run_is_offered_loop_making_tools_only_when_the_operator_allows(
    plugin_dsh, dshloop, workspace, stub_model, settings, tmp_path, may_create
):
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url
    if may_create:
        dshloop.stop()
        dshloop.env = {**dshloop.env, "DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS": "1"}
        dshloop.start()
    plugin_dsh.call("session.create", {"sessionId": f"ses-maker-{may_create}", "cwd": str(workspace)})
    loop = create_loop(after(1), target="new", created_by=f"ses-maker-{may_create}", prompt="Unattended check")

    wait_for(lambda: delivered(loop.loop_id), timeout=40, message="the fresh run's delivery")
    offered = wait_for(lambda: offered_tools(stub_model, loop.loop_id), timeout=20, message="the fresh turn")

    assert {"loop_list", "list_sessions", "check_session_status"} <= offered
    making = {"loop_create", "loop_delete"} & offered
    assert making == ({"loop_create", "loop_delete"} if may_create else set()), offered


def test_a_plugin_that_does_not_confirm_is_delivered_through_with_the_history_read_back(plugin_dsh, dshloop, workspace):
    """An older plugin (its hello without `confirm`, e.g. DSH not yet restarted after an upgrade):
    the log is read before the ring and after it, as without the plugin, and nothing is sent twice."""
    plugin_dsh.call("session.create", {"sessionId": "ses-older", "cwd": str(workspace)})
    host = DshHost(plugin_dsh.url, cwd=str(workspace))
    host.plugin._abilities = Abilities(deliver=True)
    host.plugin._checked_at = time.monotonic() + 3600  # not asked again during the test
    message = message_for("ses-older", "loop_older@1000", summary="older")

    [result] = host.deliver_many([message])
    [again] = host.deliver_many([message])

    assert not isinstance(result, HostError) and not isinstance(again, HostError), (result, again)
    assert result.message_id == again.message_id
    assert len(plugin_dsh.loop_messages("ses-older", key="loop_older@1000")) == 1


def test_what_the_plugin_can_do_is_asked_again_after_a_recheck(plugin_dsh, workspace):
    """A ring answered without a message ID makes the adapter ask `hello` again at its next call
    (DSH may have restarted onto another plugin within the minute it trusts the last answer)."""
    host = DshHost(plugin_dsh.url, cwd=str(workspace))
    host.plugin._abilities = Abilities(deliver=True)
    host.plugin._checked_at = time.monotonic() + 3600
    assert not host.plugin.abilities().confirm  # the answer it holds

    host.plugin.recheck()

    assert host.plugin.abilities() == Abilities(deliver=True, confirm=True, sessions=True)  # the plugin's own
