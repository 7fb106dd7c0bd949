"""Named locks held to the end of the caller's transaction, for the few writes no row can stand for
(a count, "at most one holder", a quota): PostgreSQL's transaction-scoped advisory locks.

On SQLite there is nothing to take: its IMMEDIATE write transactions already serialize every
writer, so a count read after the transaction began sees every commit before it.
"""

from __future__ import annotations

from django.db import connection


def lock_until_commit(name: str) -> None:
    """Wait for, then hold until the transaction ends, the lock called `name` (PostgreSQL)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])
