"""The deprecated v1 aliases (spec §2.1, §2.3, §10): loop_create time_in_seconds and loop_delete {id}.

They work, they are marked deprecated where agents and people read the API, and each caller that
still uses one is named once (per process) in the log, at WARNING.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
import time_machine

from loops.models import Loop
from tests.conftest import ApiClient, captured_log, error_of
from tools import aliases

NOW = datetime(2025, 6, 2, 10, 0, 0, 250000, tzinfo=UTC)
NOW_MS = 1748858400250


@pytest.fixture(autouse=True)
def fresh_alias_memory():
    """The once-per-caller memory is per process: start each test with nobody remembered."""
    aliases._alias_callers.clear()
    yield
    aliases._alias_callers.clear()


@pytest.fixture
def alias_log(caplog):
    with captured_log(caplog, "dshloop.tools") as log:
        yield log


def alias_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "dshloop.tools" and "deprecated v1 alias" in r.getMessage()]


def create_with_alias(api: ApiClient, seconds: int = 600):
    return api.tool("loop_create", {"prompt": "Check the deploy", "time_in_seconds": seconds})


# --- the aliases work ---------------------------------------------------------------------------


def test_time_in_seconds_maps_to_an_every_schedule_targeting_the_caller(api):
    with time_machine.travel(NOW, tick=False):
        response = create_with_alias(api, 600)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["schedule"] == {"kind": "every", "every_seconds": 600}
    assert (body["session_id"], body["created_by_session_id"]) == ("ses_caller", "ses_caller")
    assert (body["created_at"], body["next_at"]) == (NOW_MS, NOW_MS + 600_000)
    assert "time_in_seconds" not in body  # new code emits the v2 shape only (spec §10)


def test_time_in_seconds_with_schedule_is_rejected_and_creates_nothing(api):
    response = api.tool(
        "loop_create", {"prompt": "p", "time_in_seconds": 60, "schedule": {"kind": "every", "every_seconds": 60}}
    )
    assert response.status_code == 422
    assert error_of(response)["field"] == "time_in_seconds"
    assert not Loop.objects.exists()


def test_loop_delete_by_deprecated_id_deletes_the_loop(api):
    loop_id = create_with_alias(api).json()["loop_id"]
    response = api.tool("loop_delete", {"id": loop_id})
    assert response.status_code == 200, response.content
    assert response.json() == {"deleted": True, "loop_id": loop_id}
    assert not Loop.objects.filter(loop_id=loop_id).exists()


def test_loop_delete_by_deprecated_id_of_an_unknown_loop_is_unknown_loop(api):
    response = api.tool("loop_delete", {"id": "loop_nothere"})
    assert response.status_code == 404
    assert error_of(response)["code"] == "unknown_loop"


# --- marked deprecated for agents and people -----------------------------------------------------


@pytest.mark.parametrize(("tool", "field"), [("loop_create", "time_in_seconds"), ("loop_delete", "id")])
def test_alias_is_marked_deprecated_in_the_tool_catalogue(api, tool, field):
    tools = {t["name"]: t for t in api.get("/api/tools").json()["tools"]}
    prop = tools[tool]["input_schema"]["properties"][field]
    assert prop["deprecated"] is True
    assert "deprecated" in prop["description"].lower()


@pytest.mark.parametrize(("model", "field"), [("LoopCreateIn", "time_in_seconds"), ("LoopDeleteIn", "id")])
def test_alias_is_marked_deprecated_in_the_openapi_document(tools_token, model, field):
    schemas = ApiClient(tools_token).get("/api/openapi.json").json()["components"]["schemas"]
    assert schemas[model]["properties"][field]["deprecated"] is True


@pytest.mark.parametrize(("model", "field"), [("LoopCreateIn", "schedule"), ("LoopDeleteIn", "loop_id")])
def test_canonical_fields_are_not_marked_deprecated_in_openapi(tools_token, model, field):
    schemas = ApiClient(tools_token).get("/api/openapi.json").json()["components"]["schemas"]
    assert "deprecated" not in schemas[model]["properties"][field]


# --- each caller is named once -----------------------------------------------------------------


def test_first_time_in_seconds_use_is_logged_as_a_warning_naming_the_caller(api, alias_log):
    create_with_alias(api)
    [record] = alias_warnings(alias_log)
    assert record.levelno == logging.WARNING
    assert "loop_create time_in_seconds" in record.getMessage()
    assert "'ses_caller'" in record.getMessage()


def test_repeated_use_by_the_same_caller_is_logged_once(api, alias_log):
    for _ in range(3):
        assert create_with_alias(api).status_code == 200
    assert len(alias_warnings(alias_log)) == 1


def test_each_caller_is_logged_once_per_alias(api, make_session, alias_log):
    make_session("ses_other")
    other = api.as_session("ses_other")
    loop_ids = [create_with_alias(client).json()["loop_id"] for client in (api, other, api, other)]
    api.tool("loop_delete", {"id": loop_ids[0]})
    api.tool("loop_delete", {"id": loop_ids[1]})
    other.tool("loop_delete", {"id": loop_ids[2]})

    messages = [r.getMessage() for r in alias_warnings(alias_log)]
    assert len(messages) == 4
    assert sum("time_in_seconds" in m and "'ses_caller'" in m for m in messages) == 1
    assert sum("time_in_seconds" in m and "'ses_other'" in m for m in messages) == 1
    assert sum("loop_delete {id}" in m and "'ses_caller'" in m for m in messages) == 1
    assert sum("loop_delete {id}" in m and "'ses_other'" in m for m in messages) == 1


def test_loop_delete_alias_without_a_caller_header_is_logged_as_no_session(api, alias_log):
    loop_id = create_with_alias(api).json()["loop_id"]
    alias_log.clear()
    anonymous = ApiClient(api.token)
    assert anonymous.tool("loop_delete", {"id": loop_id}).status_code == 200
    [record] = alias_warnings(alias_log)
    assert "(none: no X-DSH-Session-Id)" in record.getMessage()


def test_canonical_forms_are_not_logged(api, alias_log):
    loop_id = api.tool("loop_create", {"prompt": "p", "schedule": {"kind": "every", "every_seconds": 60}}).json()
    api.tool("loop_delete", {"loop_id": loop_id["loop_id"]})
    assert alias_warnings(alias_log) == []


def test_alias_memory_is_bounded_and_a_forgotten_caller_is_named_again(monkeypatch, alias_log):
    monkeypatch.setattr(aliases, "ALIAS_CALLERS_REMEMBERED", 2)
    for caller in ("ses_a", "ses_b", "ses_c"):  # ses_a is pushed out by ses_c
        assert aliases.log_deprecated_alias("loop_delete {id}", caller_session_id=caller)
    assert len(aliases._alias_callers) == 2
    assert not aliases.log_deprecated_alias("loop_delete {id}", caller_session_id="ses_c")
    assert aliases.log_deprecated_alias("loop_delete {id}", caller_session_id="ses_a")
    assert len(alias_warnings(alias_log)) == 4


def test_recent_use_keeps_a_caller_remembered(monkeypatch, alias_log):
    monkeypatch.setattr(aliases, "ALIAS_CALLERS_REMEMBERED", 2)
    aliases.log_deprecated_alias("x", caller_session_id="ses_a")
    aliases.log_deprecated_alias("x", caller_session_id="ses_b")
    aliases.log_deprecated_alias("x", caller_session_id="ses_a")  # ses_a is now the most recent
    aliases.log_deprecated_alias("x", caller_session_id="ses_c")  # pushes out ses_b, not ses_a
    assert not aliases.log_deprecated_alias("x", caller_session_id="ses_a")
    assert aliases.log_deprecated_alias("x", caller_session_id="ses_b")
