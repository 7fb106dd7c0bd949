"""One message the database refuses fails only its own run (the embedded host, where a batch's
messages and records share one transaction): the other runs of the batch are delivered and
recorded at once, the refused one fails with the database's own words, and health says so.

A trigger stands in for whatever can make the database refuse one insert (a constraint, an
extension, a full tablespace for one partition): on PostgreSQL it aborts the whole transaction
unless the write was in a savepoint; on SQLite it aborts the statement.
"""

from __future__ import annotations

import logging

import pytest
import time_machine
from django.db import connection

from loops.models import Loop, LoopRun, LoopState, RunStatus
from monitoring.health import health_report
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.hosts.local import LocalHost
from sessions_app.models import InboxMessage, SessionHeader
from sessions_app.services import session_upsert
from tests.conftest import T0, create_loop, every, s
from tests.processes import wait_for

GOOD = [f"ses_good{i}" for i in range(5)]
BAD = "ses_bad"
REFUSAL = "refused by the test trigger"


def _refuse(table: str, operation: str, session_id: str, sqlstate: str = "P0001") -> None:
    """A trigger that makes the database refuse `operation` (INSERT, UPDATE) of one session's rows
    (on PostgreSQL with `sqlstate`: P0001 is plpgsql's own, a refusal a retry meets again)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"CREATE FUNCTION refuse_{operation}() RETURNS trigger AS $$ BEGIN "
                f"IF NEW.session_id = '{session_id}' THEN RAISE EXCEPTION '{REFUSAL}' USING ERRCODE = '{sqlstate}'; "
                "END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER refuse_{operation} BEFORE {operation} ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION refuse_{operation}()"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER refuse_{operation} BEFORE {operation} ON {table} "
                f"WHEN NEW.session_id = '{session_id}' BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
            )


def _unrefuse(table: str, operation: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"DROP TRIGGER IF EXISTS refuse_{operation}" + (f" ON {table}" if connection.vendor == "postgresql" else "")
        )
        if connection.vendor == "postgresql":
            cursor.execute(f"DROP FUNCTION IF EXISTS refuse_{operation}()")


def _refuse_inbox_inserts_for(session_id: str) -> None:
    _refuse(InboxMessage._meta.db_table, "INSERT", session_id)


def _refuse_resumes_of(session_id: str) -> None:
    _refuse(SessionHeader._meta.db_table, "UPDATE", session_id)


@pytest.fixture
def batch(db):
    """Six loops due at once, one into the session whose messages the database refuses; claimed
    together, so one delivery task holds all six runs."""
    for session_id in [*GOOD, BAD]:
        session_upsert(session_id=session_id, changes={"status": "idle"})
    loops = {session_id: create_loop(every(60), target=session_id, at=T0) for session_id in [*GOOD, BAD]}
    with time_machine.travel(T0 + s(60), tick=False):
        run_ids = claim_due(now=T0 + s(60))
    assert len(run_ids) == 6
    return loops, run_ids


def _deliver(run_ids: list[str]) -> int:
    with time_machine.travel(T0 + s(60), tick=False):
        return deliver_runs(run_ids)


def test_one_refused_message_fails_alone_and_the_rest_of_its_batch_is_delivered(batch):
    loops, run_ids = batch
    _refuse_inbox_inserts_for(BAD)

    assert _deliver(run_ids) == 6

    runs = {run.loop_id: run for run in LoopRun.objects.filter(run_id__in=run_ids)}
    for session_id in GOOD:
        run = runs[loops[session_id].loop_id]
        assert run.status == RunStatus.DELIVERED, (session_id, run.error)
        assert run.error == ""
        assert InboxMessage.objects.filter(session_id=session_id, occurrence_key=run.occurrence_key).count() == 1
    bad = runs[loops[BAD].loop_id]
    # At once, with its own error: no retry loop, no other run's words.
    assert bad.status == RunStatus.FAILED
    assert REFUSAL in bad.error and "database refused" in bad.error
    assert not InboxMessage.objects.filter(session_id=BAD).exists()
    assert Loop.objects.get(loop_id=loops[BAD].loop_id).last_result == RunStatus.FAILED
    assert {Loop.objects.get(loop_id=loops[g].loop_id).last_result for g in GOOD} == {RunStatus.DELIVERED}


def test_a_message_that_met_a_deadlock_is_retried_not_failed(batch):
    """A message delivered alone takes its session's inbox lock outside its batch's order, so it can
    meet a deadlock with another scheduler's batch (SQLSTATE 40P01): nothing is wrong with it, so its
    run is retried later rather than failed; the rest of its batch is delivered."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no deadlocks between writers (it serializes them)")
    loops, run_ids = batch
    _refuse(InboxMessage._meta.db_table, "INSERT", BAD, sqlstate="40P01")

    _deliver(run_ids)

    runs = {run.loop_id: run for run in LoopRun.objects.filter(run_id__in=run_ids)}
    assert {runs[loops[g].loop_id].status for g in GOOD} == {RunStatus.DELIVERED}
    bad = runs[loops[BAD].loop_id]
    assert (bad.status, bad.retry_at is not None) == (RunStatus.CLAIMED, True), (bad.status, bad.error)
    assert REFUSAL in bad.error


def test_the_next_batch_after_a_refusal_is_delivered_too(batch):
    """The savepoint leaves the connection usable: later batches (the good loops' next
    occurrences) go through while the bad session still refuses."""
    loops, run_ids = batch
    _refuse_inbox_inserts_for(BAD)
    _deliver(run_ids)

    with time_machine.travel(T0 + s(120), tick=False):
        later = claim_due(now=T0 + s(120))
        deliver_runs(later)
    statuses = sorted(LoopRun.objects.filter(run_id__in=later).values_list("status", flat=True))
    assert statuses == [RunStatus.DELIVERED] * 5 + [RunStatus.FAILED]


def test_a_resume_the_database_refuses_fails_only_its_own_run(batch):
    loops, run_ids = batch
    SessionHeader.objects.filter(session_id=BAD).update(status="cold")
    _refuse_resumes_of(BAD)

    _deliver(run_ids)

    runs = {run.loop_id: run for run in LoopRun.objects.filter(run_id__in=run_ids)}
    assert {runs[loops[g].loop_id].status for g in GOOD} == {RunStatus.DELIVERED}
    bad = runs[loops[BAD].loop_id]
    assert bad.status == RunStatus.FAILED and REFUSAL in bad.error
    assert Loop.objects.get(loop_id=loops[BAD].loop_id).state == LoopState.SCHEDULED


def test_health_reports_recently_failed_deliveries(batch, alive_scheduler):
    loops, run_ids = batch
    _refuse_inbox_inserts_for(BAD)
    _deliver(run_ids)

    status, body = health_report(T0 + s(61))

    assert status == 200  # loops still fire
    assert any("1 delivery failed" in problem for problem in body["problems"]), body


@pytest.mark.process
def test_under_a_real_scheduler_the_batch_is_delivered_on_time_and_the_bad_run_fails_at_once(
    transactional_db, schedulers, alive_scheduler
):
    """Real `runloops`: six loops every 2 s, one into the refusing session. Every occurrence of the
    good ones is delivered on its grid, and the bad one's run fails within seconds with its own
    error, never waiting out a lease."""
    for session_id in [*GOOD, BAD]:
        session_upsert(session_id=session_id, changes={"status": "idle"})
    _refuse_inbox_inserts_for(BAD)
    try:
        loops = {session_id: create_loop(every(2), target=session_id) for session_id in [*GOOD, BAD]}
        schedulers.start(1)
        bad = loops[BAD].loop_id

        # The refused loop's failures back it off (scheduler.failures): its first run is the one to watch.
        wait_for(
            lambda: (
                LoopRun.objects.filter(loop_id=bad, status=RunStatus.FAILED).exists()
                and LoopRun.objects.filter(status=RunStatus.DELIVERED).count() >= 10
            ),
            timeout=30,
            message="the refused loop's run failed and two rounds of the others delivered",
        )

        finished = LoopRun.objects.exclude(status__in=[RunStatus.CLAIMED, RunStatus.DELIVERING])
        for run in finished.filter(loop_id=bad):
            if run.status == RunStatus.SKIPPED:  # what its failure backoff passes over, counted
                assert "backs off" in run.error and run.missed > 0, run.error
                continue
            assert run.status == RunStatus.FAILED and REFUSAL in run.error, run.error
            assert (run.finished_at - run.scheduled_at).total_seconds() < 5
        good = finished.exclude(loop_id=bad)
        assert good.count() >= 10
        for run in good:
            assert run.status == RunStatus.DELIVERED and run.error == "", (run.status, run.error)
            # On its grid: delivered within a second or two of its moment, never after a lease.
            assert (run.finished_at - run.scheduled_at).total_seconds() < 3
        assert not LoopRun.objects.filter(status__in=[RunStatus.CLAIMED, RunStatus.DELIVERING], attempt__gt=1).exists()
    finally:
        _unrefuse(InboxMessage._meta.db_table, "INSERT")


def test_a_session_gone_before_its_message_fails_its_run_and_each_occurrence_is_recorded_once(
    batch, monkeypatch, caplog
):
    """The embedded host's records are written before its messages, as if every message is taken;
    one that is not (its session deleted meanwhile) undoes them, and the batch is recorded again as
    it went: one message per good run, the gone session's run failed, one log line per occurrence."""
    loops, run_ids = batch
    deliver_many = LocalHost.deliver_many

    def session_goes_first(self, messages):
        SessionHeader.objects.filter(session_id=BAD).delete()
        return deliver_many(self, messages)

    monkeypatch.setattr(LocalHost, "deliver_many", session_goes_first)
    with caplog.at_level(logging.INFO, logger="dshloop.delivery"):
        assert _deliver(run_ids) == 6

    runs = {run.loop_id: run for run in LoopRun.objects.filter(run_id__in=run_ids)}
    for session_id in GOOD:
        run = runs[loops[session_id].loop_id]
        assert (run.status, run.error) == (RunStatus.DELIVERED, "")
        assert InboxMessage.objects.filter(session_id=session_id, occurrence_key=run.occurrence_key).count() == 1
    bad = runs[loops[BAD].loop_id]
    assert bad.status == RunStatus.FAILED and "does not exist" in bad.error
    assert Loop.objects.get(loop_id=loops[BAD].loop_id).last_result == RunStatus.FAILED
    assert InboxMessage.objects.count() == len(GOOD)
    lines = [record.getMessage() for record in caplog.records if "outcome=" in record.getMessage()]
    assert sorted(line.split()[0] for line in lines) == sorted(f"loop={loop.loop_id}" for loop in loops.values())
