"""Schedule maths (spec §3): validation, grids, DST rules and anti-burst catch-up.

Pure functions: no database, no Django. Expected instants are written out in UTC by hand.
"""

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from croniter import croniter

from core.limits import MAX_SAFE_INTEGER
from timing import schedules
from timing.schedule_text import ScheduleError, normalize_cron
from timing.schedules import (
    MISSED_COUNT_LIMIT,
    After,
    CatchUp,
    Cron,
    Every,
    catch_up,
    first_occurrence,
    load_zone,
    next_occurrence,
    upcoming,
    validate_cron,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
SHANGHAI = ZoneInfo("Asia/Shanghai")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def wall_exists(wall: datetime, zone: ZoneInfo) -> bool:
    return wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


def is_ambiguous(wall: datetime, zone: ZoneInfo) -> bool:
    return wall.replace(tzinfo=zone, fold=0).utcoffset() != wall.replace(tzinfo=zone, fold=1).utcoffset()


# --- cron and zone validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "   ",
        "* * * *",
        "foo",
        "61 * * * *",
        "0 24 * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "*/0 * * * *",
        "@reboot",
        "@every 5m",
        "@fortnightly",
        "H * * * *",
        "0 R * * *",
        "0 0 * * 1L",
    ],
)
def test_invalid_cron_expressions_are_rejected_on_the_expr_field(expr):
    with pytest.raises(ScheduleError) as info:
        normalize_cron(expr)
    assert (info.value.code, info.value.field) == ("invalid_cron", "schedule.expr")
    assert info.value.message and str(info.value) == info.value.message


@pytest.mark.parametrize(
    "expr, field, span",
    [
        ("5-1 * * * *", "minute", "5-1"),
        ("5-1/2 * * * *", "minute", "5-1"),
        ("0 23-1 * * *", "hour", "23-1"),
        ("0 0 31-1 * *", "day-of-month", "31-1"),
        ("0 0 * 12-1 *", "month", "12-1"),
        ("0 0 * DEC-JAN *", "month", "DEC-JAN"),
        ("0 0 * * 5-1", "day-of-week", "5-1"),
        ("0 0 * * FRI-MON", "day-of-week", "FRI-MON"),
        ("0 0 * * sat-sun", "day-of-week", "sat-sun"),
        ("0,10-5,30 * * * *", "minute", "10-5"),
    ],
)
def test_a_reversed_range_is_invalid_cron_as_in_standard_cron(expr, field, span):
    # croniter reads "5-1" as a wrap-around (5..59, 0..1); cron refuses it, and so do we.
    with pytest.raises(ScheduleError) as info:
        validate_cron(expr, "UTC", host_tz="UTC", now=utc(2026, 5, 1, 12))
    assert (info.value.code, info.value.field) == ("invalid_cron", "schedule.expr")
    assert f"{field} range {span!r} runs backwards" in info.value.message, info.value.message


@pytest.mark.parametrize(
    "expr",
    [
        "1-5 * * * *",
        "5-5 * * * *",
        "0 9 * MAR-MAY MON-FRI",
        "0 0 * * 0-7",
        "0 0 * * 6-7",
        "*/5 1-3/2 * * *",
        "0 0 1-L * *",
        "@daily",
    ],
)
def test_a_forward_range_is_valid_cron(expr):
    assert validate_cron(expr, "UTC", host_tz="UTC", now=utc(2026, 5, 1, 12)) == Cron(expr, "UTC")


def test_a_reversed_range_stored_before_the_rule_still_fires():
    # The rule is for new input only: the clock must not start failing on a loop it already runs.
    assert next_occurrence(
        Cron("5-1 * * * *"), created_at=utc(2026, 5, 1, 12), after=utc(2026, 5, 1, 12, 2), host_tz="UTC"
    ) == utc(2026, 5, 1, 12, 5)


def test_out_of_range_field_message_says_what_is_wrong():
    with pytest.raises(ScheduleError) as info:
        normalize_cron("61 * * * *")
    assert "61 * * * *" in info.value.message and "minute 0-59" in info.value.message


@pytest.mark.parametrize("expr, count", [("0 0 * * * *", 6), ("0 0 0 * * * 2030", 7)])
def test_seconds_and_years_fields_are_rejected_with_a_clear_message(expr, count):
    with pytest.raises(ScheduleError) as info:
        normalize_cron(expr)
    assert info.value.code == "invalid_cron"
    assert f"has {count} fields" in info.value.message and "seconds and years are not supported" in info.value.message


def test_hashed_and_random_values_are_rejected_because_workers_would_disagree():
    with pytest.raises(ScheduleError, match="H \\(hashed\\) and R \\(random\\)"):
        normalize_cron("R 9 * * *")


@pytest.mark.parametrize(
    "expr, normalized",
    [
        ("  */5\t*  * *\n*  ", "*/5 * * * *"),
        ("0 9 * MAR THU", "0 9 * MAR THU"),  # names containing H and R are not hashed/random values
        ("0 9 * * FRI", "0 9 * * FRI"),
        ("0 0 L * *", "0 0 L * *"),
        *[
            (macro, macro)
            for macro in ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
        ],
        (" @Daily ", "@daily"),
    ],
)
def test_valid_cron_expressions_and_macros_are_normalized(expr, normalized):
    assert normalize_cron(expr) == normalized


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../etc/passwd", "utc", "europe/berlin", "localtime"])
def test_unknown_or_non_iana_time_zones_are_rejected_on_the_tz_field(name):
    with pytest.raises(ScheduleError) as info:
        load_zone(name)
    assert (info.value.code, info.value.field) == ("invalid_time_zone", "schedule.tz")
    assert "IANA" in info.value.message


def test_iana_zone_names_load():
    assert load_zone("Asia/Shanghai") == SHANGHAI
    assert load_zone("UTC") == ZoneInfo("UTC")


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 2 *", "0 0 31 4,6,9,11 *"])
def test_cron_that_never_fires_is_rejected_as_no_future_occurrence(expr):
    with time_machine.travel(utc(2026, 5, 1, 12), tick=False):
        with pytest.raises(ScheduleError) as info:
            validate_cron(expr, "Europe/Berlin", host_tz="UTC", now=datetime.now(UTC))
    assert (info.value.code, info.value.field) == ("no_future_occurrence", "schedule.expr")
    assert expr in info.value.message


def test_croniter_is_valid_alone_accepts_an_impossible_date_so_we_compute():
    # FIELD-NOTES: is_valid() says True for "0 0 31 2 *"; validation must compute an occurrence.
    assert croniter.is_valid("0 0 31 2 *")


def test_validate_cron_returns_normalized_expr_and_tz_as_supplied():
    with time_machine.travel(utc(2026, 5, 1, 12), tick=False):
        now = datetime.now(UTC)
        assert validate_cron(" 0  9 * * * ", None, host_tz="Europe/Berlin", now=now) == Cron("0 9 * * *", None)
        assert validate_cron("@daily", "Asia/Shanghai", host_tz="UTC", now=now) == Cron("@daily", "Asia/Shanghai")


def test_validate_cron_checks_the_zone_before_computing():
    now = utc(2026, 5, 1)
    with pytest.raises(ScheduleError) as info:
        validate_cron("0 9 * * *", "Mars/Olympus", host_tz="UTC", now=now)
    assert info.value.code == "invalid_time_zone"
    with pytest.raises(ScheduleError) as info:
        validate_cron("0 9 * * *", "", host_tz="UTC", now=now)  # "" is supplied, not "use the host's"
    assert info.value.code == "invalid_time_zone"
    with pytest.raises(ScheduleError) as info:
        validate_cron("0 9 * * *", None, host_tz="Nowhere/Special", now=now)
    assert info.value.code == "invalid_time_zone"


def test_leap_day_cron_is_valid_and_first_fires_in_the_next_leap_year():
    with time_machine.travel(utc(2026, 6, 1), tick=False):
        now = datetime.now(UTC)
        cron = validate_cron("0 0 29 2 *", "Asia/Shanghai", host_tz="UTC", now=now)
        assert first_occurrence(cron, created_at=now, host_tz="UTC") == utc(2028, 2, 28, 16)


def test_validated_cron_first_fires_in_its_zone_under_a_frozen_clock():
    with time_machine.travel(datetime(2026, 7, 1, 8, 59, 30, tzinfo=SHANGHAI), tick=False):
        now = datetime.now(UTC)
        cron = validate_cron("0 9 * * *", "Asia/Shanghai", host_tz="Europe/Berlin", now=now)
        assert first_occurrence(cron, created_at=now, host_tz="Europe/Berlin") == utc(2026, 7, 1, 1)


# --- every: a fixed grid ---------------------------------------------------------------------


def test_every_first_occurrence_is_one_full_interval_after_creation():
    created = utc(2026, 1, 1, 0, 0, 0, 500_000)
    assert first_occurrence(Every(3600), created_at=created, host_tz="UTC") == utc(2026, 1, 1, 1, 0, 0, 500_000)


def test_every_next_occurrence_is_the_first_grid_point_strictly_after():
    created = utc(2026, 1, 1, 0, 0, 0, 500_000)
    at = lambda *a: next_occurrence(Every(3600), created_at=created, after=utc(*a), host_tz="UTC")  # noqa: E731
    assert at(2026, 1, 1, 5, 17) == utc(2026, 1, 1, 6, 0, 0, 500_000)
    assert at(2026, 1, 1, 6, 0, 0, 500_000) == utc(2026, 1, 1, 7, 0, 0, 500_000)  # strictly after
    assert at(2025, 12, 1) == utc(2026, 1, 1, 1, 0, 0, 500_000)  # before creation: the first point


def test_every_does_not_drift_over_a_million_periods():
    created = utc(2026, 1, 1, 0, 0, 0, 123_457)
    after = created + timedelta(seconds=7 * 1_000_000) - timedelta(microseconds=1)
    assert next_occurrence(Every(7), created_at=created, after=after, host_tz="UTC") == created + timedelta(
        seconds=7_000_000
    )


def test_every_counts_absolute_time_across_dst_even_for_zoned_input():
    # 01:30 CET on the spring-forward day; an hour later is 03:30 CEST, not the missing 02:30.
    created = datetime(2026, 3, 29, 1, 30, tzinfo=BERLIN)
    times = upcoming(Every(3600), created_at=created, start=created, count=3, host_tz="UTC")
    assert times == [utc(2026, 3, 29, 1, 30), utc(2026, 3, 29, 2, 30), utc(2026, 3, 29, 3, 30)]
    assert all(t.tzinfo is UTC for t in times)


def test_every_upcoming_includes_start_when_it_is_on_the_grid():
    created = utc(2026, 1, 1)
    times = upcoming(Every(60), created_at=created, start=utc(2026, 1, 1, 0, 2), count=3, host_tz="UTC")
    assert times == [utc(2026, 1, 1, 0, 2), utc(2026, 1, 1, 0, 3), utc(2026, 1, 1, 0, 4)]
    assert upcoming(Every(60), created_at=created, start=created, count=0, host_tz="UTC") == []


def test_max_safe_interval_is_never_and_not_an_exception():
    created = utc(2026, 1, 1)
    for schedule in (Every(MAX_SAFE_INTEGER), After(MAX_SAFE_INTEGER)):
        assert first_occurrence(schedule, created_at=created, host_tz="UTC") is None
        assert next_occurrence(schedule, created_at=created, after=created, host_tz="UTC") is None
        assert upcoming(schedule, created_at=created, start=created, count=5, host_tz="UTC") == []


def test_every_stops_at_the_end_of_representable_time():
    created = utc(9990, 1, 1)
    times = upcoming(Every(365 * 86400), created_at=created, start=created, count=50, host_tz="UTC")
    assert len(times) == 10 and times[-1] == utc(9999, 12, 30)
    assert next_occurrence(Every(365 * 86400), created_at=created, after=times[-1], host_tz="UTC") is None
    assert first_occurrence(Every(10**9), created_at=utc(2026, 1, 1), host_tz="UTC") == utc(2057, 9, 9, 1, 46, 40)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "60", MAX_SAFE_INTEGER + 1])
def test_durations_must_be_positive_safe_integers(bad):
    with pytest.raises(ValueError):
        Every(bad)
    with pytest.raises(ValueError):
        After(bad)


# --- after: one occurrence -------------------------------------------------------------------


def test_after_fires_exactly_once_after_creation():
    created = utc(2026, 1, 1)
    schedule = After(90)
    due = utc(2026, 1, 1, 0, 1, 30)
    assert first_occurrence(schedule, created_at=created, host_tz="UTC") == due
    assert next_occurrence(schedule, created_at=created, after=due - timedelta(microseconds=1), host_tz="UTC") == due
    assert next_occurrence(schedule, created_at=created, after=due, host_tz="UTC") is None
    assert upcoming(schedule, created_at=created, start=due, count=3, host_tz="UTC") == [due]
    assert upcoming(schedule, created_at=created, start=due + timedelta(seconds=1), count=3, host_tz="UTC") == []


# --- cron: wall time, DST gaps and overlaps (named zones) ------------------------------------


def fires(expr, tz, start, count, host_tz="UTC"):
    return upcoming(Cron(expr, tz), created_at=start, start=start, count=count, host_tz=host_tz)


def test_croniter_alone_shifts_gap_times_and_fires_twice_in_overlaps():
    # Why we iterate naive wall times ourselves (FIELD-NOTES, croniter 7.0.0).
    gap = croniter("30 2 * * *", datetime(2026, 3, 28, 12, tzinfo=BERLIN)).get_next(datetime)
    assert gap == datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN)
    it = croniter("30 * * * *", datetime(2026, 10, 25, 2, 0, tzinfo=BERLIN))
    assert [it.get_next(datetime).utcoffset() for _ in range(2)] == [timedelta(hours=2), timedelta(hours=1)]


def test_dst_dates_used_below_are_real_transitions():
    for wall, zone in [
        (datetime(2026, 3, 29, 2, 30), BERLIN),
        (datetime(2026, 3, 8, 2, 30), NEW_YORK),
        (datetime(1988, 4, 17, 2, 30), SHANGHAI),
    ]:
        assert not wall_exists(wall, zone)
        assert wall_exists(wall - timedelta(days=1), zone)
    for wall, zone in [
        (datetime(2026, 10, 25, 2, 30), BERLIN),
        (datetime(2026, 11, 1, 1, 30), NEW_YORK),
        (datetime(1988, 9, 11, 1, 30), SHANGHAI),
    ]:
        assert is_ambiguous(wall, zone) and not is_ambiguous(wall - timedelta(days=1), zone)


def test_berlin_spring_forward_skips_the_missing_wall_time():
    assert fires("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27), 3) == [
        utc(2026, 3, 27, 1, 30),  # 02:30 CET
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST; 2026-03-29 02:30 does not exist: no fire, not 03:00
    ]


def test_berlin_spring_forward_keeps_wall_times_outside_the_gap():
    assert fires("*/30 1-3 * * *", "Europe/Berlin", utc(2026, 3, 29), 4) == [
        utc(2026, 3, 29, 0, 0),  # 01:00 CET
        utc(2026, 3, 29, 0, 30),  # 01:30 CET; 02:00 and 02:30 do not exist
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST
        utc(2026, 3, 29, 1, 30),
    ]


def test_berlin_fall_back_fires_a_repeated_wall_time_once_at_its_first_instant():
    assert fires("30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23), 4) == [
        utc(2026, 10, 24, 23, 30),  # 01:30 CEST
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST (first copy)
        utc(2026, 10, 25, 2, 30),  # 03:30 CET; 02:30 CET (01:30Z) is the second copy: not fired
        utc(2026, 10, 25, 3, 30),
    ]
    assert fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 2) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


def test_after_inside_the_second_copy_of_a_repeated_hour_does_not_refire_it():
    after = utc(2026, 10, 25, 1, 10)  # 02:10 CET, second copy; 02:15-02:45 CEST are already past
    assert after.astimezone(BERLIN).fold == 1
    nxt = next_occurrence(
        Cron("*/15 * * * *", "Europe/Berlin"), created_at=utc(2026, 10, 1), after=after, host_tz="UTC"
    )
    assert nxt == utc(2026, 10, 25, 2, 0)  # 03:00 CET


def test_new_york_spring_forward_skips_and_fall_back_fires_once():
    assert fires("30 2 * * *", "America/New_York", utc(2026, 3, 6, 12), 3) == [
        utc(2026, 3, 7, 7, 30),
        utc(2026, 3, 9, 6, 30),
        utc(2026, 3, 10, 6, 30),
    ]
    assert fires("30 1 * * *", "America/New_York", utc(2026, 10, 31), 3) == [
        utc(2026, 10, 31, 5, 30),  # 01:30 EDT
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, the first copy only (01:30 EST = 06:30Z is not fired)
        utc(2026, 11, 2, 6, 30),  # 01:30 EST
    ]


def test_shanghai_1988_dst_gap_and_overlap():
    # China observed DST 1986-1991: 1988-04-17 02:00 -> 03:00, 1988-09-11 02:00 -> 01:00.
    assert fires("30 2 * * *", "Asia/Shanghai", utc(1988, 4, 15), 3) == [
        utc(1988, 4, 15, 18, 30),
        utc(1988, 4, 17, 17, 30),
        utc(1988, 4, 18, 17, 30),
    ]
    assert fires("30 1 * * *", "Asia/Shanghai", utc(1988, 9, 9), 3) == [
        utc(1988, 9, 9, 16, 30),
        utc(1988, 9, 10, 16, 30),
        utc(1988, 9, 11, 17, 30),
    ]


def test_cron_without_tz_uses_the_host_zone():
    cron = Cron("0 9 * * *")
    created = utc(2026, 7, 1)
    assert first_occurrence(cron, created_at=created, host_tz="Asia/Shanghai") == utc(2026, 7, 1, 1)
    assert first_occurrence(cron, created_at=created, host_tz="America/New_York") == utc(2026, 7, 1, 13)


def test_cron_next_occurrence_is_strictly_after_and_returned_in_utc():
    cron = Cron("0 9 * * *", "Europe/Berlin")
    after = datetime(2026, 7, 1, 9, 0, tzinfo=BERLIN)  # exactly a fire time, given in Berlin time
    nxt = next_occurrence(cron, created_at=after, after=after, host_tz="UTC")
    assert nxt == utc(2026, 7, 2, 7) and nxt.tzinfo is UTC


def test_cron_ends_quietly_at_the_end_of_representable_time():
    cron = Cron("* * * * *", "America/New_York")
    assert fires("* * * * *", "America/New_York", utc(9999, 12, 31, 23, 58), 5) == [
        utc(9999, 12, 31, 23, 58),
        utc(9999, 12, 31, 23, 59),
    ]
    # Shanghai's local wall time is already in year 10000 here.
    assert (
        next_occurrence(
            Cron("0 0 * * *", "Asia/Shanghai"), created_at=utc(2026, 1, 1), after=utc(9999, 12, 31, 20), host_tz="UTC"
        )
        is None
    )
    assert next_occurrence(cron, created_at=utc(2026, 1, 1), after=utc(9999, 12, 31, 23, 59), host_tz="UTC") is None


def test_stored_cron_that_never_fires_yields_none():
    assert next_occurrence(Cron("0 0 30 2 *"), created_at=utc(2026, 1, 1), after=utc(2026, 1, 1), host_tz="UTC") is None


# --- catch_up: spec §3 anti-burst ------------------------------------------------------------


def test_every_down_for_five_periods_delivers_the_latest_once():
    created = utc(2026, 1, 1)
    result = catch_up(
        Every(60), created_at=created, due_at=utc(2026, 1, 1, 0, 1), now=utc(2026, 1, 1, 0, 5, 30), host_tz="UTC"
    )
    assert result == CatchUp(deliver_at=utc(2026, 1, 1, 0, 5), missed=4, next_at=utc(2026, 1, 1, 0, 6))


def test_every_catch_up_with_only_one_due_misses_nothing():
    created = utc(2026, 1, 1)
    due = utc(2026, 1, 1, 0, 1)
    assert catch_up(Every(60), created_at=created, due_at=due, now=due, host_tz="UTC") == CatchUp(
        due, 0, utc(2026, 1, 1, 0, 2)
    )
    assert catch_up(
        Every(60), created_at=created, due_at=due, now=due + timedelta(seconds=59.999999), host_tz="UTC"
    ) == CatchUp(due, 0, utc(2026, 1, 1, 0, 2))


def test_every_catch_up_is_arithmetic_over_centuries():
    created = utc(1900, 1, 1)
    started = time.perf_counter()
    result = catch_up(
        Every(1),
        created_at=created,
        due_at=utc(1900, 1, 1, 0, 0, 1),
        now=utc(2100, 1, 1, 0, 0, 0, 500_000),
        host_tz="UTC",
    )
    assert time.perf_counter() - started < 1  # a loop over 6.3e9 seconds would take hours
    total = int((utc(2100, 1, 1) - created).total_seconds())
    assert result == CatchUp(utc(2100, 1, 1), total - 1, utc(2100, 1, 1, 0, 0, 1))


def test_every_catch_up_honours_an_off_grid_due_at():
    created = utc(2026, 1, 1)
    result = catch_up(
        Every(60), created_at=created, due_at=utc(2026, 1, 1, 0, 1, 30), now=utc(2026, 1, 1, 0, 1, 40), host_tz="UTC"
    )
    assert result == CatchUp(utc(2026, 1, 1, 0, 1, 30), 0, utc(2026, 1, 1, 0, 2))


def test_every_catch_up_next_at_is_none_past_representable_time():
    created = utc(9999, 1, 1)
    due = utc(9999, 7, 20)  # created + 200 days; the next point would be in year 10000
    assert catch_up(
        Every(200 * 86400), created_at=created, due_at=due, now=due + timedelta(days=1), host_tz="UTC"
    ) == CatchUp(due, 0, None)


def test_after_catch_up_delivers_once_and_has_no_next():
    created = utc(2026, 1, 1)
    due = utc(2026, 1, 1, 0, 1, 30)
    assert catch_up(After(90), created_at=created, due_at=due, now=utc(2027, 1, 1), host_tz="UTC") == CatchUp(
        due, 0, None
    )


def test_cron_catch_up_delivers_latest_hour_and_advances():
    result = catch_up(
        Cron("0 * * * *", "Asia/Shanghai"),
        created_at=utc(2026, 1, 1),
        due_at=utc(2026, 1, 1, 1),
        now=utc(2026, 1, 1, 6, 15),
        host_tz="UTC",
    )
    assert result == CatchUp(utc(2026, 1, 1, 6), 5, utc(2026, 1, 1, 7))


def test_cron_catch_up_across_the_berlin_gap_skips_the_missing_day():
    result = catch_up(
        Cron("30 2 * * *", "Europe/Berlin"),
        created_at=utc(2026, 3, 1),
        due_at=utc(2026, 3, 28, 1, 30),
        now=utc(2026, 3, 30, 12),
        host_tz="UTC",
    )
    assert result == CatchUp(utc(2026, 3, 30, 0, 30), 1, utc(2026, 3, 31, 0, 30))


def test_cron_catch_up_inside_the_repeated_hour_delivers_the_first_copy():
    # now = 02:30 CET (second copy); 02:45 CEST (00:45Z) already happened and is the latest due.
    result = catch_up(
        Cron("45 * * * *", "Europe/Berlin"),
        created_at=utc(2026, 10, 1),
        due_at=utc(2026, 10, 24, 22, 45),
        now=utc(2026, 10, 25, 1, 30),
        host_tz="UTC",
    )
    assert result == CatchUp(utc(2026, 10, 25, 0, 45), 2, utc(2026, 10, 25, 2, 45))


def test_cron_catch_up_beyond_the_count_cap_jumps_to_the_latest(monkeypatch):
    monkeypatch.setattr(schedules, "MISSED_COUNT_LIMIT", 3)
    result = catch_up(
        Cron("45 * * * *", "Europe/Berlin"),
        created_at=utc(2026, 10, 1),
        due_at=utc(2026, 10, 24),
        now=utc(2026, 10, 25, 1, 30),
        host_tz="UTC",
    )
    # The direct (get_prev) search must apply the same overlap rule as the forward iteration.
    assert result == CatchUp(utc(2026, 10, 25, 0, 45), 3, utc(2026, 10, 25, 2, 45))


def test_cron_catch_up_of_a_years_long_outage_costs_bounded_time():
    assert MISSED_COUNT_LIMIT == 100_000
    started = time.perf_counter()
    result = catch_up(
        Cron("* * * * *", "America/New_York"),
        created_at=utc(2020, 1, 1),
        due_at=utc(2020, 1, 1, 0, 1),
        now=utc(2030, 6, 1, 12, 0, 30),
        host_tz="UTC",
    )
    assert time.perf_counter() - started < 20
    assert result == CatchUp(utc(2030, 6, 1, 12), MISSED_COUNT_LIMIT, utc(2030, 6, 1, 12, 1))


def test_catch_up_refuses_when_not_yet_due():
    with pytest.raises(ValueError, match="due_at <= now"):
        catch_up(
            Every(60),
            created_at=utc(2026, 1, 1),
            due_at=utc(2026, 1, 1, 0, 1),
            now=utc(2026, 1, 1, 0, 0, 59),
            host_tz="UTC",
        )


# --- inputs ----------------------------------------------------------------------------------


def test_naive_datetimes_are_a_programming_error():
    naive, aware = datetime(2026, 1, 1), utc(2026, 1, 1)
    with pytest.raises(ValueError, match="aware"):
        first_occurrence(Every(60), created_at=naive, host_tz="UTC")
    with pytest.raises(ValueError, match="aware"):
        next_occurrence(Cron("* * * * *"), created_at=aware, after=naive, host_tz="UTC")
    with pytest.raises(ValueError, match="aware"):
        upcoming(After(5), created_at=aware, start=naive, count=1, host_tz="UTC")
    with pytest.raises(ValueError, match="aware"):
        catch_up(Every(60), created_at=aware, due_at=aware, now=naive, host_tz="UTC")
    with pytest.raises(ValueError, match="aware"):
        validate_cron("* * * * *", None, host_tz="UTC", now=naive)


def test_upcoming_rejects_a_negative_count():
    with pytest.raises(ValueError):
        upcoming(Every(60), created_at=utc(2026, 1, 1), start=utc(2026, 1, 1), count=-1, host_tz="UTC")


def test_schedule_kinds_are_class_constants():
    assert (Every.kind, After.kind, Cron.kind) == ("every", "after", "cron")
    assert Every(5).kind == "every" and [f.name for f in dataclasses.fields(Every)] == ["every_seconds"]
