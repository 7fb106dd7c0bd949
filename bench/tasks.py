"""The baseline's trivial task: one call per Schedule occurrence, recording when it ran.

The Schedule passes the occurrence's intended time (its `next_run` when the scheduler fired it)
through `intended_date_kwarg`, so each row pairs "scheduled" with "delivered" exactly like
dshloop's LoopRun (scheduled_at, finished_at). No unique key on purpose: an occurrence recorded
twice is a duplicate that bench.run counts.
"""

from __future__ import annotations

from django.db import connection
from django.utils import timezone

TABLE_SQL = """
CREATE TABLE IF NOT EXISTS bench_delivery (
    schedule_id bigint NOT NULL,
    scheduled_at timestamptz NOT NULL,
    delivered_at timestamptz NOT NULL
)
"""


def record(schedule_id: int, scheduled_for: str) -> None:
    # The delivery time is taken in Python before the commit, as dshloop's finished_at is.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO bench_delivery (schedule_id, scheduled_at, delivered_at) VALUES (%s, %s, %s)",
            [schedule_id, scheduled_for, timezone.now()],
        )
