"""The embedded host's registry API (contract §5): sessions, presets and the inbox."""

from __future__ import annotations

from datetime import datetime

import pytest

from sessions_app.hosts import get_host
from sessions_app.models import InboxMessage, Preset, SessionHeader
from tests.conftest import error_of

HOST_SESSION_KEYS = {"session_id", "title", "status", "updated_at", "preset", "model", "global_interface"}


def put_session(host_api, session_id: str, **body):
    response = host_api.put(f"/api/host/sessions/{session_id}", body)
    assert response.status_code == 200, response.content
    return response.json()


def get_session(host_api, session_id: str):
    return host_api.get(f"/api/host/sessions/{session_id}")


def source(occurrence_key: str) -> dict:
    return {
        "kind": "loop",
        "loop_id": "loop_1",
        "run_id": "run_1",
        "occurrence_key": occurrence_key,
        "scheduled_at": 1_700_000_000_000,
    }


# --- sessions ---------------------------------------------------------------------------------


def test_put_creates_a_session_and_returns_its_shape(host_api):
    body = put_session(
        host_api, "ses_a", user_title="Release", status="running", preset="coder", model="m1", global_interface=False
    )
    assert set(body) == HOST_SESSION_KEYS
    assert body["session_id"] == "ses_a"
    assert body["title"] == "Release"
    assert body["status"] == "running"
    assert (body["preset"], body["model"], body["global_interface"]) == ("coder", "m1", False)
    assert datetime.fromisoformat(body["updated_at"]).utcoffset() is not None
    assert SessionHeader.objects.get(session_id="ses_a").status == "running"


def test_put_with_an_empty_body_creates_an_idle_untitled_session(host_api):
    body = put_session(host_api, "ses_bare")
    assert body == {
        "session_id": "ses_bare",
        "status": "idle",
        "updated_at": body["updated_at"],
        "global_interface": False,
    }


def test_put_updates_only_the_given_fields(host_api):
    put_session(host_api, "ses_a", generated_title="Generated", status="running", preset="coder", model="m1")
    body = put_session(host_api, "ses_a", status="cold")
    assert body["status"] == "cold"
    assert (body["title"], body["preset"], body["model"]) == ("Generated", "coder", "m1")


def test_put_bumps_updated_at(host_api):
    first = put_session(host_api, "ses_a")["updated_at"]
    second = put_session(host_api, "ses_a", status="cold")["updated_at"]
    assert datetime.fromisoformat(second) >= datetime.fromisoformat(first)


def test_put_title_fields_fold_into_the_title(host_api):
    assert put_session(host_api, "ses_a", first_prompt="Watch the build\nand more")["title"] == "Watch the build"
    assert put_session(host_api, "ses_a", generated_title="Build watcher")["title"] == "Build watcher"
    assert put_session(host_api, "ses_a", user_title="Mine")["title"] == "Mine"
    assert put_session(host_api, "ses_a", user_title="")["title"] == "Build watcher"


def test_get_returns_the_session(host_api):
    created = put_session(host_api, "ses_a", user_title="Release", preset="coder")
    response = get_session(host_api, "ses_a")
    assert response.status_code == 200
    assert response.json() == created


def test_get_of_an_unknown_session_is_404_not_found(host_api):
    response = get_session(host_api, "ses_nobody")
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "not_found"
    assert "ses_nobody" in error["message"]


@pytest.mark.parametrize("reserved", ["self", "new", "global"])
def test_put_of_a_reserved_id_is_422(host_api, reserved):
    response = host_api.put(f"/api/host/sessions/{reserved}", {"status": "idle"})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "session_id")
    assert not SessionHeader.objects.filter(session_id=reserved).exists()


@pytest.mark.parametrize("near_reserved", ["Self", "NEW", "Global", "self_2"])
def test_put_of_a_near_reserved_id_is_an_ordinary_session(host_api, near_reserved):
    assert put_session(host_api, near_reserved)["session_id"] == near_reserved


@pytest.mark.parametrize(
    "body,field",
    [
        ({"title": "x"}, "title"),
        ({"status": "idle", "session_id": "ses_b"}, "session_id"),
        ({"updated_at": "2025-01-01T00:00:00+00:00"}, "updated_at"),
        ({"created_for": "occ"}, "created_for"),
    ],
)
def test_put_session_with_unknown_keys_is_422(host_api, body, field):
    response = host_api.put("/api/host/sessions/ses_a", body)
    assert response.status_code == 422
    assert error_of(response)["field"] == field
    assert not SessionHeader.objects.filter(session_id="ses_a").exists()


@pytest.mark.parametrize("status", ["missing", "RUNNING", "", "paused"])
def test_put_session_status_outside_running_idle_cold_is_422(host_api, status):
    response = host_api.put("/api/host/sessions/ses_a", {"status": status})
    assert response.status_code == 422
    assert error_of(response)["field"] == "status"


def test_at_most_one_session_is_the_global_interface(host_api):
    put_session(host_api, "ses_a", global_interface=True)
    body = put_session(host_api, "ses_b", global_interface=True)
    assert body["global_interface"] is True
    assert get_session(host_api, "ses_a").json()["global_interface"] is False
    assert list(SessionHeader.objects.filter(global_interface=True).values_list("session_id", flat=True)) == ["ses_b"]
    assert get_host().global_session().session_id == "ses_b"


def test_setting_global_interface_again_on_the_same_session_keeps_it(host_api):
    put_session(host_api, "ses_a", global_interface=True)
    assert put_session(host_api, "ses_a", global_interface=True)["global_interface"] is True
    assert SessionHeader.objects.filter(global_interface=True).count() == 1


def test_clearing_global_interface_leaves_no_global_session(host_api):
    put_session(host_api, "ses_a", global_interface=True)
    assert put_session(host_api, "ses_a", global_interface=False)["global_interface"] is False
    assert get_host().global_session() is None


def test_updating_another_field_keeps_the_global_interface(host_api):
    put_session(host_api, "ses_a", global_interface=True)
    put_session(host_api, "ses_b")
    assert put_session(host_api, "ses_a", status="cold")["global_interface"] is True


def test_global_interface_makes_self_a_loop_target(api, host_api):
    create = {"prompt": "p", "schedule": {"kind": "every", "every_seconds": 60}, "session_id": "self"}
    assert api.tool("loop_create", create).status_code == 409
    put_session(host_api, "ses_a", global_interface=True)
    assert api.tool("loop_create", create).status_code == 200


# --- presets ----------------------------------------------------------------------------------


def test_put_preset_defaults_to_mountable(host_api):
    response = host_api.put("/api/host/presets/coder", {})
    assert response.status_code == 200
    assert response.json() == {"name": "coder", "mountable": True}
    assert Preset.objects.get(name="coder").mountable is True


def test_put_preset_upserts_mountable(host_api):
    host_api.put("/api/host/presets/coder", {})
    response = host_api.put("/api/host/presets/coder", {"mountable": False})
    assert response.json() == {"name": "coder", "mountable": False}
    assert Preset.objects.get(name="coder").mountable is False
    assert host_api.put("/api/host/presets/coder", {}).json()["mountable"] is True  # {} means the default


def test_put_preset_with_unknown_keys_is_422(host_api):
    response = host_api.put("/api/host/presets/coder", {"mountable": True, "name": "other"})
    assert response.status_code == 422
    assert error_of(response)["field"] == "name"
    assert not Preset.objects.exists()


@pytest.mark.parametrize("name", ["%20coder", "coder%20", "co%0Ader"])
def test_put_preset_name_with_surrounding_whitespace_or_controls_is_422(host_api, name):
    response = host_api.put(f"/api/host/presets/{name}", {})
    assert response.status_code == 422
    assert error_of(response)["field"] == "name"


def test_preset_mountability_decides_loop_create_with_new(api, host_api):
    create = {
        "prompt": "p",
        "schedule": {"kind": "every", "every_seconds": 600},
        "session_id": "new",
        "preset": "coder",
    }
    assert error_of(api.tool("loop_create", create))["code"] == "unknown_preset"
    host_api.put("/api/host/presets/coder", {"mountable": False})
    assert error_of(api.tool("loop_create", create))["code"] == "unknown_preset"
    host_api.put("/api/host/presets/coder", {})
    assert api.tool("loop_create", create).status_code == 200


# --- inbox ------------------------------------------------------------------------------------


def test_inbox_of_a_known_session_starts_empty(host_api):
    put_session(host_api, "ses_a")
    response = host_api.get("/api/host/sessions/ses_a/inbox")
    assert response.status_code == 200
    assert response.json() == {"messages": []}


def test_inbox_of_an_unknown_session_is_404_not_found(host_api):
    response = host_api.get("/api/host/sessions/ses_nobody/inbox")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_inbox_lists_delivered_messages_oldest_first_in_the_contract_shape(host_api):
    put_session(host_api, "ses_a", status="running")
    host = get_host()
    first = host.deliver("ses_a", text="<loop>one</loop>", source=source("occ-1"), occurrence_key="occ-1")
    put_session(host_api, "ses_a", status="idle")
    second = host.deliver("ses_a", text="<loop>two</loop>", source=source("occ-2"), occurrence_key="occ-2")
    messages = host_api.get("/api/host/sessions/ses_a/inbox").json()["messages"]
    assert [m["message_id"] for m in messages] == [first.message_id, second.message_id]
    assert [m["delivery"] for m in messages] == ["next_step", "next_turn"]  # running -> next safe step
    assert set(messages[0]) == {"message_id", "text", "wakeup", "delivery", "source", "created_at"}
    assert messages[0]["text"] == "<loop>one</loop>"
    assert messages[0]["wakeup"] is True
    assert messages[0]["source"] == source("occ-1")
    assert isinstance(messages[0]["created_at"], int)


def test_inbox_is_idempotent_on_occurrence_key(host_api):
    put_session(host_api, "ses_a")
    host = get_host()
    first = host.deliver("ses_a", text="t", source=source("occ-1"), occurrence_key="occ-1")
    again = host.deliver("ses_a", text="t", source=source("occ-1"), occurrence_key="occ-1")
    assert again.message_id == first.message_id
    assert len(host_api.get("/api/host/sessions/ses_a/inbox").json()["messages"]) == 1


def test_inbox_shows_only_that_sessions_messages(host_api):
    put_session(host_api, "ses_a")
    put_session(host_api, "ses_b")
    get_host().deliver("ses_b", text="t", source=source("occ-b"), occurrence_key="occ-b")
    assert host_api.get("/api/host/sessions/ses_a/inbox").json() == {"messages": []}
    assert InboxMessage.objects.filter(session_id="ses_b").count() == 1


def test_resuming_a_cold_session_keeps_its_preset_and_model(host_api):
    put_session(host_api, "ses_a", status="cold", preset="coder", model="m1")
    resumed = get_host().resume_session("ses_a")
    assert (resumed.status, resumed.preset, resumed.model) == ("idle", "coder", "m1")
    assert get_session(host_api, "ses_a").json()["status"] == "idle"


def test_resuming_a_running_session_leaves_it_running(host_api):
    put_session(host_api, "ses_a", status="running")
    assert get_host().resume_session("ses_a").status == "running"
