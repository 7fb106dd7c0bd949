"""The run lifecycle in the panel: how a turn ended and its summary, on the run history
and the loop's row; why a loop was paused automatically, with Resume offered."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from loops.models import Loop, LoopRun, LoopState
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from scheduler.outcomes import record_outcome
from sessions_app.models import SessionHeader

from .test_operate import fresh, post

pytestmark = pytest.mark.django_db


def fire(loop: Loop) -> LoopRun:
    """Make the loop due now, claim and deliver it."""
    Loop.objects.filter(loop_id=loop.loop_id).update(next_at=timezone.now() - timedelta(seconds=1))
    [run_id] = claim_due(now=timezone.now())
    deliver_runs([run_id])
    return LoopRun.objects.get(run_id=run_id)


def text(response) -> str:
    return html.unescape(response.content.decode())


def test_the_run_history_and_the_row_show_how_the_turn_ended(staff_client, make_loop):
    loop = make_loop("Summarise the build")
    run = fire(loop)
    detail = text(staff_client.get(f"/panel/loops/{loop.loop_id}/"))
    assert "turn succeeded" not in detail and 'class="outcome' not in detail
    record_outcome(run_id=run.run_id, status="succeeded", summary="Build green <b>47 tests</b>")
    detail = text(staff_client.get(f"/panel/loops/{loop.loop_id}/"))
    assert 'id="last-outcome"' in detail and "turn succeeded" in detail
    assert "Build green <b>47 tests</b>" in detail  # shown as text: escaped in the page
    assert "<b>47" not in staff_client.get(f"/panel/loops/{loop.loop_id}/").content.decode()
    row = text(staff_client.get("/panel/"))
    assert "turn succeeded" in row and "Build green" in row


def test_a_failed_turn_shows_its_error_on_the_run(staff_client, make_loop):
    loop = make_loop()
    run = fire(loop)
    record_outcome(run_id=run.run_id, status="failed", error="MISSING_CREDENTIAL: no API key")
    page = text(staff_client.get(f"/panel/loops/{loop.loop_id}/"))
    assert 'class="outcome outcome-failed"' in page and "MISSING_CREDENTIAL: no API key" in page
    assert "1 failed run in a row" in page


def test_an_auto_paused_loop_says_why_and_offers_resume(staff_client, make_loop, settings):
    settings.DSHLOOP_AUTO_PAUSE_AFTER = 2
    loop = make_loop()
    SessionHeader.objects.filter(session_id="ses_a").delete()
    fire(loop)
    fire(loop)
    assert fresh(loop).state == LoopState.PAUSED
    reason = "automatically: Target session 'ses_a' no longer exists."
    index = text(staff_client.get("/panel/?state=paused"))
    assert reason in index and f'action="/panel/loops/{loop.loop_id}/resume"' in index
    detail = text(staff_client.get(f"/panel/loops/{loop.loop_id}/"))
    assert reason in detail and "2 failed runs in a row" in detail
    assert "Paused automatically" in detail  # the change trail names the scheduler's pause
    _, page = post(staff_client, f"/panel/loops/{loop.loop_id}/resume")
    resumed = fresh(loop)
    assert (resumed.state, resumed.consecutive_failures, resumed.pause_reason) == (LoopState.SCHEDULED, 0, "")
