"""A host that gives no answer (its port refuses connections): each attempt is recorded and retried
on the delivery backoff for as long as it lasts, never given up, and the host decides once it
answers; a lease that runs out is not a crash. Over real loopback sockets: the `dsh` adapter and
the `http` one against a port that refuses connections, the reference host (tests/refhost.py)
stopped and started again.
"""

from __future__ import annotations

import logging
from datetime import datetime

import pytest
import time_machine

from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.runs import WAITING_FOR_HOST, lease
from scheduler.claims import claim_due, recover_runs
from scheduler.delivery import deliver_run
from scheduler.prepare import MAX_ATTEMPTS
from scheduler.records import backoff
from tests.conftest import T0, captured_log, create_loop, every, s


def claim(now: datetime) -> list[str]:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now)


def deliver(run_id: str, now: datetime) -> bool:
    with time_machine.travel(now, tick=False):
        return deliver_run(run_id)


def hand_out(run: LoopRun, now: datetime) -> None:
    """The clock's recovery hands the run out again at `now` (a backoff or a lease ran out)."""
    with time_machine.travel(now, tick=False):
        assert recover_runs(now=now) == [run.run_id]


def refused_url() -> str:
    """A loopback port that refuses connections: the reference host, started and stopped."""
    from tests.refhost import RefHost

    host = RefHost().start()
    host.stop()
    return host.url


@pytest.fixture
def dsh_down(db, settings):
    """A loop into an existing session, made on the embedded host, then the scheduler on a DSH
    whose port refuses connections."""
    from sessions_app.services import session_upsert

    session_upsert(session_id="ses_target", changes={"status": "idle"})
    loop = create_loop(every(10), target="ses_target", created_by="ses_target", at=T0)
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL = "dsh", refused_url()
    return loop


def retry_lines(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if "outcome=retrying" in record.getMessage()]


def test_a_dsh_that_refuses_connections_gets_each_attempt_recorded_and_retried_on_the_backoff(dsh_down, caplog):
    (run_id,) = claim(T0 + s(10))
    run = LoopRun.objects.get(run_id=run_id)
    now = T0 + s(10)

    with captured_log(caplog, "dshloop.delivery"):
        for attempt in range(1, MAX_ATTEMPTS + 4):
            assert deliver(run.run_id, now) is True
            run.refresh_from_db()
            # Recorded, not left `delivering` for its lease: back to claimed with the host's words.
            assert (run.status, run.attempt, run.lease_until) == (RunStatus.CLAIMED, attempt, None)
            assert run.error.startswith(WAITING_FOR_HOST) and "DSH is unreachable" in run.error, run.error
            assert run.retry_at == now + backoff(attempt)  # 1, 2, 4, 8, 16, then 16 s again
            now = run.retry_at
            hand_out(run, now)

    # Never given up while DSH cannot be asked; the loop keeps its occurrence in flight.
    assert Loop.objects.get(loop_id=dsh_down.loop_id).state == LoopState.RUNNING
    assert [backoff(attempt).total_seconds() for attempt in range(1, 9)] == [1, 2, 4, 8, 16, 16, 16, 16]
    # One log line per attempt, with the reason, and no traceback.
    lines = retry_lines(caplog)
    assert len(lines) == MAX_ATTEMPTS + 3
    assert not [record for record in caplog.records if record.exc_info]
    assert all(line.occurrence["run_id"] == run.run_id for line in lines)


@pytest.mark.http_host
def test_a_host_down_past_every_attempt_is_delivered_once_when_it_answers(api, host, refhost):
    host.put_session("ses_target", status="idle")
    loop = create_loop(every(10), target="ses_target", created_by="ses_caller", at=T0)
    (run_id,) = claim(T0 + s(10))
    run = LoopRun.objects.get(run_id=run_id)
    now = T0 + s(10)

    refhost.stop()
    for attempt in range(1, MAX_ATTEMPTS + 3):
        assert deliver(run.run_id, now) is True
        run.refresh_from_db()
        assert (run.status, run.attempt) == (RunStatus.CLAIMED, attempt), run.error
        assert run.error.startswith(WAITING_FOR_HOST) and "unreachable" in run.error
        now = run.retry_at
        hand_out(run, now)
    refhost.start()  # the same port
    assert deliver(run.run_id, now) is True

    run.refresh_from_db()
    assert (run.status, run.error, run.attempt) == (RunStatus.DELIVERED, "", MAX_ATTEMPTS + 3)
    assert [m["occurrence_key"] for m in refhost.messages("ses_target")] == [run.occurrence_key]
    assert Loop.objects.get(loop_id=loop.loop_id).last_result == RunStatus.DELIVERED


class Crash(Exception):
    pass


@pytest.mark.http_host
def test_a_remote_run_whose_lease_ran_out_again_and_again_is_asked_of_the_host_not_failed(
    api, host, refhost, monkeypatch
):
    """Its drivers delivered and then stopped before recording, or ran past their lease: handed
    out more than MAX_ATTEMPTS times, the run still goes to the host, whose answer (here: the
    message it has under the occurrence key) decides, not a blind 'kept stopping'."""
    from scheduler import delivery

    host.put_session("ses_target", status="idle")
    create_loop(every(10), target="ses_target", created_by="ses_caller", at=T0)
    (run_id,) = claim(T0 + s(10))
    run = LoopRun.objects.get(run_id=run_id)
    now = T0 + s(10)

    def crash(*args, **kwargs):
        raise Crash

    with monkeypatch.context() as patch:
        patch.setattr(delivery, "_record", crash)  # delivered, then the driver died
        with pytest.raises(Crash):
            deliver(run.run_id, now)
    assert LoopRun.objects.get(run_id=run_id).status == RunStatus.DELIVERING
    for _ in range(MAX_ATTEMPTS):  # every later driver's lease ran out too
        now += lease()
        hand_out(run, now)
    assert LoopRun.objects.get(run_id=run_id).attempt == MAX_ATTEMPTS + 1

    assert deliver(run.run_id, now) is True

    run.refresh_from_db()
    assert (run.status, run.error) == (RunStatus.DELIVERED, ""), run.error
    assert [m["occurrence_key"] for m in refhost.messages("ses_target")] == [run.occurrence_key]


@pytest.mark.http_host
def test_the_first_error_a_host_answers_after_an_outage_gets_one_more_attempt(api, host, refhost):
    host.put_session("ses_target", status="idle")
    create_loop(every(10), target="ses_target", created_by="ses_caller", at=T0)
    (run_id,) = claim(T0 + s(10))
    run = LoopRun.objects.get(run_id=run_id)
    now = T0 + s(10)

    refhost.stop()
    for _ in range(MAX_ATTEMPTS):
        assert deliver(run.run_id, now) is True
        now = LoopRun.objects.get(run_id=run_id).retry_at
        hand_out(run, now)
    refhost.start()
    refhost.fault = "error500"  # back, but not ready yet
    assert deliver(run.run_id, now) is True
    run.refresh_from_db()
    assert (run.status, run.attempt) == (RunStatus.CLAIMED, MAX_ATTEMPTS + 1), run.error
    refhost.fault = "ok"
    hand_out(run, run.retry_at)
    assert deliver(run.run_id, run.retry_at) is True

    run.refresh_from_db()
    assert run.status == RunStatus.DELIVERED
    assert [m["occurrence_key"] for m in refhost.messages("ses_target")] == [run.occurrence_key]
