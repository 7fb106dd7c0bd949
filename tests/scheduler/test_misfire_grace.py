"""The misfire grace (contract §10): DSHLOOP_MISFIRE_GRACE_SECONDS.

Unset, the spec §3 anti-burst rule holds as it is: after an outage one catch-up is delivered,
however late. Set, a catch-up later than the grace (claim time minus the occurrence it would
deliver) is recorded as a `skipped` run, counted in `missed`, and not delivered; the loop goes on
with its next occurrence (a one-shot has none: it fails, and an operator can retry it).

claim_due is called directly with a frozen clock, as in test_claims.py; the enqueued deliveries are
the OrmQ rows django-q2's ORM broker writes in the claim's transaction.
"""

import logging
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django_q.models import OrmQ

from core.timeutil import to_ms
from loops import runs
from loops.events import Actor
from loops.models import ActorKind, Loop, LoopRun, LoopState, RunStatus
from loops.runs import lease
from loops.services import lifecycle
from scheduler import claims
from scheduler.claims import claim_due, recover_runs
from tests.conftest import T0, after, captured_log, every, s

GRACE = 300
HOURS_6 = 6 * 3600
NEW_YORK = "America/New_York"


@pytest.fixture
def grace(settings):
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = GRACE
    return GRACE


@pytest.fixture
def create(api):
    """loop_create through the tool API at a frozen moment (default T0); returns the Loop row."""

    def make(schedule: dict, *, at: datetime = T0, prompt: str = "Check the deploy") -> Loop:
        with time_machine.travel(at, tick=False):
            response = api.tool("loop_create", {"prompt": prompt, "schedule": schedule})
        assert response.status_code == 200, response.content
        return Loop.objects.get(loop_id=response.json()["loop_id"])

    return make


def claim(now: datetime) -> list[str]:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now)


def enqueued_run_ids() -> list[str]:
    ids = []
    for row in OrmQ.objects.order_by("id"):
        (batch,) = row.args()
        ids.extend(batch)
    return ids


def refreshed(loop: Loop) -> Loop:
    loop.refresh_from_db()
    return loop


def only_run(loop: Loop) -> LoopRun:
    (run,) = LoopRun.objects.filter(loop_id=loop.loop_id)
    return run


def cron(expr: str, tz: str) -> dict:
    return {"kind": "cron", "expr": expr, "tz": tz}


def reason(late: str, *, one_shot: bool = False) -> str:
    then = (
        "a one-shot loop has no next occurrence: retry it to deliver it now"
        if one_shot
        else "the loop goes on with its next occurrence"
    )
    return f"Not delivered: {late} late, beyond the misfire grace of {GRACE} s (DSHLOOP_MISFIRE_GRACE_SECONDS); {then}."


def assert_skipped(run: LoopRun, loop: Loop, *, scheduled_at: datetime, missed: int, now: datetime) -> None:
    assert run.status == RunStatus.SKIPPED
    assert run.scheduled_at == scheduled_at
    assert run.occurrence_key == f"{loop.loop_id}@{to_ms(scheduled_at)}"  # it stands for that occurrence
    assert run.missed == missed
    assert (run.claimed_at, run.finished_at, run.retry_at) == (now, now, None)


def assert_claimed_normally(loop: Loop, now: datetime, *, scheduled_at: datetime) -> None:
    run_ids = claim(now)
    (run,) = LoopRun.objects.filter(loop_id=loop.loop_id, run_id__in=run_ids)
    assert (run.status, run.scheduled_at, run.missed) == (RunStatus.CLAIMED, scheduled_at, 0)
    assert run.run_id in enqueued_run_ids()
    assert refreshed(loop).state == LoopState.RUNNING


# --- a recurring loop late beyond the grace ----------------------------------------------------


def test_every_loop_late_beyond_the_grace_is_skipped_and_claimed_at_its_next_occurrence(create, grace, caplog):
    loop = create(every(HOURS_6))  # T0+6h, T0+12h, T0+18h, …
    Loop.objects.filter(loop_id=loop.loop_id).update(last_result="delivered", last_run_at=T0 + s(60))
    now = T0 + s(12 * 3600) + timedelta(hours=2, minutes=59)  # T0+6h and T0+12h are due

    with captured_log(caplog, "dshloop.clock"):
        assert claim(now) == []

    assert not OrmQ.objects.exists()  # nothing to deliver
    run = only_run(loop)
    # The catch-up would deliver T0+12h; T0+6h is folded into it: both are lost to the outage.
    assert_skipped(run, loop, scheduled_at=T0 + s(12 * 3600), missed=2, now=now)
    assert run.error == reason("2 h 59 min")
    refreshed(loop)
    assert (loop.state, loop.next_at) == (LoopState.SCHEDULED, T0 + s(18 * 3600))
    # The loop's last result stays the last delivery's; the reason is on the run.
    assert (loop.last_result, loop.last_error, loop.last_run_at) == ("delivered", "", T0 + s(60))
    warnings = [record for record in caplog.records if record.name == "dshloop.clock"]
    assert [(record.levelno, record.getMessage()) for record in warnings] == [
        (
            logging.WARNING,
            f"loop={loop.loop_id} scheduled={run.scheduled_at.isoformat()} outcome=skipped target=- attempt=0 "
            f"missed=2 error={run.error!r}",
        )
    ]
    # The same facts as fields, for DSHLOOP_LOG_FORMAT=json.
    assert warnings[0].occurrence == {
        "loop_id": loop.loop_id,
        "run_id": run.run_id,
        "occurrence_key": run.occurrence_key,
        "scheduled_at": "2025-06-02T22:00:00.000Z",
        "lateness_ms": (now - run.scheduled_at).total_seconds() * 1000,
        "outcome": "skipped",
        "attempt": 0,
        "target": None,
        "missed": 2,
        "error": run.error,
    }

    assert claim(now + s(1)) == []  # recorded once
    assert LoopRun.objects.count() == 1
    assert_claimed_normally(loop, T0 + s(18 * 3600), scheduled_at=T0 + s(18 * 3600))


def test_every_loop_late_within_the_grace_is_delivered_as_before(create, grace):
    loop = create(every(HOURS_6))
    now = T0 + s(12 * 3600 + GRACE - 1)

    (run_id,) = claim(now)

    run = only_run(loop)
    assert run.run_id == run_id and enqueued_run_ids() == [run_id]
    assert (run.status, run.scheduled_at, run.missed, run.error) == (RunStatus.CLAIMED, T0 + s(12 * 3600), 1, "")
    assert (refreshed(loop).state, loop.next_at) == (LoopState.RUNNING, T0 + s(18 * 3600))


@pytest.mark.parametrize(
    ("schedule", "due"),
    [(every(HOURS_6), T0 + s(HOURS_6)), (after(60), T0 + s(60))],
    ids=["every", "after"],
)
@pytest.mark.parametrize(
    ("late", "delivered"),
    [
        (timedelta(milliseconds=3), True),  # normal operation: a clock tick late
        (s(GRACE), True),  # exactly the grace: still delivered
        (s(GRACE) + timedelta(milliseconds=1), False),
    ],
    ids=["ms-late", "exactly-the-grace", "1ms-beyond"],
)
def test_the_grace_boundary(create, grace, schedule, due, late, delivered):
    loop = create(schedule)
    assert loop.next_at == due

    run_ids = claim(due + late)

    run = only_run(loop)
    assert run.scheduled_at == due
    if delivered:
        assert run_ids == enqueued_run_ids() == [run.run_id]
        assert (run.status, run.missed) == (RunStatus.CLAIMED, 0)
    else:
        assert run_ids == [] and not OrmQ.objects.exists()
        assert (run.status, run.missed) == (RunStatus.SKIPPED, 1)
        assert run.error.startswith("Not delivered: 5 min 1 s late,")  # rounded up: never reads as the grace


def test_without_a_grace_the_one_catch_up_is_delivered_however_late(create, settings):
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = None  # the default: the spec's rule
    recurring = create(every(HOURS_6))
    once = create(after(60))
    now = T0 + timedelta(days=3, hours=5)

    run_ids = claim(now)

    assert sorted(run_ids) == sorted(enqueued_run_ids()) and len(run_ids) == 2
    run = only_run(recurring)
    # Grid T0+6h … T0+72h: twelve due, the latest delivered, eleven folded into it.
    assert (run.status, run.scheduled_at, run.missed) == (RunStatus.CLAIMED, T0 + timedelta(days=3), 11)
    assert refreshed(recurring).next_at == T0 + timedelta(days=3, hours=6)
    once_run = only_run(once)
    assert (once_run.status, once_run.scheduled_at, once_run.missed) == (RunStatus.CLAIMED, T0 + s(60), 0)


def test_a_skipped_catch_up_counts_itself_in_missed(create, settings):
    """One occurrence lost and nothing folded: missed is 1, where a delivered catch-up says 0."""
    for _ in range(2):
        create(every(3600))
    now = T0 + timedelta(hours=1, minutes=10)

    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = None
    with time_machine.travel(now, tick=False):
        assert len(claim_due(now=now, limit=1)) == 1
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = GRACE
    assert claim(now) == []

    runs = {run.status: run for run in LoopRun.objects.all()}
    delivered, skipped = runs[RunStatus.CLAIMED], runs[RunStatus.SKIPPED]
    assert (delivered.status, delivered.missed) == (RunStatus.CLAIMED, 0)
    assert (skipped.status, skipped.missed) == (RunStatus.SKIPPED, 1)
    assert skipped.scheduled_at == delivered.scheduled_at == T0 + s(3600)


# --- cron loops: wall time, time zones and DST --------------------------------------------------


def test_weekday_cron_in_shanghai_after_an_outage_until_23_00_resumes_next_weekday(create, grace):
    loop = create(cron("30 9 * * 1-5", "Asia/Shanghai"))  # created Mon 18:00 CST (UTC+8)
    assert loop.next_at == datetime(2025, 6, 3, 1, 30, tzinfo=UTC)  # Tue 09:30 CST
    now = datetime(2025, 6, 6, 15, 0, tzinfo=UTC)  # Fri 23:00 CST: down since Tuesday morning

    assert claim(now) == []

    run = only_run(loop)
    # Tue, Wed, Thu and Fri 09:30: the catch-up (Fri) 13 h 30 min late, and the three folded into it.
    assert_skipped(run, loop, scheduled_at=datetime(2025, 6, 6, 1, 30, tzinfo=UTC), missed=4, now=now)
    assert run.error == reason("13 h 30 min")
    refreshed(loop)
    next_monday = datetime(2025, 6, 9, 1, 30, tzinfo=UTC)  # Mon 09:30 CST, not Sat or Sun
    assert (loop.state, loop.next_at) == (LoopState.SCHEDULED, next_monday)
    assert claim(next_monday - timedelta(milliseconds=1)) == []
    assert_claimed_normally(loop, next_monday, scheduled_at=next_monday)


@pytest.mark.parametrize(
    ("expr", "created", "now", "scheduled_at", "missed", "late", "next_at"),
    [
        pytest.param(
            # Spring forward 2025-03-09 02:00 EST -> 03:00 EDT: that day has no 02:30.
            "30 2 * * *",
            datetime(2025, 3, 7, 12, 0, tzinfo=UTC),
            datetime(2025, 3, 9, 12, 0, tzinfo=UTC),  # 08:00 EDT
            datetime(2025, 3, 8, 7, 30, tzinfo=UTC),  # Sat 02:30 EST
            1,
            "1 d 4 h",
            datetime(2025, 3, 10, 6, 30, tzinfo=UTC),  # Mon 02:30 EDT
            id="daily-spring-forward",
        ),
        pytest.param(
            "0 * * * *",
            datetime(2025, 3, 9, 5, 30, tzinfo=UTC),  # 00:30 EST
            datetime(2025, 3, 9, 7, 20, tzinfo=UTC),  # 03:20 EDT
            datetime(2025, 3, 9, 7, 0, tzinfo=UTC),  # 03:00 EDT, right after 01:00 EST
            2,
            "20 min",
            datetime(2025, 3, 9, 8, 0, tzinfo=UTC),  # 04:00 EDT
            id="hourly-spring-forward",
        ),
        pytest.param(
            # Fall back 2025-11-02 02:00 EDT -> 01:00 EST: 01:30 comes twice and fires at the first.
            "30 1 * * *",
            datetime(2025, 10, 31, 12, 0, tzinfo=UTC),
            datetime(2025, 11, 2, 6, 45, tzinfo=UTC),  # 01:45 EST, inside the repeated hour
            datetime(2025, 11, 2, 5, 30, tzinfo=UTC),  # 01:30 EDT (Nov 1 05:30 UTC folded into it)
            2,
            "1 h 15 min",
            datetime(2025, 11, 3, 6, 30, tzinfo=UTC),  # Mon 01:30 EST, not the repeated 01:30 EST today
            id="daily-fall-back",
        ),
        pytest.param(
            "0 * * * *",
            datetime(2025, 11, 2, 4, 30, tzinfo=UTC),  # 00:30 EDT
            datetime(2025, 11, 2, 6, 30, tzinfo=UTC),  # 01:30 EST
            datetime(2025, 11, 2, 5, 0, tzinfo=UTC),  # 01:00 EDT
            1,
            "1 h 30 min",
            datetime(2025, 11, 2, 7, 0, tzinfo=UTC),  # 02:00 EST: the repeated 01:00 does not fire
            id="hourly-fall-back",
        ),
    ],
)
def test_cron_in_new_york_late_beyond_the_grace_across_a_dst_change(
    create, grace, expr, created, now, scheduled_at, missed, late, next_at
):
    loop = create(cron(expr, NEW_YORK), at=created)

    assert claim(now) == []

    run = only_run(loop)
    assert_skipped(run, loop, scheduled_at=scheduled_at, missed=missed, now=now)
    assert run.error == reason(late)
    assert (refreshed(loop).state, loop.next_at) == (LoopState.SCHEDULED, next_at)
    assert claim(next_at - timedelta(milliseconds=1)) == []
    assert_claimed_normally(loop, next_at, scheduled_at=next_at)


# --- a one-shot late beyond the grace ------------------------------------------------------------


def test_one_shot_late_beyond_the_grace_fails_with_the_reason_and_can_be_retried(create, grace, caplog):
    loop = create(after(60))
    now = T0 + s(60 + 3600)

    with captured_log(caplog, "dshloop.clock"):
        assert claim(now) == []

    assert not OrmQ.objects.exists()
    run = only_run(loop)
    assert_skipped(run, loop, scheduled_at=T0 + s(60), missed=1, now=now)
    assert run.error == reason("1 h", one_shot=True)
    refreshed(loop)
    assert (loop.state, loop.next_at) == (LoopState.FAILED, None)
    assert (loop.last_result, loop.last_error, loop.last_run_at) == ("failed", run.error, now)
    assert [record.levelno for record in caplog.records if record.name == "dshloop.clock"] == [logging.WARNING]
    assert claim(now + timedelta(days=1)) == []

    retried_at = now + s(30)
    lifecycle.loop_retry(loop_id=loop.loop_id, actor=Actor(ActorKind.USER, "ops"), now=retried_at)
    (run_id,) = claim(retried_at)
    retry = LoopRun.objects.get(run_id=run_id)
    assert (retry.status, retry.scheduled_at, retry.missed) == (RunStatus.CLAIMED, retried_at, 0)
    assert enqueued_run_ids() == [run_id]


# --- one batch, several loops; occurrence keys; the SQLite compare-and-swap ----------------------


def test_only_the_claimed_runs_of_a_mixed_batch_are_enqueued(create, grace):
    late = create(every(HOURS_6))
    once = create(after(60))
    on_time = create(every(10))
    now = T0 + s(12 * 3600 + 3600)

    run_ids = claim(now)

    (on_time_run,) = LoopRun.objects.filter(loop_id=on_time.loop_id)
    assert run_ids == enqueued_run_ids() == [on_time_run.run_id]
    assert on_time_run.status == RunStatus.CLAIMED and on_time_run.scheduled_at == now
    assert only_run(late).status == only_run(once).status == RunStatus.SKIPPED
    assert (refreshed(late).state, late.next_at) == (LoopState.SCHEDULED, T0 + s(18 * 3600))
    assert (refreshed(once).state, once.next_at, once.last_result) == (LoopState.FAILED, None, "failed")
    assert (refreshed(on_time).state, on_time.next_at, on_time.last_result) == (LoopState.RUNNING, now + s(10), "")


def test_a_late_catch_up_whose_occurrence_already_has_a_run_is_skipped_as_taken(create, grace):
    loop = create(every(HOURS_6))
    taken_at = T0 + s(12 * 3600)
    LoopRun.objects.create(
        run_id="run_stray",
        loop_id=loop.loop_id,
        occurrence_key=runs.occurrence_key(loop.loop_id, taken_at),
        scheduled_at=taken_at,
        status=RunStatus.DELIVERED,
        claimed_at=taken_at,
        finished_at=taken_at,
    )
    now = taken_at + s(3600)

    assert claim(now) == []

    assert not OrmQ.objects.exists()
    run = LoopRun.objects.exclude(run_id="run_stray").get(loop_id=loop.loop_id)
    assert run.status == RunStatus.SKIPPED and run.scheduled_at == taken_at
    assert run.occurrence_key == f"{loop.loop_id}@{to_ms(taken_at)}:skipped:{run.run_id}"
    assert "already has run run_stray (delivered)" in run.error
    assert run.missed == 1  # T0+6h was lost; T0+12h was not, it has a run
    assert LoopRun.objects.get(run_id="run_stray").status == RunStatus.DELIVERED
    refreshed(loop)
    assert (loop.state, loop.next_at, loop.last_error) == (LoopState.SCHEDULED, T0 + s(18 * 3600), run.error)


def test_sqlite_a_loop_another_clock_claimed_first_is_not_skipped_twice(create, grace, monkeypatch, caplog):
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL locks the claimed rows instead of compare-and-swap")
    loop = create(every(HOURS_6))
    real_advance = claims.advance

    def another_clock_takes_it_first(row, now):
        Loop.objects.filter(loop_id=row.loop_id).update(next_at=T0 + s(18 * 3600))
        return real_advance(row, now)

    monkeypatch.setattr(claims, "advance", another_clock_takes_it_first)
    with captured_log(caplog, "dshloop.clock"):
        assert claim(T0 + s(13 * 3600)) == []

    assert not LoopRun.objects.exists() and not OrmQ.objects.exists()
    assert not [record for record in caplog.records if record.name == "dshloop.clock"]
    assert refreshed(loop).next_at == T0 + s(18 * 3600)


# --- what the grace does not touch ---------------------------------------------------------------


def test_recovery_of_an_open_run_is_not_subject_to_the_grace(create, grace):
    create(every(HOURS_6))
    claimed_at = T0 + s(HOURS_6)
    (run_id,) = claim(claimed_at)
    OrmQ.objects.all().delete()  # the task was lost; the scheduler was then down for hours

    later = claimed_at + timedelta(hours=3)
    with time_machine.travel(later, tick=False):
        assert recover_runs(now=later) == [run_id]

    assert enqueued_run_ids() == [run_id]
    run = LoopRun.objects.get(run_id=run_id)
    assert (run.status, run.retry_at) == (RunStatus.CLAIMED, later + lease())


def test_a_manual_run_of_a_long_overdue_loop_is_not_subject_to_the_grace(create, grace):
    loop = create(every(HOURS_6))
    now = T0 + timedelta(days=2)  # long past its next_at, and not claimed yet

    run = lifecycle.loop_run_now(loop_id=loop.loop_id, actor=Actor(ActorKind.USER, "ops"), now=now)

    assert (run.status, run.manual) == (RunStatus.CLAIMED, True)
    assert enqueued_run_ids() == [run.run_id]
