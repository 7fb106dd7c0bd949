"""The clock keeps going whatever a tick raises; only a stop request ends it (defect 2). It sleeps
until the earliest next_at, clamped (spec §5)."""

from __future__ import annotations

import logging
import threading

import pytest
import time_machine

from monitoring.gauges import ALIVE_WINDOW
from scheduler import clock as clock_module
from scheduler.clock import HEARTBEAT_EVERY, MAX_SLEEP, Clock
from tests.conftest import T0, create_loop, every


class Ticks:
    """Stands in for Clock.tick: raises the given errors in turn, then asks for a stop."""

    def __init__(self, errors: list[BaseException], stop: threading.Event):
        self.errors, self.stop, self.calls = list(errors), stop, 0

    def __call__(self) -> float:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        self.stop.set()
        return 0.0


@pytest.fixture
def no_backoff(monkeypatch):
    slept = []
    monkeypatch.setattr(clock_module, "ERROR_BACKOFF", (0.001, 0.002))
    monkeypatch.setattr(clock_module.Waker, "sleep", lambda self, seconds: slept.append(seconds))
    return slept


@pytest.mark.django_db
def test_an_unexpected_exception_is_logged_with_its_traceback_and_retried_with_backoff(no_backoff, caplog):
    stop = threading.Event()
    clock = Clock(stop=stop)
    clock.tick = Ticks([RuntimeError("boom in the claim path"), KeyError("odd row"), ValueError("again")], stop)

    with caplog.at_level(logging.WARNING, logger="dshloop.clock"):
        clock.run()

    assert clock.tick.calls == 4  # three failures, then a normal tick
    assert no_backoff == [0.001, 0.002, 0.002]  # the database backoff, capped at its last step
    failures = [record for record in caplog.records if "tick raised" in record.getMessage()]
    assert len(failures) == 3
    assert all(record.exc_info for record in failures)  # with the traceback
    assert "boom in the claim path" in str(failures[0].exc_info[1])


@pytest.mark.django_db
def test_a_database_error_is_a_warning_without_a_traceback(no_backoff, caplog):
    from django.db import OperationalError

    stop = threading.Event()
    clock = Clock(stop=stop)
    clock.tick = Ticks([OperationalError("server closed the connection")], stop)

    with caplog.at_level(logging.WARNING, logger="dshloop.clock"):
        clock.run()

    [warning] = [record for record in caplog.records if "database unavailable" in record.getMessage()]
    assert warning.exc_info is None and "server closed the connection" in warning.getMessage()


@pytest.mark.django_db
def test_a_base_exception_still_ends_the_clock(no_backoff):
    """Only Exception is retried: KeyboardInterrupt and SystemExit are how a process stops."""
    stop = threading.Event()
    clock = Clock(stop=stop)
    clock.tick = Ticks([KeyboardInterrupt()], stop)

    with pytest.raises(KeyboardInterrupt):
        clock.run()


@pytest.mark.django_db
def test_the_shortest_sleep_counts_from_the_start_of_a_tick(monkeypatch):
    """A tick that took a while (it delivered its claim itself) sleeps only what is left of
    MIN_SLEEP: ticks start MIN_SLEEP apart, so a steady load's deadlines are not pushed later."""
    import time
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.claims import Claimed

    def slow_claim(**kwargs):
        time.sleep(0.03)  # stands for a claim's work, not a wait for anything
        return Claimed()

    monkeypatch.setattr(clock_module, "claim_due", slow_claim)
    monkeypatch.setattr(clock_module, "recover_runs", lambda **kwargs: [])
    monkeypatch.setattr(clock_module, "next_wakeup", lambda **kwargs: timezone.now() - timedelta(seconds=1))

    assert Clock().tick() <= clock_module.MIN_SLEEP - 0.025


@pytest.mark.django_db
@pytest.mark.parametrize(
    "due_in, sleeps",
    [(3600, MAX_SLEEP), (int(MAX_SLEEP) + 1, MAX_SLEEP), (10, 10)],
    ids=["an hour away", "just past the clamp", "within the clamp"],
)
def test_the_clock_sleeps_until_the_earliest_next_at_but_never_longer_than_max_sleep(make_session, due_in, sleeps):
    """spec §5: however far the next deadline, a clock wakes within MAX_SLEEP (its heartbeat, and a
    NOTIFY it missed costs a delay, never a loss); a nearer deadline is slept to exactly."""
    make_session("ses_target", status="idle")
    with time_machine.travel(T0, tick=False):
        create_loop(every(due_in), target="ses_target", at=T0)
        create_loop(every(due_in + 60), target="ses_target", at=T0)  # later: not what it wakes for

        assert Clock().tick() == pytest.approx(sleeps)


@pytest.mark.django_db
def test_a_clock_with_nothing_scheduled_sleeps_max_sleep():
    with time_machine.travel(T0, tick=False):
        assert Clock().tick() == MAX_SLEEP


def test_a_clock_asleep_for_max_sleep_still_reads_alive():
    """It beats at most HEARTBEAT_EVERY apart when it ticks, and it ticks at least every MAX_SLEEP:
    its last tick is never older than the window in which health counts a scheduler alive."""
    assert HEARTBEAT_EVERY.total_seconds() + MAX_SLEEP < ALIVE_WINDOW.total_seconds()
