"""Named locks held to the end of the caller's transaction, for the few writes no row can stand for
(a count, "at most one holder", a quota): PostgreSQL's transaction-scoped advisory locks.

On SQLite there is nothing to take: its IMMEDIATE write transactions already serialize every
writer, so a count read after the transaction began sees every commit before it.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection


def lock_until_commit(name: str) -> None:
    """Wait for, then hold until the transaction ends, the lock called `name` (PostgreSQL)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])


def lock_each_until_commit(namespace: str, names: Iterable[str]) -> None:
    """lock_until_commit for many names at once, in one statement (PostgreSQL).

    The locks are taken in the order of their keys, the same for every caller, so two callers
    whose sets overlap never wait for each other in a circle. `namespace` keeps these names apart
    from every other lock's: the locks are PostgreSQL's two-key advisory locks, a space of their own."""
    keys = sorted(set(names))
    if connection.vendor != "postgresql" or not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), key) "
            "FROM (SELECT DISTINCT hashtext(name) AS key FROM unnest(%s::text[]) AS name ORDER BY key) AS ordered",
            [namespace, keys],
        )
