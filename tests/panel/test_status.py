"""The local composer status (spec §8.1): one session's loops only, compact, embeddable."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from loops.models import Loop, LoopState

pytestmark = pytest.mark.django_db


def status(client, session_id: str, fragment: bool = False) -> str:
    response = client.get(f"/panel/sessions/{session_id}/status" + ("?fragment=1" if fragment else ""))
    assert response.status_code == 200
    return response.content.decode()


def test_session_a_sees_none_of_session_bs_loops(staff_client, make_loop):
    mine = [make_loop(f"A's loop {i}", session_id="ses_a") for i in range(2)]
    theirs = [
        make_loop("B's secret loop", session_id="ses_b"),
        make_loop("to self", session_id="self"),
        make_loop("to new", session_id="new"),
    ]
    for fragment in (False, True):
        html = status(staff_client, "ses_a", fragment)
        assert "2 loops" in html
        for _loop in mine:
            assert "A&#x27;s loop" in html
        assert "B&#x27;s secret loop" not in html and "to self" not in html and "to new" not in html
        assert all(loop.loop_id not in html for loop in theirs)
    html = status(staff_client, "ses_b")
    assert "1 loop<" in html and "A&#x27;s loop" not in html


def test_the_global_interface_sees_its_self_loops(staff_client, make_loop):
    make_loop("to self", session_id="self")
    make_loop("to a", session_id="ses_a")
    html = status(staff_client, "ses_global")
    assert "1 loop<" in html and "to self" in html and "to a" not in html


def test_count_nearest_run_and_problem_indicators(staff_client, make_loop):
    now = timezone.now()
    soon = make_loop("soon", schedule={"kind": "after", "after_seconds": 120})
    later = make_loop("later", schedule={"kind": "every", "every_seconds": 3600})
    late = make_loop("late")
    failing = make_loop("failing")
    more = make_loop("the fifth")
    Loop.objects.filter(loop_id=late.loop_id).update(next_at=now - timedelta(minutes=3))
    Loop.objects.filter(loop_id=failing.loop_id).update(last_result="failed", last_error="unreachable")
    html = status(staff_client, "ses_a")
    assert "5 loops" in html
    assert "1 overdue" in html and "1 failed" in html and "needs-attention" in html
    assert "paused" not in html
    # contract §15: an auto-paused loop is marked paused (and failed: its last run failed).
    Loop.objects.filter(loop_id=failing.loop_id).update(
        state=LoopState.PAUSED, next_at=None, paused_at=now, pause_reason="auto: unreachable"
    )
    html = status(staff_client, "ses_a")
    assert "1 failed" in html and "1 paused" in html
    assert "overdue by 3 min" in html  # the late loop, listed first
    assert re.search(r"next <time[^>]*>in (2 min|1 min \d+ s)<", html)  # the nearest run still ahead: `soon`
    assert "+2 more" in html  # three shown, compactly
    assert 'href="/panel/?session=ses_a"' in html and 'target="_top"' in html
    assert {soon.loop_id, later.loop_id, more.loop_id}  # created through the service


def test_an_empty_status_offers_to_add_a_loop(staff_client, world):
    html = status(staff_client, "ses_untitled")
    assert "0 loops" in html and 'href="/panel/new?session=ses_untitled"' in html


def test_completed_loops_are_not_counted(staff_client, make_loop):
    done = make_loop("done", schedule={"kind": "after", "after_seconds": 60})
    Loop.objects.filter(loop_id=done.loop_id).update(state=LoopState.COMPLETED, next_at=None)
    assert "0 loops" in status(staff_client, "ses_a")


def test_the_status_can_be_framed_and_refreshes_itself(staff_client, world):
    response = staff_client.get("/panel/sessions/ses_a/status")
    assert "X-Frame-Options" not in response  # embeddable: it has no controls, only links
    html = response.content.decode()
    assert '<meta http-equiv="refresh" content="60">' in html and "panel.css" in html
    fragment = status(staff_client, "ses_a", fragment=True)
    assert fragment.lstrip().startswith('<section class="dsh-loop-status')
    # The panel itself stays unframeable.
    assert staff_client.get("/panel/")["X-Frame-Options"] == "DENY"


def test_session_ids_with_odd_characters_work(staff_client, world):
    from sessions_app.services import session_upsert

    session_upsert(session_id="team/alpha beta", changes={"status": "idle"})
    html = status(staff_client, "team/alpha%20beta")
    assert 'href="/panel/?session=team%2Falpha+beta"' in html


def test_status_costs_a_handful_of_queries(staff_client, make_loop, django_assert_max_num_queries):
    for i in range(20):
        make_loop(f"loop {i}")
    # session + user, global interface, summary, the first three, scheduler health (2-3)
    with django_assert_max_num_queries(8):
        status(staff_client, "ses_a")
