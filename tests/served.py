"""`uvicorn dshloop.asgi:application` (what `manage.py serve` runs) on a database and in an environment
of the test's choosing, for tests that must see what a served process answers and logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from tests.tools.mcp.conftest import free_port, wait_until_serving


class Served:
    """One server in its own process group; its output (the log) goes to a file."""

    def __init__(self, log_path: Path, *, database_url: str, **extra_env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dshloop.settings",
            "DATABASE_URL": database_url,
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "DSHLOOP_HOST": "local",
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        self.env.pop("DJANGO_DEBUG", None)  # as in production: the failures must be logged without it
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Served:
        argv = [sys.executable, "-m", "uvicorn", "dshloop.asgi:application", "--host", "127.0.0.1"]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port), "--lifespan", "on"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=settings.BASE_DIR,
                start_new_session=True,
            )
        try:
            wait_until_serving(self.url, self.process, self.log_path)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
