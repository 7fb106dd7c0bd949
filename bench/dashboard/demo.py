"""The dashboard's dshloop: a web server and a scheduler on a fresh database, an API client, the
loops it creates and the faults it causes."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import httpx

from bench.processes import Process, descendants, free_port, manage, manage_args, uvicorn_args, wait_ready

from .scrapes import Scrape, parse_metrics

# The demo's failure policy: a failing loop retries every 3 s and is never paused, so failures
# form a steady stream the failure-ratio panel can show (the defaults back off to an hour). Its
# `new` loops fire every 3 s, far below the unattended floor a real host needs (they start no agent
# on the embedded host), and fill the default four fresh-session slots only while workers hang.
DEMO_ENV = {
    "DSHLOOP_FAILURE_BACKOFF_SECONDS": "3",
    "DSHLOOP_AUTO_PAUSE_AFTER": "0",
    "DSHLOOP_MIN_NEW_INTERVAL_SECONDS": "0",
}


class Database:
    """SQLite in the run's directory by default; with a PostgreSQL URL, that database is created
    for the run (it must not exist) and dropped at the end."""

    def __init__(self, url: str | None, workdir: Path):
        self.url = url or f"sqlite:///{workdir / 'dashboard.sqlite3'}"
        self.postgres = self.url.startswith(("postgres://", "postgresql://"))
        self.name = self.url.rsplit("/", 1)[1] if self.postgres else ""

    def _admin(self):
        import psycopg  # only on this path: a SQLite run needs no PostgreSQL driver

        return psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True)

    def create(self) -> None:
        if self.postgres:
            with self._admin() as admin:
                admin.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        if self.postgres:
            with self._admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Demo:
    """The processes, the API client and the scripted loops of one run."""

    def __init__(self, workdir: Path, database_url: str):
        self.workdir = workdir
        self.port = free_port()
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dshloop.settings",
            "DATABASE_URL": database_url,
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DSHLOOP_VAR_DIR": str(workdir),
            "PYTHONUNBUFFERED": "1",
            **DEMO_ENV,
        }
        self.web: Process | None = None
        self.schedulers: list[Process] = []
        self.client: httpx.Client | None = None
        self.loop_ids: list[str] = []
        self.started = time.time()

    def start(self) -> None:
        manage("migrate", "--noinput", env=self.env)
        token = manage("create_api_token", "--name", "dashboard", *self._scopes(), env=self.env)
        token = token.strip().splitlines()[-1]
        self.web = Process(
            uvicorn_args("dshloop.asgi:application", self.port, "--lifespan=on", "--log-level=warning"),
            env=self.env,
            log_path=self.workdir / "web.log",
        )
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {token}", "X-DSH-Session-Id": "ses_me"},
            timeout=10,
        )
        wait_ready(self.web, self._answers, timeout=60, what="the web server")
        self.start_scheduler()

    @staticmethod
    def _scopes() -> list[str]:
        return [arg for scope in ("tools", "host", "manage") for arg in ("--scope", scope)]

    def _answers(self) -> bool:
        try:
            return self.client.get("/api/health").status_code in (200, 503)
        except httpx.TransportError:
            return False

    def start_scheduler(self) -> None:
        process = Process(
            manage_args("runloops"), env=self.env, log_path=self.workdir / f"runloops-{len(self.schedulers)}.log"
        )
        self.schedulers.append(process)
        wait_ready(process, self._scheduler_alive, timeout=60, what="runloops")

    def _scheduler_alive(self) -> bool:
        return self.client.get("/api/health").json()["scheduler"]["instances"] > 0

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        response = self.client.request(method, path, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json()

    def create_loops(self) -> None:
        """Sessions and presets on the embedded host, then 20 loops: 10 recurring ones every 2-5 s
        to three targets, 6 to fresh sessions of the preset that will break, a cron loop and three
        one-shots that complete during the run."""
        self.call("PUT", "/api/host/sessions/ses_ui", {"global_interface": True, "user_title": "Global interface"})
        self.call("PUT", "/api/host/sessions/ses_me", {"status": "idle", "preset": "coder", "model": "m1"})
        self.call("PUT", "/api/host/sessions/ses_ops", {"status": "cold", "preset": "coder", "model": "m1"})
        self.call("PUT", "/api/host/presets/coder", {})
        self.call("PUT", "/api/host/presets/flaky", {})
        loops = [
            {"schedule": {"kind": "every", "every_seconds": 2 + i % 4}, "session_id": target}
            for i, target in enumerate(["self", "ses_me", "ses_ops"] * 3 + ["self"])
        ]
        loops += [{"schedule": {"kind": "every", "every_seconds": 3}, "session_id": "new", "preset": "flaky"}] * 6
        loops.append({"schedule": {"kind": "cron", "expr": "* * * * *"}, "session_id": "self"})
        loops += [{"schedule": {"kind": "after", "after_seconds": s}} for s in (45, 100, 250)]
        for index, loop in enumerate(loops):
            created = self.call("POST", "/api/tools/loop_create", {"prompt": f"Dashboard demo loop {index}", **loop})
            self.loop_ids.append(created["loop_id"])

    def pause_one(self) -> None:
        self.call("POST", f"/api/loops/{self.loop_ids[0]}/pause")

    def set_preset(self, *, mountable: bool) -> None:
        self.call("PUT", "/api/host/presets/flaky", {"mountable": mountable})

    def signal_workers(self, signum: int) -> None:
        """SIGSTOP/SIGCONT the scheduler's django-q2 processes, not runloops itself: its clock
        goes on claiming (and ticking), nothing delivers: a host call that never returns."""
        for pid in descendants(self.schedulers[-1].pid):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def crash_scheduler(self) -> None:
        """kill -9 of the scheduler and its cluster (its own process group): no clean-up runs, its
        heartbeat row stays behind and ages, its open runs wait for their lease to expire."""
        process = self.schedulers[-1]
        os.killpg(process.pid, signal.SIGKILL)
        process.popen.wait(10)
        process.stop()

    def scrape(self) -> Scrape:
        """A failed scrape has no samples (Prometheus's up == 0): its panels show a gap."""
        at = time.time()
        try:
            metrics = self.client.get("/metrics")
            metrics.raise_for_status()
            samples = parse_metrics(metrics.text)
        except httpx.HTTPError as exc:
            print(f"  scrape at t+{at - self.started:.0f}s failed: {exc}", flush=True)
            samples = {}
        try:
            health = self.client.get("/api/health").status_code
        except httpx.HTTPError:
            health = 0
        return Scrape(at=at, samples=samples, health_status=health)

    def close(self) -> None:
        for process in self.schedulers:
            process.stop()
        if self.web:
            self.web.stop()
        if self.client:
            self.client.close()
