"""What a scrape of GET /metrics costs: over HTTP beside an idle scheduler (B3), and in-process
at each table size with the gauge statement's plan (B4)."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

from .api_token import api_token
from .proc_stats import cpu_seconds
from .queries import captured_sql
from .stats import percentile
from .systems import System
from .timing import now


def scrape_over_http(url: str, token: str) -> float:
    """One GET /metrics as Prometheus sends it; milliseconds until the whole body is read."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:  # raises on anything but 2xx
        body = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if b"dshloop_loops" not in body:
        raise RuntimeError(f"GET {url} answered without the gauges: {body[:300]!r}")
    return elapsed


SCAN = re.compile(
    r"->\s+(?P<node>(?:Parallel )?(?:Index Only Scan|Index Scan|Seq Scan|Bitmap Heap Scan|Bitmap Index Scan))"
    r"(?: using (?P<index>\S+))? on (?P<relation>\S+).*?actual time=[\d.]+\.\.(?P<ms>[\d.]+) rows=(?P<rows>\d+)"
    r" loops=(?P<loops>\d+)"
)


def explain_summary(plan: str) -> dict:
    """The scans of an EXPLAIN (ANALYZE, BUFFERS) text: node, index, rows, ms and heap fetches each."""
    scans = []
    for line in plan.splitlines():
        if match := SCAN.search(line):
            scan = match.groupdict()
            scans.append(
                {
                    "node": scan["node"],
                    # "Bitmap Index Scan on <index>" names the index where the others name the table.
                    "index": scan["relation"] if scan["node"] == "Bitmap Index Scan" else scan["index"],
                    "table": None if scan["node"] == "Bitmap Index Scan" else scan["relation"],
                    "rows": int(scan["rows"]) * int(scan["loops"]),
                    "ms": float(scan["ms"]),
                    "heap_fetches": 0,
                }
            )
        elif scans and (fetches := re.search(r"Heap Fetches: (\d+)", line)):
            scans[-1]["heap_fetches"] += int(fetches.group(1))
    execution = re.search(r"Execution Time: ([\d.]+) ms", plan)
    return {
        "execution_ms": float(execution.group(1)) if execution else None,
        "scans": scans,
        "index_only": sum(scan["node"].endswith("Index Only Scan") for scan in scans),
        "seq_scans": sum(scan["node"].endswith("Seq Scan") for scan in scans),
        "heap_fetches": sum(scan["heap_fetches"] for scan in scans),
        "workers": sum(int(n) for n in re.findall(r"Workers Launched: (\d+)", plan)),
    }


def scrape_cost(system: System, *, repeat: int, explain_path: Path) -> dict:
    """GET /metrics against the current table, in-process through the Django test client (token
    auth, the counters, the gauge statement, the text format; no network), and the gauge statement
    alone (monitoring.gauges.read_gauges): wall ms, the harness's CPU (Python) and the database backend's
    CPU (/proc of the connection's server process; parallel workers, which exit with each query, are
    not in it: the plan counts them) per call; and the statement's EXPLAIN (ANALYZE,
    BUFFERS), written to `explain_path`."""
    from django.db import connection
    from django.test import Client

    from monitoring.gauges import read_gauges

    client, token = Client(), api_token("bench-metrics", "manage")
    headers = {"Authorization": f"Bearer {token}"}

    def get() -> None:
        response = client.get("/metrics", headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"GET /metrics answered {response.status_code}: {response.content[:300]!r}")

    def timed(run) -> dict:
        run()  # warm-up: imports, the connection, the plan
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            [backend] = cursor.fetchone()
        values, backend_before, python_before = [], cpu_seconds([backend]), time.process_time()
        for _ in range(repeat):
            started = time.perf_counter()
            run()
            values.append((time.perf_counter() - started) * 1000)
        backend_ms = (cpu_seconds([backend]) - backend_before) * 1000 / repeat
        python_ms = (time.process_time() - python_before) * 1000 / repeat
        return {
            "p50": percentile(values, 50),
            "p99": percentile(values, 99),
            "backend_cpu_ms": backend_ms,
            "python_cpu_ms": python_ms,
        }

    get_ms, gauges_ms = timed(get), timed(lambda: read_gauges(now()))
    # The gauge statement is the last; what comes before it (SET LOCAL …) is its setting, kept for the plan.
    *settings, statement = captured_sql(lambda: read_gauges(now()))
    with system.conn.transaction():
        for setting in settings:
            system.conn.execute(setting)
        plan = "\n".join(row[0] for row in system.conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement))
    explain_path.parent.mkdir(parents=True, exist_ok=True)
    explain_path.write_text(statement.strip() + "\n\n" + plan + "\n")
    summary = explain_summary(plan)
    return {
        "get_p50": get_ms["p50"],
        "get_p99": get_ms["p99"],
        "get_backend_cpu_ms": get_ms["backend_cpu_ms"],
        "get_python_cpu_ms": get_ms["python_cpu_ms"],
        "gauges_p50": gauges_ms["p50"],
        "gauges_p99": gauges_ms["p99"],
        "gauges_backend_cpu_ms": gauges_ms["backend_cpu_ms"],
        "explain_ms": summary["execution_ms"],
        "index_only_scans": summary["index_only"],
        "seq_scans": summary["seq_scans"],
        "heap_fetches": summary["heap_fetches"],
        "parallel_workers": summary["workers"],
        "scans": summary["scans"],
        "explain": explain_path.name,
    }
