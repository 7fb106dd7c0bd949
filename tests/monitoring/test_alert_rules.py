"""docs/prometheus/dshloop.rules.yml checked and unit-tested by Prometheus's own promtool, when it is
installed (Debian's `prometheus` package has it); the scenarios are in dshloop.rules.test.yml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=RULES, capture_output=True, text=True, timeout=60)


def test_the_rules_are_valid():
    result = promtool("check", "rules", "dshloop.rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_fire_and_resolve_as_their_scenarios_say():
    result = promtool("test", "rules", "dshloop.rules.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
