"""A system's processes up for a benchmark: its schedulers, or dshloop's web process, ready on
entry and stopped with SIGTERM on exit."""

from __future__ import annotations

import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from .processes import free_port, wait_ready


@contextmanager
def schedulers(system, count: int, log_dir: Path, label: str):
    """`count` scheduler processes of `system`, ready (ticked) on entry, SIGTERMed on exit."""
    started = [system.start(log_dir / f"{system.command}-{label}-{i}.log") for i in range(count)]
    try:
        for process in started:
            wait_ready(process, lambda process=process: system.ready(process), timeout=90, what=system.name)
        yield started
    finally:
        for process in started:
            process.stop()


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
        wait_ready(process, answers, timeout=60, what="web server")
        yield process, base
    finally:
        process.stop()
