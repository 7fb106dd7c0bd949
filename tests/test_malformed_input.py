"""No input, however malformed, produces a 5xx (contract §3 "Errors").

A sweep over every /api/ operation: broken JSON, non-UTF-8 bytes, bodies that are not
objects, wrong types for every field, unknown keys at every depth, huge bodies, NUL and odd
Unicode in strings, path IDs and the caller header, very long IDs, and missing, unknown or
under-scoped tokens. Every answer is either a 2xx (the input was valid after all) or a 4xx
with exactly the contract's error body. A hypothesis property then throws arbitrary JSON
at every body-taking operation.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.conf import settings
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.conftest import ApiClient, error_of

EVERY_MINUTE = {"kind": "every", "every_seconds": 60}
VALID_CREATE = {"prompt": "Check the deploy", "schedule": EVERY_MINUTE}

# The five tools with an input that each accepts from the `api` fixture's caller.
TOOLS = {
    "loop_create": VALID_CREATE,
    "loop_list": {},
    "loop_delete": {"loop_id": "loop_unknown"},
    "list_sessions": {},
    "check_session_status": {"session_id": "ses_caller"},
}
TOOL_PATHS = [f"/api/tools/{name}" for name in TOOLS]

# Every operation that reads a JSON body: (method, path, scope).
BODY_OPERATIONS = [
    *[("POST", path, "tools") for path in TOOL_PATHS],
    ("PUT", "/api/host/sessions/ses_x", "host"),
    ("PUT", "/api/host/presets/coder", "host"),
]
# Every authenticated operation: (method, path, scope).
AUTHENTICATED_OPERATIONS = [
    *BODY_OPERATIONS,
    ("GET", "/api/tools", "tools"),
    ("GET", "/api/loops/loop_x/runs", "tools"),
    ("GET", "/api/loops/loop_x/upcoming", "tools"),
    ("GET", "/api/host/sessions/ses_caller", "host"),
    ("GET", "/api/host/sessions/ses_caller/inbox", "host"),
    ("GET", "/api/loops/loop_x", "manage"),
    ("PATCH", "/api/loops/loop_x", "manage"),
    ("POST", "/api/loops/loop_x/pause", "manage"),
    ("POST", "/api/loops/loop_x/resume", "manage"),
    ("POST", "/api/loops/loop_x/run", "manage"),
    ("POST", "/api/loops/loop_x/retry", "manage"),
    ("GET", "/api/loops/loop_x/events", "manage"),
]
# Operations that take an ID in the path, with "{}" where the ID goes.
PATH_ID_OPERATIONS = [
    ("GET", "/api/loops/{}/runs", "tools"),
    ("GET", "/api/loops/{}/upcoming", "tools"),
    ("GET", "/api/host/sessions/{}", "host"),
    ("PUT", "/api/host/sessions/{}", "host"),
    ("GET", "/api/host/sessions/{}/inbox", "host"),
    ("PUT", "/api/host/presets/{}", "host"),
    ("GET", "/api/loops/{}", "manage"),
    ("POST", "/api/loops/{}/pause", "manage"),
    ("GET", "/api/loops/{}/events", "manage"),
]


@pytest.fixture
def clients(api, host_api, manage_api) -> dict[str, ApiClient]:
    return {"tools": api, "host": host_api, "manage": manage_api}


def send(client: ApiClient, method: str, path: str, raw: bytes | str | None = None, *, headers=None):
    """One request with the client's token; `raw` is the body exactly as sent."""
    kwargs = {"headers": {**client.headers(), **(headers or {})}}
    if method == "GET":
        return client.client.get(path, **kwargs)
    handler = getattr(client.client, method.lower())
    return handler(path, data=b"{}" if raw is None else raw, content_type="application/json", **kwargs)


def assert_answered(response) -> None:
    """2xx, or a 4xx carrying exactly the contract's error body; never a 5xx."""
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), response.content[:200]
        error_of(response)
    else:
        assert 200 <= response.status_code < 300, response.status_code


def assert_invalid(response, *, field: str | None = None, code: str = "invalid_input") -> dict:
    assert response.status_code == 422, (response.status_code, response.content[:500])
    error = error_of(response)
    assert error["code"] == code, error
    if field is not None:
        assert error.get("field") == field, error
    return error


# --- the body is not a JSON object ------------------------------------------------------------

NOT_JSON = [
    pytest.param(b"{", id="truncated"),
    pytest.param(b'{"limit": NaN}', id="NaN"),
    pytest.param(b'{"limit": Infinity}', id="Infinity"),
    pytest.param(b'{"limit": [-Infinity]}', id="-Infinity"),
    pytest.param(b"{'prompt': 'x'}", id="single-quotes"),
    pytest.param(b'{"prompt": "x",}', id="trailing-comma"),
    pytest.param(b"prompt=x", id="form-encoded"),
    pytest.param(b"\xff\xfe\xfd", id="non-utf8-bytes"),
    pytest.param(b'{"prompt": "caf\xe9"}', id="latin1-inside-a-string"),
    pytest.param(b"1" * 5000, id="integer-over-4300-digits"),
    pytest.param(b"[" * 100_000, id="nested-100k-deep"),
]
NOT_AN_OBJECT = [
    pytest.param(b"[]", id="array"),
    pytest.param(b'[{"prompt": "x"}]', id="array-of-object"),
    pytest.param(b'"hello"', id="string"),
    pytest.param(b"42", id="number"),
    pytest.param(b"-1.5e300", id="float"),
    pytest.param(b"true", id="boolean"),
    pytest.param(b"null", id="null"),
    pytest.param(b"", id="empty"),
]


@pytest.mark.parametrize("method,path,scope", BODY_OPERATIONS)
@pytest.mark.parametrize("raw", NOT_JSON)
def test_body_that_is_not_json_is_422_invalid_input(clients, method, path, scope, raw):
    error = assert_invalid(send(clients[scope], method, path, raw))
    assert "not valid JSON" in error["message"], error
    assert "field" not in error


@pytest.mark.parametrize("method,path,scope", BODY_OPERATIONS)
@pytest.mark.parametrize("raw", NOT_AN_OBJECT)
def test_body_that_is_not_an_object_is_422_saying_so(clients, method, path, scope, raw):
    error = assert_invalid(send(clients[scope], method, path, raw))
    assert "JSON object" in error["message"], error
    assert "field" not in error


def test_body_with_a_utf8_byte_order_mark_is_read_as_json(api):
    # RFC 8259 lets a parser ignore the BOM; Python's does, and nothing breaks for it.
    response = api.tool("list_sessions", raw=b"\xef\xbb\xbf{}")
    assert response.status_code == 200, response.content


# --- wrong types for every field --------------------------------------------------------------

STRING_FIELD_WRONG = [1, 1.5, True, False, [], ["x"], {}, {"a": 1}]
INTEGER_FIELD_WRONG = ["60", "", 1.5, 60.0, True, False, [], [60], {}, 2**53, -1, 0]
BOOL_FIELD_WRONG = ["true", "", 1, 0, 1.0, [], {}]


def with_value(base: dict, path: str, value) -> dict:
    """A deep copy of base with the dotted path set to value."""
    body = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    target = body
    for part in parents:
        target = target[part]
    target[last] = value
    return body


# (tool, a valid base body, dotted field path, wrong values)
TOOL_FIELDS = [
    ("loop_create", VALID_CREATE, "prompt", [*STRING_FIELD_WRONG, None]),
    ("loop_create", VALID_CREATE, "schedule", ["every", 60, True, [], [EVERY_MINUTE]]),
    ("loop_create", VALID_CREATE, "schedule.every_seconds", [*INTEGER_FIELD_WRONG, None]),
    (
        "loop_create",
        {"prompt": "p", "schedule": {"kind": "after", "after_seconds": 5}},
        "schedule.after_seconds",
        [*INTEGER_FIELD_WRONG, None],
    ),
    (
        "loop_create",
        {"prompt": "p", "schedule": {"kind": "cron", "expr": "0 9 * * *"}},
        "schedule.expr",
        [*STRING_FIELD_WRONG, None],
    ),
    (
        "loop_create",
        {"prompt": "p", "schedule": {"kind": "cron", "expr": "0 9 * * *", "tz": "UTC"}},
        "schedule.tz",
        STRING_FIELD_WRONG,
    ),
    ("loop_create", VALID_CREATE, "session_id", STRING_FIELD_WRONG),
    ("loop_create", {**VALID_CREATE, "session_id": "new"}, "preset", STRING_FIELD_WRONG),
    ("loop_create", {"prompt": "p", "time_in_seconds": 60}, "time_in_seconds", INTEGER_FIELD_WRONG),
    ("loop_list", {}, "session_id", STRING_FIELD_WRONG),
    ("loop_delete", {"loop_id": "loop_x"}, "loop_id", STRING_FIELD_WRONG),
    ("loop_delete", {"id": "loop_x"}, "id", STRING_FIELD_WRONG),
    ("list_sessions", {}, "limit", [*INTEGER_FIELD_WRONG, None, 501]),
    ("check_session_status", {"session_id": "ses_caller"}, "session_id", [*STRING_FIELD_WRONG, None]),
]


@pytest.mark.parametrize(
    "tool,base,field,wrong",
    [
        pytest.param(tool, base, field, wrong, id=f"{tool}.{field}={json.dumps(wrong)[:20]}")
        for tool, base, field, values in TOOL_FIELDS
        for wrong in values
    ],
)
def test_tool_field_of_the_wrong_type_is_422_naming_the_field(api, tool, base, field, wrong):
    response = api.tool(tool, with_value(base, field, wrong))
    error = assert_invalid(response)
    # A schedule whose kind cannot be read is reported on "schedule" itself.
    assert error.get("field") in {field, field.rsplit(".", 1)[0]}, error


@pytest.mark.parametrize("kind", ["every", "after", "cron", "EVERY", "", "weekly", 1, None, True, ["every"], {}])
def test_schedule_kind_that_is_not_one_of_the_three_is_422(api, kind):
    if isinstance(kind, str) and kind in {"every", "after", "cron"}:
        body = {"prompt": "p", "schedule": {"kind": kind}}  # right kind, its fields missing
    else:
        body = {"prompt": "p", "schedule": {"kind": kind, "every_seconds": 60}}
    error = assert_invalid(api.tool("loop_create", body))
    assert error["field"].startswith("schedule"), error


HOST_SESSION_FIELDS = [
    ("user_title", STRING_FIELD_WRONG),
    ("generated_title", STRING_FIELD_WRONG),
    ("first_prompt", STRING_FIELD_WRONG),
    ("status", [*STRING_FIELD_WRONG, "RUNNING", "missing", "", "new"]),
    ("preset", STRING_FIELD_WRONG),
    ("model", STRING_FIELD_WRONG),
    ("global_interface", BOOL_FIELD_WRONG),
]


@pytest.mark.parametrize(
    "field,wrong",
    [pytest.param(f, w, id=f"{f}={json.dumps(w)[:20]}") for f, values in HOST_SESSION_FIELDS for w in values],
)
def test_host_session_field_of_the_wrong_type_is_422_naming_the_field(host_api, field, wrong):
    assert_invalid(host_api.put("/api/host/sessions/ses_x", {field: wrong}), field=field)


@pytest.mark.parametrize("wrong", [*BOOL_FIELD_WRONG, None])
def test_host_preset_mountable_of_the_wrong_type_is_422(host_api, wrong):
    assert_invalid(host_api.put("/api/host/presets/coder", {"mountable": wrong}), field="mountable")


# --- unknown keys at every depth --------------------------------------------------------------

UNKNOWN_KEY_CASES = [
    ("POST", "/api/tools/loop_create", "tools", {**VALID_CREATE, "colour": "blue"}, "colour"),
    ("POST", "/api/tools/loop_create", "tools", {**VALID_CREATE, "model": "gpt"}, "model"),
    ("POST", "/api/tools/loop_create", "tools", {**VALID_CREATE, "model_effort": "high"}, "model_effort"),
    ("POST", "/api/tools/loop_create", "tools", {**VALID_CREATE, "Prompt": "x"}, "Prompt"),
    (
        "POST",
        "/api/tools/loop_create",
        "tools",
        {"prompt": "p", "schedule": {**EVERY_MINUTE, "jitter": 1}},
        "schedule.jitter",
    ),
    (
        "POST",
        "/api/tools/loop_create",
        "tools",
        {"prompt": "p", "schedule": {**EVERY_MINUTE, "after_seconds": 5}},
        "schedule.after_seconds",
    ),
    (
        "POST",
        "/api/tools/loop_create",
        "tools",
        {"prompt": "p", "schedule": {"kind": "after", "after_seconds": 5, "every_seconds": 5}},
        "schedule.every_seconds",
    ),
    (
        "POST",
        "/api/tools/loop_create",
        "tools",
        {"prompt": "p", "schedule": {"kind": "cron", "expr": "0 9 * * *", "timezone": "UTC"}},
        "schedule.timezone",
    ),
    (
        "POST",
        "/api/tools/loop_create",
        "tools",
        {"prompt": "p", "schedule": {"kind": "cron", "expr": "0 9 * * *", "nested": {"deeper": 1}}},
        "schedule.nested",
    ),
    ("POST", "/api/tools/loop_list", "tools", {"scope": "global"}, "scope"),
    ("POST", "/api/tools/loop_delete", "tools", {"loop_id": "loop_x", "force": True}, "force"),
    ("POST", "/api/tools/list_sessions", "tools", {"limit": 5, "offset": 5}, "offset"),
    ("POST", "/api/tools/check_session_status", "tools", {"session_id": "ses_caller", "resume": True}, "resume"),
    ("PUT", "/api/host/sessions/ses_x", "host", {"title": "t"}, "title"),
    ("PUT", "/api/host/sessions/ses_x", "host", {"updated_at": "2024-01-01T00:00:00+00:00"}, "updated_at"),
    ("PUT", "/api/host/presets/coder", "host", {"mountable": True, "model": "m"}, "model"),
]


@pytest.mark.parametrize(
    "method,path,scope,body,field",
    UNKNOWN_KEY_CASES,
    ids=[f"{c[1].rsplit('/', 1)[-1]}:{c[4]}" for c in UNKNOWN_KEY_CASES],
)
def test_unknown_key_at_any_depth_is_422_naming_it(clients, method, path, scope, body, field):
    assert_invalid(send(clients[scope], method, path, json.dumps(body)), field=field)


# --- sizes ------------------------------------------------------------------------------------


def test_one_megabyte_prompt_is_422_too_long(api):
    error = assert_invalid(api.tool("loop_create", {**VALID_CREATE, "prompt": "x" * 1_000_000}), field="prompt")
    assert "100000" in error["message"], error


def test_prompt_of_exactly_100000_characters_is_accepted(api):
    response = api.tool("loop_create", {**VALID_CREATE, "prompt": "x" * 100_000})
    assert response.status_code == 200, response.content[:300]
    assert len(response.json()["prompt"]) == 100_000


def test_prompt_of_100001_characters_is_422(api):
    assert_invalid(api.tool("loop_create", {**VALID_CREATE, "prompt": "x" * 100_001}), field="prompt")


@pytest.mark.parametrize("method,path,scope", BODY_OPERATIONS)
def test_body_over_the_upload_limit_is_413_too_large(clients, method, path, scope):
    size = 3 * 1024 * 1024
    assert size > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    raw = json.dumps({"prompt": "x" * size, "schedule": EVERY_MINUTE})
    response = send(clients[scope], method, path, raw)
    assert response.status_code == 413, response.status_code
    error = error_of(response)
    assert error["code"] == "too_large" and "too large" in error["message"], error


def test_huge_host_first_prompt_is_422(host_api):
    assert_invalid(host_api.put("/api/host/sessions/ses_x", {"first_prompt": "x" * 100_001}), field="first_prompt")


# --- NUL characters ---------------------------------------------------------------------------

NUL_FIELD_CASES = [
    ("loop_create", {**VALID_CREATE, "prompt": "a\x00b"}, "prompt"),
    ("loop_create", {"prompt": "p", "schedule": {"kind": "cron", "expr": "0 9 * * *\x00"}}, "schedule.expr"),
    ("loop_create", {"prompt": "p", "schedule": {"kind": "cron", "expr": "0 9 * * *", "tz": "UTC\x00"}}, "schedule.tz"),
    ("loop_create", {**VALID_CREATE, "session_id": "ses_\x00"}, "session_id"),
    ("loop_create", {**VALID_CREATE, "session_id": "new", "preset": "co\x00der"}, "preset"),
    ("loop_list", {"session_id": "\x00"}, "session_id"),
    ("loop_delete", {"loop_id": "loop_\x00"}, "loop_id"),
    ("loop_delete", {"id": "\x00"}, "id"),
    ("check_session_status", {"session_id": "ses\x00caller"}, "session_id"),
]


@pytest.mark.parametrize("tool,body,field", NUL_FIELD_CASES, ids=[f"{c[0]}:{c[2]}" for c in NUL_FIELD_CASES])
def test_nul_character_in_a_tool_string_is_422(api, tool, body, field):
    assert_invalid(api.tool(tool, body), field=field)


@pytest.mark.parametrize("field", ["user_title", "generated_title", "first_prompt", "preset", "model"])
def test_nul_character_in_a_host_session_string_is_422(host_api, field):
    assert_invalid(host_api.put("/api/host/sessions/ses_x", {field: "a\x00b"}), field=field)


@pytest.mark.parametrize("method,template,scope", PATH_ID_OPERATIONS)
@pytest.mark.parametrize("bad_id", ["%00", "a%00b", "%00%00"])
def test_nul_character_in_a_path_id_is_422(clients, method, template, scope, bad_id):
    assert_invalid(send(clients[scope], method, template.format(bad_id)))


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("caller", ["\x00", "ses_\x00", "\ud800", "ses\x07caller"])
def test_caller_header_that_no_session_id_can_be_is_422(api, tool, caller):
    error = assert_invalid(api.tool(tool, TOOLS[tool], session_id=caller))
    assert error["field"] == "X-DSH-Session-Id", error


# --- odd Unicode ------------------------------------------------------------------------------

VALID_ODD_PROMPTS = [
    pytest.param("Deploy 🚀 then celebrate 🎉👩‍👩‍👧‍👦", id="emoji-and-zwj-sequence"),
    pytest.param("\u200fמה המצב של הפריסה?\u200e", id="rtl-marks"),
    pytest.param("\u202eevil override\u202c", id="bidi-override"),
    pytest.param("e\u0301\u0301\u0301 Z\u0351\u0354\u0355algo", id="combining-marks"),
    pytest.param("\ufeffzero\u200bwidth\u2060", id="zero-width"),
    pytest.param("𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd", id="astral-and-private-use"),
    pytest.param("line one\u2028line two\r\nline three", id="odd-line-breaks"),
]


@pytest.mark.parametrize("prompt", VALID_ODD_PROMPTS)
def test_odd_but_valid_unicode_prompt_is_accepted_and_round_trips(api, prompt):
    response = api.tool("loop_create", {**VALID_CREATE, "prompt": prompt})
    assert response.status_code == 200, response.content[:300]
    assert response.json()["prompt"] == prompt.strip()
    listed = api.tool("loop_list", {}).json()["loops"]
    assert [loop["prompt"] for loop in listed] == [prompt.strip()]


LONE_SURROGATE_CASES = [
    ("loop_create", '{"prompt": "\\ud800", "schedule": {"kind": "every", "every_seconds": 60}}', "prompt"),
    ("loop_create", '{"prompt": "ok \\udfff ok", "schedule": {"kind": "every", "every_seconds": 60}}', "prompt"),
    ("loop_create", '{"prompt": "p", "schedule": {"kind": "cron", "expr": "\\ud800"}}', "schedule.expr"),
    (
        "loop_create",
        '{"prompt": "p", "schedule": {"kind": "cron", "expr": "0 9 * * *", "tz": "\\udc00"}}',
        "schedule.tz",
    ),
    (
        "loop_create",
        '{"prompt": "p", "schedule": {"kind": "every", "every_seconds": 60}, "session_id": "\\ud800"}',
        "session_id",
    ),
    ("loop_list", '{"session_id": "\\ud800"}', "session_id"),
    ("loop_delete", '{"loop_id": "loop_\\ud800"}', "loop_id"),
    ("check_session_status", '{"session_id": "\\ud83d"}', "session_id"),
]


@pytest.mark.parametrize("tool,raw,field", LONE_SURROGATE_CASES, ids=[f"{c[0]}:{c[2]}" for c in LONE_SURROGATE_CASES])
def test_lone_surrogate_escape_in_a_tool_string_is_422(api, tool, raw, field):
    error = assert_invalid(api.tool(tool, raw=raw), field=field)
    assert "surrogate" in error["message"], error


@pytest.mark.parametrize("field", ["user_title", "generated_title", "first_prompt", "preset", "model"])
def test_lone_surrogate_escape_in_a_host_session_string_is_422(host_api, field):
    raw = json.dumps({field: "\ud800"})  # json.dumps writes the lone surrogate as "\ud800"
    assert '"\\ud800"' in raw
    response = host_api.client.put(
        "/api/host/sessions/ses_x", data=raw, content_type="application/json", headers=host_api.headers()
    )
    assert_invalid(response, field=field)


def test_paired_surrogate_escapes_are_one_valid_character(api):
    raw = '{"prompt": "rocket \\ud83d\\ude80", "schedule": {"kind": "every", "every_seconds": 60}}'
    response = api.tool("loop_create", raw=raw)
    assert response.status_code == 200, response.content
    assert response.json()["prompt"] == "rocket 🚀"


@pytest.mark.parametrize("session_id", ["ses_🙂", "ses_e\u0301", "séance-Ω", "会话"])
def test_unicode_session_id_that_is_printable_is_a_valid_lookup(api, session_id):
    response = api.tool("check_session_status", {"session_id": session_id})
    assert response.status_code == 200, response.content
    assert response.json() == {"session_id": session_id, "status": "missing"}


@pytest.mark.parametrize("session_id", ["ses\u200fcaller", "\u202eses", "ses\u200bx", "ses\tx", " ses_caller", "ses\n"])
def test_session_id_with_format_or_control_characters_is_422(api, session_id):
    assert_invalid(api.tool("check_session_status", {"session_id": session_id}), field="session_id")


def test_emoji_host_titles_are_stored_and_returned(host_api):
    response = host_api.put("/api/host/sessions/ses_x", {"user_title": "Déploiement 🚀 \u200fשלום"})
    assert response.status_code == 200, response.content
    assert response.json()["title"] == "Déploiement 🚀 \u200fשלום"


@pytest.mark.parametrize("method,template,scope", PATH_ID_OPERATIONS)
def test_unicode_path_id_is_answered(clients, method, template, scope):
    response = send(clients[scope], method, template.format(quote("ses_🙂é\u0301")))
    assert_answered(response)
    assert response.status_code in {200, 404}, response.content


@pytest.mark.parametrize("method,template,scope", PATH_ID_OPERATIONS)
@pytest.mark.parametrize("bad_id", ["%ED%A0%80", "%FF%FE", "%C3"])
def test_path_id_with_broken_utf8_is_answered_without_5xx(clients, method, template, scope, bad_id):
    assert_answered(send(clients[scope], method, template.format(bad_id)))


# --- very long IDs ----------------------------------------------------------------------------

LONG_ID_TOOL_CASES = [
    ("loop_create", {**VALID_CREATE, "session_id": "s" * 256}, "session_id"),
    ("loop_create", {**VALID_CREATE, "session_id": "new", "preset": "p" * 256}, "preset"),
    ("loop_list", {"session_id": "s" * 10_000}, "session_id"),
    ("loop_delete", {"loop_id": "l" * 100_000}, "loop_id"),
    ("check_session_status", {"session_id": "s" * 256}, "session_id"),
]


@pytest.mark.parametrize("tool,body,field", LONG_ID_TOOL_CASES, ids=[f"{c[0]}:{c[2]}" for c in LONG_ID_TOOL_CASES])
def test_id_longer_than_255_characters_is_422(api, tool, body, field):
    error = assert_invalid(api.tool(tool, body), field=field)
    assert "255" in error["message"], error


def test_id_of_exactly_255_characters_is_a_valid_lookup(api):
    response = api.tool("check_session_status", {"session_id": "s" * 255})
    assert response.json() == {"session_id": "s" * 255, "status": "missing"}


@pytest.mark.parametrize("method,template,scope", PATH_ID_OPERATIONS)
def test_path_id_longer_than_255_characters_is_422(clients, method, template, scope):
    assert_invalid(send(clients[scope], method, template.format("x" * 5000)))


@pytest.mark.parametrize("tool", TOOLS)
def test_caller_header_that_came_twice_is_422(api, tool):
    # What a WSGI server makes of two X-DSH-Session-Id headers (tests/test_hostile_client.py sends them).
    error = assert_invalid(api.tool(tool, TOOLS[tool], session_id="ses_caller,ses_other"))
    assert error["field"] == "X-DSH-Session-Id" and "once" in error["message"], error


@pytest.mark.parametrize("tool", TOOLS)
def test_caller_header_that_was_not_utf8_is_422_saying_so(api, tool):
    # dshloop.wsgi keeps bytes that are not UTF-8 as lone surrogates (tests/test_hostile_client.py sends them).
    error = assert_invalid(api.tool(tool, TOOLS[tool], session_id="ses_\udce9"))
    assert error["field"] == "X-DSH-Session-Id" and "UTF-8" in error["message"], error


def test_loop_list_from_a_caller_the_host_does_not_know_is_unknown_session(api):
    listed = api.tool("loop_list", {}, session_id="ses_nobody")
    created = api.tool("loop_create", VALID_CREATE, session_id="ses_nobody")
    assert assert_invalid(listed, code="unknown_session") == assert_invalid(created, code="unknown_session")


def test_caller_header_longer_than_255_characters_is_422(api):
    error = assert_invalid(api.tool("loop_list", {}, session_id="s" * 300))
    assert error["field"] == "X-DSH-Session-Id"


# --- query strings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=501",
        "limit=-1",
        "limit=abc",
        "limit=1.5",
        "limit=%00",
        "limit=" + "9" * 5000,
        "count=0",
        "count=501",
        "count=x",
        "count=%F0%9F%99%82",
    ],
)
@pytest.mark.parametrize("endpoint", ["runs", "upcoming"])
def test_loop_extras_query_out_of_range_is_422_or_ignored(api, query, endpoint):
    response = api.get(f"/api/loops/loop_x/{endpoint}?{query}")
    assert_answered(response)
    param = query.split("=", 1)[0]
    if (endpoint == "runs") == (param == "limit"):  # the parameter this endpoint reads
        error = assert_invalid(response, field=param)
        assert "JSON" not in error["message"], error  # a query string holds text, not JSON


@pytest.mark.parametrize(
    "query,message",
    [
        ("limit=abc", "'limit' must be an integer."),
        ("limit=1.5", "'limit' must be an integer."),
        ("limit=0", "'limit' must be at least 1."),
        ("limit=501", "'limit' must be at most 500."),
    ],
)
def test_query_parameter_errors_say_what_a_query_parameter_can_be(api, query, message):
    assert assert_invalid(api.get(f"/api/loops/loop_x/runs?{query}"), field="limit")["message"] == message


@pytest.mark.parametrize(
    "tool,body,message",
    [
        ("list_sessions", {"limit": 501}, "'limit' must be at most 500."),
        (
            "loop_create",
            {"prompt": "p", "schedule": {"kind": "every", "every_seconds": 2**53}},
            "'schedule.every_seconds' must be at most 9007199254740991 (2^53-1).",
        ),
        ("list_sessions", {"limit": "5"}, "'limit' must be a JSON integer."),
    ],
)
def test_a_limit_names_2_53_only_when_it_is_2_53(api, tool, body, message):
    assert assert_invalid(api.tool(tool, body))["message"] == message


# --- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize("method,path,scope", AUTHENTICATED_OPERATIONS)
def test_missing_token_is_401_unauthorized(clients, method, path, scope):
    response = send(ApiClient(None), method, path)
    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthorized"


@pytest.mark.parametrize("method,path,scope", AUTHENTICATED_OPERATIONS)
@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer dsh_not-a-real-token",
        "Bearer ",
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Token abc",
        "dsh_abc",
        "Bearer " + "x" * 10_000,
        "Bearer a\x00b",
    ],
)
def test_unknown_or_malformed_token_is_401_unauthorized(clients, method, path, scope, authorization):
    response = send(ApiClient(None), method, path, headers={"Authorization": authorization})
    assert response.status_code == 401, response.content
    assert error_of(response)["code"] == "unauthorized"


@pytest.mark.parametrize("method,path,scope", AUTHENTICATED_OPERATIONS)
def test_token_without_the_needed_scope_is_403_forbidden(clients, method, path, scope):
    wrong = clients["host" if scope == "tools" else "tools"]
    response = send(wrong, method, path)
    assert response.status_code == 403, response.content
    error = error_of(response)
    assert error["code"] == "forbidden"
    assert scope in error["message"]


def test_health_needs_no_token(alive_scheduler):
    response = ApiClient(None).get("/api/health")
    assert response.status_code == 200
    assert response.json()["database"] == "ok"


def test_health_ignores_a_bad_token(alive_scheduler):
    response = send(ApiClient(None), "GET", "/api/health", headers={"Authorization": "Bearer nope"})
    assert response.status_code == 200


def test_health_answers_head_for_uptime_monitors(alive_scheduler):
    response = ApiClient(None).client.head("/api/health")
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response.content == b""  # tests/test_hostile_client.py checks what a real server sends


def test_every_api_call_but_health_needs_a_token_the_description_too(alive_scheduler, tools_token):
    """contract §2: every /api/ call except GET /api/health needs a bearer token (any scope for the
    API's description, /api/docs and /api/openapi.json); a signed-in staff user reads it as well."""
    from django.contrib.auth import get_user_model

    anonymous = ApiClient(None)
    for path in ("/api/docs", "/api/openapi.json"):
        response = anonymous.get(path)
        assert response.status_code == 401, path
        assert error_of(response)["code"] == "unauthorized" and "/admin/login/" in error_of(response)["message"]
        assert error_of(ApiClient("dsh_unknown").get(path))["code"] == "unauthorized"
    assert ApiClient(tools_token).get("/api/docs").status_code == 200
    staff = get_user_model().objects.create_user("ops", password="pw-for-tests", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    assert browser.get("/api/docs").status_code == 200
    document = ApiClient(tools_token).get("/api/openapi.json").json()
    operation_ids = [operation["operationId"] for item in document["paths"].values() for operation in item.values()]
    assert len(operation_ids) == len(set(operation_ids)), operation_ids  # GET and HEAD /api/health too
    for path, operations in document["paths"].items():
        for method in operations:
            url = path.replace("{loop_id}", "loop_x").replace("{session_id}", "ses_x").replace("{name}", "coder")
            response = getattr(anonymous.client, method)(url)
            if path == "/api/health":
                assert response.status_code == 200
            else:
                assert response.status_code == 401, (method, path)
                assert error_of(response)["code"] == "unauthorized"


# --- paths and methods nobody serves ----------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/",
        "/api/nope",
        "/api/tools/loop_update",
        "/api/tools/loop_create/x",
        "/api/health/",
        "/api/host/sessions/",
        "/api/loops/loop_x/nope",
    ],
)
def test_unknown_api_path_is_404_with_the_error_body(api, path):
    response = send(api, "POST", path)
    assert response.status_code == 404, response.content[:200]
    assert error_of(response)["code"] == "not_found"


# --- properties over arbitrary input ----------------------------------------------------------

ODD_CHARACTERS = st.sampled_from(["\x00", "\ud800", "\udfff", "\u202e", "\u200f", "\u0301", "🙂", "\ufeff", " ", "\n"])
TEXT = st.text(st.one_of(st.characters(), ODD_CHARACTERS), max_size=40)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.sampled_from(["every", "after", "cron", "self", "new", "global", "ses_caller", "UTC", "* * * * *", "60"]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(TEXT, children, max_size=4)),
    max_leaves=12,
)
KNOWN_KEYS = [
    "prompt",
    "schedule",
    "session_id",
    "preset",
    "time_in_seconds",
    "loop_id",
    "id",
    "limit",
    "kind",
    "every_seconds",
    "after_seconds",
    "expr",
    "tz",
    "user_title",
    "generated_title",
    "first_prompt",
    "status",
    "model",
    "global_interface",
    "mountable",
]
SCHEDULES = st.fixed_dictionaries(
    {"kind": st.sampled_from(["every", "after", "cron"])},
    optional={key: JSON_VALUES for key in ["every_seconds", "after_seconds", "expr", "tz", "extra"]},
)
# Objects built from the real keys reach deeper validation than random keys ever would.
PLAUSIBLE_OBJECTS = st.dictionaries(
    st.one_of(st.sampled_from(KNOWN_KEYS), TEXT),
    st.one_of(JSON_VALUES, SCHEDULES),
    max_size=6,
)
BODIES = st.one_of(JSON_VALUES, PLAUSIBLE_OBJECTS)
ALL_BODY_OPERATIONS = st.sampled_from(BODY_OPERATIONS)
HYPOTHESIS = hypothesis_settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@HYPOTHESIS
@given(operation=ALL_BODY_OPERATIONS, body=BODIES)
def test_arbitrary_json_body_never_produces_a_5xx(clients, operation, body):
    method, path, scope = operation
    assert_answered(send(clients[scope], method, path, json.dumps(body)))


@HYPOTHESIS
@given(tool=st.sampled_from(list(TOOLS)), body=st.one_of(st.none(), PLAUSIBLE_OBJECTS), caller=TEXT)
def test_arbitrary_tool_input_and_caller_never_produce_a_5xx(api, tool, body, caller):
    # None: the tool's valid input, so that the caller header is actually used. An empty
    # caller means "no header", so that case is covered as well.
    assert_answered(api.tool(tool, TOOLS[tool] if body is None else body, session_id=caller or None))


@HYPOTHESIS
@given(operation=st.sampled_from(PATH_ID_OPERATIONS), raw_id=TEXT.filter(bool))
def test_arbitrary_path_id_never_produces_a_5xx(clients, operation, raw_id):
    method, template, scope = operation
    path_id = quote(raw_id.encode("utf-8", "surrogatepass"), safe="")  # a lone surrogate becomes broken UTF-8
    assert_answered(send(clients[scope], method, template.format(path_id)))


@HYPOTHESIS
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_as_a_body_never_produce_a_5xx(api, raw):
    for name in TOOLS:
        assert_answered(api.tool(name, raw=raw or b" "))


def test_health_answers_whatever_caller_header_is_sent(alive_scheduler):
    response = ApiClient(None, "ses\x00\ud800").get("/api/health")
    assert response.status_code == 200, response.content
