"""Scheduler processes: start, wait until ready, measure (CPU, RSS from /proc), stop with SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from scheduler.management.commands.runloops import descendants

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class Process:
    """One scheduler process (and the cluster it forks); its output goes to a log file."""

    def __init__(self, args: list[str], *, env: dict[str, str], log_path: Path):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.log = open(log_path, "wb")
        # Its own session: a leftover can be killed as a group without touching anything else.
        self.popen = subprocess.Popen(
            args,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=Path(__file__).resolve().parent.parent,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def tree(self) -> list[int]:
        return [self.pid, *descendants(self.pid)]

    def stop(self, timeout: float = 30) -> float:
        """SIGTERM, as an operator would; returns seconds to exit. A process that ignores it
        past `timeout` is killed with its whole group, and that is reported in its log."""
        started = time.monotonic()
        if self.running():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(10)
        self.log.close()
        return time.monotonic() - started


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the processes, with their reaped children (/proc/<pid>/stat)."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited between the listing and the read
        # After the command name: utime, stime, cutime, cstime are fields 14-17 of proc(5).
        ticks += sum(int(value) for value in fields[11:15])
    return ticks / CLOCK_TICKS


def postgres_pids() -> list[int]:
    """Every PostgreSQL server process on this machine (the bench databases share one server)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm:
                    if comm.read().strip() == "postgres":
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of the processes, summed (/proc/<pid>/statm). Forked workers share
    some pages with their parent, so the sum over-counts shared pages the same way for both systems."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE_SIZE
        except OSError:
            continue
    return total


def wait_for(condition, *, timeout: float, interval: float = 0.2) -> bool:
    """Poll until condition() is true; False on timeout (the caller reports it, never hides it)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


@contextmanager
def schedulers(system, count: int, log_dir: Path, label: str):
    """`count` scheduler processes of `system`, ready (ticked) on entry, SIGTERMed on exit."""
    started = [system.start(log_dir / f"{system.command}-{label}-{i}.log") for i in range(count)]
    try:
        for process in started:
            if not wait_for(lambda: system.ready(process) or not process.running(), timeout=90):
                raise RuntimeError(f"{system.name} process {process.pid} not ready after 90 s: {process.log_path}")
            if not process.running():
                raise RuntimeError(f"{system.name} process {process.pid} exited: {process.output()[-2000:]}")
        yield started
    finally:
        for process in started:
            process.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def web_server(system, log_path: Path):
    """dshloop's web process (Dshloop.start_web) on a free port, answering on entry; SIGTERMed on
    exit. Yields the process and its base URL."""
    port = free_port()
    process = system.start_web(log_path, port)
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(base + "/metrics", timeout=2).close()  # 401 without a token: no query
        except urllib.error.HTTPError:
            pass  # any answer means the server is up
        except OSError:
            return False
        return True

    try:
        if not wait_for(lambda: answers() or not process.running(), timeout=60):
            raise RuntimeError(f"web server {process.pid} not answering after 60 s: {log_path}")
        if not process.running():
            raise RuntimeError(f"web server {process.pid} exited: {process.output()[-2000:]}")
        yield process, base
    finally:
        process.stop()
