"""GET|HEAD /api/health (contract §4, §12): the status code is the verdict, the body says why.

Time is frozen with time-machine; schedulers are heartbeat rows made directly (what a running
`runloops` keeps fresh). The database going away is a patched cursor here (a dead server cannot be
made in a fast test), a connection killed by the server on PostgreSQL, and a real server stopped in
tests/reliability/test_pg_restart.py.
"""

from __future__ import annotations

from datetime import datetime
from unittest import mock

import pytest
import time_machine
from django.db import OperationalError, connection
from django.test import Client

from core.timeutil import to_ms
from loops.models import Loop, LoopRun, LoopState, RunStatus, SchedulerHeartbeat
from monitoring.health import DATABASE_DOWN, scheduler_health
from tests.conftest import T0, captured_log, create_loop, every, s

pytestmark = pytest.mark.django_db

CONTRACT_KEYS = {"database", "scheduler", "due_backlog", "oldest_open_run_age_s", "database_rtt_ms"}


def beat(at: datetime, instance: str = "host-1:100") -> SchedulerHeartbeat:
    return SchedulerHeartbeat.objects.create(
        instance_id=instance, hostname="host-1", pid=100, started_at=at, last_tick_at=at
    )


def health(at: datetime = T0):
    with time_machine.travel(at, tick=False):
        return Client().get("/api/health")


def open_run(loop_id: str, claimed_at: datetime, status: str = RunStatus.CLAIMED) -> LoopRun:
    return LoopRun.objects.create(
        run_id=f"run_{loop_id}_{status}",
        loop_id=loop_id,
        occurrence_key=f"{loop_id}@{to_ms(claimed_at)}:{status}",
        scheduled_at=claimed_at,
        status=status,
        claimed_at=claimed_at,
    )


class TestVerdict:
    def test_no_scheduler_ever_is_503_with_the_numbers_and_the_problem(self):
        response = health()
        assert response.status_code == 503
        body = response.json()
        assert set(body) == CONTRACT_KEYS | {"problems"}
        assert body["database"] == "ok"
        assert body["scheduler"] == {"alive": False, "instances": 0}
        assert len(body["problems"]) == 1 and "`runloops`" in body["problems"][0]

    def test_a_fresh_heartbeat_is_200_with_the_contract_body_and_no_problems_key(self):
        beat(T0 - s(5))
        response = health()
        assert response.status_code == 200, response.content
        body = response.json()
        assert set(body) == CONTRACT_KEYS
        assert body["database"] == "ok"
        assert body["scheduler"] == {"alive": True, "instances": 1, "last_tick_at": to_ms(T0 - s(5))}

    def test_instances_counts_only_the_alive_schedulers(self):
        beat(T0 - s(1), "a")
        beat(T0 - s(30), "b")
        beat(T0 - s(300), "gone")
        body = health().json()
        assert body["scheduler"] == {"alive": True, "instances": 2, "last_tick_at": to_ms(T0 - s(1))}

    def test_a_tick_exactly_60_s_ago_is_still_alive(self):
        beat(T0 - s(60))
        assert health().status_code == 200

    def test_a_heartbeat_61_s_old_is_503_and_says_when_it_last_ticked(self):
        beat(T0 - s(61))
        response = health()
        assert response.status_code == 503
        body = response.json()
        # The stale tick is shown: a scheduler that died (or lost the database) 1 min ago.
        assert body["scheduler"] == {"alive": False, "instances": 0, "last_tick_at": to_ms(T0 - s(61))}
        assert body["problems"] == [
            "No scheduler has ticked in the last 60 s (the last tick was 1 min 1 s ago): "
            "is `runloops` running and reaching the database?"
        ]

    def test_the_panel_banner_reads_the_same_scheduler_object(self):
        beat(T0 - s(61))
        assert scheduler_health(T0) == health().json()["scheduler"]
        beat(T0 - s(2), "b")
        assert scheduler_health(T0) == health().json()["scheduler"]


class TestNumbers:
    def test_due_backlog_counts_only_scheduled_loops_that_are_due(self, make_session):
        beat(T0)
        make_session("ses_a", status="idle")
        loops = [create_loop(every(60), target="ses_a", at=T0 - s(600)) for _ in range(5)]
        due, due_now, future, paused, completed = (loop.loop_id for loop in loops)
        Loop.objects.filter(loop_id=due).update(next_at=T0 - s(30))
        Loop.objects.filter(loop_id=due_now).update(next_at=T0)  # due at this very moment
        Loop.objects.filter(loop_id=future).update(next_at=T0 + s(1))
        Loop.objects.filter(loop_id=paused).update(next_at=T0 - s(30), state=LoopState.PAUSED)
        Loop.objects.filter(loop_id=completed).update(next_at=T0 - s(30), state=LoopState.COMPLETED)
        assert health().json()["due_backlog"] == 2

    def test_oldest_open_run_age_is_from_the_oldest_open_claim(self):
        beat(T0)
        open_run("loop_a", T0 - s(12.5), RunStatus.DELIVERING)
        open_run("loop_b", T0 - s(3))
        open_run("loop_c", T0 - s(900), RunStatus.DELIVERED)  # finished: not open
        assert health().json()["oldest_open_run_age_s"] == 12.5

    def test_oldest_open_run_age_is_0_when_none_is_open(self):
        beat(T0)
        assert health().json()["oldest_open_run_age_s"] == 0

    def test_database_rtt_is_a_positive_number_of_ms(self):
        beat(T0)
        rtt = health().json()["database_rtt_ms"]
        assert isinstance(rtt, float) and 0 < rtt < 10_000


class TestHead:
    @pytest.mark.parametrize("alive", [True, False])
    def test_head_answers_gets_status_without_a_body(self, alive):
        if alive:
            beat(T0)
        with time_machine.travel(T0, tick=False):
            get, head = Client().get("/api/health"), Client().head("/api/health")
        assert head.status_code == get.status_code == (200 if alive else 503)
        assert head["Content-Type"] == "application/json; charset=utf-8"
        assert head.content == b""


class TestDatabaseDown:
    def test_a_database_error_is_503_without_numbers_and_logged(self, caplog):
        beat(T0)
        refused = OperationalError('connection to server at "db.internal" failed: Connection refused')
        with captured_log(caplog, "dshloop.health"), mock.patch.object(connection, "cursor", side_effect=refused):
            response = health()
        assert response.status_code == 503
        assert response.json() == {
            "database": "error",
            "scheduler": {"alive": False, "instances": 0},
            "problems": [DATABASE_DOWN],
        }
        # The cause is for the operator's log, not for an unauthenticated caller.
        assert "db.internal" not in response.content.decode()
        assert "db.internal" in caplog.text
        # Once the database answers again, so does the health check.
        assert health().status_code == 200

    def test_head_is_503_too(self):
        with mock.patch.object(connection, "cursor", side_effect=OperationalError("gone")):
            response = Client().head("/api/health")
        assert response.status_code == 503 and response.content == b""


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_killed_is_replaced_by_the_next_request():
    """A monitor polls exactly while the database comes back: one 503 for the dead connection, then
    a fresh one (the test client, unlike a server, does not close connections between requests)."""
    if connection.vendor != "postgresql":
        pytest.skip("a server-side kill of this connection needs PostgreSQL")
    beat(T0)
    with pytest.raises(OperationalError), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    assert health().json()["database"] == "error"
    response = health()
    assert response.status_code == 200, response.content
    assert response.json()["database"] == "ok"
