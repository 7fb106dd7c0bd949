"""End to end with real processes: `runloops` delivering into a real DeepSeek Harness.

Loops are created in the test process through the tools and services (DSHLOOP_HOST=dsh); real
`runloops` processes deliver them into a DSH started for each test. The DSH session's history is
the proof: the loop XML once per occurrence, never twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loops.models import LoopRun, RunStatus
from scheduler.message import loop_message
from tests import processes
from tests.conftest import ApiClient, after, create_loop, every
from tests.processes import Schedulers, wait_for

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def workspace(tmp_path) -> Path:
    path = tmp_path / "work"
    path.mkdir()  # a real directory: dshloop places its sessions in its DSH workspace
    return path


@pytest.fixture
def on_dsh(dsh, settings, workspace):
    """This process and its schedulers talk to the test's DSH."""
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL, settings.DSHLOOP_DSH_CWD = "dsh", dsh.url, str(workspace)
    return {"DSHLOOP_HOST": "dsh", "DSHLOOP_DSH_URL": dsh.url, "DSHLOOP_DSH_CWD": str(workspace)}


@pytest.fixture
def dsh_schedulers(tmp_path, on_dsh):
    # This DSH has no model credentials, so every turn it starts ends failed (MISSING_CREDENTIAL),
    # and the scheduler reads that from its log. The failure policy would then space a
    # 2 s loop's occurrences out by 30 s, 60 s, … (a race with the outcome poll every 5 s) and
    # pause it after five: these tests are about delivery, so the backoff is 1 s and nothing pauses.
    running = Schedulers(tmp_path, **on_dsh, DSHLOOP_FAILURE_BACKOFF_SECONDS="1", DSHLOOP_AUTO_PAUSE_AFTER="0")
    yield running
    running.close()


def delivered_keys(loop_id: str) -> list[str]:
    return list(
        LoopRun.objects.filter(loop_id=loop_id, status=RunStatus.DELIVERED)
        .order_by("scheduled_at")
        .values_list("occurrence_key", flat=True)
    )


def test_an_every_loop_reaches_an_existing_dsh_session_once_per_occurrence(dsh, dsh_schedulers, workspace):
    dsh.call("session.create", {"sessionId": "dsh-target", "cwd": str(workspace)})
    loop = create_loop(every(2), prompt="Check the deployment status", target="dsh-target")
    dsh_schedulers.start_ready()

    keys = wait_for(
        lambda: len(delivered_keys(loop.loop_id)) >= 3 and delivered_keys(loop.loop_id),
        timeout=40,
        interval=0.5,
        message="three delivered occurrences",
    )

    text = loop_message(loop_id=loop.loop_id, prompt="Check the deployment status")
    for key in keys:
        [message] = dsh.user_messages("dsh-target", rpc_id=key)  # once, not twice
        assert message["data"]["content"] == [{"type": "text", "text": text}]
    loop_keys = {m["data"]["source"]["rpcId"] for m in dsh.user_messages("dsh-target")}
    assert set(keys) <= loop_keys and all(key.startswith(f"{loop.loop_id}@") for key in loop_keys)


def test_a_new_loop_creates_a_dsh_session_with_the_preset_per_occurrence(dsh, dsh_schedulers, workspace, settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0  # occurrences seconds apart; the floor has its own tests
    loop = create_loop(every(2), prompt="Review the open pull requests", target="new", preset="code")
    dsh_schedulers.start_ready()

    wait_for(lambda: len(delivered_keys(loop.loop_id)) >= 2, timeout=40, interval=0.5, message="two occurrences")

    runs = LoopRun.objects.filter(loop_id=loop.loop_id, status=RunStatus.DELIVERED)
    sessions = dsh.sessions()
    made = {run.target_session_id for run in runs}
    assert len(made) == runs.count()  # a fresh session per occurrence
    for run in runs:
        assert sessions[run.target_session_id]["agentPreset"] == "code"
        assert sessions[run.target_session_id]["cwd"] == str(workspace)
        assert len(dsh.user_messages(run.target_session_id, rpc_id=run.occurrence_key)) == 1
        assert "profile default model" in run.fallback  # DSH does not tell a session's model


def test_a_cold_dsh_session_is_resumed_then_receives(dsh, dsh_schedulers, workspace):
    dsh.call("session.create", {"sessionId": "dsh-sleeper", "cwd": str(workspace)})
    dsh.restart()  # the session is now cold: persisted, no live agent
    assert not dsh.attached("dsh-sleeper")
    loop = create_loop(after(2), prompt="Wake up and report", target="dsh-sleeper")
    dsh_schedulers.start_ready()

    [key] = wait_for(lambda: delivered_keys(loop.loop_id), timeout=30, interval=0.5, message="the delivery")

    assert dsh.attached("dsh-sleeper")
    assert len(dsh.user_messages("dsh-sleeper", rpc_id=key)) == 1
    # The scheduler's housekeeping thread reads how the turn ended from DSH's log: with
    # no model credential here, DSH ends it with an error.
    run = wait_for(
        lambda: LoopRun.objects.filter(occurrence_key=key).exclude(outcome="").first(),
        timeout=30,
        interval=0.5,
        message="the turn's outcome",
    )
    assert run.outcome == "failed" and "MISSING_CREDENTIAL" in run.error, (run.outcome, run.error)


def test_a_scheduler_killed_between_send_and_record_does_not_send_twice(
    dsh, dsh_schedulers, workspace, tmp_path, monkeypatch
):
    dsh.call("session.create", {"sessionId": "dsh-crash", "cwd": str(workspace)})
    loop = create_loop(after(2), prompt="Exactly once", target="dsh-crash")
    marker = tmp_path / "killed-after-deliver"
    # A short lease: the run the dead scheduler held is re-driven seconds later, not after 45 s. It
    # must outlast three host calls (settings), so the calls of this loopback DSH get 2 s each.
    dsh_schedulers.env.update(
        DSHLOOP_RUN_LEASE_SECONDS="7", DSHLOOP_HOST_TIMEOUT_SECONDS="2", DSHLOOP_TEST_KILL_AFTER_DELIVER=str(marker)
    )
    with monkeypatch.context() as patch:
        patch.setattr(processes, "MANAGE", Path(__file__).resolve().parents[1] / "faulty_manage.py")
        [faulty] = dsh_schedulers.start_ready()
    wait_for(lambda: marker.exists() and not faulty.running(), timeout=30, message="the scheduler to die after sending")
    key = LoopRun.objects.get(loop_id=loop.loop_id).occurrence_key
    assert LoopRun.objects.get(loop_id=loop.loop_id).status != RunStatus.DELIVERED  # sent, not recorded
    assert len(dsh.user_messages("dsh-crash", rpc_id=key)) == 1

    dsh_schedulers.start_ready()  # a healthy scheduler re-drives the run once its lease is over
    wait_for(lambda: delivered_keys(loop.loop_id) == [key], timeout=40, interval=0.5, message="the re-driven run")

    assert len(dsh.user_messages("dsh-crash", rpc_id=key)) == 1  # found in the history: not sent again


def test_the_session_tools_show_dsh_sessions(dsh, on_dsh, workspace, tools_token):
    dsh.call("session.create", {"sessionId": "dsh-listed", "cwd": str(workspace)})
    dsh.call("session.rename", {"sessionId": "dsh-listed", "title": "Release train"})
    api = ApiClient(tools_token)

    sessions = api.tool("list_sessions", {}).json()["sessions"]
    status = api.tool("check_session_status", {"session_id": "dsh-listed"}).json()
    missing = api.tool("check_session_status", {"session_id": "dsh-nobody"}).json()

    assert {"session_id": "dsh-listed", "title": "Release train", "status": "idle"}.items() <= next(
        s for s in sessions if s["session_id"] == "dsh-listed"
    ).items()
    assert status["status"] == "idle" and status["title"] == "Release train"
    assert missing == {"session_id": "dsh-nobody", "status": "missing"}
