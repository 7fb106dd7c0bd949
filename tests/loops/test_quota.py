"""DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION (contract §3 409 quota_exceeded): counted per target
session, and per creator for "new" and "self" loops together; "active" is what the active list shows."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from loops.models import Loop, LoopState
from loops.v1_import import import_v1_records
from scheduler.claims import claim_due
from scheduler.delivery import deliver_run
from tests.conftest import T0, error_of
from tests.panel.test_create import form as panel_form

LIMIT = 3
EVERY = {"kind": "every", "every_seconds": 600}


@pytest.fixture(autouse=True)
def small_quota(settings):
    settings.DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION = LIMIT


@pytest.fixture
def sessions(api, make_session, global_session):
    make_session("ses_other", status="idle")
    make_session("ses_third", status="idle")


def create(api, session_id: str | None = None, *, caller: str | None = None, schedule: dict | None = None):
    body = {"prompt": "Check the deploy", "schedule": schedule or EVERY}
    if session_id is not None:
        body["session_id"] = session_id
    return api.tool("loop_create", body, session_id=caller)


def fill(api, session_id: str | None = None, *, caller: str | None = None, count: int = LIMIT) -> list[str]:
    loop_ids = []
    for _ in range(count):
        response = create(api, session_id, caller=caller)
        assert response.status_code == 200, response.content
        loop_ids.append(response.json()["loop_id"])
    return loop_ids


def assert_quota_exceeded(response, *names: str) -> str:
    assert response.status_code == 409, response.content
    error = error_of(response)
    assert error["code"] == "quota_exceeded", error
    message = error["message"]
    # contract §3: one sentence a person can act on — the limit, the setting, and what to do.
    for part in (f"at most {LIMIT}", "DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION", "loop_delete", "raise", *names):
        assert part in message, message
    return message


def test_an_actual_session_is_refused_its_loop_past_the_limit_whoever_creates_it(api, sessions):
    fill(api, "ses_other", count=2)
    fill(api, "ses_other", caller="ses_third", count=1)
    message = assert_quota_exceeded(create(api, "ses_other"), "'ses_other'", f"already has {LIMIT} active loops")
    assert_quota_exceeded(create(api, "ses_other", caller="ses_third"))
    assert Loop.objects.filter(session_id="ses_other").count() == LIMIT
    assert message.startswith("Session 'ses_other' already has 3 active loops and")


def test_the_callers_own_session_counts_when_session_id_is_omitted(api, sessions):
    fill(api)  # {}: the calling session, ses_caller
    assert_quota_exceeded(create(api), "'ses_caller'")
    assert_quota_exceeded(create(api, "ses_caller"), "'ses_caller'")


def test_a_different_session_is_unaffected(api, sessions):
    fill(api, "ses_other")
    assert_quota_exceeded(create(api, "ses_other"))
    assert create(api, "ses_third").status_code == 200
    assert create(api).status_code == 200  # ses_caller
    assert create(api, "new").status_code == 200


def test_new_and_self_loops_are_counted_together_per_creator(api, sessions):
    fill(api, "new", count=2)
    fill(api, "self", count=1)
    for target in ("new", "self"):
        message = assert_quota_exceeded(create(api, target), "'ses_caller'", '"new" or "self"')
    assert message.startswith(f"Session 'ses_caller' has already created {LIMIT} active loops targeting")
    # Another creator has its own count; the caller's actual-session targets are counted apart.
    assert create(api, "new", caller="ses_other").status_code == 200
    assert create(api, "self", caller="ses_other").status_code == 200
    assert create(api, "ses_third").status_code == 200
    # A "self" loop delivers to the global interface but is not counted against that session.
    assert create(api, "ses_global").status_code == 200


def test_deleting_a_loop_frees_a_slot(api, sessions):
    first, *_ = fill(api, "ses_other")
    assert_quota_exceeded(create(api, "ses_other"))
    assert api.tool("loop_delete", {"loop_id": first}).status_code == 200
    assert create(api, "ses_other").status_code == 200
    assert_quota_exceeded(create(api, "ses_other"))


def test_a_completed_loop_frees_a_slot_and_a_failed_one_does_not(api, sessions):
    # "Active" is what the active list (loop_list) shows: scheduled, running and failed, not completed.
    with time_machine.travel(T0, tick=False):
        once = create(api, "ses_other", schedule={"kind": "after", "after_seconds": 10}).json()["loop_id"]
        fill(api, "ses_other", count=LIMIT - 1)
        assert_quota_exceeded(create(api, "ses_other"))
    fired_at = T0 + timedelta(seconds=10)
    with time_machine.travel(fired_at, tick=False):
        (run_id,) = claim_due(now=fired_at)
        assert deliver_run(run_id) is True
    assert Loop.objects.get(loop_id=once).state == LoopState.COMPLETED
    listed = api.tool("loop_list", {"session_id": "ses_other"}).json()["loops"]
    assert len(listed) == LIMIT - 1
    response = create(api, "ses_other")
    assert response.status_code == 200
    # A failed loop stays on the active list, so it keeps its slot.
    Loop.objects.filter(loop_id=response.json()["loop_id"]).update(state=LoopState.FAILED)
    assert len(api.tool("loop_list", {"session_id": "ses_other"}).json()["loops"]) == LIMIT
    assert_quota_exceeded(create(api, "ses_other"))


def test_the_limit_comes_from_the_setting(api, sessions, settings):
    fill(api, "ses_other")
    settings.DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION = LIMIT + 1
    assert create(api, "ses_other").status_code == 200
    response = create(api, "ses_other")
    assert response.status_code == 409
    assert f"at most {LIMIT + 1}" in error_of(response)["message"]


# --- the panel and MCP go through the same service --------------------------------------------


@pytest.fixture
def staff_client(django_user_model, settings) -> Client:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    client = Client()
    client.force_login(django_user_model.objects.create_user("ada", password="x", is_staff=True))
    return client


def panel_create(client, **fields):
    return client.post("/panel/new", panel_form(**fields))


def form_errors(response) -> list[str]:
    match = re.search(r'<div class="form-errors" role="alert">(.*?)</div>', response.content.decode(), re.S)
    return [html.unescape(text) for text in re.findall(r"<p>(.*?)</p>", match.group(1))] if match else []


def test_the_panel_shows_the_quota_message(api, sessions, staff_client):
    fill(api, "ses_other")
    response = panel_create(staff_client, target="session", session="ses_other")
    assert response.status_code == 422  # the form again, with the error
    (message,) = form_errors(response)
    assert message.startswith("Session 'ses_other' already has 3 active loops")
    assert "DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION" in message
    # Panel "new"/"self" loops are counted for the creator the panel records: the global interface.
    fill(api, "self", caller="ses_global")
    (message,) = form_errors(panel_create(staff_client, target="new"))
    assert message.startswith("Session 'ses_global' has already created 3 active loops")
    assert Loop.objects.count() == 2 * LIMIT


def test_panel_new_loops_without_a_global_interface_share_one_count(api, make_session, staff_client):
    # No global interface: the panel records no creator, and those loops are counted together.
    make_session("ses_other", status="idle")
    for _ in range(LIMIT):
        assert panel_create(staff_client, target="new").status_code == 302
    (message,) = form_errors(panel_create(staff_client, target="new"))
    assert message.startswith("Callers with no session (the panel with no global interface) have already created 3")
    assert panel_create(staff_client, target="session", session="ses_other").status_code == 302


@pytest.mark.django_db(transaction=True)
def test_mcp_loop_create_answers_quota_exceeded_as_the_rest_api(api, sessions, monkeypatch, tmp_path):
    from tests.tools.mcp.conftest import Connector, run, tool_error_of

    fill(api, "ses_other")
    arguments = {"prompt": "Check the deploy", "schedule": EVERY, "session_id": "ses_other"}
    expected = error_of(api.tool("loop_create", arguments))
    monkeypatch.setenv("DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION", str(LIMIT))  # the stdio server's own settings

    async def scenario():
        async with Connector("stdio", log_dir=tmp_path)(session_id="ses_caller") as client:
            return await client.call_tool("loop_create", arguments)

    error = tool_error_of(run(scenario))
    assert error == expected and error["code"] == "quota_exceeded"
    assert Loop.objects.filter(session_id="ses_other").count() == LIMIT


# --- the v1 import ------------------------------------------------------------------------------


def v1_records(*ids: str) -> list[dict]:
    return [{"id": v1_id, "prompt": "Check", "time_in_seconds": 600, "session_id": "ses_other"} for v1_id in ids]


def test_the_v1_import_reports_records_past_the_quota_invalid_and_imports_them_once_raised(api, sessions, settings):
    fill(api, "ses_other", count=1)
    records = v1_records("v1_a", "v1_b", "v1_c", "v1_d")
    for dry_run in (True, False):
        results = list(import_v1_records(records, dry_run=dry_run))
        assert [result.outcome for result in results] == ["imported", "imported", "invalid", "invalid"], dry_run
        assert results[2].reason.startswith("Session 'ses_other' already has 3 active loops and")
        assert "DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION" in results[2].reason
    assert sorted(Loop.objects.exclude(v1_id=None).values_list("v1_id", flat=True)) == ["v1_a", "v1_b"]
    settings.DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION = 5
    outcomes = [result.outcome for result in import_v1_records(records)]
    assert outcomes == ["already_present", "already_present", "imported", "imported"]


@pytest.mark.django_db(transaction=True)
def test_creates_racing_at_the_limit_cannot_both_pass(api, sessions):
    """The count and the insert share a transaction under a lock on the count (PostgreSQL: an
    advisory lock; SQLite: IMMEDIATE transactions): a create that waits sees the other's loop."""
    import threading

    from django.db import connection, transaction

    from loops.services import lock_quota_count

    fill(api, "ses_other", count=LIMIT - 1)
    holding, release, results = threading.Event(), threading.Event(), []

    def first_create_in_flight():
        try:
            with transaction.atomic():
                lock_quota_count(target="ses_other", creator="ses_caller")
                holding.set()
                release.wait(10)
                results.append(create(api, "ses_other").status_code)  # the last free slot
        finally:
            holding.set()
            connection.close()

    first = threading.Thread(target=first_create_in_flight)
    first.start()
    assert holding.wait(10)
    threading.Timer(0.3, release.set).start()
    second = create(api, "ses_other")  # waits for the first create's transaction to end
    first.join(10)
    assert results == [200]
    assert_quota_exceeded(second, "ses_other")
    assert Loop.objects.filter(session_id="ses_other").count() == LIMIT


def test_a_made_up_caller_cannot_open_a_fresh_quota(api, sessions):
    """The creator is counted: a header naming no session would be a new bucket every call."""
    fill(api, "new", caller="ses_caller")
    for made_up in ("made-up-0", "made-up-1"):
        response = create(api, "new", caller=made_up)
        assert response.status_code == 422, response.content
        assert error_of(response) == {
            "code": "unknown_session",
            "message": error_of(response)["message"],
            "field": "X-DSH-Session-Id",
        }
    assert Loop.objects.filter(session_id="new").count() == LIMIT
