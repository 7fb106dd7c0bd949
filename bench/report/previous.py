"""This run beside the previous full run: the headline medians of bench/previous.json."""

from __future__ import annotations

import json
from pathlib import Path

from bench.stats import over_reps

from .format import DQ, number, table

PREVIOUS = Path(__file__).resolve().parent.parent / "previous.json"

# The headline numbers a new run is compared with: (label, section, key, metric, scale, unit).
HEADLINE = (
    ("B1 occurrences/s, 1 process", "B1", "dshloop/1", "rate", 1, ""),
    ("B1 scheduler CPU per 1,000 occurrences, 1 process", "B1", "dshloop/1", "scheduler_cpu_ms_per_1k", 1, " ms"),
    ("B1 PostgreSQL CPU per 1,000 occurrences, 1 process", "B1", "dshloop/1", "server_cpu_ms_per_1k", 1, " ms"),
    ("B1 lateness p99, 1 process", "B1", "dshloop/1", "p99", 1, " s"),
    ("B1 occurrences/s, 4 processes", "B1", "dshloop/4", "rate", 1, ""),
    ("B1 scheduler CPU per 1,000 occurrences, 4 processes", "B1", "dshloop/4", "scheduler_cpu_ms_per_1k", 1, " ms"),
    ("B1 PostgreSQL CPU per 1,000 occurrences, 4 processes", "B1", "dshloop/4", "server_cpu_ms_per_1k", 1, " ms"),
    ("B2 lateness p99 at 200/s", "B2", "dshloop", "p99", 1000, " ms"),
    ("B3 transactions/min, idle", "B3", "dshloop", "transactions_per_min", 1, ""),
    ("B3 CPU % of one core, idle", "B3", "dshloop", "cpu_percent", 1, "%"),
    ("B4 runloops RSS at 10,000 rows", "B4", "dshloop/10000/rss", "rss_mb", 1, " MiB"),
    ("B4 qcluster RSS at 10,000 rows", "B4", f"{DQ}/10000/rss", "rss_mb", 1, " MiB"),
    ("B4 runloops RSS at 1,000,000 rows", "B4", "dshloop/1000000/rss", "rss_mb", 1, " MiB"),
    ("B4 loop_create p99", "B4", "dshloop/100000/api", "create_p99", 1, " ms"),
    ("B4 whole global loop_list at 100,000 loops, p50", "B4", "dshloop/100000/api", "global_list_p50", 1, " ms"),
)


def headline(results: dict) -> dict[str, float]:
    """This run's headline medians, keyed as bench/previous.json keys them."""
    found = {}
    for _, section, key, metric, _, _ in HEADLINE:
        value = over_reps(results["sections"].get(section, {}).get(key, []), metric)[0]
        if value is not None:
            found[f"{section} {key} {metric}"] = value
    return found


def previous_section(results: dict) -> str:
    """This run beside the previous full run (bench/previous.json), metric by metric."""
    if not PREVIOUS.exists():
        return ""
    previous = json.loads(PREVIOUS.read_text())
    now, rows = headline(results), []
    for label, section, key, metric, scale, unit in HEADLINE:
        name = f"{section} {key} {metric}"
        before, after = previous["metrics"].get(name), now.get(name)
        if before is None and after is None:
            continue
        change = f"×{number(after / before)}" if before and after is not None else ""
        rows.append(
            [
                label,
                number(before * scale) + unit if before is not None else "—",
                number(after * scale) + unit if after is not None else "—",
                change,
            ]
        )
    return (
        f"## This run beside the previous one ({previous['date']})\n\n"
        "Medians; the previous run's are in `bench/previous.json`. Lists at 100,000 loops, measured by their own "
        "`python -m bench.run --lists`, are in [BENCHMARKS-LISTS.md](BENCHMARKS-LISTS.md); two source trees side by side "
        "(`python -m bench.compare`) in [BENCHMARKS-COMPARE.md](BENCHMARKS-COMPARE.md).\n\n"
        + table(["", f"previous ({previous['date']})", "this run", "this ÷ previous"], rows)
    )
