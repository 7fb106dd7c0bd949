"""GET /metrics: the Prometheus text format, parsed with prometheus_client's own parser.

The scheduler's steps run in-process here under a frozen clock (claim_due, deliver_runs), against
the embedded host; tests/monitoring/test_metrics_process.py scrapes after a real `runloops`.
"""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from loops import counters
from loops.events import Actor
from loops.models import ActorKind, Loop, LoopRun, LoopState, MetricCounter, RunStatus, SchedulerHeartbeat
from loops.services.lifecycle import loop_pause
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.models import SessionHeader
from tests.conftest import T0, after, create_loop, error_of, every, s
from tokens.services import token_create

pytestmark = pytest.mark.django_db


def sample_key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{key}="{value}"' for key, value in sorted(labels.items())) + "}"


def scrape(token: str) -> dict[str, float]:
    """Every sample of one scrape, by its name and labels as the exposition writes them."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4"), response["Content-Type"]
    return {
        sample_key(sample.name, sample.labels): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def step(now: datetime) -> list[str]:
    """One clock tick and the deliveries it enqueued, at `now`."""
    with time_machine.travel(now, tick=False):
        run_ids = claim_due(now=now)
        if run_ids:
            deliver_runs(run_ids, now=now)
    return run_ids


def delivered(result: str) -> str:
    return f'dshloop_occurrences_total{{result="{result}"}}'


def bucket(le: str) -> str:
    return f'dshloop_delivery_lateness_seconds_bucket{{le="{le}"}}'


class TestAccess:
    def test_a_manage_token_reads_the_metrics(self, manage_token):
        assert "dshloop_due_backlog" in scrape(manage_token)

    def test_no_token_is_401_with_the_error_body(self):
        response = Client().get("/metrics")
        assert response.status_code == 401 and error_of(response)["code"] == "unauthorized"

    def test_an_unknown_token_is_401(self):
        response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
        assert response.status_code == 401 and error_of(response)["code"] == "unauthorized"

    def test_a_token_without_manage_is_403(self, tools_token):
        response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {tools_token}")
        assert response.status_code == 403 and error_of(response)["code"] == "forbidden"

    def test_only_get_and_head(self, manage_token):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {manage_token}")
        assert client.post("/metrics").status_code == 405
        head = client.head("/metrics")
        assert head.status_code == 200 and head.content == b""


class TestOnAFreshInstall:
    def test_every_series_is_there_at_zero(self, manage_token):
        samples = scrape(manage_token)
        zero = [
            delivered("delivered"),
            delivered("failed"),
            delivered("skipped"),
            "dshloop_missed_occurrences_total",
            "dshloop_delivery_lateness_seconds_count",
            "dshloop_delivery_lateness_seconds_sum",
            bucket("+Inf"),
            "dshloop_due_backlog",
            "dshloop_open_runs",
            "dshloop_oldest_open_run_age_seconds",
            "dshloop_scheduler_instances",
            *(f'dshloop_loops{{state="{state}"}}' for state in LoopState.values),
        ]
        assert {key: samples[key] for key in zero} == dict.fromkeys(zero, 0.0)
        # No scheduler ever ticked: no timestamp rather than a misleading 1970.
        assert "dshloop_scheduler_last_tick_timestamp_seconds" not in samples

    def test_the_histogram_has_every_bucket_in_order(self, manage_token):
        samples = scrape(manage_token)
        bounds = [str(float(bound)) for bound in counters.LATENESS_BUCKETS] + ["+Inf"]
        assert [key for key in samples if key.startswith("dshloop_delivery_lateness_seconds_bucket")] == [
            bucket(bound) for bound in bounds
        ]


class TestOccurrenceCounters:
    def test_a_delivery_counts_once_with_its_lateness(self, manage_token, make_session):
        make_session("ses_a", status="idle")
        create_loop(every(10), target="ses_a", at=T0)
        # Due at T0+10 s, delivered 3.2 s late.
        assert step(T0 + s(13.2))
        samples = scrape(manage_token)
        assert samples[delivered("delivered")] == 1
        assert samples[delivered("failed")] == samples[delivered("skipped")] == 0
        assert samples["dshloop_delivery_lateness_seconds_count"] == 1
        assert samples["dshloop_delivery_lateness_seconds_sum"] == pytest.approx(3.2)
        assert samples[bucket("2.5")] == 0 and samples[bucket("5.0")] == 1 and samples[bucket("+Inf")] == 1

    def test_missed_counts_the_folded_occurrences(self, manage_token, make_session):
        make_session("ses_a", status="idle")
        create_loop(every(10), target="ses_a", at=T0)
        # Down from before T0+10 s to T0+45 s: T0+40 s is delivered, 10, 20 and 30 are folded.
        step(T0 + s(45))
        samples = scrape(manage_token)
        assert samples["dshloop_missed_occurrences_total"] == 3
        assert samples[delivered("delivered")] == 1
        assert samples["dshloop_delivery_lateness_seconds_sum"] == pytest.approx(5)

    def test_a_failure_counts_as_failed_without_lateness(self, manage_token, make_session):
        make_session("ses_gone", status="idle")
        create_loop(every(10), target="ses_gone", at=T0)
        SessionHeader.objects.filter(session_id="ses_gone").delete()
        step(T0 + s(10))
        samples = scrape(manage_token)
        assert (samples[delivered("failed")], samples[delivered("delivered")]) == (1, 0)
        assert samples["dshloop_delivery_lateness_seconds_count"] == 0

    def test_an_occurrence_of_a_loop_paused_before_it_started_counts_as_skipped(self, manage_token, make_session):
        make_session("ses_a", status="idle")
        loop = create_loop(every(10), target="ses_a", at=T0)
        with time_machine.travel(T0 + s(10), tick=False):
            run_ids = claim_due(now=T0 + s(10))
            loop_pause(loop_id=loop.loop_id, actor=Actor(ActorKind.USER, "ada"))
            deliver_runs(run_ids, now=T0 + s(10))
        assert LoopRun.objects.get().status == RunStatus.SKIPPED
        assert scrape(manage_token)[delivered("skipped")] == 1

    def test_a_catch_up_beyond_the_misfire_grace_counts_as_skipped_and_missed(
        self, manage_token, make_session, settings
    ):
        settings.DSHLOOP_MISFIRE_GRACE_SECONDS = 5
        make_session("ses_a", status="idle")
        create_loop(every(10), target="ses_a", at=T0)
        step(T0 + s(26))  # T0+20 s is 6 s late: skipped; T0+10 s folded
        samples = scrape(manage_token)
        assert (samples[delivered("skipped")], samples[delivered("delivered")]) == (1, 0)
        assert samples["dshloop_missed_occurrences_total"] == 2  # the folded one and the skipped one

    def test_the_counters_never_go_down_when_retention_prunes_runs(self, manage_token, make_session, settings):
        make_session("ses_a", status="idle")
        loop = create_loop(every(10), target="ses_a", at=T0)
        for tick in (10, 20, 30):
            step(T0 + s(tick))
        assert LoopRun.objects.filter(loop_id=loop.loop_id).count() == 3
        settings.DSHLOOP_RUN_HISTORY_LIMIT = 1
        with time_machine.travel(T0 + s(31), tick=False):
            call_command("prune", verbosity=0)
        assert LoopRun.objects.filter(loop_id=loop.loop_id).count() == 1
        samples = scrape(manage_token)
        assert samples[delivered("delivered")] == 3
        assert samples["dshloop_delivery_lateness_seconds_count"] == 3

    def test_shards_add_up(self, manage_token):
        for _ in range(40):
            tally = counters.Tally()
            tally.finished(RunStatus.FAILED, 2)
            tally.save()
        assert scrape(manage_token)[delivered("failed")] == 80
        assert 1 < MetricCounter.objects.count() <= counters.SHARDS


class TestGauges:
    def test_due_backlog_counts_due_loops_not_yet_claimed(self, manage_token, make_session):
        make_session("ses_a", status="idle")
        for _ in range(3):
            create_loop(every(10), target="ses_a", at=T0)
        create_loop(every(60), target="ses_a", at=T0)
        with time_machine.travel(T0 + s(15), tick=False):
            assert scrape(manage_token)["dshloop_due_backlog"] == 3
        step(T0 + s(15))
        with time_machine.travel(T0 + s(16), tick=False):
            assert scrape(manage_token)["dshloop_due_backlog"] == 0

    def test_open_runs_and_the_age_of_the_oldest(self, manage_token, make_session):
        make_session("ses_a", status="idle")
        create_loop(every(10), target="ses_a", at=T0)
        create_loop(every(20), target="ses_a", at=T0)
        with time_machine.travel(T0 + s(10), tick=False):
            claim_due(now=T0 + s(10))  # claimed, not delivered: open
        with time_machine.travel(T0 + s(20), tick=False):
            claim_due(now=T0 + s(20))  # the every-10 loop is running: only the other one
        with time_machine.travel(T0 + s(22.5), tick=False):
            samples = scrape(manage_token)
        assert samples["dshloop_open_runs"] == 2
        assert samples["dshloop_oldest_open_run_age_seconds"] == pytest.approx(12.5)

    def test_loops_by_state(self, manage_token, make_session):
        make_session("ses_a", status="idle")
        paused = create_loop(every(10), target="ses_a", at=T0)
        loop_pause(loop_id=paused.loop_id, actor=Actor(ActorKind.USER, "ada"))
        create_loop(after(5), target="ses_a", at=T0)  # delivered at T0+5 s: completed
        create_loop(every(10), target="ses_a", at=T0)  # delivered, then scheduled again
        step(T0 + s(5))
        running = create_loop(every(10), target="ses_a", at=T0 + s(6))
        Loop.objects.filter(loop_id=running.loop_id).update(state=LoopState.RUNNING)
        failed = create_loop(every(10), target="ses_a", at=T0 + s(6))
        Loop.objects.filter(loop_id=failed.loop_id).update(state=LoopState.FAILED, next_at=None)
        samples = scrape(manage_token)
        assert {state: samples[f'dshloop_loops{{state="{state}"}}'] for state in LoopState.values} == {
            "scheduled": 1,
            "running": 1,
            "completed": 1,
            "failed": 1,
            "paused": 1,
        }

    def test_schedulers_alive_and_the_newest_tick(self, manage_token):
        now = T0 + s(100)
        for name, ticked in (("a", now - s(5)), ("b", now - s(30)), ("dead", now - s(61))):
            SchedulerHeartbeat.objects.create(instance_id=name, hostname="h", pid=1, started_at=T0, last_tick_at=ticked)
        with time_machine.travel(now, tick=False):
            samples = scrape(manage_token)
        assert samples["dshloop_scheduler_instances"] == 2
        assert samples["dshloop_scheduler_last_tick_timestamp_seconds"] == pytest.approx((now - s(5)).timestamp())


def test_a_second_token_with_manage_among_its_scopes_reads_them_too():
    token = token_create(name="prometheus", scopes=["tools", "manage"])[1]
    assert "dshloop_open_runs" in scrape(token)
