"""Real `runloops` processes against the test database, for process-level tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

MANAGE = Path(settings.BASE_DIR) / "manage.py"


def test_database_url() -> str:
    """The URL of the database pytest-django created, for child processes to share."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    host = db.get("HOST") or "127.0.0.1"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgresql://{db['USER']}{password}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"


class Scheduler:
    """One `manage.py runloops` process; its output goes to a log file under tmp_path."""

    def __init__(self, log_dir: Path, index: int, env: dict):
        self.log_path = log_dir / f"runloops-{index}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, str(MANAGE), "runloops"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: a kill -9 of the group leaves nothing behind
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def terminate(self, timeout: float = 15) -> float:
        """SIGTERM; returns how long the graceful stop took."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout)
        return time.monotonic() - started

    def kill9(self) -> None:
        """kill -9 of the whole process (and its cluster): a crash, nothing runs its clean-up."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.running():
            self.kill9()
        self.log.close()


class Schedulers:
    def __init__(self, log_dir: Path, *, database_url: str | None = None, **extra_env: str):
        """database_url: where the schedulers run (default: the test database)."""
        self.log_dir = log_dir
        # The test's own secret key: settings refuse PostgreSQL without one, and processes that share
        # a database must share it.
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dshloop.settings",
            "DATABASE_URL": database_url or test_database_url(),
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        self.started: list[Scheduler] = []

    def start(self, count: int = 1) -> list[Scheduler]:
        new = [Scheduler(self.log_dir, len(self.started) + i, self.env) for i in range(count)]
        self.started.extend(new)
        return new

    def start_ready(self, count: int = 1) -> list[Scheduler]:
        """Start schedulers and wait until each clock has ticked (its heartbeat row exists): past
        start-up and claiming. A scheduler that exits instead fails the test with its output."""
        from loops.models import SchedulerHeartbeat

        started = self.start(count)
        for scheduler in started:
            wait_for(
                lambda: SchedulerHeartbeat.objects.filter(pid=scheduler.pid).exists() or not scheduler.running(),
                timeout=60,
                message=f"scheduler {scheduler.pid} to tick",
            )
            assert scheduler.running(), scheduler.output()[-3000:]
        return started

    def close(self) -> None:
        for scheduler in self.started:
            scheduler.close()


def wait_for(condition, *, timeout: float, interval: float = 0.05, message: str = "condition"):
    """Poll until condition() is truthy; returns its value. Fails the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
