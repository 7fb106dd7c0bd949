"""contract §14 in the panel and the admin: a `new` loop's workspace, permission preset and overlap
on its edit form (saved through the same PATCH input, only what changed, errors on their field), on
its page, and in the admin (a read-only fieldset, and bulk Overlap actions through loop_edit)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from loops.events import Actor
from loops.models import ActorKind, Loop, LoopEvent
from loops.services import edit as edit_service
from sessions_app.hosts.base import HostError
from sessions_app.hosts.local import LocalHost

from .conftest import admin_url
from .test_create import field_errors
from .test_create import form as create_form
from .test_operate import admin_action, edit_form, flash, fresh

pytestmark = pytest.mark.django_db

PRESETS = ["read-only", "workspace-write", "danger-full-access"]


@pytest.fixture
def new_loop(make_loop, settings):
    settings.DSHLOOP_PERMISSION_PRESETS = PRESETS
    return make_loop("Sweep the reports", session_id="new")


def edit_page(client, loop) -> str:
    response = client.get(f"/panel/loops/{loop.loop_id}/edit")
    assert response.status_code == 200
    return response.content.decode()


def edit(client, loop, **changes):
    return client.post(f"/panel/loops/{loop.loop_id}/edit", edit_form(loop, **changes))


def options(html: str, name: str) -> list[tuple[str, bool]]:
    """A select's options as (value, selected)."""
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert select, f"no select {name}"
    return [(value, bool(chosen)) for value, chosen in re.findall(r'<option value="([^"]*)"( selected)?', select[1])]


def edited_changes(loop) -> list[dict]:
    return [e.changes for e in LoopEvent.objects.filter(loop_id=loop.loop_id, kind="edited").order_by("revision")]


class WorkspaceHost(LocalHost):
    """The embedded host, declaring workspaces as the DSH host does; `listed` is its workspace.list
    answer, or the HostError it raises."""

    capabilities = dataclasses.replace(LocalHost.capabilities, workspaces=True)

    def __init__(self, listed: list[str] | HostError):
        self.listed = listed

    def workspaces(self) -> list[str]:
        if isinstance(self.listed, HostError):
            raise self.listed
        return self.listed


def use_host(monkeypatch, host) -> None:
    monkeypatch.setattr("panel.views.loop_pages.get_host", lambda: host)


# --- the edit form -------------------------------------------------------------------------------------


def test_the_edit_form_of_a_new_loop_shows_workspace_preset_and_overlap(staff_client, new_loop):
    html = edit_page(staff_client, new_loop)
    # The embedded host has no workspaces: the host default, or a typed directory.
    assert options(html, "workspace") == [("", True), ("other", False)]
    assert ">Host default</option>" in html and ">Another directory…</option>" in html
    assert 'name="workspace_other"' in html
    presets = [("read-only", True), ("workspace-write", False), ("danger-full-access", False)]
    assert options(html, "permission_preset") == presets
    assert re.search(r'name="overlap" value="allow"[^>]*checked', html)
    assert re.search(r'name="overlap" value="skip"(?![^>]*checked)', html)
    assert "Start another run (allow)" in html and "Skip while the last run is still running (skip)" in html


def test_the_form_offers_the_loops_own_workspace_and_a_preset_no_longer_listed(staff_client, new_loop, settings):
    edit_service.loop_edit(
        loop_id=new_loop.loop_id, changes={"workspace": "/srv/reports", "overlap": "skip"}, actor=Actor(ActorKind.USER)
    )
    settings.DSHLOOP_PERMISSION_PRESETS = ["workspace-write"]  # read-only, the loop's, dropped since
    html = edit_page(staff_client, fresh(new_loop))
    assert options(html, "workspace") == [("", False), ("/srv/reports", True), ("other", False)]
    assert options(html, "permission_preset") == [("read-only", True), ("workspace-write", False)]
    assert re.search(r'name="overlap" value="skip"[^>]*checked', html)


def test_saving_sends_only_the_changed_fields_as_one_revision(staff_client, new_loop):
    response = edit(staff_client, new_loop, overlap="skip")
    assert response.status_code == 302, response.content[:2000]
    assert flash(staff_client.get(response["Location"])) == [f"Saved {new_loop.loop_id} as revision 2."]
    loop = fresh(new_loop)
    assert (loop.overlap, loop.workspace, loop.permission_preset, loop.revision) == ("skip", "", "read-only", 2)
    assert edited_changes(loop) == [{"overlap": ["allow", "skip"]}]

    response = edit(
        staff_client, loop, workspace="other", workspace_other="/srv/reports", permission_preset="workspace-write"
    )
    assert response.status_code == 302
    assert flash(staff_client.get(response["Location"])) == [f"Saved {loop.loop_id} as revision 3."]
    loop = fresh(loop)
    assert (loop.workspace, loop.permission_preset, loop.overlap) == ("/srv/reports", "workspace-write", "skip")
    assert edited_changes(loop)[-1] == {
        "workspace": ["", "/srv/reports"],
        "permission_preset": ["read-only", "workspace-write"],
    }
    event = LoopEvent.objects.get(loop_id=loop.loop_id, revision=3)
    assert (event.actor_kind, event.actor_id) == ("user", "ada")

    assert edit(staff_client, loop).status_code == 302  # as the page shows it: nothing changed
    assert fresh(loop).revision == 3

    assert edit(staff_client, loop, workspace="").status_code == 302  # back to the host default
    loop = fresh(loop)
    assert (loop.workspace, loop.revision) == ("", 4)
    assert edited_changes(loop)[-1] == {"workspace": ["/srv/reports", ""]}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"permission_preset": "root"}, "permission_preset", "Unknown permission preset 'root'; the host offers"),
        ({"overlap": "sometimes"}, "overlap", "'overlap' must be"),
        (
            {"workspace": "other", "workspace_other": "srv/reports"},
            "workspace_other",
            "'workspace' must be an absolute",
        ),
        ({"workspace": "other", "workspace_other": ""}, "workspace_other", "Type the directory's absolute path"),
        ({"workspace": "relative"}, "workspace", "'workspace' must be an absolute directory path"),
    ],
)
def test_a_refused_value_is_shown_on_its_field_and_changes_nothing(staff_client, new_loop, fields, field, message):
    response = edit(staff_client, new_loop, **fields)
    assert response.status_code == 422
    errors = field_errors(response, field)
    assert errors and errors[0].replace("&#x27;", "'").startswith(message), errors
    assert fresh(new_loop).revision == 1 and not edited_changes(new_loop)


def test_a_loop_into_a_session_has_no_such_fields_and_ignores_them(staff_client, make_loop):
    loop = make_loop("Check the deployment", session_id="ses_a")
    html = edit_page(staff_client, loop)
    for name in ("workspace", "workspace_other", "permission_preset", "overlap"):
        assert f'name="{name}"' not in html, name
    response = edit(
        staff_client, loop, prompt="Check it twice", overlap="skip", workspace="/srv", permission_preset="x"
    )
    assert response.status_code == 302
    assert edited_changes(loop) == [{"prompt": ["Check the deployment", "Check it twice"]}]
    assert (fresh(loop).overlap, fresh(loop).workspace) == ("allow", "")


def test_a_new_loop_sent_to_a_session_does_not_send_them(staff_client, new_loop):
    # The §14 fields are hidden with the other target; what they still post must not be a 422.
    response = edit(staff_client, new_loop, target="session", session="ses_a", overlap="skip")
    assert response.status_code == 302, response.content[:2000]
    loop = fresh(new_loop)
    assert (loop.session_id, loop.overlap, loop.permission_preset) == ("ses_a", "allow", "")


def test_a_host_with_workspaces_offers_them(staff_client, new_loop, monkeypatch, settings):
    settings.DSHLOOP_DSH_CWD = "/home/dsh"
    use_host(monkeypatch, WorkspaceHost(["/srv/b", "/srv/a"]))
    html = edit_page(staff_client, new_loop)
    assert options(html, "workspace") == [("", True), ("/srv/a", False), ("/srv/b", False), ("other", False)]
    assert ">Host default (/home/dsh)</option>" in html
    assert edit(staff_client, new_loop, workspace="/srv/b").status_code == 302
    assert fresh(new_loop).workspace == "/srv/b"


def test_a_host_that_cannot_list_workspaces_leaves_the_current_one_and_free_text(staff_client, new_loop, monkeypatch):
    edit_service.loop_edit(loop_id=new_loop.loop_id, changes={"workspace": "/srv/x"}, actor=Actor(ActorKind.USER))
    use_host(monkeypatch, WorkspaceHost(HostError("DSH is unreachable", transient=True)))
    html = edit_page(staff_client, new_loop)
    assert options(html, "workspace") == [("", False), ("/srv/x", True), ("other", False)]
    assert "The host could not list its workspaces (DSH is unreachable); type a directory instead." in html
    response = edit(staff_client, fresh(new_loop), workspace="other", workspace_other="/srv/y")
    assert response.status_code == 302
    assert fresh(new_loop).workspace == "/srv/y"


class DirectoryHost(WorkspaceHost):
    """A host with workspaces that can tell which directories exist (DSH asks host.listDirectory)."""

    def __init__(self, listed: list[str], existing: set[str]):
        super().__init__(listed)
        self.existing = existing

    def directory_problem(self, path: str) -> str:
        return "" if path in self.existing else f"cannot list {path}: ENOENT: no such file or directory"


@pytest.mark.parametrize(
    ("fields", "field", "path"),
    [
        ({"workspace": "other", "workspace_other": "/srv/gone/"}, "workspace_other", "/srv/gone"),
        ({"workspace": "/srv/moved"}, "workspace", "/srv/moved"),  # listed by the host, gone since
    ],
)
def test_a_workspace_the_host_says_does_not_exist_is_shown_on_its_field(
    staff_client, new_loop, monkeypatch, fields, field, path
):
    host = DirectoryHost(["/srv/moved", "/srv/reports"], existing={"/srv/reports"})
    use_host(monkeypatch, host)
    monkeypatch.setattr("loops.services.unattended.get_host", lambda: host)

    response = edit(staff_client, new_loop, overlap="skip", **fields)

    assert response.status_code == 422
    [error] = field_errors(response, field)
    assert error.replace("&#x27;", "'") == (
        f"The host cannot start sessions in '{path}' (cannot list {path}: ENOENT: no such file or directory); "
        "give an existing directory on the host, or null for the host's default."
    )
    assert fresh(new_loop).revision == 1 and not edited_changes(new_loop)
    if "workspace_other" in fields:  # what was typed stays in the form, to be corrected
        assert f'id="id_workspace_other" value="{fields["workspace_other"]}"' in response.content.decode()

    response = edit(staff_client, new_loop, workspace="other", workspace_other="/srv/reports/./")
    assert response.status_code == 302
    assert fresh(new_loop).workspace == "/srv/reports"


# --- the detail page -----------------------------------------------------------------------------------


def test_the_detail_page_shows_them_for_a_new_loop_only(staff_client, new_loop, make_loop):
    html = staff_client.get(f"/panel/loops/{new_loop.loop_id}/").content.decode()
    assert 'id="loop-workspace">host default<' in html
    assert 'id="loop-permission-preset">read-only<' in html
    assert 'id="loop-overlap">Start another run (allow)<' in html

    edit(staff_client, new_loop, workspace="other", workspace_other="/srv/<reports>", overlap="skip")
    html = staff_client.get(f"/panel/loops/{new_loop.loop_id}/").content.decode()
    assert 'id="loop-workspace"><span class="mono">/srv/&lt;reports&gt;</span><' in html
    assert 'id="loop-overlap">Skip while the last run is still running (skip)<' in html
    # The trail names the edited fields in words.
    assert '<span class="change-field">Workspace</span>' in html
    assert '<span class="change-field">Overlap</span>' in html

    other = make_loop(session_id="ses_a")
    html = staff_client.get(f"/panel/loops/{other.loop_id}/").content.decode()
    assert "loop-workspace" not in html and "loop-overlap" not in html and "loop-permission-preset" not in html


# --- the admin -----------------------------------------------------------------------------------------


def test_the_admin_change_page_shows_them_read_only(staff_client, new_loop):
    edit_service.loop_edit(loop_id=new_loop.loop_id, changes={"workspace": "/srv/reports"}, actor=Actor(ActorKind.USER))
    html = staff_client.get(admin_url("loops_loop", new_loop.loop_id)).content.decode()
    section = html[html.index("Unattended runs") :]
    assert "/srv/reports" in section and "read-only" in section
    for name in ("workspace", "permission_preset", "overlap"):
        assert f'name="{name}"' not in html, name


def test_admin_overlap_actions_edit_new_loops_and_leave_others(staff_client, new_loop, make_loop):
    second = make_loop("Another sweep", session_id="new")
    other = make_loop("Into a session", session_id="ses_a")
    messages = admin_action(staff_client, "overlap_skip_selected", [new_loop, second, other])
    assert messages == [
        f'Set overlap to skip on 2 loops. 1 was left alone (overlap is only for loops that target "new"): '
        f"{other.loop_id}."
    ]
    for loop in (new_loop, second):
        assert (fresh(loop).overlap, fresh(loop).revision) == ("skip", 2)
        event = LoopEvent.objects.get(loop_id=loop.loop_id, kind="edited")
        assert (event.actor_kind, event.actor_id, event.changes) == ("user", "ada", {"overlap": ["allow", "skip"]})
    assert (fresh(other).overlap, fresh(other).revision) == ("allow", 1)
    assert not edited_changes(other)

    messages = admin_action(staff_client, "overlap_skip_selected", [new_loop])
    assert messages == [f"Set overlap to skip on 0 loops. 1 was already set to skip: {new_loop.loop_id}."]
    assert fresh(new_loop).revision == 2

    assert admin_action(staff_client, "overlap_allow_selected", [new_loop]) == ["Set overlap to allow on 1 loop."]
    assert (fresh(new_loop).overlap, fresh(new_loop).revision) == ("allow", 3)
    assert edited_changes(new_loop)[-1] == {"overlap": ["skip", "allow"]}


# --- a host that cannot be asked ---------------------------------------------------------------------


class UnreachableHost(LocalHost):
    capabilities = dataclasses.replace(LocalHost.capabilities, workspaces=True)

    def session_workspace(self, session_id: str) -> str:
        raise HostError("DSH is unreachable.", transient=True)


def test_a_new_loop_whose_creator_s_workspace_cannot_be_read_is_refused_with_the_reason(
    staff_client, world, monkeypatch
):
    """A new loop made in the panel captures the global session's workspace; when the host does not
    answer, the page says so and nothing is created (no server error)."""
    monkeypatch.setattr("loops.services.unattended.get_host", lambda: UnreachableHost())
    response = staff_client.post("/panel/new", create_form(target="new", kind="after"))
    assert response.status_code == 422  # the form again, with the error
    assert "DSH is unreachable. Try again shortly." in response.content.decode()
    assert not Loop.objects.exists()
