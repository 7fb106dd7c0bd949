"""PostgreSQL restarted under running schedulers, on a private throwaway cluster.

The machine's PostgreSQL server is shared (by the rest of the suite and by other runs), so this
test never touches it: it starts its own cluster (tests/pgcluster.py), runs real `runloops`
processes on a database there, stops that server for a few seconds (the schedulers meet
"connection refused") and starts it again. It proves that the schedulers back off instead of
crashing or spinning, deliver every loop again once the server is back, fold the occurrences
missed during the outage into `missed` instead of replaying them, and end with the invariants of
tests/reliability/invariants.py. Timing never decides a result: the test polls for conditions;
the only sleep is the outage itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timedelta

import dj_database_url
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from loops.models import LoopRun
from tests.pgcluster import PgCluster, unavailable_reason
from tests.processes import MANAGE, Schedulers, wait_for

from .invariants import check_invariants, delivered_at_least, make_loops, settled

pytestmark = [
    pytest.mark.process,
    pytest.mark.django_db(transaction=True),
    # (on the PostgreSQL pass without a server, tests/conftest.py skips it with that reason)
    pytest.mark.skipif(
        not getattr(settings, "POSTGRES_PASS", False), reason="a PostgreSQL server restart needs the PostgreSQL pass"
    ),
]

# Long enough for several 1 s loop periods to pass unclaimed (anti-burst must fold them) and for
# the clocks to go through a few rounds of their reconnect backoff.
OUTAGE_SECONDS = 4.0
# The clock's backoff (scheduler.clock.ERROR_BACKOFF: 0.5, 1, 2, 5, 10 s) retries about four times in
# an outage of this length; a crash loop or a tight retry loop logs hundreds of lines.
MAX_RETRY_LINES = 10


@pytest.fixture
def private_postgres(tmp_path):
    """A PostgreSQL cluster of this test's own, removed afterwards whatever happens."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and a private PostgreSQL cluster cannot be made: {reason}")
        pytest.skip(reason)
    cluster = PgCluster(keep_log_in=tmp_path)  # the server log stays beside the scheduler logs
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@contextmanager
def default_connection_at(url: str):
    """Point this process's `default` connection at another database and back.

    The scenario's helpers (make_session, make_loops, settled, check_invariants) are plain ORM
    code on `default`; repointing it keeps them unchanged. Its settings dict is
    settings.DATABASES["default"] itself, so every key changed here is put back.
    """
    target = dj_database_url.parse(url)
    keys = ("NAME", "USER", "PASSWORD", "HOST", "PORT")
    saved = {key: connection.settings_dict[key] for key in keys}
    connection.close()
    connection.settings_dict.update({key: target[key] for key in keys})
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


@pytest.fixture
def private_database(private_postgres, transactional_db):
    """A migrated database on the private cluster, used by this process's ORM during the test.

    It depends on transactional_db so that it is torn down first: pytest-django's flush after the
    test then runs on the shared test database as for any other test (and the private database,
    deleted with its cluster, needs none).
    """
    url = private_postgres.create_database("dshloop")
    migrate = subprocess.run(
        [sys.executable, str(MANAGE), "migrate", "--noinput"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dshloop.settings",
            "DATABASE_URL": url,
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        },
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    with default_connection_at(url):
        yield url


def loops_delivered_since(loops, moment: datetime) -> set[str]:
    """The loops with a delivered run claimed at or after `moment`."""
    return set(
        LoopRun.objects.filter(
            loop_id__in=[loop.loop_id for loop in loops], status="delivered", claimed_at__gte=moment
        ).values_list("loop_id", flat=True)
    )


DELIVERED_LINE = re.compile(r"loop=\S+ scheduled=(\S+) outcome=delivered")


def delivered_since(output: str, moment: datetime) -> int:
    """How many occurrences scheduled at or after `moment` a scheduler's log records as delivered."""
    return sum(datetime.fromisoformat(scheduled) >= moment for scheduled in DELIVERED_LINE.findall(output))


def test_postgresql_restart_mid_run_reconnects_without_crash_loop_then_no_burst(
    private_postgres, private_database, tmp_path, make_session
):
    """The clocks back off while the database is gone (no crash, no crash loop), then every loop
    is delivered again with anti-burst: the occurrences missed during the outage are folded into
    `missed`, not replayed one by one."""
    sessions = [make_session(f"ses_{i:03d}").session_id for i in range(20)]
    # A short lease: deliveries cut off by the server going away are re-driven within the test.
    schedulers = Schedulers(tmp_path, database_url=private_database, DSHLOOP_RUN_LEASE_SECONDS="5")
    try:
        started = schedulers.start_ready(2)
        loops = make_loops(100, every=1, sessions=sessions)
        wait_for(
            lambda: delivered_at_least(loops, 2),
            timeout=30,
            interval=0.2,
            message="two deliveries per loop before the restart",
        )

        # The fault: a fast shutdown cuts every connection; for OUTAGE_SECONDS the schedulers'
        # reconnects are refused; then the server comes back on the same port.
        private_postgres.stop()
        stopped_at = timezone.now()  # every claim before the outage committed before this
        time.sleep(OUTAGE_SECONDS)  # the outage itself, not a synchronisation
        # Health tells the truth: a 503 naming the database, never a 500.
        down = Client().get("/api/health")
        assert down.status_code == 503 and down.json()["database"] == "error", down.content
        back_at = timezone.now()  # every claim after the outage is taken after this
        private_postgres.start()
        # ...and the next request after the restart finds the database on a new connection (the
        # schedulers' last ticks, before the outage, are still within 60 s: 200).
        up = Client().get("/api/health")
        assert up.status_code == 200 and up.json()["database"] == "ok", up.content
        connection.close()  # a fresh connection for the helpers below, whatever health left

        wait_for(
            lambda: len(loops_delivered_since(loops, back_at)) == len(loops),
            timeout=40,
            interval=0.2,
            message="every loop to be delivered again after the restart",
        )
        # Both schedulers recovered, not just one of them: each delivers new occurrences again.
        wait_for(
            lambda: all(delivered_since(s.output(), back_at - timedelta(seconds=1)) for s in started),
            timeout=30,
            interval=0.2,
            message="each scheduler to deliver again after the restart",
        )
        assert all(scheduler.running() for scheduler in started), "a scheduler died with the database"

        until = timezone.now() - timedelta(seconds=1)
        wait_for(lambda: settled(until), timeout=30, interval=0.2, message="in-flight deliveries to finish")
        for scheduler in started:
            assert scheduler.terminate() < 10
        for scheduler in started:
            output = scheduler.output()
            retries = output.count("database unavailable")
            # The clock saw the outage, and backed off: a handful of "retrying" lines, not a
            # tight loop (the listeners and the task queue's pusher back off too).
            assert 1 <= retries <= MAX_RETRY_LINES, f"{retries} retry lines:\n{output[-3000:]}"
            for line in ("cannot listen on", "task queue unavailable"):
                assert output.count(line) <= MAX_RETRY_LINES, f"{line!r} {output.count(line)} times"
            # Its clock's loop outlived the outage: it is listening for wake-ups again.
            assert "listening on dshloop_clock again" in output, output[-3000:]
            # Nothing in the scheduler's cluster died of the outage: django-q2's sentinel respawns a
            # dead pusher, monitor or worker and says so.
            assert "reincarnated" not in output, output[-3000:]

        check_invariants(loops, until=until, allow_missed=True)
        runs = list(LoopRun.objects.filter(loop_id__in=[loop.loop_id for loop in loops]).order_by("claimed_at"))
        # Anti-burst: nothing scheduled inside the outage was delivered one by one. A claim before
        # it takes an occurrence due by stopped_at; one after it takes the latest due occurrence,
        # less than a period before back_at; the occurrences in between exist only as `missed`.
        replayed = [
            run.occurrence_key for run in runs if stopped_at < run.scheduled_at < back_at - timedelta(seconds=1)
        ]
        assert not replayed, f"occurrences of the outage replayed one by one: {replayed[:5]}"
        # ...and each loop's first delivery after the outage counts what it folded (the outage is
        # several periods long, so every loop missed some).
        first_after = {}
        for run in runs:
            if run.claimed_at >= back_at:
                first_after.setdefault(run.loop_id, run)
        assert len(first_after) == len(loops)
        not_folded = [run.occurrence_key for run in first_after.values() if run.missed < 1]
        assert not not_folded, f"first runs after the outage with missed=0: {not_folded[:5]}"
    finally:
        schedulers.close()
