"""contract §16 end to end: a real `runloops`, stopped and started again, and two loops that end while
it is down — one at its max_runs, one at its ends_at. After the restart each gets one catch-up (counted
once), ends exactly at its bound, and nothing runs after it. Real time; on both engines."""

from __future__ import annotations

import pytest
from django.utils import timezone

from core.timeutil import to_ms
from loops.models import Loop, LoopEvent, LoopRun, LoopState, RunStatus
from tests.conftest import create_loop, every, s
from tests.processes import Schedulers, wait_for

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def schedulers(tmp_path, host):
    running = Schedulers(tmp_path, **host.scheduler_env())
    yield running
    running.close()


def delivered(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id, status=RunStatus.DELIVERED).order_by("scheduled_at"))


def test_loops_end_at_their_bounds_across_a_scheduler_restart(schedulers, make_session, manage_api):
    make_session("ses_target", status="idle")
    counted = create_loop(every(1), target="ses_target")
    capped = create_loop(every(1), target="ses_target")
    first = schedulers.start_ready()[0]
    wait_for(lambda: all(delivered(loop.loop_id) for loop in (counted, capped)), timeout=30, message="first runs")
    assert first.terminate() < 10
    stopped_at = timezone.now()

    # Both bounds are set while no scheduler runs, and both are reached during the downtime.
    runs_before = Loop.objects.get(loop_id=counted.loop_id).runs_delivered
    limit = runs_before + 2
    ends_at = stopped_at + s(1.5)
    for loop, body in ((counted, {"max_runs": limit}), (capped, {"ends_at": to_ms(ends_at)})):
        response = manage_api.client.patch(
            f"/api/loops/{loop.loop_id}", data=body, content_type="application/json", headers=manage_api.headers()
        )
        assert response.status_code == 200, response.content
    wait_for(lambda: timezone.now() > ends_at + s(2), timeout=10, message="a downtime past the end")
    capped_before = len(delivered(capped.loop_id))

    restarted_at = timezone.now()
    schedulers.start_ready()
    wait_for(
        lambda: {Loop.objects.get(loop_id=loop.loop_id).state for loop in (counted, capped)} == {LoopState.COMPLETED},
        timeout=30,
        message="both loops to end",
    )

    # max_runs: the catch-up after the downtime counted once, then one more run, and no other.
    runs = delivered(counted.loop_id)
    assert len(runs) == limit == Loop.objects.get(loop_id=counted.loop_id).runs_delivered
    after_restart = [run for run in runs if run.claimed_at >= restarted_at]
    assert len(after_restart) == 2 and after_restart[0].missed >= 2, [(r.scheduled_at, r.missed) for r in runs]
    # ends_at: one catch-up, the last occurrence at or before the end; nothing after it.
    runs = delivered(capped.loop_id)
    anchor = Loop.objects.get(loop_id=capped.loop_id).created_at
    last_on_grid = anchor + s((ends_at - anchor) // s(1))
    assert len(runs) == capped_before + 1
    assert runs[-1].scheduled_at == last_on_grid and runs[-1].missed >= 1
    assert not LoopRun.objects.filter(loop_id=capped.loop_id, scheduled_at__gt=ends_at).exists()

    ended = {
        event.loop_id: event.changes
        for event in LoopEvent.objects.filter(kind="ended", loop_id__in=[counted.loop_id, capped.loop_id])
    }
    assert ended[counted.loop_id] == {"max_runs": [limit, limit]}
    assert list(ended[capped.loop_id]) == ["ends_at"] and ended[capped.loop_id]["ends_at"][0] == to_ms(ends_at)
    assert LoopEvent.objects.filter(kind="ended").count() == 2
