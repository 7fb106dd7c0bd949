"""Properties of the schedule maths (spec §3) over many zones, expressions and instants.

Instants are drawn both anywhere in 1980-2060 and within hours of real DST transitions, including
China's 1986-1991 DST, Lord Howe's 30-minute shift and Samoa's skipped day (2011-12-30).
"""

from datetime import UTC, datetime, timedelta
from functools import cache
from unittest import mock
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from timing import schedules
from timing.schedules import After, Cron, Every, catch_up, first_occurrence, next_occurrence, upcoming

ZONE_YEARS = {
    "Europe/Berlin": 2026,
    "America/New_York": 2026,
    "Asia/Shanghai": 1988,
    "Australia/Lord_Howe": 2026,
    "Pacific/Apia": 2011,
    "UTC": 2026,
}
EXPRS = [
    "* * * * *",
    "*/7 * * * *",
    "30 * * * *",
    "0,30 * * * *",
    "15,45 0-3 * * *",
    "30 2 * * *",
    "30 1 * * *",
    "0 0 * * *",
    "@hourly",
    "45 23 * * 6",
    "0 12 L * *",
    "0 0 29 2 *",
]
MINUTE = timedelta(minutes=1)
modest = settings(deadline=None, max_examples=120)


@cache
def transitions(zone_name: str) -> list[datetime]:
    """Instants (to 15 minutes) where the zone's UTC offset changes during its sample year."""
    zone, year = ZoneInfo(zone_name), ZONE_YEARS[zone_name]
    found, t = [], datetime(year, 1, 1, tzinfo=UTC)
    previous = t.astimezone(zone).utcoffset()
    while t.year == year:
        t += timedelta(minutes=15)
        offset = t.astimezone(zone).utcoffset()
        if offset != previous:
            found.append(t)
        previous = offset
    return found or [datetime(year, 6, 1, tzinfo=UTC)]


def test_sample_zones_really_have_transitions():
    assert all(len(transitions(name)) >= 2 for name in ZONE_YEARS if name != "UTC")


# Aware in any sample zone (not only UTC): results must not depend on the zone of the input.
anywhere = st.datetimes(
    min_value=datetime(1980, 1, 1),
    max_value=datetime(2060, 1, 1),
    timezones=st.sampled_from([UTC, *map(ZoneInfo, sorted(ZONE_YEARS))]),
)


@st.composite
def zoned_moment(draw):
    """(zone name, instant): an instant anywhere, or within ten hours of one of the zone's transitions."""
    name = draw(st.sampled_from(sorted(ZONE_YEARS)))
    if draw(st.booleans()):
        return name, draw(anywhere)
    base = draw(st.sampled_from(transitions(name)))
    minutes = draw(st.integers(-600, 600) | st.integers(-90, 90))  # often inside the gap or overlap
    moment = base + timedelta(minutes=minutes, microseconds=draw(st.integers(0, 60 * 10**6 - 1)))
    return name, moment.astimezone(ZoneInfo(name)) if draw(st.booleans()) else moment


durations = st.one_of(st.integers(1, 10**7), st.sampled_from([1, 60, 3600, 86400, 86400 * 365]))
non_cron = st.one_of(st.builds(Every, durations), st.builds(After, durations))


@modest
@given(schedule=non_cron, created=anywhere, after=anywhere)
def test_every_and_after_next_occurrence_is_strictly_in_the_future(schedule, created, after):
    nxt = next_occurrence(schedule, created_at=created, after=after, host_tz="UTC")
    if isinstance(schedule, After):
        # Test arithmetic in UTC: on a zoned datetime `+` is wall-clock arithmetic, and an aware
        # datetime in a gap or overlap never compares equal (==) to one in another zone (PEP 495).
        occurrence = created.astimezone(UTC) + timedelta(seconds=schedule.after_seconds)
        assert nxt == (occurrence if occurrence > after else None)
    else:
        assert nxt is not None and nxt > after and nxt > created
    assert nxt is None or nxt.tzinfo is UTC


@modest
@given(zoned=zoned_moment(), expr=st.sampled_from(EXPRS), in_host_zone=st.booleans())
def test_cron_next_occurrence_is_strictly_in_the_future(zoned, expr, in_host_zone):
    name, after = zoned
    cron = Cron(expr) if in_host_zone else Cron(expr, name)
    nxt = next_occurrence(cron, created_at=after, after=after, host_tz=name)
    assert nxt is not None and nxt > after and nxt.tzinfo is UTC
    assert croniter.match(expr, nxt.astimezone(ZoneInfo(name)).replace(tzinfo=None))


@modest
@given(seconds=durations, created=anywhere, after=anywhere)
def test_every_stays_on_its_grid(seconds, created, after):
    period = timedelta(seconds=seconds)
    nxt = next_occurrence(Every(seconds), created_at=created, after=after, host_tz="UTC")
    created = created.astimezone(UTC)
    assert (nxt - created) % period == timedelta(0)
    assert (nxt - created) // period >= 1
    assert nxt - period <= after or nxt - period == created  # the FIRST grid point after `after`


@st.composite
def schedule_and_host(draw):
    """Short enough periods that outages of up to a day miss several occurrences; cron twice as often."""
    kind = draw(st.sampled_from(["every", "after", "cron", "cron"]))
    if kind == "every":
        return Every(draw(st.sampled_from([60, 300, 3600]) | st.integers(30, 86400))), "UTC"
    if kind == "after":
        return After(draw(durations)), "UTC"
    name = draw(st.sampled_from(sorted(ZONE_YEARS)))
    return Cron(draw(st.sampled_from(EXPRS))), name  # tz from the host zone


@modest
@given(
    schedule_host=schedule_and_host(),
    zoned=zoned_moment(),
    outage_minutes=st.integers(0, 1440),
    outage_us=st.integers(0, 60 * 10**6 - 1),
    phase=st.integers(0, 86400),
)
def test_catch_up_delivers_exactly_one_occurrence_and_advances(schedule_host, zoned, outage_minutes, outage_us, phase):
    schedule, host_tz = schedule_host
    outage = outage_minutes * 60 * 10**6 + outage_us
    _, created = zoned
    due = next_occurrence(
        schedule, created_at=created, after=created.astimezone(UTC) + timedelta(seconds=phase), host_tz=host_tz
    ) or first_occurrence(schedule, created_at=created, host_tz=host_tz)
    now = due + timedelta(microseconds=outage)
    result = catch_up(schedule, created_at=created, due_at=due, now=now, host_tz=host_tz)

    assert due <= result.deliver_at <= now
    assert result.next_at is None or result.next_at > now
    assert result.next_at == next_occurrence(schedule, created_at=created, after=now, host_tz=host_tz)
    # deliver_at is the (missed+1)-th occurrence from due_at, and next_at the one right after it:
    # so exactly one is delivered, `missed` counts the others and none in (deliver_at, now] is lost.
    occurrences = upcoming(schedule, created_at=created, start=due, count=result.missed + 2, host_tz=host_tz)
    assert occurrences[0] == due and occurrences[result.missed] == result.deliver_at
    assert occurrences[result.missed + 1 :] == ([result.next_at] if result.next_at else [])


@modest
@given(zoned=zoned_moment(), expr=st.sampled_from(EXPRS))
def test_cron_never_returns_a_nonexistent_or_repeated_wall_time(zoned, expr):
    name, start = zoned
    zone = ZoneInfo(name)
    times = upcoming(Cron(expr, name), created_at=start, start=start, count=40, host_tz="UTC")
    walls = [t.astimezone(zone).replace(tzinfo=None) for t in times]
    assert times == sorted(set(times)) and times[0] >= start
    assert len(set(walls)) == len(walls)
    for t, wall in zip(times, walls, strict=True):
        assert wall.replace(tzinfo=zone).astimezone(UTC) == t  # exists, and t is its first instant
        assert croniter.match(expr, wall)


@cache
def matches_time_of_day(expr: str, hour: int, minute: int) -> bool:
    return croniter.match(expr, datetime(2000, 1, 1, hour, minute))


@settings(deadline=None, max_examples=100)
@given(zoned=zoned_moment(), expr=st.sampled_from(EXPRS[:6]))  # these depend on the time of day only
def test_cron_fires_at_every_first_instant_of_a_matching_wall_time(zoned, expr):
    # Independent oracle: walk UTC minute by minute; an instant fires iff its wall time matches and it
    # is that wall time's first instant (fold=0). Compare with the schedule over six hours.
    name, start = zoned
    zone = ZoneInfo(name)
    start = start.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
    end = start + timedelta(hours=6)
    expected = []
    for minute in range(6 * 60):
        t = start + minute * MINUTE
        local = t.astimezone(zone)
        if local.fold == 0 and matches_time_of_day(expr, local.hour, local.minute):
            expected.append(t)
    times = upcoming(Cron(expr, name), created_at=start, start=start, count=len(expected) + 1, host_tz="UTC")
    assert [t for t in times if t < end] == expected


@modest
@given(
    zoned=zoned_moment(),
    expr=st.sampled_from(EXPRS),
    lookback_minutes=st.integers(0, 3 * 1440),
    limit=st.integers(1, 5),
)
def test_count_cap_finds_the_same_latest_occurrence_directly(zoned, expr, lookback_minutes, limit):
    # `now` (not due_at) is drawn near transitions: the direct search starts from now's wall time.
    name, now = zoned
    cron = Cron(expr, name)
    created = now.astimezone(UTC) - timedelta(minutes=lookback_minutes)
    due = first_occurrence(cron, created_at=created, host_tz="UTC")
    assume(due <= now)
    full = catch_up(cron, created_at=created, due_at=due, now=now, host_tz="UTC")
    with mock.patch.object(schedules, "MISSED_COUNT_LIMIT", limit):
        capped = catch_up(cron, created_at=created, due_at=due, now=now, host_tz="UTC")
    assert capped.deliver_at == full.deliver_at and capped.next_at == full.next_at
    assert capped.missed == min(full.missed, limit)
