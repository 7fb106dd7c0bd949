"""B2's section: lateness at steady load, both systems, then dshloop alone at five times the load."""

from __future__ import annotations

from bench.stats import over_reps

from .format import DQ, HEADER, cell, compared, duplicates_row, met, table


def b2_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("B2")
    if not data:
        return ""
    ours, theirs = data.get("dshloop", []), data.get(DQ, [])
    p99 = over_reps(ours, "p99")[0]
    rows = [
        ["interval", f"{sizes['b2_period_s']} s", "60 s (its minimum)", "", "", ""],
        ["occurrences in the window", cell(ours, "expected"), cell(theirs, "expected"), "", "", ""],
        ["load (occurrences/s)", cell(ours, "load_per_s"), cell(theirs, "load_per_s"), "", "", ""],
        ["delivered", cell(ours, "delivered"), cell(theirs, "delivered"), "", "", ""],
        ["not delivered (folded or skipped)", cell(ours, "not_delivered"), cell(theirs, "not_delivered"), "", "", ""],
        compared("lateness p50 (ms)", ours, theirs, "p50", scale=1000),
        compared("lateness p95 (ms)", ours, theirs, "p95", scale=1000),
        compared(
            "lateness p99 (ms)",
            ours,
            theirs,
            "p99",
            scale=1000,
            target="≤ 250 ms",
            verdict=met(p99 * 1000 if p99 is not None else None, 250, at_most=True),
        ),
        compared("lateness max (ms)", ours, theirs, "max", scale=1000),
        duplicates_row(ours, theirs),
    ]
    return (
        f"## B2 lateness at steady load: {sizes['b2_loops']:,} staggered loops for {sizes['b2_seconds']} s\n\n"
        f"One scheduler process each. dshloop's loops repeat every {sizes['b2_period_s']} s, their first "
        "deadlines spread evenly over one interval. django-q2's `Schedule` cannot repeat more often than once a "
        "minute, so its schedules run every 60 s, spread the same way: **a sixth of dshloop's load**, which "
        "favours the baseline. Lateness = delivery record − scheduled instant, over every occurrence scheduled "
        "in the window.\n\n" + table(HEADER, rows) + b2_heavy(data.get("dshloop/heavy", []), sizes)
    )


def b2_heavy(reps: list[dict], sizes: dict) -> str:
    """dshloop alone at five times B2's load: django-q2 has no row at this rate."""
    if not reps:
        return ""
    p99 = over_reps(reps, "p99")[0]
    rows = [
        ["occurrences in the window", cell(reps, "expected"), "", ""],
        ["load (occurrences/s)", cell(reps, "load_per_s"), "", ""],
        ["delivered", cell(reps, "delivered"), "", ""],
        ["not delivered (folded or skipped)", cell(reps, "not_delivered"), "", ""],
        ["lateness p50 (ms)", cell(reps, "p50", 1000), "", ""],
        ["lateness p95 (ms)", cell(reps, "p95", 1000), "", ""],
        [
            "lateness p99 (ms)",
            cell(reps, "p99", 1000),
            "≤ 250 ms",
            met(p99 * 1000 if p99 is not None else None, 250, at_most=True),
        ],
        ["lateness max (ms)", cell(reps, "max", 1000), "", ""],
        ["duplicates", cell(reps, "duplicates"), "0", met(over_reps(reps, "duplicates")[0], 0, at_most=True)],
    ]
    return (
        f"\n\n**Five times the load: {sizes['b2_heavy_loops']:,} loops every {sizes['b2_period_s']} s, "
        "dshloop alone** (django-q2 repeats a schedule at most once a minute, and B1 shows it delivers "
        "fewer than 200 occurrences a second)\n\n" + table(["", "dshloop", "target", "met?"], rows)
    )
