"""The panel's database state filter agrees with presenters.loop_state (the one the API shows)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from loops.filters import STATE_FILTERS, state_q
from loops.models import Loop, LoopState
from loops.presenters import OVERDUE_AFTER, loop_state

pytestmark = pytest.mark.django_db


def test_state_filter_matches_loop_state_on_every_edge(make_loop):
    now = timezone.now()
    cases = {
        "future": (LoopState.SCHEDULED, now + timedelta(minutes=1)),
        "just_due": (LoopState.SCHEDULED, now - timedelta(seconds=1)),
        "at_the_edge": (LoopState.SCHEDULED, now - OVERDUE_AFTER),
        "past_the_edge": (LoopState.SCHEDULED, now - OVERDUE_AFTER - timedelta(milliseconds=1)),
        "no_next": (LoopState.SCHEDULED, None),
        "running_late": (LoopState.RUNNING, now - timedelta(hours=1)),
        "failed": (LoopState.FAILED, None),
        "completed": (LoopState.COMPLETED, None),
        "paused": (LoopState.PAUSED, None),  # contract §9: a paused loop has no next_at
        "paused_with_a_stale_next": (LoopState.PAUSED, now - timedelta(hours=1)),  # still paused, never overdue
    }
    ids = {}
    for name, (state, next_at) in cases.items():
        loop = make_loop(name)
        Loop.objects.filter(loop_id=loop.loop_id).update(state=state, next_at=next_at)
        ids[loop.loop_id] = name
    # Every filter that names a state (all but "last_failed", which is about the last run).
    states = [state for state in STATE_FILTERS if state != "last_failed"]
    assert {"scheduled", "running", "overdue", "paused", "failed", "completed"} <= set(states)
    for state in states:
        by_filter = set(Loop.objects.filter(state_q(state, now)).values_list("loop_id", flat=True))
        by_presenter = {loop.loop_id for loop in Loop.objects.all() if loop_state(loop, now) == state}
        assert by_filter == by_presenter, (state, {ids[i] for i in by_filter ^ by_presenter})
