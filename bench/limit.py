"""The physical limit: pgbench runs the claim alone (bench/pgbench/*.sql) against PostgreSQL."""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import db
from .processes import run_command

PGBENCH_DIR = Path(__file__).resolve().parent / "pgbench"


def pgbench(*, script: str, clients: int, seconds: int, rows: int) -> dict:
    """One timed pgbench run of a claim script on a fresh table of `rows` due loops."""
    db.run_psql(db.PGBENCH_DB, PGBENCH_DIR / "schema.sql", rows=rows)
    output = run_command(
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
        ]
    )
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", output).group(1))
    transactions = int(re.search(r"number of transactions actually processed: (\d+)", output).group(1))
    with db.connect(db.PGBENCH_DB) as conn:
        claims, duplicates = conn.execute(
            "SELECT count(*), count(*) - count(DISTINCT (loop_id, scheduled_at)) FROM pgb_run"
        ).fetchone()
    return {"tps": tps, "claims_per_s": tps * claims / max(transactions, 1), "duplicates": duplicates}
