"""contract §14 interval_too_short: an every/cron loop targeting `new` starts a fresh agent at each
occurrence, so it fires at most every DSHLOOP_MIN_NEW_INTERVAL_SECONDS (300 by default); a cron
schedule's shortest gap counts, wherever in its future it comes (tests/loops/test_schedule_gaps.py
holds its properties). Loops into existing sessions, and one-shots, keep no floor. MCP answers the
same error (tests/tools/mcp/test_mcp_tools.py ERROR_CASES)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from loops.models import Loop
from tests.conftest import ApiClient, error_of
from timing import schedule_gaps, schedules

MESSAGE = "fires at most once every 300 s (DSHLOOP_MIN_NEW_INTERVAL_SECONDS)"


def every(seconds: int) -> dict:
    return {"kind": "every", "every_seconds": seconds}


def cron(expr: str, tz: str | None = None) -> dict:
    return {"kind": "cron", "expr": expr, **({"tz": tz} if tz else {})}


def create(api: ApiClient, schedule: dict, session_id: str = "new", **body):
    return api.tool(
        "loop_create",
        {"prompt": "Review the open pull requests", "schedule": schedule, "session_id": session_id, **body},
    )


def assert_too_short(response, apart: str) -> None:
    assert response.status_code == 422, response.content
    error = error_of(response)
    assert (error["code"], error["field"]) == ("interval_too_short", "schedule"), error
    assert MESSAGE in error["message"] and f"fires {apart} apart" in error["message"], error["message"]


# --- the shortest gap of a schedule ----------------------------------------------------------------

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "gap"),
    [
        (schedules.Every(600), timedelta(minutes=10)),
        (schedules.Cron("*/5 * * * *"), timedelta(minutes=5)),
        # Its gaps vary: 3 hours on a weekday, 2 days 21 hours over the weekend.
        (schedules.Cron("0 9,12 * * 1-5"), timedelta(hours=3)),
        (schedules.Cron("0,3 9 * * *"), timedelta(minutes=3)),
        # Minutes apart on one day a year (every 29 February), a year apart otherwise.
        (schedules.Cron("*/2 9 29 2 *"), timedelta(minutes=2)),
        # Spring forward in Berlin (2:00 -> 3:00): 1:30 and 3:30 are one hour apart that night only.
        (schedules.Cron("30 1,3 * * *", "Europe/Berlin"), timedelta(hours=1)),
        (schedules.After(60), None),
        (schedules.Cron("0 0 1 1 *"), timedelta(days=365)),
    ],
)
def test_the_shortest_gap_is_the_period_or_the_cron_schedules_shortest(schedule, gap):
    assert schedule_gaps.shortest_gap(schedule, now=NOW, host_tz="UTC") == gap


# --- loop_create ------------------------------------------------------------------------------------


def test_an_every_new_loop_below_the_floor_is_refused_and_nothing_is_made(api):
    assert_too_short(create(api, every(60)), "60 s")
    assert_too_short(create(api, every(299)), "299 s")
    assert not Loop.objects.exists()


def test_an_every_new_loop_at_the_floor_is_made(api):
    assert create(api, every(300)).status_code == 200


def test_a_cron_new_loop_counts_its_shortest_gap(api):
    assert_too_short(create(api, cron("*/2 * * * *")), "120 s")
    assert_too_short(create(api, cron("0,3 9 * * *", "Asia/Shanghai")), "180 s")
    assert create(api, cron("*/5 * * * *")).status_code == 200
    assert create(api, cron("0 9,12 * * 1-5", "Asia/Shanghai")).status_code == 200


# Both fire at least 10 minutes apart for more than 1,000 occurrences from the day they are made.
# Twice a night (1:00, 1:59, 3:00, 3:59, ...): New York's spring change (2:00 -> 3:00, on 8 March
# 2027) puts 1:59 and 3:00 one minute apart, at occurrence 2,402.
SPRING_ONCE_A_YEAR = (
    "0,59 1,3,5,7,9,11,13,15,17,19,21,23 * * *",
    "America/New_York",
    datetime(2026, 12, 3, tzinfo=UTC),
)
# Every odd day of February and March, at 23:57 and just after midnight: 29 February and 1 March
# are the only consecutive days it fires on, so 23:57 -> 0:00 (3 minutes) comes in leap years only.
LEAP_FEBRUARY = ("0,10,20,30,40,57 0-20/2,23 */2 2,3 *", "Europe/Berlin", datetime(2028, 3, 2, tzinfo=UTC))


@pytest.mark.parametrize(
    ("expr", "tz", "now", "apart"),
    [(*SPRING_ONCE_A_YEAR, "60 s"), (*LEAP_FEBRUARY, "180 s")],
    ids=["dst", "leap-february"],
)
def test_a_cron_new_loop_whose_short_gap_comes_only_months_or_years_later_is_refused(api, expr, tz, now, apart):
    first = schedules.upcoming(schedules.Cron(expr, tz), created_at=now, start=now, count=1_000, host_tz="UTC")
    assert min(later - earlier for earlier, later in zip(first, first[1:], strict=False)) >= timedelta(minutes=10)
    with time_machine.travel(now, tick=False):
        assert_too_short(create(api, cron(expr, tz)), apart)
    assert not Loop.objects.exists()


def test_the_v1_interval_alias_is_held_to_the_floor_too(api):
    response = api.tool("loop_create", {"prompt": "p", "time_in_seconds": 60, "session_id": "new"})
    assert_too_short(response, "60 s")


def test_one_shots_and_loops_into_existing_sessions_keep_no_floor(api, make_session):
    make_session("ses_target", status="idle")
    assert create(api, {"kind": "after", "after_seconds": 1}).status_code == 200
    assert create(api, every(1), session_id="ses_target").status_code == 200
    assert create(api, cron("* * * * *"), session_id="ses_target").status_code == 200


def test_the_floor_follows_its_setting_and_zero_turns_it_off(api, settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 3600
    response = create(api, every(600))
    assert (
        response.status_code == 422
        and "once every 3600 s (DSHLOOP_MIN_NEW_INTERVAL_SECONDS); this schedule fires 600 s apart"
        in (error_of(response)["message"])
    )
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0
    assert create(api, every(1)).status_code == 200


# --- PATCH /api/loops/{id} ----------------------------------------------------------------------------


def patch(client: ApiClient, loop_id: str, body: dict):
    return client.client.patch(
        f"/api/loops/{loop_id}", data=json.dumps(body), content_type="application/json", headers=client.headers()
    )


def test_an_edit_to_a_shorter_schedule_or_to_new_is_refused_and_changes_nothing(api, manage_api, make_session):
    make_session("ses_target", status="idle")
    fresh = create(api, every(600)).json()["loop_id"]
    into_session = create(api, every(60), session_id="ses_target").json()["loop_id"]

    assert_too_short(patch(manage_api, fresh, {"schedule": every(120)}), "120 s")
    assert_too_short(patch(manage_api, fresh, {"schedule": cron("*/1 * * * *")}), "60 s")
    assert_too_short(patch(manage_api, into_session, {"session_id": "new"}), "60 s")
    assert_too_short(patch(manage_api, fresh, {"schedule": cron(*SPRING_ONCE_A_YEAR[:2])}), "60 s")
    assert list(Loop.objects.order_by("revision").values_list("revision", flat=True)) == [1, 1]
    assert Loop.objects.get(loop_id=fresh).schedule == schedules.Every(600)

    assert patch(manage_api, fresh, {"schedule": every(300)}).status_code == 200
    assert patch(manage_api, into_session, {"session_id": "new", "schedule": every(900)}).status_code == 200


def test_an_edit_that_leaves_schedule_and_target_alone_is_not_held_to_a_floor_raised_later(api, manage_api, settings):
    loop_id = create(api, every(600)).json()["loop_id"]
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 3600
    response = patch(manage_api, loop_id, {"prompt": "Review the merged pull requests", "name": "Reviews"})
    assert response.status_code == 200, response.content
    assert response.json()["revision"] == 2
