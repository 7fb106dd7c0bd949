"""B1 burst: `loops` occurrences due at one instant, delivered by one or more scheduler processes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from . import db
from .proc_stats import cpu_seconds, postgres_pids
from .processes import parent_of, wait_for
from .servers import schedulers
from .stats import percentile
from .systems import System
from .timing import HOUR, lead_time, now
from .waits import WaitSampler


def burst(system: System, *, loops: int, processes: int, log_dir: Path, label: str) -> dict:
    """`loops` occurrences due at one instant: seconds until the last is delivered, occurrences/s."""
    system.reset()
    # Room for the slowest system (django-q2, whose scheduler pass comes only every ~30 s) at a
    # fraction of its rate: a timeout is a failed run, not a slow one.
    timeout = 60 + loops / 15
    with schedulers(system, processes, log_dir, label) as started:
        # Rows written from here on, less the `loops` rows the set-up inserts (the schedulers'
        # start-up writes not yet reported count too: a few rows in 10,000 occurrences).
        written_before = db.reported_rows_written(system.conn, system.database)
        tables_before = db.table_writes(system.database)
        due_at = now() + timedelta(seconds=max(lead_time(loops), system.burst_offset_s))
        system.add_every(loops, period_s=HOUR, first_at=due_at, spread_s=0)
        system.analyze()
        system.wake()
        setup_late = now() > due_at  # the instant passed during set-up: the numbers would flatter
        # Where the two cores go: the schedulers' CPU and the database server's, from here (set-up
        # done) to the last delivery; the harness's polling adds a little to the server's.
        trees = [pid for process in started for pid in process.tree()]
        cpu_before, server_before = cpu_seconds(trees), cpu_seconds(postgres_pids())
        by_pid_before = {pid: cpu_seconds([pid]) for pid in trees}
        with WaitSampler(system.database) as waits:
            complete = wait_for(
                lambda: system.delivered_count() >= loops,
                timeout=(due_at - now()).total_seconds() + timeout,
                interval=0.25,
            )
        waited_until = now()
        trees = [pid for process in started for pid in process.tree()]
        scheduler_cpu = cpu_seconds(trees) - cpu_before
        # Which processes spent it: the scheduler's main process (clock, housekeeping), its
        # cluster's sentinel, and the sentinel's children (pusher, monitor, workers).
        roles = ("main", "sentinel", "pusher, monitor and workers")
        by_role = dict.fromkeys(roles, 0.0)
        for process in started:
            depth = {process.pid: 0}
            for pid in process.tree():
                depth.setdefault(pid, 2 if parent_of(pid) not in (process.pid, None) else 1)
                by_role[roles[depth[pid]]] += cpu_seconds([pid]) - by_pid_before.get(pid, 0.0)
        server_cpu = cpu_seconds(postgres_pids()) - server_before
        # Every row the burst wrote (runs, messages, loops, the task queue, heartbeats), once the
        # backends have reported them; pgbench's claim writes two (bench/pgbench/claim_one.sql).
        written = db.settled_rows_written(system.database) - written_before - loops
        # Where they went, table by table (the set-up's `loops` inserts still in its loop table).
        by_table = db.table_writes_since(tables_before, system.database)
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
        "waits": waits.summary(),
        "scheduler_cpu_ms_per_1k_by_role": {role: cpu * 1e6 / max(len(lateness), 1) for role, cpu in by_role.items()},
        "rows_by_table": {
            name: {key: value / max(len(lateness), 1) for key, value in counts.items()}
            for name, counts in by_table.items()
        },
    }
