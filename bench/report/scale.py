"""B4's section: scheduler memory, the due queries and the API's latency at each table size, and
what a scrape of GET /metrics costs there."""

from __future__ import annotations

from bench.sizes import SESSIONS
from bench.stats import over_reps

from .format import DQ, HEADER, cell, compared, met, number, table


def b4_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("B4")
    if not data:
        return ""
    rss_rows, query_rows = [], []
    ours_by_size = {}
    for size in sizes["b4_sizes"]:
        ours, theirs = data.get(f"dshloop/{size}/rss", []), data.get(f"{DQ}/{size}/rss", [])
        ours_by_size[size] = over_reps(ours, "rss_mb")[0]
        # The target: runloops no heavier than qcluster.
        rss_rows.append(
            compared(
                f"RSS (MiB) at {size:,} rows",
                ours,
                theirs,
                "rss_mb",
                target="≤ django-q2",
                verdict=met(ours_by_size[size], over_reps(theirs, "rss_mb")[0], at_most=True),
            )
        )
        oq, tq = data.get(f"dshloop/{size}/query", []), data.get(f"{DQ}/{size}/query", [])
        query_rows.append(compared(f"due query (ms) at {size:,} rows", oq, tq, "due_query_ms", target="flat"))
        query_rows.append(
            [
                f"dshloop's per-tick deadline query (ms) at {size:,}",
                cell(oq, "deadline_query_ms"),
                "n/a",
                "",
                "flat",
                "",
            ]
        )
    values = [value for value in ours_by_size.values() if value]
    if len(values) > 1:
        spread = max(values) / min(values) - 1
        rss_rows.append(
            [
                f"dshloop RSS spread, {sizes['b4_sizes'][0]:,} → {sizes['b4_sizes'][-1]:,}",
                f"{spread:+.1%}",
                "",
                "",
                "within 10%",
                met(spread, 0.10, at_most=True),
            ]
        )
    api = data.get(f"dshloop/{sizes['b4_api_size']}/api", [])
    create_p99 = over_reps(api, "create_p99")[0]
    api_rows = [
        ["loop_create p50 (ms)", cell(api, "create_p50"), "n/a", "", "", ""],
        ["loop_create p99 (ms)", cell(api, "create_p99"), "n/a", "", "≤ 20 ms", met(create_p99, 20, at_most=True)],
        [
            f"loop_list {{}} p50 (ms), ~{sizes['b4_api_size'] // SESSIONS} loops per session",
            cell(api, "list_p50"),
            "n/a",
            "",
            "",
            "",
        ],
        ["loop_list {} p99 (ms)", cell(api, "list_p99"), "n/a", "", "", ""],
        [
            f'loop_list {{"session_id": "global"}} p50 (ms), all {sizes["b4_api_size"]:,}+ loops',
            cell(api, "global_list_p50"),
            "n/a",
            "",
            "",
            "",
        ],
    ]
    return (
        f"## B4 scale\n\n"
        "**Scheduler memory** — RSS summed over the scheduler's process tree (forked workers share pages, "
        "counted for both alike) after it delivered a burst of "
        f"{sizes['b4_burst']:,} occurrences, with the table at each size and the rest due in an hour.\n\n"
        + table(HEADER, rss_rows)
        + "\n\n**Due query** — the query each scheduler runs to find due rows, captured from the product's own "
        "code (`bench/queries.py`) and timed with none due (median of "
        f"{sizes['b4_query_repeat']}): dshloop's claim (`SELECT … FOR UPDATE SKIP LOCKED LIMIT 500` "
        "(`scheduler.claims.CLAIM_BATCH`) on `loop_due_idx`) and django-q2's scheduler pass (`SELECT … FOR UPDATE` of every due Schedule; "
        "`next_run` has no index).\n\n"
        + table(HEADER, query_rows)
        + b4_scrape(data, sizes)
        + f"\n\n**API latency at {sizes['b4_api_size']:,} loops** — `/api/tools/loop_create` and `loop_list` "
        "in-process through the Django test client (token auth, schema validation, service, serialization; "
        "no network), with one `runloops` running. django-q2 has no agent-facing API to compare.\n\n"
        + table(HEADER, api_rows)
    )


def b4_scrape(data: dict, sizes: dict) -> str:
    """What a scrape of GET /metrics costs at each size, and the gauge statement's plan."""
    largest = sizes["b4_sizes"][-1]
    runs = [(f"{size:,}", size, data.get(f"dshloop/{size}/scrape", [])) for size in sizes["b4_sizes"]]
    runs.append((f"{largest:,}, after VACUUM", largest, data.get(f"dshloop/{largest}/scrape_vacuumed", [])))
    runs = [(label, size, reps) for label, size, reps in runs if reps]
    if not runs:
        return ""
    rows = [
        [
            label,
            cell(reps, "get_p50"),
            cell(reps, "get_p99"),
            cell(reps, "gauges_p50"),
            cell(reps, "gauges_p99"),
            cell(reps, "get_backend_cpu_ms"),
            cell(reps, "get_python_cpu_ms"),
            cell(reps, "explain_ms"),
            # The plan of the last repetition: a count of scans, not a median.
            f"{reps[-1]['index_only_scans']} of {len(reps[-1]['scans'])}",
            f"{reps[-1]['heap_fetches']:,}",
            str(reps[-1].get("parallel_workers", "—")),
        ]
        for label, _, reps in runs
    ]
    # The plan at the largest size, from the last repetition (one plan, not a median).
    scan_rows = [
        [
            label,
            scan["node"],
            f"`{scan['index']}`" if scan["index"] else "",
            scan["table"] or "",
            f"{scan['rows']:,}",
            number(scan["ms"]),
            f"{scan['heap_fetches']:,}",
        ]
        for label, size, reps in runs
        if size == largest
        for scan in reps[-1].get("scans", [])
    ]
    return (
        f"\n\n**GET /metrics** — in-process through the Django test client (bearer token, the "
        "counters, the one gauge statement of `monitoring.gauges.read_gauges`, the text format; no network), no "
        f"scheduler running, at each size; p50/p99 of {sizes.get('b4_scrapes', '—')} after a warm-up, and the "
        "gauge statement alone. CPU per scrape: the PostgreSQL backend's (`/proc` of the connection's server "
        "process; the parallel workers a plan launches exit with the query and are not in it) and the "
        "harness's Python. The plan is one EXPLAIN (ANALYZE, BUFFERS) of the statement, saved "
        "in `var/bench/<date>/explain-gauges-*.txt`. The table is only ANALYZEd after each bulk insert, so its "
        "pages are not yet all-visible, as between two autovacuums of a busy table: the planner counts with "
        "sequential scans rather than index-only scans that would visit the heap (heap fetches). The last "
        "row is the largest table after a VACUUM.\n\n"
        + table(
            [
                "loops",
                "GET p50 (ms)",
                "GET p99 (ms)",
                "gauges p50 (ms)",
                "gauges p99 (ms)",
                "PostgreSQL CPU per scrape (ms)",
                "Python CPU per scrape (ms)",
                "EXPLAIN ANALYZE (ms)",
                "index-only scans (plan)",
                "heap fetches (plan)",
                "parallel workers (plan)",
            ],
            rows,
        )
        + (
            f"\n\nThe gauge statement's scans at {largest:,} loops:\n\n"
            + table(
                ["loops", "scan", "index", "table", "rows", "ms (per process if parallel)", "heap fetches"], scan_rows
            )
            if scan_rows
            else ""
        )
    )
