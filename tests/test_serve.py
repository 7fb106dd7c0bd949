"""`manage.py serve` (what `make run` runs) keeps its scheduler alive, and the
scheduler never outlives serve. Real processes and real time, on the test database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime

import httpx
import pytest
from django.conf import settings
from django.utils import timezone

from loops.models import LoopRun, SchedulerHeartbeat
from scheduler.management.commands.runloops import descendants
from sessions_app.services import session_upsert
from tests.conftest import create_loop, every
from tests.processes import MANAGE, wait_for
from tests.processes import test_database_url as database_url  # not collected as a test

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

RESTART_LINE = "exited unexpectedly"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def parent_of(pid: int) -> int | None:
    """The parent pid of a live process; None once it is gone (a zombie awaiting its reaper is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state, ppid = stat.read().rsplit(")", 1)[1].split()[:2]
    except OSError:
        return None
    return None if state == "Z" else int(ppid)


def alive(pids) -> list[int]:
    return [pid for pid in pids if parent_of(pid) is not None]


class Serve:
    """`manage.py serve` on a free loopback port, in a session of its own; its output goes to a file."""

    def __init__(self, log_dir, *, port: int | None = None, **extra_env: str):
        """port: a given one (a restarted server keeps its URL), else a free one."""
        self.port = port or free_port()
        self.log_path = log_dir / "serve.log"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dshloop.settings",
            "DATABASE_URL": database_url(),
            "DSHLOOP_HOST": "local",
            # A run in flight when its scheduler is killed waits for its lease (45 s by default)
            # before another one re-drives it: short here, so the tests time the restart, not that.
            "DSHLOOP_RUN_LEASE_SECONDS": "3",
            "DJANGO_SECRET_KEY": "test-serve-supervision-not-a-secret",
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(MANAGE), "serve", f"127.0.0.1:{self.port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=settings.BASE_DIR,
                start_new_session=True,  # its own process group: Ctrl-C can be sent to it, and clean-up reaches all
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ready_scheduler(self, *, other_than: int | None = None) -> int:
        """Wait until a runloops child of serve (other than a given one) has ticked; returns its pid.
        Its cluster is up by then: runloops starts its clock once the cluster runs."""

        def ticked():
            assert self.process.poll() is None, self.log()[-3000:]
            children = [pid for pid in descendants(self.pid) if parent_of(pid) == self.pid and pid != other_than]
            return SchedulerHeartbeat.objects.filter(pid__in=children).values_list("pid", flat=True).first()

        return wait_for(ticked, timeout=60, message="serve's scheduler to tick")

    def wait_serving(self) -> None:
        """Until uvicorn answers (and so has its signal handlers installed)."""

        def answers():
            assert self.process.poll() is None, self.log()[-3000:]
            try:
                # 200 or 503 (its scheduler may not have ticked yet): either way uvicorn answers.
                return httpx.get(f"http://127.0.0.1:{self.port}/api/health", timeout=2).status_code in (200, 503)
            except httpx.HTTPError:
                return False

        wait_for(answers, timeout=60, message="serve to answer")

    def close(self) -> None:
        # serve's group, and the scheduler's own group (serve starts it in one of its own).
        for pid in [self.pid, *descendants(self.pid)]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.wait(10)


@pytest.fixture
def serve(transactional_db, tmp_path):
    server = Serve(tmp_path)
    yield server
    server.close()


def every_second_loop() -> str:
    session_upsert(session_id="ses_caller", changes={"status": "idle"})
    loop = create_loop(every(1), prompt="tick", target="ses_caller", created_by="ses_caller")
    return loop.loop_id


def deliveries(loop_id: str, *, since: datetime | None = None) -> int:
    runs = LoopRun.objects.filter(loop_id=loop_id, status="delivered")
    if since is not None:
        runs = runs.filter(finished_at__gt=since)
    return runs.count()


def test_a_killed_scheduler_is_restarted_and_its_loops_fire_again_within_15_seconds(serve):
    loop_id = every_second_loop()
    first = serve.ready_scheduler()
    wait_for(lambda: deliveries(loop_id), timeout=15, message="a first delivery")
    first_cluster = descendants(first)
    assert first_cluster  # django-q2's sentinel and its workers

    killed_at, started = timezone.now(), time.monotonic()
    os.kill(first, signal.SIGKILL)  # a crash: nothing of runloops' clean-up runs

    second = serve.ready_scheduler(other_than=first)
    wait_for(lambda: deliveries(loop_id, since=killed_at), timeout=15, message="a delivery after the kill")
    assert time.monotonic() - started < 15
    assert second != first and serve.process.poll() is None
    assert (
        f"scheduler (runloops, pid {first}) exited unexpectedly with signal SIGKILL; restarting it in 1s" in serve.log()
    )
    # The dead scheduler's cluster died with it: no orphan goes on taking tasks.
    wait_for(lambda: not alive(first_cluster), timeout=5, message="the killed scheduler's cluster to exit")


def test_kill_9_of_serve_stops_its_scheduler_and_cluster_too(serve):
    loop_id = every_second_loop()
    scheduler = serve.ready_scheduler()
    wait_for(lambda: deliveries(loop_id), timeout=15, message="a first delivery")
    processes = [scheduler, *descendants(scheduler)]

    os.kill(serve.pid, signal.SIGKILL)
    serve.process.wait(10)

    wait_for(lambda: not alive(processes), timeout=15, message="serve's scheduler and cluster to exit")
    # It stopped gracefully (the parent-death signal is SIGTERM): its heartbeat row went with it.
    assert not SchedulerHeartbeat.objects.filter(pid=scheduler).exists()
    settled = deliveries(loop_id)
    time.sleep(2)  # the scenario: time passes, the loop is due every second, and nothing delivers it
    assert deliveries(loop_id) == settled


@pytest.mark.parametrize("stop", ["SIGTERM to serve", "Ctrl-C to the process group"])
def test_stopping_serve_stops_the_scheduler_cleanly_without_a_restart(serve, stop):
    scheduler = serve.ready_scheduler()
    serve.wait_serving()
    processes = [scheduler, *descendants(scheduler)]

    started = time.monotonic()
    if stop == "SIGTERM to serve":
        serve.process.send_signal(signal.SIGTERM)
    else:  # what a terminal does: every process of the foreground group gets SIGINT at once
        os.killpg(serve.pid, signal.SIGINT)
    returncode = serve.process.wait(20)

    log = serve.log()
    assert returncode == 0, log[-3000:]
    assert time.monotonic() - started < 15, log[-3000:]
    assert not alive(processes)
    with pytest.raises(ProcessLookupError):  # nothing of the group is left
        os.killpg(serve.pid, 0)
    assert "scheduler stopped" in log
    assert RESTART_LINE not in log


@pytest.mark.parametrize("when", ["while Django starts", "while its scheduler starts"])
def test_ctrl_c_during_start_up_stops_quietly(tmp_path, when):
    """A person who presses Ctrl-C a moment after `make run` sees no Python traceback, from serve
    or from the scheduler child it has just started."""
    server = Serve(tmp_path)
    try:
        if when == "while its scheduler starts":  # runloops is importing Django at this point
            wait_for(
                lambda: "scheduler started (runloops" in server.log(), timeout=30, message="serve to start runloops"
            )
        else:
            time.sleep(0.3)  # the scenario itself: a Ctrl-C before Django has finished loading
        os.killpg(server.pid, signal.SIGINT)
        returncode = server.process.wait(20)
        wait_for(lambda: not alive(descendants(server.pid)), timeout=15, message="the group to exit")
    finally:
        server.close()
    log = server.log()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
    assert returncode in (0, 130, -signal.SIGINT), log[-3000:]
