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
import time
from datetime import datetime, timedelta

from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from core.notify import CLOCK_CHANNEL, CLOCK_MAX_SLEEP, Listener, can_listen
from loops.models import SchedulerHeartbeat
from loops.queue import enqueue_claim_help
from monitoring.gauges import ALIVE_WINDOW
from scheduler.claims import CLAIM_BATCH, HELP_SECONDS, claim_due, next_wakeup, recover_runs

logger = logging.getLogger("dshloop.clock")

# Safe delay clamping: never sleep past MAX_SLEEP (heartbeat, and a missed NOTIFY is only a
# delay, never a loss); never start ticks closer than MIN_SLEEP, so that occurrences falling due close
# together are claimed (and delivered) as one batch rather than one task each.
MAX_SLEEP = CLOCK_MAX_SLEEP
MIN_SLEEP = 0.05
SQLITE_POLL = 0.25
CAPACITY_POLL = 1.0  # how often `new` loops waiting for a free slot look for one
HEARTBEAT_EVERY = timedelta(seconds=25)  # alive = a tick in the last 60 s (contract §4)
# Reconnect backoff after a database error: no crash loop while PostgreSQL restarts.
ERROR_BACKOFF = (0.5, 1, 2, 5, 10)


class Waker:
    """Sleeps until a timeout, a stop request, or (PostgreSQL) a NOTIFY on the clock channel."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self.listener = Listener(CLOCK_CHANNEL) if can_listen() else None

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # Short slices keep a stop request answered within half a second.
            if self.listener is None:
                self.stop.wait(min(left, SQLITE_POLL))
                return  # SQLite: poll the deadline query again
            if self.listener.wait(min(left, 0.5)):
                return

    def listen(self) -> None:
        if self.listener is not None:
            self.listener.listen()

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()


class Clock:
    def __init__(self, *, stop: threading.Event | None = None, instance_id: str | None = None):
        self.stop = stop or threading.Event()
        self.instance_id = instance_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.waker = Waker(self.stop)
        self.last_heartbeat: datetime | None = None
        self.started_at = timezone.now()
        self.slots_checked_at: float | None = None  # monotonic; set while `new` loops wait for a slot
        self.helped_at: float | None = None  # monotonic; when a task worker was last asked to claim too

    def heartbeat(self, now: datetime) -> None:
        if self.last_heartbeat and now - self.last_heartbeat < HEARTBEAT_EVERY:
            return
        # One UPDATE on every beat but the first (idle cost: statements per minute count).
        if not SchedulerHeartbeat.objects.filter(instance_id=self.instance_id).update(last_tick_at=now):
            SchedulerHeartbeat.objects.create(
                instance_id=self.instance_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                started_at=self.started_at,
                last_tick_at=now,
            )
        self.last_heartbeat = now

    def tick(self) -> float:
        """One pass: claim what is due, re-enqueue what needs it; returns seconds to sleep."""
        now = timezone.now()  # taken once: the claim and the next deadline use the same clock
        started = time.monotonic()
        self.heartbeat(now)
        # While `new` loops wait for a free slot, their deadlines are past: they are looked at every
        # CAPACITY_POLL (a turn's end is read from the host, not signalled), not at every tick.
        waiting = self.slots_checked_at is not None and time.monotonic() - self.slots_checked_at < CAPACITY_POLL
        wakeup = next_wakeup(fresh_waiting=waiting)  # reads only: an idle tick takes no write lock
        if wakeup is not None and wakeup <= now:
            claimed = claim_due(now=now, limit=CLAIM_BATCH, deliver=True)
            recovered = recover_runs(now=now)
            self.slots_checked_at = time.monotonic() if claimed.waiting else None
            if claimed.taken >= CLAIM_BATCH:
                self.ask_for_help(now)
                return 0.0  # more is due right now
            if len(recovered) >= CLAIM_BATCH:
                return 0.0
            wakeup = next_wakeup(fresh_waiting=bool(claimed.waiting))
        longest = MAX_SLEEP
        if self.slots_checked_at is not None:
            longest = max(CAPACITY_POLL - (time.monotonic() - self.slots_checked_at), MIN_SLEEP)
        if wakeup is None:
            return longest
        # MIN_SLEEP apart from this tick's start, not from its end: a tick that delivered its claim
        # itself took a while, and sleeping a whole MIN_SLEEP after it made every deadline later.
        shortest = MIN_SLEEP - (time.monotonic() - started)
        return min(max((wakeup - timezone.now()).total_seconds(), shortest), longest)

    def ask_for_help(self, now: datetime) -> None:
        """A burst: a task worker claims beside this clock (scheduler.claims.claim_burst), once per
        HELP_SECONDS. Only on PostgreSQL, where claims run side by side (SQLite serializes writers),
        and only for a clock alone: several schedulers claim side by side already, and helpers
        beside each of them crowd the cores (measured: four schedulers with helpers ran at 0.85×
        four without)."""
        if connection.vendor != "postgresql":
            return
        if self.helped_at is not None and time.monotonic() - self.helped_at < HELP_SECONDS:
            return
        self.helped_at = time.monotonic()
        others = SchedulerHeartbeat.objects.filter(last_tick_at__gte=now - ALIVE_WINDOW)
        if not others.exclude(instance_id=self.instance_id).exists():
            enqueue_claim_help()

    def run(self) -> None:
        logger.info("clock %s started", self.instance_id)
        failures = 0
        while not self.stop.is_set():
            try:
                # Listening before the tick reads: a change committed after its read wakes the sleep
                # that follows (a first LISTEN made only when the sleep began missed those).
                self.waker.listen()
                delay = self.tick()
                failures = 0
            except Exception as exc:
                delay = ERROR_BACKOFF[min(failures, len(ERROR_BACKOFF) - 1)]
                failures += 1
                if isinstance(exc, DatabaseError):  # e.g. a server restart: expected, no traceback
                    logger.warning("database unavailable (%s); retrying in %ss", str(exc).strip(), delay)
                else:
                    logger.exception("the clock's tick raised; retrying in %ss", delay)
                self.reset()
            if delay > 0:
                self.waker.sleep(delay)
        self.shutdown()

    def reset(self) -> None:
        """Start the next tick afresh: a new connection and a new listener. A failure can leave
        the connection unusable (a server restart) and costs little to redo (a rare path)."""
        try:
            close_old_connections()
            connection.close()
        except Exception:
            logger.debug("closing the connection after a failed tick raised", exc_info=True)
        self.waker.close()

    def shutdown(self) -> None:
        self.waker.close()
        try:
            SchedulerHeartbeat.objects.filter(instance_id=self.instance_id).delete()
        except DatabaseError:
            pass
        logger.info("clock %s stopped", self.instance_id)
