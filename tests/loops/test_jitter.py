"""contract §16: DSHLOOP_CRON_JITTER_SECONDS. Each cron loop's deliveries come a stable per-loop
delay after their instants: the same every day (its grid stays regular), spread over the window
across loops, shown in `upcoming`, and the anti-burst rule, the misfire grace and the one delivery
per occurrence unchanged."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from core.timeutil import to_ms
from loops.models import Loop, LoopRun, RunStatus
from loops.selectors import fire_times
from scheduler.claims import claim_due
from tests.conftest import create_loop, fire_due, s
from timing import schedules
from timing.jitter import jitter_delay

DAY = timedelta(days=1)
NINE = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday, 09:00 UTC
DAILY = {"kind": "cron", "expr": "0 9 * * *", "tz": "UTC"}


def test_the_delay_is_whole_milliseconds_within_the_window_and_stable():
    delays = {jitter_delay(f"loop_{n:016x}", 60) for n in range(200)}
    assert all(timedelta(0) <= delay < s(60) and delay % timedelta(milliseconds=1) == timedelta(0) for delay in delays)
    assert jitter_delay("loop_abc", 60) == jitter_delay("loop_abc", 60)
    assert jitter_delay("loop_abc", 0) == timedelta(0)


@pytest.mark.django_db
def test_a_thousand_loops_at_nine_spread_over_the_minute_each_on_the_same_offset_every_day(settings, global_session):
    settings.DSHLOOP_CRON_JITTER_SECONDS = 60
    settings.DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION = 1000
    loops = [create_loop(DAILY, target="self", created_by="", at=NINE - s(3600)) for _ in range(1000)]
    offsets = []
    for loop in loops:
        times = fire_times(Loop.objects.get(loop_id=loop.loop_id), now=NINE - s(3600), count=3)
        day_offsets = {moment - (NINE + DAY * day) for day, moment in enumerate(times)}
        assert len(day_offsets) == 1, (loop.loop_id, times)  # the same offset every day
        offsets.append(day_offsets.pop())
    assert all(timedelta(0) <= offset < s(60) for offset in offsets)
    # Spread over the minute: each 10-second slice holds about a sixth (166.7, sd ≈ 12).
    slices = Counter(int(offset.total_seconds() // 10) for offset in offsets)
    assert sorted(slices) == [0, 1, 2, 3, 4, 5]
    assert all(120 <= count <= 215 for count in slices.values()), slices
    assert max(Counter(offset // timedelta(seconds=1) for offset in offsets).values()) <= 40  # no herd in a second


@pytest.mark.django_db
def test_a_jittered_loop_is_due_at_its_delayed_instant_and_keyed_by_it(settings, global_session):
    settings.DSHLOOP_CRON_JITTER_SECONDS = 60
    loop = create_loop(DAILY, target="self", created_by="", at=NINE - s(3600))
    delay = jitter_delay(loop.loop_id, 60)
    assert Loop.objects.get(loop_id=loop.loop_id).next_at == NINE + delay
    with time_machine.travel(NINE + delay - s(0.001), tick=False):
        assert claim_due(now=NINE + delay - s(0.001)) == []
    run = fire_due(loop.loop_id, NINE + delay)
    assert (run.scheduled_at, run.occurrence_key) == (NINE + delay, f"{loop.loop_id}@{to_ms(NINE + delay)}")
    assert Loop.objects.get(loop_id=loop.loop_id).next_at == NINE + DAY + delay


@pytest.mark.django_db
def test_a_catch_up_of_a_jittered_loop_is_one_run_on_its_grid(settings, global_session):
    settings.DSHLOOP_CRON_JITTER_SECONDS = 60
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = None
    loop = create_loop(DAILY, target="self", created_by="", at=NINE - s(3600))
    delay = jitter_delay(loop.loop_id, 60)
    run = fire_due(loop.loop_id, NINE + 3 * DAY + s(3600))  # down for three days
    assert (run.scheduled_at, run.missed) == (NINE + 3 * DAY + delay, 3)
    assert Loop.objects.get(loop_id=loop.loop_id).next_at == NINE + 4 * DAY + delay


@pytest.mark.django_db
def test_the_misfire_grace_counts_from_the_delayed_instant(settings, global_session):
    settings.DSHLOOP_CRON_JITTER_SECONDS = 60
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = 5
    loop = create_loop(DAILY, target="self", created_by="", at=NINE - s(3600))
    delay = jitter_delay(loop.loop_id, 60)
    assert fire_due(loop.loop_id, NINE + delay + s(4)).status == RunStatus.DELIVERED  # 4 s late: within the grace
    late = NINE + DAY + delay + s(6)
    with time_machine.travel(late, tick=False):
        assert claim_due(now=late) == []  # nothing to deliver: 6 s late is beyond it
    skipped = LoopRun.objects.filter(loop_id=loop.loop_id).order_by("-scheduled_at").first()
    assert (skipped.status, skipped.scheduled_at) == (RunStatus.SKIPPED, NINE + DAY + delay)


@pytest.mark.django_db
def test_raising_the_jitter_never_delivers_an_occurrence_twice(settings, global_session):
    loop = create_loop(DAILY, target="self", created_by="", at=NINE - s(3600))
    assert Loop.objects.get(loop_id=loop.loop_id).next_at == NINE  # stored with no jitter
    settings.DSHLOOP_CRON_JITTER_SECONDS = 60
    delay = jitter_delay(loop.loop_id, 60)
    assert delay > timedelta(0)
    run = fire_due(loop.loop_id, NINE)
    assert run.scheduled_at == NINE
    # Today's 09:00 was delivered at the old deadline: the next is tomorrow's, at its delayed instant.
    assert Loop.objects.get(loop_id=loop.loop_id).next_at == NINE + DAY + delay
    assert LoopRun.objects.filter(loop_id=loop.loop_id).count() == 1


def test_a_delayed_schedule_is_the_schedule_moved_by_its_delay():
    cron = schedules.Cron("*/15 * * * *", "Europe/Berlin")
    delayed = schedules.Delayed(cron, s(37))
    start = datetime(2026, 3, 29, 0, 50, tzinfo=UTC)  # across Berlin's spring-forward gap
    plain = schedules.upcoming(cron, created_at=start, start=start, count=8, host_tz="UTC")
    moved = schedules.upcoming(delayed, created_at=start, start=start, count=8, host_tz="UTC")
    assert moved == [moment + s(37) for moment in plain]
    catch_up = schedules.catch_up(
        delayed, created_at=start, due_at=plain[0] + s(37), now=plain[3] + s(40), host_tz="UTC"
    )
    assert (catch_up.deliver_at, catch_up.missed, catch_up.next_at) == (plain[3] + s(37), 3, plain[4] + s(37))
    # A delay longer than the schedule's spacing keeps every occurrence.
    long = schedules.Delayed(schedules.Cron("* * * * *"), s(100))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    due = schedules.next_occurrence(long, created_at=t0, after=t0, host_tz="UTC")
    assert due == t0 + s(40)  # 23:59 moved by 100 s
    step = schedules.catch_up(long, created_at=t0, due_at=due, now=due, host_tz="UTC")
    assert (step.deliver_at, step.missed, step.next_at) == (due, 0, due + s(60))
