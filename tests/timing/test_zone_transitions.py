"""A zone's UTC-offset changes (timing/zone_transitions.py), read from its TZif file and rule, are
exactly the changes zoneinfo (the scheduler's clock) makes: every zone, the years ahead and far
past the end of its table."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

from timing import zone_transitions
from timing.schedules import _zone_names
from timing.zone_transitions import Transition, offset_changes, rule_decides_from


def offset(zone: zoneinfo.ZoneInfo, epoch: int) -> timedelta:
    return datetime.fromtimestamp(epoch, zone).utcoffset()


def sampled(zone: zoneinfo.ZoneInfo, start: datetime, end: datetime, step: int) -> list[Transition]:
    """Every change zoneinfo makes, found by reading the offset every `step` seconds and bisecting."""
    changes, low, finish = [], int(start.timestamp()), int(end.timestamp())
    while low < finish:
        high = min(low + step, finish)
        if offset(zone, high) != offset(zone, low):
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if offset(zone, middle) == offset(zone, low) else (low, middle)
            changes.append(Transition(datetime.fromtimestamp(high, UTC), offset(zone, low), offset(zone, high)))
        low = high
    return changes


def test_every_zone_changes_as_zoneinfo_does_in_the_years_ahead():
    # A one-day step: the closest two future changes of any zone (Gaza's) are 6.96 days apart.
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)
    for name in sorted(_zone_names()):
        zone = zoneinfo.ZoneInfo(name)
        assert list(offset_changes(zone, start, end)) == sampled(zone, start, end, 86400), name


def test_every_rule_changes_as_zoneinfo_does_centuries_after_its_table_ends():
    # One zone per distinct rule (zoneinfo works far-future changes out slowly, one lookup at a time).
    by_rule = {}
    for name in sorted(_zone_names()):
        by_rule.setdefault(zone_transitions._listed(name)[1], name)
    assert len(by_rule) > 20
    start, end = datetime(2398, 6, 1, tzinfo=UTC), datetime(2400, 6, 1, tzinfo=UTC)
    for rule, name in sorted(by_rule.items()):
        zone = zoneinfo.ZoneInfo(name)
        assert list(offset_changes(zone, start, end)) == sampled(zone, start, end, 86400), (name, rule)


def test_the_rule_decides_after_the_table_ends():
    assert rule_decides_from(zoneinfo.ZoneInfo("America/New_York")).year == 2037
    assert rule_decides_from(zoneinfo.ZoneInfo("Africa/Casablanca")).year == 2087
    assert rule_decides_from(zoneinfo.ZoneInfo("UTC")) == datetime(1970, 1, 1, tzinfo=UTC)


def test_a_zone_whose_file_cannot_be_read_is_sampled_instead(monkeypatch):
    zone = zoneinfo.ZoneInfo("Europe/Berlin")
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC)
    expected = offset_changes(zone, start, end)
    monkeypatch.setattr(zone_transitions, "_tzif_bytes", lambda key: None)
    zone_transitions._listed.cache_clear()
    try:
        assert offset_changes(zone, start, end) == expected
        assert rule_decides_from(zone) == datetime(2100, 1, 1, tzinfo=UTC)
    finally:
        zone_transitions._listed.cache_clear()
