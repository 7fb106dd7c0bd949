"""The bench's one process helper: start a child in its own process group with its output in a log
file, wait until it is ready, stop it with SIGTERM; run a command to its end.

Django-free (bench.dashboard uses it without setting Django up); every child runs in this
checkout (cwd BASE_DIR), so it runs this checkout's code.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
MANAGE = BASE_DIR / "manage.py"


# Children still running: stopped when this process ends, however it ends (stop_children_on_exit).
_running: set[Process] = set()


def stop_children_on_exit() -> None:
    """Stop every child still running when this process ends, on Ctrl-C and SIGTERM too. The children
    run in sessions of their own, so a terminal's Ctrl-C never reaches them, and a `runloops` left
    behind would take the next run's tasks. SIGTERM becomes an ordinary exit, so that atexit runs."""
    atexit.register(_stop_running)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _stop_running() -> None:
    for process in list(_running):
        process.stop(timeout=10)


class Process:
    """A child in its own session, so that a kill of its group leaves nothing behind and touches
    nothing else; its output goes to a log file."""

    def __init__(self, args: list[str], *, env: dict[str, str], log_path: Path):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.popen = subprocess.Popen(
            args, env=env, cwd=BASE_DIR, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        _running.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def tree(self) -> list[int]:
        """The process and every live descendant (a scheduler's forked cluster)."""
        return [self.pid, *descendants(self.pid)]

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM, as an operator would, and wait. SIGCONT to the group first, in case some of it
        was stopped (SIGSTOP); a process that ignores SIGTERM past `timeout` is killed with its group."""
        if self.running():
            try:
                os.killpg(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(10)
        self.log.close()
        _running.discard(self)


def parent_of(pid: int) -> int | None:
    """The parent of a live process (/proc), or None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """All live descendants of a process (/proc), as runloops finds its cluster; runloops's own
    function needs Django set up, which the dashboard never does."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, pending = [], list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(children.get(child, []))
    return found


def wait_for(condition: Callable[[], bool], *, timeout: float, interval: float = 0.2) -> bool:
    """Poll until condition() is true; False on timeout (the caller reports it, never hides it)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def wait_ready(process: Process, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Wait until ready() or the process exits; raises, with its log, if it exited or timed out."""
    if not wait_for(lambda: ready() or not process.running(), timeout=timeout):
        raise RuntimeError(f"{what} (pid {process.pid}) not ready after {timeout:g} s: {process.log_path}")
    if not process.running():
        raise RuntimeError(f"{what} (pid {process.pid}) exited: {process.output()[-2000:]}")


def run_command(args: list[str], *, env: dict[str, str] | None = None) -> str:
    """Run a command to its end in this checkout; its output, or an error that shows it."""
    done = subprocess.run(args, env=env, cwd=BASE_DIR, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def manage_args(*args: str) -> list[str]:
    """The command line of `manage.py <args>` of this checkout."""
    return [sys.executable, str(MANAGE), *args]


def manage(*args: str, env: dict[str, str]) -> str:
    """`manage.py <args>`, to its end: its output."""
    return run_command(manage_args(*args), env=env)


def uvicorn_args(app: str, port: int, *options: str) -> list[str]:
    """The command line of uvicorn serving `app` on 127.0.0.1:`port`, as `manage.py serve` runs it."""
    return [sys.executable, "-m", "uvicorn", app, "--host=127.0.0.1", f"--port={port}", *options]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
