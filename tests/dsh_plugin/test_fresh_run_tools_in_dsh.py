"""A fresh run's tools inside a real DSH (contract §14): the session dshloop makes for a `new`
loop's occurrence may use a small set of coding tools and nothing that fans out, waits for a
person or some other plugin mounted; its run records what was refused. Ordinary sessions keep all.

One DSH with dshloop's plugin and a third-party plugin (tests/dsh_plugin/third_party_plugin: one
global tool, `thirdparty_echo`), a stub model that calls the tool it is told to, and a real `serve`
(its `runloops` delivers) on DSHLOOP_HOST=dsh.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from loops.models import LoopRun
from tests.conftest import after, create_loop
from tests.dsh import BIN_JS, NODE_BIN, DshHost, require_dsh_dir
from tests.processes import wait_for

from .conftest import INSTALL_PLUGIN, TOKEN, agent_calls

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

THIRD_PARTY = Path(__file__).parent / "third_party_plugin"


@pytest.fixture(scope="module")
def plugin_dsh(tmp_path_factory, stub_model, dshloop_port):
    """The package's DSH (conftest) with a third-party plugin mounted beside dshloop's."""
    install = require_dsh_dir()
    home = tmp_path_factory.mktemp("fresh-run-dsh") / "dsh-home"
    done = subprocess.run([str(INSTALL_PLUGIN), str(install), str(home)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"install-dsh-plugin.sh failed:\n{done.stdout}\n{done.stderr}"
    env = {
        **os.environ,
        "DSH_HOME": str(home),
        "DSH_TELEMETRY_DISABLED": "1",
        "PATH": f"{install / NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "npm_config_update_notifier": "false",
    }
    added = subprocess.run(
        ["node", str(install / BIN_JS), "plugin", "--profile", "web", "add", str(THIRD_PARTY)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert added.returncode == 0, f"dsh plugin add failed:\n{added.stdout}\n{added.stderr}"
    host = DshHost(
        install,
        home,
        env={**stub_model.env(), "DSHLOOP_URL": f"http://127.0.0.1:{dshloop_port}"},
        plugin_token=TOKEN,
    ).start()
    yield host
    host.stop()


def test_a_fresh_run_may_use_only_the_fresh_run_tools_and_its_run_records_each_refusal(plugin_dsh, dshloop, workspace):
    (workspace / "notes.txt").write_text("fresh-run notes\n")
    plugin_dsh.call("session.create", {"sessionId": "ses-person", "cwd": str(workspace)})

    # The delivered turn asks a person a question, which nobody watching would ever answer: it is
    # refused at once (not left to hang until dshloop cancels it), the turn carries on and ends,
    # and the run says which tool was refused under which rule.
    question = {"questions": [{"question": "Deploy now?", "header": "Deploy", "options": []}]}
    loop = create_loop(
        after(1), target="new", created_by="ses-person", prompt=f"CALLTOOL ask_user_question {json.dumps(question)}"
    )
    run = wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop.loop_id).exclude(outcome="").first(),
        timeout=60,
        interval=0.5,
        message="the fresh run's outcome",
    )
    assert run.outcome == "succeeded", (run.outcome, run.error)
    assert run.error == "dshloop's fresh-run boundary refused: ask_user_question (rule fresh-run-tools).", run.error
    fresh = run.target_session_id
    assert fresh.startswith("loop-")

    # In that session: nested agents, background jobs, another plugin's tool, a background shell.
    refused = {
        "subagent": ({"description": "fan out", "prompt": "hello", "run_in_background": False}, "fresh-run-tools"),
        "job_list": ({}, "fresh-run-tools"),
        "thirdparty_echo": ({"text": "hi"}, "fresh-run-tools"),
        "bash": (
            {"command": "sleep 600", "description": "Wait in the background", "run_in_background": True},
            "fresh-run-foreground",
        ),
    }
    for tool, (arguments, rule) in refused.items():
        result = agent_calls(plugin_dsh, fresh, tool, arguments)
        assert result.is_error, (tool, result.text)
        assert result.text.startswith(f"Error: dshloop refused {tool} (rule {rule}): "), result.text
    # A command asking for a wider sandbox: refused at once, where DSH would wait for an approval.
    escalate = {
        "command": "touch /etc/dshloop-was-here",
        "description": "Write outside",
        "sandbox_permissions": "danger-full-access",
        "justification": "it needs to",
    }
    result = agent_calls(plugin_dsh, fresh, "bash", escalate)
    assert result.is_error and result.text.startswith("Error: dshloop refused bash (rule fresh-run-sandbox): "), (
        result.text
    )

    # The coding tools work: a file read, a command in the foreground.
    read = agent_calls(plugin_dsh, fresh, "read", {"file_path": str(workspace / "notes.txt")})
    assert not read.is_error and "fresh-run notes" in read.text, read.text
    shell = agent_calls(plugin_dsh, fresh, "bash", {"command": "echo foreground-ok", "description": "Say ok"})
    assert not shell.is_error and "foreground-ok" in shell.text, shell.text

    # An ordinary conversation is untouched: the same calls run.
    echo = agent_calls(plugin_dsh, "ses-person", "thirdparty_echo", {"text": "hi"})
    assert not echo.is_error and '"echo":"hi"' in echo.text, echo.text
    assert not agent_calls(plugin_dsh, "ses-person", "job_list", {}).is_error
    background = {"command": "true", "description": "Nothing, in the background", "run_in_background": True}
    assert not agent_calls(plugin_dsh, "ses-person", "bash", background).is_error
    delegate = {"description": "say hello", "prompt": "hello", "run_in_background": False}
    assert not agent_calls(plugin_dsh, "ses-person", "subagent", delegate).is_error


def test_the_operator_widens_a_fresh_runs_tools_by_name(plugin_dsh, dshloop, workspace):
    dshloop.stop()
    dshloop.env = {**dshloop.env, "DSHLOOP_FRESH_RUN_TOOLS": "thirdparty_echo"}
    dshloop.start()
    plugin_dsh.call("session.create", {"sessionId": "ses-operator", "cwd": str(workspace)})
    loop = create_loop(
        after(1), target="new", created_by="ses-operator", prompt='CALLTOOL thirdparty_echo {"text": "widened"}'
    )
    run = wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop.loop_id).exclude(outcome="").first(),
        timeout=60,
        interval=0.5,
        message="the fresh run's outcome",
    )
    assert (run.outcome, run.error) == ("succeeded", "")
    echo = agent_calls(plugin_dsh, run.target_session_id, "thirdparty_echo", {"text": "again"})
    assert not echo.is_error and '"echo":"again"' in echo.text, echo.text
    assert agent_calls(plugin_dsh, run.target_session_id, "subagent", {"description": "x", "prompt": "y"}).is_error
