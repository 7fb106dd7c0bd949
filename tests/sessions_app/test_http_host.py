"""The HTTP host adapter against the reference host over real loopback sockets (contract §6)."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.hosts import get_host
from sessions_app.hosts.base import HostError
from sessions_app.hosts.http import HttpHost
from sessions_app.models import SessionHeader
from tests.conftest import captured_log

SOURCE = {"kind": "loop", "loop_id": "loop_1", "run_id": "run_1", "occurrence_key": "loop_1@1000", "scheduled_at": 1000}


@pytest.fixture
def http(refhost, db) -> HttpHost:
    return HttpHost(refhost.url, refhost.token, timeout=0.5)


@pytest.fixture
def host_log(caplog):
    with captured_log(caplog, "dshloop.hosts") as log:
        yield log


def host_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "dshloop.hosts" and r.levelno == logging.WARNING]


def cache_writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]


def test_settings_select_the_http_host(refhost, settings):
    settings.DSHLOOP_HOST, settings.DSHLOOP_HOST_URL = "http", refhost.url
    assert isinstance(get_host(), HttpHost)


def test_get_session_reads_the_host_and_refreshes_the_cache(refhost, http):
    refhost.put_session("ses_a", status="cold", preset="p", model="m", user_title="Deploy watch")

    session = http.get_session("ses_a")

    assert (session.status, session.preset, session.model, session.title) == ("cold", "p", "m", "Deploy watch")
    assert SessionHeader.objects.get(session_id="ses_a").status == "cold"
    assert http.get_session("ses_missing") is None


def test_check_session_status_never_resumes_a_cold_session(refhost, http):
    refhost.put_session("ses_a", status="cold")
    http.get_session("ses_a")
    assert refhost.sessions["ses_a"]["status"] == "cold"
    assert [call for call in refhost.calls if call[0] != "GET"] == []


def test_list_sessions_merges_live_sessions_with_cached_cold_ones(refhost, http):
    SessionHeader.objects.create(
        session_id="ses_cached_cold", status="cold", updated_at="2020-01-01T00:00:00Z", generated_title="From the cache"
    )
    refhost.put_session("ses_live", status="running", first_prompt="Watch the deploy\nand report")

    sessions = {s.session_id: s for s in http.list_sessions(limit=10)}

    assert set(sessions) == {"ses_live", "ses_cached_cold"}
    assert sessions["ses_live"].title == "Watch the deploy"  # the fold over durable fields
    assert sessions["ses_cached_cold"].title == "From the cache"


def test_list_sessions_writes_the_cache_in_one_statement_whatever_the_number_of_sessions(refhost, http):
    SessionHeader.objects.create(
        session_id="ses_000",
        status="cold",
        updated_at="2020-01-01T00:00:00Z",
        created_for="loop_1@1000",
        generated_title="Old title",
    )
    refhost.put_session("ses_000", status="running", user_title="Now titled")
    refhost.put_session("ses_001", status="idle")
    with CaptureQueriesContext(connection) as two:
        http.list_sessions(limit=500)
    for index in range(2, 60):
        refhost.put_session(f"ses_{index:03d}", status="cold", first_prompt=f"Prompt {index}")
    with CaptureQueriesContext(connection) as sixty:
        sessions = http.list_sessions(limit=500)

    # One upsert (inserts the new, updates the known) and the same statements for 2 sessions or 60,
    # not a SELECT and an INSERT/UPDATE per session.
    assert len(cache_writes(two.captured_queries)) == len(cache_writes(sixty.captured_queries)) == 1
    assert len(sixty.captured_queries) == len(two.captured_queries) == 2  # the upsert, then the read
    assert len(sessions) == 60 and SessionHeader.objects.count() == 60
    refreshed = SessionHeader.objects.get(session_id="ses_000")
    assert (refreshed.status, refreshed.user_title) == ("running", "Now titled")
    assert refreshed.created_for == "loop_1@1000"  # what only dshloop knows is kept
    assert SessionHeader.objects.get(session_id="ses_059").first_prompt == "Prompt 59"


def test_list_sessions_skips_and_logs_invalid_sessions_and_caches_the_rest(refhost, http, host_log):
    refhost.put_session("ses_good", status="idle", user_title="Good")
    valid = {"status": "idle", "updated_at": "2026-01-01T00:00:00+00:00"}
    refhost.listed_extra = [
        "not an object",
        {"session_id": 5, "status": "idle", "updated_at": 0},
        {"session_id": "ses_asleep", "status": "asleep", "updated_at": 0},
        {"session_id": "ses_no_time", "status": "idle"},
        {"session_id": "x" * 300, **valid},  # longer than the column
        {"session_id": "ses_long_preset", **valid, "preset": "p" * 300},
        {"session_id": "ses_nul", **valid, "user_title": "a\x00b"},  # PostgreSQL refuses NUL
        {"session_id": "ses_surrogate", **valid, "first_prompt": "\ud800"},  # no database stores it
        # One ID twice (PostgreSQL refuses to upsert a row twice in one statement): the newest wins.
        {"session_id": "ses_twice", **valid, "status": "cold"},
        {"session_id": "ses_twice", "status": "running", "updated_at": "2026-01-02T00:00:00+00:00"},
    ]

    sessions = {s.session_id: s for s in http.list_sessions(limit=50)}

    assert set(sessions) == {"ses_good", "ses_twice"}
    assert sessions["ses_good"].title == "Good" and sessions["ses_twice"].status == "running"
    [warning] = host_warnings(host_log)
    assert "Skipped 8 of 11 sessions" in warning and "a session object" in warning


def test_list_sessions_logs_a_failed_host_call_and_answers_from_the_cache(refhost, http, host_log):
    refhost.put_session("ses_live", status="idle")
    http.list_sessions(limit=10)
    assert host_warnings(host_log) == []

    refhost.fault = "error500"
    assert [s.session_id for s in http.list_sessions(limit=10)] == ["ses_live"]
    refhost.fault = "malformed"
    assert [s.session_id for s in http.list_sessions(limit=10)] == ["ses_live"]
    refhost.stop()
    assert [s.session_id for s in http.list_sessions(limit=10)] == ["ses_live"]

    warnings = host_warnings(host_log)
    assert len(warnings) == 3 and all("answers from the cached session headers" in w for w in warnings)
    assert "answered 500" in warnings[0] and "malformed JSON" in warnings[1] and "unreachable" in warnings[2]


def test_listing_sessions_triggers_no_title_generation_call(refhost, http, api):
    refhost.put_session("ses_untitled", status="idle")
    response = api.tool("list_sessions", {})
    assert response.status_code == 200
    http.list_sessions(limit=5)
    # Only reads of the session list; nothing that could ask the host to generate or refresh a title.
    assert {call for call in refhost.calls} <= {("GET", "/sessions")}
    assert not any("title" in path for _, path in refhost.calls)


def test_list_sessions_still_answers_from_the_cache_when_the_host_is_down(refhost, http):
    refhost.put_session("ses_live", status="idle")
    http.list_sessions(limit=10)
    refhost.stop()
    assert [s.session_id for s in http.list_sessions(limit=10)] == ["ses_live"]


def test_global_session_and_presets(refhost, http):
    assert http.global_session() is None
    assert http.get_preset("reviewer") is None
    refhost.put_session("ses_ui", global_interface=True)
    refhost.put_preset("reviewer")
    refhost.put_preset("locked", mountable=False)
    assert http.global_session().session_id == "ses_ui"
    assert http.get_preset("reviewer").mountable is True
    assert http.get_preset("locked").mountable is False


def test_a_global_session_named_by_id_only_is_read_from_its_session(refhost, http):
    refhost.put_session("ses_ui", global_interface=True, status="cold", preset="p", user_title="Global interface")
    refhost.global_id_only = True

    session = http.global_session()

    assert (session.session_id, session.status, session.preset, session.title) == (
        "ses_ui",
        "cold",
        "p",
        "Global interface",
    )
    assert refhost.calls[-2:] == [("GET", "/global-session"), ("GET", "/sessions/ses_ui")]
    assert SessionHeader.objects.get(session_id="ses_ui").status == "cold"  # cached as any other read
    # The host names a session it then does not know: no global interface, as a 404 would say.
    del refhost.sessions["ses_ui"]
    assert http.global_session() is None


def test_deliver_is_idempotent_on_the_occurrence_key(refhost, http):
    refhost.put_session("ses_a", status="running")
    first = http.deliver("ses_a", text="<loop/>", source=SOURCE, occurrence_key="loop_1@1000")
    second = http.deliver("ses_a", text="<loop/>", source=SOURCE, occurrence_key="loop_1@1000")
    assert first.delivery == "next_step" and second.message_id == first.message_id
    assert len(refhost.messages("ses_a")) == 1 and refhost.new_message_keys["loop_1@1000"] == 1


def test_create_session_and_resume(refhost, http):
    session_id = http.create_session(preset="p", model="m", first_prompt="hi", source=SOURCE)
    assert refhost.sessions[session_id]["first_prompt"] == "hi"
    # The same occurrence asks again (a re-driven delivery): the same session comes back.
    assert http.create_session(preset="p", model="m", first_prompt="hi", source=SOURCE) == session_id
    refhost.put_session("ses_cold", status="cold", preset="keep", model="keep-m")
    resumed = http.resume_session("ses_cold")
    assert (resumed.status, resumed.preset, resumed.model) == ("idle", "keep", "keep-m")


@pytest.mark.parametrize(
    "fault, words",
    [
        ("error500", "answered 500"),
        ("malformed", "malformed JSON"),
        ("hang", "did not answer"),
    ],
)
def test_host_faults_are_transient_errors_with_the_hosts_message(refhost, http, fault, words):
    refhost.put_session("ses_a")
    refhost.hang_seconds = 1.5
    refhost.fault = fault
    with pytest.raises(HostError) as raised:
        http.deliver("ses_a", text="x", source=SOURCE, occurrence_key="loop_1@1000")
    assert raised.value.transient and words in str(raised.value)


def test_an_unreachable_host_is_transient_and_a_missing_target_permanent(refhost, http):
    with pytest.raises(HostError) as missing:
        http.deliver("ses_nobody", text="x", source=SOURCE, occurrence_key="loop_1@1000")
    assert not missing.value.transient
    refhost.stop()
    with pytest.raises(HostError) as down:
        http.deliver("ses_a", text="x", source=SOURCE, occurrence_key="loop_1@1000")
    assert down.value.transient and "unreachable" in str(down.value)


def test_a_wrong_token_is_a_permanent_error(refhost, db):
    refhost.put_session("ses_a")
    with pytest.raises(HostError) as raised:
        HttpHost(refhost.url, "wrong").deliver("ses_a", text="x", source=SOURCE, occurrence_key="k")
    assert not raised.value.transient and "401" in str(raised.value)


def test_tools_answer_target_unavailable_when_the_host_cannot_be_reached(refhost, settings, tools_token):
    from tests.conftest import ApiClient, error_of

    settings.DSHLOOP_HOST, settings.DSHLOOP_HOST_URL, settings.DSHLOOP_HOST_TOKEN = "http", refhost.url, refhost.token
    refhost.stop()
    response = ApiClient(tools_token, "ses_me").tool(
        "loop_create", {"prompt": "x", "schedule": {"kind": "every", "every_seconds": 60}}
    )
    assert response.status_code == 409 and error_of(response)["code"] == "target_unavailable"
