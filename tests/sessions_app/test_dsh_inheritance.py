"""spec §2.1 preset and model inheritance, and the session tools' read-only rules, on a real DSH.

Real `runloops` processes (DSHLOOP_HOST=dsh) deliver into a DSH whose model is the stub
(tests/stub_model.py); the stub's log of requests is the proof of which model a turn ran on, and
that reading sessions asks the model nothing. DSH's model choices: `deepseek-v4-flash` (its
built-in default) and `deepseek-v4-pro`.
"""

from __future__ import annotations

import json

import httpx
import pytest

from loops.models import Loop, LoopRun, RunStatus
from tests.conftest import after, create_loop
from tests.dsh import DshHost as RealDsh
from tests.processes import Schedulers, wait_for
from tests.stub_model import StubModel
from tests.test_serve import Serve
from tokens.services import token_create

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

PRO_LOW = {"provider": "deepseek-official", "model": "deepseek-v4-pro", "reasoningEffort": "low"}
DEFAULT_MODEL = "deepseek-v4-flash"


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def on_dsh(modelled, settings, workspace) -> dict[str, str]:
    """This process talks to `modelled`; the returned settings are the processes' environment."""
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL, settings.DSHLOOP_DSH_CWD = "dsh", modelled.url, str(workspace)
    return {"DSHLOOP_HOST": "dsh", "DSHLOOP_DSH_URL": modelled.url, "DSHLOOP_DSH_CWD": str(workspace)}


@pytest.fixture
def schedulers(on_dsh, tmp_path):
    running = Schedulers(tmp_path, **on_dsh, DSHLOOP_OUTCOME_POLL_SECONDS="1", DSHLOOP_AUTO_PAUSE_AFTER="0")
    yield running
    running.close()


def dsh_default_model(real: RealDsh) -> dict:
    """DSH's default model setting, as DSH Web's Models page shows it."""
    namespaces = real.call("settings.describe")["namespaces"]
    return next(ns for ns in namespaces if ns["ns"] == "agent-default-model")["value"]


def make_creator(real: RealDsh, session_id: str, workspace, *, preset: str = "code") -> None:
    """A session on `preset` that chose deepseek-v4-pro (low effort), with DSH's default set back to
    flash afterwards (selectModel also saves the choice as the default, as DSH Web's model picker
    does): the creator's model is then not the one a session made now would get."""
    real.call("session.create", {"sessionId": session_id, "cwd": str(workspace), "agentPreset": preset})
    real.call("session.selectModel", {"sessionId": session_id, **PRO_LOW})
    real.call("settings.replace", {"ns": "agent-default-model", "section": {}})
    assert dsh_default_model(real)["model"] == DEFAULT_MODEL


def cached_title(real: RealDsh, session_id: str) -> str | None:
    """The title DSH's projection cache holds for the session (what session.list shows while it is cold)."""
    cache = real.home / "storages" / "session_projcache.json"
    try:
        rows = json.loads(cache.read_text())["tables"]["sessions"][session_id]["rows"]
    except (FileNotFoundError, ValueError, KeyError):  # not written yet, or half-written
        return None
    return rows.get("title", {}).get("val")


def turn_ended(real: RealDsh, session_id: str) -> bool:
    return any(event["type"] == "turn/end" for event in real.history(session_id))


def prompt_and_wait(real: RealDsh, session_id: str, text: str) -> None:
    real.call("session.prompt", {"sessionId": session_id, "mode": "queue", "content": [{"type": "text", "text": text}]})
    wait_for(lambda: turn_ended(real, session_id), timeout=30, message=f"{session_id}'s turn to end")


def model_requests(stub: StubModel, marker: str) -> list[dict]:
    """The turn requests (not title requests) whose messages carry `marker`."""
    bodies = [json.loads(raw) for raw in stub.requests()]
    return [
        body
        for body in bodies
        if marker in json.dumps(body.get("messages"))
        and "concise title" not in json.dumps([m for m in body.get("messages", []) if m.get("role") == "system"])
    ]


def title_requests(stub: StubModel) -> list[dict]:
    bodies = [json.loads(raw) for raw in stub.requests()]
    return [
        body
        for body in bodies
        if "concise title" in json.dumps([m for m in body.get("messages", []) if m.get("role") == "system"])
    ]


def delivered_run(loop: Loop) -> LoopRun:
    run = wait_for(
        lambda: LoopRun.objects.filter(
            loop_id=loop.loop_id, status__in=[RunStatus.DELIVERED, RunStatus.FAILED]
        ).first(),
        timeout=40,
        interval=0.3,
        message="the loop's run",
    )
    assert run.status == RunStatus.DELIVERED, (run.status, run.error)
    return run


# -- `new`: the creator's preset and model ----------------------------------------------------------


@pytest.mark.parametrize("creator_state", ["live", "cold"])
def test_a_fresh_run_asks_the_model_with_its_creator_s_model_and_dsh_s_default_stays(
    modelled, stub_model, schedulers, workspace, creator_state
):
    make_creator(modelled, "creator", workspace)
    if creator_state == "cold":
        # A cold creator's selection is the one its log recorded at its last request.
        prompt_and_wait(modelled, "creator", "hello from the creator")
        modelled.restart()
        assert not modelled.attached("creator")
    loop = create_loop(after(1), prompt="Summarise the night's alerts", target="new", created_by="creator")
    schedulers.start_ready()

    run = delivered_run(loop)
    [request, *_] = wait_for(
        lambda: model_requests(stub_model, loop.loop_id), timeout=30, message="the fresh turn's model request"
    )

    assert (request["model"], request.get("reasoning_effort")) == ("deepseek-v4-pro", "low")
    assert run.fallback == ""  # inherited, nothing from the profile default
    assert modelled.sessions()[run.target_session_id]["agentPreset"] == "code"  # the creator's preset
    # DSH's default is the user's: still flash, though selecting the fresh session's model saved it.
    assert dsh_default_model(modelled)["model"] == DEFAULT_MODEL
    assert modelled.call("host.describe")["model"] == DEFAULT_MODEL
    if creator_state == "cold":
        assert not modelled.attached("creator")  # read from its log, not woken


def test_a_loop_s_own_preset_wins_and_the_model_is_still_the_creator_s(modelled, stub_model, schedulers, workspace):
    make_creator(modelled, "creator", workspace, preset="code")
    loop = create_loop(after(1), prompt="Triage the new issues", target="new", preset="standard", created_by="creator")
    schedulers.start_ready()

    run = delivered_run(loop)
    [request, *_] = wait_for(
        lambda: model_requests(stub_model, loop.loop_id), timeout=30, message="the fresh turn's model request"
    )

    assert modelled.sessions()[run.target_session_id]["agentPreset"] == "standard"
    assert request["model"] == "deepseek-v4-pro"
    assert run.fallback == ""


def test_a_fresh_run_whose_creator_is_gone_runs_on_the_profile_default_and_says_so(
    modelled, stub_model, schedulers, workspace
):
    loop = create_loop(after(1), prompt="Check the backups", target="new", created_by="vanished-session")
    schedulers.start_ready()

    run = delivered_run(loop)
    [request, *_] = wait_for(
        lambda: model_requests(stub_model, loop.loop_id), timeout=30, message="the fresh turn's model request"
    )

    assert request["model"] == DEFAULT_MODEL
    assert run.fallback == "profile default preset and model (source session 'vanished-session' unavailable)"
    assert modelled.sessions()[run.target_session_id]["agentPreset"] == "standard"  # DSH's default preset


def test_a_fresh_run_whose_creator_never_asked_the_model_records_the_model_fallback(
    modelled, stub_model, schedulers, workspace
):
    # Cold and blank: DSH would resume it on its default model, so it has no model of its own.
    modelled.call("session.create", {"sessionId": "blank-creator", "cwd": str(workspace), "agentPreset": "code"})
    modelled.restart()
    loop = create_loop(after(1), prompt="Rotate the logs", target="new", created_by="blank-creator")
    schedulers.start_ready()

    run = delivered_run(loop)

    assert run.fallback == "profile default model (source has none)"
    assert modelled.sessions()[run.target_session_id]["agentPreset"] == "code"
    assert not modelled.attached("blank-creator")


# -- an existing target keeps its own ---------------------------------------------------------------


def test_a_cold_target_is_resumed_on_its_own_preset_and_model(modelled, stub_model, schedulers, workspace):
    make_creator(modelled, "target", workspace, preset="code")  # pro; DSH's default: flash
    prompt_and_wait(modelled, "target", "first words")
    modelled.restart()
    loop = create_loop(after(1), prompt="Report the queue depth", target="target")
    schedulers.start_ready()

    run = delivered_run(loop)
    [request, *_] = wait_for(
        lambda: model_requests(stub_model, loop.loop_id), timeout=30, message="the delivered turn's model request"
    )

    assert run.target_session_id == "target" and run.fallback == ""
    assert (request["model"], request.get("reasoning_effort")) == ("deepseek-v4-pro", "low")
    assert modelled.sessions()["target"]["agentPreset"] == "code"
    assert modelled.attached("target")  # resumed to deliver


# -- the session tools read, and wake nothing --------------------------------------------------------


@pytest.fixture
def served(on_dsh, tmp_path):
    """A real `manage.py serve` on the test's DSH, and a token for its tools."""
    # A remote host's lease must outlast three host calls (settings): 3 s each for a loopback DSH.
    server = Serve(tmp_path, **on_dsh, DSHLOOP_RUN_LEASE_SECONDS="10", DSHLOOP_HOST_TIMEOUT_SECONDS="3")
    server.wait_serving()
    token = token_create(name="agent", scopes=["tools"])[1]

    def tool(name: str, body: dict) -> dict:
        response = httpx.post(
            f"http://127.0.0.1:{server.port}/api/tools/{name}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return response.json()

    yield tool
    server.close()


def test_the_session_tools_show_titles_and_status_without_waking_a_session_or_asking_the_model(
    modelled, stub_model, served, workspace
):
    for session_id in ("generated", "renamed", "blank"):
        modelled.call("session.create", {"sessionId": session_id, "cwd": str(workspace)})
    prompt_and_wait(modelled, "generated", "deploy the staging branch")
    wait_for(
        lambda: modelled.sessions()["generated"]["projections"]["values"]["title"] == "Stub Title",
        timeout=30,
        message="DSH's own title for the prompted session",
    )
    modelled.call("session.rename", {"sessionId": "renamed", "title": "Release train"})
    # A cold session's title in session.list is DSH's projection cache, which DSH writes up to 5 s
    # after a change (write-behind): a restart sooner would list the older title.
    wait_for(
        lambda: (
            (cached_title(modelled, "generated"), cached_title(modelled, "renamed")) == ("Stub Title", "Release train")
        ),
        timeout=30,
        message="DSH's projection cache to hold the titles",
    )
    modelled.restart()  # every session cold
    asked = len(stub_model.requests())
    assert len(title_requests(stub_model)) == 1  # DSH's, at the first prompt

    listed = {s["session_id"]: s for s in served("list_sessions", {})["sessions"]}
    statuses = {sid: served("check_session_status", {"session_id": sid}) for sid in ("generated", "renamed", "blank")}

    assert {sid: listed[sid].get("title") for sid in statuses} == {
        "generated": "Stub Title",
        "renamed": "Release train",
        "blank": None,
    }
    assert {sid: s["status"] for sid, s in statuses.items()} == dict.fromkeys(statuses, "cold")
    assert {sid: listed[sid]["status"] for sid in statuses} == dict.fromkeys(statuses, "cold")
    assert statuses["renamed"]["title"] == "Release train"
    assert len(stub_model.requests()) == asked  # no title, no turn: the model was asked nothing
    assert not any(modelled.attached(sid) for sid in statuses)  # nothing resumed
    assert modelled.call("host.describe")["attachedSessions"] == 0
