"""The real-DSH test harness (tests/dsh.py) against a real DeepSeek Harness process: it boots, its
sessions survive a restart on the same port as cold sessions, a prompt's rpcId reaches the session's
history, and a stop leaves no process behind. The `dsh` adapter's own tests build on these facts."""

from __future__ import annotations

import os
import signal
import socket
import urllib.error
import urllib.request

import pytest

from tests.dsh import DSH_VERSION, DshHost, require_dsh_dir
from tests.processes import wait_for

# Real DSH processes: with the process tests (`pytest -m process`), not in the fast suite.
pytestmark = [pytest.mark.process, pytest.mark.dsh]


def test_dsh_boots_and_answers_host_describe(dsh):
    described = dsh.call("host.describe", {})

    assert described["cwd"] == str(dsh.home)  # the host runs in its own DSH_HOME
    assert described["attachedSessions"] == 0
    assert dsh.url == f"http://127.0.0.1:{dsh.port}" and dsh.port > 0
    assert {preset["id"] for preset in dsh.call("agentPreset.list", {})["presets"]} >= {"standard", "code"}
    assert (dsh.home / "profiles" / "web").is_dir()  # the profile went to DSH_HOME, not ~/.dsh
    assert list(dsh.tmp_dir.glob("dsh-spill-*"))  # its temporary files stay under the test's tmp_path too


def test_created_session_is_listed(dsh, tmp_path):
    project = tmp_path / "project"

    created = dsh.call("session.create", {"sessionId": "harness-1", "cwd": str(project)})

    assert created == {"sessionId": "harness-1", "agentPreset": "standard"}
    listed = dsh.sessions()["harness-1"]
    assert listed["cwd"] == str(project) and listed["agentPreset"] == "standard"
    assert listed["running"] is False and listed["blank"] is True
    assert dsh.attached("harness-1") is True


def test_restart_keeps_the_session_on_the_same_url_and_makes_it_cold(dsh, tmp_path):
    dsh.call("session.create", {"sessionId": "harness-cold", "cwd": str(tmp_path / "project")})
    url, old_pid = dsh.url, dsh.pid
    assert dsh.attached("harness-cold") is True

    dsh.restart()

    assert dsh.url == url and dsh.pid != old_pid  # a fixed port: dshloop's DSHLOOP_DSH_URL stays valid
    assert dsh.sessions()["harness-cold"]["cwd"] == str(tmp_path / "project")
    assert dsh.attached("harness-cold") is False
    assert dsh.call("host.describe", {})["attachedSessions"] == 0
    # the explicit resume of DSH-HOST.md §0.6 attaches it again
    dsh.call("session.create", {"sessionId": "harness-cold", "cwd": str(tmp_path / "project")})
    assert dsh.attached("harness-cold") is True


def test_prompt_rpc_id_is_stored_on_the_user_message_in_history(dsh):
    dsh.call("session.create", {"sessionId": "harness-prompt"})
    rpc_id = "loop_abc123:2026-12-01T09:00:00Z"
    text = "<loop>\n  <loop_id>loop_abc123</loop_id>\n  <prompt>Check the deploy</prompt>\n</loop>"

    accepted = dsh.call(
        "session.prompt",
        {"sessionId": "harness-prompt", "mode": "queue", "content": [{"type": "text", "text": text}]},
        rpc_id=rpc_id,
    )

    assert accepted["accepted"] is True
    [message] = wait_for(lambda: dsh.user_messages("harness-prompt", rpc_id), timeout=20, message="the user/message")
    assert message["data"]["content"] == [{"type": "text", "text": text}]
    assert message["data"]["source"] == {"kind": "user", "rpcId": rpc_id}
    # No DeepSeek key here: the turn it started ends with a credential error, and the message stays.
    turn_end = wait_for(
        lambda: [event for event in dsh.history("harness-prompt") if event["type"] == "turn/end"],
        timeout=20,
        message="the end of the turn",
    )[-1]
    assert turn_end["data"]["reason"]["kind"] == "error"
    assert turn_end["data"]["reason"]["error"]["code"] == "MISSING_CREDENTIAL"
    assert len(dsh.user_messages("harness-prompt", rpc_id)) == 1


def test_stop_leaves_no_process_behind(dsh):
    pid, url = dsh.pid, dsh.url

    dsh.stop()

    assert not dsh.running()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # nothing is left in the host's process group
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/", timeout=5)
    dsh.stop()  # idempotent: the fixture's teardown stops it again


def test_stop_kills_a_host_that_ignores_sigterm(dsh):
    pid = dsh.pid
    os.kill(pid, signal.SIGSTOP)  # a stopped process never handles the SIGTERM

    dsh.stop(timeout=1)

    assert dsh.process.returncode == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


def test_a_host_that_cannot_boot_fails_with_its_log(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        host = DshHost(require_dsh_dir(), tmp_path / "dsh-home", port=taken.getsockname()[1])

        with pytest.raises(AssertionError, match="DSH exited during boot") as failure:
            host.start()

    assert "EADDRINUSE" in str(failure.value)
    assert not host.running()


def test_missing_dsh_skips_with_the_reason_or_fails_under_ci(tmp_path, monkeypatch):
    monkeypatch.setenv("DSHLOOP_DSH_DIR", str(tmp_path / "nowhere"))

    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match=f"DSH {DSH_VERSION} is not installed in .*nowhere"):
        require_dsh_dir()

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and DSH .* is not installed"):
        require_dsh_dir()
