"""Each panel of docs/grafana-dashboard.json evaluated at every scrape, the alert rules of
docs/prometheus/dshloop.rules.yml with their `for:`, and a summary of the run in words."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from bench.processes import BASE_DIR

from .promql import gauge, histogram_quantile, label_values, rate, series, window
from .scenario import RATE_INTERVAL
from .scrapes import ScrapedRun

RULES_YML = BASE_DIR / "docs" / "prometheus" / "dshloop.rules.yml"


@dataclass
class Line:
    label: str
    values: list[float]


@dataclass
class PanelData:
    lines: list[Line]
    stacked: bool = False
    log: bool = False
    unit: str = ""
    threshold: float | None = None  # a red line, shaded above (or below, with below=True)
    below: bool = False
    states: dict[str, list[int]] | None = None  # the Alerts panel: 0 normal, 1 pending, 2 firing


def evaluate(run: ScrapedRun, rules: dict) -> dict[str, PanelData]:
    """Each panel of docs/grafana-dashboard.json by its title, evaluated at every scrape."""
    scrapes = run.scrapes
    times = [s.at for s in scrapes]

    def at_each(f: Callable[[float], float]) -> list[float]:
        return [f(t) for t in times]

    occurrences = {
        result: series(scrapes, "dshloop_occurrences_total", result=result)
        for result in ("delivered", "failed", "skipped")
    }

    def failure_ratio(t: float, seconds: float) -> float:
        failed = rate(occurrences["failed"], t, seconds)
        finished = failed + rate(occurrences["delivered"], t, seconds)
        return failed / finished if finished > 0 else math.nan

    bounds = label_values(scrapes, "dshloop_delivery_lateness_seconds_bucket", "le")
    buckets = {float(le): series(scrapes, "dshloop_delivery_lateness_seconds_bucket", le=le) for le in bounds}

    def lateness(q: float, t: float) -> float:
        return histogram_quantile(q, [(le, rate(points, t, RATE_INTERVAL)) for le, points in buckets.items()])

    def one(name: str) -> list[float]:
        points = series(scrapes, name)
        return at_each(lambda t: gauge(points, t))

    states = ("scheduled", "running", "paused", "failed", "completed")
    by_state = {state: series(scrapes, "dshloop_loops", state=state) for state in states}
    last_tick = series(scrapes, "dshloop_scheduler_last_tick_timestamp_seconds")
    instances = series(scrapes, "dshloop_scheduler_instances")
    backlog = series(scrapes, "dshloop_due_backlog")
    skipped = {
        reason: series(scrapes, "dshloop_runs_skipped_total", reason=reason) for reason in ("overlap", "capacity")
    }
    timed_out = series(scrapes, "dshloop_runs_timed_out_total")
    return {
        "Occurrences per second, by result": PanelData(
            [Line(r, at_each(lambda t, p=p: rate(p, t, RATE_INTERVAL))) for r, p in occurrences.items()],
            unit="/s",
        ),
        "Failure ratio (5m)": PanelData(
            [Line("failed share", at_each(lambda t: failure_ratio(t, 300)))], unit="%", threshold=0.10
        ),
        "Delivery lateness p50 / p95 / p99": PanelData(
            [Line(f"p{round(q * 100)}", at_each(lambda t, q=q: lateness(q, t))) for q in (0.5, 0.95, 0.99)],
            log=True,
            unit="s",
        ),
        "Missed occurrences per second": PanelData(
            [
                Line(
                    "missed",
                    at_each(lambda t: rate(series(scrapes, "dshloop_missed_occurrences_total"), t, RATE_INTERVAL)),
                )
            ],
            unit="/s",
        ),
        "Due backlog": PanelData([Line("due, unclaimed", one("dshloop_due_backlog"))]),
        "Open runs": PanelData([Line("open", one("dshloop_open_runs"))]),
        "Oldest open run age": PanelData(
            [Line("oldest open run", one("dshloop_oldest_open_run_age_seconds"))], unit="s"
        ),
        "Loops by state": PanelData(
            [Line(state, at_each(lambda t, p=by_state[state]: gauge(p, t))) for state in states],
            stacked=True,
        ),
        "Scheduler instances": PanelData([Line("alive", one("dshloop_scheduler_instances"))], threshold=1, below=True),
        "Seconds since last scheduler tick": PanelData(
            [Line("since last tick", at_each(lambda t: t - gauge(last_tick, t)))], unit="s", threshold=60
        ),
        "Unattended runs: skipped and timed out per second": PanelData(
            [
                *(
                    Line(f"skipped: {reason}", at_each(lambda t, p=p: rate(p, t, RATE_INTERVAL)))
                    for reason, p in skipped.items()
                ),
                Line("timed out", at_each(lambda t: rate(timed_out, t, RATE_INTERVAL))),
            ],
            unit="/s",
        ),
        "Unattended runs: fresh sessions running": PanelData(
            [Line("running", one("dshloop_fresh_runs_running")), Line("limit", one("dshloop_fresh_runs_limit"))]
        ),
        "Alerts": PanelData(
            [],
            states=alert_states(
                rules, times, instances, backlog, failure_ratio, occurrences, skipped["capacity"], timed_out
            ),
        ),
    }


def alert_states(
    rules, times, instances, backlog, failure_ratio, occurrences, skipped_capacity, timed_out
) -> dict[str, list[int]]:
    """The rules of docs/prometheus/dshloop.rules.yml at every scrape, with their `for:`
    (read from the file): 0 inactive, 1 pending, 2 firing. Windows longer than the run see the
    samples there are, as Prometheus's range selectors do."""

    def no_scheduler(t: float) -> bool:
        value = gauge(instances, t)
        return math.isnan(value) or value < 1

    def backlog_stays(t: float) -> bool:
        values = [p.value for p in window(backlog, t, 600)]
        return bool(values) and min(values) > 0

    def failing(t: float) -> bool:
        ratio = failure_ratio(t, 900)
        return not math.isnan(ratio) and ratio > 0.10 and rate(occurrences["failed"], t, 900) > 1 / 120

    def rose_within_an_hour(points):
        return lambda t: rate(points, t, 3600) > 0  # increase(...[1h]) > 0; NaN compares false

    conditions = {
        "DshloopNoScheduler": no_scheduler,
        "DshloopBacklogGrowing": backlog_stays,
        "DshloopHighFailureRate": failing,
        "DshloopUnattendedRunsTimingOut": rose_within_an_hour(timed_out),
        "DshloopFreshRunsAtCapacity": rose_within_an_hour(skipped_capacity),
    }
    states = {}
    for name, condition in conditions.items():
        hold = _seconds(rules[name].get("for", "0s"))
        active_since, row = None, []
        for t in times:
            if not condition(t):
                active_since = None
                row.append(0)
                continue
            active_since = t if active_since is None else active_since
            row.append(2 if t - active_since >= hold else 1)
        states[name] = row
    return states


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(duration[:-1]) * units[duration[-1]]


def load_rules() -> dict[str, dict]:
    """Each alert's `for:` from the rules file. A line scan, not a YAML parser: PyYAML is no
    dependency of ours, and the file's layout (`- alert:` then `for:`) is ours too."""
    rules: dict[str, dict] = {}
    current = None
    for line in RULES_YML.read_text().splitlines():
        key, _, value = line.strip().removeprefix("- ").partition(":")
        if key == "alert":
            current = rules.setdefault(value.strip(), {})
        elif key == "for" and current is not None:
            current["for"] = value.strip()
    return rules


def summary(run: ScrapedRun, data: dict[str, PanelData]) -> str:
    last = run.scrapes[-1].samples

    def total(name: str, **labels: str) -> float:
        return last.get((name, tuple(sorted(labels.items()))), math.nan)

    def peak(title: str, label: str | None = None) -> float:
        lines = data[title].lines
        values = [v for line in lines if label in (None, line.label) for v in line.values if not math.isnan(v)]
        return max(values, default=math.nan)

    statuses = [s.health_status for s in run.scrapes]
    return "\n".join(
        [
            f"scrapes: {len(run.scrapes)} over {run.scrapes[-1].at - run.scrapes[0].at:.0f} s",
            "occurrences: delivered {:.0f}, failed {:.0f}, skipped {:.0f}; missed {:.0f}".format(
                total("dshloop_occurrences_total", result="delivered"),
                total("dshloop_occurrences_total", result="failed"),
                total("dshloop_occurrences_total", result="skipped"),
                total("dshloop_missed_occurrences_total"),
            ),
            f"peak delivered/s {peak('Occurrences per second, by result', 'delivered'):.2f}, "
            f"failed/s {peak('Occurrences per second, by result', 'failed'):.2f}, "
            f"failure ratio (5m) {peak('Failure ratio (5m)') * 100:.0f}%",
            f"peak lateness p50 {peak('Delivery lateness p50 / p95 / p99', 'p50'):.2f} s, "
            f"p99 {peak('Delivery lateness p50 / p95 / p99', 'p99'):.1f} s; "
            f"peak missed/s {peak('Missed occurrences per second'):.2f}",
            f"peak due backlog {peak('Due backlog'):.0f}, open runs {peak('Open runs'):.0f}, "
            f"oldest open run {peak('Oldest open run age'):.0f} s, "
            f"since last tick {peak('Seconds since last scheduler tick'):.0f} s",
            "unattended runs: skipped overlap {:.0f}, capacity {:.0f}; timed out {:.0f}; ".format(
                total("dshloop_runs_skipped_total", reason="overlap"),
                total("dshloop_runs_skipped_total", reason="capacity"),
                total("dshloop_runs_timed_out_total"),
            )
            + f"peak fresh sessions running {peak('Unattended runs: fresh sessions running', 'running'):.0f} "
            f"of {total('dshloop_fresh_runs_limit'):.0f}",
            f"/api/health: {statuses.count(200)} × 200, {statuses.count(503)} × 503",
            "alerts: "
            + ", ".join(
                f"{name} {'firing' if 2 in row else 'pending' if 1 in row else 'inactive'}"
                for name, row in data["Alerts"].states.items()
            ),
        ]
    )
