"""The two systems under test, behind one small interface, so that every benchmark is written
once and runs the same way for both.

- Dshloop: `manage.py runloops` processes; loops in loops_loop; a delivery is a LoopRun with
  status delivered (scheduled_at -> finished_at).
- Baseline: `manage.py qcluster` processes of bench.baseline_settings; django-q2 Schedules; a
  delivery is a bench_delivery row written by bench.tasks.record (scheduled_at -> delivered_at).

Rows are bulk-created with INSERT … SELECT generate_series (a million loops in seconds) and then
ANALYZEd, as autovacuum would within a minute in production; an unanalyzed table can make the
planner pick a plan no long-running deployment would see.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from . import db
from .processes import Process, manage, manage_args, uvicorn_args
from .seeding import insert_select
from .sizes import SESSIONS


def session_id(index: int) -> str:
    return f"ses_bench_{index:04d}"


class System:
    name: str
    database: str
    settings_module: str
    command: str
    min_period_s: int  # the shortest recurring interval the system can express
    # How long after start-up a burst should fall due. django-q2 looks for due schedules only every
    # ~30 s of its guard loop, counted from start-up; a burst placed mid-way into that cycle waits
    # the average 15 s, neither its best case (0 s) nor its worst (30 s).
    burst_offset_s: float = 0.0
    tables: tuple[str, ...]  # emptied between repetitions

    def __init__(self):
        self.conn = None

    # Set-up -------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return {**os.environ, "DJANGO_SETTINGS_MODULE": self.settings_module, "PYTHONUNBUFFERED": "1"}

    def create_database(self) -> None:
        db.recreate(self.database)
        manage("migrate", "--noinput", env=self.env())
        self.conn = db.connect(self.database)

    def reset(self) -> None:
        """Empty every table a benchmark writes; scheduler processes must be stopped."""
        self.conn.execute(f"TRUNCATE {', '.join(self.tables)}")

    def analyze(self) -> None:
        for table in self.tables:
            self.conn.execute(f"ANALYZE {table}")

    def start(self, log_path: Path) -> Process:
        return Process(manage_args(self.command), env=self.env(), log_path=log_path)

    # Overridden per system ----------------------------------------------------------------------

    def add_every(self, count: int, *, period_s: int, first_at: datetime, spread_s: float, start: int = 0) -> None:
        """`count` recurring rows (ids start..start+count-1); row i first falls due at
        first_at + (i - start)·spread_s/count, then every period_s."""
        raise NotImplementedError

    def make_due(self, start: int, count: int, at: datetime) -> None:
        """Move rows start..start+count-1 to fall due at `at`."""
        raise NotImplementedError

    def ready(self, process: Process) -> bool:
        raise NotImplementedError

    def deliveries(self) -> list[tuple[datetime, datetime]]:
        """(scheduled, delivered) of every delivered occurrence."""
        raise NotImplementedError

    def delivered_count(self) -> int:
        raise NotImplementedError

    def duplicates(self) -> int:
        """Occurrences recorded as delivered more than once (extra records)."""
        raise NotImplementedError

    def settled(self, before: datetime) -> bool:
        """Every occurrence due before `before` was handled (delivered, folded or skipped)."""
        raise NotImplementedError

    def wake(self) -> None:
        """Tell running schedulers that rows were added behind their back (nothing by default)."""

    def due_queries(self) -> dict[str, list[str]]:
        """The SQL the scheduler runs to find due rows, as it sends it (bench.queries), by result name."""
        raise NotImplementedError


class Dshloop(System):
    name = "dshloop"
    database = db.DSHLOOP_DB
    settings_module = "dshloop.settings"
    command = "runloops"
    min_period_s = 1
    tables = (
        "loops_loop",
        "loops_looprun",
        "loops_schedulerheartbeat",
        "sessions_app_inboxmessage",
        "sessions_app_sessionheader",
        "django_q_ormq",
        "django_q_task",
        "tokens_apitoken",
    )

    def env(self) -> dict[str, str]:
        return {**super().env(), "DATABASE_URL": db.url(self.database), "DSHLOOP_HOST": "local"}

    def reset(self) -> None:
        from sessions_app.models import SessionHeader

        super().reset()
        # The targets must exist on the embedded host, or every delivery fails permanently.
        sql, params = insert_select(
            SessionHeader,
            {
                "session_id": "'ses_bench_' || lpad(i::text, 4, '0')",
                "status": "'idle'",
                "updated_at": "now()",
                "preset": "'coder'",
                "model": "'m1'",
            },
            "generate_series(0, %(sessions)s - 1) AS i",
        )
        self.conn.execute(sql, {**params, "sessions": SESSIONS})

    def add_every(self, count, *, period_s, first_at, spread_s, start=0):
        from loops.models import Loop

        # loop_create's rules (loops.services): created_at to the millisecond, an `every` grid of
        # created_at + k·period, so the first deadline is one period after created_at. The other
        # columns take the model's defaults (bench.seeding).
        sql, params = insert_select(
            Loop,
            {
                "loop_id": "'loop_bench_' || lpad(i::text, 8, '0')",
                "prompt": "'bench prompt ' || i",
                "kind": "'every'",
                "every_seconds": "%(period)s",
                "session_id": "'ses_bench_' || lpad((i %% %(sessions)s)::text, 4, '0')",
                "created_by_session_id": "'ses_bench_0000'",
                "created_at": "due - %(period)s * interval '1 second'",
                "next_at": "due",
                "state": "'scheduled'",
            },
            """(SELECT i, date_trunc('milliseconds', %(first)s::timestamptz
                         + (i - %(start)s) * %(step)s * interval '1 second') AS due
                  FROM generate_series(%(start)s, %(stop)s - 1) AS i) AS rows""",
        )
        self.conn.execute(
            sql,
            {
                **params,
                "period": period_s,
                "sessions": SESSIONS,
                "first": first_at,
                "start": start,
                "stop": start + count,
                "step": spread_s / count,
            },
        )

    def make_due(self, start, count, at):
        self.conn.execute(
            "UPDATE loops_loop SET next_at = date_trunc('milliseconds', %(at)s::timestamptz),"
            " created_at = date_trunc('milliseconds', %(at)s::timestamptz) - every_seconds * interval '1 second'"
            " WHERE loop_id >= %(lo)s AND loop_id < %(hi)s",
            {"at": at, "lo": f"loop_bench_{start:08d}", "hi": f"loop_bench_{start + count:08d}"},
        )

    def start_web(self, log_path: Path, port: int) -> Process:
        """The web side alone: uvicorn on dshloop.asgi, as `manage.py serve` runs it, but without the
        scheduler serve supervises (the bench runs its own `runloops`)."""
        args = uvicorn_args("dshloop.asgi:application", port, "--lifespan=on", "--timeout-graceful-shutdown=5")
        return Process(args, env=self.env(), log_path=log_path)

    def wake(self):
        # Rows inserted behind the clock's back: loop_create would notify on commit (loops.services).
        from core.notify import notify_clocks

        notify_clocks()

    def ready(self, process):
        # The clock has ticked once: it is past start-up and claiming (tests/reliability do the same).
        return (
            self.conn.execute("SELECT 1 FROM loops_schedulerheartbeat WHERE pid = %s", [process.pid]).fetchone()
            is not None
        )

    def deliveries(self):
        return self.conn.execute(
            "SELECT scheduled_at, finished_at FROM loops_looprun WHERE status = 'delivered'"
        ).fetchall()

    def delivered_count(self):
        return self.conn.execute("SELECT count(*) FROM loops_looprun WHERE status = 'delivered'").fetchone()[0]

    def duplicates(self):
        # Runs per occurrence and inbox messages per occurrence; both have unique keys, so any
        # count above zero here would be a broken guarantee.
        runs = self.conn.execute(
            "SELECT count(*) - count(DISTINCT (loop_id, scheduled_at)) FROM loops_looprun WHERE status = 'delivered'"
        ).fetchone()[0]
        messages = self.conn.execute(
            "SELECT count(*) - count(DISTINCT occurrence_key) FROM sessions_app_inboxmessage"
        ).fetchone()[0]
        return runs + messages

    def settled(self, before):
        # tests/reliability/invariants.settled: nothing due before `before` is unclaimed or open.
        return self.conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM loops_loop WHERE state = 'scheduled' AND next_at < %(t)s)"
            " AND NOT EXISTS (SELECT 1 FROM loops_looprun WHERE scheduled_at < %(t)s"
            "                 AND status IN ('claimed', 'delivering'))",
            {"t": before},
        ).fetchone()[0]

    def due_queries(self):
        from .queries import dshloop_claim_sql, dshloop_deadline_sql

        # The claim, and the per-tick deadline query (scheduler.claims.next_wakeup) every wake-up runs.
        return {"due_query_ms": [dshloop_claim_sql()], "deadline_query_ms": dshloop_deadline_sql()}


class Baseline(System):
    name = "django-q2"
    database = db.BASELINE_DB
    settings_module = "bench.baseline_settings"
    command = "qcluster"
    min_period_s = 60  # Schedule.MINUTES counts whole minutes
    burst_offset_s = 15.0
    tables = ("django_q_schedule", "django_q_ormq", "django_q_task", "bench_delivery")

    def env(self) -> dict[str, str]:
        return {**super().env(), "BENCH_BASELINE_DATABASE_URL": db.url(self.database)}

    def create_database(self) -> None:
        super().create_database()
        from .tasks import TABLE_SQL

        self.conn.execute(TABLE_SQL)

    def add_every(self, count, *, period_s, first_at, spread_s, start=0):
        if period_s % 60:
            raise ValueError(f"django-q2 Schedules count whole minutes, not {period_s} s")
        # What `schedule("bench.tasks.record", i, schedule_type=Schedule.MINUTES, minutes=…,
        # next_run=…, intended_date_kwarg="scheduled_for")` stores, one row per schedule.
        self.conn.execute(
            """
            INSERT INTO django_q_schedule (id, name, func, hook, args, kwargs, schedule_type, minutes, repeats,
                next_run, cron, task, cluster, intended_date_kwarg)
            SELECT i + 1, NULL, 'bench.tasks.record', NULL, (i + 1)::text, NULL, 'I', %(minutes)s, -1,
                %(first)s::timestamptz + (i - %(start)s) * %(step)s * interval '1 second', NULL, NULL, NULL,
                'scheduled_for'
            FROM generate_series(%(start)s, %(stop)s - 1) AS i
            """,
            {
                "minutes": period_s // 60,
                "first": first_at,
                "start": start,
                "stop": start + count,
                "step": spread_s / count,
            },
        )

    def make_due(self, start, count, at):
        self.conn.execute(
            "UPDATE django_q_schedule SET next_run = %s WHERE id > %s AND id <= %s", [at, start, start + count]
        )

    def ready(self, process):
        return "running." in process.output()

    def deliveries(self):
        return self.conn.execute("SELECT scheduled_at, delivered_at FROM bench_delivery").fetchall()

    def delivered_count(self):
        return self.conn.execute("SELECT count(*) FROM bench_delivery").fetchone()[0]

    def duplicates(self):
        return self.conn.execute(
            "SELECT count(*) - count(DISTINCT (schedule_id, scheduled_at)) FROM bench_delivery"
        ).fetchone()[0]

    def settled(self, before):
        # Every schedule has moved past `before` and the queue is empty (a task leaves the ORM
        # queue only when acknowledged, so an empty queue means nothing is in a worker either).
        return self.conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM django_q_schedule WHERE next_run < %s)"
            " AND NOT EXISTS (SELECT 1 FROM django_q_ormq)",
            [before],
        ).fetchone()[0]

    def due_queries(self):
        from .queries import baseline_scheduler_sql

        return {"due_query_ms": [baseline_scheduler_sql()]}
