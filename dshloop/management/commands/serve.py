"""`manage.py serve`: the API, the panel, the MCP endpoint and the scheduler, from one foreground command.

One uvicorn server answers on addrport: /mcp is the MCP streamable HTTP transport, every other
path is Django (see dshloop.asgi). Ctrl-C or SIGTERM stops us; we stop the scheduler (SIGTERM,
in its own process group), which stops itself gracefully, and wait for it.

The scheduler (`manage.py runloops`) is supervised: if it dies, it is restarted with a backoff
and a log line. If this command itself dies, even by kill -9, the scheduler stops too (runloops
watches the pid named in DSHLOOP_SERVE_PID), so no orphan goes on delivering by itself.

Run by DSH's plugin for a profile (dsh-plugin/src/own-dshloop.ts), it takes three more options:
`--plugin-token-fd N` reads the token the plugin generated from descriptor N (a pipe, never a file,
the environment or the command line) and makes it the plugin's one token, only its hash kept;
`--exit-with-stdin` stops us when stdin ends, i.e. when the DSH that started us is gone, even by
kill -9; `--lock-file PATH` serves only while holding PATH's lock, so one profile never runs two
schedulers.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.management.commands.runloops import SERVE_PID_ENV
from tokens.models import PLUGIN_SCOPES
from tokens.services import plugin_token_adopt

logger = logging.getLogger("dshloop.serve")

# Restart delays after the scheduler dies: the first is short, so loops fire again within
# seconds of a crash; a scheduler that keeps crashing is retried every 30 s, not in a tight loop.
RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
HEALTHY_AFTER = 60.0  # a scheduler that ran this long was healthy: its next crash starts the backoff over
STOP_TIMEOUT = 15.0  # runloops stops within 10 s (contract §1); then it is killed
POLL = 0.2  # how soon a dead scheduler is noticed (and a stop request answered)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def exit_status(returncode: int) -> str:
    if returncode < 0:
        return f"signal {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


class SchedulerSupervisor:
    """Keeps one `manage.py runloops` child running until stop().

    One thread starts every child and outlives it: on Linux runloops asks the kernel for SIGTERM
    when the thread that started it exits (PR_SET_PDEATHSIG), and that thread only ends with
    this process or after the child has stopped.
    """

    def __init__(self):
        self.stopping = threading.Event()
        # A daemon: should serve exit without stop(), the child goes with us (see above).
        self.thread = threading.Thread(target=self.run, name="scheduler-supervisor", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop the child (SIGTERM, wait, then kill) and supervise no more."""
        self.stopping.set()
        if self.thread.ident is not None:  # started
            self.thread.join()

    def spawn(self) -> subprocess.Popen:
        # A process group of its own: a Ctrl-C in the terminal reaches serve alone, which stops the
        # scheduler with SIGTERM (stop()). In the terminal's group, a Ctrl-C while the child was still
        # starting Python (before runloops installs its handlers) printed a KeyboardInterrupt traceback.
        process = subprocess.Popen(
            [sys.executable, "-m", "dshloop", "runloops"],  # the installed package's, or the clone's
            env={**os.environ, SERVE_PID_ENV: str(os.getpid())},
            process_group=0,
        )
        logger.info("scheduler started (runloops, pid %d)", process.pid)
        return process

    def run(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                process = self.spawn()
            except OSError as exc:  # e.g. out of processes: retried like a crash
                why = f"could not be started ({exc})"
            else:
                while process.poll() is None and not self.stopping.wait(POLL):
                    pass  # the scheduler runs
                if self.stopping.is_set():
                    self.terminate(process)
                    return
                why = f"(runloops, pid {process.pid}) exited unexpectedly with {exit_status(process.returncode)}"
            if time.monotonic() - started >= HEALTHY_AFTER:
                failures = 0
            delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
            failures += 1
            logger.error("scheduler %s; restarting it in %gs", why, delay)
            self.stopping.wait(delay)

    def terminate(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            logger.warning(
                "scheduler (runloops, pid %d) did not stop within %gs: killing it", process.pid, STOP_TIMEOUT
            )
            process.kill()  # its cluster's processes die with it (runloops: die_with_parent)
            process.wait()


class Server(uvicorn.Server):
    """uvicorn, telling the supervisor the moment a stop signal arrives, so that the scheduler's
    exit that follows is not taken for a crash."""

    def __init__(self, config: uvicorn.Config, *, stopping: threading.Event):
        super().__init__(config)
        self.stopping = stopping
        self.signalled = False

    def handle_exit(self, sig, frame) -> None:
        # A second signal can run this handler again inside stopping.set(), which holds the event's
        # lock (the supervisor waits on it): a nested set() would deadlock. The flag, set first, prevents it.
        if not self.signalled:
            self.signalled = True
            self.stopping.set()
        super().handle_exit(sig, frame)


# `--lock-file` held by another serve: EX_TEMPFAIL, which the DSH plugin takes for "another DSH of
# this profile runs its dshloop" rather than a crash to restart at once.
LOCK_HELD_EXIT = 75


def hold_lock(path: str) -> int:
    """Take PATH's lock for as long as this process lives (the kernel drops it when we die, even by
    kill -9: no stale lock), with our pid in it for the person who wonders who holds it."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "?"
        os.close(descriptor)
        sys.stderr.write(f"another dshloop (pid {holder}) serves with {path}; not starting a second scheduler\n")
        sys.exit(LOCK_HELD_EXIT)
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor  # kept open: closing it would let the lock go


def read_descriptor(fd: int) -> str:
    """All of descriptor `fd` (3 or more: never our own stdio), then closed, so no child inherits it."""
    if fd < 3:
        raise CommandError("--plugin-token-fd must name a descriptor of 3 or more")
    try:
        with os.fdopen(fd, "r", encoding="utf-8") as handed:
            return handed.read().strip()
    except OSError as exc:
        raise CommandError(f"could not read the plugin's token from descriptor {fd} ({exc.strerror})") from exc


def stop_when_stdin_ends() -> None:
    """Stop like SIGTERM does once stdin ends: the parent that holds its other end is gone."""

    def watch() -> None:
        while os.read(sys.stdin.fileno(), 4096):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def parse_addrport(addrport: str) -> tuple[str, int]:
    """runserver's forms: "8000", "127.0.0.1:8000", "[::1]:8000"."""
    host, _, port = addrport.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"{addrport!r} is not a port or address:port.")
    return host, int(port)


class Command(BaseCommand):
    help = "Serve the API, panel and MCP endpoint and run the scheduler (for `make run`)."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument(
            "--plugin-token-fd",
            type=int,
            help="read the DSH plugin's token from this descriptor and make it the plugin's one token",
        )
        parser.add_argument("--exit-with-stdin", action="store_true", help="stop when stdin ends (the parent is gone)")
        parser.add_argument("--lock-file", help="serve only while holding this file's lock (exit 75 if another does)")

    def handle(self, *args, addrport, plugin_token_fd=None, exit_with_stdin=False, lock_file=None, **options):
        host, port = parse_addrport(addrport)
        # SIGTERM stops us like Ctrl-C does (and Ctrl-C works even if a shell ignored SIGINT).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
        if exit_with_stdin:
            stop_when_stdin_ends()
        if lock_file:
            hold_lock(lock_file)  # before the token: a second serve must not revoke the first's
        if plugin_token_fd is not None:
            try:
                revoked = plugin_token_adopt(raw=read_descriptor(plugin_token_fd), scopes=PLUGIN_SCOPES)
            except ValueError as exc:
                raise CommandError(f"the plugin's token on descriptor {plugin_token_fd}: {exc}") from exc
            logger.info("the DSH plugin's token is in place (%d earlier one(s) revoked)", revoked)
        scheduler = SchedulerSupervisor()
        try:
            scheduler.start()  # inside the try: a Ctrl-C right after it must still stop the child
            # uvicorn traps SIGINT/SIGTERM while it serves, shuts down, then raises the signal again:
            # our handlers turn it into the KeyboardInterrupt below.
            # By its import path (uvicorn imports it): the engine does not import the project's assembly.
            Server(
                uvicorn.Config(
                    "dshloop.asgi:application",
                    host=host,
                    port=port,
                    lifespan="on",
                    timeout_graceful_shutdown=5,
                    access_log=settings.DSHLOOP_ACCESS_LOG,
                ),
                stopping=scheduler.stopping,
            ).run()
        except KeyboardInterrupt:
            pass
        finally:
            scheduler.stop()
