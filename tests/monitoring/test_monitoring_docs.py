"""The Grafana dashboard and the alert rules in docs/ ask only for series GET /metrics has: a name
misspelt in a query would draw an empty panel, or an alert that never fires, without a word. The
API's description (/api/docs) lists every series a scrape has, no more and no fewer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from loops.models import SchedulerHeartbeat
from tests.conftest import T0, ApiClient
from tests.monitoring.test_metrics import scrape

DOCS = Path(__file__).resolve().parents[2] / "docs"
SERIES = re.compile(r"\bdshloop_[a-z_]+\b")

pytestmark = pytest.mark.django_db


def dashboard_queries() -> list[str]:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def rule_queries() -> list[str]:
    """Each rule's `expr: |` block: the lines indented under it. A line scan, as bench.dashboard
    reads the file: PyYAML is no dependency of ours."""
    text = (DOCS / "prometheus" / "dshloop.rules.yml").read_text()
    queries, indent = [], None
    for line in text.splitlines():
        depth = len(line) - len(line.lstrip())
        if indent is not None and line.strip() and depth > indent:
            queries[-1] += line.strip() + "\n"
        elif line.strip() == "expr: |":
            queries.append("")
            indent = depth
        elif line.strip():
            indent = None
    assert all(queries) and len(queries) == text.count("- alert:"), queries  # every rule, in this layout
    return queries


@pytest.mark.parametrize("queries", [dashboard_queries, rule_queries], ids=["dashboard", "rules"])
def test_every_series_a_query_names_is_exposed(queries, manage_token):
    # A heartbeat, so that the one series absent before any scheduler ticked is there too.
    SchedulerHeartbeat.objects.create(instance_id="a", hostname="h", pid=1, started_at=T0, last_tick_at=T0)
    exposed = {key.partition("{")[0] for key in scrape(manage_token)}
    named = {name for query in queries() for name in SERIES.findall(query)}
    assert named and named <= exposed, sorted(named - exposed)


def scraped_series(token: str) -> dict[str, dict[str, set[str]]]:
    """Each series of a scrape with its labels' values; a histogram by its family's name."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    series: dict[str, dict[str, set[str]]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            name = family.name if family.type == "histogram" else sample.name
            labels = series.setdefault(name, {})
            for label, value in sample.labels.items():
                if family.type != "histogram":
                    labels.setdefault(label, set()).add(value)
    return series


def described_series(description: str) -> dict[str, dict[str, set[str]]]:
    """The series the API's description lists, as `name` or `name{label=a|b}`."""
    series = {}
    for name, labels in re.findall(r"\b(dshloop_[a-z_]+)(?:\{([^}]*)\})?", description):
        pairs = (part.partition("=") for part in labels.split(",") if part)
        series[name] = {label: set(values.split("|")) for label, _, values in pairs}
    return series


def test_the_api_description_lists_every_series_a_scrape_exposes_with_its_labels(manage_token, tools_token):
    SchedulerHeartbeat.objects.create(instance_id="a", hostname="h", pid=1, started_at=T0, last_tick_at=T0)
    description = ApiClient(tools_token).get("/api/openapi.json").json()["info"]["description"]

    described = described_series(description)

    assert described == scraped_series(manage_token)
    # The unattended-runs series (contract §14) the description once left out.
    for series in (
        "dshloop_runs_skipped_total{reason=overlap|capacity}",
        "dshloop_runs_timed_out_total",
        "dshloop_fresh_runs_running",
        "dshloop_fresh_runs_limit",
    ):
        assert series in description, series
