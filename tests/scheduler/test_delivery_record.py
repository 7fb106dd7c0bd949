"""Recording a delivery batch: what deliver_run answers for a run it handled, and the order in
which a remote host's record locks the loops (runs, then loops, each in key order)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import time_machine
from django.db import connection, transaction

from loops.events import Actor
from loops.models import Loop, LoopRun, RunStatus
from loops.services.lifecycle import loop_pause
from scheduler.claims import claim_due
from scheduler.delivery import deliver_run, deliver_runs
from sessions_app.hosts.local import LocalHost
from sessions_app.models import SessionHeader
from sessions_app.services import session_upsert
from tests.conftest import T0, create_loop, every, s
from tests.scheduler.test_delivery import wait_until_blocked_on_a_lock


def test_a_run_skipped_because_its_loop_was_paused_first_was_handled(db):
    session_upsert(session_id="ses_target", changes={"status": "idle"})
    loop = create_loop(every(10), target="ses_target", created_by="ses_target", at=T0)
    with time_machine.travel(T0 + s(10), tick=False):
        (run_id,) = claim_due(now=T0 + s(10))
        loop_pause(loop_id=loop.loop_id, actor=Actor.session("ses_target"))

        assert deliver_run(run_id) is True  # handled: recorded skipped

    assert LoopRun.objects.get(run_id=run_id).status == RunStatus.SKIPPED
    with time_machine.travel(T0 + s(10), tick=False):
        assert deliver_run(run_id) is False  # finished: nothing left to drive


@pytest.mark.django_db(transaction=True)
def test_a_remote_record_locks_its_loops_in_key_order_before_updating_them(monkeypatch):
    """The record of a remote host's batch updates its loops one result at a time, in the runs'
    order. A transaction that locks the same loops in key order (as every writer does) while the
    batch is at the host must make the record wait, not deadlock with it. The embedded host plays
    a remote one here."""
    if connection.vendor != "postgresql":
        pytest.skip("needs concurrent writers and row locks (PostgreSQL); SQLite serializes writers")
    monkeypatch.setattr(LocalHost, "capabilities", replace(LocalHost.capabilities, transactional=False))
    for session_id in ("ses_a", "ses_b"):
        session_upsert(session_id=session_id, changes={"status": "idle"})
    first = create_loop(every(10), target="ses_a", created_by="ses_a", at=T0)
    second = create_loop(every(10), target="ses_b", created_by="ses_b", at=T0)
    low, high = sorted([first, second], key=lambda loop: loop.loop_id)
    with time_machine.travel(T0 + s(10), tick=False):
        claim_due(now=T0 + s(10))
    # The higher loop's run first in run order, and a different result for each: two UPDATEs of
    # the loops, the higher loop's first.
    LoopRun.objects.filter(loop_id=high.loop_id).update(run_id="run_0001")
    LoopRun.objects.filter(loop_id=low.loop_id).update(run_id="run_0002")
    SessionHeader.objects.filter(session_id=low.session_id).delete()  # its run fails: target gone
    locked, errors = threading.Event(), []

    def lock_both_in_key_order():
        try:
            with transaction.atomic():
                list(Loop.objects.select_for_update().filter(loop_id=low.loop_id))
                locked.set()
                wait_until_blocked_on_a_lock()  # the record waits for it
                list(Loop.objects.select_for_update().filter(loop_id=high.loop_id))
        except Exception as exc:
            errors.append(exc)
        finally:
            locked.set()
            connection.close()

    other = threading.Thread(target=lock_both_in_key_order)
    real_deliver_many = LocalHost.deliver_many

    def deliver_then_lock_elsewhere(self, *args, **kwargs):
        result = real_deliver_many(self, *args, **kwargs)
        other.start()  # after the lease was taken, before the record
        assert locked.wait(10)
        return result

    monkeypatch.setattr(LocalHost, "deliver_many", deliver_then_lock_elsewhere)
    try:
        with time_machine.travel(T0 + s(10), tick=False):
            assert deliver_runs(["run_0001", "run_0002"]) == 2
    finally:
        other.join(20)
    assert errors == []
    assert LoopRun.objects.get(run_id="run_0001").status == RunStatus.DELIVERED
    assert LoopRun.objects.get(run_id="run_0002").status == RunStatus.FAILED
