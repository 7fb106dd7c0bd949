"""contract §14 where a `new` loop's fresh sessions start, against a real DeepSeek Harness: the
workspace captured from the creating session, the permission preset applied before the first
prompt, the fallback to DSHLOOP_DSH_CWD, a workspace that is gone, an edit to one DSH cannot use,
and the host's Workspaces capability (cancel a turn, list workspaces). Occurrences are claimed and delivered in this process
(claim_due, deliver_runs); DSH's own session list, workspace list and log are the proof."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from loops.models import Loop, LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.hosts.dsh import DshHost
from tests.conftest import ApiClient, after, create_loop, every
from tests.dsh import DshHost as RealDsh
from tests.processes import wait_for
from tests.stub_model import StubModel

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]


def directory(tmp_path: Path, name: str) -> Path:
    # Canonical, as DSH stores a workspace's path (realpath), so that paths compare as strings.
    path = (tmp_path / name).resolve()
    path.mkdir()
    return path


@pytest.fixture
def default_cwd(tmp_path) -> Path:
    """DSHLOOP_DSH_CWD: where a fresh session goes when its loop has no workspace."""
    return directory(tmp_path, "default-cwd")


@pytest.fixture
def on_dsh(dsh, settings, default_cwd) -> RealDsh:
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL, settings.DSHLOOP_DSH_CWD = "dsh", dsh.url, str(default_cwd)
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0  # occurrences seconds apart: the floor has its own tests
    return dsh


def fire(seconds_ahead: float) -> list[LoopRun]:
    """Claim what is due that far ahead and deliver it, as a scheduler does."""
    run_ids = claim_due(now=timezone.now() + timedelta(seconds=seconds_ahead))
    deliver_runs(run_ids)
    return list(LoopRun.objects.filter(run_id__in=run_ids))


def fresh_session(real: RealDsh, run: LoopRun) -> dict:
    assert run.status == RunStatus.DELIVERED, (run.status, run.error)
    return real.sessions()[run.target_session_id]


def workspace_sessions(real: RealDsh) -> dict[str, list[str]]:
    """DSH's workspaces: path -> the sessions attached to it."""
    return {item["path"]: item["sessionIds"] for item in real.call("workspace.list")["items"]}


def permission_preset(session: dict) -> str:
    return session["projections"]["values"]["permissions"]["currentValue"]


# -- the workspace ---------------------------------------------------------------------------------


@pytest.mark.parametrize("placed", ["cwd", "workspace"])
def test_a_new_loop_runs_in_its_creator_s_directory(on_dsh, tools_token, tmp_path, default_cwd, placed):
    project = directory(tmp_path, "project")
    if placed == "cwd":  # an ungrouped session (DSH Web's "Ungrouped")
        on_dsh.call("session.create", {"sessionId": "creator", "cwd": str(project)})
    else:
        ws = on_dsh.call("workspace.create", {"path": str(project)})["workspace"]["workspaceId"]
        on_dsh.call("session.create", {"sessionId": "creator", "workspaceId": ws})

    response = ApiClient(tools_token, "creator").tool(
        "loop_create", {"prompt": "Summarise the open issues", "schedule": after(1), "session_id": "new"}
    )
    assert response.status_code == 200, response.content
    loop = Loop.objects.get(loop_id=response.json()["loop_id"])
    assert loop.created_by_session_id == "creator" and loop.workspace == str(project)

    [run] = fire(2)

    session = fresh_session(on_dsh, run)
    assert session["cwd"] == str(project)
    placed_in = workspace_sessions(on_dsh)
    assert run.target_session_id in placed_in[str(project)]  # listed with the project in DSH Web
    assert run.target_session_id not in placed_in.get(str(default_cwd), [])


def test_a_new_loop_without_a_known_creator_runs_in_the_default_directory(on_dsh, default_cwd):
    # A creator DSH does not know (made elsewhere, or gone since): nothing to capture.
    loop = create_loop(after(1), target="new", created_by="never-in-dsh")
    assert loop.workspace == ""

    [run] = fire(2)

    session = fresh_session(on_dsh, run)
    assert session["cwd"] == str(default_cwd)
    assert run.target_session_id in workspace_sessions(on_dsh)[str(default_cwd)]


def test_a_workspace_that_no_longer_exists_fails_the_run_once_and_for_all(on_dsh, tmp_path):
    project = directory(tmp_path, "project")
    on_dsh.call("session.create", {"sessionId": "creator", "cwd": str(project)})
    loop = create_loop(after(1), target="new", created_by="creator")
    assert loop.workspace == str(project)
    shutil.rmtree(project)  # the project was moved away after the loop was made

    [run] = fire(2)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.retry_at is None and run.attempt == 1, (run.status, run.retry_at)
    assert "workspace-invalid-path" in run.error and str(project) in run.error, run.error
    assert "gave up" not in run.error  # permanent at once, not a transient failure retried to exhaustion
    assert str(project) not in workspace_sessions(on_dsh)
    assert not [sid for sid in on_dsh.sessions() if sid.startswith("loop-")]  # no session was made
    assert Loop.objects.get(loop_id=loop.loop_id).state == "failed"


def patch_workspace(manage_api, loop_id: str, workspace: str):
    return manage_api.client.patch(
        f"/api/loops/{loop_id}",
        data=json.dumps({"workspace": workspace}),
        content_type="application/json",
        headers=manage_api.headers(),
    )


def test_an_edit_to_a_directory_dsh_cannot_use_is_refused_and_a_normalised_one_is_where_runs_go(
    on_dsh, manage_api, tmp_path
):
    project = directory(tmp_path, "project")
    (project.parent / "notes.txt").write_text("not a directory")
    loop = create_loop(every(5), prompt="Sweep the reports", target="new")

    # DSH itself is asked (host.listDirectory), and its reason is in the message.
    for bad, reason in [(project.parent / "nonexistent", "ENOENT"), (project.parent / "notes.txt", "ENOTDIR")]:
        response = patch_workspace(manage_api, loop.loop_id, str(bad))
        assert response.status_code == 422, response.content
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_input", "workspace"), error
        assert f"The host cannot start sessions in '{bad}'" in error["message"] and reason in error["message"], error
    assert Loop.objects.get(loop_id=loop.loop_id).revision == 1
    assert str(project.parent / "nonexistent") not in workspace_sessions(on_dsh)  # asking made no workspace

    response = patch_workspace(manage_api, loop.loop_id, f"{project}/old/..//")
    assert response.status_code == 200, response.content
    assert response.json()["workspace"] == str(project)

    [run] = fire(6)

    assert fresh_session(on_dsh, run)["cwd"] == str(project)
    assert run.target_session_id in workspace_sessions(on_dsh)[str(project)]


# -- the permission preset -------------------------------------------------------------------------


def test_fresh_sessions_run_under_the_loop_s_permission_preset_from_the_first_prompt(on_dsh, manage_api):
    loop = create_loop(every(5), prompt="Check the nightly build", target="new")
    assert loop.permission_preset == "read-only"  # DSHLOOP_DEFAULT_PERMISSION_PRESET

    [first] = fire(6)

    # DSH's own default is workspace-write: read-only is what dshloop applied.
    assert permission_preset(fresh_session(on_dsh, first)) == "read-only"
    events = on_dsh.history(first.target_session_id)
    [prompt_seq] = [e["seq"] for e in events if e["type"] == "user/message" and e["data"]["source"]["kind"] == "user"]
    presets = [(e["seq"], e["data"]["preset"]) for e in events if e["type"] == "permission/preset"]
    assert presets[-1][1] == "read-only" and presets[-1][0] < prompt_seq  # set before the prompt arrived

    response = manage_api.client.patch(
        f"/api/loops/{loop.loop_id}",
        data=json.dumps({"permission_preset": "workspace-write"}),
        content_type="application/json",
        headers=manage_api.headers(),
    )
    assert response.status_code == 200, response.content
    assert response.json()["permission_preset"] == "workspace-write"
    # Now DSH's default is read-only, so workspace-write can only come from the loop.
    on_dsh.call(
        "settings.mutate", {"ns": "permission", "ops": [{"op": "set", "path": ["defaultPreset"], "value": "read-only"}]}
    )

    [second] = fire(11)

    assert second.target_session_id != first.target_session_id
    assert permission_preset(fresh_session(on_dsh, second)) == "workspace-write"
    assert permission_preset(on_dsh.sessions()[first.target_session_id]) == "read-only"  # pinned per session


# -- the Workspaces capability of the host ---------------------------------------------------------


def asked_the_model(stub_model: StubModel, text: bytes) -> bool:
    return any(text in body and b"concise title" not in body for body in stub_model.requests())


def turn_ends(real: RealDsh, session_id: str) -> list[dict]:
    return [event["data"] for event in real.history(session_id) if event["type"] == "turn/end"]


def test_cancel_turn_aborts_a_running_turn_and_leaves_others_alone(modelled, stub_model, tmp_path):
    work = directory(tmp_path, "work")
    adapter = DshHost(modelled.url, cwd=str(work))
    modelled.call("session.create", {"sessionId": "busy", "cwd": str(work)})
    modelled.call(
        "session.prompt", {"sessionId": "busy", "mode": "queue", "content": [{"type": "text", "text": "SLOW60"}]}
    )
    wait_for(lambda: modelled.sessions()["busy"]["running"], timeout=15, message="the SLOW turn to run")
    # Cancelled while the model streams: a cancel in the turn's first moments (before DSH asks the
    # model) sometimes ends the step but logs no turn/end at all (DSH rc.8), so it is not waited on here.
    wait_for(lambda: asked_the_model(stub_model, b"SLOW60"), timeout=15, message="the model to be asked")

    adapter.cancel_turn("busy")

    # Well before the turn's 60 s: DSH aborted it, as a user's cancel.
    [ended] = wait_for(lambda: turn_ends(modelled, "busy"), timeout=15, interval=0.2, message="the turn's end")
    assert ended["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}, ended
    assert not modelled.sessions()["busy"]["running"]

    adapter.cancel_turn("busy")  # idle now: nothing to cancel
    adapter.cancel_turn("never-made")  # unknown to DSH: no turn of it can run
    modelled.call("session.create", {"sessionId": "sleeper", "cwd": str(work)})
    modelled.restart()
    before = modelled.history("sleeper")
    adapter.cancel_turn("sleeper")  # cold: no turn of it can run, and it is not woken up for nothing
    assert not modelled.attached("sleeper") and modelled.history("sleeper") == before
    assert len(turn_ends(modelled, "busy")) == 1


def test_workspaces_lists_the_directories_of_dsh_s_workspaces(dsh, tmp_path):
    default_cwd = directory(tmp_path, "default-cwd")
    adapter = DshHost(dsh.url, cwd=str(default_cwd))
    assert adapter.workspaces() == []
    alpha, beta, loose = directory(tmp_path, "alpha"), directory(tmp_path, "beta"), directory(tmp_path, "loose")
    for path in (beta, alpha, beta):  # made twice: one workspace
        dsh.call("workspace.create", {"path": str(path)})
    dsh.call("session.create", {"sessionId": "ungrouped", "cwd": str(loose)})  # a cwd is no workspace

    assert adapter.workspaces() == [str(alpha), str(beta)]

    # A fresh session dshloop starts in its default directory makes that one a workspace as well.
    adapter.create_session(preset="", model="", first_prompt="", source={"occurrence_key": "loop_w@1"})
    assert adapter.workspaces() == sorted([str(alpha), str(beta), str(default_cwd)])
