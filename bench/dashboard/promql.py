"""PromQL, as far as the dashboard needs it: series of the scrapes, rate(), histogram_quantile()
and instant gauges, computed the way Prometheus computes them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .scrapes import Scrape


@dataclass(frozen=True)
class Sample:
    at: float
    value: float


def series(scrapes: list[Scrape], name: str, **labels: str) -> list[Sample]:
    """One series (the sample name and exactly these labels) over the scrapes that have it."""
    key = (name, tuple(sorted(labels.items())))
    return [Sample(s.at, s.samples[key]) for s in scrapes if key in s.samples]


def label_values(scrapes: list[Scrape], name: str, label: str) -> list[str]:
    return sorted({dict(labels)[label] for s in scrapes for sample, labels in s.samples if sample == name})


def window(points: list[Sample], at: float, seconds: float) -> list[Sample]:
    return [p for p in points if at - seconds < p.at <= at]


def rate(points: list[Sample], at: float, seconds: float) -> float:
    """Prometheus's rate(): the counter's increase over the window (resets count from zero),
    extrapolated to the window's edges unless they are more than 1.1 sample intervals away, and
    never below zero at the start; NaN with fewer than two samples."""
    samples = window(points, at, seconds)
    if len(samples) < 2:
        return math.nan
    increase = samples[-1].value - samples[0].value
    for before, after in zip(samples, samples[1:], strict=False):
        if after.value < before.value:
            increase += before.value
    sampled = samples[-1].at - samples[0].at
    average = sampled / (len(samples) - 1)
    to_start = samples[0].at - (at - seconds)
    to_end = at - samples[-1].at
    if to_start >= average * 1.1:
        to_start = average / 2
    if to_end >= average * 1.1:
        to_end = average / 2
    if increase > 0 and samples[0].value >= 0:
        to_start = min(to_start, sampled * samples[0].value / increase)
    return increase * (sampled + to_start + to_end) / sampled / seconds


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's histogram_quantile() over (upper bound, cumulative rate) pairs: linear
    interpolation inside the bucket that holds the rank; the highest finite bound when the rank
    falls in +Inf; NaN when nothing was observed."""
    buckets = sorted(buckets)
    if len(buckets) < 2 or not buckets[-1][0] == math.inf or math.isnan(buckets[-1][1]) or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    index = next(i for i, (_, cumulative) in enumerate(buckets) if cumulative >= rank)
    bound, cumulative = buckets[index]
    if bound == math.inf:
        return buckets[-2][0]
    start, below = (0.0, 0.0) if index == 0 else buckets[index - 1]
    if cumulative == below:
        return bound
    return start + (bound - start) * (rank - below) / (cumulative - below)


def gauge(points: list[Sample], at: float) -> float:
    """An instant vector at a scrape's time: the sample of that scrape (5 s steps), if any."""
    for p in points:
        if p.at == at:
            return p.value
    return math.nan
