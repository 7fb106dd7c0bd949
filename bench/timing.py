"""Time as the benchmarks use it: the wall clock in UTC, and how long ahead to place a deadline."""

from __future__ import annotations

import time
from datetime import UTC, datetime

HOUR = 3600


def now() -> datetime:
    return datetime.now(UTC)


def sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - now()).total_seconds()))


def lead_time(rows: int) -> float:
    """Seconds to set up `rows` rows (insert, ANALYZE) before they fall due, with a margin."""
    return 3.0 + rows / 4000
