"""GET /api/loops/{id}/upcoming (contract §4) across DST changes, for cron loops made through the API.

DST rules (timing/schedules.py): a wall time that does not exist (spring forward) is skipped, so the
loop does not fire that day; a wall time that happens twice (fall back) fires once, at its first
instant. Expected instants are written out in UTC by hand; transitions checked with zoneinfo:

  Europe/Berlin     2025-03-30 02:00 CET  -> 03:00 CEST (01:00Z)   2025-10-26 03:00 CEST -> 02:00 CET (01:00Z)
  America/New_York  2025-03-09 02:00 EST  -> 03:00 EDT  (07:00Z)   2025-11-02 02:00 EDT  -> 01:00 EST (06:00Z)
  Asia/Shanghai     1986-05-04 02:00 CST  -> 03:00 CDT  (18:00Z)   1986-09-14 02:00 CDT  -> 01:00 CST (17:00Z)
"""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from tests.conftest import error_of

# The acceptance set runs against both hosts.
pytestmark = pytest.mark.both_hosts


def ms(*args: int) -> int:
    """Epoch milliseconds of a UTC wall time."""
    return int(datetime(*args, tzinfo=UTC).timestamp()) * 1000


def create_cron_at(api, now: datetime, expr: str, tz: str | None = None) -> str:
    schedule = {"kind": "cron", "expr": expr}
    if tz is not None:
        schedule["tz"] = tz
    with time_machine.travel(now, tick=False):
        response = api.tool("loop_create", {"prompt": "tick", "schedule": schedule})
    assert response.status_code == 200, response.content
    return response.json()["loop_id"]


def upcoming(api, loop_id: str, count: int | str | None = None) -> list[int]:
    """Asked at the loop's creation time, so that it is not overdue (which would add a catch-up)."""
    from loops.models import Loop

    params = {} if count is None else {"count": count}
    with time_machine.travel(Loop.objects.get(loop_id=loop_id).created_at, tick=False):
        response = api.get(f"/api/loops/{loop_id}/upcoming", **params)
    assert response.status_code == 200, response.content
    return response.json()["fire_times"]


# --- Europe/Berlin -----------------------------------------------------------------------------


def test_berlin_spring_forward_skips_the_missing_wall_time(api):
    loop_id = create_cron_at(api, datetime(2025, 3, 28, 12, tzinfo=UTC), "30 2 * * *", "Europe/Berlin")
    assert upcoming(api, loop_id, 4) == [
        ms(2025, 3, 29, 1, 30),  # 02:30 CET
        # 2025-03-30 02:30 does not exist: no fire that day
        ms(2025, 3, 31, 0, 30),  # 02:30 CEST
        ms(2025, 4, 1, 0, 30),
        ms(2025, 4, 2, 0, 30),
    ]


def test_berlin_fall_back_fires_the_repeated_wall_time_once_at_its_first_instant(api):
    loop_id = create_cron_at(api, datetime(2025, 10, 24, 12, tzinfo=UTC), "30 2 * * *", "Europe/Berlin")
    assert upcoming(api, loop_id, 3) == [
        ms(2025, 10, 25, 0, 30),  # 02:30 CEST
        ms(2025, 10, 26, 0, 30),  # 02:30 CEST, the first of two; not again at 01:30Z (02:30 CET)
        ms(2025, 10, 27, 1, 30),  # 02:30 CET
    ]


def test_berlin_hourly_cron_across_both_transitions(api):
    spring = create_cron_at(api, datetime(2025, 3, 29, 23, 30, tzinfo=UTC), "0 * * * *", "Europe/Berlin")
    # 01:00 CET, then 03:00 CEST: the 02:00 that does not exist is skipped, one hour later is 03:00.
    assert upcoming(api, spring, 3) == [ms(2025, 3, 30, 0), ms(2025, 3, 30, 1), ms(2025, 3, 30, 2)]
    fall = create_cron_at(api, datetime(2025, 10, 25, 23, 30, tzinfo=UTC), "0 * * * *", "Europe/Berlin")
    # 02:00 CEST (00:00Z) fires; 02:00 CET (01:00Z) is the repeat and does not; then 03:00 CET.
    assert upcoming(api, fall, 3) == [ms(2025, 10, 26, 0), ms(2025, 10, 26, 2), ms(2025, 10, 26, 3)]


# --- America/New_York --------------------------------------------------------------------------


def test_new_york_spring_forward_skips_the_missing_wall_time(api):
    loop_id = create_cron_at(api, datetime(2025, 3, 7, 12, tzinfo=UTC), "30 2 * * *", "America/New_York")
    assert upcoming(api, loop_id, 3) == [
        ms(2025, 3, 8, 7, 30),  # 02:30 EST
        # 2025-03-09 02:30 does not exist
        ms(2025, 3, 10, 6, 30),  # 02:30 EDT
        ms(2025, 3, 11, 6, 30),
    ]


def test_new_york_fall_back_fires_the_repeated_wall_time_once_at_its_first_instant(api):
    loop_id = create_cron_at(api, datetime(2025, 10, 31, 12, tzinfo=UTC), "30 1 * * *", "America/New_York")
    assert upcoming(api, loop_id, 3) == [
        ms(2025, 11, 1, 5, 30),  # 01:30 EDT
        ms(2025, 11, 2, 5, 30),  # 01:30 EDT, the first of two; not again at 06:30Z (01:30 EST)
        ms(2025, 11, 3, 6, 30),  # 01:30 EST
    ]


def test_new_york_weekly_cron_keeps_its_wall_time_across_dst(api):
    loop_id = create_cron_at(api, datetime(2025, 3, 1, tzinfo=UTC), "0 9 * * 1", "America/New_York")
    # Mondays 09:00: 14:00Z under EST, 13:00Z under EDT.
    assert upcoming(api, loop_id, 3) == [ms(2025, 3, 3, 14), ms(2025, 3, 10, 13), ms(2025, 3, 17, 13)]


# --- Asia/Shanghai (DST 1986-1991) -------------------------------------------------------------


def test_shanghai_1986_spring_forward_skips_the_missing_wall_time(api):
    loop_id = create_cron_at(api, datetime(1986, 5, 2, 12, tzinfo=UTC), "30 2 * * *", "Asia/Shanghai")
    assert upcoming(api, loop_id, 3) == [
        ms(1986, 5, 2, 18, 30),  # 05-03 02:30 CST (+08)
        # 1986-05-04 02:30 does not exist
        ms(1986, 5, 4, 17, 30),  # 05-05 02:30 CDT (+09)
        ms(1986, 5, 5, 17, 30),
    ]


def test_shanghai_1986_fall_back_fires_the_repeated_wall_time_once_at_its_first_instant(api):
    loop_id = create_cron_at(api, datetime(1986, 9, 12, 12, tzinfo=UTC), "30 1 * * *", "Asia/Shanghai")
    assert upcoming(api, loop_id, 3) == [
        ms(1986, 9, 12, 16, 30),  # 09-13 01:30 CDT (+09)
        ms(1986, 9, 13, 16, 30),  # 09-14 01:30 CDT, the first of two; not again at 17:30Z (CST)
        ms(1986, 9, 14, 17, 30),  # 09-15 01:30 CST (+08)
    ]


def test_shanghai_without_dst_today_keeps_a_fixed_offset(api):
    loop_id = create_cron_at(api, datetime(2025, 3, 28, 12, tzinfo=UTC), "30 2 * * *", "Asia/Shanghai")
    assert upcoming(api, loop_id, 3) == [ms(2025, 3, 28, 18, 30), ms(2025, 3, 29, 18, 30), ms(2025, 3, 30, 18, 30)]


# --- host time zone, every, defaults -----------------------------------------------------------


def test_cron_without_tz_uses_the_host_time_zone(api, settings):
    settings.TIME_ZONE = "Europe/Berlin"
    with time_machine.travel(datetime(2025, 3, 28, 12, tzinfo=UTC), tick=False):
        response = api.tool("loop_create", {"prompt": "tick", "schedule": {"kind": "cron", "expr": "30 2 * * *"}})
    assert response.status_code == 200, response.content
    assert response.json()["schedule"] == {"kind": "cron", "expr": "30 2 * * *"}  # tz not invented
    assert response.json()["next_at"] == ms(2025, 3, 29, 1, 30)
    assert upcoming(api, response.json()["loop_id"], 2) == [ms(2025, 3, 29, 1, 30), ms(2025, 3, 31, 0, 30)]


def test_every_loop_upcoming_stays_on_its_grid_across_dst(api):
    created = datetime(2025, 3, 29, 23, 17, 42, 123456, tzinfo=UTC)
    with time_machine.travel(created, tick=False):
        response = api.tool("loop_create", {"prompt": "tick", "schedule": {"kind": "every", "every_seconds": 3600}})
    created_ms = response.json()["created_at"]
    assert created_ms == ms(2025, 3, 29, 23, 17, 42) + 123  # stored to the millisecond
    assert upcoming(api, response.json()["loop_id"], 4) == [created_ms + k * 3_600_000 for k in range(1, 5)]


def test_upcoming_defaults_to_five(api):
    loop_id = create_cron_at(api, datetime(2025, 6, 2, tzinfo=UTC), "0 12 * * *", "UTC")
    assert upcoming(api, loop_id) == [ms(2025, 6, day, 12) for day in range(2, 7)]


def test_upcoming_of_an_after_loop_is_its_one_occurrence(api):
    with time_machine.travel(datetime(2025, 6, 2, tzinfo=UTC), tick=False):
        response = api.tool("loop_create", {"prompt": "once", "schedule": {"kind": "after", "after_seconds": 90}})
    assert upcoming(api, response.json()["loop_id"], 10) == [ms(2025, 6, 2, 0, 1, 30)]


@pytest.mark.parametrize("count", ["0", "501", "x", "-1", "1.5"])
def test_upcoming_rejects_counts_outside_1_to_500(api, count):
    loop_id = create_cron_at(api, datetime(2025, 6, 2, tzinfo=UTC), "0 12 * * *", "UTC")
    response = api.get(f"/api/loops/{loop_id}/upcoming", count=count)
    assert response.status_code == 422, response.content
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "count")


def test_upcoming_accepts_500(api):
    loop_id = create_cron_at(api, datetime(2025, 6, 2, tzinfo=UTC), "*/5 * * * *", "Europe/Berlin")
    times = upcoming(api, loop_id, 500)
    assert len(times) == 500
    assert times[0] == ms(2025, 6, 2, 0, 5) and times[-1] == ms(2025, 6, 3, 17, 40)


def test_upcoming_of_an_unknown_loop_is_unknown_loop(api):
    response = api.get("/api/loops/loop_nope/upcoming", count="3")
    assert response.status_code == 404
    assert error_of(response)["code"] == "unknown_loop"


def test_upcoming_of_an_overdue_loop_starts_with_its_one_catch_up(api):
    created = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(created, tick=False):
        loop_id = api.tool("loop_create", {"prompt": "t", "schedule": {"kind": "every", "every_seconds": 60}}).json()[
            "loop_id"
        ]
    with time_machine.travel(created + timedelta(minutes=5, seconds=30), tick=False):
        times = api.get(f"/api/loops/{loop_id}/upcoming", count=3).json()["fire_times"]
    # Five occurrences are due; the clock delivers only the latest (12:05), then stays on grid.
    assert times == [ms(2026, 3, 1, 12, 5), ms(2026, 3, 1, 12, 6), ms(2026, 3, 1, 12, 7)]
