"""The housekeeping thread of runloops: periodic jobs off the clock thread, one bounded
step at a time, surviving their failures, stopping at once."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from loops.models import LoopRun
from scheduler.housekeeping import Housekeeper, Job, PruneJob, default_jobs
from tests.conftest import captured_log
from tests.processes import wait_for
from tests.scheduler.test_retention import add_runs


class CountingJob:
    """A job whose passes take `steps` steps; it records when each step ran."""

    def __init__(self, steps: int = 1, *, fail_first: bool = False):
        self.steps, self.fail_first = steps, fail_first
        self.calls: list[float] = []
        self.passes = 0
        self._left = steps

    def step(self) -> bool:
        self.calls.append(time.monotonic())
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("boom")
        self._left -= 1
        if self._left:
            return True
        self.passes += 1
        self._left = self.steps
        return False


@pytest.fixture
def housekeeper():
    """Start a Housekeeper; it is stopped (and must end promptly) at the end of the test."""
    started: list[tuple[threading.Event, Housekeeper]] = []

    def start(jobs, **options) -> Housekeeper:
        stop = threading.Event()
        thread = Housekeeper(stop, jobs=jobs, **options)
        thread.start()
        started.append((stop, thread))
        return thread

    yield start
    for stop, thread in started:
        stop.set()
        thread.join(5)
        assert not thread.is_alive()


def test_a_job_runs_at_start_and_steps_until_drained_then_waits_for_its_interval(housekeeper):
    job = CountingJob(steps=4)
    housekeeper([Job("count", 3600, job.step)], pause=0.01)

    wait_for(lambda: job.passes == 1, timeout=5, message="the first pass")

    assert len(job.calls) == 4
    gaps = [later - earlier for earlier, later in zip(job.calls, job.calls[1:], strict=False)]
    assert min(gaps) >= 0.01  # the pause between two steps


def test_the_next_pass_starts_one_interval_after_the_last_one_started(housekeeper):
    job = CountingJob(steps=2)
    housekeeper([Job("count", 0.3, job.step)], pause=0.01)

    wait_for(lambda: job.passes >= 3, timeout=10, message="three passes")

    starts = job.calls[::2]
    assert all(later - earlier >= 0.3 for earlier, later in zip(starts, starts[1:], strict=False))


def test_a_failing_step_is_logged_and_retried_at_the_next_interval(housekeeper, caplog):
    job = CountingJob(fail_first=True)
    with captured_log(caplog, "dshloop.housekeeping"):
        thread = housekeeper([Job("flaky", 0.2, job.step)], pause=0.01)
        wait_for(lambda: job.passes >= 1, timeout=5, message="the retried pass")

    assert thread.is_alive()
    assert job.calls[1] - job.calls[0] >= 0.2  # not at once: at the next interval
    [record] = [r for r in caplog.records if r.name == "dshloop.housekeeping" and r.levelno >= logging.WARNING]
    assert "housekeeping job flaky raised; retrying in 0.2s" in record.getMessage()
    assert record.exc_info is not None


def test_a_long_pass_of_one_job_does_not_starve_another(housekeeper):
    endless = CountingJob(steps=10**9)
    frequent = CountingJob()
    housekeeper([Job("endless", 3600, endless.step), Job("frequent", 0.05, frequent.step)], pause=0.01)

    wait_for(lambda: frequent.passes >= 5, timeout=5, message="the frequent job to keep its turns")
    assert endless.passes == 0 and len(endless.calls) >= 5


def test_it_stops_promptly_even_during_a_long_pass_or_a_long_wait(housekeeper):
    endless = CountingJob(steps=10**9)
    idle = CountingJob()
    stop = threading.Event()
    busy = Housekeeper(stop, jobs=[Job("endless", 3600, endless.step)], pause=0.01)
    waiting = Housekeeper(stop, jobs=[Job("idle", 3600, idle.step)])
    busy.start(), waiting.start()
    wait_for(lambda: len(endless.calls) >= 3 and idle.passes == 1, timeout=5, message="both to be under way")

    stop.set()
    started = time.monotonic()
    busy.join(2), waiting.join(2)

    assert not busy.is_alive() and not waiting.is_alive()
    assert time.monotonic() - started < 1


@pytest.mark.django_db(transaction=True)
def test_the_prune_job_prunes_with_headroom_in_steps_and_logs_each_pass_that_removed_something(settings, caplog):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 8  # headroom 2: a loop is left alone up to 10 runs
    add_runs("loop_busy", 40)
    add_runs("loop_near", 10)
    job = PruneJob()

    with captured_log(caplog, "dshloop.housekeeping"):
        steps = 1
        while job.step():
            steps += 1
        while job.step():  # a second pass: nothing left to remove, so nothing logged
            pass

    assert steps > 1
    assert LoopRun.objects.filter(loop_id="loop_busy").count() == 8
    assert LoopRun.objects.filter(loop_id="loop_near").count() == 10
    [record] = [r for r in caplog.records if r.name == "dshloop.housekeeping"]
    assert record.levelname == "INFO"
    assert record.getMessage().startswith("pruned 32 run(s) of 1 loop(s) and 0 inbox message(s) older than ")


@pytest.mark.django_db(transaction=True)
def test_the_default_jobs_prune_in_the_thread_at_start(settings, housekeeper, caplog):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 4
    settings.DSHLOOP_PRUNE_INTERVAL_SECONDS = 3600
    add_runs("loop_busy", 30)
    job, *others = default_jobs()
    assert (job.name, job.interval) == ("prune", 3600)
    # Paused loops past their ends_at are completed every 10 s (contract §16); SQLite stores deadlines
    # as text: they are settled every 10 s too (scheduler.stored_times).
    expected = [("ends", 60.0)] + ([("deadlines", 10.0)] if connection.vendor == "sqlite" else [])
    # Failure notices (contract §16; on by default) are looked for every 30 s.
    expected.append(("failure notices", 60))
    assert [(other.name, other.interval) for other in others] == expected

    with captured_log(caplog, "dshloop.housekeeping"):
        housekeeper([job])
        wait_for(lambda: LoopRun.objects.filter(loop_id="loop_busy").count() == 4, timeout=10, message="the prune")

    assert "housekeeping started: prune every 3600 s" in caplog.messages


@pytest.mark.django_db(transaction=True)
def test_a_database_error_is_a_warning_and_the_job_is_retried(housekeeper, caplog):
    from django.db import DatabaseError

    calls = []

    def step() -> bool:
        calls.append(timezone.now())
        if len(calls) == 1:
            raise DatabaseError("server closed the connection unexpectedly")
        return False

    with captured_log(caplog, "dshloop.housekeeping"):
        housekeeper([Job("db", 0.1, step)], pause=0.01)
        wait_for(lambda: len(calls) >= 2, timeout=5, message="the retry")

    [record] = [r for r in caplog.records if r.name == "dshloop.housekeeping" and r.levelno >= logging.WARNING]
    assert record.levelname == "WARNING" and record.exc_info is None
    assert "database unavailable (server closed the connection unexpectedly)" in record.getMessage()
