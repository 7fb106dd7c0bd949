"""list_sessions and check_session_status (spec §7): read-only views over durable session headers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.models import SessionHeader
from sessions_app.services import session_upsert
from tests.conftest import error_of

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SESSION_VIEW_KEYS = {"session_id", "title", "status", "updated_at"}


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.fixture
def sessions(api):
    """Three sessions at known times, on top of the caller's own (which is the newest)."""
    session_upsert(session_id="ses_cold", changes={"status": "cold", "first_prompt": "Refactor the parser"}, now=at(1))
    session_upsert(session_id="ses_idle", changes={"status": "idle", "generated_title": "Fix flaky tests"}, now=at(2))
    session_upsert(session_id="ses_running", changes={"status": "running", "user_title": "Release 2.0"}, now=at(3))


def listed(api, **body) -> list[dict]:
    response = api.tool("list_sessions", body)
    assert response.status_code == 200, response.content
    assert set(response.json()) == {"sessions"}
    return response.json()["sessions"]


def write_queries(captured: CaptureQueriesContext) -> list[str]:
    writes = ("INSERT", "UPDATE", "DELETE", "REPLACE")
    return [q["sql"] for q in captured.captured_queries if q["sql"].lstrip().upper().startswith(writes)]


def header_rows() -> list[dict]:
    return list(SessionHeader.objects.order_by("session_id").values())


# --- list_sessions ----------------------------------------------------------------------------


def test_list_sessions_lists_live_and_cold_sessions(api, sessions):
    statuses = {view["session_id"]: view["status"] for view in listed(api)}
    assert statuses == {"ses_caller": "running", "ses_running": "running", "ses_idle": "idle", "ses_cold": "cold"}


def test_list_sessions_orders_newest_updated_at_first(api, sessions):
    session_upsert(session_id="ses_caller", changes={}, now=at(0))  # make the caller the oldest
    assert [view["session_id"] for view in listed(api)] == ["ses_running", "ses_idle", "ses_cold", "ses_caller"]


def test_list_sessions_reorders_when_a_session_becomes_active(api, sessions):
    session_upsert(session_id="ses_caller", changes={}, now=at(0))
    session_upsert(session_id="ses_cold", changes={"status": "idle"}, now=at(10))
    assert [view["session_id"] for view in listed(api)] == ["ses_cold", "ses_running", "ses_idle", "ses_caller"]


def test_list_sessions_breaks_updated_at_ties_by_session_id(api):
    for session_id in ["ses_b", "ses_c", "ses_a"]:
        session_upsert(session_id=session_id, changes={}, now=T0)
    session_upsert(session_id="ses_caller", changes={}, now=at(-1))
    assert [view["session_id"] for view in listed(api)] == ["ses_a", "ses_b", "ses_c", "ses_caller"]


def test_list_sessions_returns_at_most_50_by_default(api):
    for n in range(60):
        session_upsert(session_id=f"ses_{n:02d}", changes={}, now=at(n))
    views = listed(api)
    assert len(views) == 50
    assert views[0]["session_id"] == "ses_caller"  # made now, after all of T0's
    assert views[1]["session_id"] == "ses_59"
    assert views[-1]["session_id"] == "ses_11"


@pytest.mark.parametrize("limit,expected", [(1, 1), (3, 3), (500, 4)])
def test_list_sessions_limit_caps_the_count(api, sessions, limit, expected):
    assert len(listed(api, limit=limit)) == expected


@pytest.mark.parametrize("limit", [0, -1, 501, 10**20, True, False, 1.0, 2.5, "5", None, [5], {}])
def test_list_sessions_limit_out_of_bounds_or_not_an_integer_is_422(api, limit):
    response = api.tool("list_sessions", {"limit": limit})
    assert response.status_code == 422, response.content
    error = error_of(response)
    assert error["code"] == "invalid_input"
    assert error["field"] == "limit"


def test_list_sessions_rejects_unknown_properties(api):
    response = api.tool("list_sessions", {"limit": 5, "status": "cold"})
    assert response.status_code == 422
    assert error_of(response)["field"] == "status"


def test_session_view_has_exactly_the_spec_fields(api, sessions):
    view = next(v for v in listed(api) if v["session_id"] == "ses_running")
    assert view == {
        "session_id": "ses_running",
        "title": "Release 2.0",
        "status": "running",
        "updated_at": "2025-03-01T12:03:00.000+00:00",
    }


def test_session_view_omits_title_when_the_fold_yields_none(api, make_session):
    make_session("ses_untitled", first_prompt="  \n\t\n")
    view = next(v for v in listed(api) if v["session_id"] == "ses_untitled")
    assert set(view) == SESSION_VIEW_KEYS - {"title"}
    assert "title" not in view  # never null, and never the session ID (a display rule, spec §7)


def test_session_view_updated_at_is_iso_8601_with_an_offset(api, sessions):
    for view in listed(api):
        parsed = datetime.fromisoformat(view["updated_at"])
        assert parsed.utcoffset() is not None, view
        assert parsed == SessionHeader.objects.get(session_id=view["session_id"]).updated_at


@pytest.mark.parametrize(
    "fields,title",
    [
        ({"user_title": "Mine", "generated_title": "Generated", "first_prompt": "Prompt"}, "Mine"),
        ({"generated_title": "Generated", "first_prompt": "Prompt"}, "Generated"),
        ({"first_prompt": "Prompt line\nsecond line"}, "Prompt line"),
        ({"user_title": "   ", "generated_title": "Generated"}, "Generated"),
        ({"user_title": "", "generated_title": " ", "first_prompt": "\n  Fallback   words  "}, "Fallback words"),
    ],
)
def test_listed_title_is_the_durable_fold(api, make_session, fields, title):
    make_session("ses_titled", **fields)
    view = next(v for v in listed(api) if v["session_id"] == "ses_titled")
    assert view["title"] == title


def test_renaming_a_session_changes_the_listed_title(api, make_session):
    make_session("ses_titled", generated_title="Generated")
    make_session("ses_titled", user_title="Renamed by the user")
    view = next(v for v in listed(api) if v["session_id"] == "ses_titled")
    assert view["title"] == "Renamed by the user"


def test_list_sessions_never_triggers_title_generation(api, make_session):
    make_session("ses_fresh", first_prompt="Summarise yesterday's incidents and page on-call")
    before = header_rows()
    view = next(v for v in listed(api) if v["session_id"] == "ses_fresh")
    assert view["title"] == "Summarise yesterday's incidents and page on-call"
    fresh = SessionHeader.objects.get(session_id="ses_fresh")
    assert fresh.generated_title == ""  # the fallback is computed on read, never stored as a title
    assert header_rows() == before


def test_list_sessions_is_read_only(api, sessions):
    before = header_rows()
    with CaptureQueriesContext(connection) as captured:
        listed(api, limit=500)
    assert write_queries(captured) == []
    assert header_rows() == before  # same statuses, titles and updated_at: nothing resumed or touched


# --- check_session_status ---------------------------------------------------------------------


@pytest.mark.parametrize("session_id,status", [("ses_running", "running"), ("ses_idle", "idle"), ("ses_cold", "cold")])
def test_check_session_status_reports_the_session(api, sessions, session_id, status):
    response = api.tool("check_session_status", {"session_id": session_id})
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"session_id", "status", "title", "updated_at"}
    assert body["session_id"] == session_id
    assert body["status"] == status
    assert datetime.fromisoformat(body["updated_at"]) == SessionHeader.objects.get(session_id=session_id).updated_at


def test_check_session_status_title_is_the_fold(api, sessions):
    body = api.tool("check_session_status", {"session_id": "ses_cold"}).json()
    assert body["title"] == "Refactor the parser"


def test_check_session_status_omits_title_when_there_is_none(api, make_session):
    make_session("ses_untitled")
    body = api.tool("check_session_status", {"session_id": "ses_untitled"}).json()
    assert set(body) == {"session_id", "status", "updated_at"}


def test_check_session_status_of_an_unknown_session_is_missing(api):
    response = api.tool("check_session_status", {"session_id": "ses_nobody"})
    assert response.status_code == 200
    assert response.json() == {"session_id": "ses_nobody", "status": "missing"}


def test_check_session_status_is_exact_and_case_sensitive(api, sessions):
    assert api.tool("check_session_status", {"session_id": "SES_COLD"}).json()["status"] == "missing"
    assert api.tool("check_session_status", {"session_id": "ses_col"}).json()["status"] == "missing"


def test_check_session_status_never_resumes_a_cold_session(api, sessions):
    before = header_rows()
    with CaptureQueriesContext(connection) as captured:
        for _ in range(3):
            assert api.tool("check_session_status", {"session_id": "ses_cold"}).json()["status"] == "cold"
    assert write_queries(captured) == []
    assert SessionHeader.objects.get(session_id="ses_cold").status == "cold"
    assert header_rows() == before


def test_check_session_status_does_not_create_a_missing_session(api):
    api.tool("check_session_status", {"session_id": "ses_nobody"})
    assert not SessionHeader.objects.filter(session_id="ses_nobody").exists()


@pytest.mark.parametrize("reserved", ["self", "new", "global"])
def test_check_session_status_of_a_reserved_selector_is_422(api, reserved):
    response = api.tool("check_session_status", {"session_id": reserved})
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid_input"
    assert error["field"] == "session_id"
    assert reserved in error["message"]


@pytest.mark.parametrize("near_reserved", ["Self", "NEW", "global ", "selfish"])
def test_reserved_selectors_are_exact_and_case_sensitive(api, near_reserved):
    response = api.tool("check_session_status", {"session_id": near_reserved})
    if near_reserved != near_reserved.strip():
        assert response.status_code == 422  # surrounding whitespace is never an ID
    else:
        assert response.json() == {"session_id": near_reserved, "status": "missing"}


@pytest.mark.parametrize("body", [{}, {"session_id": ""}, {"session_id": None}, {"id": "ses_caller"}])
def test_check_session_status_needs_one_session_id(api, body):
    response = api.tool("check_session_status", body)
    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_input"
