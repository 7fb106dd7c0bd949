"""`python -m bench.storage [--engines sqlite postgresql] [--seconds 30]`: how fast the database
grows when long-prompt `new` loops fire, and what retention takes back.

By default (bench.sizes.STORAGE) ten `new` loops every 2 s, each with its own 100,000-character prompt (random letters and spaces,
which neither engine compresses much), against the embedded host (DSHLOOP_HOST=local), one real
`runloops` for ~30 s on a fresh database of each engine. Reported: the database's size before the
scheduler starts and after it stops (SQLite: the file after a WAL checkpoint; PostgreSQL:
pg_database_size), the bytes per occurrence, the rows of each kind, and the rows left after one
retention pass with a run limit of 5 per loop (what the pruner removes with the runs).

`--hot-path --loops 5000`: the claim and delivery of B1 in process instead, microseconds per
occurrence (what storing a prompt per revision costs the scheduler).

Runs on any checkout (the code before a change too): each engine is measured in a child process
of its own (`--child`), set up for that database.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import tempfile
import time
from pathlib import Path

from bench.processes import Process, manage_args, run_command
from bench.sizes import STORAGE

PG_DATABASE = f"{os.environ.get('BENCH_DB_PREFIX', 'dshloop_bench')}_storage"


def prompt(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_lowercase + " ") for _ in range(chars))


def child_env(engine: str, workdir: Path) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dshloop.settings", "DSHLOOP_HOST": "local"}
    env.setdefault("DJANGO_SECRET_KEY", "bench-storage-" + "x" * 40)
    if engine == "sqlite":
        env["DATABASE_URL"] = f"sqlite:///{workdir / 'storage.sqlite3'}"
    else:
        from bench import db

        db.recreate(PG_DATABASE)
        env["DATABASE_URL"] = db.url(PG_DATABASE)
    return env


def size_bytes(connection) -> int:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("CHECKPOINT")
            cursor.execute("SELECT pg_database_size(current_database())")
            return cursor.fetchone()[0]
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = Path(connection.settings_dict["NAME"])
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def rows(connection) -> dict[str, int]:
    tables = {
        "runs": "loops_looprun",
        "sessions made for runs": "sessions_app_sessionheader WHERE created_for IS NOT NULL",
        "inbox messages": "sessions_app_inboxmessage",
        "stored prompts": "loops_loopprompt",
    }
    counts = {}
    with connection.cursor() as cursor:
        for name, table in tables.items():
            if table.split()[0] not in connection.introspection.table_names():
                continue  # a checkout without that table
            cursor.execute(f"SELECT COUNT(*) FROM {table}")
            counts[name] = cursor.fetchone()[0]
    return counts


def run_child(args) -> dict:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from core.timeutil import truncate_to_ms
    from loops.events import Actor
    from loops.services import create
    from scheduler.retention import Pruner
    from timing import schedules

    call_command("migrate", verbosity=0)
    now = truncate_to_ms(timezone.now())
    for index in range(args.loops):
        create.loop_create(
            prompt=prompt(index, args.chars),
            schedule=schedules.Every(args.every),
            target="new",
            preset=None,
            created_by="",
            created_at=now,
            actor=Actor.session(None),
        )
    before = size_bytes(connection)
    connection.close()
    scheduler = Process(
        manage_args("runloops"), env=dict(os.environ), log_path=Path(args.workdir) / f"runloops-{args.engine}.log"
    )
    time.sleep(args.seconds)
    scheduler.stop(timeout=60)
    after = size_bytes(connection)
    counts = rows(connection)
    pruner = Pruner(now=timezone.now(), run_limit=STORAGE.prune_limit).run()
    return {
        "engine": connection.vendor,
        "loops": args.loops,
        "seconds": args.seconds,
        "before_bytes": before,
        "after_bytes": after,
        "rows": counts,
        "pruned": {name: getattr(pruner, name, None) for name in ("runs", "sessions", "session_messages", "prompts")},
        "rows_after_prune": rows(connection),
    }


def run_hot_path(args) -> dict:
    """The delivery hot path in process (B1's claim and delivery, no task worker): `loops` loops
    every second, all due at once, claimed in batches and delivered in batches of 250 to existing
    sessions through the embedded host; microseconds per occurrence, the median of the reps."""
    import statistics
    from datetime import UTC, datetime, timedelta

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench.proc_stats import cpu_seconds
    from loops.models import Loop
    from scheduler.claims import claim_due
    from scheduler.delivery import deliver_runs
    from sessions_app.models import SessionHeader

    call_command("migrate", verbosity=0)
    start = datetime(2030, 1, 1, tzinfo=UTC)
    SessionHeader.objects.bulk_create(
        SessionHeader(session_id=f"ses_b{i:03d}", status="idle", updated_at=start) for i in range(100)
    )
    Loop.objects.bulk_create(
        Loop(
            loop_id=f"loop_b{i:07d}",
            prompt=f"bench prompt {i}",
            kind="every",
            every_seconds=1,
            session_id=f"ses_b{i % 100:03d}",
            created_at=start,
            next_at=start,
        )
        for i in range(args.loops)
    )

    def server_cpu() -> float:
        """The PostgreSQL backend's CPU seconds (/proc; the server runs on this machine)."""
        if connection.vendor != "postgresql":
            return 0.0
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cpu_seconds([cursor.fetchone()[0]])

    claims, deliveries, cpu, server = [], [], [], []
    for rep in range(1, args.reps + 1):
        now = start + timedelta(seconds=rep)
        Loop.objects.update(next_at=now, state="scheduled")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE" if connection.vendor == "postgresql" else "SELECT 1")
        server0 = server_cpu()
        cpu0, t0 = time.process_time(), time.perf_counter()
        # As the clock claims: on the embedded host the claim delivers its runs itself; the
        # delivery timed after it is of what it enqueued (none here).
        run_ids, delivered = [], 0
        while (batch := claim_due(now=now, deliver=True)) or batch.recorded:
            run_ids += batch
            delivered += batch.recorded
        t1 = time.perf_counter()
        for i in range(0, len(run_ids), 250):
            deliver_runs(run_ids[i : i + 250], now=now)
        t2, cpu1 = time.perf_counter(), time.process_time()
        server.append((server_cpu() - server0) / args.loops * 1e6)
        assert len(run_ids) + delivered == args.loops, (len(run_ids), delivered)
        claims.append((t1 - t0) / args.loops * 1e6)
        deliveries.append((t2 - t1) / args.loops * 1e6)
        cpu.append((cpu1 - cpu0) / args.loops * 1e6)
    return {
        "engine": connection.vendor,
        "loops": args.loops,
        "claim_us": statistics.median(claims),
        "delivery_us": statistics.median(deliveries),
        "python_cpu_us": statistics.median(cpu),
        "server_cpu_us": statistics.median(server),
        "all": {"claim": claims, "delivery": deliveries, "cpu": cpu, "server": server},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    parser.add_argument("--seconds", type=float, default=STORAGE.seconds)
    parser.add_argument("--loops", type=int, default=STORAGE.loops)
    parser.add_argument("--every", type=int, default=STORAGE.every_s)
    parser.add_argument("--chars", type=int, default=STORAGE.chars)
    parser.add_argument("--hot-path", action="store_true", help="time claim and delivery per occurrence instead")
    parser.add_argument("--reps", type=int, default=STORAGE.reps)
    parser.add_argument("--child", choices=["sqlite", "postgresql"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.engine = args.child
        print(json.dumps(run_hot_path(args) if args.hot_path else run_child(args)))
        return
    results = []
    for engine in args.engines:
        with tempfile.TemporaryDirectory() as workdir:
            command = [sys.executable, "-m", "bench.storage", "--child", engine, "--workdir", workdir]
            command += ["--seconds", str(args.seconds), "--loops", str(args.loops), "--every", str(args.every)]
            command += ["--chars", str(args.chars), "--reps", str(args.reps)] + (
                ["--hot-path"] if args.hot_path else []
            )
            output = run_command(command, env=child_env(engine, Path(workdir)))
            results.append(json.loads(output.strip().splitlines()[-1]))
        if engine == "postgresql":
            from bench import db

            db.drop(PG_DATABASE)
    for result in results if not args.hot_path else []:
        grown = result["after_bytes"] - result["before_bytes"]
        runs = result["rows"]["runs"]
        print(
            f"{result['engine']}: grew {grown / 1e6:.1f} MB in {result['seconds']:.0f} s, {runs} runs "
            f"({grown / max(runs, 1) / 1e3:.0f} kB per occurrence); rows {result['rows']}; "
            f"a pass with a limit of {STORAGE.prune_limit} runs per loop removed {result['pruned']}, "
            f"left {result['rows_after_prune']}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
