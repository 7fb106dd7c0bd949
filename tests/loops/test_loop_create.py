"""loop_create through the HTTP API (spec §2.1, §3, §4, §9, §12; contract §2, §3).

Only what needs no scheduler: validation, target resolution and the LoopView shape.
"""

from datetime import UTC, datetime

import pytest
import time_machine

from loops.models import Loop
from tests.conftest import error_of

MAX_SAFE = 2**53 - 1
NOW = datetime(2025, 6, 2, 10, 0, 0, 123000, tzinfo=UTC)  # a Monday
NOW_MS = 1748858400123
EVERY_10 = {"kind": "every", "every_seconds": 10}
# A `new` loop fires at most every DSHLOOP_MIN_NEW_INTERVAL_SECONDS (300 by default).
EVERY_10_MINUTES = {"kind": "every", "every_seconds": 600}
LOOP_VIEW_KEYS = {"loop_id", "prompt", "schedule", "session_id", "created_by_session_id", "created_at", "state"}

# The acceptance set runs against both hosts.
pytestmark = pytest.mark.both_hosts


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def create(api, **body):
    body.setdefault("prompt", "Check the deploy")
    return api.tool("loop_create", body)


def assert_invalid(response, field: str, code: str = "invalid_input", status: int = 422) -> dict:
    assert response.status_code == status, response.content
    error = error_of(response)
    assert (error["code"], error.get("field")) == (code, field), error
    return error


# --- each schedule kind accepts only its documented fields (spec §12) --------------------------


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"kind": "every", "every_seconds": 10, "after_seconds": 10}, "schedule.after_seconds"),
        ({"kind": "every", "every_seconds": 10, "expr": "* * * * *"}, "schedule.expr"),
        ({"kind": "every", "every_seconds": 10, "tz": "UTC"}, "schedule.tz"),
        ({"kind": "after", "after_seconds": 10, "every_seconds": 10}, "schedule.every_seconds"),
        ({"kind": "after", "after_seconds": 10, "tz": "UTC"}, "schedule.tz"),
        ({"kind": "cron", "expr": "* * * * *", "every_seconds": 10}, "schedule.every_seconds"),
        ({"kind": "cron", "expr": "* * * * *", "after_seconds": 10}, "schedule.after_seconds"),
        ({"kind": "cron", "expr": "* * * * *", "seconds": 10}, "schedule.seconds"),
    ],
)
def test_schedule_kind_rejects_fields_of_other_kinds(api, schedule, field):
    error = assert_invalid(create(api, schedule=schedule), field)
    assert field in error["message"]
    assert not Loop.objects.exists()


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"kind": "every"}, "schedule.every_seconds"),
        ({"kind": "after"}, "schedule.after_seconds"),
        ({"kind": "cron"}, "schedule.expr"),
        ({"kind": "every", "after_seconds": 10}, "schedule.every_seconds"),
    ],
)
def test_schedule_kind_requires_its_own_field(api, schedule, field):
    assert_invalid(create(api, schedule=schedule), field)


def test_schedule_with_unknown_kind_is_rejected(api):
    error = assert_invalid(create(api, schedule={"kind": "hourly", "every_seconds": 10}), "schedule")
    assert "every, after, cron" in error["message"]


def test_schedule_without_kind_is_rejected(api):
    assert_invalid(create(api, schedule={"every_seconds": 10}), "schedule")


def test_cron_with_unknown_time_zone_is_rejected(api):
    assert_invalid(
        create(api, schedule={"kind": "cron", "expr": "0 9 * * *", "tz": "Mars/Olympus"}),
        "schedule.tz",
        code="invalid_time_zone",
    )


def test_cron_that_never_fires_is_rejected(api):
    assert_invalid(
        create(api, schedule={"kind": "cron", "expr": "0 0 31 2 *"}), "schedule.expr", code="no_future_occurrence"
    )


def test_cron_that_does_not_parse_is_rejected(api):
    assert_invalid(create(api, schedule={"kind": "cron", "expr": "61 * * * *"}), "schedule.expr", code="invalid_cron")


# --- durations (spec §3: positive safe integers, in seconds) -----------------------------------

BAD_DURATIONS = [0, -1, 1.5, 1.0, 2**53, True, "10", None]


@pytest.mark.parametrize("value", BAD_DURATIONS, ids=repr)
def test_every_rejects_bad_durations(api, value):
    assert_invalid(create(api, schedule={"kind": "every", "every_seconds": value}), "schedule.every_seconds")


@pytest.mark.parametrize("value", BAD_DURATIONS, ids=repr)
def test_after_rejects_bad_durations(api, value):
    assert_invalid(create(api, schedule={"kind": "after", "after_seconds": value}), "schedule.after_seconds")


@pytest.mark.parametrize("value", [0, -1, 1.5, 2**53, True, "10"], ids=repr)
def test_time_in_seconds_rejects_bad_durations(api, value):
    assert_invalid(create(api, time_in_seconds=value), "time_in_seconds")


def test_time_in_seconds_null_counts_as_no_schedule(api):
    assert_invalid(create(api, time_in_seconds=None), "schedule")


@pytest.mark.parametrize("kind", ["every", "after"])
def test_duration_of_one_second_is_accepted(api, frozen, kind):
    response = create(api, schedule={"kind": kind, f"{kind}_seconds": 1})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["schedule"] == {"kind": kind, f"{kind}_seconds": 1}
    assert body["next_at"] == NOW_MS + 1000


@pytest.mark.parametrize("kind", ["every", "after"])
def test_max_safe_duration_is_accepted_and_next_at_is_omitted_past_year_9999(api, frozen, kind):
    response = create(api, schedule={"kind": kind, f"{kind}_seconds": MAX_SAFE})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["schedule"] == {"kind": kind, f"{kind}_seconds": MAX_SAFE}
    assert "next_at" not in body  # omitted, never null
    assert set(body) == LOOP_VIEW_KEYS
    assert Loop.objects.get(loop_id=body["loop_id"]).next_at is None


def test_max_safe_time_in_seconds_is_accepted(api):
    response = create(api, time_in_seconds=MAX_SAFE)
    assert response.status_code == 200, response.content
    assert response.json()["schedule"] == {"kind": "every", "every_seconds": MAX_SAFE}


# --- schedule vs the deprecated time_in_seconds (spec §2.1, §10) -------------------------------


def test_schedule_and_time_in_seconds_together_are_rejected(api):
    error = assert_invalid(create(api, schedule=EVERY_10, time_in_seconds=10), "time_in_seconds")
    assert "not both" in error["message"]
    assert not Loop.objects.exists()


def test_neither_schedule_nor_time_in_seconds_is_rejected(api):
    assert_invalid(create(api), "schedule")


def test_time_in_seconds_alone_creates_an_every_loop(api, frozen):
    response = create(api, time_in_seconds=600)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["schedule"] == {"kind": "every", "every_seconds": 600}
    assert body["next_at"] == NOW_MS + 600_000
    loop = Loop.objects.get(loop_id=body["loop_id"])
    assert (loop.kind, loop.every_seconds) == ("every", 600)


# --- prompts (spec §9) -------------------------------------------------------------------------


def test_prompt_is_trimmed_before_persistence(api):
    response = create(api, prompt="  \n\tCheck the deploy \u3000\n", schedule=EVERY_10)
    assert response.status_code == 200, response.content
    assert response.json()["prompt"] == "Check the deploy"
    assert Loop.objects.get().prompt == "Check the deploy"


@pytest.mark.parametrize("prompt", ["", "   \n\t "])
def test_empty_prompt_is_rejected(api, prompt):
    assert_invalid(create(api, prompt=prompt, schedule=EVERY_10), "prompt")


def test_missing_prompt_is_rejected(api):
    assert_invalid(api.tool("loop_create", {"schedule": EVERY_10}), "prompt")


# --- targets (spec §2.1, §9; contract §2) ------------------------------------------------------


def test_omitted_session_id_targets_and_records_the_caller(api):
    response = create(api, schedule=EVERY_10)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["session_id"], body["created_by_session_id"]) == ("ses_caller", "ses_caller")


def test_creator_is_the_caller_also_for_another_target(api, make_session):
    make_session("ses_other")
    body = create(api, schedule=EVERY_10, session_id="ses_other").json()
    assert (body["session_id"], body["created_by_session_id"]) == ("ses_other", "ses_caller")


def test_no_caller_header_and_no_session_id_is_no_current_session(api):
    response = api.as_session(None).tool("loop_create", {"prompt": "x", "schedule": EVERY_10})
    assert_invalid(response, "session_id", code="no_current_session")
    assert not Loop.objects.exists()


def test_no_caller_header_records_the_global_interface_as_creator(api, global_session, make_session):
    make_session("ses_other")
    response = api.as_session(None).tool(
        "loop_create", {"prompt": "x", "schedule": EVERY_10, "session_id": "ses_other"}
    )
    assert response.status_code == 200, response.content
    assert response.json()["created_by_session_id"] == "ses_global"


def test_no_caller_header_and_no_global_interface_records_no_creator(api, make_session):
    # contract §2: the header is required only where the spec says "the current session"; a named
    # target needs none. With no global interface either, the creator is recorded as none.
    make_session("ses_other")
    response = api.as_session(None).tool(
        "loop_create", {"prompt": "x", "schedule": EVERY_10, "session_id": "ses_other"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["session_id"], body["created_by_session_id"]) == ("ses_other", "")
    assert Loop.objects.get().created_by_session_id == ""


def test_no_caller_header_and_no_global_interface_still_refuses_self(api):
    response = api.as_session(None).tool("loop_create", {"prompt": "x", "schedule": EVERY_10, "session_id": "self"})
    assert_invalid(response, "session_id", code="target_unavailable", status=409)
    assert not Loop.objects.exists()


@pytest.mark.parametrize("header", ["self", "new", "global"])
def test_reserved_value_as_caller_header_is_rejected(api, global_session, make_session, header):
    # Else {} with caller "self" would silently target the global interface, and "new" fresh sessions.
    make_session("ses_other")
    for target in ({}, {"session_id": "ses_other"}):
        response = api.tool("loop_create", {"prompt": "x", "schedule": EVERY_10, **target}, session_id=header)
        assert_invalid(response, "X-DSH-Session-Id")
    assert not Loop.objects.exists()


def test_self_is_stored_as_self(api, global_session):
    response = create(api, schedule=EVERY_10, session_id="self")
    assert response.status_code == 200, response.content
    assert response.json()["session_id"] == "self"
    assert Loop.objects.get().session_id == "self"  # the alias, not "ses_global"


def test_self_without_global_interface_is_target_unavailable(api):
    assert_invalid(
        create(api, schedule=EVERY_10, session_id="self"), "session_id", code="target_unavailable", status=409
    )
    assert not Loop.objects.exists()


def test_global_is_not_a_create_target(api, global_session):
    error = assert_invalid(create(api, schedule=EVERY_10, session_id="global"), "session_id")
    assert "self" in error["message"]


def test_unknown_actual_session_is_rejected(api):
    assert_invalid(create(api, schedule=EVERY_10, session_id="ses_nobody"), "session_id", code="unknown_session")


def test_reserved_ids_are_case_sensitive(api, global_session):
    # "Self" is not the alias: it is an actual session ID, and no such session exists.
    assert_invalid(create(api, schedule=EVERY_10, session_id="Self"), "session_id", code="unknown_session")


def test_known_actual_session_is_stored(api, make_session):
    make_session("ses_cold", status="cold")
    response = create(api, schedule=EVERY_10, session_id="ses_cold")
    assert response.status_code == 200, response.content
    assert response.json()["session_id"] == "ses_cold"


def test_empty_session_id_is_rejected(api):
    assert_invalid(create(api, schedule=EVERY_10, session_id=""), "session_id")


# --- presets (spec §2.1, §9) -------------------------------------------------------------------


def test_new_without_preset_has_no_preset(api):
    body = create(api, schedule=EVERY_10_MINUTES, session_id="new").json()
    assert body["session_id"] == "new"
    assert "preset" not in body


def test_new_with_mountable_preset_is_accepted_and_echoed(api, make_preset):
    make_preset("researcher")
    response = create(api, schedule=EVERY_10_MINUTES, session_id="new", preset="researcher")
    assert response.status_code == 200, response.content
    assert (response.json()["session_id"], response.json()["preset"]) == ("new", "researcher")
    assert Loop.objects.get().preset == "researcher"


def test_new_with_missing_preset_is_unknown_preset(api):
    assert_invalid(
        create(api, schedule=EVERY_10_MINUTES, session_id="new", preset="ghost"), "preset", code="unknown_preset"
    )


def test_new_with_unmountable_preset_is_unknown_preset(api, make_preset):
    make_preset("locked", mountable=False)
    error = assert_invalid(
        create(api, schedule=EVERY_10_MINUTES, session_id="new", preset="locked"), "preset", code="unknown_preset"
    )
    assert "mounted" in error["message"]


@pytest.mark.parametrize("session_id", [None, "self", "ses_other"])
def test_preset_without_new_is_rejected(api, global_session, make_session, make_preset, session_id):
    make_session("ses_other")
    make_preset("researcher")
    body = {"schedule": EVERY_10, "preset": "researcher"}
    if session_id is not None:
        body["session_id"] = session_id
    assert_invalid(create(api, **body), "preset")
    assert not Loop.objects.exists()


# --- no model or effort fields (spec §2.1, §12) ------------------------------------------------


@pytest.mark.parametrize("name", ["model", "model_effort"])
def test_model_fields_are_rejected(api, name):
    error = assert_invalid(create(api, schedule=EVERY_10, **{name: "gpt-x"}), name)
    assert "inherited" in error["message"]


def test_unknown_top_level_property_is_rejected(api):
    assert_invalid(create(api, schedule=EVERY_10, mode="global"), "mode")


# --- LoopView shape (spec §4, contract §3) -----------------------------------------------------


def test_loop_view_has_exactly_the_spec_keys(api, frozen):
    response = create(api, schedule={"kind": "after", "after_seconds": 90})
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == LOOP_VIEW_KEYS | {"next_at"}
    assert body["loop_id"].startswith("loop_") and len(body["loop_id"]) > len("loop_")
    assert body["prompt"] == "Check the deploy"
    assert body["schedule"] == {"kind": "after", "after_seconds": 90}
    assert body["created_at"] == NOW_MS
    assert body["next_at"] == NOW_MS + 90_000
    assert type(body["created_at"]) is int and type(body["next_at"]) is int
    assert body["state"] == "scheduled"
    assert None not in body.values()


def test_loop_ids_are_unique(api):
    ids = {create(api, schedule=EVERY_10).json()["loop_id"] for _ in range(5)}
    assert len(ids) == 5


def test_cron_echo_is_canonical_without_tz_when_not_supplied(api, frozen):
    body = create(api, schedule={"kind": "cron", "expr": "  30   9 * *  1-5 "}).json()
    assert body["schedule"] == {"kind": "cron", "expr": "30 9 * * 1-5"}
    assert body["next_at"] == int(datetime(2025, 6, 3, 9, 30, tzinfo=UTC).timestamp() * 1000)  # host TZ is UTC


def test_cron_echo_keeps_tz_when_supplied(api, frozen):
    body = create(api, schedule={"kind": "cron", "expr": "@DAILY", "tz": "Asia/Shanghai"}).json()
    assert body["schedule"] == {"kind": "cron", "expr": "@daily", "tz": "Asia/Shanghai"}
    # Midnight in Shanghai (UTC+8) after 10:00 UTC on June 2 is 16:00 UTC that day.
    assert body["next_at"] == int(datetime(2025, 6, 2, 16, 0, tzinfo=UTC).timestamp() * 1000)


def test_preset_key_appears_only_for_a_new_loop_with_one(api, make_preset):
    make_preset("researcher")
    plain = create(api, schedule=EVERY_10).json()
    with_preset = create(api, schedule=EVERY_10_MINUTES, session_id="new", preset="researcher").json()
    assert set(plain) == LOOP_VIEW_KEYS | {"next_at"}
    assert set(with_preset) == LOOP_VIEW_KEYS | {"next_at", "preset"}
