"""GET /metrics for contract §14, the bounds on `new` loops' fresh sessions: runs skipped for
overlap or capacity, runs timed out, and the fresh sessions running against their limit.

Each number comes from the scheduler's own steps (claim_due, deliver_runs, end_turn) under a frozen
clock, against the embedded host; where a run must go on running after its delivery, the settings
switch to the DSH host, which reports turn ends (never called here).
"""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine

from loops.events import Actor
from loops.models import ActorKind, Loop, LoopRun, RunStatus
from loops.runs import running_fresh_runs
from loops.services.edit import loop_edit
from scheduler.claims import Claimed, claim_due
from scheduler.delivery import deliver_runs
from scheduler.outcomes import end_turn, record_outcome
from tests.conftest import T0, create_loop, every, s
from tests.monitoring.test_metrics import scrape

pytestmark = pytest.mark.django_db

OVERLAP = 'dshloop_runs_skipped_total{reason="overlap"}'
CAPACITY = 'dshloop_runs_skipped_total{reason="capacity"}'
TIMED_OUT = "dshloop_runs_timed_out_total"
RUNNING = "dshloop_fresh_runs_running"
LIMIT = "dshloop_fresh_runs_limit"


@pytest.fixture(autouse=True)
def unattended_settings(settings):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0
    settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS = 4
    settings.DSHLOOP_RUN_TIMEOUT_SECONDS = 100


def turn_ends_reported(settings) -> None:
    """From now on the host is DSH, which reports turn ends: a delivered run runs until its outcome."""
    settings.DSHLOOP_HOST = "dsh"
    settings.DSHLOOP_DSH_URL = "http://127.0.0.1:9"  # neither a claim nor a scrape calls it


def new_loop(seconds: int, *, at: datetime = T0, overlap: str | None = None) -> Loop:
    loop = create_loop(every(seconds), target="new", at=at)
    if overlap is not None:
        loop_edit(loop_id=loop.loop_id, changes={"overlap": overlap}, actor=Actor(ActorKind.USER, "ada"), now=at)
    return loop


def claim(now: datetime) -> Claimed:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now)


def deliver(run_ids: list[str], now: datetime) -> None:
    with time_machine.travel(now, tick=False):
        deliver_runs(run_ids, now=now)


def scrape_at(now: datetime, token: str) -> dict[str, float]:
    with time_machine.travel(now, tick=False):
        return scrape(token)


def test_every_series_is_there_at_zero_with_the_limit(manage_token):
    samples = scrape(manage_token)
    assert {key: samples[key] for key in (OVERLAP, CAPACITY, TIMED_OUT, RUNNING, LIMIT)} == {
        OVERLAP: 0,
        CAPACITY: 0,
        TIMED_OUT: 0,
        RUNNING: 0,
        LIMIT: 4,
    }


def test_an_occurrence_skipped_while_the_last_turn_runs_counts_as_overlap(manage_token, settings):
    loop = new_loop(10, overlap="skip")
    [first] = claim(T0 + s(10))
    deliver([first], T0 + s(10))
    turn_ends_reported(settings)
    assert claim(T0 + s(20)) == []
    skipped = LoopRun.objects.filter(loop_id=loop.loop_id, status=RunStatus.SKIPPED).get()
    assert skipped.error.startswith("Skipped (overlap)")
    samples = scrape_at(T0 + s(21), manage_token)
    assert (samples[OVERLAP], samples[CAPACITY]) == (1, 0)
    assert samples['dshloop_occurrences_total{result="skipped"}'] == 1  # among the skipped occurrences too
    assert samples[RUNNING] == 1  # the first run's turn goes on


def test_an_occurrence_that_waited_past_the_misfire_grace_counts_as_capacity(manage_token, settings):
    settings.DSHLOOP_MAX_CONCURRENT_NEW_RUNS = 1
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = 30
    new_loop(600, at=T0)
    waiting = new_loop(600, at=T0 + s(1))
    assert len(claim(T0 + s(600))) == 1
    assert claim(T0 + s(620)).waiting == 1  # 19 s late: within the grace, nothing skipped yet
    assert scrape_at(T0 + s(620), manage_token)[CAPACITY] == 0
    assert claim(T0 + s(640)) == []  # 39 s late: skipped
    assert LoopRun.objects.get(loop_id=waiting.loop_id).error.startswith("Skipped (capacity)")
    samples = scrape_at(T0 + s(641), manage_token)
    assert (samples[CAPACITY], samples[OVERLAP]) == (1, 0)
    assert samples['dshloop_occurrences_total{result="skipped"}'] == 1
    assert (samples[RUNNING], samples[LIMIT]) == (1, 1)


def test_a_turn_cancelled_past_the_run_timeout_counts_as_timed_out(manage_token):
    new_loop(600)
    [run_id] = claim(T0 + s(600))
    deliver([run_id], T0 + s(600))
    cancelled = []
    ended = end_turn(
        run_id=run_id,
        error="timed out after 2 min (DSHLOOP_RUN_TIMEOUT_SECONDS)",
        cancel=lambda: cancelled.append(run_id),
        timed_out=True,
        now=T0 + s(720),
    )
    assert ended and cancelled == [run_id]
    samples = scrape_at(T0 + s(721), manage_token)
    assert samples[TIMED_OUT] == 1
    # The occurrence was delivered; its turn failed afterwards, which the occurrences do not recount.
    assert (
        samples['dshloop_occurrences_total{result="delivered"}'],
        samples['dshloop_occurrences_total{result="failed"}'],
    ) == (1, 0)
    # Once: the run has its outcome now, so a second attempt ends nothing and counts nothing.
    assert not end_turn(run_id=run_id, error="timed out", cancel=lambda: None, timed_out=True, now=T0 + s(780))
    assert scrape_at(T0 + s(781), manage_token)[TIMED_OUT] == 1


def test_a_turn_cancelled_for_waiting_on_a_person_is_not_timed_out(manage_token):
    new_loop(600)
    [run_id] = claim(T0 + s(600))
    deliver([run_id], T0 + s(600))
    end_turn(run_id=run_id, error="Unattended run stopped: …", cancel=lambda: None, timed_out=False, now=T0 + s(610))
    assert LoopRun.objects.get(run_id=run_id).status == RunStatus.FAILED
    assert scrape_at(T0 + s(611), manage_token)[TIMED_OUT] == 0


class TestFreshRunsRunning:
    """The gauge is the claim's own count (loops.runs.running_fresh_runs), compiled into the one
    raw statement monitoring reads its gauges with: the two must agree in every state a run can be
    in, at the timeout's boundary too (on SQLite the statement compares timestamps as stored text)."""

    @pytest.fixture
    def runs(self, make_session):
        """At T0+600 s: four new loops' runs claimed, two of them delivered, one of those with
        its outcome in; and a run into an existing session, open, which is no fresh agent."""
        make_session("ses_a", status="idle")
        loops = [new_loop(600, at=T0) for _ in range(4)]
        create_loop(every(600), target="ses_a", at=T0)
        run_ids = claim(T0 + s(600))
        fresh = [LoopRun.objects.get(loop_id=loop.loop_id).run_id for loop in loops]
        assert len(run_ids) == 5
        deliver(fresh[:2], T0 + s(600))
        record_outcome(run_id=fresh[1], status="succeeded", now=T0 + s(610))
        return fresh

    def counted(self, now: datetime, token: str) -> tuple[float, int]:
        return scrape_at(now, token)[RUNNING], running_fresh_runs(now=now).count()

    def test_on_a_host_without_turn_ends_only_open_runs_run(self, runs, manage_token):
        assert self.counted(T0 + s(650), manage_token) == (2, 2)

    def test_on_a_host_with_turn_ends_a_delivered_run_runs_until_its_outcome_or_the_timeout(
        self, runs, manage_token, settings
    ):
        turn_ends_reported(settings)
        assert self.counted(T0 + s(650), manage_token) == (3, 3)
        assert self.counted(T0 + s(700), manage_token) == (3, 3)  # delivered exactly the timeout ago
        assert self.counted(T0 + s(701), manage_token) == (2, 2)
