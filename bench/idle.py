"""B3 idle cost: a scheduler with nothing due for an hour, and then the same one scraped as
Prometheus would: transactions, new connections and CPU per minute."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from . import db
from .api_token import api_token
from .proc_stats import cpu_seconds
from .scrape import scrape_over_http
from .servers import schedulers, web_server
from .stats import percentile
from .systems import System
from .timing import HOUR, now

# Stats of a backend reach pg_stat_database within PGSTAT_IDLE_INTERVAL (10 s) of its last
# query; waiting a bit longer keeps the harness's own set-up queries out of the idle window.
STATS_SETTLE_S = 12


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


def idle(
    system: System, *, loops: int, seconds: int, log_dir: Path, label: str, scrape_every_s: float | None = None
) -> dict:
    """`loops` loops none due for an hour: transactions, new connections and CPU per minute.

    With `scrape_every_s` (dshloop only), a second window of the same scheduler follows
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
            token = api_token("bench-scrape", "manage")
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
