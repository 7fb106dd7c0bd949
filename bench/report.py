"""docs/BENCHMARKS.md from one run's results: machine facts, then one table per benchmark with
dshloop, django-q2, their ratio, the issue's target and whether it was met.

Every number is the median over repetitions; with more than one repetition the range
(min–max) follows it in brackets.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from . import db
from .stats import over_reps

DQ = "django-q2"  # bench.systems.Baseline.name (not imported: rendering needs no Django)


def machine_facts() -> dict:
    cpuinfo, meminfo = Path("/proc/cpuinfo").read_text().splitlines(), Path("/proc/meminfo").read_text().splitlines()
    cpu = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), platform.processor()
    )
    mem_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "postgresql": db.server_version(),
        "python": platform.python_version(),
        "django": version("django"),
        "django-q2": version("django-q2"),
        "croniter": version("croniter"),
        "psycopg": version("psycopg"),
        "load_average_start": os.getloadavg(),
    }


# Formatting ---------------------------------------------------------------------------------------


def number(value: float | None) -> str:
    """About three significant digits, thousands separators, no scientific notation."""
    if value is None:
        return "—"
    size = abs(value)
    if size >= 100 or value == 0:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def cell(reps: list[dict], key: str, scale: float = 1.0) -> str:
    median, low, high = over_reps(reps, key)
    if median is None:
        return "—"
    text = number(median * scale)
    if len([rep for rep in reps if rep.get(key) is not None]) > 1:
        text += f" ({number(low * scale)}–{number(high * scale)})"
    return text


def ratio(ours: list[dict], theirs: list[dict], key: str) -> str:
    a, b = over_reps(ours, key)[0], over_reps(theirs, key)[0]
    if a is None or b is None or b == 0:
        return "—"
    return f"×{number(a / b)}"


HEADER = ["", "dshloop", DQ, "dshloop ÷ django-q2", "target", "met?"]


def compared(
    label: str,
    ours: list[dict],
    theirs: list[dict],
    key: str,
    *,
    scale: float = 1.0,
    target: str = "",
    verdict: str = "",
) -> list[str]:
    """A HEADER row: both systems' medians (with their ranges) and dshloop ÷ django-q2."""
    return [label, cell(ours, key, scale), cell(theirs, key, scale), ratio(ours, theirs, key), target, verdict]


def met(value: float | None, target: float | None, *, at_most: bool) -> str:
    if value is None or target is None:
        return "—"
    return "yes" if (value <= target if at_most else value >= target) else "**no**"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# Sections -----------------------------------------------------------------------------------------


def machine_section(results: dict) -> str:
    m = results["machine"]
    load = lambda values: " / ".join(f"{v:.2f}" for v in values) if values else "—"  # noqa: E731
    rows = [
        ["date", m["date"]],
        ["CPU", f"{m['cpu']}, {m['cores']} cores"],
        ["RAM", f"{m['ram_gib']} GiB"],
        ["kernel", m["kernel"]],
        [
            "load average (1/5/15 min) at start · end",
            f"{load(m['load_average_start'])} · {load(m.get('load_average_end'))}",
        ],
        ["PostgreSQL", f"{m['postgresql']} (same machine, 127.0.0.1)"],
        ["Python", m["python"]],
        ["Django", m["django"]],
        ["django-q2", m["django-q2"]],
        ["croniter", m["croniter"]],
        ["psycopg", m["psycopg"]],
        ["repetitions", str(results["sizes"]["reps"])],
        ["run time", f"{results.get('elapsed_s', 0) / 60:.0f} min"],
    ]
    return "## Machine and versions\n\n" + table(["", ""], rows)


def limit_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("limit")
    if not data:
        return ""
    rows = []
    for script, per_tx in (("claim_one.sql", "1"), ("claim_batch.sql", "100")):
        for clients in sizes["pgbench_clients"]:
            reps = data.get(f"{script}/{clients}", [])
            rows.append([per_tx, str(clients), cell(reps, "tps"), cell(reps, "claims_per_s"), cell(reps, "duplicates")])
    return (
        f"## Physical limit: pgbench\n\n`bench/pgbench/claim_one.sql` and `claim_batch.sql` on a "
        f"{sizes['pgbench_rows']:,}-row loop table (`bench/pgbench/schema.sql`), "
        f"{sizes['pgbench_seconds']} s per run, "
        "`pgbench -M prepared`. A claim locks the earliest due loop (`FOR UPDATE SKIP LOCKED`), moves its "
        "deadline and inserts a run row.\n\n"
        + table(["claims per transaction", "clients", "transactions/s", "claims/s", "duplicates"], rows)
    )


def batched_limit(results: dict) -> float | None:
    data = results["sections"].get("limit", {})
    best = [over_reps(reps, "claims_per_s")[0] for key, reps in data.items() if key.startswith("claim_batch")]
    best = [value for value in best if value is not None]
    return max(best) if best else None


def b1_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("B1")
    if not data:
        return ""
    limit = batched_limit(results)
    blocks = []
    for processes in sizes["b1_processes"]:
        ours, theirs = data.get(f"dshloop/{processes}", []), data.get(f"{DQ}/{processes}", [])
        rate = over_reps(ours, "rate")[0]
        rows = [
            compared(
                "occurrences/s, end to end",
                ours,
                theirs,
                "rate",
                target="≥ 5,000",
                verdict=met(rate, 5000, at_most=False),
            ),
            compared("seconds until all delivered", ours, theirs, "seconds"),
            compared("lateness p50 (s)", ours, theirs, "p50"),
            compared("lateness p99 (s)", ours, theirs, "p99"),
            [
                "delivered",
                cell(ours, "delivered"),
                cell(theirs, "delivered"),
                "",
                f"{sizes['b1_loops']:,}",
                met(over_reps(ours, "delivered")[0], sizes["b1_loops"], at_most=False),
            ],
            [
                "duplicates",
                cell(ours, "duplicates"),
                cell(theirs, "duplicates"),
                "",
                "0",
                met(over_reps(ours, "duplicates")[0], 0, at_most=True),
            ],
        ]
        cpu_keys = ("scheduler_cpu_ms_per_1k", "server_cpu_ms_per_1k")
        if any(over_reps(ours, key)[0] is not None for key in cpu_keys):
            rows += [
                compared("scheduler CPU per 1,000 occurrences (ms)", ours, theirs, cpu_keys[0]),
                compared("PostgreSQL CPU per 1,000 occurrences (ms)", ours, theirs, cpu_keys[1]),
            ]
        if over_reps(ours, "rows_written_per_occurrence")[0] is not None:
            # pgbench's claim (the physical limit above) writes two: the loop and its run.
            rows.append(
                compared(
                    "rows written per occurrence (pgbench's claim: 2)", ours, theirs, "rows_written_per_occurrence"
                )
            )
            spent = sum(over_reps(ours, key)[0] or 0 for key in cpu_keys)
            if spent:
                # Both share the machine's cores: no schedule of the work beats cores ÷ CPU per occurrence.
                rows.append(
                    [
                        f"CPU ceiling on {results['machine']['cores']} cores (occurrences/s)",
                        number(results["machine"]["cores"] * 1e6 / spent),
                        "",
                        "",
                        "",
                        "",
                    ]
                )
        if limit and rate:
            rows.append(
                [
                    "share of the batched pgbench limit",
                    f"{rate / limit:.1%}",
                    "",
                    "",
                    "≥ 10%",
                    met(rate / limit, 0.10, at_most=False),
                ]
            )
        blocks.append(
            f"**{processes} scheduler process{'es' if processes > 1 else ''}** "
            f"(`runloops` × {processes} vs `qcluster` × {processes})\n\n" + table(HEADER, rows)
        )
    return (
        f"## B1 burst: {sizes['b1_loops']:,} due at one instant\n\n"
        "Every loop (`every` 1 h) or Schedule (`MINUTES` 60) falls due at the same instant, a few seconds "
        "after the schedulers are up. Time runs from that instant to each delivery record.\n\n"
        + "\n\n".join(blocks)
        + "\n\n"
        + B1_NOTES
    )


# The hot path as issue 17 left it, and the decisions it measured (in-process, 10,000 occurrences on this
# machine's PostgreSQL, cProfile and /proc CPU times; docs/BENCHMARKS.md keeps them beside each run).
B1_NOTES = (
    "**Where an occurrence goes (issue 17).** A claim (`scheduler.claims.claim_due`) locks up to 500 due loops "
    "(`FOR UPDATE SKIP LOCKED`, 13 columns), computes each next deadline, moves the loops with one "
    "set-based UPDATE, inserts the runs with one INSERT and enqueues one django-q2 task per 250 runs, in "
    "one transaction. With the embedded host a delivery (`scheduler.delivery.deliver_runs`) is then one "
    "transaction: lock the runs and their loops, read their sessions, insert the inbox messages, and "
    "record the runs and loops in set-based UPDATEs; the row locks are the lease, so the separate "
    "lease-taking UPDATE of each run is gone, and a crash rolls the messages back with the records "
    "(`attempt` counts hand-outs, so a run whose driver keeps dying is still given up). The hot path "
    "reads rows, not model instances (`scheduler.rows`). Rows written per occurrence: the loop twice (claim, "
    "record), the run twice (insert, record), the message once, plus a task row per 250; the LIKE-only "
    "`_like` indexes Django adds on PostgreSQL and the run table's redundant `loop_id` index are dropped "
    "(a run has 4 indexes instead of 8). Measured in-process before → after these changes, per "
    "occurrence: claim 87 → 63 µs, delivery 200 → 130 µs of Python CPU, PostgreSQL 190 → 155 µs. "
    "**Decisions.** PostgreSQL server-side binding (`server_side_binding`): no gain measured (Python "
    "CPU 199–213 µs with it, 196–208 without; PostgreSQL 160–164 vs 154–156), because the batch "
    "statements already bind on the server through `core.bulk`'s arrays: left off. The log line per "
    "occurrence costs about 13 µs of the scheduler's CPU (measured with the logger silenced): kept, "
    "because operators search these lines (issue 18 makes them JSON)."
)


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
        [
            "duplicates",
            cell(ours, "duplicates"),
            cell(theirs, "duplicates"),
            "",
            "0",
            met(over_reps(ours, "duplicates")[0], 0, at_most=True),
        ],
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
    """dshloop alone at five times B2's load (issue 17): django-q2 has no row at this rate."""
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
        "dshloop alone** (issue 17; django-q2 repeats a schedule at most once a minute, and B1 shows it delivers "
        "fewer than 200 occurrences a second)\n\n" + table(["", "dshloop", "target", "met?"], rows)
    )


def b3_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("B3")
    if not data:
        return ""
    ours, theirs = data.get("dshloop", []), data.get(DQ, [])
    rows = [
        compared(
            "transactions/min (≈ statements, see above)",
            ours,
            theirs,
            "transactions_per_min",
            target="≤ 10",
            verdict=met(over_reps(ours, "transactions_per_min")[0], 10, at_most=True),
        ),
        compared("new connections/min", ours, theirs, "connections_per_min"),
        compared("CPU seconds/min (scheduler process tree)", ours, theirs, "cpu_s_per_min"),
        compared(
            "CPU % of one core",
            ours,
            theirs,
            "cpu_percent",
            target="≤ 1%",
            verdict=met(over_reps(ours, "cpu_percent")[0], 1, at_most=True),
        ),
    ]
    return (
        f"## B3 idle cost: {sizes['b3_loops']:,} loops, none due for an hour\n\n"
        f"One scheduler process each, measured for {sizes['b3_seconds']} s after start-up. Transactions and new "
        "connections are `pg_stat_database` deltas of the system's own database: `pg_stat_statements` needs "
        "`shared_preload_libraries`, i.e. a restart of the shared server, which the bench does not do. Each "
        "autocommit statement is one transaction, so for an idle scheduler (single reads and single updates) "
        "transactions ≈ statements; a transaction block counts once. CPU is user + system time of the "
        "scheduler's whole process tree from `/proc` (PostgreSQL's own backends are not included); on this VM "
        "the CPU time of an idle process tree varies several-fold from run to run, so only the median of a "
        "full run on a quiet machine means much.\n\n" + table(HEADER, rows) + b3_scraped(ours, sizes)
    )


def b3_scraped(reps: list[dict], sizes: dict) -> str:
    """dshloop's idle cost with GET /metrics scraped as Prometheus would (issue 18)."""
    if not any(rep.get("scraped_transactions_per_min") is not None for rep in reps):
        return ""
    every = sizes.get("b3_scrape_every_s", 15)
    cpu = over_reps(reps, "scraped_total_cpu_percent")[0]
    rows = [
        [
            "transactions/min, every connection to the database",
            cell(reps, "transactions_per_min"),
            cell(reps, "scraped_transactions_per_min"),
            "",
            "",
        ],
        ["of which one scrape (transactions)", "", cell(reps, "transactions_per_scrape"), "", ""],
        ["new connections/min", cell(reps, "connections_per_min"), cell(reps, "scraped_connections_per_min"), "", ""],
        ["scheduler CPU % of one core", cell(reps, "cpu_percent"), cell(reps, "scraped_cpu_percent"), "", ""],
        ["web process CPU seconds/min", "", cell(reps, "scraped_web_cpu_s_per_min"), "", ""],
        [
            "scheduler + web process CPU % of one core",
            cell(reps, "cpu_percent"),
            cell(reps, "scraped_total_cpu_percent"),
            "≤ 1%",
            met(cpu, 1, at_most=True),
        ],
        [
            "PostgreSQL CPU seconds/min, the database's backends",
            cell(reps, "backend_cpu_s_per_min"),
            cell(reps, "scraped_backend_cpu_s_per_min"),
            "",
            "",
        ],
        ["GET /metrics over HTTP, p50 (ms)", "", cell(reps, "scraped_scrape_ms_p50"), "", ""],
        ["GET /metrics over HTTP, max (ms)", "", cell(reps, "scraped_scrape_ms_max"), "", ""],
    ]
    return (
        f"\n\n**With a scrape every {every} s (issue 18), dshloop alone** — the same `runloops`, a second "
        f"{sizes['b3_seconds']} s window right after the first, beside a web process (uvicorn on `dshloop.asgi` as "
        "`manage.py serve` runs it, without the scheduler serve supervises) whose `GET /metrics` the harness "
        f"fetches over HTTP every {every} s with a `manage` token, after a warm-up that opened the web process's "
        "persistent connections. The transactions are every connection's, the scheduler's included: B3's "
        "≤ 10/min is the scheduler's own, which a scrape does not change (it never wakes the clock), so the "
        "scrapes' own transactions are shown beside it rather than held to it. The CPU "
        "target is applied to the scheduler and the web process together. PostgreSQL CPU is that of the "
        "backends connected to the database at either end of a window (`/proc`), both windows.\n\n"
        + table(["", "idle (above)", f"with a scrape every {every} s", "target", "met?"], rows)
    )


def b4_section(results: dict, sizes: dict) -> str:
    data = results["sections"].get("B4")
    if not data:
        return ""
    rss_rows, query_rows = [], []
    ours_by_size = {}
    for size in sizes["b4_sizes"]:
        ours, theirs = data.get(f"dshloop/{size}/rss", []), data.get(f"{DQ}/{size}/rss", [])
        ours_by_size[size] = over_reps(ours, "rss_mb")[0]
        # issue 17: runloops no heavier than qcluster.
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
            f"loop_list {{}} p50 (ms), ~{sizes['b4_api_size'] // 1000} loops per session",
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
    """What a scrape of GET /metrics costs at each size (issue 18), and the gauge statement's plan."""
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
        f"\n\n**GET /metrics (issue 18)** — in-process through the Django test client (bearer token, the "
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


# What to make of a missed target. Written from the code's structure, not from one run's numbers:
# each says what bounds the measure and what would move it.
WHEN_MISSED = {
    "B1": "**B1 throughput.** The burst is bound by CPU, not by locks or round trips: the CPU rows above are "
    "what the schedulers' processes and the PostgreSQL server spend per 1,000 occurrences, and on cores "
    "shared by both no arrangement of the work beats the CPU ceiling row; more `runloops` processes add "
    "contention (four clocks competing for the same due rows, twelve processes on two cores), not cores. "
    "Where an occurrence's CPU goes is in the B1 notes above. What would reach the target from here: for the "
    "embedded host, delivering in the claim's own transaction (the run inserted already delivered and the "
    "loop updated once: three rows per occurrence instead of five, and no task queue), and reading the hot "
    "path's timestamps as integers (Django's timestamp loader is Python code, about 2 µs a value).",
    "B2": "**B2 lateness.** A delivery waits for the clock to wake (a timer on the earliest deadline, at least "
    "`MIN_SLEEP` 50 ms apart), the claim to commit, the pusher to be woken by NOTIFY, a worker to take the "
    "task and the batch to be delivered and recorded. On a loaded two-core machine each hand-off between "
    "processes costs scheduling delay; p99 reflects the busiest moments.",
    "B3": "**B3 idle cost.** An idle `runloops` wakes every `MAX_SLEEP` (30 s): heartbeat UPDATE (every 25 s), "
    "the two `next_wakeup` MIN() queries, and the pusher's look at the queue every `IDLE_RECHECK` (30 s): "
    "about nine transactions a minute. Its CPU floor is in Python wake-ups, not SQL: django-q2's guard "
    "(sentinel) process wakes twice a second to check its processes and save its status, and psycopg "
    "polls each of the two waiting LISTEN connections (clock and pusher) every 0.1 s "
    "(`psycopg.connection._WAIT_INTERVAL`), about 0.15 CPU-s/min each measured alone. Fewer wake-ups "
    "(one listener per process, waiting on the socket with `select()` instead of `notifies(timeout=…)`, "
    "a longer guard cycle) would lower it.",
    "B4": "**B4.** RSS can grow with the table only if something holds per-loop state (the clock keeps none: "
    "it asks PostgreSQL for the earliest deadline); loop_create is one INSERT plus validation, target "
    "resolution (a session lookup) and a NOTIFY at commit, so a slow p99 there is the machine's or the "
    "database's, and shows in the due-query times too. RSS against qcluster (issue 17): `runloops` loads only "
    "the apps it runs and imports the clock, housekeeping and delivery path only in the processes that use "
    "them, after the cluster forks; before the fork the two are level (about 52 MiB each), and main plus "
    "sentinel (dshloop's clock and housekeeping run in its main process, qcluster's scheduler in its "
    "sentinel) are even. What is left is in the workers: qcluster's are recycled after 500 tasks, and its "
    "burst is 1,000 one-occurrence tasks, so they are measured freshly forked, having run nothing (3.1 MiB "
    "of the gap; measured with recycling off, qcluster's tree is 279.9 MiB), and each dshloop worker holds "
    "the delivery code it runs (about 0.75 MiB). Recycling dshloop's workers as often would hide that in the "
    "number without saving memory.",
}


PREVIOUS = Path(__file__).with_name("previous.json")

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
        "`python -m bench.run --lists`, are in [BENCHMARKS-LISTS.md](BENCHMARKS-LISTS.md).\n\n"
        + table(["", f"previous ({previous['date']})", "this run", "this ÷ previous"], rows)
    )


def findings(results: dict, sizes: dict) -> str:
    """The WHEN_MISSED paragraphs of the benchmarks that missed a target in this run."""
    sections = results["sections"]
    missed = []
    b1 = sections.get("B1", {})
    if any((over_reps(b1.get(f"dshloop/{p}", []), "rate")[0] or 0) < 5000 for p in sizes["b1_processes"]) and b1:
        missed.append("B1")
    b2 = sections.get("B2", {})
    if any((over_reps(b2.get(key, []), "p99")[0] or 0) > 0.250 for key in ("dshloop", "dshloop/heavy")):
        missed.append("B2")
    b3 = sections.get("B3", {}).get("dshloop", [])
    if b3 and ((over_reps(b3, "transactions_per_min")[0] or 0) > 10 or (over_reps(b3, "cpu_percent")[0] or 0) > 1):
        missed.append("B3")
    b4 = sections.get("B4", {})
    rss = [over_reps(b4.get(f"dshloop/{size}/rss", []), "rss_mb")[0] for size in sizes["b4_sizes"]]
    rss = [value for value in rss if value]
    api = b4.get(f"dshloop/{sizes['b4_api_size']}/api", [])
    heavier = any(
        (over_reps(b4.get(f"dshloop/{size}/rss", []), "rss_mb")[0] or 0)
        > (over_reps(b4.get(f"{DQ}/{size}/rss", []), "rss_mb")[0] or float("inf"))
        for size in sizes["b4_sizes"]
    )
    if (len(rss) > 1 and max(rss) / min(rss) - 1 > 0.10) or (over_reps(api, "create_p99")[0] or 0) > 20 or heavier:
        missed.append("B4")
    if not missed:
        return ""
    return "## Targets missed in this run, and why\n\n" + "\n\n".join(WHEN_MISSED[key] for key in missed)


def render(results: dict) -> str:
    sizes = results["sizes"]
    parts = ["# Benchmarks (issue 7)"]
    if results.get("quick"):
        parts.append(
            "> **Quick, noisy run — not the benchmark.** Produced by `python -m bench.run --quick` "
            "(`make bench QUICK=1`) with tiny sizes and one repetition, while other test suites ran on "
            "the same two cores. It shows the harness works and the shape of the comparison, no more: at "
            "these sizes fixed delays dominate B1 (django-q2's ~30 s scheduler cycle, dshloop's start of a "
            "batch), and B2's window is shorter than django-q2's one-minute period. Replace it with a full "
            "`make bench` on a quiet machine."
        )
    parts.append(
        "dshloop (`manage.py runloops`) and its peer, django-q2's own `Schedule` + `manage.py qcluster` "
        "(`bench/baseline_settings.py`: ORM broker, `catch_up=False`, `CONN_MAX_AGE=60`, `save_limit=-1`, the same "
        "`workers`/`queue_limit`/`bulk`/`poll` as dshloop's `Q_CLUSTER`), run in the same `python -m bench.run` "
        "on the same PostgreSQL, each in its own database, interleaved repetition by repetition. Schedulers are "
        "real processes started as an operator would and stopped with SIGTERM; rows are bulk-inserted and "
        "ANALYZEd. Both do the same work per occurrence: dshloop delivers to a session inbox on its embedded host "
        "and records the run; django-q2 runs `bench.tasks.record`, which records the run. End to end = scheduled "
        "instant → delivery record (dshloop `LoopRun.finished_at`; the task's recorded time). Duplicates = the same "
        "occurrence recorded twice. Ratios are dshloop ÷ django-q2 on the medians."
    )
    for section in (
        machine_section(results),
        previous_section(results),
        limit_section(results, sizes),
        b1_section(results, sizes),
        b2_section(results, sizes),
        b3_section(results, sizes),
        b4_section(results, sizes),
        findings(results, sizes),
    ):
        if section:
            parts.append(section)
    parts.append(
        "## Reproduce\n\n    make bench            # full size, ~50 min; on a quiet machine\n"
        "    make bench QUICK=1    # tiny sizes, ~7 min: checks the harness\n\n"
        "Raw numbers per repetition and scheduler logs: `var/bench/<date>/`."
    )
    return "\n\n".join(parts) + "\n"
