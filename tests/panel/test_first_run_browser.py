"""A fresh install can create a loop from the panel, end to end: from an
empty database, `manage.py bootstrap` as `make run` runs it, a real `runloops`, and a person in
Chromium who signs in with the printed admin password, creates a `new` loop and an existing-session
loop through the New loop form, and sees both fire."""

from __future__ import annotations

import json
import re
import urllib.request
from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from loops.models import Loop, LoopRun, RunStatus
from sessions_app.models import InboxMessage, SessionHeader
from tests.processes import Schedulers, wait_for

from .conftest import Page, row

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.django_db(transaction=True)]

FIRE_TIMEOUT = 30  # the loops are due 2 s after they are made; the rest is a loaded machine's slack


@pytest.fixture
def scheduler_pool(tmp_path):
    # DJANGO_SECRET_KEY: a non-SQLite DATABASE_URL needs one in the child.
    pool = Schedulers(tmp_path, DSHLOOP_HOST="local", DJANGO_SECRET_KEY=settings.SECRET_KEY)
    yield pool
    pool.close()


def bootstrap() -> str:
    out = StringIO()
    call_command("bootstrap", stdout=out)
    return out.getvalue()


def host_put_session(base_url: str, token: str, session_id: str, **header) -> dict:
    """An existing session, made the way a host client makes one: the host API, with the printed token."""
    request = urllib.request.Request(
        f"{base_url}/api/host/sessions/{session_id}",
        data=json.dumps(header).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def create_loop(page: Page, *, prompt: str, target: str, kind: str, amount: str, session: str = "") -> Loop:
    before = set(Loop.objects.values_list("loop_id", flat=True))
    page.find("#new-loop").click()
    page.find("#loop-form")
    assert page.find('input[name="target"][value="self"]').is_enabled()  # bootstrap made the global interface
    page.type("prompt", prompt)
    page.choose("target", target)
    if session:
        page.select("session", session)
    page.choose("kind", kind)
    page.type(f"{kind}_amount", amount)
    page.select(f"{kind}_unit", "1")  # seconds
    page.submit("#create-loop")
    (loop,) = Loop.objects.exclude(loop_id__in=before)
    assert page.path.startswith("/panel/?created=" + loop.loop_id), page.text
    return loop


def delivered(loop: Loop) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop.loop_id, status=RunStatus.DELIVERED).order_by("scheduled_at"))


def test_from_an_empty_database_sign_in_create_new_and_session_loops_and_see_them_fire(
    browser, live_server, scheduler_pool
):
    assert not get_user_model().objects.exists() and not SessionHeader.objects.exists()

    # --- `make run`: bootstrap, then the scheduler ---------------------------------------------------
    printed = bootstrap()
    password = re.search(r"^Admin user created: admin / (\S+)", printed, re.M).group(1)
    token = re.search(r"^API token created \(scopes tools, host, manage\): (\S+)$", printed, re.M).group(1)
    assert 'Global interface session created: ses_global (the target "self")' in printed
    host_put_session(
        live_server.url, token, "ses_work", user_title="Release work", status="cold", preset="coder", model="m1"
    )
    scheduler_pool.start_ready()

    # --- sign in with the bootstrap admin ------------------------------------------------------------
    page = Page(browser, live_server.url)
    page.go("/admin/login/")
    browser.delete_all_cookies()  # one Chromium for the session: start signed out
    page.go("/panel/")
    assert page.path.startswith("/admin/login/?next=/panel/")
    page.type("username", "admin")
    page.type("password", password)
    page.submit('input[type="submit"]')
    assert page.path == "/panel/"
    assert "No loops yet" in page.text

    # --- create both loops through the New loop form -------------------------------------------------
    fresh = create_loop(page, prompt="Say hello from a fresh session", target="new", kind="after", amount="2")
    work = create_loop(page, prompt="Check the release", target="session", session="ses_work", kind="every", amount="2")
    assert (fresh.session_id, fresh.after_seconds, fresh.created_by_session_id) == ("new", 2, "ses_global")
    assert (work.session_id, work.every_seconds, work.created_by_session_id) == ("ses_work", 2, "ses_global")
    assert "every 2 seconds" in row(page, work.loop_id).text

    # --- see them fire ---------------------------------------------------------------------------------
    wait_for(
        lambda: delivered(fresh) and len(delivered(work)) >= 2,
        timeout=FIRE_TIMEOUT,
        message="the new loop to fire once and the session loop twice",
    )
    assert all(scheduler.running() for scheduler in scheduler_pool.started)

    (run,) = delivered(fresh)
    made = SessionHeader.objects.get(session_id=run.target_session_id)  # `new` created a session
    assert made.session_id.startswith("ses_") and made.session_id not in ("ses_global", "ses_work")
    assert made.first_prompt == "Say hello from a fresh session"
    # The bootstrap's global interface has no preset or model to inherit: the profile default, said so.
    assert (made.preset, made.model) == (settings.DSHLOOP_DEFAULT_PRESET, settings.DSHLOOP_DEFAULT_MODEL)
    assert run.fallback == "profile default preset and model (source has none)"
    assert InboxMessage.objects.filter(session_id=made.session_id, occurrence_key=run.occurrence_key).exists()
    work_runs = delivered(work)
    assert {r.target_session_id for r in work_runs} == {"ses_work"}
    assert InboxMessage.objects.filter(session_id="ses_work").count() >= 2
    assert SessionHeader.objects.get(session_id="ses_work").status == "idle"  # resumed from cold

    # ... and in the panel: each loop's run history
    page.go(f"/panel/loops/{fresh.loop_id}/")
    listed = page.find(f'tr[id="{run.run_id}"]').text
    assert "delivered" in listed and made.session_id in listed and "profile default preset and model" in listed
    page.go(f"/panel/loops/{work.loop_id}/")
    for work_run in work_runs[:2]:
        listed = page.find(f'tr[id="{work_run.run_id}"]').text
        assert "delivered" in listed and "ses_work" in listed
