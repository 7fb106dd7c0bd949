"""contract §14: a `new` loop's workspace, permission preset and overlap in LoopDetail and PATCH."""

from __future__ import annotations

import dataclasses
import json

import pytest
from django.db import connection

from loops.models import EventKind, Loop, LoopEvent
from sessions_app.hosts.base import HostError
from sessions_app.hosts.local import LocalHost
from tests.conftest import ApiClient, error_of, every


@pytest.fixture(autouse=True)
def no_floor(settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0


def create(api: ApiClient, **body) -> str:
    response = api.tool("loop_create", {"prompt": "Sweep", "schedule": every(600), **body})
    assert response.status_code == 200, response.content
    return response.json()["loop_id"]


def patch(client: ApiClient, loop_id: str, body: dict):
    return client.client.patch(
        f"/api/loops/{loop_id}", data=json.dumps(body), content_type="application/json", headers=client.headers()
    )


def detail(client: ApiClient, loop_id: str) -> dict:
    response = client.get(f"/api/loops/{loop_id}")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_new_loop_shows_its_defaults_and_other_loops_omit_them(api, manage_api, make_session):
    make_session("ses_target", status="idle")
    fresh = detail(manage_api, create(api, session_id="new"))
    # The embedded host has no workspaces: nothing to capture, so the host default applies.
    assert (fresh["workspace"], fresh["permission_preset"], fresh["overlap"]) == ("", "read-only", "allow")
    other = detail(manage_api, create(api, session_id="ses_target"))
    assert not {"workspace", "permission_preset", "overlap"} & other.keys()
    # The agents' view stays spec §4 plus preset.
    listed = api.tool("loop_list", {}).json()["loops"]
    assert all(not {"workspace", "permission_preset", "overlap"} & loop.keys() for loop in listed)


def test_patch_sets_them_as_one_revision_with_an_edited_event(api, manage_api):
    loop_id = create(api, session_id="new")
    body = {"workspace": "/srv/reports", "permission_preset": "workspace-write", "overlap": "skip"}
    response = patch(manage_api, loop_id, body)
    assert response.status_code == 200, response.content
    shown = response.json()
    assert {key: shown[key] for key in body} == body and shown["revision"] == 2
    event = LoopEvent.objects.filter(loop_id=loop_id, kind=EventKind.EDITED).get()
    assert event.changes == {
        "workspace": ["", "/srv/reports"],
        "permission_preset": ["read-only", "workspace-write"],
        "overlap": ["allow", "skip"],
    }
    # null: back to the host's defaults.
    response = patch(manage_api, loop_id, {"workspace": None, "overlap": None})
    assert (response.json()["workspace"], response.json()["overlap"], response.json()["revision"]) == ("", "allow", 3)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"workspace": "relative/dir"}, "workspace", "absolute directory path"),
        ({"workspace": "/a\x07b"}, "workspace", "control characters"),
        ({"workspace": "/" + "x" * 1024}, "workspace", "1024"),
        ({"permission_preset": "root"}, "permission_preset", "Unknown permission preset 'root'"),
        ({"overlap": "queue"}, "overlap", ""),
    ],
)
def test_bad_values_are_422_and_change_nothing(api, manage_api, body, field, words):
    loop_id = create(api, session_id="new")
    response = patch(manage_api, loop_id, body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and error["field"] == field and words in error["message"]
    assert Loop.objects.get(loop_id=loop_id).revision == 1


def test_they_are_refused_on_a_loop_into_an_existing_session(api, manage_api, make_session):
    make_session("ses_target", status="idle")
    loop_id = create(api, session_id="ses_target")
    for body in ({"overlap": "skip"}, {"workspace": "/srv"}, {"permission_preset": "read-only"}):
        response = patch(manage_api, loop_id, body)
        assert response.status_code == 422, response.content
        error = response.json()["error"]
        assert error["field"] == next(iter(body)) and 'only for loops that target "new"' in error["message"]
    assert Loop.objects.get(loop_id=loop_id).revision == 1


def test_moving_a_loop_to_new_gives_it_the_defaults_and_moving_it_away_drops_them(api, manage_api, make_session):
    make_session("ses_target", status="idle")
    loop_id = create(api, session_id="ses_target")
    moved = patch(manage_api, loop_id, {"session_id": "new", "overlap": "skip"}).json()
    assert (moved["workspace"], moved["permission_preset"], moved["overlap"]) == ("", "read-only", "skip")
    back = patch(manage_api, loop_id, {"session_id": "ses_target"}).json()
    assert "overlap" not in back
    row = Loop.objects.get(loop_id=loop_id)
    assert (row.workspace, row.permission_preset, row.overlap) == ("", "", "allow")


def test_the_presets_offered_are_a_setting(api, manage_api, settings):
    settings.DSHLOOP_PERMISSION_PRESETS = ["read-only", "read-only-unattended"]
    loop_id = create(api, session_id="new")
    assert patch(manage_api, loop_id, {"permission_preset": "read-only-unattended"}).status_code == 200
    assert patch(manage_api, loop_id, {"permission_preset": "workspace-write"}).status_code == 422


# -- the workspace: normalised, and checked by a host that can tell ------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("/srv/reports/a/../b", "/srv/reports/b"),
        ("/srv//reports/./b/", "/srv/reports/b"),
        ("//srv/reports", "/srv/reports"),  # POSIX's "implementation-defined" leading //: "/" on Linux
        ("/srv/../../..", "/"),
    ],
)
def test_a_workspace_is_stored_normalised(api, manage_api, given, stored):
    loop_id = create(api, session_id="new")
    response = patch(manage_api, loop_id, {"workspace": given})
    assert response.status_code == 200, response.content
    assert response.json()["workspace"] == stored
    assert Loop.objects.get(loop_id=loop_id).workspace == stored
    events = LoopEvent.objects.filter(loop_id=loop_id, kind=EventKind.EDITED)
    assert [e.changes for e in events] == [{"workspace": ["", stored]}]


class DirectoryHost(LocalHost):
    """The embedded host declaring workspaces as DSH does; its directories are the `existing` set,
    and every question it is asked is recorded with whether a transaction (a row lock) was open."""

    capabilities = dataclasses.replace(LocalHost.capabilities, workspaces=True)

    def __init__(self, existing: set[str]):
        self.existing = existing
        self.creator_workspace = ""  # every session's, as session.list would say
        self.asked: list[tuple[str, bool]] = []

    def session_workspace(self, session_id: str) -> str:
        self.asked.append((f"session {session_id}", connection.in_atomic_block))
        return self.creator_workspace

    def directory_problem(self, path: str) -> str:
        self.asked.append((path, connection.in_atomic_block))
        return "" if path in self.existing else f"cannot list {path}: ENOENT: no such file or directory"


@pytest.fixture
def directories(monkeypatch) -> DirectoryHost:
    host = DirectoryHost({"/srv/reports"})
    monkeypatch.setattr("loops.services.unattended.get_host", lambda: host)
    return host


@pytest.mark.django_db(transaction=True)
def test_a_workspace_the_host_says_does_not_exist_is_refused_before_the_loop_is_locked(api, manage_api, directories):
    loop_id = create(api, session_id="new")
    directories.asked.clear()  # the creator's workspace, captured at creation

    response = patch(manage_api, loop_id, {"workspace": "/nonexistent/dir", "overlap": "skip"})

    assert response.status_code == 422, response.content
    assert error_of(response) == {
        "code": "invalid_input",
        "field": "workspace",
        "message": "The host cannot start sessions in '/nonexistent/dir' (cannot list /nonexistent/dir: ENOENT: no "
        "such file or directory); give an existing directory on the host, or null for the host's default.",
    }
    row = Loop.objects.get(loop_id=loop_id)
    assert (row.workspace, row.overlap, row.revision) == ("", "allow", 1)  # nothing of the edit was written
    # Asked with the path as it would be stored, and with no transaction open: no row lock held.
    assert directories.asked == [("/nonexistent/dir", False)]

    response = patch(manage_api, loop_id, {"workspace": "/srv/reports/old/..", "overlap": "skip"})
    assert response.status_code == 200, response.content
    assert (response.json()["workspace"], response.json()["revision"]) == ("/srv/reports", 2)
    assert directories.asked[-1] == ("/srv/reports", False)

    assert patch(manage_api, loop_id, {"workspace": None}).status_code == 200  # the host default: nothing to ask
    assert len(directories.asked) == 2


def test_an_unknown_loop_is_404_before_its_workspace_is_asked_about(manage_api, directories):
    response = patch(manage_api, "loop_nope", {"workspace": "/nonexistent/dir", "session_id": "new"})
    assert response.status_code == 404 and error_of(response)["code"] == "unknown_loop"
    assert directories.asked == []


def test_a_host_that_cannot_be_asked_refuses_the_edit_with_the_reason(api, manage_api, monkeypatch):
    loop_id = create(api, session_id="new")

    class Unreachable(DirectoryHost):
        def directory_problem(self, path: str) -> str:
            raise HostError("DSH is unreachable at http://127.0.0.1:9.", transient=True)

    monkeypatch.setattr("loops.services.unattended.get_host", lambda: Unreachable(set()))
    response = patch(manage_api, loop_id, {"workspace": "/srv/reports"})
    assert response.status_code == 409, response.content
    assert error_of(response)["code"] == "target_unavailable"
    assert "DSH is unreachable" in error_of(response)["message"]
    assert Loop.objects.get(loop_id=loop_id).revision == 1


@pytest.mark.django_db(transaction=True)
def test_a_loop_moved_to_new_asks_for_its_creator_s_workspace_before_it_is_locked(
    api, manage_api, make_session, directories
):
    make_session("ses_target", status="idle")
    loop_id = create(api, session_id="ses_target")
    directories.creator_workspace = "/srv/reports"

    moved = patch(manage_api, loop_id, {"session_id": "new"})

    assert moved.status_code == 200, moved.content
    assert moved.json()["workspace"] == "/srv/reports"  # the creator's, as loop_create captures it
    assert directories.asked == [("session ses_caller", False)]
    assert patch(manage_api, loop_id, {"session_id": "new", "overlap": "skip"}).status_code == 200
    assert len(directories.asked) == 1  # already `new`: nothing to capture again
