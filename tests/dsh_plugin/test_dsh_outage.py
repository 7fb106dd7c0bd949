"""A real DSH (rc.8, with dshloop's plugin) stopped for longer than six leases while loops are due,
then started again, under a real `serve` (its `runloops`) on DSHLOOP_HOST=dsh: nothing is failed
for it, nothing delivered is recorded otherwise, the attempts follow the delivery backoff with one
log line each, every occurrence is delivered or counted in `missed`, and health names DSH while
it is down. Short lease and host timeout, so that six leases pass in seconds.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from datetime import datetime, timedelta

import httpx
import pytest
from django.utils import timezone

from loops.models import Loop, LoopRun, RunStatus
from loops.runs import OPEN_STATUSES
from scheduler.records import backoff
from tests.conftest import create_loop, every
from tests.dsh_plugin.conftest import start_dshloop
from tests.processes import wait_for

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]

LEASE = 4  # s; just over the settings' floor on a remote host: three host calls of the 1 s timeout
OUTAGE = 6 * LEASE + 3  # longer than six leases: a run handed out at each would pass its attempts
PERIOD = 3
SESSIONS = ["ses-outage-0", "ses-outage-1", "ses-outage-2"]
# A human log line of an occurrence that is retried: its time and which occurrence, which attempt.
RETRY_LINE = re.compile(
    r"^(\S+ \S+) WARNING dshloop\.delivery loop=(\S+) scheduled=(\S+) outcome=retrying .* attempt=(\d+) ", re.M
)


def runs_of(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id).order_by("scheduled_at"))


def health_problems(port: int) -> list[str]:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).json().get("problems", [])
    except httpx.HTTPError:
        return []


def settled(loops: list[Loop], before: datetime) -> bool:
    """Every run scheduled before `before` is over, and each loop has a delivered run after it."""
    ids = [loop.loop_id for loop in loops]
    if LoopRun.objects.filter(loop_id__in=ids, scheduled_at__lt=before, status__in=OPEN_STATUSES).exists():
        return False
    return all(LoopRun.objects.filter(loop_id=i, scheduled_at__gt=before, status="delivered").exists() for i in ids)


def test_a_dsh_outage_longer_than_six_leases_fails_nothing_and_loses_nothing(
    plugin_dsh, tmp_path, dshloop_port, workspace, settings
):
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", plugin_dsh.url  # what `serve` runs on
    for session_id in SESSIONS:
        plugin_dsh.call("session.create", {"sessionId": session_id, "cwd": str(workspace)})
    server = start_dshloop(
        tmp_path,
        dshloop_port,
        plugin_dsh,
        workspace,
        DSHLOOP_RUN_LEASE_SECONDS=str(LEASE),
        DSHLOOP_HOST_TIMEOUT_SECONDS="1",
    )
    try:
        loops = [create_loop(every(PERIOD), target=s, created_by=s, prompt=f"Outage check {s}") for s in SESSIONS]
        wait_for(
            lambda: all(LoopRun.objects.filter(loop_id=loop.loop_id, status="delivered") for loop in loops),
            timeout=40,
            message="a first delivery of every loop",
        )

        plugin_dsh.stop()
        stopped = time.monotonic()
        named = wait_for(
            lambda: [p for p in health_problems(dshloop_port) if p.startswith("DSH gives no answer")],
            timeout=2 * PERIOD + 5,
            interval=0.5,
            message="health to name DSH",
        )
        assert "runs are stalled" in named[0] or "run is stalled" in named[0], named
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - stopped)))  # the scenario: DSH down this long
        plugin_dsh.start()
        back = timezone.now()
        wait_for(lambda: settled(loops, back), timeout=40, interval=0.5, message="every loop to deliver again")
        log = server.server.log()
    finally:
        server.stop()

    runs = [run for loop in loops for run in runs_of(loop.loop_id)]
    # Nothing was failed for the outage, least of all as a process that "kept stopping".
    assert not [(r.occurrence_key, r.error) for r in runs if r.status == RunStatus.FAILED]
    # Every message DSH has is its run's, recorded delivered, and no occurrence has two.
    by_key = {run.occurrence_key: run for run in runs}
    for session_id in SESSIONS:
        keys = [m["data"]["source"]["deliveryKey"] for m in plugin_dsh.loop_messages(session_id)]
        assert len(keys) == len(set(keys)), keys
        for key in keys:
            assert by_key[key].status in (RunStatus.DELIVERED, *OPEN_STATUSES), (key, by_key[key].status)
            assert by_key[key].status == RunStatus.DELIVERED or by_key[key].scheduled_at > back
    # Every loop's grid across the outage: consecutive runs leave no gap `missed` does not count.
    for loop in loops:
        period, previous = timedelta(seconds=PERIOD), loop.created_at
        for run in runs_of(loop.loop_id):
            folded = run.missed if run.status == RunStatus.SKIPPED else run.missed + 1
            assert run.scheduled_at - previous == period * folded, [(r.scheduled_at, r.missed) for r in runs]
            previous = run.scheduled_at
    # One line per failed attempt, on the delivery backoff (1, 2, 4, 8, 16 s …), and no traceback.
    assert "Traceback" not in log
    attempts = defaultdict(list)
    for at, loop_id, scheduled, attempt in RETRY_LINE.findall(log):
        attempts[loop_id, scheduled].append((int(attempt), datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f")))
    retried = {key: lines for key, lines in attempts.items() if len(lines) >= 4}
    assert retried, "no run was retried through the outage"
    gaps = 0
    for (loop_id, scheduled), lines in retried.items():
        [run] = [r for r in runs if r.loop_id == loop_id and r.scheduled_at.isoformat() == scheduled]
        numbers = [attempt for attempt, _ in lines]
        assert numbers == sorted(set(numbers)), lines  # one line per attempt, never two
        # Each failed attempt has its line; a hand-out whose driver ran past its lease records none.
        assert run.status == RunStatus.DELIVERED and run.attempt > numbers[-1], (run.attempt, lines)
        for (attempt, at), (following, next_at) in zip(lines, lines[1:], strict=False):
            if following == attempt + 1:
                gap = (next_at - at).total_seconds()
                assert backoff(attempt).total_seconds() - 0.05 <= gap <= backoff(attempt).total_seconds() + 3, lines
                gaps += 1
    assert gaps >= 3, retried
