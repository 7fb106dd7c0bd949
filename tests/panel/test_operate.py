"""Operating loops from the panel and the admin (contract §9): pause and resume, run now,
retry and edit, each through loops.operations with the signed-in staff user as the actor, each a
CSRF-protected POST that goes back with a message; a refusal (409) is a message, never an error page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from loops.events import Actor
from loops.models import Loop, LoopEvent, LoopRun, LoopState
from loops.services import lifecycle
from panel.edit_forms import initial_for

from .conftest import admin_url
from .test_create import field_errors, form

pytestmark = pytest.mark.django_db

XSS = "<script>alert(1)</script>"


def flash(response) -> list[str]:
    """The messages on a page, as text."""
    html = response.content.decode()
    found = re.findall(r'<li class="message[^"]*">(.*?)</li>', html, re.S)
    return [re.sub(r"<[^>]+>", "", m).replace("&#x27;", "'").replace("&quot;", '"') for m in found]


def post(client: Client, path: str, data=None):
    """A POST, then the page it goes back to (the message is shown there)."""
    response = client.post(path, data or {})
    assert response.status_code == 302, (response.status_code, response.content[:500])
    return response, client.get(response["Location"])


def events(loop) -> list[tuple[str, str, str, int]]:
    rows = LoopEvent.objects.filter(loop_id=loop.loop_id).order_by("at", "id")
    return [(e.kind, e.actor_kind, e.actor_id, e.revision) for e in rows]


def fresh(loop) -> Loop:
    return Loop.objects.get(loop_id=loop.loop_id)


# --- pause and resume --------------------------------------------------------------------------------


def test_pause_from_a_row_goes_back_to_the_list_with_a_message(staff_client, make_loop):
    loop = make_loop("Check the deployment")
    index = staff_client.get("/panel/?state=scheduled").content.decode()
    assert f'action="/panel/loops/{loop.loop_id}/pause"' in index
    response, page = post(staff_client, f"/panel/loops/{loop.loop_id}/pause", {"next": "/panel/?state=scheduled"})
    assert response["Location"] == "/panel/?state=scheduled"
    assert flash(page) == [f"Paused {loop.loop_id}: it will not run until it is resumed."]
    paused = fresh(loop)
    assert (paused.state, paused.next_at, paused.pause_reason) == (LoopState.PAUSED, None, "operator")
    assert events(loop)[-1] == ("paused", "user", "ada", 1)
    # The row now offers Resume instead of Pause, and no Retry (it has not failed).
    html = staff_client.get("/panel/").content.decode()
    assert f'action="/panel/loops/{loop.loop_id}/resume"' in html
    assert f'action="/panel/loops/{loop.loop_id}/pause"' not in html
    assert f"/panel/loops/{loop.loop_id}/retry" not in html


def test_pause_and_resume_are_idempotent(staff_client, make_loop):
    loop = make_loop()
    path = f"/panel/loops/{loop.loop_id}"
    post(staff_client, f"{path}/pause")
    _, page = post(staff_client, f"{path}/pause")
    assert flash(page) == [f"{loop.loop_id} was already paused."]
    before = timezone.now()
    _, page = post(staff_client, f"{path}/resume")
    resumed = fresh(loop)
    assert resumed.state == LoopState.SCHEDULED and resumed.next_at > before  # strictly after now
    (message,) = flash(page)
    assert message.startswith(f"Resumed {loop.loop_id} — next run ")
    _, page = post(staff_client, f"{path}/resume")
    assert flash(page) == [f"{loop.loop_id} was not paused."]
    assert [kind for kind, *_ in events(loop)] == ["created", "paused", "resumed"]


def test_a_completed_loop_cannot_be_paused_and_says_why(staff_client, make_loop):
    """The panel and the admin say what PATCH and POST …/pause answer (409 loop_completed)."""
    loop = make_loop()
    Loop.objects.filter(loop_id=loop.loop_id).update(state=LoopState.COMPLETED, next_at=None)
    why = f"{loop.loop_id} is completed: it has no occurrence left to pause. Create a new loop (loop_create) to run it again."
    _, page = post(staff_client, f"/panel/loops/{loop.loop_id}/pause")
    assert flash(page) == [why]
    assert admin_action(staff_client, "pause_selected", [loop]) == ["Paused 0 loops.", f"Refused 1: {why}"]
    assert fresh(loop).state == LoopState.COMPLETED


def test_pause_and_resume_are_post_only(staff_client, make_loop):
    loop = make_loop()
    for action in ("pause", "resume"):
        assert staff_client.get(f"/panel/loops/{loop.loop_id}/{action}").status_code == 405
        assert staff_client.head(f"/panel/loops/{loop.loop_id}/{action}").status_code == 405
    assert fresh(loop).state == LoopState.SCHEDULED


def test_an_unsafe_next_is_ignored(staff_client, make_loop):
    loop = make_loop()
    response = staff_client.post(f"/panel/loops/{loop.loop_id}/pause", {"next": "https://evil.example/"})
    assert response["Location"] == f"/panel/loops/{loop.loop_id}/"


# --- run now -----------------------------------------------------------------------------------------


def test_run_now_asks_first_then_queues_one_manual_run(staff_client, make_loop):
    loop = make_loop()
    path = f"/panel/loops/{loop.loop_id}/run"
    page = staff_client.get(path + "?next=/panel/")
    assert page.status_code == 200 and "Run this loop now?" in page.content.decode()
    assert not LoopRun.objects.exists()  # GET only asks
    next_at = fresh(loop).next_at
    response, page = post(staff_client, path, {"next": "/panel/"})
    assert response["Location"] == "/panel/"
    (run,) = LoopRun.objects.all()
    assert (run.manual, run.revision, run.status) == (True, 1, "claimed")
    assert run.occurrence_key == f"{loop.loop_id}@manual:{run.run_id}"
    assert flash(page) == [
        f"Queued a manual run of {loop.loop_id} ({run.run_id}, revision 1); its schedule is unchanged."
    ]
    assert fresh(loop).next_at == next_at
    assert events(loop)[-1] == ("run_now", "user", "ada", 1)


def test_run_now_twice_is_one_run_and_one_message_about_the_run_in_flight(staff_client, make_loop):
    loop = make_loop()
    path = f"/panel/loops/{loop.loop_id}/run"
    post(staff_client, path)
    assert "A run of this loop is in flight" in staff_client.get(path).content.decode()
    response, page = post(staff_client, path)  # a 409 is a message, not an error page
    assert response["Location"] == f"/panel/loops/{loop.loop_id}/"
    assert flash(page) == [f"{loop.loop_id} has a run in flight; run it again once that one has finished."]
    assert 'class="message message-error"' in page.content.decode()
    assert LoopRun.objects.count() == 1


def test_run_now_works_on_a_paused_loop_which_stays_paused(staff_client, make_loop):
    loop = make_loop()
    post(staff_client, f"/panel/loops/{loop.loop_id}/pause")
    assert "the loop stays paused" in staff_client.get(f"/panel/loops/{loop.loop_id}/run").content.decode()
    post(staff_client, f"/panel/loops/{loop.loop_id}/run")
    assert LoopRun.objects.get().manual
    assert fresh(loop).state == LoopState.PAUSED


# --- retry -------------------------------------------------------------------------------------------


def failed_once(make_loop) -> Loop:
    loop = make_loop("Say hello once", schedule={"kind": "after", "after_seconds": 60})
    Loop.objects.filter(loop_id=loop.loop_id).update(
        state=LoopState.FAILED, next_at=None, last_result="failed", last_error="host timed out"
    )
    return fresh(loop)


def test_retry_is_offered_for_a_failed_loop_asks_first_and_fires_once_now(staff_client, make_loop):
    loop = failed_once(make_loop)
    assert f"/panel/loops/{loop.loop_id}/retry" in staff_client.get("/panel/?state=failed").content.decode()
    page = staff_client.get(f"/panel/loops/{loop.loop_id}/retry").content.decode()
    assert "Retry this loop?" in page and "host timed out" in page
    assert fresh(loop).state == LoopState.FAILED
    before = timezone.now() - timedelta(seconds=1)
    _, page = post(staff_client, f"/panel/loops/{loop.loop_id}/retry")
    assert flash(page) == [f"Retrying {loop.loop_id}: it fires once, now."]
    retried = fresh(loop)
    assert retried.state == LoopState.SCHEDULED and before <= retried.next_at <= timezone.now()
    assert events(loop)[-1] == ("retried", "user", "ada", 1)


def test_retry_of_a_loop_that_has_not_failed_is_a_message(staff_client, make_loop):
    loop = make_loop()
    _, page = post(staff_client, f"/panel/loops/{loop.loop_id}/retry")
    assert flash(page) == [f"{loop.loop_id} is scheduled, not failed: only a failed loop can be retried."]
    assert fresh(loop).state == LoopState.SCHEDULED


# --- unknown loops -----------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["pause", "resume", "run", "retry"])
def test_an_action_on_a_deleted_loop_is_a_message(staff_client, staff_user, make_loop, action):
    loop = make_loop()
    lifecycle.loop_delete(loop_id=loop.loop_id, actor=Actor.user(staff_user))
    _, page = post(staff_client, f"/panel/loops/{loop.loop_id}/{action}", {"next": "/panel/"})
    assert flash(page) == [f"There is no loop {loop.loop_id} any more: it was deleted."]


@pytest.mark.parametrize("action", ["edit", "run", "retry"])
def test_a_page_for_a_deleted_loop_goes_back_with_a_message(staff_client, world, action):
    response = staff_client.get(f"/panel/loops/loop_gone/{action}", follow=True)
    assert response.status_code == 200
    assert flash(response) == ["There is no loop loop_gone any more: it was deleted."]


@pytest.mark.parametrize("action", ["edit", "pause", "resume", "run", "retry"])
def test_an_impossible_loop_id_is_a_404(staff_client, world, action):
    assert staff_client.post(f"/panel/loops/%00/{action}").status_code == 404


# --- edit --------------------------------------------------------------------------------------------


def edit_form(loop, **changes) -> dict:
    """The edit form as the page fills it in, with some fields changed."""
    data = form(**{key: "" if value is None else str(value) for key, value in initial_for(loop).items()})
    data.update(changes)
    return data


def edit(client, loop, **changes):
    return client.post(f"/panel/loops/{loop.loop_id}/edit", edit_form(loop, **changes))


def test_the_edit_page_is_the_new_loop_form_filled_in_from_the_loop(staff_client, make_loop):
    loop = make_loop("Check the deployment", schedule={"kind": "every", "every_seconds": 5400}, session_id="ses_b")
    Loop.objects.filter(loop_id=loop.loop_id).update(name="Deploy check")
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/edit").content.decode()
    assert 'name="name" id="id_name" maxlength="120" value="Deploy check"' in html
    assert ">Check the deployment</textarea>" in html
    assert re.search(r'value="session"[^>]*checked', html) and re.search(r'<option value="ses_b" selected>', html)
    assert re.search(r'value="every"[^>]*checked', html)
    assert 'name="every_amount" value="90"' in html  # 5400 s: 90 minutes
    assert re.search(r'<option value="60" selected>minutes</option>', html)
    assert 'name="revision" value="1"' in html


def test_edit_sends_only_what_changed_and_records_old_and_new(staff_client, make_loop):
    loop = make_loop("Check the deployment")
    next_at = loop.next_at
    response = edit(staff_client, loop, prompt="Check the deployment and the queue", name="Deploy check")
    assert response.status_code == 302 and response["Location"] == f"/panel/loops/{loop.loop_id}/"
    edited = fresh(loop)
    assert (edited.prompt, edited.name, edited.revision) == ("Check the deployment and the queue", "Deploy check", 2)
    assert edited.next_at == next_at  # a new prompt or name keeps the next run where it is
    event = LoopEvent.objects.filter(loop_id=loop.loop_id, kind="edited").get()
    assert (event.actor_kind, event.actor_id, event.revision) == ("user", "ada", 2)
    assert event.changes == {
        "name": [None, "Deploy check"],
        "prompt": ["Check the deployment", "Check the deployment and the queue"],
    }
    page = staff_client.get(response["Location"])
    assert flash(page) == [f"Saved “Deploy check” ({loop.loop_id}) as revision 2."]


def test_edit_with_nothing_changed_is_no_revision(staff_client, make_loop):
    loop = make_loop("Line one\nline two")
    response = edit(staff_client, loop, prompt="Line one\r\nline two")  # a browser's textarea sends CRLF
    assert response.status_code == 302
    assert flash(staff_client.get(response["Location"])) == [f"Nothing changed: {loop.loop_id} stays at revision 1."]
    assert fresh(loop).revision == 1 and not LoopEvent.objects.filter(kind="edited").exists()


def test_edit_of_the_schedule_and_target_recomputes_the_next_run_from_now(staff_client, make_loop):
    loop = make_loop(schedule={"kind": "every", "every_seconds": 3600})
    before = timezone.now()
    response = edit(staff_client, loop, every_amount="5", every_unit="60", target="new", preset="reviewer")
    assert response.status_code == 302
    edited = fresh(loop)
    assert (edited.every_seconds, edited.session_id, edited.preset, edited.revision) == (300, "new", "reviewer", 2)
    assert before + timedelta(minutes=5) <= edited.next_at <= timezone.now() + timedelta(minutes=5)
    (event,) = LoopEvent.objects.filter(kind="edited")
    # Becoming `new`, it takes the default permission preset (contract §14) in the same revision.
    assert set(event.changes) == {"schedule", "session_id", "preset", "permission_preset"}
    # Back to inheriting the preset: preset null.
    edit(staff_client, fresh(loop), preset="")
    assert fresh(loop).preset == "" and fresh(loop).revision == 3


def test_edit_keeps_a_self_target_without_a_global_interface(staff_client, make_loop):
    from sessions_app.services import session_upsert

    loop = make_loop(session_id="self")
    session_upsert(session_id="ses_global", changes={"global_interface": False})
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/edit").content.decode()
    assert not re.search(r'value="self"[^>]*disabled', html)  # its current target stays choosable
    assert edit(staff_client, loop, prompt="Still to self").status_code == 302
    assert fresh(loop).session_id == "self" and fresh(loop).prompt == "Still to self"


def test_edit_of_a_cron_loop_in_the_host_zone_does_not_suggest_the_browsers_zone(staff_client, make_loop):
    cron = make_loop(schedule={"kind": "cron", "expr": "@daily"})
    assert "data-browser-zone" not in staff_client.get(f"/panel/loops/{cron.loop_id}/edit").content.decode()
    every = make_loop()
    assert "data-browser-zone" in staff_client.get(f"/panel/loops/{every.loop_id}/edit").content.decode()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"name": "n" * 121}, "name", "'name' is too long: at most 120 characters."),
        ({"prompt": "  "}, "prompt", "'prompt' must not be empty or only whitespace."),
        ({"every_amount": "0"}, "every_amount", "'schedule.every_seconds' must be at least 1."),
        ({"kind": "cron", "cron_expr": "61 * * * *"}, "cron_expr", "Cron expression '61 * * * *' is not valid"),
        ({"kind": "cron", "cron_expr": "@daily", "tz": "Mars/Olympus"}, "tz", "Unknown time zone 'Mars/Olympus'"),
        ({"target": "new", "preset": "ghost"}, "preset", "Preset 'ghost' does not exist."),
        ({"target": "session", "session": "ses_gone"}, "session", "The host knows no session 'ses_gone'"),
        ({"every_amount": "ten"}, "every_amount", "Enter a whole number."),
    ],
)
def test_edit_errors_are_inline_on_their_field_and_change_nothing(staff_client, make_loop, fields, field, message):
    loop = make_loop()
    response = edit(staff_client, loop, **fields)
    assert response.status_code == 422
    errors = field_errors(response, field)
    assert errors and errors[0].replace("&#x27;", "'").startswith(message), errors
    assert fresh(loop).revision == 1 and not LoopEvent.objects.filter(kind="edited").exists()


def test_edit_over_a_newer_revision_says_so_and_keeps_the_persons_values(staff_client, make_loop):
    loop = make_loop("First")
    shown = edit_form(loop, prompt="Mine")
    assert edit(staff_client, loop, prompt="Theirs").status_code == 302  # someone else, meanwhile
    response = staff_client.post(f"/panel/loops/{loop.loop_id}/edit", shown)
    assert response.status_code == 422
    html = response.content.decode()
    assert "was changed since this page was opened: it is at revision 2 now" in html
    assert ">Mine</textarea>" in html and 'name="revision" value="2"' in html
    assert fresh(loop).prompt == "Theirs"
    # Saving again applies the person's values over the newer revision, knowingly.
    assert staff_client.post(f"/panel/loops/{loop.loop_id}/edit", {**shown, "revision": "2"}).status_code == 302
    assert (fresh(loop).prompt, fresh(loop).revision) == ("Mine", 3)


def test_edit_goes_back_to_next(staff_client, make_loop):
    loop = make_loop()
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/edit?next=/panel/%3Fstate%3Dpaused").content.decode()
    assert '<input type="hidden" name="next" value="/panel/?state=paused">' in html
    response = staff_client.post(
        f"/panel/loops/{loop.loop_id}/edit", {**edit_form(loop, name="x"), "next": "/panel/?state=paused"}
    )
    assert response["Location"] == "/panel/?state=paused"


def test_an_edit_field_that_is_not_utf8_is_refused_on_that_field(staff_client, make_loop):
    from urllib.parse import urlencode

    loop = make_loop()
    fields = {k: v for k, v in edit_form(loop).items() if k != "name"}
    body = urlencode(fields).encode() + b"&name=%FF"
    response = staff_client.post(
        f"/panel/loops/{loop.loop_id}/edit", body, content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 422
    assert field_errors(response, "name") == [
        "This field was not sent as valid UTF-8 text; retype it and submit again."
    ]
    assert fresh(loop).revision == 1


def test_an_action_whose_form_is_not_utf8_does_nothing(staff_client, make_loop):
    loop = make_loop()
    for action in ("pause", "run"):
        response = staff_client.post(
            f"/panel/loops/{loop.loop_id}/{action}",
            b"next=/panel/%FF",
            content_type="application/x-www-form-urlencoded",
        )
        assert response.status_code == 400
    assert fresh(loop).state == LoopState.SCHEDULED and not LoopRun.objects.exists()


# --- what the pages show -----------------------------------------------------------------------------


def test_the_loop_page_shows_name_revision_pause_state_events_and_run_revisions(staff_client, make_loop):
    loop = make_loop("Check the deployment")
    edit(staff_client, loop, name="Deploy check", prompt="Check the deploy", every_amount="5")
    post(staff_client, f"/panel/loops/{loop.loop_id}/run")
    post(staff_client, f"/panel/loops/{loop.loop_id}/pause")
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    assert html.index('id="loop-name">Deploy check<') < html.index('class="detail-title">Check the deploy<')
    assert 'id="loop-state">paused<' in html and "paused by an operator" in html
    assert 'id="loop-revision">2<' in html
    run = LoopRun.objects.get()
    run_row = html[html.index(f'<tr id="{run.run_id}">') :]
    assert "r2" in run_row[:1500] and "chip-manual" in run_row[:1500]
    events_html = html[html.index('id="events"') :]
    kinds = re.findall(r'class="event-kind">(.*?)<', events_html)
    assert kinds == ["Paused", "Run now", "Edited", "Created"]  # newest first
    assert re.findall(r'class="event-actor">(.*?)<', events_html)[:3] == ["ada", "ada", "ada"]
    edited = events_html[events_html.index("event-edited") :]
    assert re.search(
        r'class="change-field">Prompt</span>\s*<span class="change-old"[^>]*>Check the deployment<', edited
    )
    assert re.search(r'class="change-new"[^>]*>Check the deploy<', edited)
    assert re.search(r'class="change-field">Schedule</span>\s*<span class="change-old"[^>]*>every 10 minutes<', edited)
    assert re.search(
        r'class="change-field">Name</span>\s*<span class="change-old"[^>]*><em class="subtle">none', edited
    )
    # The controls on the loop page: Resume (paused), Run now, Edit, Delete; no Pause, no Retry.
    controls = html[html.index('class="controls"') : html.index("</div>", html.index('class="controls"'))]
    assert re.findall(r'data-action="(\w+)"', controls) == ["resume", "run", "edit", "delete"]


def test_a_deleted_loop_keeps_its_trail(staff_client, make_loop):
    loop = make_loop()
    staff_client.post(f"/panel/loops/{loop.loop_id}/delete")
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    assert "Deleted loop" in html
    assert re.findall(r'class="event-kind">(.*?)<', html) == ["Deleted", "Created"]


def test_the_list_shows_the_name_above_the_prompt_and_filters_paused_loops(staff_client, make_loop):
    paused, running = make_loop("Paused one"), make_loop("Still going")
    edit(staff_client, paused, name="Night shift")
    post(staff_client, f"/panel/loops/{paused.loop_id}/pause")
    html = staff_client.get("/panel/").content.decode()
    row = html[html.index(f'<tr id="{paused.loop_id}"') :]
    assert row.index('class="loop-name">Night shift<') < row.index(">Paused one</a>")
    assert "badge-paused" in row[:3000] and "by an operator" in row[:3000]
    assert '<option value="paused">Paused</option>' in html
    html = staff_client.get("/panel/?state=paused").content.decode()
    assert f'id="{paused.loop_id}"' in html and f'id="{running.loop_id}"' not in html
    html = staff_client.get("/panel/?state=scheduled").content.decode()
    assert f'id="{paused.loop_id}"' not in html and f'id="{running.loop_id}"' in html


def test_names_and_changes_are_text(staff_client, make_loop):
    loop = make_loop()
    edit(staff_client, loop, name=XSS, prompt=f"Say {XSS}")
    for path in ("/panel/", f"/panel/loops/{loop.loop_id}/", f"/panel/loops/{loop.loop_id}/edit"):
        html = staff_client.get(path).content.decode()
        assert XSS not in html and "&lt;script&gt;" in html, path
    html = staff_client.get(f"/panel/loops/{loop.loop_id}/run").content.decode()
    assert XSS not in html


# --- who may ------------------------------------------------------------------------------------------

OPERATE_POSTS = ["pause", "resume", "run", "retry", "edit"]


@pytest.fixture
def csrf_client(staff_user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    return client


@pytest.mark.parametrize("action", OPERATE_POSTS)
def test_every_action_needs_a_csrf_token(csrf_client, staff_user, make_loop, action):
    loop = failed_once(make_loop) if action == "retry" else make_loop()
    if action == "resume":
        lifecycle.loop_pause(loop_id=loop.loop_id, actor=Actor.user(staff_user))
    before = events(loop)
    path = f"/panel/loops/{loop.loop_id}/{action}"
    data = edit_form(loop, name="x") if action == "edit" else {}
    assert csrf_client.post(path, data).status_code == 403
    assert fresh(loop).revision == 1 and not LoopRun.objects.exists() and events(loop) == before
    csrf_client.get(f"/panel/loops/{loop.loop_id}/")
    token = csrf_client.cookies["csrftoken"].value
    assert csrf_client.post(path, {**data, "csrfmiddlewaretoken": token}).status_code == 302
    assert len(events(loop)) == len(before) + 1


@pytest.mark.parametrize("action", OPERATE_POSTS)
def test_non_staff_are_refused_and_anonymous_sent_to_sign_in(plain_client, client, make_loop, action):
    loop = make_loop()
    path = f"/panel/loops/{loop.loop_id}/{action}"
    assert plain_client.post(path).status_code == 403
    response = client.post(path)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    if action not in ("pause", "resume"):
        assert plain_client.get(path).status_code == 403
    assert [kind for kind, *_ in events(loop)] == ["created"] and not LoopRun.objects.exists()


def test_head_answers_where_get_does(staff_client, make_loop):
    loop = failed_once(make_loop)
    for action in ("edit", "run", "retry"):
        path = f"/panel/loops/{loop.loop_id}/{action}"
        head, get = staff_client.head(path), staff_client.get(path)
        assert (head.status_code, get.status_code) == (200, 200), path
        assert head.content == b"" and head["Content-Type"] == get["Content-Type"]
    assert fresh(loop).state == LoopState.FAILED and not LoopRun.objects.exists()


# --- admin bulk actions -------------------------------------------------------------------------------


def admin_action(client, action: str, loops):
    response = client.post(
        "/admin/loops/loop/", {"action": action, "_selected_action": [loop.loop_id for loop in loops]}, follow=True
    )
    assert response.status_code == 200
    assert "&lt;" not in response.content.decode().split('class="messagelist"')[-1].split("</ul>")[0]
    return flash_admin(response)


def flash_admin(response) -> list[str]:
    """The admin's messages as text (one may hold a list of refusals)."""
    return [" ".join(re.sub(r"<[^>]+>", " ", str(m)).split()) for m in response.context["messages"]]


def test_admin_bulk_pause_resume_and_run_now_call_the_operations(staff_client, make_loop):
    a, b, c = make_loop("a"), make_loop("b"), make_loop("c")
    post(staff_client, f"/panel/loops/{c.loop_id}/pause")
    ids = ", ".join(sorted([c.loop_id]))
    assert admin_action(staff_client, "pause_selected", [a, b, c]) == [f"Paused 2 loops. 1 was already paused: {ids}."]
    assert {fresh(x).state for x in (a, b, c)} == {LoopState.PAUSED}
    assert events(a)[-1] == ("paused", "user", "ada", 1)

    messages = admin_action(staff_client, "resume_selected", [a, b])
    assert messages == ["Resumed 2 loops."]
    assert fresh(a).state == fresh(b).state == LoopState.SCHEDULED and fresh(c).state == LoopState.PAUSED

    post(staff_client, f"/panel/loops/{a.loop_id}/run")  # a has a run in flight now
    messages = admin_action(staff_client, "run_now_selected", [a, b, c])
    assert messages[0] == "Queued a manual run of 2 loops."
    assert messages[1] == f"Refused 1: {a.loop_id} has a run in flight; run it again once that one has finished."
    assert LoopRun.objects.filter(manual=True).count() == 3
    assert fresh(c).state == LoopState.PAUSED  # run now works on a paused loop and leaves it paused
    assert events(b)[-1] == ("run_now", "user", "ada", 1)


def test_admin_bulk_actions_need_the_change_permission(client, django_user_model, make_loop):
    from .conftest import PASSWORD

    user = django_user_model.objects.create_user("viewer", password=PASSWORD, is_staff=True)
    from django.contrib.auth.models import Permission

    user.user_permissions.add(Permission.objects.get(codename="view_loop"))
    client.force_login(user)
    loop = make_loop()
    html = client.get("/admin/loops/loop/").content.decode()
    assert "pause_selected" not in html and "run_now_selected" not in html
    client.post("/admin/loops/loop/", {"action": "pause_selected", "_selected_action": [loop.loop_id]})
    assert fresh(loop).state == LoopState.SCHEDULED


def test_admin_shows_name_revision_and_run_revisions(staff_client, make_loop):
    loop = make_loop()
    edit(staff_client, loop, name="Deploy check")
    post(staff_client, f"/panel/loops/{loop.loop_id}/run")
    html = staff_client.get(admin_url("loops_loop", loop.loop_id)).content.decode()
    assert "Deploy check" in html and "r2 (manual)" in html
    assert "Deploy check" in staff_client.get("/admin/loops/loop/?q=deploy").content.decode()
