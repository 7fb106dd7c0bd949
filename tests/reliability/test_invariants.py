"""The invariant checker itself: it passes a clean history and catches each kind of fault it names
(a lost occurrence, a double dispatch, a burst, a stuck run or loop). Without this, a checker that
asserts nothing would make every fault-injection test pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from loops.models import Loop, LoopRun, LoopState
from sessions_app.models import InboxMessage

from .invariants import check_invariants

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PERIOD = timedelta(seconds=10)


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def add_run(
    loop: Loop,
    k: int,
    *,
    status="delivered",
    claimed_late=s(0.1),
    missed=0,
    message=True,
    session_id=None,
    retry_at=None,
) -> LoopRun:
    scheduled = loop.created_at + PERIOD * k
    run = LoopRun.objects.create(
        run_id=f"run_{loop.loop_id}_{k}",
        loop_id=loop.loop_id,
        occurrence_key=f"{loop.loop_id}@{k}",
        scheduled_at=scheduled,
        status=status,
        attempt=1,
        missed=missed,
        claimed_at=scheduled + claimed_late,
        finished_at=scheduled + claimed_late if status == "delivered" else None,
        retry_at=retry_at,
    )
    if message:
        InboxMessage.objects.create(
            message_id=f"msg_{run.run_id}",
            session_id=session_id or loop.session_id,
            text="<loop/>",
            delivery="next_turn",
            occurrence_key=run.occurrence_key,
            source={"kind": "loop", "loop_id": loop.loop_id, "run_id": run.run_id},
            created_at=run.claimed_at,
            seq=k,
        )
    return run


@pytest.fixture
def loop(db) -> Loop:
    """An every-10 s loop created at T0, delivered at T0+10 and T0+20, next due at T0+30."""
    loop = Loop.objects.create(
        loop_id="loop_a",
        prompt="p",
        kind="every",
        every_seconds=10,
        session_id="ses_a",
        created_by_session_id="ses_a",
        created_at=T0,
        next_at=T0 + s(30),
        state=LoopState.SCHEDULED,
    )
    add_run(loop, 1)
    add_run(loop, 2)
    return loop


UNTIL = T0 + s(25)


def test_a_clean_history_passes(loop):
    tally = check_invariants([loop], until=UNTIL, allow_missed=False)
    assert (tally.delivered, tally.missed, tally.in_flight) == (2, 0, 0)


def test_a_folded_occurrence_passes_only_when_missed_is_allowed(loop):
    add_run(loop, 4, missed=1, claimed_late=s(1))  # T0+30 folded into T0+40
    until = T0 + s(45)
    check_invariants([loop], until=until, allow_missed=True)
    with pytest.raises(AssertionError, match="folded"):
        check_invariants([loop], until=until, allow_missed=False)


def test_a_lost_occurrence_is_caught(loop):
    LoopRun.objects.filter(run_id="run_loop_a_2").delete()
    InboxMessage.objects.filter(occurrence_key="loop_a@2").delete()
    with pytest.raises(AssertionError, match="dropped"):
        check_invariants([loop], until=UNTIL, allow_missed=True)


def test_a_gap_not_counted_in_missed_is_caught(loop):
    add_run(loop, 4, claimed_late=s(1))  # T0+30 skipped, missed=0
    with pytest.raises(AssertionError, match="missed does not account"):
        check_invariants([loop], until=T0 + s(45), allow_missed=True)


def test_a_delivered_run_without_its_message_is_caught(loop):
    InboxMessage.objects.filter(occurrence_key="loop_a@2").delete()
    with pytest.raises(AssertionError, match="without an inbox message"):
        check_invariants([loop], until=UNTIL, allow_missed=True)


def test_a_message_in_the_wrong_inbox_is_caught(loop):
    InboxMessage.objects.filter(occurrence_key="loop_a@2").update(session_id="ses_b")
    with pytest.raises(AssertionError, match="wrong inbox"):
        check_invariants([loop], until=UNTIL, allow_missed=True)


def test_a_burst_replay_is_caught(loop):
    # Three occurrences claimed together, 25 s after the first was due: a backlog replay.
    add_run(loop, 3, claimed_late=s(25))
    add_run(loop, 4, claimed_late=s(15))
    add_run(loop, 5, claimed_late=s(5))
    with pytest.raises(AssertionError, match="a burst"):
        check_invariants([loop], until=T0 + s(55), allow_missed=True)


def test_an_open_run_before_the_cut_off_is_caught(loop):
    LoopRun.objects.filter(run_id="run_loop_a_2").update(status="delivering", retry_at=T0 + s(60))
    Loop.objects.filter(loop_id="loop_a").update(state=LoopState.RUNNING)
    with pytest.raises(AssertionError, match="not delivered"):
        check_invariants([loop], until=UNTIL, allow_missed=True)


def test_an_open_run_after_the_cut_off_is_fine_if_recoverable(loop):
    add_run(loop, 3, status="claimed", message=False, retry_at=T0 + s(75))
    Loop.objects.filter(loop_id="loop_a").update(state=LoopState.RUNNING, next_at=T0 + s(40))
    tally = check_invariants([loop], until=UNTIL, allow_missed=False)
    assert tally.in_flight == 1


def test_an_open_run_no_scheduler_will_re_drive_is_caught(loop):
    add_run(loop, 3, status="delivering", message=False, retry_at=None)
    Loop.objects.filter(loop_id="loop_a").update(state=LoopState.RUNNING, next_at=T0 + s(40))
    with pytest.raises(AssertionError, match="no scheduler will re-drive"):
        check_invariants([loop], until=UNTIL, allow_missed=True)


def test_a_loop_stuck_running_with_nothing_in_flight_is_caught(loop):
    Loop.objects.filter(loop_id="loop_a").update(state=LoopState.RUNNING)
    with pytest.raises(AssertionError, match="state running with 0 run"):
        check_invariants([loop], until=UNTIL, allow_missed=True)
