"""GET /metrics after real `runloops` deliveries and failures, on both engines: two
schedulers deliver and fail occurrences, are stopped (a backlog builds up and is folded on
restart), and every series is checked against the run history the schedulers wrote."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from loops.events import Actor
from loops.models import ActorKind, LoopRun, RunStatus
from loops.runs import OPEN_STATUSES
from loops.services.lifecycle import loop_pause
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.models import SessionHeader
from tests.conftest import after, create_loop, every
from tests.processes import Schedulers, wait_for

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

OCCURRENCES = 'dshloop_occurrences_total{{result="{}"}}'


@pytest.fixture
def schedulers(tmp_path, host):
    # A failing loop keeps failing every second: a short backoff and no auto-pause.
    running = Schedulers(
        tmp_path, **host.scheduler_env(), DSHLOOP_FAILURE_BACKOFF_SECONDS="1", DSHLOOP_AUTO_PAUSE_AFTER="0"
    )
    yield running
    running.close()


def scrape(token: str) -> dict[str, float]:
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return samples


def runs(status: str) -> int:
    return LoopRun.objects.filter(status=status).count()


def test_metrics_follow_real_schedulers(schedulers, manage_token, make_session):
    make_session("ses_a", status="idle")
    make_session("ses_gone", status="idle")
    every_second = create_loop(every(1), target="ses_a")
    create_loop(every(1), target="ses_gone")
    SessionHeader.objects.filter(session_id="ses_gone").delete()  # its deliveries fail
    create_loop(after(1), target="ses_a")  # delivered once, then completed
    paused = create_loop(every(3600), target="ses_a")
    loop_pause(loop_id=paused.loop_id, actor=Actor(ActorKind.USER, "ada"))

    first_pair = schedulers.start_ready(2)
    wait_for(lambda: runs(RunStatus.DELIVERED) >= 4 and runs(RunStatus.FAILED) >= 2, timeout=60, message="runs")
    running = scrape(manage_token)
    assert running["dshloop_scheduler_instances"] == 2
    assert abs(running["dshloop_scheduler_last_tick_timestamp_seconds"] - timezone.now().timestamp()) < 35
    assert running[OCCURRENCES.format("delivered")] >= 4 and running[OCCURRENCES.format("failed")] >= 2
    assert running['dshloop_loops{state="paused"}'] == 1 and running['dshloop_loops{state="completed"}'] == 1

    # Both stop: the every-second loops fall due and stay unclaimed.
    for scheduler in first_pair:
        scheduler.terminate()
    stopped_at = timezone.now()
    # A stop can come between a claim and its delivery task: that run stays claimed until the next
    # scheduler recovers it, after its lease. Drive it here, as that scheduler would.
    if left := list(LoopRun.objects.filter(status__in=OPEN_STATUSES).values_list("run_id", flat=True)):
        deliver_runs(left)
    wait_for(lambda: scrape(manage_token)["dshloop_due_backlog"] == 2, timeout=30, message="a backlog of 2 loops")
    stopped = scrape(manage_token)
    assert stopped["dshloop_scheduler_instances"] == 0  # a graceful stop removes its heartbeat
    # The counters match the history the schedulers wrote, exactly.
    assert stopped[OCCURRENCES.format("delivered")] == runs(RunStatus.DELIVERED)
    assert stopped[OCCURRENCES.format("failed")] == runs(RunStatus.FAILED)
    # Skipped: what the failing loop's backoff passed over (scheduler.failures), each counted once.
    assert stopped[OCCURRENCES.format("skipped")] == runs(RunStatus.SKIPPED)
    assert stopped["dshloop_delivery_lateness_seconds_count"] == runs(RunStatus.DELIVERED)
    lateness = sum(
        (run.finished_at - run.scheduled_at).total_seconds() for run in LoopRun.objects.filter(status="delivered")
    )
    assert stopped["dshloop_delivery_lateness_seconds_sum"] == pytest.approx(lateness, abs=1e-3)
    assert stopped['dshloop_delivery_lateness_seconds_bucket{le="+Inf"}'] == runs(RunStatus.DELIVERED)

    # A claim made while no scheduler drives it: an open run, ageing.
    wait_for(lambda: timezone.now() - stopped_at > timedelta(seconds=3), timeout=10, message="3 s of downtime")
    claimed = claim_due(now=timezone.now())
    assert len(claimed) == 2
    open_now = scrape(manage_token)
    assert open_now["dshloop_open_runs"] == 2 and open_now["dshloop_due_backlog"] == 0
    wait_for(
        lambda: scrape(manage_token)["dshloop_oldest_open_run_age_seconds"] >= 1, timeout=10, message="an ageing run"
    )
    missed = LoopRun.objects.filter(loop_id=every_second.loop_id).aggregate(missed=Sum("missed"))["missed"]
    assert missed >= 2  # the catch-up folded the seconds of downtime

    # One scheduler again: it delivers the open runs and goes on; the counters only grow.
    schedulers.start_ready(1)
    wait_for(lambda: scrape(manage_token)["dshloop_open_runs"] == 0, timeout=30, message="the open runs driven")
    wait_for(
        lambda: scrape(manage_token)[OCCURRENCES.format("delivered")] > stopped[OCCURRENCES.format("delivered")] + 1,
        timeout=30,
        message="more deliveries",
    )

    def total_missed() -> int:
        return LoopRun.objects.aggregate(missed=Sum("missed"))["missed"]

    # The scheduler goes on meanwhile: what it recorded before the scrape and after brackets it.
    before = total_missed()
    again = scrape(manage_token)
    assert before <= again["dshloop_missed_occurrences_total"] <= total_missed()
    assert again["dshloop_scheduler_instances"] == 1
    assert again["dshloop_missed_occurrences_total"] >= stopped["dshloop_missed_occurrences_total"] + 2
    for key in (OCCURRENCES.format("delivered"), OCCURRENCES.format("failed"), "dshloop_delivery_lateness_seconds_sum"):
        assert again[key] >= stopped[key] > 0, key
