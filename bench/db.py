"""The bench databases and what PostgreSQL tells about them.

Every database here is created and dropped by the bench itself, never the suite's `test`
database. The harness talks to them with plain psycopg (autocommit), so its own queries are
few and visible.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from .processes import run_command

# The server under test; trust auth as user postgres on this machine.
SERVER = os.environ.get("BENCH_PG_SERVER", "postgresql://postgres@127.0.0.1:5432")
# Every bench database's name starts with this: people sharing one server each take their own
# (BENCH_DB_PREFIX=alice_bench), since the bench drops and recreates its databases.
PREFIX = os.environ.get("BENCH_DB_PREFIX", "dshloop_bench")
DSHLOOP_DB = PREFIX
BASELINE_DB = f"{PREFIX}_baseline"
PGBENCH_DB = f"{PREFIX}_pgbench"
ALL_DATABASES = (DSHLOOP_DB, BASELINE_DB, PGBENCH_DB)
LISTS_DB = f"{PREFIX}_lists"  # its own, not in ALL_DATABASES: --lists can run beside a full run


def url(database: str) -> str:
    return f"{SERVER}/{database}"


def connect(database: str) -> psycopg.Connection:
    return psycopg.connect(url(database), autocommit=True)


def server() -> psycopg.Connection:
    """A connection to the `postgres` database: statistics read through it count for no bench database."""
    return connect("postgres")


def recreate(database: str) -> None:
    with server() as conn:
        # FORCE: a scheduler left over from an interrupted run must not keep the old one alive.
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')


def drop(database: str) -> None:
    with server() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def run_psql(database: str, script: Path, **variables) -> None:
    args = ["psql", url(database), "-q", "-v", "ON_ERROR_STOP=1", "-f", str(script)]
    for name, value in variables.items():
        args += ["-v", f"{name}={value}"]
    run_command(args)


def counters(database: str) -> dict[str, int]:
    """Cumulative transactions and sessions of one database (pg_stat_database).

    pg_stat_statements would count statements, but it needs shared_preload_libraries and so a
    restart of the shared server, which the bench must not do. A transaction is the next best
    count: each autocommit statement is one, a transaction block of several is one too, so it is a
    lower bound on statements. Backends report their counts within about a second (PostgreSQL 15
    flushes when a backend goes idle, at the latest after 10 s), a small error over a minute.
    """
    with server() as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback, sessions FROM pg_stat_database WHERE datname = %s", [database]
        ).fetchone()
    return {"transactions": int(row[0]), "sessions": int(row[1])}


def rows_written(database: str) -> int:
    """Rows inserted, updated and deleted in one database so far (pg_stat_database), as far as its
    backends have reported them: see settled_rows_written."""
    with server() as conn:
        row = conn.execute(
            "SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = %s", [database]
        ).fetchone()
    return int(row[0])


def table_writes(database: str) -> dict[str, dict[str, int]]:
    """Rows inserted, updated (HOT among them) and deleted so far, per table of one database
    (pg_stat_user_tables), as far as its backends have reported them."""
    with connect(database) as conn:
        rows = conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables"
        ).fetchall()
    return {name: {"ins": ins, "upd": upd, "hot": hot, "del": dele} for name, ins, upd, hot, dele in rows}


def table_writes_since(before: dict[str, dict[str, int]], database: str) -> dict[str, dict[str, int]]:
    """What each table was written since `before` (table_writes); tables written nothing left out."""
    after = table_writes(database)
    zero = {"ins": 0, "upd": 0, "hot": 0, "del": 0}
    deltas = {
        name: {key: value - before.get(name, zero)[key] for key, value in counts.items()}
        for name, counts in after.items()
    }
    return {name: delta for name, delta in sorted(deltas.items()) if any(delta.values())}


def reported_rows_written(conn: psycopg.Connection, database: str) -> int:
    """rows_written, with what `conn` (the harness's connection) wrote so far reported first."""
    before = rows_written(database)
    conn.execute("SELECT pg_stat_force_next_flush()")  # when `conn` next goes idle: now
    deadline = time.monotonic() + 2.0
    while (value := rows_written(database)) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def settled_rows_written(database: str, *, quiet_s: float = 11.0, timeout_s: float = 30.0) -> int:
    """rows_written once no backend has anything left to report: the same for `quiet_s` (PostgreSQL
    15 reports a busy backend's counts at most once a second, an idle one's within ten seconds)."""
    deadline, value, since = time.monotonic() + timeout_s, rows_written(database), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        latest = rows_written(database)
        if latest != value:
            value, since = latest, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return value


def backend_pids(database: str) -> list[int]:
    """The server processes of one database's connections (pg_stat_activity), for their CPU."""
    with server() as conn:
        return [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [database])]


def server_version() -> str:
    with server() as conn:
        return conn.execute("SHOW server_version").fetchone()[0]
