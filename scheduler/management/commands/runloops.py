"""`manage.py runloops`: the scheduler — a django-q2 cluster (ORM broker), the loop clock, and a
housekeeping thread for periodic jobs such as retention (scheduler.housekeeping), off the clock's thread.

Any number may run against one PostgreSQL database. SIGTERM/SIGINT stop the clock at once
and the cluster within 10 s, leaving no child process behind. A kill -9 leaves none either: the
cluster's processes die with their parent. Started by `manage.py serve`, the scheduler also
stops when serve dies.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from django.core.checks import Tags
from django.core.management.base import BaseCommand
from django.db import connections
from django_q.cluster import Cluster

logger = logging.getLogger("dshloop.runloops")

STOP_GRACE_SECONDS = 8.0
# A housekeeping step is one bounded batch, so the thread stops at once; the budget is a backstop
# (it is a daemon thread) within the 10 s graceful stop.
HOUSEKEEPING_STOP_SECONDS = 1.0

# `manage.py serve` puts its pid here: the scheduler it supervises must not outlive it.
SERVE_PID_ENV = "DSHLOOP_SERVE_PID"
PARENT_CHECK_SECONDS = 1.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Looked up once, here: a freshly forked child then only calls it.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def set_parent_death_signal(signum: int) -> None:
    """Linux: have the kernel send us signum when the thread that started us exits, however it
    dies (kill -9 included). Elsewhere nothing: watch_parent's polling covers it."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)


def watch_parent(serve_pid: int, stop: threading.Event) -> None:
    """Stop the scheduler once `serve` is gone, rather than deliver on as an orphan: at once by
    the parent-death signal on Linux; else by polling our parent pid, which also catches a
    serve that died before we asked the kernel."""
    set_parent_death_signal(signal.SIGTERM)  # SIGTERM: the graceful stop, the cluster included

    def watch() -> None:
        while os.getppid() == serve_pid:
            if stop.wait(PARENT_CHECK_SECONDS):
                return
        logger.warning("serve (pid %d) is gone: stopping the scheduler", serve_pid)
        stop.set()

    threading.Thread(target=watch, name="watch-serve", daemon=True).start()


def cluster_dies_with_parent() -> None:
    """Every process forked from now on (django-q2's sentinel, and through it its workers, pusher
    and monitor) is killed when its parent dies abruptly: after a kill -9 of runloops no cluster
    lives on taking tasks. A run one of them held is re-driven when its lease expires."""
    os.register_at_fork(after_in_child=lambda: set_parent_death_signal(signal.SIGKILL))


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
    # The checks that concern the scheduler; the web tier's are `serve`'s and `manage.py check`'s.
    # The URL check would import the whole URLconf (the API, ninja, pydantic, the panel, the admin,
    # whose apps the scheduler does not load: dshloop.settings SCHEDULER_PROCESS).
    requires_system_checks = [
        Tags.models,
        Tags.caches,
        Tags.compatibility,
        Tags.signals,
        Tags.async_support,
        Tags.translation,
        Tags.files,
    ]

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        # Forked workers must not share this process's database connections.
        connections.close_all()
        cluster = Cluster()  # installs its own signal handlers; ours replace them below

        signalled = False

        def on_signal(signum: int, frame: FrameType | None) -> None:
            # A second signal (Ctrl-C reaches us, then serve's SIGTERM) can run this handler again
            # inside stop.set(), which holds the event's lock: a nested set() would deadlock. The
            # plain flag, set first, makes the nested call return at once.
            nonlocal signalled
            if not signalled:
                signalled = True
                stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if os.environ.get(SERVE_PID_ENV):
            watch_parent(int(os.environ[SERVE_PID_ENV]), stop)
        cluster_dies_with_parent()
        cluster.start()
        # Imported after the fork too: a forked process's RSS counts every page its parent had, and
        # the cluster's processes never run the clock or housekeeping.
        from scheduler.clock import Clock
        from scheduler.housekeeping import Housekeeper, default_jobs, startup_checks, webhook_jobs

        startup_checks(stop)
        # Started after the fork of the cluster's processes, so that none of them inherits them.
        housekeeper = Housekeeper(stop, jobs=default_jobs())
        housekeeper.start()
        webhook = Housekeeper(stop, jobs=webhook_jobs(), name="failure-webhook")
        if webhook.jobs:
            webhook.start()
        clock = Clock(stop=stop)
        try:
            clock.run()
        finally:
            if not stop.is_set():  # the clock ended by an exception: stop the housekeeper too
                signalled = True  # a signal now must not set the event inside this set() (see on_signal)
                stop.set()
            housekeeper.join(HOUSEKEEPING_STOP_SECONDS)
            if webhook.is_alive():  # a POST in flight is given up: its lease runs out, it is posted again
                webhook.join(HOUSEKEEPING_STOP_SECONDS)
            self.stop_cluster(cluster)

    def stop_cluster(self, cluster: Cluster) -> None:
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
