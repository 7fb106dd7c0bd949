"""A `new` loop that fired through the embedded host, for the retention and prompt tests."""

from __future__ import annotations

from datetime import datetime

import time_machine
from django.test import override_settings

from loops.models import LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.models import SessionHeader
from tests.conftest import T0, create_loop, every, s

LONG = "Summarise the night's alerts. " * 20


def fire_at(now: datetime) -> list[LoopRun]:
    """Claim what is due at `now` and deliver it, as the scheduler does."""
    with time_machine.travel(now, tick=False):
        run_ids = claim_due(now=now)
        deliver_runs(run_ids)
    return list(LoopRun.objects.filter(run_id__in=run_ids))


def new_loop_with_runs(count: int, *, prompt: str = LONG) -> tuple[str, list[LoopRun]]:
    """A `new` loop every 10 s that fired `count` times through the embedded host (a short grid
    keeps the frozen times small: the floor on a `new` loop's interval is not what these test)."""
    with override_settings(DSHLOOP_MIN_NEW_INTERVAL_SECONDS=0):
        loop = create_loop(every(10), prompt=prompt, target="new", at=T0)
    runs = []
    for index in range(1, count + 1):
        runs += fire_at(T0 + s(10 * index))
    assert [run.status for run in runs] == [RunStatus.DELIVERED] * count
    return loop.loop_id, sorted(runs, key=lambda run: run.scheduled_at)


def sessions_made_for(runs: list[LoopRun]) -> set[str]:
    return set(
        SessionHeader.objects.filter(created_for__in=[run.occurrence_key for run in runs]).values_list(
            "session_id", flat=True
        )
    )
