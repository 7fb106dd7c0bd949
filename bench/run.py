"""`python -m bench.run [--quick]`: every benchmark of issue 7, dshloop and django-q2 side by side
on the same PostgreSQL, written to docs/BENCHMARKS.md (raw numbers in var/bench/).

Full size takes about 50 minutes; run it on a quiet machine (nothing else on the two cores).
--quick runs tiny sizes with one repetition in about 7 minutes, to check the harness.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECTIONS = ("limit", "B1", "B2", "B3", "B4")


@dataclass(frozen=True)
class Sizes:
    reps: int
    pgbench_rows: int
    pgbench_seconds: int
    pgbench_clients: tuple[int, ...]
    b1_loops: int
    b1_processes: tuple[int, ...]
    b2_loops: int
    b2_heavy_loops: int  # dshloop alone at five times B2's load (issue 17)
    b2_period_s: int
    b2_seconds: int
    b3_loops: int
    b3_seconds: int
    b3_scrape_every_s: int  # issue 18: a second window with GET /metrics this often, as Prometheus would
    b4_sizes: tuple[int, ...]
    b4_burst: int
    b4_query_repeat: int
    b4_api_size: int
    b4_creates: int
    b4_lists: int
    b4_global_lists: int
    b4_scrapes: int  # issue 18: GET /metrics and the gauge statement, timed this many times per size


# The sizes issue 7 asks for.
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


def setup_django(database: str | None = None) -> None:
    """The harness is a dshloop process on the bench database: it uses the product's own
    notify_clocks, models (to capture queries) and API (for the latency benchmark)."""
    from bench import db

    os.environ["DJANGO_SETTINGS_MODULE"] = "dshloop.settings"
    os.environ["DATABASE_URL"] = db.url(database or db.DSHLOOP_DB)
    os.environ.setdefault("DSHLOOP_HOST", "local")
    # Settings refuse PostgreSQL without a secret key; every process of the run (both systems'
    # schedulers and migrations, bench.systems) inherits this one from os.environ.
    os.environ.setdefault("DJANGO_SECRET_KEY", "dshloop-bench-" + secrets.token_urlsafe(32))
    import django

    django.setup()


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


class Run:
    """One bench run: the systems, where logs and raw results go, and the results so far."""

    def __init__(self, sizes: Sizes, quick: bool, out_dir: Path):
        from bench.systems import Baseline, Dshloop

        self.sizes, self.quick, self.out_dir = sizes, quick, out_dir
        self.systems = [Dshloop(), Baseline()]
        self.results: dict = {"quick": quick, "sizes": asdict(sizes), "sections": {}}

    def record(self, section: str, key: str, value: dict) -> None:
        """Keep one repetition's numbers, and save everything so far (a crash loses little)."""
        self.results["sections"].setdefault(section, {}).setdefault(key, []).append(value)
        log(
            f"  {section} {key}: "
            + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
        )
        (self.out_dir / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    def logs(self, section: str, rep: int) -> Path:
        return self.out_dir / "logs" / f"{section}-rep{rep + 1}"

    def limit(self) -> None:
        from bench.benchmarks import pgbench

        for _rep in range(self.sizes.reps):
            for script in ("claim_one.sql", "claim_batch.sql"):
                for clients in self.sizes.pgbench_clients:
                    self.record(
                        "limit",
                        f"{script}/{clients}",
                        pgbench(
                            script=script,
                            clients=clients,
                            seconds=self.sizes.pgbench_seconds,
                            rows=self.sizes.pgbench_rows,
                        ),
                    )

    def b1(self) -> None:
        from bench.benchmarks import burst

        for rep in range(self.sizes.reps):
            for processes in self.sizes.b1_processes:
                for system in self.systems:
                    self.record(
                        "B1",
                        f"{system.name}/{processes}",
                        burst(
                            system,
                            loops=self.sizes.b1_loops,
                            processes=processes,
                            log_dir=self.logs("B1", rep),
                            label=f"{processes}p",
                        ),
                    )

    def b2(self) -> None:
        from bench.benchmarks import steady

        for rep in range(self.sizes.reps):
            for system in self.systems:
                self.record(
                    "B2",
                    system.name,
                    steady(
                        system,
                        loops=self.sizes.b2_loops,
                        period_s=self.sizes.b2_period_s,
                        seconds=self.sizes.b2_seconds,
                        log_dir=self.logs("B2", rep),
                        label="steady",
                    ),
                )
            # Five times the load, dshloop alone: django-q2 cannot repeat a schedule faster than a
            # minute, and at this many schedules its one-minute cycle would not keep up (B1).
            dshloop = self.systems[0]
            self.record(
                "B2",
                f"{dshloop.name}/heavy",
                steady(
                    dshloop,
                    loops=self.sizes.b2_heavy_loops,
                    period_s=self.sizes.b2_period_s,
                    seconds=self.sizes.b2_seconds,
                    log_dir=self.logs("B2", rep),
                    label="heavy",
                ),
            )

    def b3(self) -> None:
        from bench.benchmarks import idle

        for rep in range(self.sizes.reps):
            for system in self.systems:
                self.record(
                    "B3",
                    system.name,
                    idle(
                        system,
                        loops=self.sizes.b3_loops,
                        seconds=self.sizes.b3_seconds,
                        log_dir=self.logs("B3", rep),
                        label="idle",
                        # Prometheus's default interval; django-q2 has no /metrics to scrape.
                        scrape_every_s=self.sizes.b3_scrape_every_s if system.name == "dshloop" else None,
                    ),
                )

    def b4(self) -> None:
        from bench.benchmarks import api_latency, due_query_ms, grow, resident
        from bench.procs import schedulers

        have = 0
        for system in self.systems:
            system.reset()
        for size in self.sizes.b4_sizes:
            log(f"B4: {size:,} rows per system")
            for system in self.systems:
                grow(system, have=have, size=size)
                self.record(
                    "B4", f"{system.name}/{size}/query", due_query_ms(system, repeat=self.sizes.b4_query_repeat)
                )
            # Issue 18: what a scrape of GET /metrics costs at this size, no scheduler running.
            self.record("B4", f"dshloop/{size}/scrape", self.scrape(size, "scrape"))
            have = size
            for rep in range(self.sizes.reps):
                for system in self.systems:
                    self.record(
                        "B4",
                        f"{system.name}/{size}/rss",
                        resident(
                            system,
                            burst_rows=self.sizes.b4_burst,
                            offset=rep * self.sizes.b4_burst,
                            log_dir=self.logs("B4", rep),
                            label=f"{size}",
                        ),
                    )
            if size == self.sizes.b4_api_size:
                dshloop = self.systems[0]
                # With a scheduler running, as in production: each loop_create wakes its clock.
                with schedulers(dshloop, 1, self.logs("B4", 0), "api"):
                    for _rep in range(self.sizes.reps):
                        self.record(
                            "B4",
                            f"dshloop/{size}/api",
                            api_latency(
                                creates=self.sizes.b4_creates,
                                lists=self.sizes.b4_lists,
                                global_lists=self.sizes.b4_global_lists,
                            ),
                        )

        # The largest table once more after a VACUUM: grow() only ANALYZEs, so its new pages are not yet
        # all-visible and the index-only counts fetch heap pages for them (see Heap Fetches in the plans).
        largest = self.sizes.b4_sizes[-1]
        self.systems[0].conn.execute("VACUUM (ANALYZE) loops_loop")
        self.record("B4", f"dshloop/{largest}/scrape_vacuumed", self.scrape(largest, "scrape-vacuumed"))

    def scrape(self, size: int, label: str) -> dict:
        from bench.benchmarks import scrape_cost

        return scrape_cost(
            self.systems[0],
            repeat=self.sizes.b4_scrapes,
            explain_path=self.out_dir / f"explain-gauges-{label}-{size}.txt",
        )


# Lists at 100,000 loops (issue 17): loops, sessions, timed requests per list, whole lists, page size.
LISTS_DATABASE = "dshloop_bench_lists"  # its own: the list benchmark can run beside a full run
LISTS_FULL = {"loops": 100_000, "sessions": 100_000, "requests": 200, "full_lists": 10, "page_limit": 1000}
LISTS_QUICK = {"loops": 10_000, "sessions": 10_000, "requests": 50, "full_lists": 3, "page_limit": 1000}


def lists(quick: bool, keep_database: bool) -> int:
    """`--lists`: only the list benchmark (bench.benchmarks.list_latency), in a database of its own
    (so it can run beside a full run). Prints its numbers; docs/BENCHMARKS.md's section "Lists at
    100,000 loops (issue 17)" is written from them by hand (it compares runs before and after a change)."""
    setup_django(LISTS_DATABASE)
    from bench import db, report
    from bench.benchmarks import fill_lists, list_latency
    from bench.systems import Dshloop

    system = Dshloop()
    system.database = LISTS_DATABASE

    sizes = LISTS_QUICK if quick else LISTS_FULL
    out_dir = BASE_DIR / "var" / "bench" / time.strftime("%Y%m%d-%H%M%S-lists")
    out_dir.mkdir(parents=True)
    results = {"machine": report.machine_facts(), "sizes": sizes}
    log(f"lists: {sizes['loops']:,} loops, {sizes['sessions']:,} sessions in {system.database}")
    try:
        system.create_database()
        fill_lists(system, loops=sizes["loops"], sessions=sizes["sessions"])
        log("lists: filled; timing …")
        results["lists"] = list_latency(
            requests=sizes["requests"], full_lists=sizes["full_lists"], page_limit=sizes["page_limit"]
        )
    finally:
        results["machine"]["load_average_end"] = os.getloadavg()
        (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
        if not keep_database:
            from django.db import connection

            connection.close()
            if system.conn is not None:
                system.conn.close()
            db.drop(system.database)
    print(json.dumps(results["lists"], indent=1))
    log(f"lists: raw results in {out_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (checks the harness)")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, or 1 with --quick)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--output", default=str(BASE_DIR / "docs" / "BENCHMARKS.md"))
    parser.add_argument("--keep-databases", action="store_true", help="leave the bench databases for inspection")
    parser.add_argument("--render", metavar="RESULTS_JSON", help="only rewrite the report from a saved results.json")
    parser.add_argument(
        "--lists", action="store_true", help="only the list benchmark of issue 17 (its own database; prints numbers)"
    )
    args = parser.parse_args(argv)
    if args.lists:
        return lists(args.quick, args.keep_databases)
    if args.render:
        from bench import report

        Path(args.output).write_text(report.render(json.loads(Path(args.render).read_text())))
        return 0
    only = [section.strip() for section in args.only.split(",") if section.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; choose from {SECTIONS}")

    missing = [tool for tool in ("psql", "pgbench") if shutil.which(tool) is None]
    if missing:
        parser.error(
            f"{' and '.join(missing)} not found: they come with PostgreSQL "
            "(Debian: postgresql-client for psql, postgresql-15 for pgbench)"
        )
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = Sizes(**{**asdict(sizes), "reps": args.reps})
    setup_django()
    from bench import db, report

    out_dir = BASE_DIR / "var" / "bench" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True)
    run = Run(sizes, args.quick, out_dir)
    run.results["machine"] = report.machine_facts()
    started = time.monotonic()
    log(f"bench: {'quick' if args.quick else 'full'} run, {sizes.reps} repetition(s); raw results in {out_dir}")
    try:
        for system in run.systems:
            system.create_database()
        db.recreate(db.PGBENCH_DB)
        for section in SECTIONS:
            if section in only:
                log(f"{section} …")
                getattr(run, section.lower())()
    finally:
        run.results["machine"]["load_average_end"] = os.getloadavg()
        run.results["elapsed_s"] = time.monotonic() - started
        (out_dir / "results.json").write_text(json.dumps(run.results, indent=1, default=str))
        if not args.keep_databases:
            from django.db import connection

            connection.close()
            for system in run.systems:
                if system.conn is not None:
                    system.conn.close()
            for database in db.ALL_DATABASES:
                db.drop(database)
    Path(args.output).write_text(report.render(run.results))
    log(f"bench: done in {(time.monotonic() - started) / 60:.1f} min; wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
