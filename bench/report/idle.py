"""B3's section: the idle cost of both systems, then dshloop's with GET /metrics scraped."""

from __future__ import annotations

from bench.stats import over_reps

from .format import DQ, HEADER, cell, compared, met, table


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
    """dshloop's idle cost with GET /metrics scraped as Prometheus would."""
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
        f"\n\n**With a scrape every {every} s, dshloop alone** — the same `runloops`, a second "
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
