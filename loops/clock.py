"""Waking sleeping schedulers when the earliest deadline may have moved."""

from __future__ import annotations

from django.db import connection

# PostgreSQL channel the clocks LISTEN on; a NOTIFY is sent when a loop is created or deleted.
WAKE_CHANNEL = "dshloop_clock"


def notify_clocks() -> None:
    """PostgreSQL: NOTIFY, delivered at commit. SQLite: nothing; its clocks poll briefly instead."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {WAKE_CHANNEL}")
