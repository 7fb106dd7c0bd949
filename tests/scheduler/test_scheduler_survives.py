"""A real `runloops` keeps scheduling through a stray run row and through an unexpected exception:
the one bad occurrence is skipped visibly, every other loop fires, and the process is still alive
20 s later. On both engines (the suite's two passes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from loops.models import Loop, LoopRun, RunStatus
from loops.runs import occurrence_key
from tests import processes
from tests.processes import wait_for

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

ALIVE_FOR = 20  # seconds the scheduler must survive


def every_two_seconds(api, count: int) -> list[Loop]:
    loops = []
    for index in range(count):
        response = api.tool(
            "loop_create",
            {"prompt": f"loop {index}", "schedule": {"kind": "every", "every_seconds": 2}, "session_id": "ses_target"},
        )
        assert response.status_code == 200, response.content
        loops.append(Loop.objects.get(loop_id=response.json()["loop_id"]))
    return loops


def delivered(loop: Loop) -> int:
    return LoopRun.objects.filter(loop_id=loop.loop_id, status=RunStatus.DELIVERED).count()


def alive_after(scheduler, started: float) -> None:
    """Wait out ALIVE_FOR seconds from the start, then the process must still be running."""
    wait_for(
        lambda: time.monotonic() - started >= ALIVE_FOR or not scheduler.running(),
        timeout=ALIVE_FOR + 5,
        interval=0.5,
        message="the survival window",
    )
    assert scheduler.running(), scheduler.output()[-3000:]


def test_a_stray_run_row_skips_its_occurrence_and_every_other_loop_fires(api, schedulers, make_session):
    make_session("ses_target")
    # The scheduler runs before the loops exist, so that it claims their first occurrence on time
    # (a slow start-up would claim a later grid point instead and miss the stray row's key).
    started = time.monotonic()
    [scheduler] = schedulers.start_ready()
    poisoned, *healthy = every_two_seconds(api, 4)
    # A run that already holds the poisoned loop's next occurrence (a restored backup).
    LoopRun.objects.create(
        run_id="run_stray",
        loop_id=poisoned.loop_id,
        occurrence_key=occurrence_key(poisoned.loop_id, poisoned.next_at),
        scheduled_at=poisoned.next_at,
        status=RunStatus.DELIVERED,
        prompt=poisoned.prompt,
        target="ses_target",
        claimed_at=poisoned.created_at,
        finished_at=poisoned.created_at,
    )

    wait_for(lambda: all(delivered(loop) >= 2 for loop in healthy), timeout=15, message="the healthy loops to fire")
    skipped = wait_for(
        lambda: LoopRun.objects.filter(loop_id=poisoned.loop_id, status=RunStatus.SKIPPED).first(),
        timeout=5,
        message="the skipped occurrence",
    )
    assert "already has run run_stray (delivered)" in skipped.error
    assert skipped.scheduled_at == poisoned.next_at
    # The poisoned loop itself goes on from its next occurrence.
    wait_for(lambda: delivered(poisoned) >= 1, timeout=10, message="the poisoned loop's next occurrence")
    alive_after(scheduler, started)
    assert "Traceback" not in scheduler.output()
    assert "outcome=skipped" in scheduler.output()


def test_an_exception_in_the_claim_path_is_retried_and_every_loop_fires(api, schedulers, make_session, monkeypatch):
    make_session("ses_target")
    loops = every_two_seconds(api, 3)
    monkeypatch.setattr(processes, "MANAGE", Path(__file__).resolve().parent.parent / "faulty_manage.py")
    schedulers.env["DSHLOOP_TEST_CLAIM_FAULTS"] = "3"
    started = time.monotonic()
    [scheduler] = schedulers.start_ready()

    wait_for(lambda: all(delivered(loop) >= 1 for loop in loops), timeout=20, message="every loop to fire")
    output = scheduler.output()
    assert output.count("injected fault in the claim path") >= 3  # logged with its traceback, each time
    assert "the clock's tick raised; retrying" in output
    alive_after(scheduler, started)
    assert not LoopRun.objects.exclude(
        status__in=[RunStatus.DELIVERED, RunStatus.CLAIMED, RunStatus.DELIVERING]
    ).exists()
