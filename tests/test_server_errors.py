"""Failures that are not the caller's fault (contract §3 "Errors"): a database that cannot be reached
is 503 `unavailable` with Retry-After on /api/ and /metrics (a short HTML page on the panel); any other
exception is a bug, logged with its traceback, counted in /metrics and answered 500 (`internal_error`
under /api/), never Django's HTML "Server Error (500)" without a line in the log.

In-process, with the failure injected where a real one would start (a selector, a middleware); the
real outage (a PostgreSQL server stopped under a served process) is in
tests/reliability/test_pg_outage_answers.py, and the log lines a served process writes in both
formats are in tests/test_server_error_logs.py.
"""

from __future__ import annotations

import logging
import sqlite3

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError
from django.test import Client

import loops.api
import panel.views.loop_pages
from core.errors import database_unavailable
from monitoring import metrics
from tests.conftest import ApiClient, captured_log, create_loop, error_of, every

pytestmark = pytest.mark.django_db


def wrapped(driver_error: Exception, django_class=OperationalError) -> Exception:
    """What Django's wrap_database_errors raises: its own class `from` the driver's error."""
    try:
        raise django_class(str(driver_error)) from driver_error
    except django_class as exc:
        return exc


def pg_error(sqlstate: str | None, message: str = "boom") -> psycopg.Error:
    cls = psycopg.errors.lookup(sqlstate) if sqlstate else psycopg.OperationalError
    return cls(message)


# --- what counts as "the database cannot be reached" ---------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(wrapped(psycopg.OperationalError("connection refused")), id="pg-connect-refused"),
        pytest.param(wrapped(pg_error("57P01")), id="pg-admin-shutdown"),
        pytest.param(wrapped(pg_error("57P03")), id="pg-cannot-connect-now"),
        pytest.param(wrapped(pg_error("08006")), id="pg-connection-failure"),
        pytest.param(wrapped(pg_error("53300")), id="pg-too-many-connections"),
        pytest.param(wrapped(psycopg.InterfaceError("connection already closed"), InterfaceError), id="pg-closed"),
        pytest.param(psycopg.OperationalError("bare driver error"), id="pg-unwrapped"),
        pytest.param(wrapped(sqlite3.OperationalError("database is locked")), id="sqlite-locked"),
        pytest.param(wrapped(sqlite3.OperationalError("unable to open database file")), id="sqlite-cannot-open"),
        pytest.param(InterfaceError("connection already closed"), id="django-own"),
    ],
)
def test_errors_of_a_database_out_of_reach_are_unavailable(exc):
    assert database_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(wrapped(sqlite3.OperationalError("no such table: loops_loop")), id="sqlite-no-such-table"),
        pytest.param(wrapped(pg_error("40P01")), id="pg-deadlock"),
        pytest.param(wrapped(pg_error("40001")), id="pg-serialization-failure"),
        pytest.param(wrapped(pg_error("57014")), id="pg-statement-timeout"),
        pytest.param(wrapped(psycopg.errors.UniqueViolation("dup"), IntegrityError), id="integrity"),
        pytest.param(DatabaseError("other"), id="database-error"),
        pytest.param(RuntimeError("a bug"), id="bug"),
    ],
)
def test_bugs_are_not_unavailable(exc):
    assert not database_unavailable(exc)


# --- /api/ ------------------------------------------------------------------------------------------


@pytest.fixture
def loop(make_session):
    make_session("ses_a")
    return create_loop(every(60), target="ses_a")


def failing(exc: Exception):
    def fail(*args, **kwargs):
        raise exc

    return fail


def test_an_unexpected_exception_under_api_is_a_logged_counted_json_500(monkeypatch, caplog, manage_api, loop):
    monkeypatch.setattr(loops.api, "loop_get", failing(RuntimeError("the selector broke")))
    before = metrics._unexpected_errors.value
    with captured_log(caplog, "dshloop.errors"):
        response = manage_api.get(f"/api/loops/{loop.loop_id}")
    assert response.status_code == 500 and response["Content-Type"].startswith("application/json")
    error = error_of(response)
    assert error["code"] == "internal_error" and "the selector broke" not in error["message"]
    [record] = [r for r in caplog.records if r.name == "dshloop.errors"]
    assert record.levelno == logging.ERROR and f"GET /api/loops/{loop.loop_id}" in record.getMessage()
    assert record.exc_info[0] is RuntimeError  # the traceback goes to the log
    assert metrics._unexpected_errors.value == before + 1


@pytest.mark.parametrize("debug", [False, True])
def test_the_json_500_holds_under_debug_too(monkeypatch, settings, manage_api, loop, debug):
    # ninja's own handler answers the traceback as text/plain under DEBUG.
    settings.DEBUG = debug
    monkeypatch.setattr(loops.api, "loop_get", failing(KeyError("x")))
    assert error_of(manage_api.get(f"/api/loops/{loop.loop_id}"))["code"] == "internal_error"


@pytest.mark.parametrize(
    "driver_error", [psycopg.OperationalError("no route"), sqlite3.OperationalError("database is locked")]
)
def test_a_database_out_of_reach_under_api_is_503_unavailable_with_retry_after(
    monkeypatch, caplog, manage_api, loop, driver_error
):
    monkeypatch.setattr(loops.api, "loop_get", failing(wrapped(driver_error)))
    before = metrics._unexpected_errors.value
    with captured_log(caplog, "dshloop.errors"):
        response = manage_api.get(f"/api/loops/{loop.loop_id}")
    assert response.status_code == 503, response.content
    assert error_of(response)["code"] == "unavailable" and response["Retry-After"] == "5"
    [record] = [r for r in caplog.records if r.name == "dshloop.errors"]
    assert record.levelno == logging.WARNING and record.exc_info is None  # an outage is not a bug
    assert metrics._unexpected_errors.value == before


def test_django_s_own_4xx_stay_4xx_under_api(monkeypatch, manage_api, loop):
    from django.core.exceptions import PermissionDenied, SuspiciousOperation

    monkeypatch.setattr(loops.api, "loop_get", failing(PermissionDenied()))
    assert manage_api.get(f"/api/loops/{loop.loop_id}").status_code == 403
    monkeypatch.setattr(loops.api, "loop_get", failing(SuspiciousOperation("odd")))
    response = manage_api.get(f"/api/loops/{loop.loop_id}")
    assert response.status_code == 400 and error_of(response)["code"] == "invalid_input"


def test_every_api_operation_documents_503_unavailable(manage_api):
    schema = manage_api.get("/api/openapi.json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert "503" in operation["responses"], (method, path)
    loop_create = schema["paths"]["/api/tools/loop_create"]["post"]["responses"]["503"]
    assert "unavailable" in loop_create["description"] and "Retry-After" in loop_create["headers"]
    assert loop_create["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorOut"}
    # /api/health keeps its own 503 (its verdict, with the health body).
    health = schema["paths"]["/api/health"]["get"]["responses"]["503"]
    assert health["content"]["application/json"]["schema"]["$ref"].endswith("/HealthProblemsOut")


# --- /metrics, the panel ------------------------------------------------------------------------------


def test_metrics_answers_json_503_when_the_database_is_out_of_reach(monkeypatch, manage_api):
    monkeypatch.setattr(metrics.counters, "read_counters", failing(wrapped(psycopg.OperationalError("gone"))))
    response = manage_api.get("/metrics")
    assert response.status_code == 503 and error_of(response)["code"] == "unavailable"
    assert response["Retry-After"] == "5"


def test_metrics_counts_unexpected_errors_and_answers_json_500_for_its_own(monkeypatch, manage_api):
    before = metrics._unexpected_errors.value
    text = manage_api.get("/metrics").content.decode()
    assert f"dshloop_http_unexpected_errors_total {float(before)}" in text
    assert "# TYPE dshloop_http_unexpected_errors_total counter" in text
    monkeypatch.setattr(metrics.counters, "read_counters", failing(ZeroDivisionError()))
    response = manage_api.get("/metrics")
    assert response.status_code == 500 and error_of(response)["code"] == "internal_error"
    assert metrics._unexpected_errors.value == before + 1


@pytest.fixture
def staff_client(db) -> Client:
    user = get_user_model().objects.create_user("ada", password="pw-not-secret", is_staff=True, is_superuser=True)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_a_panel_page_answers_a_plain_503_page_when_the_database_is_out_of_reach(monkeypatch, staff_client, loop):
    monkeypatch.setattr(panel.views.loop_pages, "loop_get", failing(wrapped(psycopg.OperationalError("gone"))))
    response = staff_client.get(f"/panel/loops/{loop.loop_id}/")
    assert response.status_code == 503 and response["Content-Type"].startswith("text/html")
    assert b"Service unavailable" in response.content and response["Retry-After"] == "5"


def test_a_panel_bug_is_a_logged_counted_500_page(monkeypatch, caplog, staff_client, loop):
    monkeypatch.setattr(panel.views.loop_pages, "loop_get", failing(RuntimeError("panel bug")))
    before = metrics._unexpected_errors.value
    with captured_log(caplog, "dshloop.errors"):
        response = staff_client.get(f"/panel/loops/{loop.loop_id}/")
    assert response.status_code == 500 and b"Server Error (500)" in response.content
    assert [r.exc_info[0] for r in caplog.records if r.name == "dshloop.errors"] == [RuntimeError]
    assert metrics._unexpected_errors.value == before + 1


# --- outside any view: Django's handler500 ---------------------------------------------------------


class FailingMiddleware:
    """Raises what the test puts in `exc`, outside any view."""

    exc: Exception = RuntimeError("a middleware broke")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        raise FailingMiddleware.exc


@pytest.fixture
def failing_middleware(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.FailingMiddleware"]


def test_an_exception_outside_any_view_is_logged_by_django_request_with_its_traceback(
    failing_middleware, caplog, tools_token
):
    FailingMiddleware.exc = RuntimeError("a middleware broke")
    before = metrics._unexpected_errors.value
    client = ApiClient(tools_token)
    client.client = Client(raise_request_exception=False)
    with captured_log(caplog, "django.request"):
        response = client.get("/api/tools")
    assert response.status_code == 500 and error_of(response)["code"] == "internal_error"
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.exc_info[0] is RuntimeError
    assert metrics._unexpected_errors.value == before + 1
    # The filter on its handler lets through what Django caught, and nothing a view chose to answer.
    uncaught = logging.getLogger("django.request").handlers[0]
    assert uncaught.filter(record)
    assert not uncaught.filter(logging.makeLogRecord({"name": "django.request", "msg": "Service Unavailable"}))


def test_a_database_out_of_reach_outside_any_view_is_503(failing_middleware):
    FailingMiddleware.exc = wrapped(psycopg.OperationalError("gone"))
    response = Client(raise_request_exception=False).get("/panel/")
    assert response.status_code == 503 and response["Retry-After"] == "5"
