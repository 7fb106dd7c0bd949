"""The stable per-loop delay of a cron loop's deliveries (contract §16, DSHLOOP_CRON_JITTER_SECONDS).

A thousand loops at `0 9 * * *` would otherwise all fall due in the same second. Each loop is
delayed by its own offset in [0, spread), derived from its ID alone: the same in every process and
on every day, so a loop's grid stays regular, and spread evenly over the window across loops.
Pure: no Django.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta


def jitter_delay(loop_id: str, spread_seconds: int) -> timedelta:
    """The loop's delay: whole milliseconds in [0, spread_seconds) (epoch ms is what the API shows,
    so a delayed instant stays one the API can name exactly). A hash, not Python's hash(), which
    differs per process."""
    if spread_seconds <= 0:
        return timedelta(0)
    digest = hashlib.sha256(loop_id.encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % (spread_seconds * 1000))
