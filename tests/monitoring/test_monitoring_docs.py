"""The Grafana dashboard and the alert rules in docs/ ask only for series GET /metrics has: a name
misspelt in a query would draw an empty panel, or an alert that never fires, without a word."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from loops.models import SchedulerHeartbeat
from tests.conftest import T0
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
