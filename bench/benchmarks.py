"""The measurements of issue 7, each one repetition for one system; bench.run repeats and
interleaves them (dshloop, django-q2, dshloop, …) so that machine noise hits both alike.

Every end-to-end time runs from the scheduled instant to the delivery record: LoopRun.finished_at
for dshloop, the bench task's recorded time for django-q2 (bench.tasks).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from . import db
from .procs import cpu_seconds, postgres_pids, rss_bytes, schedulers, wait_for, web_server
from .queries import captured_sql, time_queries
from .stats import percentile, summary
from .systems import SESSIONS, System, session_id

PGBENCH_DIR = Path(__file__).resolve().parent / "pgbench"
HOUR = 3600
# Stats of a backend reach pg_stat_database within PGSTAT_IDLE_INTERVAL (10 s) of its last
# query; waiting a bit longer keeps the harness's own set-up queries out of the idle window.
STATS_SETTLE_S = 12


def now() -> datetime:
    return datetime.now(UTC)


def sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - now()).total_seconds()))


def lead_time(rows: int) -> float:
    """Seconds to set up `rows` rows (insert, ANALYZE) before they fall due, with a margin."""
    return 3.0 + rows / 4000


# Physical limit -----------------------------------------------------------------------------------


def pgbench(*, script: str, clients: int, seconds: int, rows: int) -> dict:
    """One timed pgbench run of a claim script on a fresh table of `rows` due loops."""
    db.run_psql(db.PGBENCH_DB, PGBENCH_DIR / "schema.sql", rows=rows)
    result = subprocess.run(
        [
            "pgbench",
            "-n",
            "-M",
            "prepared",
            "-c",
            str(clients),
            "-j",
            str(min(clients, os.cpu_count() or 1)),
            "-T",
            str(seconds),
            "-f",
            str(PGBENCH_DIR / script),
            db.url(db.PGBENCH_DB),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", result.stdout).group(1))
    transactions = int(re.search(r"number of transactions actually processed: (\d+)", result.stdout).group(1))
    with db.connect(db.PGBENCH_DB) as conn:
        claims, duplicates = conn.execute(
            "SELECT count(*), count(*) - count(DISTINCT (loop_id, scheduled_at)) FROM pgb_run"
        ).fetchone()
    return {"tps": tps, "claims_per_s": tps * claims / max(transactions, 1), "duplicates": duplicates}


# B1 burst -----------------------------------------------------------------------------------------


def burst(system: System, *, loops: int, processes: int, log_dir: Path, label: str) -> dict:
    """`loops` occurrences due at one instant: seconds until the last is delivered, occurrences/s."""
    system.reset()
    # The slowest expected case (django-q2 at ~20/s, FIELD-NOTES) must fit, with its 30 s pass.
    timeout = 60 + loops / 15
    with schedulers(system, processes, log_dir, label) as started:
        # Rows written from here on, less the `loops` rows the set-up inserts (the schedulers'
        # start-up writes not yet reported count too: a few rows in 10,000 occurrences).
        written_before = db.reported_rows_written(system.conn, system.database)
        due_at = now() + timedelta(seconds=max(lead_time(loops), system.burst_offset_s))
        system.add_every(loops, period_s=HOUR, first_at=due_at, spread_s=0)
        system.analyze()
        system.wake()
        setup_late = now() > due_at  # the instant passed during set-up: the numbers would flatter
        # Where the two cores go: the schedulers' CPU and the database server's, from here (set-up
        # done) to the last delivery; the harness's polling adds a little to the server's.
        trees = [pid for process in started for pid in process.tree()]
        cpu_before, server_before = cpu_seconds(trees), cpu_seconds(postgres_pids())
        complete = wait_for(
            lambda: system.delivered_count() >= loops, timeout=(due_at - now()).total_seconds() + timeout, interval=0.25
        )
        waited_until = now()
        trees = [pid for process in started for pid in process.tree()]
        scheduler_cpu = cpu_seconds(trees) - cpu_before
        server_cpu = cpu_seconds(postgres_pids()) - server_before
        # Every row the burst wrote (runs, messages, loops, the task queue, heartbeats), once the
        # backends have reported them; pgbench's claim writes two (bench/pgbench/claim_one.sql).
        written = db.settled_rows_written(system.database) - written_before - loops
    lateness = [(delivered - scheduled).total_seconds() for scheduled, delivered in system.deliveries()]
    # All share one scheduled instant, so the last lateness is the time to deliver them all;
    # an incomplete run counts its deliveries over the whole wait instead.
    seconds = max(lateness, default=0.0) if complete else (waited_until - due_at).total_seconds()
    return {
        "delivered": len(lateness),
        "expected": loops,
        "complete": complete,
        "setup_late": setup_late,
        "seconds": seconds,
        "rate": len(lateness) / seconds if seconds > 0 else None,
        "p50": percentile(lateness, 50),
        "p99": percentile(lateness, 99),
        "scheduler_cpu_ms_per_1k": scheduler_cpu * 1e6 / max(len(lateness), 1),
        "server_cpu_ms_per_1k": server_cpu * 1e6 / max(len(lateness), 1),
        "rows_written_per_occurrence": written / max(len(lateness), 1),
        "duplicates": system.duplicates(),
    }


# B2 lateness --------------------------------------------------------------------------------------


def expected_occurrences(count: int, *, first_at: datetime, period_s: float, spread_s: float, end: datetime) -> int:
    """Grid points in [first_at, end) of `count` rows staggered like System.add_every."""
    total = 0
    for i in range(count):
        first = first_at + timedelta(seconds=i * spread_s / count)
        if first < end:
            total += math.ceil((end - first).total_seconds() / period_s)
    return total


def steady(system: System, *, loops: int, period_s: int, seconds: int, log_dir: Path, label: str) -> dict:
    """`loops` staggered loops for `seconds`: lateness of every occurrence scheduled in the window."""
    period = max(period_s, system.min_period_s)  # django-q2 cannot express less than a minute
    system.reset()
    with schedulers(system, 1, log_dir, label):
        start = now() + timedelta(seconds=lead_time(loops))
        system.add_every(loops, period_s=period, first_at=start, spread_s=period)
        system.analyze()
        system.wake()
        end = start + timedelta(seconds=seconds)
        sleep_until(end)
        # Then let it finish what fell due in the window (django-q2 needs its next pass).
        settled = wait_for(lambda: system.settled(end), timeout=max(90.0, seconds), interval=0.5)
    lateness = [
        (delivered - scheduled).total_seconds()
        for scheduled, delivered in system.deliveries()
        if start <= scheduled < end
    ]
    expected = expected_occurrences(loops, first_at=start, period_s=period, spread_s=period, end=end)
    return {
        "period_s": period,
        "expected": expected,
        "delivered": len(lateness),
        "not_delivered": max(0, expected - len(lateness)),
        "settled": settled,
        "load_per_s": expected / seconds,
        **summary(lateness),
        "duplicates": system.duplicates(),
    }


# B3 idle cost -------------------------------------------------------------------------------------


def backends_cpu(database: str) -> dict[int, float]:
    """CPU seconds so far of each server process connected to `database`."""
    return {pid: cpu_seconds([pid]) for pid in db.backend_pids(database)}


def idle_window(system: System, scheduler, *, seconds: float, web=None, scrape=None, every_s: float = 0) -> dict:
    """One measured window of an idle scheduler: transactions, new connections and CPU per minute,
    of the scheduler's process tree and of the database's backends (the processes connected at
    either end of the window; a backend that starts and exits inside it is missed, which the new
    connections show). With `scrape`, call it every `every_s` s, at the middle of each slot (a
    scrape's statistics reach pg_stat_database well before the window ends), and count `web`'s CPU."""
    before, started = db.counters(system.database), time.monotonic()
    cpu_before, backends_before = cpu_seconds(scheduler.tree()), backends_cpu(system.database)
    web_before = cpu_seconds(web.tree()) if web else 0.0
    scrape_ms = []
    if scrape:
        for slot in range(int(seconds // every_s)):
            time.sleep(max(0.0, started + (slot + 0.5) * every_s - time.monotonic()))
            scrape_ms.append(scrape())
    time.sleep(max(0.0, started + seconds - time.monotonic()))
    after, cpu_after, backends_after = (
        db.counters(system.database),
        cpu_seconds(scheduler.tree()),
        backends_cpu(system.database),
    )
    web_after = cpu_seconds(web.tree()) if web else 0.0
    elapsed = time.monotonic() - started
    per_minute = 60 / elapsed
    cpu = (cpu_after - cpu_before) * per_minute
    server = sum(value - backends_before.get(pid, 0.0) for pid, value in backends_after.items()) * per_minute
    result = {
        "transactions_per_min": (after["transactions"] - before["transactions"]) * per_minute,
        "connections_per_min": (after["sessions"] - before["sessions"]) * per_minute,
        "cpu_s_per_min": cpu,
        "cpu_percent": cpu / 60 * 100,
        "backend_cpu_s_per_min": server,
        "window_s": elapsed,
    }
    if scrape:
        result |= {
            "scrapes": len(scrape_ms),
            "scrape_ms_p50": percentile(scrape_ms, 50),
            "scrape_ms_max": max(scrape_ms, default=None),
            "web_cpu_s_per_min": (web_after - web_before) * per_minute,
        }
    return result


def manage_token(name: str) -> str:
    """A fresh bearer token with the `manage` scope (GET /metrics), made by the product's service."""
    from tokens.services import token_create

    _, raw = token_create(name=name, scopes=["manage"])
    return raw


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


def idle(
    system: System, *, loops: int, seconds: int, log_dir: Path, label: str, scrape_every_s: float | None = None
) -> dict:
    """`loops` loops none due for an hour: transactions, new connections and CPU per minute.

    With `scrape_every_s` (dshloop only, issue 18), a second window of the same scheduler follows
    with a web process (uvicorn, no scheduler of its own) scraped at GET /metrics that often, as
    Prometheus would: its numbers are the first window's keys prefixed `scraped_`.
    """
    system.reset()
    system.add_every(loops, period_s=HOUR, first_at=now() + timedelta(hours=1), spread_s=HOUR)
    system.analyze()
    with schedulers(system, 1, log_dir, label) as [process]:
        time.sleep(STATS_SETTLE_S)  # past start-up, and the harness's queries are counted already
        result = idle_window(system, process, seconds=seconds)
        if scrape_every_s:
            token = manage_token("bench-scrape")
            with web_server(system, log_dir / f"web-{label}.log") as (web, base):
                scrape = lambda: scrape_over_http(base + "/metrics", token)  # noqa: E731
                # Warm-up: imports, and the persistent connection of each thread that will answer (a2wsgi
                # hands requests to a pool of threads, and a new connection runs set-up queries of its own).
                for _ in range(3):
                    scrape()
                    time.sleep(1)
                time.sleep(STATS_SETTLE_S)
                scraped = idle_window(system, process, seconds=seconds, web=web, scrape=scrape, every_s=scrape_every_s)
            result |= {f"scraped_{key}": value for key, value in scraped.items()}
            result["scraped_total_cpu_percent"] = (scraped["cpu_s_per_min"] + scraped["web_cpu_s_per_min"]) / 60 * 100
            # What one scrape adds, against the scheduler's own rate in the first window.
            if scraped["scrapes"]:
                scheduler_share = result["transactions_per_min"] * scraped["window_s"] / 60
                total = scraped["transactions_per_min"] * scraped["window_s"] / 60
                result["transactions_per_scrape"] = (total - scheduler_share) / scraped["scrapes"]
    return result


# B4 scale -----------------------------------------------------------------------------------------


def grow(system: System, *, have: int, size: int) -> None:
    """Top the table up to `size` rows, none due for an hour."""
    if size > have:
        system.add_every(size - have, period_s=HOUR, first_at=now() + timedelta(hours=1), spread_s=HOUR, start=have)
    system.analyze()


def due_query_ms(system: System, *, repeat: int) -> dict:
    """The scheduler's due queries against the current table (none due): median ms of each."""
    return {
        name: percentile(time_queries(system.conn, statements, repeat=repeat), 50)
        for name, statements in system.due_queries().items()
    }


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

    client, token = Client(), manage_token("bench-metrics")
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


def resident(system: System, *, burst_rows: int, offset: int, log_dir: Path, label: str) -> dict:
    """RSS of a scheduler (its whole process tree) after it delivered a small burst."""
    with schedulers(system, 1, log_dir, label) as [process]:
        before = system.delivered_count()
        system.make_due(offset, burst_rows, now())
        system.wake()
        complete = wait_for(
            lambda: system.delivered_count() >= before + burst_rows, timeout=120 + burst_rows / 15, interval=0.25
        )
        time.sleep(1)  # let the workers return to idle
        rss = rss_bytes(process.tree())
        main = rss_bytes([process.pid])
    return {"rss_mb": rss / 2**20, "main_rss_mb": main / 2**20, "burst_complete": complete}


def api_latency(*, creates: int, lists: int, global_lists: int) -> dict:
    """loop_create and loop_list through the API in-process (Django test client): auth, schema,
    service and serialization, as an agent's call sees it minus the network."""
    from django.test import Client

    from tokens.services import token_create

    _, raw = token_create(name="bench", scopes=["tools"])
    client = Client()

    def call(tool: str, body: dict, caller: str) -> float:
        started = time.perf_counter()
        response = client.post(
            f"/api/tools/{tool}",
            data=json.dumps(body),
            content_type="application/json",
            headers={"Authorization": f"Bearer {raw}", "X-DSH-Session-Id": caller},
        )
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{tool} answered {response.status_code}: {response.content[:300]!r}")
        return elapsed

    def create(i: int) -> float:
        body = {"prompt": f"bench create {i}", "schedule": {"kind": "every", "every_seconds": HOUR}}
        return call("loop_create", body, session_id(i % SESSIONS))

    for i in range(5):  # warm-up: imports, URL resolver, first connection
        create(i), call("loop_list", {}, session_id(i))
    create_ms = [create(i) for i in range(creates)]
    list_ms = [call("loop_list", {}, session_id(i % SESSIONS)) for i in range(lists)]
    global_ms = [call("loop_list", {"session_id": "global"}, session_id(0)) for _ in range(global_lists)]
    return {
        "create_p50": percentile(create_ms, 50),
        "create_p99": percentile(create_ms, 99),
        "list_p50": percentile(list_ms, 50),
        "list_p99": percentile(list_ms, 99),
        "global_list_p50": percentile(global_ms, 50),
    }


# Lists at 100,000 loops (issue 17) ----------------------------------------------------------------


def fill_lists(system: System, *, loops: int, sessions: int) -> None:
    """`loops` loops in every state and schedule kind a list shows (and 0.5% completed, which lists
    leave out), and `sessions` session headers with titles, spread over time; then ANALYZE."""
    system.reset()  # and the first SESSIONS target sessions
    system.add_every(loops, period_s=HOUR, first_at=now() + timedelta(minutes=5), spread_s=HOUR)
    # By the loop's number i (loop_bench_<i>): a mix a long-running registry would hold.
    system.conn.execute(
        """
        UPDATE loops_loop AS l SET
            kind = CASE WHEN n % 10 = 4 THEN 'cron' WHEN n % 10 = 5 OR n % 200 = 9 THEN 'after' ELSE 'every' END,
            every_seconds = CASE WHEN n % 10 IN (4, 5) OR n % 200 = 9 THEN NULL ELSE every_seconds END,
            after_seconds = CASE WHEN n % 10 = 5 OR n % 200 = 9 THEN 86400 END,
            cron_expr = CASE WHEN n % 10 = 4 THEN '30 9 * * 1-5' ELSE '' END,
            tz = CASE WHEN n % 20 = 4 THEN 'Europe/Berlin' ELSE '' END,
            session_id = CASE WHEN n % 25 = 7 THEN 'new' WHEN n % 25 = 8 THEN 'self' ELSE session_id END,
            preset = CASE WHEN n % 25 = 7 THEN 'coder' ELSE '' END,
            state = CASE WHEN n % 20 = 1 THEN 'paused' WHEN n % 50 = 2 THEN 'failed'
                         WHEN n % 200 = 9 THEN 'completed' WHEN n % 500 = 3 THEN 'running' ELSE 'scheduled' END,
            next_at = CASE WHEN n % 20 = 1 OR n % 50 = 2 OR n % 200 = 9 THEN NULL
                           WHEN n % 100 = 3 THEN date_trunc('milliseconds', now()) - interval '5 minutes'
                           ELSE next_at END,
            paused_at = CASE WHEN n % 20 = 1 THEN created_at END,
            pause_reason = CASE WHEN n % 20 = 1 THEN 'operator' ELSE '' END,
            last_run_at = CASE WHEN n % 10 IN (2, 6) OR n % 200 = 9 THEN created_at END,
            last_result = CASE WHEN n % 10 = 2 THEN 'failed' WHEN n % 10 = 6 OR n % 200 = 9 THEN 'delivered'
                               ELSE '' END,
            last_error = CASE WHEN n % 10 = 2 THEN 'The host knows no session ses_gone.' ELSE '' END
        FROM (SELECT loop_id, substring(loop_id FROM 12)::int AS n FROM loops_loop) AS numbered
        WHERE l.loop_id = numbered.loop_id
        """
    )
    system.conn.execute(
        "INSERT INTO sessions_app_sessionheader (session_id, status, updated_at, preset, model, user_title,"
        " generated_title, first_prompt, global_interface, created_for)"
        " SELECT 'ses_bench_' || i, (ARRAY['running', 'idle', 'cold'])[i %% 3 + 1],"
        " now() - i * interval '37 seconds', 'coder', 'm1',"
        " CASE WHEN i %% 3 = 0 THEN 'Session ' || i ELSE '' END, CASE WHEN i %% 3 = 1 THEN 'Fix bug ' || i ELSE '' END,"
        " 'First prompt of session ' || i, false, NULL FROM generate_series(%s, %s - 1) AS i",
        [SESSIONS, sessions],
    )
    system.conn.execute("VACUUM ANALYZE loops_loop")
    system.conn.execute("VACUUM ANALYZE sessions_app_sessionheader")


def list_latency(*, requests: int, full_lists: int, page_limit: int) -> dict:
    """The lists of issue 17 in-process through the Django test client (auth, schema, query,
    serialization; no network), each request timed alone, no scheduler running:

    - loop_list {"session_id": "global"} without limit: the whole list (`full_lists` times);
    - the same list paged with `limit` = page_limit, first page to last (pages compared to the whole
      list: same loops, same order), and its first page alone (`requests` times);
    - loop_list {} of one session (~N/1,000 loops), list_sessions {} (50) and {"limit": 500};
    - the panel's first page (/panel/, a staff user signed in).
    """
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tokens.services import token_create

    _, raw = token_create(name="bench-lists", scopes=["tools"])
    api = Client()
    headers = {"Authorization": f"Bearer {raw}", "X-DSH-Session-Id": session_id(1)}

    def tool(name: str, body: dict) -> tuple[float, dict]:
        started = time.perf_counter()
        response = api.post(
            f"/api/tools/{name}", data=json.dumps(body), content_type="application/json", headers=headers
        )
        content = response.content  # the whole body, as a client would read it
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{name} answered {response.status_code}: {content[:300]!r}")
        return elapsed, json.loads(content)

    user, _ = get_user_model().objects.get_or_create(username="bench-staff", defaults={"is_staff": True})
    panel = Client()
    panel.force_login(user)

    def panel_page() -> float:
        started = time.perf_counter()
        response = panel.get("/panel/")
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"/panel/ answered {response.status_code}")
        return elapsed

    def timed(run, count: int) -> dict:
        run()  # warm-up: imports, URL resolver, first connection, plan cache
        values = [run() for _ in range(count)]
        return {"p50": percentile(values, 50), "p99": percentile(values, 99), "n": count}

    result: dict = {}
    full_ms, whole = [], None
    for _ in range(full_lists + 1):  # the first one warms up
        elapsed, whole = tool("loop_list", {"session_id": "global"})
        full_ms.append(elapsed)
    result["global_full"] = {"p50": percentile(full_ms[1:], 50), "max": max(full_ms[1:]), "n": full_lists}
    result["global_loops"] = len(whole["loops"])
    result["global_bytes"] = len(json.dumps(whole))

    probe = api.post(
        "/api/tools/loop_list",
        data=json.dumps({"session_id": "global", "limit": page_limit}),
        content_type="application/json",
        headers=headers,
    )
    if probe.status_code == 200:  # a checkout before issue 17 has no paging
        body, page_ms, paged = {"session_id": "global", "limit": page_limit}, [], []
        while True:
            elapsed, page = tool("loop_list", body)
            page_ms.append(elapsed)
            paged += page["loops"]
            if "next_cursor" not in page:
                break
            body = {**body, "cursor": page["next_cursor"]}
        result["global_paged"] = {
            "pages": len(page_ms),
            "total_ms": sum(page_ms),
            "page_p50": percentile(page_ms, 50),
            "page_max": max(page_ms),
            "same_as_whole": [v["loop_id"] for v in paged] == [v["loop_id"] for v in whole["loops"]],
        }
        result["global_first_page"] = timed(
            lambda: tool("loop_list", {"session_id": "global", "limit": page_limit})[0], requests
        )
        result["global_first_page_100"] = timed(
            lambda: tool("loop_list", {"session_id": "global", "limit": 100})[0], requests
        )
    result["session_list"] = timed(lambda: tool("loop_list", {})[0], requests)
    result["list_sessions"] = timed(lambda: tool("list_sessions", {})[0], requests)
    result["list_sessions_500"] = timed(lambda: tool("list_sessions", {"limit": 500})[0], requests)
    result["panel_first_page"] = timed(panel_page, requests)
    return result
