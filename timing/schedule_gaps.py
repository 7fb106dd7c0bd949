"""The shortest time between two consecutive occurrences of a schedule (contract §14's interval
floor for `new` loops): pure functions, no Django.

For cron it is decided from the expression's structure and the zone's offset changes, not from a
sample. A cron expression fires at the same wall times (`times`) on every day it fires on, and
which days fire repeats with the Gregorian calendar every 400 years (146,097 days, a whole number
of weeks). So the wall-clock gaps are few kinds: between two times of one day, and from the last
time of a day to the first of the next firing day, for each distance between firing days that
occurs in the cycle. Away from an offset change a gap is its wall-clock gap; across a change the
scheduler's rule (a missing wall time is skipped, a repeated one fires at its first instant) makes
it something else, so the pair of occurrences around each change is computed exactly. The zone's
changes are read for every year from now until 400 years after its listed table ends (past that its
rule repeats them with the calendar), so what is found is the minimum over every future pair.
"""

from __future__ import annotations

import functools
import zoneinfo
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

from croniter import croniter

from timing.schedule_text import normalize_cron
from timing.schedules import After, Cron, Every, Schedule, load_zone
from timing.zone_transitions import offset_changes, rule_decides_from

_DAY = 86_400
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_CYCLE_YEARS = 400  # the Gregorian calendar, and so a cron's firing days and a zone's rule, repeat
# Years read past the cycle, so that the pair around the cycle's last change is read whole.
_MARGIN_YEARS = 10
# The last year read: datetime ends with 9999, and a change's key looks two years past it.
_LAST_YEAR = 9990
_YEAR = 365 * _DAY
_LAST = 0  # the nth "L" of a weekday: days[_LAST - 1] is the month's last one


@dataclass
class _Days:
    """Which days a cron expression fires on, decided as croniter 7 decides it.

    One bound, on the side of refusing: when "#" or "W" sits on one side of an OR and that side has
    no day within croniter's 50-year search, croniter stops (the scheduler then fires no more);
    here the other side's days still count, which can only make a gap shorter, never longer."""

    months: frozenset[int]
    dom: frozenset[int] | None  # None: any day of the month
    last_dom: bool  # "L": the month's last day
    nearest: frozenset[int]  # "15W": the weekday nearest the 15th (croniter allows one)
    dow: frozenset[int] | None  # 0 = Sunday; None: any day of the week
    nth: dict[int, frozenset[int]]  # "1#2": weekday -> its nths in the month (_LAST: "L1", the last)
    # croniter: with both day fields restricted a day fires if either matches; "#" and "W" stay
    # with their own field's side (the day-of-month side keeps "#", the day-of-week side "W").
    either: bool
    _months_cache: dict[tuple[int, int, int], tuple[int, ...]] = field(default_factory=dict)
    _years_cache: dict[tuple[int, bool], tuple[int, ...]] = field(default_factory=dict)
    _distances_cache: dict[tuple[int, bool], frozenset[int]] = field(default_factory=dict)

    def _month(self, month: int, first: int, length: int) -> tuple[int, ...]:
        """The firing days of a month whose 1st is weekday `first` (0 = Sunday)."""
        if month not in self.months:
            return ()
        every = set(range(1, length + 1))
        if self.nearest:
            by_date = {_nearest_weekday(day, first, length) for day in self.nearest}
        elif self.dom is None:
            by_date = every
        else:
            by_date = {day for day in self.dom if day <= length} | ({length} if self.last_dom else set())
        if self.nth:
            by_weekday = set()
            for weekday, nths in self.nth.items():
                days = range((weekday - first) % 7 + 1, length + 1, 7)
                by_weekday |= {days[-1] if nth == _LAST else days[nth - 1] for nth in nths if nth <= len(days)}
        elif self.dow is None:
            by_weekday = every
        else:
            by_weekday = {day for day in every if (first + day - 1) % 7 in self.dow}
        if self.either:
            by_date_side = by_date & (by_weekday if self.nth else every)
            by_weekday_side = (by_date if self.nearest else every) & by_weekday
            return tuple(sorted(by_date_side | by_weekday_side))
        return tuple(sorted(by_date & by_weekday))

    def distances_within(self, year: int) -> frozenset[int]:
        """The distances between consecutive firing days inside the year."""
        key = (date(year, 1, 1).isoweekday() % 7, _is_leap(year))
        if key not in self._distances_cache:
            self._distances_cache[key] = frozenset(b - a for a, b in pairwise(self.of_year(year)))
        return self._distances_cache[key]

    def of_year(self, year: int) -> tuple[int, ...]:
        """The year's firing days as 0-based days of the year; they depend only on its kind."""
        first, leap = date(year, 1, 1).isoweekday() % 7, _is_leap(year)
        cached = self._years_cache.get((first, leap))
        if cached is None:
            days, start = [], 0
            for month, length in enumerate(_month_lengths(leap), start=1):
                key = (month, (first + start) % 7, length)
                if key not in self._months_cache:
                    self._months_cache[key] = self._month(*key)
                days += [start + day - 1 for day in self._months_cache[key]]
                start += length
            cached = self._years_cache[(first, leap)] = tuple(days)
        return cached


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _month_lengths(leap: bool) -> tuple[int, ...]:
    return (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _nearest_weekday(day: int, first: int, length: int) -> int:
    # croniter's rule: a Saturday moves to Friday (Monday if that leaves the month), a Sunday to
    # Monday (Friday if that leaves the month); a day past the month's end is its last day.
    day = min(day, length)
    weekday = (first + day - 1) % 7
    if weekday == 6:
        return day - 1 if day > 1 else day + 2
    if weekday == 0:
        return day + 1 if day < length else day - 2
    return day


def _values(field_values: Sequence[object]) -> frozenset[int] | None:
    """A croniter field's values; None for "*" (every value)."""
    return None if field_values == ["*"] else frozenset(value for value in field_values if isinstance(value, int))


@dataclass
class _Shape:
    times: tuple[int, ...]  # the wall times it fires at on a firing day, seconds after midnight
    days: _Days


@functools.lru_cache(maxsize=256)
def _shape(expr: str) -> _Shape:
    parsed = croniter(expr, datetime(2000, 1, 1))  # the scheduler's own parser (no start-time phase)
    minutes, hours, dom, months, dow = parsed.expanded[:5]
    every_minute, every_hour = _values(minutes), _values(hours)
    times = sorted(
        hour * 3600 + minute * 60
        for hour in (range(24) if every_hour is None else every_hour)
        for minute in (range(60) if every_minute is None else every_minute)
    )
    # croniter gives "L1" (the last Monday) as the nth "l"; its parser makes no "*" weekday here.
    nth = {
        day: frozenset(_LAST if n == "l" else int(n) for n in nths) for day, nths in parsed.nth_weekday_of_month.items()
    }
    month_values = _values(months)
    days = _Days(
        months=frozenset(range(1, 13)) if month_values is None else month_values,
        dom=_values(dom),
        last_dom="l" in dom,
        nearest=frozenset(parsed.nearest_weekday),
        dow=_values(dow),
        nth=nth,
        either=_values(dom) is not None and _values(dow) is not None,
    )
    return _Shape(tuple(times), days)


# --- firing days, as day ordinals --------------------------------------------------------------------


def _firing_from(days: _Days, ordinal: int, last_year: int) -> Iterator[int]:
    """The firing days on or after `ordinal`, ascending, through last_year."""
    year = date.fromordinal(ordinal).year
    while year <= last_year:
        start = date(year, 1, 1).toordinal()
        of_year = days.of_year(year)
        for offset in of_year[bisect_left(of_year, ordinal - start) :]:
            yield start + offset
        year += 1


def _firing_before(days: _Days, ordinal: int, first_year: int) -> Iterator[int]:
    """The firing days before `ordinal`, descending, back to first_year."""
    year = date.fromordinal(ordinal).year
    while year >= first_year:
        start = date(year, 1, 1).toordinal()
        of_year = days.of_year(year)
        for offset in reversed(of_year[: bisect_left(of_year, ordinal - start)]):
            yield start + offset
        year -= 1


def _day_distances(days: _Days, year: int) -> set[int]:
    """Every distance between two consecutive firing days: one 400-year cycle holds them all."""
    distances: set[int] = set()
    last: int | None = None
    for each in range(year, year + _CYCLE_YEARS + 1):
        of_year = days.of_year(each)
        if not of_year:
            continue
        start = date(each, 1, 1).toordinal()
        if last is not None:
            distances.add(start + of_year[0] - last)
        distances |= days.distances_within(each)
        last = start + of_year[-1]
    return distances


# --- wall times to instants ------------------------------------------------------------------------------


class _Clock:
    """The scheduler's wall-time rule (as schedules._first_instant: a missing wall time is skipped, a
    repeated one fires at its first instant) over the zone's changes, in epoch seconds."""

    def __init__(self, zone: zoneinfo.ZoneInfo, first_year: int, last_year: int):
        start = datetime(first_year, 1, 1, tzinfo=UTC)
        changes = offset_changes(zone, start, datetime(last_year + 1, 1, 1, tzinfo=UTC))
        first = changes[0].before if changes else start.astimezone(zone).utcoffset()
        assert first is not None
        self.first_year, self.last_year = first_year, last_year  # the years whose wall times it maps
        self.rule_from = int(rule_decides_from(zone).timestamp())
        self.changes = [int(change.at.timestamp()) for change in changes]
        self.offsets = [int(first.total_seconds())] + [int(change.after.total_seconds()) for change in changes]

    def local(self, instant: int) -> int:
        return instant + self.offsets[bisect_right(self.changes, instant)]

    def instant(self, wall: int) -> int | None:
        # The instants whose wall time is `wall` lie within a day of it: try the offsets of the
        # segments around it and keep the first that is really in force then.
        around = bisect_right(self.changes, wall)
        found = None
        for segment in range(max(0, around - 2), min(len(self.offsets), around + 3)):
            candidate = wall - self.offsets[segment]
            starts = segment == 0 or self.changes[segment - 1] <= candidate
            if starts and (segment == len(self.changes) or candidate < self.changes[segment]):
                found = candidate if found is None else min(found, candidate)
        return found


def _wall(ordinal: int, time: int) -> int:
    return (ordinal - _EPOCH_DAY) * _DAY + time


# --- the shortest gap ------------------------------------------------------------------------------------


_LONGEST_SECONDS = timedelta.max // timedelta(seconds=1)


def shortest_gap(schedule: Schedule, *, now: datetime, host_tz: str) -> timedelta | None:
    """The shortest time between two consecutive occurrences after `now`: an `every` schedule's
    period; for cron the exact minimum over every future pair (its gaps vary: "0 9,12 * * 1-5" has 3
    hours and 2 days 21 hours, "0,59 1,3,5 * * *" in New York 60 s once a year at the spring
    change); None for a one-shot."""
    if isinstance(schedule, Every):
        # A period past timedelta's range (~2.7 million years) is longer than any floor.
        return timedelta(seconds=min(schedule.every_seconds, _LONGEST_SECONDS))
    if isinstance(schedule, After):
        return None
    assert isinstance(schedule, Cron), schedule
    seconds = _cron_shortest_gap(normalize_cron(schedule.expr), host_tz if schedule.tz is None else schedule.tz, now)
    return None if seconds is None else timedelta(seconds=seconds)


@functools.lru_cache(maxsize=64)
def _clock(zone_name: str, year: int) -> _Clock:
    # A zone's changes depend on it and the year only: read once per process for every expression.
    # From the year before (a pair can start there), through a whole calendar cycle after the
    # zone's table ends (later years repeat it), and a margin for the pairs that end past it.
    zone = load_zone(zone_name)
    periodic_from = max(year, rule_decides_from(zone).year + 1)
    return _Clock(zone, min(year, _LAST_YEAR) - 1, min(periodic_from + _CYCLE_YEARS + _MARGIN_YEARS, _LAST_YEAR))


def _cron_shortest_gap(expr: str, zone_name: str, now: datetime) -> int | None:
    shape, clock = _shape(expr), _clock(zone_name, now.year)
    now_s = int(now.timestamp())
    best = _across_changes(shape, clock, now_s)
    today = clock.local(now_s) // _DAY + _EPOCH_DAY
    for value, within, distance in _wall_gaps(shape):
        if best is not None and value >= best:
            break
        if _occurs(shape, clock, now_s, today, value, within, distance):
            return value
    return best


def _across_changes(shape: _Shape, clock: _Clock, now_s: int) -> int | None:
    """The shortest gap between the two occurrences around an offset change, over every change."""
    best = None
    # Under the zone's rule, a change and the wall times within two years of it are the same in
    # every year whose own kind and its neighbours' (weekday of 1 January, leap or not) are the same.
    ruled_from = max(clock.rule_from, now_s) + 2 * _YEAR
    known: dict[tuple[int, ...], int] = {}
    for change, before, after in zip(clock.changes, clock.offsets, clock.offsets[1:], strict=False):
        reach = change + before  # the wall time at which the old offset ends
        key = None
        if ruled_from < change:
            year = _year_of(reach)
            key = (
                reach - _wall(date(year, 1, 1).toordinal(), 0),
                before,
                after,
                *map(_year_kind, range(year - 2, year + 3)),
            )
            if key in known:
                best = known[key] if best is None else min(best, known[key])
                continue
        gap = _gap_across(shape, clock, now_s, change, reach, reach + max(0, after - before))
        if key is not None and gap is not None and gap < 2 * _YEAR - 2 * _DAY:
            known[key] = gap
        if gap is not None and (best is None or gap < best):
            best = gap
    return best


def _gap_across(shape: _Shape, clock: _Clock, now_s: int, change: int, reach: int, resume: int) -> int | None:
    """The gap between the last occurrence before `change` and the first from it on: wall times
    before `reach` (where the old offset ends) and from `resume` (where the new one's begin)."""
    earlier = next((u for u in _instants_before(shape, clock, reach) if u < change), None)
    if earlier is None or earlier <= now_s:
        return None  # the change comes before the first occurrence after now
    later = next((u for u in _instants_from(shape, clock, resume) if u >= change), None)
    return None if later is None else later - earlier


def _year_of(wall: int) -> int:
    return date.fromordinal(wall // _DAY + _EPOCH_DAY).year


@functools.cache
def _year_kind(year: int) -> int:
    return date(year, 1, 1).isoweekday() % 7 * 2 + _is_leap(year)


def _instants_before(shape: _Shape, clock: _Clock, reach: int) -> Iterator[int]:
    """The instants of the wall times before `reach`, latest first (missing ones skipped)."""
    day, time = reach // _DAY + _EPOCH_DAY, reach % _DAY
    for ordinal in _firing_before(shape.days, day + 1, clock.first_year):
        for wall_time in reversed(shape.times[: bisect_left(shape.times, time)] if ordinal == day else shape.times):
            instant = clock.instant(_wall(ordinal, wall_time))
            if instant is not None:
                yield instant


def _instants_from(shape: _Shape, clock: _Clock, reach: int) -> Iterator[int]:
    """The instants of the wall times from `reach` on, earliest first (missing ones skipped)."""
    day, time = reach // _DAY + _EPOCH_DAY, reach % _DAY
    for ordinal in _firing_from(shape.days, day, clock.last_year):
        for wall_time in shape.times[bisect_left(shape.times, time) :] if ordinal == day else shape.times:
            instant = clock.instant(_wall(ordinal, wall_time))
            if instant is not None:
                yield instant


def _wall_gaps(shape: _Shape) -> list[tuple[int, tuple[int, ...], int | None]]:
    """Each wall-clock gap that occurs, shortest first: (seconds, the indexes i of times whose gap to
    times[i + 1] it is, the distance in days between two firing days whose gap it is)."""
    times = shape.times
    within: dict[int, list[int]] = {}
    for index, (earlier, later) in enumerate(pairwise(times)):
        within.setdefault(later - earlier, []).append(index)
    across = {distance * _DAY + times[0] - times[-1]: distance for distance in _day_distances(shape.days, 2000)}
    return [(value, tuple(within.get(value, ())), across.get(value)) for value in sorted(within.keys() | across.keys())]


def _occurs(
    shape: _Shape, clock: _Clock, now_s: int, today: int, value: int, within: tuple[int, ...], distance: int | None
) -> bool:
    """Whether two consecutive occurrences after now are `value` apart where the wall-clock gap is
    `value`: the first firing day whose pair is not changed by an offset change."""
    times, previous = shape.times, None
    for ordinal in _firing_from(shape.days, today, clock.last_year):
        pairs = [(_wall(ordinal, times[index]), _wall(ordinal, times[index + 1])) for index in within]
        if distance is not None and previous is not None and ordinal - previous == distance:
            pairs.append((_wall(previous, times[-1]), _wall(ordinal, times[0])))
        for earlier_wall, later_wall in pairs:
            earlier, later = clock.instant(earlier_wall), clock.instant(later_wall)
            if earlier is not None and later is not None and now_s < earlier and later - earlier == value:
                return True
        previous = ordinal
    return False
