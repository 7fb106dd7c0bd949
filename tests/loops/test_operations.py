"""Operating loops (contract §9) through the operator REST API (scope manage): pause and
resume, run now, edit with revisions, retry, and the audit trail. The scheduler's side is driven
with claim_due and deliver_runs under a frozen clock."""

from __future__ import annotations

from datetime import datetime

import time_machine

from core.timeutil import to_ms
from loops.models import Loop, LoopRun, LoopState, RunStatus
from loops.runs import OPEN_STATUSES
from scheduler.claims import claim_due
from scheduler.delivery import deliver_runs
from sessions_app.models import InboxMessage
from tests.conftest import T0, after, error_of, every, s


def claim(at: datetime) -> list[str]:
    with time_machine.travel(at, tick=False):
        return claim_due(now=at)


def deliver(run_ids: list[str], at: datetime) -> None:
    with time_machine.travel(at, tick=False):
        deliver_runs(run_ids, now=at)


def events(ops, loop_id: str) -> list[dict]:
    response = ops("GET", loop_id, "events", at=T0 + s(3600))
    assert response.status_code == 200, response.content
    return response.json()["events"]


def test_detail_is_the_loop_view_plus_the_operators_fields(make, ops):
    loop = make(every(60))
    detail = ops("GET", loop["loop_id"]).json()
    bounds = {"ends_at": None, "max_runs": None, "runs_delivered": 0}  # contract §16: null when unset
    assert detail == {**loop, "revision": 1, "consecutive_failures": 0, "schedule_text": "every minute", **bounds}
    assert error_of(ops("GET", "loop_gone"))["code"] == "unknown_loop"


def test_pause_stops_claims_shows_paused_to_agents_and_is_idempotent(make, ops, api):
    loop_id = make(every(60))["loop_id"]

    paused = ops("POST", loop_id, "pause", at=T0 + s(10)).json()
    again = ops("POST", loop_id, "pause", at=T0 + s(20)).json()

    assert paused["state"] == "paused" and "next_at" not in paused
    assert paused["paused_at"] == to_ms(T0 + s(10)) and paused["pause_reason"] == "operator"
    assert again == paused  # idempotent: the first pause stands
    assert claim(T0 + s(600)) == []
    [view] = api.tool("loop_list", {"session_id": "ses_target"}).json()["loops"]
    assert view["state"] == "paused" and "next_at" not in view
    assert [event["kind"] for event in events(ops, loop_id)] == ["paused", "created"]


def test_resume_schedules_strictly_after_now_and_counts_nothing_missed(make, ops):
    loop_id = make(every(60))["loop_id"]
    ops("POST", loop_id, "pause", at=T0 + s(10))

    resumed = ops("POST", loop_id, "resume", at=T0 + s(250)).json()

    assert resumed["state"] == "scheduled" and resumed["next_at"] == to_ms(T0 + s(300))  # on the grid, after now
    assert "paused_at" not in resumed and "pause_reason" not in resumed
    [run_id] = claim(T0 + s(300))
    assert LoopRun.objects.get(run_id=run_id).missed == 0  # nothing that fell due while paused
    assert ops("POST", loop_id, "resume", at=T0 + s(301)).json()["state"] == "running"  # idempotent: no-op


def test_a_one_shot_whose_time_passed_while_paused_fires_once_on_resume(make, ops):
    loop_id = make(after(30))["loop_id"]
    ops("POST", loop_id, "pause", at=T0 + s(10))

    resumed = ops("POST", loop_id, "resume", at=T0 + s(100)).json()

    assert resumed["next_at"] == to_ms(T0 + s(100))
    assert len(claim(T0 + s(100))) == 1 and claim(T0 + s(200)) == []


def test_run_now_queues_one_manual_run_without_moving_next_at(make, ops):
    loop = make(every(600))
    loop_id = loop["loop_id"]

    response = ops("POST", loop_id, "run", at=T0 + s(5))
    twice = ops("POST", loop_id, "run", at=T0 + s(6))

    assert response.status_code == 202, response.content
    run = response.json()
    assert run["manual"] is True and run["revision"] == 1 and run["status"] == "claimed"
    assert run["occurrence_key"] == f"{loop_id}@manual:{run['run_id']}"
    assert twice.status_code == 409 and error_of(twice)["code"] == "run_in_flight"
    assert ops("GET", loop_id).json()["next_at"] == loop["next_at"]
    deliver([run["run_id"]], T0 + s(7))
    assert LoopRun.objects.get(run_id=run["run_id"]).status == RunStatus.DELIVERED
    assert InboxMessage.objects.filter(occurrence_key=run["occurrence_key"]).count() == 1
    after_run = ops("GET", loop_id).json()
    assert after_run["state"] == "scheduled" and after_run["next_at"] == loop["next_at"]
    assert ops("POST", loop_id, "run", at=T0 + s(8)).status_code == 202  # free again once it finished


def test_run_now_works_on_a_paused_loop_and_leaves_it_paused(make, ops):
    loop_id = make(every(600))["loop_id"]
    ops("POST", loop_id, "pause", at=T0 + s(1))

    run = ops("POST", loop_id, "run", at=T0 + s(2)).json()
    deliver([run["run_id"]], T0 + s(3))

    assert LoopRun.objects.get(run_id=run["run_id"]).status == RunStatus.DELIVERED
    assert ops("GET", loop_id).json()["state"] == "paused"


def test_run_now_of_a_one_shot_does_not_complete_it(make, ops):
    loop = make(after(600))
    run = ops("POST", loop["loop_id"], "run", at=T0 + s(2)).json()
    deliver([run["run_id"]], T0 + s(3))

    detail = ops("GET", loop["loop_id"]).json()
    assert detail["state"] == "scheduled" and detail["next_at"] == loop["next_at"]


def test_a_scheduled_run_of_a_loop_paused_before_it_started_is_skipped(make, ops):
    loop_id = make(every(60))["loop_id"]
    [run_id] = claim(T0 + s(60))
    ops("POST", loop_id, "pause", at=T0 + s(61))

    deliver([run_id], T0 + s(62))

    run = LoopRun.objects.get(run_id=run_id)
    assert run.status == RunStatus.SKIPPED and "paused before this occurrence started" in run.error
    assert not InboxMessage.objects.filter(occurrence_key=run.occurrence_key).exists()
    assert Loop.objects.get(loop_id=loop_id).state == LoopState.PAUSED


def test_edit_of_prompt_and_name_keeps_next_at_and_counts_a_revision(make, ops):
    loop = make(every(60))
    edited = ops(
        "PATCH", loop["loop_id"], body={"prompt": "  Check the release  ", "name": "Release check"}, at=T0 + s(30)
    ).json()

    assert edited["prompt"] == "Check the release" and edited["name"] == "Release check"
    assert edited["revision"] == 2 and edited["next_at"] == loop["next_at"]
    [event, _created] = events(ops, loop["loop_id"])
    assert event["kind"] == "edited" and event["revision"] == 2
    assert event["changes"] == {"prompt": ["Check the deploy", "Check the release"], "name": [None, "Release check"]}
    assert event["actor"] == {"kind": "token", "id": "ops"}
    assert "name" not in ops("PATCH", loop["loop_id"], body={"name": None}, at=T0 + s(31)).json()


def test_a_new_schedule_or_target_recomputes_next_at_from_the_edit(make, ops, make_session):
    loop_id = make(every(60))["loop_id"]
    edited = ops("PATCH", loop_id, body={"schedule": {"kind": "every", "every_seconds": 600}}, at=T0 + s(30)).json()
    assert edited["next_at"] == to_ms(T0 + s(630)) and edited["schedule"] == {"kind": "every", "every_seconds": 600}
    [run_id] = claim(T0 + s(630))
    assert LoopRun.objects.get(run_id=run_id).revision == 2

    make_session("ses_other", status="idle")
    moved = ops("PATCH", loop_id, body={"session_id": "ses_other"}, at=T0 + s(640)).json()
    assert moved["session_id"] == "ses_other" and moved["revision"] == 3


def test_an_edit_is_validated_like_loop_create(make, ops):
    loop_id = make(every(60))["loop_id"]
    cases = [
        ({"schedule": {"kind": "cron", "expr": "61 * * * *"}}, "invalid_cron", "schedule.expr"),
        ({"schedule": {"kind": "cron", "expr": "0 0 30 2 *"}}, "no_future_occurrence", "schedule.expr"),
        ({"session_id": "ses_gone"}, "unknown_session", "session_id"),
        ({"preset": "coder"}, "invalid_input", "preset"),  # a preset goes with "new" only
        ({"prompt": "   "}, "invalid_input", "prompt"),
        ({"bogus": 1}, "invalid_input", "bogus"),
        ({"session_id": "global"}, "invalid_input", "session_id"),
    ]
    for body, code, field in cases:
        error = error_of(ops("PATCH", loop_id, body=body))
        assert (error["code"], error.get("field")) == (code, field), (body, error)
    assert ops("GET", loop_id).json()["revision"] == 1  # nothing was half-written


def test_a_run_in_flight_finishes_with_its_old_revision(make, ops):
    loop_id = make(every(60))["loop_id"]
    [run_id] = claim(T0 + s(60))
    ops("PATCH", loop_id, body={"prompt": "New words"}, at=T0 + s(61))

    deliver([run_id], T0 + s(62))

    run = LoopRun.objects.get(run_id=run_id)
    assert run.revision == 1 and run.prompt == "Check the deploy"
    message = InboxMessage.objects.get(occurrence_key=run.occurrence_key)
    assert "Check the deploy" in message.text


def test_retry_rearms_a_failed_one_shot_and_refuses_others(make, ops):
    loop_id = make(after(30))["loop_id"]
    Loop.objects.filter(loop_id=loop_id).update(state=LoopState.FAILED, next_at=None, last_result="failed")

    retried = ops("POST", loop_id, "retry", at=T0 + s(100)).json()

    assert retried["state"] == "scheduled" and retried["next_at"] == to_ms(T0 + s(100))
    assert len(claim(T0 + s(100))) == 1
    refused = ops("POST", loop_id, "retry", at=T0 + s(101))
    assert refused.status_code == 409 and error_of(refused)["code"] == "not_failed"


def test_retry_is_refused_while_a_run_now_of_the_failed_loop_is_open(make, ops, settings):
    """One run in flight per loop: a retry beside an open run now would let a clock claim a second."""
    settings.DSHLOOP_MISFIRE_GRACE_SECONDS = 10
    loop_id = make(after(30))["loop_id"]
    assert claim(T0 + s(300)) == []  # claimed beyond the grace: recorded skipped, the one-shot failed
    assert Loop.objects.get(loop_id=loop_id).state == LoopState.FAILED
    manual = ops("POST", loop_id, "run", at=T0 + s(310))
    assert manual.status_code == 202, manual.content

    refused = ops("POST", loop_id, "retry", at=T0 + s(311))

    assert refused.status_code == 409 and error_of(refused)["code"] == "run_in_flight"
    assert ops("GET", loop_id).json()["state"] == "failed"  # not `scheduled` with a run open
    assert claim(T0 + s(312)) == []
    assert LoopRun.objects.filter(loop_id=loop_id, status__in=OPEN_STATUSES).count() == 1
    assert "retried" not in [event["kind"] for event in events(ops, loop_id)]
    # Once the manual run has finished, the loop (still failed) is retried: one run, now.
    deliver([manual.json()["run_id"]], T0 + s(313))
    retried = ops("POST", loop_id, "retry", at=T0 + s(314)).json()
    assert (retried["state"], retried["next_at"]) == ("scheduled", to_ms(T0 + s(314)))
    assert len(claim(T0 + s(314))) == 1


def test_events_record_every_change_with_its_actor_and_outlive_the_loop(make, ops, api):
    loop_id = make(every(60))["loop_id"]
    ops("POST", loop_id, "pause", at=T0 + s(1))
    ops("POST", loop_id, "resume", at=T0 + s(2))
    ops("POST", loop_id, "run", at=T0 + s(3))
    with time_machine.travel(T0 + s(4), tick=False):
        assert api.tool("loop_delete", {"loop_id": loop_id}).status_code == 200

    trail = events(ops, loop_id)

    assert [event["kind"] for event in trail] == ["deleted", "run_now", "resumed", "paused", "created"]
    assert trail[0]["actor"] == {"kind": "session", "id": "ses_caller"}
    assert trail[1]["actor"] == {"kind": "token", "id": "ops"}
    assert [event["at"] for event in trail] == sorted((event["at"] for event in trail), reverse=True)
    assert error_of(ops("GET", "loop_never", "events"))["code"] == "unknown_loop"


def test_the_operator_api_needs_the_manage_scope(make, api):
    loop_id = make(every(60))["loop_id"]
    for method, path in [("get", ""), ("post", "/pause"), ("post", "/run"), ("get", "/events")]:
        response = getattr(api.client, method)(f"/api/loops/{loop_id}{path}", headers=api.headers())
        assert response.status_code == 403 and "manage" in error_of(response)["message"]
