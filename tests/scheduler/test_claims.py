"""The clock's claim step (spec §3 anti-burst, §5 claim and recovery).

claim_due and recover_runs are called directly with a frozen clock; the enqueued django-q2 tasks are
the OrmQ rows the ORM broker writes in the claim's transaction.
"""

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django_q.models import OrmQ

from core.timeutil import to_ms
from loops import queue, runs
from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.runs import lease
from scheduler import claims
from scheduler.claims import claim_due, recover_runs
from sessions_app.hosts.local import LocalHost
from tests.conftest import T0, every, s


@pytest.fixture
def create(api):
    """loop_create through the tool API at a frozen moment (default T0); returns the Loop row."""

    def make(schedule: dict, *, at: datetime = T0, prompt: str = "Check the deploy", **body) -> Loop:
        with time_machine.travel(at, tick=False):
            response = api.tool("loop_create", {"prompt": prompt, "schedule": schedule, **body})
        assert response.status_code == 200, response.content
        return Loop.objects.get(loop_id=response.json()["loop_id"])

    return make


def enqueued_run_ids() -> list[str]:
    """Run IDs of all delivery tasks waiting in django-q2's ORM queue."""
    ids = []
    for row in OrmQ.objects.order_by("id"):
        assert row.func() == "scheduler.tasks.deliver_runs", row.task
        (batch,) = row.args()
        ids.extend(batch)
    return ids


def claim(now: datetime, **kwargs) -> list[str]:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now, **kwargs)


def recover(now: datetime, **kwargs) -> list[str]:
    with time_machine.travel(now, tick=False):
        return recover_runs(now=now, **kwargs)


def refreshed(loop: Loop) -> Loop:
    loop.refresh_from_db()
    return loop


# --- one run per due loop, enqueued with the claim ----------------------------------------------


def test_claim_creates_one_run_per_due_loop_and_enqueues_its_delivery(create):
    due = [create(every(10)), create(every(10), prompt="second")]
    later = create(every(60))
    now = T0 + s(10)

    run_ids = claim(now)

    assert len(run_ids) == 2
    runs = {run.loop_id: run for run in LoopRun.objects.all()}
    assert set(runs) == {loop.loop_id for loop in due}
    for loop in due:
        run = runs[loop.loop_id]
        assert run.run_id in run_ids
        assert run.occurrence_key == f"{loop.loop_id}@{to_ms(T0 + s(10))}"
        # The claim hands it out to a driver: its first attempt.
        assert (run.status, run.scheduled_at, run.missed, run.attempt) == (RunStatus.CLAIMED, T0 + s(10), 0, 1)
        assert run.claimed_at == now and run.retry_at == now + lease()  # re-driven if its task is lost
        assert (run.prompt, run.target) == (loop.prompt, "ses_caller")
        refreshed(loop)
        assert (loop.state, loop.next_at) == (LoopState.RUNNING, T0 + s(20))
    assert sorted(enqueued_run_ids()) == sorted(run_ids)
    assert refreshed(later).state == LoopState.SCHEDULED and later.next_at == T0 + s(60)


def test_loop_due_exactly_now_is_claimed(create):
    loop = create(every(10))
    assert len(claim(T0 + s(10))) == 1
    assert refreshed(loop).state == LoopState.RUNNING


def test_loop_not_yet_due_is_not_claimed(create):
    loop = create(every(10))
    assert claim(T0 + s(10) - timedelta(milliseconds=1)) == []
    assert not LoopRun.objects.exists() and not OrmQ.objects.exists()
    assert refreshed(loop).state == LoopState.SCHEDULED


def test_failing_enqueue_rolls_back_the_claim(create, monkeypatch):
    loop = create(every(10))

    def broken_async_task(*args, **kwargs):
        raise RuntimeError("broker down")

    monkeypatch.setattr(queue, "async_task", broken_async_task)
    with pytest.raises(RuntimeError, match="broker down"):
        claim(T0 + s(10))

    assert not LoopRun.objects.exists()
    refreshed(loop)
    assert (loop.state, loop.next_at) == (LoopState.SCHEDULED, T0 + s(10))


def test_enqueued_tasks_roll_back_with_the_claim(create, monkeypatch):
    """The broker writes in the claim's transaction (django-q2 #293): a later failure undoes the
    tasks already enqueued, so no task can point at a run that does not exist."""
    loops = [create(every(10)), create(every(10))]
    # One task per run: the second enqueue fails.
    monkeypatch.setattr(LocalHost, "capabilities", replace(LocalHost.capabilities, delivery_batch=1))
    real_async_task = queue.async_task
    calls = []

    def second_enqueue_fails(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("broker down")
        return real_async_task(*args, **kwargs)

    monkeypatch.setattr(queue, "async_task", second_enqueue_fails)
    with pytest.raises(RuntimeError):
        claim(T0 + s(10))

    assert len(calls) == 2
    assert not OrmQ.objects.exists()
    assert not LoopRun.objects.exists()
    assert all(refreshed(loop).next_at == T0 + s(10) for loop in loops)


def test_many_runs_are_enqueued_in_batches(create, monkeypatch):
    monkeypatch.setattr(LocalHost, "capabilities", replace(LocalHost.capabilities, delivery_batch=2))
    for _ in range(5):
        create(every(10))
    run_ids = claim(T0 + s(10))
    assert OrmQ.objects.count() == 3
    assert enqueued_run_ids() == run_ids


def test_second_claim_at_the_same_moment_claims_nothing(create):
    create(every(10))
    create({"kind": "after", "after_seconds": 10})
    now = T0 + s(10)
    assert len(claim(now)) == 2

    assert claim(now) == []
    assert LoopRun.objects.count() == 2
    assert OrmQ.objects.count() == 1


def test_sqlite_claim_is_a_compare_and_swap(create, monkeypatch):
    """A clock that read a due loop another clock has since claimed creates no run (SQLite has no
    row locks; on PostgreSQL FOR UPDATE SKIP LOCKED keeps the second clock from reading it)."""
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL locks the claimed rows instead of compare-and-swap")
    create(every(10))
    real_advance = claims.advance

    def another_clock_claims_it_first(row, now):
        Loop.objects.filter(loop_id=row.loop_id).update(state=LoopState.RUNNING, next_at=T0 + s(20))
        return real_advance(row, now)

    monkeypatch.setattr(claims, "advance", another_clock_claims_it_first)
    assert claim(T0 + s(10)) == []
    assert not LoopRun.objects.exists() and not OrmQ.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_clocks_claim_each_due_occurrence_exactly_once(create):
    loops = [create(every(10)) for _ in range(40)]
    now = T0 + s(10)
    claimed, errors = [], []
    start = threading.Barrier(4)

    def clock():
        try:
            start.wait(10)
            while batch := claim_due(now=now, limit=7):
                claimed.extend(batch)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=clock) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert len(claimed) == len(set(claimed)) == len(loops)
    assert sorted(LoopRun.objects.values_list("loop_id", flat=True)) == sorted(loop.loop_id for loop in loops)
    assert sorted(enqueued_run_ids()) == sorted(claimed)
    assert claim_due(now=now) == []


# --- anti-burst (spec §3): one delivery after downtime, the rest counted as missed ---------------


def test_every_loop_five_periods_late_delivers_once_at_the_latest_grid_point(create):
    loop = create(every(10))  # grid T0+10, T0+20, …
    assert loop.next_at == T0 + s(10)
    now = T0 + s(53)  # due: T0+10, 20, 30, 40, 50 — five occurrences, the clock was down

    (run_id,) = claim(now)

    run = LoopRun.objects.get(run_id=run_id)
    assert run.scheduled_at == T0 + s(50)
    assert run.occurrence_key == f"{loop.loop_id}@{to_ms(T0 + s(50))}"
    assert run.missed == 4
    refreshed(loop)
    assert loop.next_at == T0 + s(60)  # back on the grid, in the future
    assert loop.state == LoopState.RUNNING


def test_every_loop_keeps_millisecond_grid_of_its_creation(create):
    created = T0 + timedelta(milliseconds=123)
    loop = create(every(10), at=created)
    (run_id,) = claim(created + s(41))
    run = LoopRun.objects.get(run_id=run_id)
    assert (run.scheduled_at, run.missed) == (created + s(40), 3)
    assert refreshed(loop).next_at == created + s(50)


def test_cron_loop_five_occurrences_late_delivers_once_at_the_latest(create):
    loop = create({"kind": "cron", "expr": "*/10 * * * *", "tz": "Asia/Kolkata"})  # UTC+05:30
    assert loop.next_at == T0 + timedelta(minutes=10)
    now = T0 + timedelta(minutes=53)  # due: 10:10, 10:20, 10:30, 10:40, 10:50 UTC

    (run_id,) = claim(now)

    run = LoopRun.objects.get(run_id=run_id)
    assert (run.scheduled_at, run.missed) == (T0 + timedelta(minutes=50), 4)
    assert refreshed(loop).next_at == T0 + timedelta(minutes=60)


def test_cron_loop_late_across_a_dst_change_delivers_once(create):
    # Europe/Berlin springs forward on 2025-03-30 at 02:00 -> 03:00 (UTC 01:00).
    created = datetime(2025, 3, 28, 12, 0, tzinfo=UTC)
    loop = create({"kind": "cron", "expr": "30 9 * * *", "tz": "Europe/Berlin"}, at=created)
    assert loop.next_at == datetime(2025, 3, 29, 8, 30, tzinfo=UTC)  # 09:30 CET
    now = datetime(2025, 4, 1, 12, 0, tzinfo=UTC)  # down for four 09:30s

    (run_id,) = claim(now)

    run = LoopRun.objects.get(run_id=run_id)
    assert (run.scheduled_at, run.missed) == (datetime(2025, 4, 1, 7, 30, tzinfo=UTC), 3)  # 09:30 CEST
    assert refreshed(loop).next_at == datetime(2025, 4, 2, 7, 30, tzinfo=UTC)


def test_after_loop_is_claimed_once_and_has_no_next_deadline(create):
    loop = create({"kind": "after", "after_seconds": 30})
    (run_id,) = claim(T0 + s(500))  # late: still one occurrence, nothing missed

    run = LoopRun.objects.get(run_id=run_id)
    assert (run.scheduled_at, run.missed) == (T0 + s(30), 0)
    refreshed(loop)
    assert (loop.state, loop.next_at) == (LoopState.RUNNING, None)
    assert claim(T0 + s(10_000)) == []


def test_running_loop_is_not_claimed_again(create):
    loop = create(every(10))
    claim(T0 + s(10))
    assert refreshed(loop).next_at == T0 + s(20)

    assert claim(T0 + s(35)) == []  # its next deadline passed, but the last run is still open
    assert LoopRun.objects.count() == 1


@pytest.mark.parametrize("state", [LoopState.RUNNING, LoopState.COMPLETED, LoopState.FAILED])
def test_only_scheduled_loops_are_claimed(create, state):
    loop = create(every(10))
    Loop.objects.filter(loop_id=loop.loop_id).update(state=state)
    assert claim(T0 + s(100)) == []
    assert not LoopRun.objects.exists()


# --- a poisoned loop fails alone ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("poison", "needle"),
    [
        ({"tz": "Nowhere/Gone"}, "Nowhere/Gone"),
        ({"cron_expr": "every blue moon"}, "Cron expression has 3 fields"),
        ({"cron_expr": "61 * * * *"}, "61 * * * *"),
    ],
)
def test_poisoned_loop_fails_alone_and_healthy_loop_due_at_the_same_time_is_claimed(create, poison, needle):
    poisoned = create({"kind": "cron", "expr": "*/10 * * * *", "tz": "Europe/Berlin"})
    healthy = create({"kind": "cron", "expr": "*/10 * * * *"})
    assert poisoned.next_at == healthy.next_at == T0 + timedelta(minutes=10)
    Loop.objects.filter(loop_id=poisoned.loop_id).update(**poison)
    now = T0 + timedelta(minutes=10)

    run_ids = claim(now)

    healthy_run = LoopRun.objects.get(loop_id=healthy.loop_id)
    assert run_ids == [healthy_run.run_id]
    assert healthy_run.status == RunStatus.CLAIMED
    assert enqueued_run_ids() == run_ids
    assert refreshed(healthy).state == LoopState.RUNNING

    failed_run = LoopRun.objects.get(loop_id=poisoned.loop_id)
    assert failed_run.status == RunStatus.FAILED
    assert failed_run.scheduled_at == T0 + timedelta(minutes=10)
    assert failed_run.finished_at == now and failed_run.retry_at is None
    assert "schedule could not be computed" in failed_run.error and needle in failed_run.error
    refreshed(poisoned)
    assert (poisoned.state, poisoned.next_at, poisoned.last_result) == (LoopState.FAILED, None, "failed")
    assert poisoned.last_error == failed_run.error and poisoned.last_run_at == now

    claim(now + timedelta(hours=1))
    assert LoopRun.objects.filter(loop_id=poisoned.loop_id).count() == 1  # recorded once, not every pass


def test_poisoned_loop_does_not_take_a_slot_from_later_healthy_loops(create):
    poisoned = create({"kind": "cron", "expr": "*/10 * * * *", "tz": "Europe/Berlin"})
    healthy = create(every(700))  # due after the poisoned one
    Loop.objects.filter(loop_id=poisoned.loop_id).update(tz="Nowhere/Gone")

    run_ids = claim(T0 + timedelta(minutes=20))

    assert [LoopRun.objects.get(run_id=run_id).loop_id for run_id in run_ids] == [healthy.loop_id]


# --- a stray run row holding an occurrence key (defect 1) ---------------------------------


def _stray_run(loop: Loop, scheduled_at: datetime, *, status: str = RunStatus.DELIVERED) -> LoopRun:
    """A run left by a restored backup, or kept when next_at was moved back by hand."""
    return LoopRun.objects.create(
        run_id="run_stray",
        loop_id=loop.loop_id,
        occurrence_key=runs.occurrence_key(loop.loop_id, scheduled_at),
        scheduled_at=scheduled_at,
        status=status,
        prompt=loop.prompt,
        target=loop.session_id,
        claimed_at=T0,
        finished_at=T0,
    )


def test_occurrence_that_already_has_a_run_is_skipped_visibly_and_the_batch_goes_on(create):
    poisoned = create(every(10))
    healthy = [create(every(10)), create(every(10))]
    _stray_run(poisoned, T0 + s(10))
    now = T0 + s(10)

    run_ids = claim(now)

    assert sorted(LoopRun.objects.get(run_id=run_id).loop_id for run_id in run_ids) == sorted(
        loop.loop_id for loop in healthy
    )
    assert enqueued_run_ids() == run_ids  # the skipped occurrence is not delivered
    skipped = LoopRun.objects.get(loop_id=poisoned.loop_id, status=RunStatus.SKIPPED)
    assert skipped.scheduled_at == T0 + s(10) and skipped.finished_at == now and skipped.retry_at is None
    assert "already has run run_stray (delivered)" in skipped.error
    assert skipped.occurrence_key.startswith(f"{poisoned.loop_id}@{to_ms(T0 + s(10))}:skipped:")
    stray = LoopRun.objects.get(run_id="run_stray")
    assert stray.status == RunStatus.DELIVERED  # the first run keeps its key and its history
    refreshed(poisoned)
    # The loop goes on to its next occurrence, with the reason on it.
    assert (poisoned.state, poisoned.next_at) == (LoopState.SCHEDULED, T0 + s(20))
    assert poisoned.last_result == "failed" and poisoned.last_error == skipped.error

    next_ids = claim(T0 + s(20))
    assert LoopRun.objects.get(loop_id=poisoned.loop_id, run_id__in=next_ids).status == RunStatus.CLAIMED


def test_one_shot_whose_occurrence_already_has_a_run_fails_with_the_reason(create):
    once = create({"kind": "after", "after_seconds": 30})
    _stray_run(once, T0 + s(30), status=RunStatus.CLAIMED)

    assert claim(T0 + s(30)) == []

    refreshed(once)
    assert (once.state, once.next_at, once.last_result) == (LoopState.FAILED, None, "failed")
    assert "already has run run_stray (claimed)" in once.last_error
    assert claim(T0 + s(60)) == []


def test_bulk_errors_are_djangos_database_errors(create):
    """A raw psycopg cursor's error escaped the clock, which only knows Django's DatabaseError."""
    from django.db import DatabaseError, transaction

    from core.bulk import insert_rows

    loop = create(every(10))
    stray = _stray_run(loop, T0 + s(10))
    row = [getattr(stray, name) for name in claims.RUN_COLUMNS]
    with pytest.raises(DatabaseError), transaction.atomic():
        insert_rows(LoopRun, claims.RUN_COLUMNS, [row])


def test_claim_and_recover_refuse_to_run_inside_another_transaction(create):
    """They are top-level units of work (durable): nested by mistake, they would commit with
    the caller instead of on their own, so they fail loudly."""
    from django.db import transaction

    create(every(10))
    for step in (claim_due, recover_runs):
        with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
            step(now=T0 + s(10))


# --- batches ------------------------------------------------------------------------------------


def test_claim_respects_the_limit_and_takes_the_earliest_first(create):
    loops = [create(every(600)) for _ in range(5)]
    order = [3, 0, 4, 1, 2]  # loops[3] is the most overdue
    for rank, index in enumerate(order):
        Loop.objects.filter(loop_id=loops[index].loop_id).update(next_at=T0 + s(10 + rank))
    now = T0 + s(100)

    def claimed_loops(run_ids):
        by_run = dict(LoopRun.objects.filter(run_id__in=run_ids).values_list("run_id", "loop_id"))
        return [by_run[run_id] for run_id in run_ids]

    first = claim(now, limit=2)
    assert claimed_loops(first) == [loops[3].loop_id, loops[0].loop_id]
    assert LoopRun.objects.count() == 2
    assert refreshed(loops[4]).state == LoopState.SCHEDULED

    second = claim(now, limit=2)
    assert claimed_loops(second) == [loops[4].loop_id, loops[1].loop_id]
    assert claimed_loops(claim(now, limit=2)) == [loops[2].loop_id]
    assert claim(now, limit=2) == []


# --- recovery -----------------------------------------------------------------------------------


def _run(loop: Loop, name: str, *, status: str, retry_at: datetime | None) -> LoopRun:
    return LoopRun.objects.create(
        run_id=f"run_{name}",
        loop_id=loop.loop_id,
        occurrence_key=f"{loop.loop_id}@{name}",
        scheduled_at=T0,
        status=status,
        claimed_at=T0,
        retry_at=retry_at,
    )


def test_recover_re_enqueues_only_open_runs_whose_retry_time_has_come(create):
    loop = create(every(10))
    now = T0 + s(100)
    _run(loop, "claimed_due", status=RunStatus.CLAIMED, retry_at=now - s(5))
    _run(loop, "delivering_stale", status=RunStatus.DELIVERING, retry_at=now)
    _run(loop, "claimed_backing_off", status=RunStatus.CLAIMED, retry_at=now + s(1))
    _run(loop, "delivered", status=RunStatus.DELIVERED, retry_at=now - s(50))
    _run(loop, "failed", status=RunStatus.FAILED, retry_at=now - s(50))
    _run(loop, "claimed_without_retry", status=RunStatus.CLAIMED, retry_at=None)

    recovered = recover(now)

    assert recovered == ["run_claimed_due", "run_delivering_stale"]  # oldest retry first
    assert sorted(enqueued_run_ids()) == sorted(recovered)
    retry = dict(LoopRun.objects.values_list("run_id", "retry_at"))
    assert retry["run_claimed_due"] == retry["run_delivering_stale"] == now + lease()
    assert retry["run_claimed_backing_off"] == now + s(1)
    assert retry["run_delivered"] == now - s(50)
    statuses = dict(LoopRun.objects.values_list("run_id", "status"))
    assert statuses["run_delivering_stale"] == RunStatus.DELIVERING  # recovery only re-enqueues

    assert recover(now) == []  # pushed forward: a second clock at the same moment does nothing
    assert OrmQ.objects.count() == 1
    assert recover(now + s(1)) == ["run_claimed_backing_off"]
    assert recover(now + lease()) == ["run_claimed_due", "run_delivering_stale"]


def test_recover_respects_the_limit(create):
    loop = create(every(10))
    for index in range(3):
        _run(loop, f"r{index}", status=RunStatus.CLAIMED, retry_at=T0 + s(index))
    assert recover(T0 + s(10), limit=2) == ["run_r0", "run_r1"]
    assert recover(T0 + s(10), limit=2) == ["run_r2"]


def test_recover_with_nothing_due_enqueues_nothing(create):
    loop = create(every(10))
    _run(loop, "later", status=RunStatus.CLAIMED, retry_at=T0 + s(60))
    assert recover(T0 + s(59)) == []
    assert not OrmQ.objects.exists()


def test_claimed_run_whose_task_was_lost_is_recovered_after_the_lease(create):
    create(every(10))
    now = T0 + s(10)
    (run_id,) = claim(now)
    OrmQ.objects.all().delete()  # the broker lost the task (or its worker died with it)

    assert recover(now + lease() - timedelta(milliseconds=1)) == []
    assert recover(now + lease()) == [run_id]
    assert enqueued_run_ids() == [run_id]


def test_next_wakeup_is_the_earliest_deadline_or_retry(create):
    loop = create(every(10))
    assert claims.next_wakeup() == T0 + s(10)
    _run(loop, "soon", status=RunStatus.CLAIMED, retry_at=T0 + s(3))
    assert claims.next_wakeup() == T0 + s(3)
    LoopRun.objects.all().delete()
    Loop.objects.update(state=LoopState.RUNNING)
    assert claims.next_wakeup() is None


def test_a_claimed_run_row_has_every_column_of_a_run():
    """Claims insert plain rows (scheduler.rows.NewRun), not model instances: a column added to LoopRun
    must be added there too, or claims would fail to fill it."""
    assert sorted(claims.RUN_COLUMNS) == sorted(field.name for field in LoopRun._meta.concrete_fields)
