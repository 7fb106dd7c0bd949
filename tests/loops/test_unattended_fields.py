"""contract §14: a `new` loop's workspace, permission preset and overlap in LoopDetail and PATCH."""

from __future__ import annotations

import json

import pytest

from loops.models import EventKind, Loop, LoopEvent
from tests.conftest import ApiClient, every


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
