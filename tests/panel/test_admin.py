"""The admin (contract §8): useful lists, read-only history, writes through the services."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from loops.models import Loop, LoopRun
from sessions_app.models import Preset, SessionHeader

from .conftest import admin_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def loop_with_runs(make_loop):
    loop = make_loop("Nightly report", schedule={"kind": "cron", "expr": "30 9 * * 1-5", "tz": "Asia/Shanghai"})
    now = timezone.now()
    for i in range(3):
        LoopRun.objects.create(
            run_id=f"run_{i}",
            loop_id=loop.loop_id,
            occurrence_key=f"{loop.loop_id}@{i}",
            scheduled_at=now - timedelta(days=i),
            status="delivered",
            claimed_at=now,
            target_session_id="ses_a",
            missed=i,
        )
    return loop


def test_loop_changelist_has_useful_columns_filters_and_search(
    staff_client, loop_with_runs, django_assert_max_num_queries
):
    with django_assert_max_num_queries(12):
        html = staff_client.get("/admin/loops/loop/").content.decode()
    assert "09:30 on weekdays, Asia/Shanghai" in html and "Nightly report" in html and "scheduled" in html
    assert "By state" in html and "By kind" in html
    html = staff_client.get("/admin/loops/loop/?q=nightly").content.decode()
    assert loop_with_runs.loop_id in html


def test_loop_change_page_is_read_only_with_run_history_and_fire_times(staff_client, loop_with_runs):
    html = staff_client.get(admin_url("loops_loop", loop_with_runs.loop_id)).content.decode()
    assert 'name="prompt"' not in html  # no editing: there is no update tool (spec §1)
    assert "Runs (newest first)" in html
    for i in range(3):
        assert admin_url("loops_looprun", f"run_{i}") in html
    assert f"/admin/loops/looprun/?loop_id={loop_with_runs.loop_id}" in html
    assert admin_url("loops_looprun", "run_0") in html
    assert "Next fire times" in html and "09:30:00 CST (UTC+08:00)" in html
    assert f"/panel/loops/{loop_with_runs.loop_id}/" in html


def test_adding_a_loop_in_the_admin_opens_the_panel_form(staff_client, world):
    response = staff_client.get("/admin/loops/loop/add/")
    assert response.status_code == 302 and response["Location"] == "/panel/new"


def test_deleting_in_the_admin_goes_through_the_service_and_keeps_runs(
    staff_client, loop_with_runs, make_loop, monkeypatch
):
    from loops.services import lifecycle

    calls = []
    real = lifecycle.loop_delete
    monkeypatch.setattr(
        lifecycle, "loop_delete", lambda *, loop_id, actor: calls.append(loop_id) or real(loop_id=loop_id, actor=actor)
    )
    other = make_loop("other")
    response = staff_client.post(admin_url("loops_loop", loop_with_runs.loop_id, "delete"), {"post": "yes"})
    assert response.status_code == 302 and response["Location"] == "/admin/loops/loop/", response.get("Location")
    assert calls == [loop_with_runs.loop_id]
    response = staff_client.post(
        "/admin/loops/loop/", {"action": "delete_through_service", "_selected_action": [other.loop_id]}
    )
    assert response.status_code == 302
    assert calls == [loop_with_runs.loop_id, other.loop_id]
    assert not Loop.objects.exists() and LoopRun.objects.count() == 3
    # The ORM bulk delete is not offered.
    html = staff_client.get("/admin/loops/loop/").content.decode()
    assert "delete_selected" not in html


def test_runs_are_read_only_and_filterable_by_loop(staff_client, loop_with_runs, make_loop):
    html = staff_client.get(f"/admin/loops/looprun/?loop_id={loop_with_runs.loop_id}").content.decode()
    assert "run_0" in html or f"{loop_with_runs.loop_id}@0" in html
    assert "Add loop run" not in html
    assert staff_client.get("/admin/loops/looprun/add/").status_code == 403
    page = staff_client.get(admin_url("loops_looprun", "run_0")).content.decode()
    assert 'name="status"' not in page and "Delete" not in page.split("submit-row")[-1][:300]
    assert staff_client.post(admin_url("loops_looprun", "run_0", "delete"), {"post": "yes"}).status_code == 403
    assert LoopRun.objects.count() == 3


def test_session_headers_are_written_through_session_upsert(staff_client, world, monkeypatch):
    from sessions_app import services

    calls = []
    real = services.session_upsert
    monkeypatch.setattr(services, "session_upsert", lambda **kw: calls.append(kw["session_id"]) or real(**kw))
    fields = {
        "user_title": "Release review",
        "generated_title": "",
        "first_prompt": "",
        "status": "idle",
        "preset": "coder",
        "model": "m2",
        "global_interface": "on",
    }
    response = staff_client.post(admin_url("sessions_app_sessionheader", "ses_a"), fields)
    assert response.status_code == 302, [l for l in response.content.decode().splitlines() if "error" in l.lower()]
    assert calls == ["ses_a"]
    # session_upsert moves the single global-interface flag instead of failing on the unique index.
    assert list(SessionHeader.objects.filter(global_interface=True).values_list("session_id", flat=True)) == ["ses_a"]
    response = staff_client.post(
        "/admin/sessions_app/sessionheader/add/", {**fields, "session_id": "self", "global_interface": ""}
    )
    assert response.status_code == 200 and "reserved selector" in response.content.decode()
    html = staff_client.get("/admin/sessions_app/sessionheader/").content.decode()
    assert "Release review" in html and "Nightly data sync" in html
    assert "/panel/?session=ses_a" in html


def test_presets_are_written_through_preset_upsert_and_never_deleted(staff_client, world):
    response = staff_client.post("/admin/sessions_app/preset/add/", {"name": "writer", "mountable": "on"})
    assert response.status_code == 302
    assert Preset.objects.get(name="writer").mountable
    response = staff_client.post(admin_url("sessions_app_preset", "writer"), {})
    assert response.status_code == 302 and not Preset.objects.get(name="writer").mountable
    assert staff_client.post(admin_url("sessions_app_preset", "writer", "delete"), {"post": "yes"}).status_code == 403


def test_the_admin_index_lists_everything(staff_client, world):
    html = staff_client.get("/admin/").content.decode()
    for name in ("Loops", "Loop runs", "Session headers", "Presets", "Api tokens", "Scheduler heartbeats"):
        assert name in html, name
