"""`manage.py runloops`: the scheduler — a django-q2 cluster (ORM broker) plus the loop clock.

Any number may run against one PostgreSQL database. SIGTERM/SIGINT stop the clock at once
and the cluster within 10 s, leaving no child process behind.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from django.core.management.base import BaseCommand
from django.db import connections

from loops.clock import Clock

logger = logging.getLogger("dshloop.runloops")

STOP_GRACE_SECONDS = 8.0


def descendants(pid: int) -> list[int]:
    """All live descendants of a process (Linux /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Command(BaseCommand):
    help = "Run the loop scheduler: the django-q2 cluster and the loop clock."

    def handle(self, *args, **options):
        from django_q.cluster import Cluster

        stop = threading.Event()
        # Forked workers must not share this process's database connections.
        connections.close_all()
        cluster = Cluster()  # installs its own signal handlers; ours replace them below

        def on_signal(signum, frame):
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        cluster.start()
        clock = Clock(stop=stop)
        try:
            clock.run()
        finally:
            self.stop_cluster(cluster)

    def stop_cluster(self, cluster) -> None:
        started = time.monotonic()
        stopper = threading.Thread(target=cluster.stop, daemon=True)
        stopper.start()
        stopper.join(STOP_GRACE_SECONDS)
        leftovers = descendants(os.getpid())
        if leftovers:
            # A worker stuck in a slow delivery: its run's lease expires and another
            # process re-drives it, so killing it loses nothing.
            logger.warning("killing %d scheduler child process(es) that did not stop in time", len(leftovers))
            kill_all(leftovers)
        logger.info("scheduler stopped in %.1fs", time.monotonic() - started)
