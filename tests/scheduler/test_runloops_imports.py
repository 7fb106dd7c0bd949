"""The scheduler imports only what it runs: its memory is counted in every process of its tree (a
forked process carries all its parent's pages), and the API's stack (ninja, pydantic, httpx, mcp,
uvicorn) and the admin would make `runloops` much heavier than django-q2's qcluster
(docs/BENCHMARKS.md counts its memory).

The first test runs `manage.py runloops` as an operator would, up to the fork of its cluster, then
imports what each process imports once forked; the second watches a real scheduler deliver."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from loops.models import LoopRun
from tests.processes import wait_for

# Not in any process of the scheduler (DSHLOOP_HOST=local): each entry is a module or a package.
NEVER = (
    "ninja",
    "pydantic",
    "pydantic_core",
    "httpx",
    "rich",
    "mcp",
    "uvicorn",
    "starlette",
    "sse_starlette",
    "whitenoise",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "dshloop.api",
    "dshloop.urls",
    "core.schemas",
    "core.validation",
    "tools",
    "panel",
    "loops.api",
    "loops.schemas",
    "loops.admin",
    "sessions_app.api",
    "sessions_app.schemas",
    "sessions_app.admin",
    "sessions_app.hosts.http",
    "sessions_app.hosts.dsh",
    "xml.sax",  # scheduler.message escapes with html.escape (xml.sax.saxutils pulls in urllib.request)
)
# Not before the fork, where every cluster process would inherit them: each is one process's own.
NOT_BEFORE_FORK = (
    "scheduler.clock",
    "scheduler.housekeeping",
    "scheduler.delivery",
    "scheduler.tasks",
    "sessions_app.hosts.local",
    "psycopg",  # on SQLite (this test's database) no process needs PostgreSQL's driver at start-up
)
# Nor after the fork, on SQLite: only PostgreSQL's code paths import them (core.bulk, loops.notify).
NOT_ON_SQLITE = ("psycopg", "psycopg_binary", "psycopg_c")

# `manage.py runloops` until its cluster would fork: then what the processes import afterwards
# (the pusher and monitor: the broker; the workers: the delivery task; the main process: the clock
# and the housekeeping jobs, with the configured host). Django runs no command before its own setup,
# so the cluster's start is replaced only once the settings are loaded, as manage.py loads them.
PROBE = """
import json, os, sys
sys.path.insert(0, os.getcwd())
import django.core.management as management
import manage

real_execute = management.execute_from_command_line


def probe(cluster):
    before_fork = sorted(sys.modules)
    from django_q.brokers import get_broker

    get_broker()
    import scheduler.tasks
    from scheduler.clock import Clock
    from scheduler.housekeeping import default_jobs

    default_jobs()
    print(json.dumps({"before_fork": before_fork, "after_fork": sorted(sys.modules)}), flush=True)
    os._exit(0)


def execute(argv):
    import django

    django.setup()
    from django_q.cluster import Cluster

    Cluster.start = probe
    real_execute(argv)


management.execute_from_command_line = execute
sys.argv = ["manage.py", "runloops"]
manage.main()
print("runloops returned without starting its cluster", flush=True)
"""


def imported(modules, names) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(f"{name}.") for name in names))


def scheduler_env(tmp_path) -> dict:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "dshloop.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'probe.sqlite3'}",  # never opened before the fork
        "DJANGO_SECRET_KEY": "probe",
        "DSHLOOP_HOST": "local",
    }
    env.pop("DSHLOOP_SCHEDULER_PROCESS", None)  # manage.py sets it for runloops
    return env


def test_runloops_start_up_imports_neither_the_web_stack_nor_a_process_s_own_modules_before_the_fork(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=settings.BASE_DIR,
        env=scheduler_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    modules = json.loads(result.stdout.strip().splitlines()[-1])

    assert imported(modules["after_fork"], NEVER) == []
    assert imported(modules["before_fork"], NOT_BEFORE_FORK) == []
    assert imported(modules["after_fork"], NOT_ON_SQLITE) == []
    # The probe did reach the processes' own modules (it would pass vacuously otherwise).
    assert {"scheduler.broker", "scheduler.delivery", "scheduler.clock", "sessions_app.hosts.local"} <= set(
        modules["after_fork"]
    )


IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| +([\w.]+)\s*$", re.MULTILINE)


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_a_delivering_scheduler_imports_nothing_of_the_web_stack_in_any_process(api, schedulers):
    # Every process of the tree writes its imports to the log (PYTHONPROFILEIMPORTTIME: -X importtime).
    schedulers.env["PYTHONPROFILEIMPORTTIME"] = "1"
    [scheduler] = schedulers.start_ready()
    loop = api.tool("loop_create", {"prompt": "ping", "schedule": {"kind": "after", "after_seconds": 1}}).json()
    wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop["loop_id"], status="delivered").exists(),
        timeout=15,
        message="the delivery",
    )
    time.sleep(0.5)  # the worker's last imports reach the log
    scheduler.terminate()

    modules = set(IMPORT_LINE.findall(scheduler.output()))
    assert "scheduler.delivery" in modules  # the workers' imports are in the log too
    assert imported(modules, NEVER) == []
    if connection.vendor == "sqlite":  # the clock and the workers wrote rows (core.bulk) without it
        assert imported(modules, NOT_ON_SQLITE) == []
