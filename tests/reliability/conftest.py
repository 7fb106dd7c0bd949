"""Reliability suite: with DSHLOOP_FUZZ_REPORT=1 the API fuzzer prints the status codes it saw per operation."""

from __future__ import annotations

import os


def pytest_terminal_summary(terminalreporter):
    if not os.environ.get("DSHLOOP_FUZZ_REPORT"):
        return
    from .test_api_fuzz import seen_statuses

    if not seen_statuses:
        return
    terminalreporter.section("API fuzzing: status codes seen per operation")
    for operation, statuses in sorted(seen_statuses.items()):
        counts = ", ".join(f"{code}×{n}" for code, n in sorted(statuses.items()))
        terminalreporter.write_line(f"{operation}: {counts} ({sum(statuses.values())} requests)")
