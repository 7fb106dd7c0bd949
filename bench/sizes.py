"""Every benchmark's sizes, in one place: loop counts, bursts, windows, repetitions, request counts.

`python -m bench.run` reads FULL or QUICK (`--quick`), `--lists` LISTS_FULL or LISTS_QUICK,
`python -m bench.storage` STORAGE and `python -m bench.web_tier` WEB_TIER (their command-line
options start from these).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    reps: int
    pgbench_rows: int
    pgbench_seconds: int
    pgbench_clients: tuple[int, ...]
    b1_loops: int
    b1_processes: tuple[int, ...]
    b2_loops: int
    b2_heavy_loops: int  # dshloop alone at five times B2's load
    b2_period_s: int
    b2_seconds: int
    b3_loops: int
    b3_seconds: int
    b3_scrape_every_s: int  # a second B3 window with GET /metrics scraped this often, as Prometheus would
    b4_sizes: tuple[int, ...]
    b4_burst: int
    b4_query_repeat: int
    b4_api_size: int
    b4_creates: int
    b4_lists: int
    b4_global_lists: int
    b4_scrapes: int  # GET /metrics and the gauge statement, timed this many times per size


# The benchmark: about 50 minutes on a quiet machine.
FULL = Sizes(
    reps=3,
    pgbench_rows=100_000,
    pgbench_seconds=15,
    pgbench_clients=(1, 8),
    b1_loops=10_000,
    b1_processes=(1, 4),
    b2_loops=2_000,
    b2_heavy_loops=10_000,
    b2_period_s=10,
    b2_seconds=180,
    b3_loops=100_000,
    b3_seconds=60,
    b3_scrape_every_s=15,
    b4_sizes=(10_000, 100_000, 1_000_000),
    b4_burst=1_000,
    b4_query_repeat=20,
    b4_api_size=100_000,
    b4_creates=1_000,
    b4_lists=200,
    b4_global_lists=3,
    b4_scrapes=50,
)
# Tiny, one repetition: checks that every path of the harness works, in minutes. Its numbers
# are not the benchmark (B2's window is shorter than django-q2's one-minute period, for one).
QUICK = Sizes(
    reps=1,
    pgbench_rows=10_000,
    pgbench_seconds=3,
    pgbench_clients=(1, 8),
    b1_loops=500,
    b1_processes=(1, 4),
    b2_loops=200,
    b2_heavy_loops=1_000,
    b2_period_s=10,
    b2_seconds=40,
    b3_loops=10_000,
    b3_seconds=20,
    b3_scrape_every_s=15,
    b4_sizes=(1_000, 10_000, 100_000),
    b4_burst=100,
    b4_query_repeat=5,
    b4_api_size=10_000,
    b4_creates=100,
    b4_lists=50,
    b4_global_lists=1,
    b4_scrapes=10,
)

# Loops are spread over this many target sessions, so `loop_list {}` of one session sees N/SESSIONS.
SESSIONS = 1_000


@dataclass(frozen=True)
class ListSizes:
    loops: int
    sessions: int
    requests: int  # timed requests per list
    full_lists: int  # whole global lists, timed alone
    page_limit: int


LISTS_FULL = ListSizes(loops=100_000, sessions=100_000, requests=200, full_lists=10, page_limit=1000)
LISTS_QUICK = ListSizes(loops=10_000, sessions=10_000, requests=50, full_lists=3, page_limit=1000)


@dataclass(frozen=True)
class StorageSizes:
    loops: int = 10  # `new` loops, each with its own long prompt
    every_s: int = 2
    chars: int = 100_000  # per prompt
    seconds: float = 30  # of one real `runloops`
    reps: int = 7  # of the hot path (--hot-path)
    prune_limit: int = 5  # runs kept per loop by the retention pass


STORAGE = StorageSizes()


@dataclass(frozen=True)
class WebTierSizes:
    requests: int = 2000  # per row, split over the rounds
    rounds: int = 5  # the servers take turns, so that a noisy moment falls on both
    warm_up: int = 200
    concurrent_clients: int = 8
    idle_clients: int = 12  # connections that send headers announcing a body, and nothing more
    idle_probes: int = 20


WEB_TIER = WebTierSizes()
