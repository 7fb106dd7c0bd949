"""The `dsh` host adapter against a real DeepSeek Harness process (DSH-HOST.md).

Each mapping of sessions_app/hosts/dsh.py is exercised on a live host: sessions and their status
(running / idle / cold), titles, presets, resuming a cold session, `new` sessions with a preset,
delivery at most once per occurrence, and the error mapping. No DeepSeek key exists here: a
prompted turn ends with a credential error in DSH, and the message is still in its history.
"""

from __future__ import annotations

import socket

import pytest

from scheduler.message import loop_message
from sessions_app.hosts.base import HostError
from sessions_app.hosts.dsh import GLOBAL_SESSION_INTRO_KEY, GLOBAL_SESSION_TITLE, DshHost, new_session_id
from sessions_app.hosts.dsh_wire import DshError
from tests.dsh import DshHost as RealDsh

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db]


@pytest.fixture
def real(dsh) -> RealDsh:
    """Each test's own DSH (tests/conftest.py `dsh`: a free port, its own DSH_HOME, stopped by PID)."""
    return dsh


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "work"
    path.mkdir()  # a real directory: dshloop places its sessions in its DSH workspace
    return path


@pytest.fixture
def adapter(real, workspace) -> DshHost:
    return DshHost(real.url, cwd=str(workspace))


def make_session(real, session_id: str, cwd, **extra) -> None:
    real.call("session.create", {"sessionId": session_id, "cwd": str(cwd), **extra})


def source(key: str, scheduled_at: int = 0) -> dict:
    return {
        "kind": "loop",
        "loop_id": key.split("@")[0],
        "run_id": "run_x",
        "occurrence_key": key,
        "scheduled_at": scheduled_at,
    }


def test_presets_are_dsh_agent_presets(adapter):
    standard = adapter.get_preset("standard")
    assert standard is not None and standard.mountable
    assert adapter.get_preset("no-such-preset") is None


def test_sessions_are_listed_newest_first_with_their_status_and_title(adapter, real, workspace):
    make_session(real, "dsh-list-a", workspace)
    make_session(real, "dsh-list-b", workspace)
    real.call("session.rename", {"sessionId": "dsh-list-b", "title": "Nightly deploy check"})

    listed = {session.session_id: session for session in adapter.list_sessions(limit=50)}

    assert listed["dsh-list-a"].status == "idle"  # attached, no turn running
    assert listed["dsh-list-b"].title == "Nightly deploy check"  # a title the user set (pinned)
    assert listed["dsh-list-a"].title is None
    assert listed["dsh-list-b"].preset == "standard"
    assert adapter.get_session("dsh-list-a").status == "idle"
    assert adapter.get_session("dsh-never-made") is None
    assert [s.session_id for s in adapter.list_sessions(limit=1)] == [
        max(listed.values(), key=lambda s: s.updated_at).session_id
    ]


def test_a_session_is_cold_after_dsh_restarts_and_resuming_attaches_it(adapter, real, workspace):
    make_session(real, "dsh-cold", workspace)
    real.restart()

    assert adapter.get_session("dsh-cold").status == "cold"
    resumed = adapter.resume_session("dsh-cold")
    assert resumed.status == "idle" and real.attached("dsh-cold")
    assert real.sessions()["dsh-cold"]["cwd"] == str(workspace)  # its own cwd: no session-conflict


def test_a_new_session_mounts_the_preset_and_one_occurrence_makes_one_session(adapter, real, workspace):
    key = "loop_new@1796079600000"
    session_id = adapter.create_session(preset="code", model="", first_prompt="x", source=source(key))

    assert session_id == new_session_id(key)
    assert adapter.create_session(preset="code", model="", first_prompt="x", source=source(key)) == session_id
    made = real.sessions()[session_id]
    assert made["agentPreset"] == "code" and made["cwd"] == str(workspace)
    # In the workspace of that directory, where DSH Web lists it (a bare cwd joins no workspace).
    [listed] = [item for item in real.call("workspace.list")["items"] if item["path"] == str(workspace)]
    assert session_id in listed["sessionIds"]


def test_the_profile_default_preset_is_dsh_default(adapter, real, settings):
    key = "loop_default@1796079600000"
    session_id = adapter.create_session(
        preset=settings.DSHLOOP_DEFAULT_PRESET, model="", first_prompt="x", source=source(key)
    )
    assert real.sessions()[session_id]["agentPreset"] == "standard"


def test_an_unknown_preset_is_a_permanent_error_naming_dsh_code(adapter):
    with pytest.raises(DshError) as caught:
        adapter.create_session(preset="no-such-preset", model="", first_prompt="x", source=source("loop_p@1"))
    assert not caught.value.transient and "agent-preset-not-found" in str(caught.value)


def test_a_delivery_is_the_loop_xml_once_however_often_it_is_retried(adapter, real, workspace):
    make_session(real, "dsh-deliver", workspace)
    key = "loop_once@1796079600000"
    text = loop_message(loop_id="loop_once", prompt="Check the deployment status")

    first = adapter.deliver("dsh-deliver", text=text, source=source(key), occurrence_key=key)
    again = adapter.deliver("dsh-deliver", text=text, source=source(key), occurrence_key=key)

    [message] = real.user_messages("dsh-deliver", rpc_id=key)
    assert message["data"]["content"] == [{"type": "text", "text": text}]
    assert first.delivery == "next_turn" and again.message_id == first.message_id


def test_a_missing_target_is_permanent(adapter):
    with pytest.raises(HostError) as caught:
        adapter.deliver("dsh-no-such", text="x", source=source("loop_m@1"), occurrence_key="loop_m@1")
    assert not caught.value.transient


def test_dsh_down_is_transient(workspace):
    with socket.socket() as probe:  # a port that was free a moment ago and that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gone = DshHost(f"http://127.0.0.1:{port}", cwd=str(workspace), timeout=2)
    with pytest.raises(HostError) as caught:
        gone.list_sessions(limit=5)
    assert caught.value.transient and "unreachable" in str(caught.value)


def test_a_host_header_dsh_refuses_is_explained(adapter):
    adapter.wire.client.headers["Host"] = "dsh.example.com"
    with pytest.raises(DshError) as caught:
        adapter.list_sessions(limit=5)
    assert not caught.value.transient and "loopback" in str(caught.value)


def test_a_global_session_an_earlier_dshloop_left_blank_gets_its_first_turn_once(real, workspace):
    # Made as dshloop made it before: titled, no turn, so DSH Web would open it as a person's new chat.
    make_session(real, "dshloop-global", workspace)
    real.call("session.rename", {"sessionId": "dshloop-global", "title": GLOBAL_SESSION_TITLE})
    assert real.sessions()["dshloop-global"]["blank"] is True
    adapter = DshHost(real.url, cwd=str(workspace), global_session_id="dshloop-global")

    assert "had no turn yet" in adapter.ensure_global_session()
    assert adapter.ensure_global_session() == ""  # once
    made = real.sessions()["dshloop-global"]
    assert made["blank"] is False and made["projections"]["values"]["title"] == GLOBAL_SESSION_TITLE
    assert len(real.user_messages("dshloop-global", GLOBAL_SESSION_INTRO_KEY)) == 1
