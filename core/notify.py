"""PostgreSQL LISTEN/NOTIFY, so that sleepers wake the moment there is work instead of polling.

A NOTIFY sent inside a transaction is delivered when it commits, so "there is work" is never
announced before the work is visible. On SQLite (one machine, no notifications) the callers
fall back to short polls. A lost notification (a reconnect) only delays: every sleeper also
wakes on a timeout.
"""

from __future__ import annotations

import logging
import select
import time
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connection

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("dshloop.notify")

CLOCK_CHANNEL = "dshloop_clock"  # the earliest loop deadline may have moved
TASKS_CHANNEL = "dshloop_tasks"  # deliveries were enqueued
# A sleeping clock wakes at least this often (heartbeat; a missed NOTIFY is only a delay): a
# deadline moved within this window needs a notify_clocks(), a later one is found anyway.
CLOCK_MAX_SLEEP = 30.0
# Seconds between attempts to reconnect a listener while the server is unreachable (a restart):
# a refused connection fails in a millisecond, so without a pause the waiter would spin.
RECONNECT_BACKOFF = (0.5, 1, 2, 5, 10)


def notify(channel: str) -> None:
    if connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {channel}")
    except DatabaseError:
        logger.warning("could not notify %s", channel, exc_info=True)


def notify_clocks() -> None:
    """Wake sleeping clocks: the earliest deadline may have moved (delivered at commit)."""
    notify(CLOCK_CHANNEL)


def can_listen() -> bool:
    return connection.vendor == "postgresql"


class Listener:
    """One dedicated autocommit connection that LISTENs on a channel (PostgreSQL only).

    While the server is unreachable, wait() sleeps out its timeout and reconnects with backoff;
    once it is connected again it answers True ("look now"), because notifications sent while
    it was away are lost.
    """

    def __init__(self, channel: str):
        self.channel = channel
        self.conn: psycopg.Connection[Any] | None = None
        self.failures = 0  # failed connection attempts in a row
        self.reconnect_at = 0.0  # monotonic time of the next attempt

    def _connect(self) -> None:
        # PostgreSQL only, where Django has imported psycopg already. Imported here, SQLite's
        # scheduler keeps it (megabytes) out of its cluster's processes, which import this module
        # with the broker.
        import psycopg

        params = {
            key: value
            for key, value in connection.get_connection_params().items()
            if key not in {"cursor_factory", "context"}
        }
        self.conn = psycopg.connect(**params, autocommit=True)
        self.conn.execute(f"LISTEN {self.channel}")

    def _connect_or_back_off(self, timeout: float) -> bool:
        """Connect now, unless still backing off; False: not connected, after sleeping (at most
        `timeout`) until the next attempt is due."""
        now = time.monotonic()
        if now >= self.reconnect_at:
            try:
                self._connect()
            except Exception as exc:  # noqa: BLE001 - whatever broke, the answer is to retry later
                self.close()
                self.reconnect_at = now + RECONNECT_BACKOFF[min(self.failures, len(RECONNECT_BACKOFF) - 1)]
                self.failures += 1
                if self.failures == 1:  # one line per outage, not one per attempt
                    logger.warning("cannot listen on %s (%s); retrying with backoff", self.channel, str(exc).strip())
            else:
                if self.failures:
                    logger.info("listening on %s again after %d failed attempt(s)", self.channel, self.failures)
                self.failures = 0
                return True
        # Returning at once would turn the caller's wait into a busy loop while the server is down
        # (the clock retried its query thousands of times a second): wait like a quiet channel.
        time.sleep(max(0.0, min(timeout, self.reconnect_at - time.monotonic())))
        return False

    def listen(self) -> None:
        """Be listening from now on (connect now, unless backing off), so that what the caller
        reads next cannot miss a notification sent after the read: one sent before LISTEN is lost."""
        if self.conn is None or self.conn.closed:
            self._connect_or_back_off(0)

    def wait(self, timeout: float) -> bool:
        """True if a notification arrived within `timeout` seconds (all pending ones are consumed)
        or may have been missed (the connection broke, or came back after an outage)."""
        if self.conn is None or self.conn.closed:
            recovering = self.failures > 0
            if not self._connect_or_back_off(timeout):
                return False
            if recovering:
                return True  # what was notified while the server was away is lost: look now
        try:
            conn = self.conn
            assert conn is not None  # connected above
            # Wait on the socket ourselves: psycopg's notifies(timeout=…) wakes every 0.1 s to
            # check its timeout, a measurable CPU cost for an idle scheduler.
            readable, _, _ = select.select([conn.fileno()], [], [], timeout)
            if not readable:
                return False
            # Consume what arrived; a burst of notifications is one wake-up.
            any(True for _ in conn.notifies(timeout=0.01))
            return True
        except Exception as exc:  # noqa: BLE001 - a broken listener (server restart) means: look now
            logger.warning("listening on %s failed (%s); reconnecting", self.channel, str(exc).strip())
            self.close()
            return True

    def close(self) -> None:
        """Drop the connection (the next wait() reconnects); the backoff state is kept."""
        if self.conn is not None:
            try:
                self.conn.close()
            finally:
                self.conn = None
