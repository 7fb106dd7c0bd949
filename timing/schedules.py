"""Schedule maths for loops (spec §3): pure functions, no Django.

Aware datetimes in (any zone), aware UTC datetimes out. Cron expressions are evaluated in the local
wall time of an IANA zone; croniter only ever sees naive wall-clock datetimes, and this module maps
each wall time to an instant with explicit DST rules (gap: skipped; overlap: first instant only).
"""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import ClassVar

from croniter import CroniterBadDateError, croniter

from core.limits import MAX_SAFE_INTEGER
from timing import schedule_text
from timing.schedule_text import ScheduleError, normalize_cron

# catch_up() counts missed cron occurrences one by one; beyond this many it stops counting and
# `missed` reports the cap (~3 s of croniter work), so a years-long outage costs bounded time.
MISSED_COUNT_LIMIT = 100_000
# Consecutive cron candidates we may discard (DST gaps, wall times already behind us) before giving
# up and reporting "no occurrence"; a real zone needs at most a day of minutes (1,440).
MAX_SKIPPED_CANDIDATES = 10_000

_MICROSECOND = timedelta(microseconds=1)


def _check_duration(name: str, value: object) -> None:
    # spec §3: "All duration values must be positive safe integers". The API validates user input;
    # this guard keeps the integer arithmetic below honest (no floats, no division by zero).
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SAFE_INTEGER:
        raise ValueError(f"{name} must be an integer in 1..{MAX_SAFE_INTEGER}, got {value!r}")


# A kind describes itself here, once, for every form and schema that offers it (timing.schedule_kinds):
# `label`, how a person picks it in a form; `summary`, what it means, as the tool schemas tell an agent.


@dataclass(frozen=True)
class Every:
    every_seconds: int
    kind: ClassVar[str] = "every"
    label: ClassVar[str] = "Every…"
    summary: ClassVar[str] = "Recurring interval; the first occurrence is one full interval after creation."
    one_shot: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _check_duration("every_seconds", self.every_seconds)


@dataclass(frozen=True)
class After:
    after_seconds: int
    kind: ClassVar[str] = "after"
    label: ClassVar[str] = "Once, after…"
    summary: ClassVar[str] = "One occurrence, after_seconds after creation."
    # One occurrence only: once delivered the loop is completed, once failed it waits for a retry.
    one_shot: ClassVar[bool] = True

    def __post_init__(self) -> None:
        _check_duration("after_seconds", self.after_seconds)


@dataclass(frozen=True)
class Cron:
    expr: str
    tz: str | None = None
    kind: ClassVar[str] = "cron"
    label: ClassVar[str] = "On a cron schedule"
    summary: ClassVar[str] = "Wall-clock schedule, 5-field cron, in tz (IANA) or the host time zone."
    one_shot: ClassVar[bool] = False


Schedule = Every | After | Cron
SCHEDULE_TYPES = (Every, After, Cron)


@dataclass(frozen=True)
class Delayed:
    """A schedule each of whose occurrences is delivered `delay` after its instant: the same grid
    moved by a constant, so it stays exactly as regular (DSHLOOP_CRON_JITTER_SECONDS; not a kind a
    user asks for, but how the scheduler runs one)."""

    schedule: Schedule
    delay: timedelta

    def __post_init__(self) -> None:
        if self.delay < timedelta(0):
            raise ValueError(f"delay must not be negative, got {self.delay}")

    @property
    def kind(self) -> str:
        return self.schedule.kind

    @property
    def one_shot(self) -> bool:
        return self.schedule.one_shot


# What the scheduler computes with: a schedule, or a schedule whose deliveries are delayed.
Timing = Schedule | Delayed


@dataclass(frozen=True)
class CatchUp:
    deliver_at: datetime  # the ONE occurrence to deliver now
    missed: int  # earlier due occurrences folded into it, not delivered (capped for cron)
    next_at: datetime | None  # next occurrence strictly after now; None: no more


@functools.cache
def _zone_names() -> frozenset[str]:
    # "localtime" and "posixrules" can appear in a TZPATH but are files, not IANA zone names.
    return frozenset(zoneinfo.available_timezones() - {"localtime", "posixrules"})


def load_zone(name: str) -> zoneinfo.ZoneInfo:
    # Membership in the known set (not just ZoneInfo(name)) rejects paths and case variants such as
    # "utc", which a case-insensitive file system would otherwise accept.
    if not isinstance(name, str) or name not in _zone_names():
        raise ScheduleError(
            "invalid_time_zone",
            f"Unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC' "
            "(names are case-sensitive).",
            "schedule.tz",
        )
    return zoneinfo.ZoneInfo(name)


def validate_cron(expr: str, tz: str | None, *, host_tz: str, now: datetime) -> Cron:
    # STYLE 3: valid only if a next occurrence can be computed (croniter.is_valid() accepts
    # "0 0 31 2 *"). spec §3: "A cron loop must have a calculable future occurrence."
    normalized = normalize_cron(expr)
    # Here, not in normalize_cron: the clock normalizes stored expressions too, and a loop stored
    # before this rule must go on firing rather than fail in the scheduler.
    schedule_text.refuse_reversed_ranges(normalized.split())
    zone_name = host_tz if tz is None else tz
    load_zone(zone_name)
    cron = Cron(normalized, tz)
    if next_occurrence(cron, created_at=now, after=now, host_tz=host_tz) is None:
        raise ScheduleError(
            "no_future_occurrence",
            f"Cron expression {normalized!r} never fires in {zone_name} within 50 years: "
            "check that its day-of-month exists in its month (February has no 30th or 31st).",
            "schedule.expr",
        )
    return cron


def _utc(name: str, value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {value!r}")
    # Arithmetic on aware datetimes sharing a ZoneInfo is wall-clock arithmetic; UTC avoids it.
    return value.astimezone(UTC)


def _shift(start: datetime, microseconds: int) -> datetime | None:
    # Durations run to 2**53-1 seconds, far past datetime.max: unrepresentable means "never".
    try:
        return start + timedelta(microseconds=microseconds)
    except OverflowError:
        return None


def _grid_index(created: datetime, t: datetime, period_us: int) -> int:
    """k of the last grid point created + k*period at or before t (may be <= 0)."""
    return ((t - created) // _MICROSECOND) // period_us


def _first_instant(wall: datetime, zone: zoneinfo.ZoneInfo) -> datetime | None:
    """The first instant of a naive local wall time, or None if the wall time does not exist."""
    try:
        instant = wall.replace(tzinfo=zone).astimezone(UTC)  # fold=0: the earlier of two instants
        round_trip = instant.astimezone(zone).replace(tzinfo=None)
    except OverflowError:  # the instant falls outside years 1..9999
        return None
    # DST gap: zoneinfo shifts a missing wall time, so the round trip comes back different: skip it.
    # DST overlap: fold=0 only, so a repeated wall time fires once, at its first instant.
    return instant if round_trip == wall else None


def _cron_scan(
    expr: str, zone: zoneinfo.ZoneInfo, start_wall: datetime, *, backwards: bool, keep: Callable[[datetime], bool]
) -> Iterator[datetime]:
    walls = croniter(expr, start_wall)
    skipped = 0
    while skipped < MAX_SKIPPED_CANDIDATES:
        try:
            wall = walls.get_prev(datetime) if backwards else walls.get_next(datetime)
        except (CroniterBadDateError, OverflowError, ValueError):
            # No match within croniter's 50-year search, or past year 9999 / before year 1.
            return
        instant = _first_instant(wall, zone)
        if instant is not None and keep(instant):
            skipped = 0
            yield instant
        else:
            skipped += 1


def _cron_zone(cron: Cron, host_tz: str) -> zoneinfo.ZoneInfo:
    return load_zone(host_tz if cron.tz is None else cron.tz)  # spec §3: tz, else the host's


def _occurrences_after(schedule: Timing, created: datetime, after: datetime, host_tz: str) -> Iterator[datetime]:
    """Occurrences strictly after `after`, in order (created and after are UTC)."""
    if isinstance(schedule, Delayed):
        for moment in _occurrences_after(schedule.schedule, created, after - schedule.delay, host_tz):
            delayed = _shift(moment, schedule.delay // _MICROSECOND)
            if delayed is None:  # past year 9999: never
                return
            yield delayed
    elif isinstance(schedule, Every):
        # A fixed grid created + k*period, k >= 1, computed from k: no accumulated drift.
        period_us = schedule.every_seconds * 1_000_000
        k = max(1, _grid_index(created, after, period_us) + 1)
        while (t := _shift(created, k * period_us)) is not None:
            yield t
            k += 1
    elif isinstance(schedule, After):
        t = _shift(created, schedule.after_seconds * 1_000_000)
        if t is not None and t > after:
            yield t
    elif isinstance(schedule, Cron):
        expr, zone = normalize_cron(schedule.expr), _cron_zone(schedule, host_tz)
        try:
            # Whole minutes: croniter works in float seconds, which near year 9999 round 59.999999 s up.
            start_wall = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
        except OverflowError:  # local wall time of `after` is past year 9999: nothing representable
            return
        # Wall-time iteration from inside the second copy of a repeated hour re-yields wall times
        # whose first instant is already behind us: keep only instants strictly after `after`.
        yield from _cron_scan(expr, zone, start_wall, backwards=False, keep=lambda t: t > after)
    else:
        raise TypeError(f"not a schedule: {schedule!r}")


def first_occurrence(schedule: Timing, *, created_at: datetime, host_tz: str) -> datetime | None:
    # spec §3: the first occurrence is relative to creation and never at creation itself.
    return next_occurrence(schedule, created_at=created_at, after=created_at, host_tz=host_tz)


def next_occurrence(schedule: Timing, *, created_at: datetime, after: datetime, host_tz: str) -> datetime | None:
    created, after = _utc("created_at", created_at), _utc("after", after)
    return next(_occurrences_after(schedule, created, after, host_tz), None)


def upcoming(schedule: Timing, *, created_at: datetime, start: datetime, count: int, host_tz: str) -> list[datetime]:
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    created, start = _utc("created_at", created_at), _utc("start", start)
    # Occurrences are whole microseconds, so "> start - 1µs" is ">= start".
    after = start - _MICROSECOND
    return list(islice(_occurrences_after(schedule, created, after, host_tz), count))


def _offset(moment: datetime) -> timedelta:
    """The UTC offset of an aware moment (utcoffset() is None only for a naive one)."""
    offset = moment.utcoffset()
    assert offset is not None, moment
    return offset


def _cron_latest(cron: Cron, now: datetime, host_tz: str) -> datetime | None:
    """The latest occurrence at or before `now`, found directly (croniter get_prev)."""
    zone = _cron_zone(cron, host_tz)
    try:
        local = now.astimezone(zone)
        # get_prev is exclusive and cron wall times are whole minutes: start at the next minute.
        start_wall = local.replace(tzinfo=None, second=0, microsecond=0) + timedelta(minutes=1)
        if local.fold:
            # now is in the second copy of a repeated hour: later wall times of that hour already
            # fired (first copy), so search back from the overlap's end and drop instants after now.
            start_wall += _offset(local.replace(fold=0)) - _offset(local)
    except OverflowError:  # local wall time past year 9999
        return None
    scan = _cron_scan(normalize_cron(cron.expr), zone, start_wall, backwards=True, keep=lambda t: t <= now)
    return next(scan, None)


def catch_up(schedule: Timing, *, created_at: datetime, due_at: datetime, now: datetime, host_tz: str) -> CatchUp:
    """spec §3: anti-burst. After an outage deliver at most one occurrence (the latest that is due)
    and advance to the next future occurrence; never replay every missed interval.

    The stored due_at counts as due even if it is off the schedule (e.g. a tzdata update moved a
    cron instant): deliver_at is the latest of due_at and the occurrences in (due_at, now];
    missed counts the others. For cron, beyond MISSED_COUNT_LIMIT `missed` reports the cap.
    """
    created, due, now = _utc("created_at", created_at), _utc("due_at", due_at), _utc("now", now)
    if due > now:
        raise ValueError(f"catch_up() needs due_at <= now, got due_at={due} > now={now}")
    if isinstance(schedule, Delayed):
        return _delayed_catch_up(schedule, created, due, now, host_tz)
    if isinstance(schedule, Every):
        # O(1): grid indices bracket the outage, however long it was.
        period_us = schedule.every_seconds * 1_000_000
        k_first = max(1, _grid_index(created, due, period_us) + 1)  # first grid point after due_at
        k_last = _grid_index(created, now, period_us)  # last grid point at or before now
        missed = max(0, k_last - k_first + 1)
        deliver_at = created + timedelta(microseconds=k_last * period_us) if missed else due
        next_at = next(_occurrences_after(schedule, created, now, host_tz), None)
        return CatchUp(deliver_at, missed, next_at)

    deliver_at, missed, next_at = due, 0, None
    for t in _occurrences_after(schedule, created, due, host_tz):
        if t > now:
            next_at = t
            break
        if missed == MISSED_COUNT_LIMIT and isinstance(schedule, Cron):  # stop counting, jump to the end
            deliver_at = _cron_latest(schedule, now, host_tz) or deliver_at
            next_at = next(_occurrences_after(schedule, created, now, host_tz), None)
            break
        deliver_at, missed = t, missed + 1
    return CatchUp(deliver_at, missed, next_at)


def next_due(schedule: Timing, *, created_at: datetime, now: datetime, host_tz: str) -> datetime | None:
    """A new loop's next_at: its first occurrence; or, for a grid that started before now (an
    imported v1 loop keeps its created_at), the latest occurrence already due, delivered once at
    once (spec §3 anti-burst), never a replay of every interval since created_at."""
    first = first_occurrence(schedule, created_at=created_at, host_tz=host_tz)
    if first is None or first > now:
        return first
    return catch_up(schedule, created_at=created_at, due_at=first, now=now, host_tz=host_tz).deliver_at


def _delayed_catch_up(timing: Delayed, created: datetime, due: datetime, now: datetime, host_tz: str) -> CatchUp:
    """catch_up of a delayed schedule: the schedule's own, an instant earlier by the delay.

    A deadline stored under a smaller delay (the setting was raised) lies before the delayed
    instant of the occurrence it stands for, and the plain shift would deliver that occurrence
    again at its new instant. So when the next occurrence found is one at or before the deadline,
    and the deadline is not on the delayed grid, it counts as standing for the latest occurrence at
    or before it, and the next delivery follows that one (one delivery per occurrence, whatever the
    setting did). On the grid (a delay longer than the schedule's spacing) nothing changes."""
    base, delay = timing.schedule, timing.delay
    inner = catch_up(base, created_at=created, due_at=due - delay, now=now - delay, host_tz=host_tz)
    next_at = inner.next_at
    if (
        next_at is not None
        and next_at <= due
        and next_occurrence(base, created_at=created, after=due - delay - _MICROSECOND, host_tz=host_tz) != due - delay
    ):
        stood_for = _latest_at_or_before(base, created, due, host_tz)
        if stood_for is not None:
            next_at = next(_occurrences_after(base, created, max(stood_for, now - delay), host_tz), None)
    deliver_at = inner.deliver_at + delay
    return CatchUp(deliver_at, inner.missed, None if next_at is None else next_at + delay)


def _latest_at_or_before(schedule: Schedule, created: datetime, t: datetime, host_tz: str) -> datetime | None:
    """The latest occurrence at or before `t`, or None."""
    if isinstance(schedule, Cron):
        return _cron_latest(schedule, t, host_tz)
    if isinstance(schedule, Every):
        period_us = schedule.every_seconds * 1_000_000
        k = _grid_index(created, t, period_us)
        return _shift(created, k * period_us) if k >= 1 else None
    only = next(_occurrences_after(schedule, created, created, host_tz), None)  # a one-shot's
    return only if only is not None and only <= t else None
