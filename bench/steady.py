"""B2 lateness at steady load: staggered recurring loops, the lateness of every occurrence in a window."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from pathlib import Path

from .processes import wait_for
from .servers import schedulers
from .stats import summary
from .systems import System
from .timing import lead_time, now, sleep_until


def expected_occurrences(count: int, *, first_at: datetime, period_s: float, spread_s: float, end: datetime) -> int:
    """Grid points in [first_at, end) of `count` rows staggered like System.add_every."""
    total = 0
    for i in range(count):
        first = first_at + timedelta(seconds=i * spread_s / count)
        if first < end:
            total += math.ceil((end - first).total_seconds() / period_s)
    return total


def steady(system: System, *, loops: int, period_s: int, seconds: int, log_dir: Path, label: str) -> dict:
    """`loops` staggered loops for `seconds`: lateness of every occurrence scheduled in the window."""
    period = max(period_s, system.min_period_s)  # django-q2 cannot express less than a minute
    system.reset()
    with schedulers(system, 1, log_dir, label):
        start = now() + timedelta(seconds=lead_time(loops))
        system.add_every(loops, period_s=period, first_at=start, spread_s=period)
        system.analyze()
        system.wake()
        end = start + timedelta(seconds=seconds)
        sleep_until(end)
        # Then let it finish what fell due in the window (django-q2 needs its next pass).
        settled = wait_for(lambda: system.settled(end), timeout=max(90.0, seconds), interval=0.5)
    lateness = [
        (delivered - scheduled).total_seconds()
        for scheduled, delivered in system.deliveries()
        if start <= scheduled < end
    ]
    expected = expected_occurrences(loops, first_at=start, period_s=period, spread_s=period, end=end)
    return {
        "period_s": period,
        "expected": expected,
        "delivered": len(lateness),
        "not_delivered": max(0, expected - len(lateness)),
        "settled": settled,
        "load_per_s": expected / seconds,
        **summary(lateness),
        "duplicates": system.duplicates(),
    }
