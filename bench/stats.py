"""Small statistics: percentiles of one run, medians over repetitions."""

from __future__ import annotations

import math
import statistics


def percentile(values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values, default=None),
    }


def over_reps(reps: list[dict], key: str) -> tuple[float | None, float | None, float | None]:
    """(median, min, max) of one metric over repetitions, ignoring repetitions that lack it."""
    values = [rep[key] for rep in reps if rep.get(key) is not None]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)
