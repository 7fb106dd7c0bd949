"""The shortest gap of a schedule (timing/schedule_gaps.py), held against what the scheduler really
fires: the days it fires on match croniter's, its wall-to-instant rule matches the scheduler's, the
structural minimum is never above a gap of a long run of real occurrences, and equals the run's
shortest gap wherever the run is known to hold every kind of gap.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import CroniterBadDateError, croniter
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from timing import schedule_gaps, schedule_text, schedules
from timing.schedule_text import ScheduleError
from timing.schedules import Cron

MINUTES = ["*", "0", "30", "0,30", "*/7", "0,59", "2,58", "15,45", "0-10/5", "1-59/29", "57", "0,10,20,30,40,57"]
HOURS = ["*", "0", "2", "1,3", "0-20/2,23", "0,23", "*/5", "9-17", "1,2,3", "12", "1,3,5,7,9,11,13,15,17,19,21,23"]
DAYS_OF_MONTH = [
    "*",
    "1",
    "15",
    "31",
    "L",
    "1,15",
    "*/2",
    "10-20",
    "15W",
    "1W",
    "31W",
    "29",
    "28,29",
    "L,1",
    "5-L",
    "?",
]
MONTHS = ["*", "2", "2,3", "*/3", "6-8", "3,11", "10", "dec", "feb-mar"]
DAYS_OF_WEEK = ["*", "1", "0", "7", "1-5", "sat,sun", "1#2", "5#5", "L5", "l0", "2#1,4#3", "*/2", "mon-fri#1", "?"]
# Zones with DST, 30-minute DST (Lord Howe), changes moved by Ramadan (Gaza, Casablanca), a rule at
# 24:00 (Santiago), none any more (Tehran), and none at all.
ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Gaza",
    "Africa/Casablanca",
    "America/Santiago",
    "Asia/Tehran",
    "UTC",
]
RUN = 1_200  # occurrences read of each expression: past the 1,000 the floor once sampled
modest = settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.too_slow])

nows = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC))


def valid(expr: str, tz: str, now: datetime) -> Cron:
    try:
        return schedules.validate_cron(expr, tz, host_tz="UTC", now=now)
    except ScheduleError:
        assume(False)
        raise


def real_gaps(cron: Cron, now: datetime, count: int) -> list[timedelta]:
    """The gaps between the scheduler's own next `count` occurrences."""
    instants = schedules.upcoming(cron, created_at=now, start=now, count=count, host_tz="UTC")
    return [later - earlier for earlier, later in pairwise(instants)]


@settings(deadline=None, max_examples=40)
@given(st.sampled_from(DAYS_OF_MONTH), st.sampled_from(MONTHS), st.sampled_from(DAYS_OF_WEEK))
def test_the_days_a_cron_fires_on_are_croniters(dom, month, dow):
    expr = f"0 0 {dom} {month} {dow}"
    try:
        walls = croniter(schedule_text.normalize_cron(expr), datetime(2026, 12, 31, 23, 59))
        fired = [walls.get_next(datetime).date()]
    except (ScheduleError, CroniterBadDateError):
        assume(False)  # refused when made: not valid, or never fires (an impossible "#" or "W" side)
    while fired[-1].year <= 2029:
        fired.append(walls.get_next(datetime).date())
    days = schedule_gaps._shape(schedule_text.normalize_cron(expr)).days
    modelled = [date(year, 1, 1) + timedelta(days=day) for year in (2027, 2028, 2029) for day in days.of_year(year)]
    assert modelled == fired[:-1]


@pytest.mark.parametrize(
    ("zone_name", "year"),
    [("America/New_York", 2027), ("Australia/Lord_Howe", 2031), ("Pacific/Apia", 2011), ("Europe/Berlin", 2400)],
)
def test_wall_times_map_to_instants_as_the_scheduler_maps_them(zone_name, year):
    # Every minute within three hours of each change of the year: gaps, overlaps, Samoa's lost day.
    zone, clock = ZoneInfo(zone_name), schedule_gaps._clock(zone_name, year)
    changes = [change for change in clock.changes if datetime.fromtimestamp(change, UTC).year == year]
    assert changes
    for change in changes:
        middle = datetime.fromtimestamp(change, UTC).astimezone(zone).replace(tzinfo=None, second=0)
        for minutes in range(-180, 181):
            wall = middle + timedelta(minutes=minutes)
            instant = schedules._first_instant(wall, zone)
            expected = None if instant is None else int(instant.timestamp())
            assert clock.instant(schedule_gaps._wall(wall.toordinal(), wall.hour * 3600 + wall.minute * 60)) == expected


@modest
@given(
    st.sampled_from(MINUTES),
    st.sampled_from(HOURS),
    st.sampled_from(DAYS_OF_MONTH),
    st.sampled_from(MONTHS),
    st.sampled_from(DAYS_OF_WEEK),
    st.sampled_from(ZONES),
    nows,
)
@example("0,59", "1,3,5,7,9,11,13,15,17,19,21,23", "*", "*", "*", "America/New_York", datetime(2027, 1, 2, tzinfo=UTC))
@example("0,59", "1,3,5,7,9,11,13,15,17,19,21,23", "*", "*", "*", "America/New_York", datetime(2027, 3, 1, tzinfo=UTC))
@example("0,10,20,30,40,57", "0-20/2,23", "*/2", "2,3", "*", "UTC", datetime(2028, 2, 10, tzinfo=UTC))
def test_the_shortest_gap_is_never_longer_than_a_real_one(minute, hour, dom, month, dow, tz, now):
    cron = valid(f"{minute} {hour} {dom} {month} {dow}", tz, now)
    gaps = real_gaps(cron, now, RUN)
    assume(gaps)
    assert schedule_gaps.shortest_gap(cron, now=now, host_tz="UTC") <= min(gaps)


# Daily or weekly patterns in zones whose changes come on the same weekday at the same wall time
# every year: a run of more than a year holds every kind of gap they have, changes included.
STEADY_ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago"]
WEEKLY = ["*", "1-5", "sat,sun", "0", "1,3,5", "6"]


@modest
@given(
    st.sampled_from(["0", "30", "0,30", "2,58", "15,45", "0,59"]),
    st.sampled_from(["0", "1,3", "0,23", "2", "1,2", "12,13", "23"]),
    st.sampled_from(WEEKLY),
    st.sampled_from(STEADY_ZONES),
    nows,
)
@example("0,59", "1,3", "*", "America/New_York", datetime(2026, 12, 3, tzinfo=UTC))
@example("2,58", "1,2", "*", "Australia/Lord_Howe", datetime(2026, 4, 20, tzinfo=UTC))
def test_the_shortest_gap_is_the_shortest_real_one_of_a_run_through_a_whole_year(minute, hour, dow, tz, now):
    cron = valid(f"{minute} {hour} * * {dow}", tz, now)
    per_day = len(minute.split(",")) * len(hour.split(","))
    per_week = 7 if dow == "*" else len(schedule_gaps._shape(cron.expr).days.of_year(2027)) * 7 // 365 + 1
    gaps = real_gaps(cron, now, per_day * per_week * 56)
    assert sum(gaps, timedelta()) > timedelta(days=370)
    assert schedule_gaps.shortest_gap(cron, now=now, host_tz="UTC") == min(gaps)


@pytest.mark.parametrize(
    ("expr", "tz", "gap"),
    [
        # 1:58 and 3:02 are 64 minutes apart on the wall, 34 when Lord Howe's clocks skip half an
        # hour at 2:00 on the first Sunday of October (a weekend day of a month it fires in).
        ("58,2 1,3 15 */3 sat,sun", "Australia/Lord_Howe", timedelta(minutes=34)),
        # Its only day a year is the one Berlin falls back (3:00 -> 2:00): 1:00 and 3:00 are two
        # hours apart on the wall and never in fact; the shortest real gap is three hours.
        ("0 1,3 * 10 L0", "Europe/Berlin", timedelta(hours=3)),
        # A missing 2:30 (New York springs forward at 2:00) is skipped, not moved: 24 hours stay.
        ("30 2 * * *", "America/New_York", timedelta(days=1)),
        ("0 9 * * *", "America/New_York", timedelta(hours=23)),
        # Weekdays only: the Friday -> Monday pair that holds a change is never the shortest.
        ("0 9 * * 1-5", "America/New_York", timedelta(days=1)),
        # Every leap year's 29 February, once 2100 (not leap) is past: 4 years, not 8.
        ("0 0 29 2 *", "UTC", timedelta(days=4 * 365 + 1)),
        ("0 0 15W * *", "UTC", timedelta(days=28)),
    ],
)
def test_the_shortest_gap_is_exact_where_a_change_alters_every_short_pair(expr, tz, gap):
    assert schedule_gaps.shortest_gap(Cron(expr, tz), now=datetime(2026, 12, 3, tzinfo=UTC), host_tz="UTC") == gap


def test_an_every_period_past_timedeltas_range_is_longer_than_any_floor():
    # A huge `time_in_seconds` is a valid input (the API fuzz found a 500 here).
    huge = schedules.Every(every_seconds=946_684_800_000_000)
    gap = schedule_gaps.shortest_gap(huge, now=datetime(2026, 1, 1, tzinfo=UTC), host_tz="UTC")
    assert gap is not None and gap > timedelta(days=365 * 1000)
