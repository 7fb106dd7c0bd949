"""GET /metrics: the Prometheus text format, scope `manage`.

Every number but two comes from the shared database, so any web process answers for every
scheduler on every machine: the cumulative counters (loops.counters) that the schedulers add to as
they record runs, and the gauges read now (monitoring.gauges). `dshloop_fresh_runs_limit` is this
process's setting, the schedulers' too when they run with the same environment.

The other, `dshloop_http_unexpected_errors_total`, counts the requests this web process answered
500 because of an unexpected exception (dshloop.middleware, the /mcp transport), since it started.
It lives in the process's memory because the failing part may be the database itself; Prometheus
keeps one series per scraped process, and rate() or increase() read it across restarts.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from loops import counters
from loops.models import LoopState, NoticeStatus, WebhookStatus
from loops.runs import SKIP_REASONS
from monitoring.gauges import Gauges, read_gauges
from tokens.auth import bearer_scope


def _occurrence_metrics(totals: dict[str, int]):
    occurrences = CounterMetricFamily(
        "dshloop_occurrences", "Occurrences finished, by result (delivered, failed, skipped).", labels=["result"]
    )
    for result in counters.RESULTS:
        occurrences.add_metric([str(result)], totals.get(counters.occurrences_name(result), 0))
    yield occurrences
    yield CounterMetricFamily(
        "dshloop_missed_occurrences",
        "Occurrences never delivered: folded by the anti-burst rule after downtime, skipped past the misfire "
        "grace, or left unclaimed by a pause, a new schedule or target, or a delete.",
        value=totals.get(counters.MISSED, 0),
    )
    buckets, cumulative = [], 0
    bounds = [*(str(float(bound)) for bound in counters.LATENESS_BUCKETS), "+Inf"]
    for index, bound in enumerate(bounds):
        cumulative += totals.get(counters.bucket_name(index), 0)
        buckets.append((bound, cumulative))
    yield HistogramMetricFamily(
        "dshloop_delivery_lateness_seconds",
        "Seconds from an occurrence's scheduled time to its delivery.",
        buckets=buckets,
        sum_value=totals.get(counters.LATENESS_SUM_US, 0) / 1_000_000,
    )


def _unattended_metrics(totals: dict[str, int]):
    """contract §14: what the bounds on `new` loops' fresh sessions did."""
    skipped = CounterMetricFamily(
        "dshloop_runs_skipped",
        "Runs of new loops skipped: overlap (the loop's last turn still ran), capacity "
        "(no free slot of DSHLOOP_MAX_CONCURRENT_NEW_RUNS within the misfire grace, or before the loop was "
        "paused, edited or deleted).",
        labels=["reason"],
    )
    for reason in SKIP_REASONS:  # each always has its series, 0 until it happens
        skipped.add_metric([reason], totals.get(counters.skipped_name(reason), 0))
    yield skipped
    yield CounterMetricFamily(
        "dshloop_runs_timed_out",
        "Runs of new loops whose turn outlived DSHLOOP_RUN_TIMEOUT_SECONDS: cancelled and failed.",
        value=totals.get(counters.TIMED_OUT, 0),
    )


def _failure_metrics(totals: dict[str, int]):
    """contract §16: what became of the failure episodes' notices and webhook events."""

    def ended(name: str, documentation: str, results, count_name) -> CounterMetricFamily:
        """A family by `result`: each way an episode's notice or event ended (not pending)."""
        family = CounterMetricFamily(name, documentation, labels=["result"])
        for result in results.values:
            if result != results.PENDING:
                family.add_metric([result], totals.get(count_name(result), 0))
        return family

    yield ended(
        "dshloop_failure_notices",
        "Failure notices by how they ended: delivered into the creator or global session, skipped (neither "
        "exists), failed (the host refused it, or kept failing).",
        NoticeStatus,
        counters.notices_name,
    )
    yield ended(
        "dshloop_failure_webhook_events",
        "Failure webhook events by how they ended: sent (a 2xx answer), failed (given up after "
        "DSHLOOP_FAILURE_WEBHOOK_RETRY_SECONDS).",
        WebhookStatus,
        counters.webhook_name,
    )
    yield CounterMetricFamily(
        "dshloop_failure_webhook_attempt_failures",
        "Failure webhook POSTs that failed (an error, a timeout, a non-2xx answer); each is retried with "
        "backoff until the event is given up.",
        value=totals.get(counters.webhook_name(counters.WEBHOOK_ATTEMPT_FAILED), 0),
    )


def _gauge_metrics(gauges: Gauges):
    def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, documentation, value=value)

    yield gauge(
        "dshloop_due_backlog", "Scheduled loops whose occurrence is due and not yet claimed.", gauges.due_backlog
    )
    yield gauge("dshloop_open_runs", "Runs claimed or being delivered, not yet finished.", gauges.open_runs)
    yield gauge(
        "dshloop_oldest_open_run_age_seconds",
        "Seconds since the oldest open run was claimed (0 when none is open).",
        gauges.oldest_open_run_age_seconds,
    )
    yield gauge(
        "dshloop_runs_waiting_for_host",
        "Open runs whose last delivery attempt got no answer from the host (refused, reset, timed out): "
        "retried until it answers. Above 0, the host (DSHLOOP_HOST) is down.",
        gauges.waiting_for_host,
    )
    yield gauge(
        "dshloop_fresh_runs_running",
        "Runs of new loops whose fresh session holds a slot of DSHLOOP_MAX_CONCURRENT_NEW_RUNS.",
        gauges.fresh_runs_running,
    )
    yield gauge(
        "dshloop_fresh_runs_limit",
        "DSHLOOP_MAX_CONCURRENT_NEW_RUNS as this web process reads it.",
        settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS,
    )
    loops = GaugeMetricFamily("dshloop_loops", "Loops by state.", labels=["state"])
    for state, count in gauges.loops.items():
        loops.add_metric([state], count)
    yield loops
    yield gauge(
        "dshloop_scheduler_instances", "runloops processes that ticked in the last 60 s.", gauges.scheduler_instances
    )
    if gauges.last_tick_at is not None:
        yield gauge(
            "dshloop_scheduler_last_tick_timestamp_seconds",
            "Unix time of the newest scheduler heartbeat, alive or not.",
            gauges.last_tick_at.timestamp(),
        )


class _ProcessCounter:
    """A counter in this process's memory, safe to add to from any thread (the server's pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def increment(self) -> None:
        with self._lock:
            self._value += 1

    @property
    def value(self) -> int:
        return self._value


_unexpected_errors = _ProcessCounter()


def count_unexpected_error() -> None:
    """One more request answered 500 because of an unexpected exception (already logged)."""
    _unexpected_errors.increment()


class _DatabaseCollector:
    """Read once per scrape: prometheus_client calls collect() while it renders."""

    def collect(self):
        totals = counters.read_counters()
        yield from _occurrence_metrics(totals)
        yield from _unattended_metrics(totals)
        yield from _failure_metrics(totals)
        yield from _gauge_metrics(read_gauges())


class _ProcessCollector:
    """This process's own counts, which the database cannot hold (see the module's docstring)."""

    def collect(self):
        yield CounterMetricFamily(
            "dshloop_http_unexpected_errors",
            "Requests this process answered 500 because of an unexpected exception (logged with its traceback).",
            value=_unexpected_errors.value,
        )


def series_catalogue() -> list[str]:
    """Every series GET /metrics answers, as a scrape names it, with its labels' values, e.g.
    `dshloop_runs_skipped_total{reason=overlap|capacity}` (a histogram by its family's name). Built
    by the functions that build a scrape, from nothing counted yet, so that a list made from it
    (the API's description) cannot miss a series added to them."""
    epoch = datetime.fromtimestamp(0, UTC)
    nothing = Gauges(
        at=epoch,
        due_backlog=0,
        open_runs=0,
        oldest_open_run_claimed_at=None,
        fresh_runs_running=0,
        loops=dict.fromkeys(LoopState.values, 0),
        unreadable_loops=0,
        retrying_runs=0,
        waiting_for_host=0,
        failed_recently=0,
        scheduler_instances=0,
        last_tick_at=epoch,  # a heartbeat, so that the series absent without one is listed too
    )
    families = [
        *_occurrence_metrics({}),
        *_unattended_metrics({}),
        *_failure_metrics({}),
        *_gauge_metrics(nothing),
        *_ProcessCollector().collect(),
    ]
    return [_series_name(family) for family in families]


def _series_name(family) -> str:
    if family.type == "histogram":
        return family.name  # its _bucket{le}, _sum and _count are Prometheus's own
    labels: dict[str, list[str]] = {}
    for sample in family.samples:
        for label, value in sample.labels.items():
            if value not in labels.setdefault(label, []):
                labels[label].append(value)
    suffix = ",".join(f"{label}={'|'.join(values)}" for label, values in labels.items())
    return family.samples[0].name + (f"{{{suffix}}}" if suffix else "")


def render_metrics() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_DatabaseCollector())
    registry.register(_ProcessCollector())
    return generate_latest(registry)


@require_safe
@transaction.atomic  # the token, the counters and the gauges: one transaction per scrape
@bearer_scope("manage")
def metrics_view(request: HttpRequest) -> HttpResponse:
    # Text format 0.0.4, which every Prometheus reads (1.0.0 only adds names our series don't use).
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
