"""The one backoff formula: doubling from a base, capped."""

from __future__ import annotations

from datetime import timedelta

# Past this exponent every cap we use is reached, and a larger power would only cost time.
_MAX_DOUBLINGS = 16


def doubling(attempt: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """`base` after attempt 1, twice that after attempt 2, and so on, never more than `cap`."""
    factor: float = 2 ** min(attempt - 1, _MAX_DOUBLINGS)  # typeshed cannot tell an int power from a float one
    return min(base * factor, cap)
