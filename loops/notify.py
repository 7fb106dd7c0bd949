"""PostgreSQL LISTEN/NOTIFY, so that sleepers wake the moment there is work instead of polling.

A NOTIFY sent inside a transaction is delivered when it commits, so "there is work" is never
announced before the work is visible. On SQLite (one machine, no notifications) the callers
fall back to short polls. A lost notification (a reconnect) only delays: every sleeper also
wakes on a timeout.
"""

from __future__ import annotations

import logging
import select

from django.db import DatabaseError, connection

logger = logging.getLogger("dshloop.notify")

CLOCK_CHANNEL = "dshloop_clock"  # the earliest loop deadline may have moved
TASKS_CHANNEL = "dshloop_tasks"  # deliveries were enqueued


def notify(channel: str) -> None:
    if connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {channel}")
    except DatabaseError:
        logger.warning("could not notify %s", channel, exc_info=True)


def can_listen() -> bool:
    return connection.vendor == "postgresql"


class Listener:
    """One dedicated autocommit connection that LISTENs on a channel (PostgreSQL only)."""

    def __init__(self, channel: str):
        self.channel = channel
        self.conn = None

    def _connect(self):
        if self.conn is None or self.conn.closed:
            import psycopg

            params = {key: value for key, value in connection.get_connection_params().items()
                      if key not in {"cursor_factory", "context"}}
            self.conn = psycopg.connect(**params, autocommit=True)
            self.conn.execute(f"LISTEN {self.channel}")
        return self.conn

    def wait(self, timeout: float) -> bool:
        """True if a notification arrived within `timeout` seconds (all pending ones are consumed)."""
        try:
            conn = self._connect()
            # Wait on the socket ourselves: psycopg's notifies(timeout=…) wakes every 0.1 s to
            # check its timeout, a measurable CPU cost for an idle scheduler (issue 7, B3).
            readable, _, _ = select.select([conn.fileno()], [], [], timeout)
            if not readable:
                return False
            # Consume what arrived; a burst of notifications is one wake-up.
            any(True for _ in conn.notifies(timeout=0.01))
            return True
        except Exception:  # noqa: BLE001 - a broken listener (server restart) means: look now
            logger.warning("listening on %s failed; reconnecting", self.channel, exc_info=True)
            self.close()
            return True

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            finally:
                self.conn = None
