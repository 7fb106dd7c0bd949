"""Health and the metrics name a host that gives no answer, and the runs it stalls, from the first
failed attempts on: the scheduler delivering to a DSH whose port refuses connections (a real
socket, tests/refhost.py started and stopped)."""

from __future__ import annotations

import pytest
import time_machine
from django.test import Client

from loops.models import SchedulerHeartbeat
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.services import session_upsert
from tests.conftest import T0, create_loop, every, s
from tests.monitoring.test_metrics import scrape
from tests.scheduler.test_host_unreachable import refused_url

pytestmark = pytest.mark.django_db

STALLED = 3


@pytest.fixture
def dsh_down(settings):
    """STALLED loops due at T0 + 10 s, made on the embedded host; then the scheduler's host is a
    DSH that refuses connections, and a scheduler is alive."""
    for index in range(STALLED):
        session_upsert(session_id=f"ses_{index}", changes={"status": "idle"})
        create_loop(every(10), target=f"ses_{index}", created_by=f"ses_{index}", at=T0)
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", refused_url()
    now = T0 + s(10)
    SchedulerHeartbeat.objects.create(instance_id="a", hostname="h", pid=1, started_at=now, last_tick_at=now)
    return now


def health(now):
    with time_machine.travel(now, tick=False):
        return Client().get("/api/health")


def test_health_names_the_host_that_gives_no_answer_and_the_runs_it_stalls(dsh_down):
    now = dsh_down
    with time_machine.travel(now, tick=False):
        run_ids = claim_due(now=now)
        assert len(run_ids) == STALLED
        assert deliver_runs(run_ids) == STALLED  # each one's first attempt: refused

    response = health(now + s(1))

    assert response.status_code == 200  # loops still fire: the contract's verdict
    problems = response.json()["problems"]
    assert problems == [
        f"DSH gives no answer (refused or timed out): {STALLED} runs are stalled, retried until it answers; "
        "is it running?"
    ]
    assert "127.0.0.1" not in str(problems)  # no address in a body that needs no token


def test_the_metrics_count_the_runs_waiting_for_the_host(dsh_down, manage_token):
    now = dsh_down
    assert scrape(manage_token)["dshloop_runs_waiting_for_host"] == 0
    with time_machine.travel(now, tick=False):
        deliver_runs(claim_due(now=now))

    with time_machine.travel(now + s(1), tick=False):
        assert scrape(manage_token)["dshloop_runs_waiting_for_host"] == STALLED
