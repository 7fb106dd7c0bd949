"""Failure backoff and auto-pause end to end: a real `runloops` delivering a loop aimed at a
session deleted from the host, real time (backoff steps shortened through the environment)."""

from __future__ import annotations

import html

import pytest
from django.test import Client

from loops.models import Loop, LoopRun, LoopState, RunStatus
from sessions_app.models import SessionHeader
from tests.conftest import create_loop, every, s
from tests.processes import Schedulers, wait_for

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

BACKOFF = (2, 3, 4, 5)  # seconds; the production default is 30 s, 1 m, 5 m, 15 m, 60 m


@pytest.fixture
def failing_schedulers(tmp_path, host):
    running = Schedulers(
        tmp_path,
        **host.scheduler_env(),
        DSHLOOP_FAILURE_BACKOFF_SECONDS=",".join(map(str, BACKOFF)),
        DSHLOOP_AUTO_PAUSE_AFTER="5",
    )
    yield running
    running.close()


def failed_runs(loop_id: str) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop_id, status=RunStatus.FAILED).order_by("claimed_at"))


def test_a_loop_whose_session_is_gone_backs_off_then_pauses_itself(
    failing_schedulers, make_session, manage_api, django_user_model
):
    make_session("ses_target", status="idle")
    loop = create_loop(every(1), target="ses_target")
    SessionHeader.objects.filter(session_id="ses_target").delete()
    failing_schedulers.start_ready()

    wait_for(lambda: Loop.objects.get(loop_id=loop.loop_id).state == LoopState.PAUSED, timeout=60, message="auto-pause")

    runs = failed_runs(loop.loop_id)
    assert len(runs) == 5 and all("no longer exists" in run.error for run in runs), [r.error for r in runs]
    # Each next occurrence is the first one of the every-1 s grid at least its backoff after the
    # failure before it, and it was claimed then (not earlier).
    gaps = [later.scheduled_at - earlier.finished_at for earlier, later in zip(runs, runs[1:], strict=False)]
    for gap, wait in zip(gaps, BACKOFF, strict=True):
        assert s(wait) <= gap < s(wait + 1), (gaps, BACKOFF)
    assert all(run.claimed_at >= run.scheduled_at for run in runs)

    detail = manage_api.get(f"/api/loops/{loop.loop_id}").json()
    reason = "auto: Target session 'ses_target' no longer exists."
    assert (detail["state"], detail["pause_reason"], detail["consecutive_failures"]) == ("paused", reason, 5)
    assert "next_at" not in detail
    events = manage_api.get(f"/api/loops/{loop.loop_id}/events").json()["events"]
    assert events[0]["kind"] == "auto_paused" and events[0]["actor"] == {"kind": "scheduler"}

    staff = django_user_model.objects.create_user("ada", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    page = html.unescape(client.get(f"/panel/loops/{loop.loop_id}/").content.decode())
    assert "automatically: Target session 'ses_target' no longer exists." in page
    assert f'action="/panel/loops/{loop.loop_id}/resume"' in page


def test_a_success_in_between_resets_the_count(failing_schedulers, make_session):
    make_session("ses_target", status="idle")
    loop = create_loop(every(1), target="ses_target")
    SessionHeader.objects.filter(session_id="ses_target").delete()
    failing_schedulers.start_ready()

    def failures() -> int:
        return Loop.objects.get(loop_id=loop.loop_id).consecutive_failures

    wait_for(lambda: failures() == 2, timeout=30, message="two failures in a row")
    make_session("ses_target", status="idle")  # the session is back
    wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop.loop_id, status=RunStatus.DELIVERED).exists(),
        timeout=30,
        message="a delivery once the session is back",
    )
    assert failures() == 0
    SessionHeader.objects.filter(session_id="ses_target").delete()
    wait_for(lambda: failures() == 1, timeout=30, message="a new first failure")
    loop.refresh_from_db()
    assert loop.state in (LoopState.SCHEDULED, LoopState.RUNNING)
    # The count started again: the first backoff step, not the third.
    [last] = failed_runs(loop.loop_id)[-1:]
    assert loop.next_at is not None and loop.next_at - last.finished_at <= s(BACKOFF[0] + 1)
