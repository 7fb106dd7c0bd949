"""CSRF on every state-changing request and escaping of user text everywhere it is shown."""

from __future__ import annotations

import pytest
from django.test import Client

from loops.models import Loop, LoopRun
from sessions_app.models import Preset, SessionHeader

from .conftest import admin_url

pytestmark = pytest.mark.django_db

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def csrf_client(staff_user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    return client


def token(client: Client, path: str) -> str:
    client.get(path)
    return client.cookies["csrftoken"].value


NEW_LOOP = {"prompt": "p", "target": "self", "kind": "every", "every_amount": "1", "every_unit": "60"}


def test_create_without_a_csrf_token_is_refused(csrf_client, world):
    assert csrf_client.post("/panel/new", NEW_LOOP).status_code == 403
    assert not Loop.objects.exists()
    response = csrf_client.post("/panel/new", {**NEW_LOOP, "csrfmiddlewaretoken": token(csrf_client, "/panel/new")})
    assert response.status_code == 302 and Loop.objects.count() == 1


def test_delete_without_a_csrf_token_is_refused(csrf_client, make_loop):
    loop = make_loop()
    path = f"/panel/loops/{loop.loop_id}/delete"
    assert csrf_client.post(path).status_code == 403
    assert Loop.objects.filter(loop_id=loop.loop_id).exists()
    assert csrf_client.post(path, {"csrfmiddlewaretoken": token(csrf_client, path)}).status_code == 302
    assert not Loop.objects.filter(loop_id=loop.loop_id).exists()


def test_get_never_deletes(staff_client, make_loop):
    loop = make_loop()
    response = staff_client.get(f"/panel/loops/{loop.loop_id}/delete")
    assert response.status_code == 200 and b"Delete this loop?" in response.content
    assert Loop.objects.filter(loop_id=loop.loop_id).exists()


def test_admin_writes_need_a_csrf_token(csrf_client, make_loop):
    loop = make_loop()
    for path, data in [
        (admin_url("loops_loop", loop.loop_id, "delete"), {"post": "yes"}),
        ("/admin/loops/loop/", {"action": "delete_through_service", "_selected_action": [loop.loop_id]}),
        ("/admin/sessions_app/preset/add/", {"name": "sneaky", "mountable": "on"}),
        (admin_url("sessions_app_sessionheader", "ses_a"), {"status": "cold"}),
    ]:
        assert csrf_client.post(path, data).status_code == 403, path
    assert Loop.objects.filter(loop_id=loop.loop_id).exists()
    assert not Preset.objects.filter(name="sneaky").exists()
    assert SessionHeader.objects.get(session_id="ses_a").status == "running"


def test_logout_is_a_csrf_protected_post(csrf_client, world):
    assert csrf_client.post("/admin/logout/").status_code == 403


def test_unsafe_redirects_after_delete_are_ignored(staff_client, make_loop):
    loop = make_loop()
    response = staff_client.post(f"/panel/loops/{loop.loop_id}/delete", {"next": "https://evil.example/"})
    assert response["Location"] == "/panel/"
    loop = make_loop()
    response = staff_client.post(f"/panel/loops/{loop.loop_id}/delete", {"next": "/panel/?state=overdue"})
    assert response["Location"] == "/panel/?state=overdue"


def test_deleting_twice_is_fine_in_the_ui(staff_client, make_loop):
    loop = make_loop()
    staff_client.post(f"/panel/loops/{loop.loop_id}/delete")
    response = staff_client.post(f"/panel/loops/{loop.loop_id}/delete", follow=True)
    assert f"{loop.loop_id} was already deleted." in response.content.decode()


# --- XSS: user text is text everywhere --------------------------------------------------------------


@pytest.fixture
def hostile(make_loop):
    from sessions_app.services import session_upsert

    session_upsert(session_id="ses_x", changes={"user_title": XSS, "status": "idle"})
    loop = make_loop(f"Please {XSS} now", session_id="ses_x")
    Loop.objects.filter(loop_id=loop.loop_id).update(last_error=f"boom {XSS}", last_result="failed")
    LoopRun.objects.create(
        run_id="run_x",
        loop_id=loop.loop_id,
        occurrence_key=f"{loop.loop_id}@1",
        scheduled_at=loop.created_at,
        status="failed",
        claimed_at=loop.created_at,
        error=f"run {XSS}",
        fallback=f"fallback {XSS}",
        target_session_id="ses_x",
        prompt=f"Please {XSS} now",
    )
    return loop


def assert_escaped(response):
    assert response.status_code == 200
    html = response.content.decode()
    assert XSS not in html, html[html.find(XSS) - 200 : html.find(XSS) + 50]
    assert ESCAPED in html


def test_panel_escapes_prompts_titles_and_errors(staff_client, hostile):
    for path in [
        "/panel/",
        f"/panel/loops/{hostile.loop_id}/",
        f"/panel/loops/{hostile.loop_id}/delete",
        "/panel/new",
        "/panel/new?session=ses_x",
        "/panel/?session=ses_x",
        f"/panel/?q={XSS}",
    ]:
        assert_escaped(staff_client.get(path))


def test_composer_status_escapes_prompts(staff_client, hostile):
    assert_escaped(staff_client.get("/panel/sessions/ses_x/status"))
    assert_escaped(staff_client.get("/panel/sessions/ses_x/status?fragment=1"))


def test_admin_escapes_user_text(staff_client, hostile):
    for path in [
        "/admin/loops/loop/",
        admin_url("loops_loop", hostile.loop_id),
        "/admin/loops/looprun/",
        admin_url("loops_looprun", "run_x"),
        "/admin/sessions_app/sessionheader/",
        admin_url("sessions_app_sessionheader", "ses_x"),
    ]:
        assert_escaped(staff_client.get(path))


def test_a_hostile_session_id_in_the_status_path_is_text(staff_client, world):
    response = staff_client.get("/panel/sessions/%3Cscript%3Ealert(1)%3C%2Fscript%3E/status")
    assert_escaped(response)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/panel/?session=%00", 200),
        ("/panel/?q=%00abc", 200),
        ("/panel/?session=%01x&state=%00&target=%00&page=%00", 200),
        ("/panel/new?session=%00", 200),
        ("/panel/loops/%00/", 404),
        ("/panel/loops/%00/delete", 404),
        ("/panel/sessions/%00/status", 404),
        ("/panel/sessions/%20/status", 404),
        ("/panel/loops/%ED%A0%80/", 404),  # broken UTF-8
        ("/panel/?q=%ED%A0%80", 400),  # not UTF-8: refused, not searched as U+FFFD (tests/panel/test_bad_input.py)
    ],
)
def test_odd_input_in_urls_is_never_a_server_error(staff_client, world, path, status):
    # PostgreSQL refuses text holding NUL: such values must never reach a query.
    assert staff_client.get(path).status_code == status
