"""The five tools inside a real DSH (contract §13): an agent manages its own loops.

The agent is DSH's own, driven by a stub model that calls the tool it is told to (CALLTOOL); the
plugin forwards each call to a real dshloop, whose `runloops` delivers into the same DSH.
"""

from __future__ import annotations

import json
import time
from io import StringIO

import pytest
from django.core.management import call_command

from loops.models import LoopRun, RunStatus
from tests.processes import wait_for
from tests.stub_model import text_of

from .conftest import TOKEN, agent_calls

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]


def delivered(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id, status=RunStatus.DELIVERED).order_by("scheduled_at"))


def test_an_agent_creates_lists_and_deletes_its_own_loop(plugin_dsh, dshloop, workspace, stub_model):
    for session in ("ses-a", "ses-b"):
        plugin_dsh.call("session.create", {"sessionId": session, "cwd": str(workspace)})

    # A's agent asks for a loop without naming a session: the loop is A's, made by A.
    loop = agent_calls(
        plugin_dsh,
        "ses-a",
        "loop_create",
        {"prompt": "Check the deploy", "schedule": {"kind": "every", "every_seconds": 3}},
    ).json()
    assert loop["session_id"] == loop["created_by_session_id"] == "ses-a"

    # It comes back into A's history, once per occurrence, and each run gets its turn's outcome.
    runs = wait_for(
        lambda: len(delivered(loop["loop_id"])) >= 2 and delivered(loop["loop_id"]),
        timeout=40,
        message="two deliveries",
    )
    for run in runs:
        [message] = plugin_dsh.loop_messages("ses-a", key=run.occurrence_key)
        assert loop["loop_id"] in message["data"]["content"][0]["text"]
    wait_for(
        lambda: LoopRun.objects.filter(occurrence_key=runs[0].occurrence_key, outcome="succeeded").exists(),
        timeout=30,
        interval=0.5,
        message="the first run's outcome",
    )

    # B sees none of A's loops as its own; the global list has it.
    assert agent_calls(plugin_dsh, "ses-b", "loop_list", {}).json() == {"loops": []}
    every = agent_calls(plugin_dsh, "ses-b", "loop_list", {"session_id": "global"}).json()["loops"]
    assert [item["loop_id"] for item in every] == [loop["loop_id"]]

    # Invalid input reaches the model as a failed tool result with the contract's code.
    refused = agent_calls(
        plugin_dsh, "ses-b", "loop_create", {"prompt": "x", "schedule": {"kind": "every", "every_seconds": 0}}
    )
    assert refused.is_error and "invalid_input" in refused.text, refused.text

    # A deletes it; A's list is empty again.
    assert agent_calls(plugin_dsh, "ses-a", "loop_delete", {"loop_id": loop["loop_id"]}).json() == {
        "deleted": True,
        "loop_id": loop["loop_id"],
    }
    assert agent_calls(plugin_dsh, "ses-a", "loop_list", {}).json() == {"loops": []}

    # A subagent does not get the tools (DSH keeps a root agent's own registrations to it): its
    # loop_list is an unknown tool, not a call as some other caller.
    delegate = {"description": "list loops", "prompt": "CALLTOOL loop_list {}", "run_in_background": False}
    assert not agent_calls(plugin_dsh, "ses-a", "subagent", delegate).is_error
    tool_texts = [
        text_of(message.get("content"))
        for body in stub_model.requests()
        for message in json.loads(body).get("messages", [])
        if message.get("role") == "tool"
    ]
    assert any('unknown tool "loop_list"' in text for text in tool_texts), tool_texts

    # The token reached neither the model, nor a session's history, nor a bash tool's environment.
    env = agent_calls(plugin_dsh, "ses-a", "bash", {"command": "env", "description": "show the environment"})
    assert "DSH_SESSION_ID=ses-a" in env.text, env.text  # the tool ran and printed its environment
    assert TOKEN not in env.text and "DSHLOOP_TOKEN" not in env.text
    for session in ("ses-a", "ses-b"):
        assert TOKEN not in json.dumps(plugin_dsh.history(session))
    assert not [body for body in stub_model.requests() if TOKEN.encode() in body]


def test_dshloop_down_is_a_clear_failure_and_the_tools_come_back(plugin_dsh, dshloop, workspace):
    plugin_dsh.call("session.create", {"sessionId": "ses-c", "cwd": str(workspace)})
    assert agent_calls(plugin_dsh, "ses-c", "loop_list", {}).json() == {"loops": []}

    dshloop.stop()
    started = time.monotonic()
    down = agent_calls(plugin_dsh, "ses-c", "loop_list", {})
    assert down.is_error and f"dshloop is not reachable at {dshloop.url}" in down.text, down.text
    assert time.monotonic() - started < 15  # refused at once, not a hang
    assert plugin_dsh.call("host.describe")  # DSH keeps serving

    dshloop.start()  # the same URL; DSH is not restarted
    assert agent_calls(plugin_dsh, "ses-c", "loop_list", {}).json() == {"loops": []}


def test_self_works_in_dsh_out_of_the_box(plugin_dsh, dshloop, workspace, settings):
    # This process's settings were made for the embedded host; `serve` computed its own from
    # DSHLOOP_HOST=dsh, where the global interface defaults to the session bootstrap makes.
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url
    settings.DSHLOOP_DSH_CWD, settings.DSHLOOP_GLOBAL_SESSION_ID = str(workspace), settings.DSH_GLOBAL_SESSION_ID
    made, again = StringIO(), StringIO()
    call_command("bootstrap", stdout=made)
    call_command("bootstrap", stdout=again)

    assert f"Global interface session created in DSH: {settings.DSH_GLOBAL_SESSION_ID}" in made.getvalue()
    assert "Global interface" not in again.getvalue()  # once
    assert (
        plugin_dsh.sessions()[settings.DSH_GLOBAL_SESSION_ID]["projections"]["values"]["title"]
        == "dshloop: global interface"
    )
    # In the workspace of DSHLOOP_DSH_CWD, where DSH Web lists it.
    [listed_in] = [item for item in plugin_dsh.call("workspace.list")["items"] if item["path"] == str(workspace)]
    assert settings.DSH_GLOBAL_SESSION_ID in listed_in["sessionIds"]

    plugin_dsh.call("session.create", {"sessionId": "ses-d", "cwd": str(workspace)})
    loop = agent_calls(
        plugin_dsh,
        "ses-d",
        "loop_create",
        {"prompt": "Morning report", "schedule": {"kind": "after", "after_seconds": 600}, "session_id": "self"},
    ).json()
    assert (loop["session_id"], loop["created_by_session_id"]) == ("self", "ses-d")
    # The global interface's own agent sees it among its loops (contract §3).
    mine = agent_calls(plugin_dsh, settings.DSH_GLOBAL_SESSION_ID, "loop_list", {}).json()["loops"]
    assert [item["loop_id"] for item in mine] == [loop["loop_id"]]
