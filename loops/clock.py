"""The loop clock (spec §5): find the earliest deadline, sleep until it with a clamped one-shot
timer, claim what is due, repeat. It keeps no per-loop state in memory.

Sleeping clocks are woken early when a loop is created or deleted: PostgreSQL delivers a
NOTIFY on commit; on SQLite (one machine) the clock simply polls its cheap MIN(next_at) query.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from datetime import datetime, timedelta

from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from .claims import CLAIM_BATCH, claim_due, next_wakeup, recover_runs
from .models import SchedulerHeartbeat

logger = logging.getLogger("dshloop.clock")

# PostgreSQL channel the clocks LISTEN on.
WAKE_CHANNEL = "dshloop_clock"
# Safe delay clamping: never sleep past MAX_SLEEP (heartbeat, and a missed NOTIFY is only a
# delay, never a loss); never spin faster than MIN_SLEEP when something is due but not claimable.
MAX_SLEEP = 20.0
MIN_SLEEP = 0.005
SQLITE_POLL = 0.25
HEARTBEAT_EVERY = timedelta(seconds=15)
# Reconnect backoff after a database error: no crash loop while PostgreSQL restarts.
ERROR_BACKOFF = (0.5, 1, 2, 5, 10)


def notify_clocks() -> None:
    """PostgreSQL: NOTIFY, delivered at commit. SQLite: nothing; its clocks poll briefly instead."""
    if connection.vendor == "postgresql":
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"NOTIFY {WAKE_CHANNEL}")
        except DatabaseError:  # a lost wake-up only delays the clock until MAX_SLEEP
            logger.warning("could not notify the clocks", exc_info=True)


class Waker:
    """Sleeps until a timeout, a stop request, or (PostgreSQL) a NOTIFY on the wake channel."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.listener = None

    def _listen(self):
        if connection.vendor != "postgresql":
            return None
        if self.listener is None or self.listener.closed:
            import psycopg

            params = {k: v for k, v in connection.get_connection_params().items()
                      if k not in {"cursor_factory", "context"}}
            self.listener = psycopg.connect(**params, autocommit=True)
            self.listener.execute(f"LISTEN {WAKE_CHANNEL}")
        return self.listener

    def sleep(self, seconds: float) -> None:
        deadline = timezone.now() + timedelta(seconds=seconds)
        try:
            listener = self._listen()
        except Exception:  # noqa: BLE001 - no listener only means polling
            logger.warning("cannot LISTEN for wake-ups; polling instead", exc_info=True)
            listener = None
        while not self.stop.is_set():
            left = (deadline - timezone.now()).total_seconds()
            if left <= 0:
                return
            # Short slices keep a stop request answered within half a second.
            if listener is None:
                if self.stop.wait(min(left, SQLITE_POLL)):
                    return
                if connection.vendor == "sqlite":
                    return  # SQLite: poll the deadline query again
                continue
            try:
                if any(True for _ in listener.notifies(timeout=min(left, 0.5), stop_after=1)):
                    return
            except Exception:  # noqa: BLE001 - the listener broke (server restart): reopen next time
                self.close()
                return

    def close(self) -> None:
        if self.listener is not None:
            try:
                self.listener.close()
            finally:
                self.listener = None


class Clock:
    def __init__(self, *, stop: threading.Event | None = None, instance_id: str | None = None):
        self.stop = stop or threading.Event()
        self.instance_id = instance_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.waker = Waker(self.stop)
        self.last_heartbeat: datetime | None = None
        self.started_at = timezone.now()

    def heartbeat(self, now: datetime) -> None:
        if self.last_heartbeat and now - self.last_heartbeat < HEARTBEAT_EVERY:
            return
        SchedulerHeartbeat.objects.update_or_create(
            instance_id=self.instance_id,
            defaults={"hostname": socket.gethostname(), "pid": os.getpid(), "started_at": self.started_at,
                      "last_tick_at": now},
        )
        self.last_heartbeat = now

    def tick(self) -> float:
        """One pass: claim what is due, re-enqueue what needs it; returns seconds to sleep."""
        now = timezone.now()  # taken once: the claim and the next deadline use the same clock
        self.heartbeat(now)
        wakeup = next_wakeup()  # reads only: an idle tick takes no write lock
        if wakeup is not None and wakeup <= now:
            claimed = claim_due(now=now)
            recovered = recover_runs(now=now)
            if len(claimed) >= CLAIM_BATCH or len(recovered) >= CLAIM_BATCH:
                return 0.0  # more is due right now
            wakeup = next_wakeup()
        if wakeup is None:
            return MAX_SLEEP
        return min(max((wakeup - timezone.now()).total_seconds(), MIN_SLEEP), MAX_SLEEP)

    def run(self) -> None:
        logger.info("clock %s started", self.instance_id)
        failures = 0
        while not self.stop.is_set():
            try:
                delay = self.tick()
                failures = 0
            except DatabaseError as exc:
                delay = ERROR_BACKOFF[min(failures, len(ERROR_BACKOFF) - 1)]
                failures += 1
                logger.warning("database unavailable (%s); retrying in %ss", str(exc).strip(), delay)
                close_old_connections()
                connection.close()
                self.waker.close()
            if delay > 0:
                self.waker.sleep(delay)
        self.shutdown()

    def shutdown(self) -> None:
        self.waker.close()
        try:
            SchedulerHeartbeat.objects.filter(instance_id=self.instance_id).delete()
        except DatabaseError:
            pass
        logger.info("clock %s stopped", self.instance_id)
