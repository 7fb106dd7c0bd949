"""spec §12 scheduler bullets end to end, through real `runloops` processes and real time."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from core.timeutil import from_ms
from loops.models import Loop, LoopRun
from tests.conftest import create_loop, every
from tests.processes import wait_for

# Against both hosts: the embedded one and the HTTP reference host over loopback.
pytestmark = [pytest.mark.process, pytest.mark.both_hosts, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def inbox(host):
    """The messages delivered for one loop, in order, as the host sees them."""

    def messages_for(loop_id: str) -> list[dict]:
        return [m for m in host.messages() if m["occurrence_key"].startswith(f"{loop_id}@")]

    return messages_for


def scheduler_alive() -> bool:
    from monitoring.health import scheduler_health

    return scheduler_health()["alive"]


def start_ready(schedulers, count: int = 1):
    started = schedulers.start(count)
    wait_for(scheduler_alive, timeout=30, message="a scheduler heartbeat")
    return started


def test_after_loop_fires_once_and_leaves_active_list(api, schedulers, inbox):
    start_ready(schedulers)
    loop = api.tool("loop_create", {"prompt": "ping", "schedule": {"kind": "after", "after_seconds": 1}}).json()

    wait_for(
        lambda: Loop.objects.get(loop_id=loop["loop_id"]).state == "completed",
        timeout=10,
        message="the after loop to complete",
    )
    time.sleep(1.5)  # the scenario: time passes and nothing more may arrive

    assert len(inbox(loop["loop_id"])) == 1
    listed = api.tool("loop_list", {"session_id": "global"}).json()["loops"]
    assert loop["loop_id"] not in {item["loop_id"] for item in listed}
    [run] = api.get(f"/api/loops/{loop['loop_id']}/runs").json()["runs"]
    assert run["status"] == "delivered" and run["target_session_id"] == "ses_caller"


def test_after_loop_created_while_clock_sleeps_is_delivered_within_two_seconds(api, schedulers, inbox):
    start_ready(schedulers)
    time.sleep(1)  # nothing is due: the clock is in its long sleep now
    loop = api.tool("loop_create", {"prompt": "wake", "schedule": {"kind": "after", "after_seconds": 1}}).json()

    wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop["loop_id"], status="delivered").exists(),
        timeout=5,
        message="the delivery",
    )

    assert len(inbox(loop["loop_id"])) == 1
    [run] = LoopRun.objects.filter(loop_id=loop["loop_id"])
    assert (run.finished_at - from_ms(loop["created_at"])).total_seconds() <= 2.0


def test_every_loop_recovers_after_restart_with_one_catch_up_and_stays_on_grid(api, schedulers, inbox):
    # A scheduler ran and stopped: the profile's loops outlive it.
    [first] = start_ready(schedulers)
    assert first.terminate() < 10
    # The loop's grid has five occurrences in the past (it was "down" for five periods).
    created_at = timezone.now() - timedelta(seconds=52)
    loop = create_loop(every(10), prompt="tick", target="ses_caller", created_by="ses_caller", at=created_at)
    created_at = loop.created_at

    start_ready(schedulers)
    wait_for(lambda: len(inbox(loop.loop_id)) >= 2, timeout=20, message="catch-up and the next occurrence")

    catch_up, on_grid = LoopRun.objects.filter(loop_id=loop.loop_id).order_by("scheduled_at")[:2]
    assert (catch_up.scheduled_at, catch_up.missed) == (created_at + timedelta(seconds=50), 4)
    assert (on_grid.scheduled_at, on_grid.missed) == (created_at + timedelta(seconds=60), 0)
    assert len(inbox(loop.loop_id)) == 2


def test_new_target_creates_a_fresh_session_per_occurrence(api, schedulers, make_preset, inbox, host, settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0  # two occurrences within seconds; the floor has its own tests
    make_preset("reviewer")
    loop = api.tool(
        "loop_create",
        {
            "prompt": "review",
            "schedule": {"kind": "every", "every_seconds": 1},
            "session_id": "new",
            "preset": "reviewer",
        },
    ).json()
    start_ready(schedulers)

    wait_for(lambda: len(inbox(loop["loop_id"])) >= 2, timeout=15, message="two deliveries")

    sessions = [m["session_id"] for m in inbox(loop["loop_id"])]
    assert len(set(sessions)) == len(sessions)
    for session_id in sessions:
        session = host.session(session_id)
        assert (session["first_prompt"], session["preset"], session["model"]) == ("review", "reviewer", "m1")


def test_actual_session_is_resumed_from_cold_and_reused(api, schedulers, make_session, inbox, host):
    make_session("ses_cold", status="cold", preset="analyst", model="m-cold")
    loop = api.tool(
        "loop_create", {"prompt": "resume", "schedule": {"kind": "every", "every_seconds": 1}, "session_id": "ses_cold"}
    ).json()
    start_ready(schedulers)

    wait_for(lambda: len(inbox(loop["loop_id"])) >= 2, timeout=15, message="two deliveries")

    assert {m["session_id"] for m in inbox(loop["loop_id"])} == {"ses_cold"}
    session = host.session("ses_cold")
    assert (session["status"], session["preset"], session["model"]) == ("idle", "analyst", "m-cold")
    assert inbox(loop["loop_id"])[0]["delivery"] == "next_turn"


def test_self_target_reaches_the_global_interface_session(api, schedulers, global_session, inbox):
    loop = api.tool(
        "loop_create", {"prompt": "report", "schedule": {"kind": "after", "after_seconds": 1}, "session_id": "self"}
    ).json()
    start_ready(schedulers)

    wait_for(lambda: inbox(loop["loop_id"]), timeout=10, message="the delivery")

    assert [m["session_id"] for m in inbox(loop["loop_id"])] == ["ses_global"]


def test_sigterm_stops_the_scheduler_within_ten_seconds_without_orphans(api, schedulers):
    [scheduler] = start_ready(schedulers)
    api.tool("loop_create", {"prompt": "busy", "schedule": {"kind": "every", "every_seconds": 1}})
    time.sleep(1.5)  # let deliveries be in flight when the signal comes

    assert scheduler.terminate() < 10
    with pytest.raises(ProcessLookupError):
        os.killpg(scheduler.pid, 0)  # nothing of its process group is left
    assert not scheduler_alive()  # the heartbeat row went with it


def test_sigint_stops_the_scheduler_too(schedulers):
    [scheduler] = start_ready(schedulers)
    started = time.monotonic()
    scheduler.process.send_signal(signal.SIGINT)
    scheduler.process.wait(15)
    assert time.monotonic() - started < 10
