"""A clock's claim on the embedded host (Capabilities.transactional) delivers its runs itself, in the
claim's transaction, through the delivery path's own steps (resolve, record, deliver: scheduler
.delivery and scheduler.records): a recurring loop's occurrence into a session that exists is
claimed, delivered and recorded in one go, with the run and the loop each written once, and nothing
is left for a worker. A one-shot, a loop's last run and a target gone end as a worker would end them;
a message the database refuses sends the whole claim to a worker, which fails that one alone. A full
claim asks one task worker to take the same claim beside the clock (claim_burst), on PostgreSQL."""

from __future__ import annotations

import time_machine
from django_q.models import OrmQ

from loops.models import Loop, LoopRun, LoopState, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from scheduler.message import loop_message
from sessions_app.models import InboxMessage, SessionHeader
from sessions_app.services import session_upsert
from tests.conftest import T0, after, create_loop, every, s
from tests.scheduler.test_delivery_isolation import REFUSAL, _refuse_inbox_inserts_for


def _claim(at, *, deliver=True):
    with time_machine.travel(at, tick=False):
        return claim_due(now=at, deliver=deliver)


def _sessions(*session_ids):
    for session_id in session_ids:
        session_upsert(session_id=session_id, changes={"status": "idle"})


def test_a_claim_delivers_a_recurring_occurrence_itself_and_records_it(db):
    _sessions("ses_a")
    loop = create_loop(every(60), target="ses_a", prompt="Check A", at=T0)
    Loop.objects.filter(loop_id=loop.loop_id).update(consecutive_failures=2)  # a streak it ends

    claimed = _claim(T0 + s(61))
    assert (list(claimed), claimed.recorded) == ([], 1)
    assert not OrmQ.objects.exists()  # nothing for a worker

    stored = Loop.objects.get(loop_id=loop.loop_id)
    assert (stored.state, stored.next_at, stored.last_run_at) == (LoopState.SCHEDULED, T0 + s(120), T0 + s(61))
    assert (stored.last_result, stored.last_error, stored.runs_delivered, stored.consecutive_failures) == (
        RunStatus.DELIVERED,
        "",
        1,
        0,
    )
    run = LoopRun.objects.get(loop_id=loop.loop_id)
    assert (run.status, run.target_session_id, run.attempt, run.error) == (RunStatus.DELIVERED, "ses_a", 1, "")
    assert (run.started_at, run.finished_at, run.retry_at, run.scheduled_at) == (
        T0 + s(61),
        T0 + s(61),
        None,
        T0 + s(60),
    )
    [message] = InboxMessage.objects.filter(session_id="ses_a")
    assert message.occurrence_key == run.occurrence_key
    assert message.text == loop_message(loop_id=loop.loop_id, prompt="Check A")


def test_a_claim_counts_and_logs_its_deliveries(db, caplog):
    from loops.counters import read_counters

    _sessions("ses_a")
    loop = create_loop(every(60), target="ses_a", at=T0)
    with caplog.at_level("INFO", logger="dshloop.delivery"):
        _claim(T0 + s(62))
    counters = read_counters()
    assert counters.get("occurrences_delivered") == 1, counters
    [line] = [r.getMessage() for r in caplog.records if r.name == "dshloop.delivery"]
    assert f"loop={loop.loop_id}" in line and "outcome=delivered" in line


def test_one_shots_last_runs_and_targets_gone_end_in_the_claim_as_a_worker_ends_them(db):
    _sessions("ses_a", "ses_gone")
    once = create_loop(after(60), target="ses_a", at=T0)  # a one-shot completes its loop
    last = create_loop(every(60), target="ses_a", at=T0)
    Loop.objects.filter(loop_id=last.loop_id).update(max_runs=1)  # its run is its last
    gone = create_loop(every(60), target="ses_gone", at=T0)
    ordinary = create_loop(every(60), target="ses_a", at=T0)
    SessionHeader.objects.filter(session_id="ses_gone").delete()

    claimed = _claim(T0 + s(61))
    assert (list(claimed), claimed.recorded) == ([], 4)
    by_loop = dict(LoopRun.objects.values_list("loop_id", "status"))
    assert by_loop == {
        once.loop_id: RunStatus.DELIVERED,
        last.loop_id: RunStatus.DELIVERED,
        gone.loop_id: RunStatus.FAILED,
        ordinary.loop_id: RunStatus.DELIVERED,
    }
    states = dict(Loop.objects.values_list("loop_id", "state"))
    assert states[once.loop_id] == LoopState.COMPLETED
    assert states[last.loop_id] == LoopState.COMPLETED
    assert states[gone.loop_id] == LoopState.SCHEDULED
    assert states[ordinary.loop_id] == LoopState.SCHEDULED
    assert "ses_gone" in LoopRun.objects.get(loop_id=gone.loop_id).error
    assert Loop.objects.get(loop_id=gone.loop_id).consecutive_failures == 1  # the failure policy, as a worker's


def test_a_message_the_database_refuses_sends_the_whole_claim_down_the_delivery_path(db):
    """The claim's deliveries are undone together, its runs are enqueued as a claim without them
    would have, and the delivery path then fails the refused one alone."""
    _sessions("ses_good", "ses_bad")
    good = create_loop(every(60), target="ses_good", at=T0)
    bad = create_loop(every(60), target="ses_bad", at=T0)
    _refuse_inbox_inserts_for("ses_bad")

    claimed = _claim(T0 + s(61))
    assert (len(claimed), claimed.recorded) == (2, 0)
    assert not InboxMessage.objects.exists()
    assert set(LoopRun.objects.values_list("status", flat=True)) == {RunStatus.CLAIMED}
    assert Loop.objects.filter(runs_delivered=0, last_result="").count() == 2

    deliver_runs(list(claimed), now=T0 + s(61))
    assert LoopRun.objects.get(loop_id=good.loop_id).status == RunStatus.DELIVERED
    refused = LoopRun.objects.get(loop_id=bad.loop_id)
    assert refused.status == RunStatus.FAILED and REFUSAL in refused.error
    assert Loop.objects.get(loop_id=good.loop_id).runs_delivered == 1
    # While the session refuses, each claim with it goes the delivery path: slower, never stalled.
    claimed = _claim(T0 + s(121))
    assert (len(claimed), claimed.recorded) == (2, 0)
    deliver_runs(list(claimed), now=T0 + s(121))
    assert LoopRun.objects.filter(loop_id=good.loop_id, status=RunStatus.DELIVERED).count() == 2


def test_an_occurrence_that_has_a_run_already_is_skipped_and_not_delivered_again(db):
    _sessions("ses_a")
    loop = create_loop(every(60), target="ses_a", at=T0)
    _claim(T0 + s(61))
    [first] = LoopRun.objects.filter(loop_id=loop.loop_id)
    # The deadline moved back by hand (a restored backup): the same occurrence is due again.
    Loop.objects.filter(loop_id=loop.loop_id).update(next_at=T0 + s(60))

    claimed = _claim(T0 + s(62))
    assert (list(claimed), claimed.recorded) == ([], 0)
    skipped = LoopRun.objects.exclude(run_id=first.run_id).get(loop_id=loop.loop_id)
    assert skipped.status == RunStatus.SKIPPED and first.run_id in skipped.error
    assert InboxMessage.objects.filter(session_id="ses_a").count() == 1
    stored = Loop.objects.get(loop_id=loop.loop_id)
    assert (stored.runs_delivered, stored.last_result) == (1, RunStatus.FAILED)


def test_a_task_worker_claims_beside_the_clock_until_a_claim_is_not_full(db):
    from scheduler.claims import claim_burst

    _sessions("ses_a")
    loops = [create_loop(every(60), target="ses_a", at=T0) for _ in range(12)]

    with time_machine.travel(T0 + s(61), tick=False):
        assert claim_burst(batch=5) == 12  # 5, 5, then 2: the burst is over

    assert LoopRun.objects.filter(status=RunStatus.DELIVERED).count() == len(loops)
    assert InboxMessage.objects.filter(session_id="ses_a").count() == len(loops)


def test_a_full_claim_asks_one_task_worker_to_help_on_postgresql(db, monkeypatch):
    """Only on PostgreSQL, where claims run side by side; once per HELP_SECONDS, however many full
    claims the burst takes."""
    from django.db import connection

    from loops.queue import CLAIM_TASK
    from scheduler import clock as clock_module

    _sessions("ses_a")
    for _ in range(7):
        create_loop(every(60), target="ses_a", at=T0)
    monkeypatch.setattr(clock_module, "CLAIM_BATCH", 3)
    clock = clock_module.Clock()

    with time_machine.travel(T0 + s(61), tick=False):
        delays = [clock.tick() for _ in range(3)]

    assert delays[:2] == [0.0, 0.0]  # full claims: more is due right now
    assert LoopRun.objects.filter(status=RunStatus.DELIVERED).count() == 7
    asked = [task for task in OrmQ.objects.all() if task.func() == CLAIM_TASK]
    assert len(asked) == (1 if connection.vendor == "postgresql" else 0)


def test_a_clock_beside_another_live_scheduler_asks_no_worker_to_help(db, monkeypatch):
    from django.db import connection

    from loops.models import SchedulerHeartbeat
    from loops.queue import CLAIM_TASK
    from scheduler import clock as clock_module

    if connection.vendor != "postgresql":
        return  # no helpers on SQLite at all (the test above)
    _sessions("ses_a")
    for _ in range(7):
        create_loop(every(60), target="ses_a", at=T0)
    monkeypatch.setattr(clock_module, "CLAIM_BATCH", 3)
    with time_machine.travel(T0 + s(61), tick=False):
        SchedulerHeartbeat.objects.create(
            instance_id="other", hostname="h", pid=1, started_at=T0, last_tick_at=T0 + s(50)
        )
        clock = clock_module.Clock()
        while clock.tick() == 0.0:
            pass

    assert LoopRun.objects.filter(status=RunStatus.DELIVERED).count() == 7
    assert not [task for task in OrmQ.objects.all() if task.func() == CLAIM_TASK]
