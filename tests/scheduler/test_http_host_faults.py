"""Fault injection over real sockets: `runloops` delivering to a reference host that goes down,
answers 500, hangs past the timeout or sends malformed JSON."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from loops.models import Loop, LoopRun
from tests.processes import wait_for

pytestmark = [pytest.mark.process, pytest.mark.http_host, pytest.mark.django_db(transaction=True)]


def runs_of(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id).order_by("scheduled_at"))


def assert_nothing_lost_or_doubled(refhost, loop: Loop) -> list[LoopRun]:
    # The loop keeps firing while we look: snapshot the host, then the runs, then the host again.
    host_before = {m["occurrence_key"] for m in refhost.messages()}
    runs = runs_of(loop.loop_id)
    host_after = {m["occurrence_key"] for m in refhost.messages()}
    # The host saw each Idempotency-Key at most once as a new message.
    assert set(refhost.new_message_keys.values()) == {1}
    # Every recorded delivery reached the host; every message the host has belongs to a run that
    # is delivered or still being recorded (a remote delivery is recorded after the host answers).
    by_key = {run.occurrence_key: run for run in runs}
    assert {key for key, run in by_key.items() if run.status == "delivered"} <= host_after
    assert all(by_key[key].status in {"delivered", "delivering", "claimed"} for key in host_before)
    # Every grid point up to the last run is a run or folded into one (`missed`): none lost, on grid.
    period, previous = timedelta(seconds=loop.every_seconds), loop.created_at
    for run in runs:
        assert run.scheduled_at - previous == period * (1 + run.missed)
        previous = run.scheduled_at
    return runs


def start_and_create(api, schedulers, every: int = 1) -> Loop:
    schedulers.start(1)
    created = api.tool("loop_create", {"prompt": "p", "schedule": {"kind": "every", "every_seconds": every}}).json()
    wait_for(
        lambda: LoopRun.objects.filter(loop_id=created["loop_id"], status="delivered").exists(),
        timeout=30,
        message="a first delivery",
    )
    return Loop.objects.get(loop_id=created["loop_id"])


def test_host_down_for_ten_seconds_then_back_loses_and_doubles_nothing(api, schedulers, refhost):
    loop = start_and_create(api, schedulers)

    refhost.stop()
    time.sleep(10)  # the scenario: the host is down for ten seconds
    retried = [run for run in runs_of(loop.loop_id) if run.status == "claimed" and run.error]
    assert retried and "unreachable" in retried[0].error  # failing and backing off, not lost
    refhost.start()
    back_at = timezone.now()

    wait_for(
        lambda: any(r.status == "delivered" and r.attempt > 1 for r in runs_of(loop.loop_id)),
        timeout=40,
        message="the stalled occurrence to be delivered on retry",
    )
    wait_for(
        lambda: sum(r.status == "delivered" and r.finished_at > back_at for r in runs_of(loop.loop_id)) >= 3,
        timeout=30,
        message="deliveries to resume on schedule",
    )
    runs = assert_nothing_lost_or_doubled(refhost, loop)
    assert any(run.missed for run in runs)  # the outage was folded, not replayed as a burst


@pytest.mark.parametrize("fault", ["error500", "malformed"])
def test_host_errors_are_retried_and_recover(api, schedulers, refhost, fault):
    loop = start_and_create(api, schedulers)

    refhost.fault = fault
    wait_for(
        lambda: any(r.status == "claimed" and r.error for r in runs_of(loop.loop_id)),
        timeout=15,
        message="a failed attempt",
    )
    refhost.fault = "ok"

    wait_for(
        lambda: any(r.status == "delivered" and r.attempt > 1 for r in runs_of(loop.loop_id)),
        timeout=30,
        message="the retry to succeed",
    )
    assert_nothing_lost_or_doubled(refhost, loop)


def test_a_hanging_host_times_out_and_the_clock_keeps_its_schedule(api, schedulers, refhost):
    schedulers.env["DSHLOOP_HOST_TIMEOUT_SECONDS"] = "1"
    loop = start_and_create(api, schedulers)

    refhost.hang_seconds = 3
    refhost.fault = "hang"
    wait_for(
        lambda: any("did not answer" in r.error for r in runs_of(loop.loop_id)),
        timeout=20,
        message="a timed-out attempt",
    )
    refhost.fault = "ok"

    wait_for(
        lambda: Counter(r.status for r in runs_of(loop.loop_id))["delivered"] >= 4,
        timeout=40,
        message="deliveries to resume",
    )
    assert_nothing_lost_or_doubled(refhost, loop)
