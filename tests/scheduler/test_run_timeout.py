"""contract §14: a `new` run never waits forever. The outcome poll cancels a fresh session's turn
past DSHLOOP_RUN_TIMEOUT_SECONDS, or stuck waiting for a person, and fails the run; a run into an
existing session is only marked. The host here is a stand-in that records what it is asked (the
real DSH's side of it is in tests/sessions_app/test_dsh_unattended.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from loops.counters import read_counters
from loops.models import Loop, LoopRun, RunStatus
from scheduler.outcome_watch import poll_outcomes
from scheduler.outcomes import record_outcome
from sessions_app.hosts.base import Capabilities, HostError, RunRef, TurnEnd
from sessions_app.hosts.dsh_turns import stall_of
from tests.conftest import captured_log, create_loop, every

pytestmark = pytest.mark.django_db(transaction=True)


class WatchedHost:
    """A host that reports turn ends and cancels turns, as DSH does: `answers` by run ID."""

    capabilities = Capabilities(delivery_batch=1, transactional=False, turn_outcomes=True, workspaces=True)

    def __init__(self):
        self.answers: dict[str, TurnEnd] = {}
        self.asked: list[RunRef] = []
        self.cancelled: list[str] = []
        self.cancel_fails = False
        self.read_fails = False

    def turn_outcomes(self, runs: list[RunRef]) -> dict[str, TurnEnd]:
        if self.read_fails:
            raise HostError("DSH is unreachable", transient=True)
        self.asked += runs
        return {run.run_id: self.answers[run.run_id] for run in runs if run.run_id in self.answers}

    def cancel_turn(self, session_id: str) -> None:
        if self.cancel_fails:
            raise HostError("DSH is unreachable", transient=True)
        self.cancelled.append(session_id)


@pytest.fixture
def watched(monkeypatch, settings):
    settings.DSHLOOP_RUN_TIMEOUT_SECONDS = 600
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0
    host = WatchedHost()
    monkeypatch.setattr("scheduler.outcome_watch.get_host", lambda: host)
    monkeypatch.setattr("loops.runs.get_host", lambda: host)
    return host


def delivered_run(run_id: str, *, target: str, ago: timedelta) -> LoopRun:
    loop = create_loop(every(600), target="new" if target == "new" else "self")
    at = timezone.now() - ago
    return LoopRun.objects.create(
        run_id=run_id,
        loop_id=loop.loop_id,
        occurrence_key=f"{loop.loop_id}@1",
        scheduled_at=at,
        claimed_at=at,
        started_at=at,
        finished_at=at,
        status=RunStatus.DELIVERED,
        target=target,
        target_session_id=f"ses_{run_id}",
    )


def test_a_fresh_turn_past_the_timeout_is_cancelled_and_the_run_failed(watched, global_session):
    run = delivered_run("run_slow", target="new", ago=timedelta(minutes=11))
    running = delivered_run("run_young", target="new", ago=timedelta(minutes=9))
    assert poll_outcomes() == 1
    assert watched.cancelled == ["ses_run_slow"]
    run.refresh_from_db()
    assert (run.status, run.outcome) == ("failed", "failed")
    assert run.error.startswith("timed out after 10 min (DSHLOOP_RUN_TIMEOUT_SECONDS)")
    loop = Loop.objects.get(loop_id=run.loop_id)
    assert (loop.last_outcome, loop.consecutive_failures) == ("failed", 1)
    assert read_counters()["timed_out"] == 1
    # Both were asked about, as fresh sessions' runs; only the overdue one was cancelled.
    assert sorted((ref.run_id, ref.fresh) for ref in watched.asked) == [("run_slow", True), ("run_young", True)]
    assert LoopRun.objects.get(run_id=running.run_id).outcome == ""
    assert poll_outcomes() == 0 and watched.cancelled == ["ses_run_slow"]  # once


def test_a_turn_that_ended_before_the_timeout_keeps_its_own_outcome(watched, global_session):
    """Its end was not read in time (the poll came after the timeout, or the host was down): the
    host is asked again before anything is cancelled."""
    fresh = delivered_run("run_fresh", target="new", ago=timedelta(minutes=11))
    person = delivered_run("run_person", target="ses_person", ago=timedelta(minutes=11))
    watched.answers["run_fresh"] = TurnEnd("succeeded", summary="all done")
    watched.answers["run_person"] = TurnEnd("succeeded", summary="replied")
    assert poll_outcomes() == 2
    assert watched.cancelled == []
    for run, summary in ((fresh, "all done"), (person, "replied")):
        run.refresh_from_db()
        assert (run.status, run.outcome, run.summary, run.error) == ("delivered", "succeeded", summary, "")
    assert "timed_out" not in read_counters()


def test_nothing_is_cancelled_while_the_host_cannot_be_read(watched, global_session, caplog):
    run = delivered_run("run_slow", target="new", ago=timedelta(minutes=11))
    watched.read_fails = True
    with captured_log(caplog, "dshloop.delivery"):
        assert poll_outcomes() == 0
    assert "turn outcomes not read" in caplog.text
    assert watched.cancelled == []
    run.refresh_from_db()
    assert (run.status, run.outcome, run.error) == ("delivered", "", "")


def test_a_turn_in_an_existing_session_is_never_cancelled_only_marked(watched, global_session):
    run = delivered_run("run_person", target="ses_person", ago=timedelta(minutes=11))
    assert poll_outcomes() == 0
    assert watched.cancelled == []
    run.refresh_from_db()
    assert (run.status, run.outcome) == ("delivered", "")
    assert run.error.startswith("no outcome within 10 min (DSHLOOP_RUN_TIMEOUT_SECONDS)")
    assert "never cancels a turn in an existing session" in run.error
    # A report that comes later is still taken.
    record_outcome(run_id=run.run_id, status="succeeded", summary="done")
    run.refresh_from_db()
    assert (run.outcome, run.summary) == ("succeeded", "done")
    assert "timed_out" not in read_counters()


def test_a_cancel_that_fails_records_nothing_and_the_next_poll_tries_again(watched, global_session, caplog):
    run = delivered_run("run_slow", target="new", ago=timedelta(minutes=11))
    watched.cancel_fails = True
    with captured_log(caplog, "dshloop.delivery"):
        assert poll_outcomes() == 0
    assert "could not be cancelled: DSH is unreachable" in caplog.text
    run.refresh_from_db()
    assert (run.status, run.outcome, run.error) == ("delivered", "", "")
    watched.cancel_fails = False
    assert poll_outcomes() == 1 and watched.cancelled == ["ses_run_slow"]


def test_a_fresh_turn_waiting_for_a_person_is_cancelled_at_once(watched, global_session):
    run = delivered_run("run_stuck", target="new", ago=timedelta(minutes=1))
    watched.answers["run_stuck"] = TurnEnd("failed", error="Unattended run stopped: …", stalled=True)
    assert poll_outcomes() == 1
    assert watched.cancelled == ["ses_run_stuck"]
    run.refresh_from_db()
    assert (run.status, run.outcome, run.error) == ("failed", "failed", "Unattended run stopped: …")
    assert "timed_out" not in read_counters()


# -- stall_of, on DSH log events (docs/dsh-unattended.md §2) --------------------------------------------

KEY = "loop_abc@1"


def message(seq: int, rpc_id: str = KEY) -> dict:
    return {"type": "user/message", "seq": seq, "data": {"source": {"kind": "user", "rpcId": rpc_id}}}


def asked(seq: int, approval_id: str = "a1") -> dict:
    data = {"id": approval_id, "toolName": "bash", "reason": "escalate sandbox to danger-full-access"}
    return {"type": "approval/asked", "seq": seq, "data": data}


def decided(seq: int, approval_id: str | None = "a1") -> dict:
    data = {"outcome": "rejected", **({"id": approval_id} if approval_id else {})}
    return {"type": "approval/decided", "seq": seq, "data": data}


def test_an_approval_nobody_answered_is_a_stall_naming_the_tool_and_reason():
    stall = stall_of([message(1), asked(2)], KEY)
    assert stall is not None and stall.stalled and stall.status == "failed"
    assert "waited for an approval for bash (escalate sandbox to danger-full-access)" in stall.error
    assert "fails closed" in stall.error


@pytest.mark.parametrize(
    "events",
    [
        [message(1), asked(2), decided(3)],
        [message(1), asked(2), decided(3, approval_id=None)],
        [message(1), asked(2), {"type": "turn/end", "seq": 3, "data": {}}],
        [asked(1), decided(2, "other"), message(3)],  # before our message: another turn's
        [message(1, "someone-else"), asked(2)],
        [message(1)],
    ],
)
def test_no_stall_once_answered_ended_or_not_ours(events):
    assert stall_of(events, KEY) is None


def test_an_unanswered_question_is_a_stall_and_an_answered_one_is_not():
    call = {"type": "tool/call", "seq": 2, "data": {"name": "ask_user_question", "callId": "c1"}}
    result = {"type": "tool/result", "seq": 3, "data": {"callId": "c1"}}
    assert "an answer to a question (ask_user_question)" in stall_of([message(1), call], KEY).error
    assert stall_of([message(1), call, result], KEY) is None
