"""Delivery of one claimed occurrence (spec §2.1 inheritance, §3, §5 durable sequence, §6; contract §5:
delivery, its failure policy and recovery).

Each test claims with scheduler.claims.claim_due and drives the run with scheduler.delivery.deliver_run under a
frozen clock, against the embedded host (the database is the host).
"""

import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import ClassVar

import pytest
import time_machine
from django.db import connection, transaction

from core.timeutil import to_ms
from loops.events import Actor
from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.runs import lease
from loops.services.lifecycle import loop_delete
from scheduler import delivery, tasks
from scheduler.claims import claim_due, recover_runs
from scheduler.delivery import deliver_run
from scheduler.message import loop_message
from scheduler.prepare import MAX_ATTEMPTS
from scheduler.records import backoff
from sessions_app.hosts.base import Capabilities, HostError, deliver_each
from sessions_app.hosts.local import LocalHost
from sessions_app.models import InboxMessage, Preset, SessionHeader
from sessions_app.services import session_upsert
from tests.conftest import T0, after, create_loop, every, s

PROMPT = "Check the deployment status"


@pytest.fixture
def create(api, settings):
    """loop_create through the tool API at T0, called from ses_caller (preset coder, model m1).
    `new` loops on a grid of seconds: the floor on their interval has its own tests."""
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0

    def make(schedule: dict | None = None, *, session_id: str | None = None, **body) -> Loop:
        body = {"prompt": PROMPT, "schedule": schedule or every(), **body}
        if session_id is not None:
            body["session_id"] = session_id
        with time_machine.travel(T0, tick=False):
            response = api.tool("loop_create", body)
        assert response.status_code == 200, response.content
        return Loop.objects.get(loop_id=response.json()["loop_id"])

    return make


def claim(now: datetime) -> list[str]:
    with time_machine.travel(now, tick=False):
        return claim_due(now=now)


def deliver(run_id: str, now: datetime) -> bool:
    with time_machine.travel(now, tick=False):
        return deliver_run(run_id)


def claim_one(loop: Loop, now: datetime = T0 + s(10)) -> LoopRun:
    (run_id,) = claim(now)
    run = LoopRun.objects.get(run_id=run_id)
    assert run.loop_id == loop.loop_id
    return run


def fire(loop: Loop, now: datetime = T0 + s(10)) -> LoopRun:
    """Claim the loop's due occurrence and deliver it at the same moment."""
    run = claim_one(loop, now)
    assert deliver(run.run_id, now) is True
    run.refresh_from_db()
    return run


def refreshed(obj):
    obj.refresh_from_db()
    return obj


def inbox(session_id: str | None = None) -> list[InboxMessage]:
    messages = InboxMessage.objects.all()
    return list(messages.filter(session_id=session_id) if session_id else messages)


def active_loop_ids(api) -> list[str]:
    response = api.tool("loop_list", {"session_id": "global"})
    assert response.status_code == 200, response.content
    return [view["loop_id"] for view in response.json()["loops"]]


# --- an actual session: resumed, reused, adaptive delivery (spec §5, §6) ------------------------


@pytest.mark.parametrize(("status", "delivery_mode"), [("idle", "next_turn"), ("running", "next_step")])
def test_delivery_to_a_live_session_uses_the_adaptive_inbox_mode(create, make_session, status, delivery_mode):
    make_session("ses_target", status=status, preset="p1", model="m9")
    loop = create(session_id="ses_target")
    now = T0 + s(10)

    run = fire(loop, now)

    (message,) = inbox()
    assert message.session_id == "ses_target"
    assert message.text == loop_message(loop_id=loop.loop_id, prompt=PROMPT)
    assert (message.wakeup, message.delivery, message.occurrence_key) == (True, delivery_mode, run.occurrence_key)
    assert message.source == {
        "kind": "loop",
        "loop_id": loop.loop_id,
        "run_id": run.run_id,
        "occurrence_key": run.occurrence_key,
        "scheduled_at": to_ms(now),
    }
    assert (run.status, run.target_session_id, run.attempt, run.error, run.fallback) == (
        RunStatus.DELIVERED,
        "ses_target",
        1,
        "",
        "",
    )
    assert run.started_at == run.finished_at == now
    assert (run.retry_at, run.lease_until) == (None, None)
    refreshed(loop)
    assert (loop.state, loop.last_result, loop.last_error, loop.last_run_at) == (
        LoopState.SCHEDULED,
        "delivered",
        "",
        now,
    )
    assert loop.next_at == T0 + s(20)
    header = SessionHeader.objects.get(session_id="ses_target")
    assert (header.status, header.preset, header.model) == (status, "p1", "m9")


def test_cold_session_is_resumed_with_its_preset_and_model_untouched(create, make_session):
    make_session("ses_cold", status="cold", preset="research", model="m-big")
    loop = create(session_id="ses_cold")

    run = fire(loop)

    header = SessionHeader.objects.get(session_id="ses_cold")
    assert (header.status, header.preset, header.model) == ("idle", "research", "m-big")
    (message,) = inbox("ses_cold")
    assert message.delivery == "next_turn"
    assert run.status == RunStatus.DELIVERED
    assert SessionHeader.objects.count() == 2  # ses_caller and ses_cold: nothing created


def test_actual_session_is_reused_across_occurrences(create, make_session):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    first = fire(loop, T0 + s(10))
    second = fire(loop, T0 + s(20))
    assert first.target_session_id == second.target_session_id == "ses_target"
    assert [m.occurrence_key for m in inbox("ses_target")] == [first.occurrence_key, second.occurrence_key]


def test_deleted_target_session_fails_at_once(create, make_session):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    SessionHeader.objects.filter(session_id="ses_target").delete()

    run = fire(loop)

    assert (run.status, run.attempt, run.retry_at) == (RunStatus.FAILED, 1, None)
    assert "ses_target" in run.error and "no longer exists" in run.error
    assert not inbox()
    refreshed(loop)
    assert (loop.state, loop.last_result, loop.last_error) == (LoopState.SCHEDULED, "failed", run.error)
    # spec: every/cron keep their schedule after a failure, after the failure backoff:
    # the first occurrence at least 30 s after the failure.
    assert loop.next_at == T0 + s(40)


# --- self: the global interface at delivery time ------------------------------------------------


def test_self_reaches_the_global_interface_session_at_delivery_time(create, global_session, make_session):
    loop = create(session_id="self")
    run = claim_one(loop)
    make_session("ses_global_2", global_interface=True)  # the interface moved between claim and delivery

    assert deliver(run.run_id, T0 + s(10))

    assert refreshed(run).target_session_id == "ses_global_2"
    assert [m.session_id for m in inbox()] == ["ses_global_2"]


def test_self_resumes_a_cold_global_interface(create, global_session):
    loop = create(session_id="self")
    session_upsert(session_id="ses_global", changes={"status": "cold"})
    run = fire(loop)
    assert (run.status, run.target_session_id) == (RunStatus.DELIVERED, "ses_global")
    header = SessionHeader.objects.get(session_id="ses_global")
    assert (header.status, header.preset, header.model) == ("idle", "interface", "m-global")


def test_self_without_a_global_interface_fails_at_once_and_keeps_the_schedule(create, global_session):
    loop = create(session_id="self")
    session_upsert(session_id="ses_global", changes={"global_interface": False})

    run = fire(loop)

    assert (run.status, run.attempt, run.retry_at) == (RunStatus.FAILED, 1, None)
    assert "global interface" in run.error
    assert not inbox()
    refreshed(loop)
    assert (loop.state, loop.last_result, loop.last_error) == (LoopState.SCHEDULED, "failed", run.error)
    assert loop.next_at == T0 + s(40)  # after the failure backoff


# --- new: a fresh session per occurrence, preset chosen or inherited, model inherited ------------


def test_new_creates_one_fresh_session_per_occurrence_with_the_explicit_preset(create, make_preset):
    make_preset("research")
    loop = create(session_id="new", preset="research")

    first = fire(loop, T0 + s(10))
    second = fire(loop, T0 + s(20))

    created = SessionHeader.objects.exclude(session_id="ses_caller")
    assert created.count() == 2
    assert {first.target_session_id, second.target_session_id} == set(created.values_list("session_id", flat=True))
    for run in (first, second):
        header = SessionHeader.objects.get(session_id=run.target_session_id)
        assert header.session_id.startswith("ses_")
        assert (header.preset, header.model, header.first_prompt) == ("research", "m1", PROMPT)
        assert run.fallback == ""
        (message,) = inbox(run.target_session_id)
        assert (message.occurrence_key, message.delivery) == (run.occurrence_key, "next_turn")


def test_new_without_preset_inherits_the_creators_preset_and_model(create):
    loop = create(session_id="new")
    run = fire(loop)
    header = SessionHeader.objects.get(session_id=run.target_session_id)
    assert (header.preset, header.model, header.first_prompt) == ("coder", "m1", PROMPT)
    assert run.fallback == ""


def test_new_loop_made_from_the_panel_inherits_the_global_interface(global_session):
    """Loops created without a caller session record the global interface as creator (contract §2),
    so a `new` loop from the panel inherits its preset and model."""
    loop = create_loop(every(600), prompt=PROMPT, target="new", at=T0)
    assert loop.created_by_session_id == "ses_global"

    run = fire(loop, T0 + s(600))

    header = SessionHeader.objects.get(session_id=run.target_session_id)
    assert (header.preset, header.model, run.fallback) == ("interface", "m-global", "")


def test_new_after_loop_creates_one_session_when_it_fires(create, api):
    loop = create(after(30), session_id="new")
    run = fire(loop, T0 + s(30))
    assert SessionHeader.objects.exclude(session_id="ses_caller").count() == 1
    assert refreshed(loop).state == LoopState.COMPLETED
    assert inbox(run.target_session_id)


@pytest.fixture
def profile_default(settings):
    settings.DSHLOOP_DEFAULT_PRESET = "profile-preset"
    settings.DSHLOOP_DEFAULT_MODEL = "profile-model"


def test_new_with_its_creator_gone_uses_the_profile_default_and_says_so(create, global_session, profile_default):
    loop = create(session_id="new")
    SessionHeader.objects.filter(session_id="ses_caller").delete()

    run = fire(loop)

    header = SessionHeader.objects.get(session_id=run.target_session_id)
    # Not the global interface's preset and model: the source of inheritance is the creator.
    assert (header.preset, header.model) == ("profile-preset", "profile-model")
    assert run.status == RunStatus.DELIVERED
    assert "profile default" in run.fallback and "preset" in run.fallback and "model" in run.fallback
    assert "ses_caller" in run.fallback


def test_new_with_explicit_preset_and_creator_gone_falls_back_for_the_model_only(create, make_preset, profile_default):
    make_preset("research")
    loop = create(session_id="new", preset="research")
    SessionHeader.objects.filter(session_id="ses_caller").delete()

    run = fire(loop)

    header = SessionHeader.objects.get(session_id=run.target_session_id)
    assert (header.preset, header.model) == ("research", "profile-model")
    assert "profile default model" in run.fallback and "preset" not in run.fallback


def test_new_whose_creator_has_no_model_records_the_fallback(create, make_session, profile_default):
    make_session("ses_caller", model="")
    loop = create(session_id="new")
    run = fire(loop)
    header = SessionHeader.objects.get(session_id=run.target_session_id)
    assert (header.preset, header.model) == ("coder", "profile-model")
    assert "profile default model" in run.fallback


def test_fallback_appears_in_the_run_history(create, api, profile_default):
    loop = create(session_id="new")
    SessionHeader.objects.filter(session_id="ses_caller").delete()
    run = fire(loop)
    response = api.get(f"/api/loops/{loop.loop_id}/runs")
    assert response.status_code == 200, response.content
    (view,) = response.json()["runs"]
    assert view["fallback"] == run.fallback and view["status"] == "delivered"


@pytest.mark.parametrize("change", ["delete", "unmountable"])
def test_new_whose_explicit_preset_is_gone_fails_at_once(create, make_preset, change):
    make_preset("research")
    loop = create(session_id="new", preset="research")
    if change == "delete":
        Preset.objects.filter(name="research").delete()
    else:
        make_preset("research", mountable=False)

    run = fire(loop)

    assert (run.status, run.attempt) == (RunStatus.FAILED, 1)
    assert "research" in run.error
    assert SessionHeader.objects.count() == 1  # no session made for a preset that cannot mount
    assert not inbox()
    assert refreshed(loop).last_error == run.error


# --- the loop or the run changed under the driver ------------------------------------------------


def test_loop_deleted_after_claim_fails_its_run_without_a_message(create, make_session):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    run = claim_one(loop)
    loop_delete(loop_id=loop.loop_id, actor=Actor.session("ses_caller"))

    assert deliver(run.run_id, T0 + s(10)) is True

    refreshed(run)
    assert run.status == RunStatus.FAILED and "deleted" in run.error
    assert not inbox()
    assert not Loop.objects.exists()


def test_re_driving_a_delivered_run_does_nothing(create, make_session):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    run = fire(loop)

    assert deliver(run.run_id, T0 + s(11)) is False
    assert deliver(run.run_id, T0 + s(3600)) is False

    assert len(inbox()) == 1
    assert refreshed(run).attempt == 1 and run.status == RunStatus.DELIVERED


@pytest.mark.django_db(transaction=True)
def test_a_run_held_by_a_live_driver_is_not_taken_over(create, make_session, monkeypatch):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    run = claim_one(loop)
    now = T0 + s(10)
    second_driver = []

    def duplicated_task():  # the same run, driven by another worker (its own connection)
        try:
            second_driver.append(deliver_run(run.run_id))
        finally:
            connection.close()

    other = threading.Thread(target=duplicated_task)
    real_deliver_many = LocalHost.deliver_many

    def deliver_while_another_driver_tries(self, *args, **kwargs):
        other.start()  # the lease is taken and committed; the delivery is under way
        return real_deliver_many(self, *args, **kwargs)

    monkeypatch.setattr(LocalHost, "deliver_many", deliver_while_another_driver_tries)
    with time_machine.travel(now, tick=False):  # both drivers see the first one's lease as live
        assert deliver_run(run.run_id) is True
        other.join(30)  # (on SQLite it waits for the first driver's write transaction)
    assert second_driver == [False]
    assert len(inbox()) == 1


class Crash(BaseException):
    """The process dies here (BaseException: nothing in dshloop may catch it)."""


@pytest.mark.parametrize("target", ["ses_target", "new"])
def test_run_re_driven_after_a_crash_before_recording_delivers_once(create, make_session, monkeypatch, target):
    make_session("ses_target")
    loop = create(session_id=target)
    run = claim_one(loop)
    now = T0 + s(10)

    def crash(*args, **kwargs):
        raise Crash

    sessions_before = SessionHeader.objects.count()
    with monkeypatch.context() as patch:
        patch.setattr(delivery, "_record", crash)  # delivered, then died before recording it
        with pytest.raises(Crash):
            deliver(run.run_id, now)
    # The embedded host commits deliveries with their records: the crash undid the message too,
    # and left the run as claimed, free for the clock to hand out again once its retry time comes.
    assert len(inbox()) == 0
    assert (refreshed(run).status, run.attempt) == (RunStatus.CLAIMED, 1)
    with time_machine.travel(now + s(1), tick=False):
        assert recover_runs(now=now + s(1)) == []
    later = run.retry_at
    with time_machine.travel(later, tick=False):
        assert recover_runs(now=later) == [run.run_id]
    assert deliver(run.run_id, later) is True

    refreshed(run)
    assert (run.status, run.attempt) == (RunStatus.DELIVERED, 2)
    (message,) = inbox()
    assert message.session_id == run.target_session_id
    # `new`: one session for the occurrence, not one per attempt.
    assert SessionHeader.objects.count() == sessions_before + (target == "new")
    assert refreshed(loop).last_result == "delivered"


def test_run_whose_driver_keeps_dying_is_given_up_and_frees_its_loop(create, make_session, monkeypatch):
    """A poison occurrence (its driver dies every time) must not hold the loop in `running` forever."""
    make_session("ses_target")
    loop = create(session_id="ses_target")
    run = claim_one(loop)
    now = T0 + s(10)

    def crash(*args, **kwargs):
        raise Crash

    with monkeypatch.context() as patch:
        patch.setattr(LocalHost, "deliver_many", crash)
        for _ in range(MAX_ATTEMPTS):
            with pytest.raises(Crash):
                deliver(run.run_id, now)
            now += lease()
            with time_machine.travel(now, tick=False):
                assert recover_runs(now=now) == [run.run_id]

    assert deliver(run.run_id, now) is True

    refreshed(run)
    assert (run.status, run.retry_at) == (RunStatus.FAILED, None)
    assert "gave up" in run.error
    assert not inbox()
    refreshed(loop)
    assert (loop.state, loop.last_result) == (LoopState.SCHEDULED, "failed")
    assert loop.next_at == now + s(30)  # on its schedule again, after the failure backoff
    assert len(claim(loop.next_at)) == 1


def test_new_session_made_just_before_a_crash_is_reused(create, monkeypatch):
    """The host made the session but the driver died before remembering it: the host's
    per-occurrence idempotency gives the same session back."""
    loop = create(session_id="new")
    run = claim_one(loop)
    now = T0 + s(10)
    real_create = LocalHost.create_session

    def create_then_crash(self, **kwargs):
        real_create(self, **kwargs)
        raise Crash

    with monkeypatch.context() as patch:
        patch.setattr(LocalHost, "create_session", create_then_crash)
        with pytest.raises(Crash):
            deliver(run.run_id, now)
    assert refreshed(run).target_session_id == ""

    assert deliver(run.run_id, now + lease()) is True

    made = SessionHeader.objects.exclude(session_id="ses_caller")
    assert made.count() == 1
    assert refreshed(run).target_session_id == made.get().session_id
    assert len(inbox(run.target_session_id)) == 1


# --- transient failures: backoff within the occurrence, then give up ----------------------------


@dataclass
class FlakyHost:
    """The Host protocol over the embedded host, whose deliver() fails `failures` times.

    It stands for a remote host (its failures are real side effects), so it is not transactional.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(delivery_batch=1, transactional=False)
    failures: int
    transient: bool = True
    inner: LocalHost = field(default_factory=LocalHost)
    calls: int = 0

    def list_sessions(self, *, limit):
        return self.inner.list_sessions(limit=limit)

    def get_session(self, session_id):
        return self.inner.get_session(session_id)

    def global_session(self):
        return self.inner.global_session()

    def get_preset(self, name):
        return self.inner.get_preset(name)

    def resume_session(self, session_id):
        return self.inner.resume_session(session_id)

    def create_session(self, *, preset, model, first_prompt, source, **placement):
        return self.inner.create_session(
            preset=preset, model=model, first_prompt=first_prompt, source=source, **placement
        )

    def deliver(self, session_id, *, text, source, occurrence_key):
        self.calls += 1
        if self.calls <= self.failures:
            raise HostError(f"host unreachable (call {self.calls})", transient=self.transient)
        return self.inner.deliver(session_id, text=text, source=source, occurrence_key=occurrence_key)

    def get_sessions(self, session_ids):
        return self.inner.get_sessions(session_ids)

    def deliver_many(self, messages):
        return deliver_each(self, messages)


@pytest.fixture
def flaky(monkeypatch):
    def install(failures: int, *, transient: bool = True) -> FlakyHost:
        host = FlakyHost(failures, transient)
        monkeypatch.setattr(delivery, "get_host", lambda: host)
        return host

    return install


def test_backoff_doubles_from_one_second():
    assert [backoff(attempt) for attempt in range(1, 6)] == [s(1), s(2), s(4), s(8), s(16)]
    assert backoff(30) == s(16)  # then 16 s, for a host that gives no answer (until it does)


def test_transient_failures_retry_with_backoff_then_give_up(create, make_session, flaky):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    host = flaky(failures=10**6)
    run = claim_one(loop)
    now = T0 + s(10)

    for attempt in range(1, MAX_ATTEMPTS):
        assert deliver(run.run_id, now) is True
        refreshed(run)
        assert (run.status, run.attempt) == (RunStatus.CLAIMED, attempt)
        assert run.retry_at == now + s(2 ** (attempt - 1))  # 1 s, 2 s, 4 s, …
        assert run.error == f"host unreachable (call {attempt})"
        assert run.target_session_id == "ses_target" and run.lease_until is None
        assert refreshed(loop).state == LoopState.RUNNING  # still inside this occurrence
        with time_machine.travel(run.retry_at - timedelta(milliseconds=1), tick=False):
            assert recover_runs(now=run.retry_at - timedelta(milliseconds=1)) == []
        now = run.retry_at
        with time_machine.travel(now, tick=False):
            assert recover_runs(now=now) == [run.run_id]

    assert deliver(run.run_id, now) is True

    refreshed(run)
    assert (run.status, run.attempt, run.retry_at) == (RunStatus.FAILED, MAX_ATTEMPTS, None)
    assert "gave up" in run.error and "host unreachable" in run.error
    assert run.finished_at == now
    assert host.calls == MAX_ATTEMPTS
    refreshed(loop)
    assert (loop.state, loop.last_result) == (LoopState.SCHEDULED, "failed")
    assert "gave up" in loop.last_error
    assert not inbox()


def test_transient_failure_then_success_delivers_once(create, make_session, flaky):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    flaky(failures=2)
    run = claim_one(loop)

    now = T0 + s(10)
    assert deliver(run.run_id, now) is True
    for _ in range(2):  # once its backoff ends, the clock hands it out again: one more attempt
        now = refreshed(run).retry_at
        with time_machine.travel(now, tick=False):
            assert recover_runs(now=now) == [run.run_id]
        assert deliver(run.run_id, now) is True

    refreshed(run)
    assert (run.status, run.attempt, run.error) == (RunStatus.DELIVERED, 3, "")
    assert run.started_at == T0 + s(10) and run.finished_at == T0 + s(13)
    assert len(inbox("ses_target")) == 1
    assert refreshed(loop).last_result == "delivered" and loop.last_error == ""


def test_transient_failure_of_a_new_loop_reuses_its_session_on_retry(create, flaky):
    loop = create(session_id="new")
    flaky(failures=1)
    run = claim_one(loop)

    deliver(run.run_id, T0 + s(10))
    made = refreshed(run).target_session_id
    assert made
    deliver(run.run_id, T0 + s(11))

    assert refreshed(run).status == RunStatus.DELIVERED and run.target_session_id == made
    assert SessionHeader.objects.exclude(session_id="ses_caller").count() == 1


def test_new_session_gone_cold_between_attempts_is_resumed(create, flaky):
    loop = create(session_id="new")
    flaky(failures=1)
    run = claim_one(loop)
    deliver(run.run_id, T0 + s(10))
    made = refreshed(run).target_session_id
    session_upsert(session_id=made, changes={"status": "cold"})

    deliver(run.run_id, T0 + s(11))

    assert refreshed(run).status == RunStatus.DELIVERED
    header = SessionHeader.objects.get(session_id=made)
    assert (header.status, header.preset, header.model) == ("idle", "coder", "m1")


def test_permanent_host_error_fails_at_once(create, make_session, flaky):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    host = flaky(failures=1, transient=False)
    run = fire(loop)
    assert (run.status, run.attempt, run.retry_at) == (RunStatus.FAILED, 1, None)
    assert run.error == "host unreachable (call 1)"
    assert host.calls == 1
    assert refreshed(loop).state == LoopState.SCHEDULED and loop.last_error == run.error


def test_unexpected_error_is_retried_not_lost(create, make_session, monkeypatch):
    make_session("ses_target")
    loop = create(session_id="ses_target")

    def broken(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(LocalHost, "deliver_many", broken)
    run = fire(loop)
    assert (run.status, run.retry_at) == (RunStatus.CLAIMED, T0 + s(11))
    assert "boom" in run.error


# --- after loops: complete on success, stay visible as failed -----------------------------------


def test_after_loop_completes_and_leaves_the_active_list(create, make_session, api):
    make_session("ses_target")
    loop = create(after(30), session_id="ses_target")
    assert loop.loop_id in active_loop_ids(api)

    run = fire(loop, T0 + s(30))

    assert run.status == RunStatus.DELIVERED
    refreshed(loop)
    assert (loop.state, loop.next_at, loop.last_result) == (LoopState.COMPLETED, None, "delivered")
    assert loop.loop_id not in active_loop_ids(api)
    response = api.get(f"/api/loops/{loop.loop_id}/runs")
    assert [view["run_id"] for view in response.json()["runs"]] == [run.run_id]  # history kept
    with time_machine.travel(T0 + s(3600), tick=False):
        assert claim_due(now=T0 + s(3600)) == []


def test_after_loop_permanent_failure_is_failed_and_still_listed(create, make_session, api):
    make_session("ses_target")
    loop = create(after(30), session_id="ses_target")
    SessionHeader.objects.filter(session_id="ses_target").delete()

    run = fire(loop, T0 + s(30))

    assert run.status == RunStatus.FAILED
    refreshed(loop)
    assert (loop.state, loop.last_result, loop.last_error) == (LoopState.FAILED, "failed", run.error)
    assert loop.loop_id in active_loop_ids(api)
    response = api.tool("loop_list", {"session_id": "global"})
    (view,) = [v for v in response.json()["loops"] if v["loop_id"] == loop.loop_id]
    assert (view["state"], view["last_result"], view["last_error"]) == ("failed", "failed", run.error)


def test_after_loop_stays_running_while_it_retries(create, make_session, flaky):
    make_session("ses_target")
    loop = create(after(30), session_id="ses_target")
    flaky(failures=1)
    run = fire(loop, T0 + s(30))
    assert run.status == RunStatus.CLAIMED
    assert refreshed(loop).state == LoopState.RUNNING
    assert deliver(run.run_id, T0 + s(31)) is True
    assert refreshed(loop).state == LoopState.COMPLETED


def test_every_loop_is_claimable_again_after_its_run_finishes(create, make_session):
    make_session("ses_target")
    loop = create(session_id="ses_target")
    fire(loop, T0 + s(10))
    assert refreshed(loop).state == LoopState.SCHEDULED
    assert claim(T0 + s(15)) == []
    assert len(claim(T0 + s(20))) == 1


# --- the clock a delivery uses -------------------------------------------------------------------


def test_deliver_run_uses_the_now_it_is_given_throughout(create, make_session, flaky):
    """STYLE §7: one `now` per operation, passed down; not a second clock for the outcome."""
    make_session("ses_target")
    loop = create(session_id="ses_target")
    flaky(failures=1)
    run = claim_one(loop)
    given = T0 + s(10)

    with time_machine.travel(T0 + s(500), tick=False):  # the process clock disagrees
        assert deliver_run(run.run_id, now=given) is True
        refreshed(run)
        assert (run.started_at, run.retry_at) == (given, given + s(1))
        assert deliver_run(run.run_id, now=given + s(1)) is True

    refreshed(run)
    assert (run.status, run.finished_at) == (RunStatus.DELIVERED, given + s(1))
    assert refreshed(loop).last_run_at == given + s(1)


# --- the django-q2 task -----------------------------------------------------------------------------


def test_delivery_task_drives_every_run_of_its_batch(create, make_session):
    make_session("ses_target")
    loops = [create(session_id="ses_target") for _ in range(3)]
    run_ids = claim(T0 + s(10))
    assert len(run_ids) == len(loops)
    with time_machine.travel(T0 + s(10), tick=False):
        assert tasks.deliver_runs(run_ids) == 3
        assert tasks.deliver_runs(run_ids) == 0  # a duplicated task finds nothing to do
    assert len(inbox("ses_target")) == 3


def test_one_run_raising_does_not_strand_the_rest_of_its_batch(create, make_session, monkeypatch):
    make_session("ses_target")
    make_session("ses_broken")
    create(session_id="ses_broken")
    for _ in range(2):
        create(session_id="ses_target")
    run_ids = claim(T0 + s(10))
    broken = LoopRun.objects.get(target="ses_broken").run_id
    real_deliver_many = LocalHost.deliver_many

    def broken_for_one_session(self, messages):
        healthy = iter(real_deliver_many(self, [m for m in messages if m.session_id != "ses_broken"]))
        return [
            HostError("the session's inbox is locked", transient=True)
            if m.session_id == "ses_broken"
            else next(healthy)
            for m in messages
        ]

    monkeypatch.setattr(LocalHost, "deliver_many", broken_for_one_session)
    with time_machine.travel(T0 + s(10), tick=False):
        assert tasks.deliver_runs(run_ids) == 3

    statuses = dict(LoopRun.objects.values_list("run_id", "status"))
    assert sorted(statuses.values()) == [RunStatus.CLAIMED, RunStatus.DELIVERED, RunStatus.DELIVERED]
    # The broken one is retried after its backoff, like any transient failure.
    assert statuses[broken] == RunStatus.CLAIMED
    assert recover_runs(now=T0 + s(10) + backoff(1)) == [broken]


def test_a_batch_whose_delivery_raises_is_retried_whole_and_loses_nothing(create, make_session, monkeypatch):
    make_session("ses_target")
    for _ in range(3):
        create(session_id="ses_target")
    run_ids = claim(T0 + s(10))

    def broken(self, messages):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(LocalHost, "deliver_many", broken)
    with time_machine.travel(T0 + s(10), tick=False):
        assert tasks.deliver_runs(run_ids) == 3

    runs = LoopRun.objects.filter(run_id__in=run_ids)
    assert {(run.status, run.retry_at) for run in runs} == {(RunStatus.CLAIMED, T0 + s(11))}
    assert len(inbox()) == 0


# --- a loop deleted while its delivery is being recorded (PostgreSQL row locks) -----------------


def wait_until_blocked_on_a_lock() -> None:
    """Poll until some PostgreSQL backend waits for a row lock (another thread's statement)."""
    with connection.cursor() as cursor:
        for _ in range(200):
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cursor.fetchone()[0]:
                return
            threading.Event().wait(0.05)
    raise AssertionError("no statement waited for a lock")


@pytest.mark.django_db(transaction=True)
def test_loop_deleted_while_its_run_is_being_delivered_waits_for_the_record(create, make_session, monkeypatch):
    """The embedded host's delivery holds its runs' and loops' rows from taking them to recording
    them (the row locks are the lease): a delete meanwhile waits, and history says the
    occurrence was delivered, as it was."""
    if connection.vendor != "postgresql":
        pytest.skip("needs concurrent writers and row locks (PostgreSQL); SQLite serializes writers")
    make_session("ses_target")
    loop = create(session_id="ses_target")
    run = claim_one(loop)
    errors = []

    def delete():
        try:
            with transaction.atomic():
                Loop.objects.filter(loop_id=loop.loop_id).delete()
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    deleter = threading.Thread(target=delete)
    real_deliver_many = LocalHost.deliver_many

    def deliver_while_deleting(self, *args, **kwargs):
        deleter.start()
        wait_until_blocked_on_a_lock()
        return real_deliver_many(self, *args, **kwargs)

    monkeypatch.setattr(LocalHost, "deliver_many", deliver_while_deleting)
    try:
        assert deliver(run.run_id, T0 + s(10)) is True
    finally:
        deleter.join(10)
    assert errors == []

    refreshed(run)
    assert run.status == RunStatus.DELIVERED  # it was delivered: history must not say otherwise
    assert len(inbox("ses_target")) == 1
    assert not Loop.objects.filter(loop_id=loop.loop_id).exists()


@pytest.mark.django_db(transaction=True)
def test_a_leased_run_locked_by_another_transaction_is_waited_for_not_dropped(create, make_session, monkeypatch):
    """A remote host's driver records rows it leased, outside any transaction: one locked
    elsewhere meanwhile (e.g. an operator's edit in the admin) is still ours, so the record waits
    for it rather than skip it (defect 5: with SKIP LOCKED the outcome was silently
    thrown away and the run re-driven). The embedded host plays a remote one here."""
    if connection.vendor != "postgresql":
        pytest.skip("needs concurrent writers and row locks (PostgreSQL); SQLite serializes writers")
    monkeypatch.setattr(LocalHost, "capabilities", replace(LocalHost.capabilities, transactional=False))
    make_session("ses_target")
    loop = create(session_id="ses_target")
    run = claim_one(loop)
    locked, release, errors = threading.Event(), threading.Event(), []

    def lock_and_hold():
        try:
            with transaction.atomic():
                list(LoopRun.objects.select_for_update().filter(run_id=run.run_id))
                locked.set()
                release.wait(10)
        except Exception as exc:
            errors.append(exc)
        finally:
            locked.set()
            connection.close()

    holder = threading.Thread(target=lock_and_hold)
    real_deliver_many = LocalHost.deliver_many

    def deliver_then_lock_elsewhere(self, *args, **kwargs):
        result = real_deliver_many(self, *args, **kwargs)
        holder.start()  # after the lease was taken, before the record
        assert locked.wait(10)
        threading.Timer(0.3, release.set).start()
        return result

    monkeypatch.setattr(LocalHost, "deliver_many", deliver_then_lock_elsewhere)
    try:
        assert deliver(run.run_id, T0 + s(10)) is True
    finally:
        release.set()
        holder.join(10)
    assert errors == []
    refreshed(run)
    assert run.status == RunStatus.DELIVERED and run.lease_until is None
    assert len(inbox("ses_target")) == 1
