"""When a time zone's UTC offset changes: pure functions, no Django.

zoneinfo answers "what is the offset at this instant" but does not list the changes. They come from
the zone's TZif file (RFC 8536), found where zoneinfo finds it (TZPATH, then the tzdata package):
its table lists the changes up to some year (2037 for most zones, 2087 for Morocco's), and its
footer, a POSIX TZ rule, gives every later year's. Each change is then confirmed against zoneinfo
itself, the clock the scheduler reads, so only real offset changes are kept, at zoneinfo's instants.
"""

from __future__ import annotations

import calendar
import functools
import importlib.resources
import os
import re
import struct
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise

_DAY = 86_400
# Sampling step of the fallback (a zone whose file or rule cannot be read): the closest two future
# changes of any zone in tzdata 2025b are 6.96 days apart (Asia/Gaza), far above one day.
_SAMPLE_STEP = _DAY
_UNREAD_RULE_FROM = datetime(2100, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Transition:
    at: datetime  # the UTC instant the new offset starts
    before: timedelta  # the offset just before it
    after: timedelta  # the offset from it on

    @property
    def shift(self) -> timedelta:
        """How far wall clocks jump: positive springs forward (a gap), negative falls back."""
        return self.after - self.before


def _offset(zone: zoneinfo.ZoneInfo, epoch: int) -> timedelta:
    offset = datetime.fromtimestamp(epoch, zone).utcoffset()
    assert offset is not None
    return offset


def _first_change(zone: zoneinfo.ZoneInfo, low: int, high: int) -> int:
    """The first second in (low, high] whose offset differs from low's (one must exist)."""
    before = _offset(zone, low)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset(zone, middle) == before:
            low = middle
        else:
            high = middle
    return high


# --- the TZif file ----------------------------------------------------------------------------------


def _tzif_bytes(key: str) -> bytes | None:
    for directory in zoneinfo.TZPATH:  # zoneinfo's own search order
        path = os.path.join(directory, key)
        if os.path.isfile(path):
            with open(path, "rb") as file:
                return file.read()
    try:
        resource = importlib.resources.files("tzdata").joinpath("zoneinfo", *key.split("/"))
        return resource.read_bytes()
    except (ModuleNotFoundError, OSError):
        return None


def _parse_tzif(data: bytes) -> tuple[tuple[int, ...], str]:
    """The listed change instants (epoch seconds) and the footer rule ("" if none)."""
    if data[:4] != b"TZif":
        raise ValueError("not a TZif file")
    isut, isstd, leap, count, types, chars = struct.unpack(">6l", data[20:44])
    if data[4] == 0:  # version 1: 32-bit instants, no footer
        return struct.unpack(f">{count}l", data[44 : 44 + 4 * count]), ""
    start = 44 + count * 5 + types * 6 + chars + leap * 8 + isstd + isut  # skip the 32-bit block
    isut, isstd, leap, count, types, chars = struct.unpack(">6l", data[start + 20 : start + 44])
    instants: tuple[int, ...] = struct.unpack(f">{count}q", data[start + 44 : start + 44 + 8 * count])
    footer_at = start + 44 + count * 9 + types * 6 + chars + leap * 12 + isstd + isut
    return instants, data[footer_at:].decode("ascii").strip("\n")


# --- the footer: a POSIX TZ rule, with RFC 8536's extended hours --------------------------------------

_NAME = r"(?:<[^>]*>|[A-Za-z]+)"
_TIME = r"[+-]?\d{1,3}(?::\d{1,2}){0,2}"
_DATE = r"(?:J\d{1,3}|\d{1,3}|M\d{1,2}\.\d\.\d)"
_RULE = re.compile(
    rf"{_NAME}(?P<std>{_TIME})(?:{_NAME}(?P<dst>{_TIME})?"
    rf",(?P<on>{_DATE})(?:/(?P<on_time>{_TIME}))?,(?P<off>{_DATE})(?:/(?P<off_time>{_TIME}))?)?",
    re.ASCII,
)


def _seconds(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    parts = [int(part) for part in text.lstrip("+-").split(":")]
    return sign * sum(part * unit for part, unit in zip(parts, (3600, 60, 1), strict=False))


def _rule_day(spec: str, year: int) -> date:
    if spec.startswith("J"):  # day 1..365, 29 February never counted
        day = int(spec[1:])
        return date(year, 1, 1) + timedelta(days=day - 1 + (calendar.isleap(year) and day >= 60))
    if spec.startswith("M"):  # day d (0 = Sunday) of week w (5 = last) of month m
        month, week, weekday = (int(part) for part in spec[1:].split("."))
        first = (weekday - date(year, month, 1).isoweekday()) % 7 + 1
        day = first + 7 * (week - 1)
        while day > calendar.monthrange(year, month)[1]:
            day -= 7
        return date(year, month, day)
    return date(year, 1, 1) + timedelta(days=int(spec))  # day 0..365, 29 February counted


def _rule_changes(footer: str, first_year: int, last_year: int) -> list[tuple[int, timedelta]] | None:
    """(instant, new offset) for each change the footer's rule makes in those years, in order; None
    if the rule is unreadable."""
    match = _RULE.fullmatch(footer)
    if match is None:
        return None
    if match["on"] is None:
        return []  # one offset for ever
    # POSIX offsets count west of Greenwich: UTC offset = -offset. Default DST: one hour ahead.
    standard = -_seconds(match["std"])
    summer = -_seconds(match["dst"]) if match["dst"] else standard + 3600
    changes = []
    for year in range(first_year, last_year + 1):
        for spec, time, leaving, entering in (
            (match["on"], match["on_time"], standard, summer),  # the rule's wall times are in the offset it leaves
            (match["off"], match["off_time"], summer, standard),
        ):
            local = calendar.timegm(_rule_day(spec, year).timetuple()) + (_seconds(time) if time else 7200)
            changes.append((local - leaving, timedelta(seconds=entering)))
    # A zone on summer time all year ends it and starts it again at the same instant: the later
    # of two changes at one instant is the one that holds.
    return sorted(dict(sorted(changes, key=lambda change: change[0])).items())


# --- the changes ------------------------------------------------------------------------------------


def _confirmed(zone: zoneinfo.ZoneInfo, candidates: tuple[int, ...], start: int, end: int) -> list[Transition]:
    """The candidates at which zoneinfo's offset really changes, each at zoneinfo's own instant."""
    found: dict[int, Transition] = {}
    for candidate in sorted(set(candidates)):
        if not start <= candidate < end:
            continue
        at = candidate
        if _offset(zone, at - 1) == _offset(zone, at):
            # Not a change (only the abbreviation or DST flag changed), or the rule put it a little off.
            low, high = at - _DAY, at + _DAY
            if _offset(zone, low) == _offset(zone, high):
                continue
            at = _first_change(zone, low, high)
        found[at] = Transition(datetime.fromtimestamp(at, UTC), _offset(zone, at - 1), _offset(zone, at))
    return [found[at] for at in sorted(found)]


def _ruled(zone: zoneinfo.ZoneInfo, footer: str, start: int, end: int) -> list[Transition]:
    """The changes in [start, end) of a zone whose table ended before start: its rule's. zoneinfo
    works a rule's changes out afresh at each lookup past the table (~20 µs each here, too slow for
    centuries of them), so it checks only the first two years; sampled if the rule is unreadable or
    zoneinfo disagrees."""
    first_year, last_year = (datetime.fromtimestamp(moment, UTC).year for moment in (start, end))
    ruled = _rule_changes(footer, first_year, last_year)
    if ruled is None:
        return _sampled(zone, start, end)
    transitions, offset = [], _offset(zone, start)
    for at, after in ruled:
        if start < at < end and after != offset:
            transitions.append(Transition(datetime.fromtimestamp(at, UTC), offset, after))
        if start < at:
            offset = after
    checked_until = start + 2 * 366 * _DAY
    bounds = [start] + [int(change.at.timestamp()) for change in transitions if change.at.timestamp() < checked_until]
    expected = [transitions[0].before if transitions else offset] + [change.after for change in transitions]
    for index, (low, high) in enumerate(pairwise([*bounds, min(checked_until, end)])):
        if high > low and {_offset(zone, low), _offset(zone, (low + high) // 2), _offset(zone, high - 1)} != {
            expected[index]
        }:
            return _sampled(zone, start, end)
    return transitions


def _sampled(zone: zoneinfo.ZoneInfo, start: int, end: int) -> list[Transition]:
    """The changes found by sampling every _SAMPLE_STEP: a fallback, much slower than the file."""
    changes = []
    low, before = start, _offset(zone, start)
    while low < end:
        high = min(low + _SAMPLE_STEP, end)
        if _offset(zone, high) != before:
            at = _first_change(zone, low, high)
            changes.append(Transition(datetime.fromtimestamp(at, UTC), _offset(zone, at - 1), _offset(zone, at)))
            high, before = at, _offset(zone, at)
        low = high
    return changes


@functools.lru_cache(maxsize=64)
def _listed(key: str) -> tuple[tuple[int, ...], str] | None:
    data = _tzif_bytes(key)
    try:
        return None if data is None else _parse_tzif(data)
    except (ValueError, struct.error, UnicodeDecodeError):
        return None


def rule_decides_from(zone: zoneinfo.ZoneInfo) -> datetime:
    """From when the zone's rule alone decides its changes: its table's last change (the epoch for a
    zone whose table lists none); 2100 if its file cannot be read (no zone's table in tzdata 2025b
    goes past 2087)."""
    listed = _listed(zone.key)
    if listed is None:
        return _UNREAD_RULE_FROM
    return datetime.fromtimestamp(listed[0][-1] if listed[0] else 0, UTC)


def offset_changes(zone: zoneinfo.ZoneInfo, start: datetime, end: datetime) -> tuple[Transition, ...]:
    """The zone's UTC-offset changes in [start, end), in order."""
    begin, finish = int(start.timestamp()), int(end.timestamp())
    listed = _listed(zone.key)
    if listed is None:
        return tuple(_sampled(zone, begin, finish))
    table, footer = listed
    until = max(table[-1] if table else begin, begin)
    return tuple(_confirmed(zone, table, begin, min(until + 1, finish)) + _ruled(zone, footer, until, finish))
