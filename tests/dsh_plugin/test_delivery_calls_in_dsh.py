"""The DSH calls a delivery through dshloop's plugin costs, counted, in a real DSH whose profile holds
many sessions (tests/sessions_app/test_dsh_profile_size.py counts the path without the plugin): a
batch's look-up is one `sessions` call, a delivery into a loaded session one `deliver` call that
answers once DSH has logged the message, a cold one adds its load; a cold session's status is one
`sessions` call too; none lists the profile, asks `subagent.list` (every persisted session's header in
rc.8) or reads a session's log."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from sessions_app.hosts.base import Delivered, Message
from sessions_app.hosts.dsh import DshHost

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

PROFILE = 100  # sessions in the profile besides the ones the test delivers into
# Calls that grow with the profile or read a session's log: none on the plugin's hot path.
NEVER = ("session.list", "subagent.list", "session.history")


def message_for(session_id: str, key: str) -> Message:
    source = {"kind": "loop", "loop_id": "loop_calls", "run_id": f"run_{key}", "occurrence_key": key, "scheduled_at": 0}
    return Message(session_id, "<loop><loop_id>loop_calls</loop_id></loop>", source, key, summary="calls")


def test_a_delivery_into_a_loaded_session_is_one_dsh_call_and_a_cold_one_four(
    plugin_dsh, dshloop, workspace, dsh_calls
):
    with ThreadPoolExecutor(8) as pool:  # DSH takes creates side by side: the profile in seconds
        list(
            pool.map(
                lambda n: plugin_dsh.call("session.create", {"sessionId": f"calls-other-{n}", "cwd": str(workspace)}),
                range(PROFILE),
            )
        )
    targets = [f"calls-{n}" for n in range(6)]
    for session_id in targets:
        plugin_dsh.call("session.create", {"sessionId": session_id, "cwd": str(workspace)})
    host = DshHost(plugin_dsh.url, cwd=str(workspace))

    looked_up = host.get_sessions(set(targets))  # a delivery batch's look-up
    assert sorted(looked_up) == targets and all(s.status == "idle" for s in looked_up.values()), looked_up
    assert dsh_calls == Counter({"hello": 1, "sessions": 1}), dsh_calls

    dsh_calls.clear()
    results = host.deliver_many([message_for(session_id, f"{session_id}@1") for session_id in targets])
    assert all(isinstance(result, Delivered) and result.message_id for result in results), results
    # One call an occurrence: the plugin answered once DSH had logged each message.
    assert dsh_calls == Counter({"deliver": len(targets)}), dsh_calls
    for session_id, result in zip(targets, results, strict=True):
        [logged] = plugin_dsh.loop_messages(session_id, key=f"{session_id}@1")
        assert logged["data"]["id"] == result.message_id

    dsh_calls.clear()
    again = host.deliver_many([message_for(targets[0], f"{targets[0]}@1")])  # a re-driven run
    assert again == results[:1] and len(plugin_dsh.loop_messages(targets[0], key=f"{targets[0]}@1")) == 1
    status = host.get_session(targets[0])  # a caller check, a status, the composer's poll
    assert status is not None and status.status in ("idle", "running")
    assert dsh_calls == Counter({"deliver": 1, "sessions": 1}), dsh_calls

    dsh_calls.clear()
    listed = host.list_sessions(limit=20)  # what a person or an agent asks for: the profile's list
    assert len(listed) == 20 and all(session.status in ("idle", "running", "cold") for session in listed)
    assert dsh_calls == Counter({"session.list": 1, "sessions": 1}), dsh_calls  # live agents: one call

    plugin_dsh.restart()  # every session cold
    dsh_calls.clear()
    # A cold session, and one DSH does not have, told by the plugin from their stored logs (DSH's own
    # session.history of a cold session reads every persisted session's header first, in rc.8).
    cold_status = host.get_session(targets[2])
    assert cold_status is not None and cold_status.status == "cold", cold_status
    assert host.get_session("calls-none") is None
    assert dsh_calls == Counter({"sessions": 2}), dsh_calls
    dsh_calls.clear()
    [cold] = host.deliver_many([message_for(targets[1], f"{targets[1]}@2")])
    assert isinstance(cold, Delivered), cold
    assert len(plugin_dsh.loop_messages(targets[1], key=f"{targets[1]}@2")) == 1
    # Rung, refused as not loaded (nothing sent), loaded with DSH's session.create, rung again; its
    # header (cwd) exported once, then kept.
    assert sum(dsh_calls.values()) <= 5 and not set(NEVER) & set(dsh_calls), dsh_calls
    assert dsh_calls["deliver"] == 2 and dsh_calls["session.create"] == 1, dsh_calls
