"""The `dsh` host reads a delivered run's turn outcome from DSH's own session log.

Against a real DSH: a turn that fails for want of a key (MISSING_CREDENTIAL), and, with a small
OpenAI-compatible stub as DSH's model (DSH-HOST.md Appendix A), turns that complete, fail with a
model error, are cancelled (`session.cancel` -> `aborted`) or interrupted (SIGTERM -> `interrupted`),
a message steered into a running turn and one queued behind it. scheduler.outcome_watch.poll_outcomes
records the answers on the runs. The mapping of every DSH reason kind is also checked on recorded
logs, without a DSH.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from core.timeutil import to_ms
from loops.models import LoopRun, RunStatus
from scheduler.claims import claim_due
from scheduler.delivery import deliver_run
from scheduler.message import loop_message
from scheduler.outcome_watch import poll_outcomes
from scheduler.outcomes import record_outcome
from sessions_app.hosts.base import Capabilities, RunRef, TurnEnd
from sessions_app.hosts.dsh import DshHost
from sessions_app.hosts.dsh_turns import map_turn_end, turn_end_of
from tests.conftest import after, captured_log, create_loop
from tests.dsh import DshHost as RealDsh
from tests.processes import wait_for

live = [pytest.mark.process, pytest.mark.dsh]
# DSH's model is tests/stub_model.py (the `modelled` fixture): SLOW<n> streams for n seconds,
# FAILNOW is refused (400), anything else is answered `ack: <the message's first 40 characters>`.


def answer_to(key: str, prompt: str) -> str:
    """The stub's final text for what deliver() sent."""
    return f"ack: {loop_message(loop_id=key.split('@')[0], prompt=prompt)[:40]}"


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "work"
    path.mkdir()  # a real directory: dshloop places its sessions in its DSH workspace
    return path


def adapter_for(real: RealDsh, workspace) -> DshHost:
    return DshHost(real.url, cwd=str(workspace))


def now_ms() -> int:
    return int(time.time() * 1000)


def source(key: str) -> dict:
    return {"kind": "loop", "loop_id": key.split("@")[0], "run_id": f"run_{key}", "occurrence_key": key}


def deliver(adapter: DshHost, session_id: str, key: str, prompt: str):
    text = loop_message(loop_id=key.split("@")[0], prompt=prompt)
    return adapter.deliver(session_id, text=text, source=source(key), occurrence_key=key)


def ref(session_id: str, key: str, since: int) -> RunRef:
    return RunRef(run_id=f"run_{key}", session_id=session_id, occurrence_key=key, delivered_at_ms=since)


def answered(adapter: DshHost, runs: list[RunRef], count: int, timeout: float = 30) -> dict[str, TurnEnd]:
    return wait_for(
        lambda: (found := adapter.turn_outcomes(runs)) and len(found) >= count and found,
        timeout=timeout,
        interval=0.3,
        message=f"{count} turn outcome(s)",
    )


def turn_running(real: RealDsh, session_id: str) -> bool:
    return real.sessions()[session_id]["running"]


# -- the adapter against a real DSH -----------------------------------------------------------------


@pytest.mark.process
@pytest.mark.dsh
def test_a_turn_without_a_key_is_failed_with_dsh_error_code(dsh, workspace):
    adapter = adapter_for(dsh, workspace)
    dsh.call("session.create", {"sessionId": "out-fail", "cwd": str(workspace)})
    since = now_ms()
    deliver(adapter, "out-fail", "loop_f@1", "Check the deployment status")
    ours = ref("out-fail", "loop_f@1", since)
    never_sent = ref("out-fail", "loop_f@2", since)  # an occurrence key not in the log
    gone = ref("out-nobody", "loop_f@3", since)  # a session DSH does not have

    outcomes = answered(adapter, [ours, never_sent, gone], 1)

    assert set(outcomes) == {ours.run_id}  # the others are left out, not guessed
    ended = outcomes[ours.run_id]
    assert ended.status == "failed" and ended.summary == ""
    assert ended.error.startswith("DSH ended the turn with an error (MISSING_CREDENTIAL): ")
    assert "no API key" in ended.error


@pytest.mark.process
@pytest.mark.dsh
def test_a_completed_turn_succeeds_with_its_final_assistant_text(modelled, workspace):
    adapter = adapter_for(modelled, workspace)
    modelled.call("session.create", {"sessionId": "out-ok", "cwd": str(workspace)})
    since = now_ms()
    deliver(adapter, "out-ok", "loop_ok@1", "Check the deployment status")

    outcomes = answered(adapter, [ref("out-ok", "loop_ok@1", since)], 1)

    assert outcomes == {
        "run_loop_ok@1": TurnEnd("succeeded", summary=answer_to("loop_ok@1", "Check the deployment status"))
    }


@pytest.mark.process
@pytest.mark.dsh
def test_a_steered_message_ends_with_the_running_turn_and_a_queued_one_with_its_own(modelled, workspace):
    adapter = adapter_for(modelled, workspace)
    modelled.call("session.create", {"sessionId": "out-busy", "cwd": str(workspace)})
    since = now_ms()
    # A turn that runs for 5 s, and behind it, queued for the next turn, a prompt the model refuses.
    busy = ref("out-busy", "loop_busy@1", since)
    queued = ref("out-busy", "loop_queued@1", since)
    modelled.call(
        "session.prompt",
        {"sessionId": "out-busy", "mode": "queue", "content": [{"type": "text", "text": "SLOW5"}]},
        rpc_id=busy.occurrence_key,
    )
    wait_for(lambda: turn_running(modelled, "out-busy"), timeout=10, message="the SLOW turn to run")
    modelled.call(
        "session.prompt",
        {"sessionId": "out-busy", "mode": "queue", "content": [{"type": "text", "text": "FAILNOW"}]},
        rpc_id=queued.occurrence_key,
    )
    assert adapter.turn_outcomes([busy, queued]) == {}  # one turn still running, the other not begun

    steered = deliver(adapter, "out-busy", "loop_steered@1", "Check the deployment status")
    assert steered.delivery == "next_step"  # joined the running turn at its next step
    joined = ref("out-busy", "loop_steered@1", since)

    outcomes = answered(adapter, [busy, joined, queued], 3)

    # The steered message made the turn's last answer.
    assert outcomes[busy.run_id] == TurnEnd(
        "succeeded", summary=answer_to("loop_steered@1", "Check the deployment status")
    )
    assert outcomes[joined.run_id] == outcomes[busy.run_id]  # the same turn, the same end
    assert outcomes[queued.run_id].status == "failed"
    assert "(INVALID_REQUEST): stub refuses" in outcomes[queued.run_id].error


@pytest.mark.process
@pytest.mark.dsh
def test_a_cancelled_turn_is_cancelled_and_a_running_one_has_no_outcome_yet(modelled, workspace):
    adapter = adapter_for(modelled, workspace)
    modelled.call("session.create", {"sessionId": "out-cancel", "cwd": str(workspace)})
    since = now_ms()
    deliver(adapter, "out-cancel", "loop_c@1", "SLOW30")  # the loop XML carries SLOW30: a long turn
    run = ref("out-cancel", "loop_c@1", since)
    assert turn_running(modelled, "out-cancel")
    assert adapter.turn_outcomes([run]) == {}  # our message is in the log, its turn has not ended

    modelled.call("session.cancel", {"sessionId": "out-cancel"})

    [ended] = answered(adapter, [run], 1).values()
    assert ended.status == "cancelled"
    assert ended.error == "DSH aborted the turn (a user cancelled it)."


@pytest.mark.process
@pytest.mark.dsh
def test_a_turn_dsh_stopped_in_is_cancelled_as_interrupted(modelled, workspace):
    adapter = adapter_for(modelled, workspace)
    modelled.call("session.create", {"sessionId": "out-stop", "cwd": str(workspace)})
    since = now_ms()
    deliver(adapter, "out-stop", "loop_s@1", "SLOW30")
    run = ref("out-stop", "loop_s@1", since)
    assert adapter.turn_outcomes([run]) == {}

    modelled.restart()  # SIGTERM mid-turn; the session is cold afterwards, its log read as it is

    assert adapter.turn_outcomes([run]) == {
        run.run_id: TurnEnd("cancelled", error="DSH stopped during the turn (interrupted): the turn did not finish.")
    }
    assert not modelled.attached("out-stop")  # reading the log did not resume the session


# -- poll_outcomes: the runs take the outcomes in ---------------------------------------------------


@pytest.fixture
def on_dsh(dsh, settings, workspace):
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL, settings.DSHLOOP_DSH_CWD = "dsh", dsh.url, str(workspace)
    dsh.call("session.create", {"sessionId": "out-poll", "cwd": str(workspace)})
    return dsh


def delivered_run(prompt: str = "Check the deployment status") -> LoopRun:
    """A loop on the DSH session, its occurrence claimed and delivered in this process."""
    loop = create_loop(after(1), prompt=prompt, target="out-poll")
    [run_id] = claim_due(now=timezone.now() + timedelta(seconds=2))
    assert deliver_run(run_id) is True
    run = LoopRun.objects.get(run_id=run_id)
    assert run.loop_id == loop.loop_id and run.status == RunStatus.DELIVERED and run.outcome == ""
    return run


def turn_ended(real: RealDsh, session_id: str, key: str) -> bool:
    events = real.history(session_id)
    [start] = [e["seq"] for e in events if e["type"] == "user/message" and e["data"]["source"].get("rpcId") == key]
    return any(e["type"] == "turn/end" and e["seq"] > start for e in events)


@pytest.mark.process
@pytest.mark.dsh
@pytest.mark.django_db(transaction=True)
def test_poll_records_the_failed_turn_on_the_run_once(on_dsh):
    run = delivered_run()
    wait_for(lambda: turn_ended(on_dsh, "out-poll", run.occurrence_key), timeout=20, message="the turn to end")

    assert poll_outcomes() == 1

    run.refresh_from_db()
    assert run.outcome == "failed" and run.outcome_at is not None
    assert "(MISSING_CREDENTIAL)" in run.error
    first = (run.outcome, run.error, run.summary, run.outcome_at)
    assert poll_outcomes() == 0  # the run has its outcome: not asked again
    assert poll_outcomes(now=timezone.now() + timedelta(hours=2)) == 0  # nor past the run timeout
    run.refresh_from_db()
    assert (run.outcome, run.error, run.summary, run.outcome_at) == first


@pytest.mark.process
@pytest.mark.dsh
@pytest.mark.django_db(transaction=True)
def test_poll_logs_a_dsh_it_cannot_reach_and_records_once_it_is_back(on_dsh, caplog):
    run = delivered_run()
    wait_for(lambda: turn_ended(on_dsh, "out-poll", run.occurrence_key), timeout=20, message="the turn to end")
    on_dsh.stop()

    with captured_log(caplog, "dshloop.delivery"):
        assert poll_outcomes() == 0
    assert "turn outcomes not read (1 runs waiting): DSH is unreachable" in caplog.text
    assert LoopRun.objects.get(run_id=run.run_id).outcome == ""

    on_dsh.start()
    assert poll_outcomes() == 1
    assert LoopRun.objects.get(run_id=run.run_id).outcome == "failed"


# -- poll_outcomes without a DSH --------------------------------------------------------------------


def bare_run(run_id: str, *, finished_ago: timedelta = timedelta(minutes=1), **fields) -> LoopRun:
    at = timezone.now() - finished_ago
    row = {
        "run_id": run_id,
        "loop_id": "loop_bare",
        "occurrence_key": f"loop_bare@{run_id}",
        "scheduled_at": at,
        "claimed_at": at,
        "started_at": at - timedelta(seconds=5),
        "finished_at": at,
        "status": RunStatus.DELIVERED,
        "target_session_id": "ses_bare",
    }
    return LoopRun.objects.create(**{**row, **fields})


class FakeHost:
    capabilities = Capabilities(delivery_batch=1, transactional=False, turn_outcomes=True)

    def __init__(self, answer):
        self.answer = answer
        self.asked: list[list[RunRef]] = []

    def turn_outcomes(self, runs: list[RunRef]) -> dict[str, TurnEnd]:
        self.asked.append(runs)
        return self.answer(runs)


@pytest.mark.django_db(transaction=True)
def test_poll_does_nothing_on_a_host_without_turn_outcomes(settings):
    settings.DSHLOOP_HOST = "local"
    bare_run("run_l1")
    assert poll_outcomes() == 0
    assert LoopRun.objects.get(run_id="run_l1").outcome == ""


@pytest.mark.django_db(transaction=True)
def test_poll_asks_for_recent_delivered_runs_and_a_refused_record_spares_the_rest(monkeypatch, caplog):
    bare_run("run_a")
    bare_run("run_b")
    bare_run("run_old", finished_ago=timedelta(hours=2))  # past the run timeout: asked before it is ended
    bare_run("run_done", outcome="succeeded")
    bare_run("run_nowhere", target_session_id="")
    bare_run("run_failed", status=RunStatus.FAILED)

    def answer(runs):
        # Another report wins the race for run_a; run_b's answer must still be recorded.
        if any(run.run_id == "run_a" for run in runs):
            record_outcome(run_id="run_a", status="succeeded")
        return {run.run_id: TurnEnd("failed", error="DSH ended the turn with an error (X): y") for run in runs}

    fake = FakeHost(answer)
    monkeypatch.setattr("scheduler.outcome_watch.get_host", lambda: fake)
    with captured_log(caplog, "dshloop.delivery"):
        assert poll_outcomes() == 2

    # The runs delivered within the run timeout, then the one past it (its turn ended: no cancel).
    [asked, overdue] = fake.asked
    assert sorted(r.run_id for r in asked) == ["run_a", "run_b"]
    assert [r.run_id for r in overdue] == ["run_old"]
    assert LoopRun.objects.get(run_id="run_old").outcome == "failed"
    b = LoopRun.objects.get(run_id="run_b")
    assert (b.outcome, b.error) == ("failed", "DSH ended the turn with an error (X): y")
    assert [r.delivered_at_ms for r in asked if r.run_id == "run_b"] == [to_ms(b.started_at)]
    assert LoopRun.objects.get(run_id="run_a").outcome == "succeeded"  # the first report stands
    assert "turn outcome of run run_a not recorded" in caplog.text


# -- the mapping, on recorded DSH logs --------------------------------------------------------------

KEY = "loop_abc123@1796079600000"


def user_message(seq: int, rpc_id: str, text: str = "<loop>…</loop>") -> dict:
    return {
        "type": "user/message",
        "seq": seq,
        "time": 1796079979847,
        "data": {
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "user", "rpcId": rpc_id},
            "role": "user",
            "id": f"id-{seq}",
        },
        "surfaceOp": "append",
    }


def assistant(seq: int, text: str, turn: int = 1) -> dict:
    message = {"role": "assistant", "content": [{"type": "text", "text": text}], "source": {"kind": "model"}}
    return {"type": "assistant/message", "seq": seq, "data": {"turn": turn, "step": 1, "message": message}}


def turn_end(seq: int, reason: dict, turn: int = 1) -> dict:
    return {"type": "turn/end", "seq": seq, "data": {"turn": turn, "reason": reason}}


def a_turn(reason: dict, *, text: str | None = None) -> list[dict]:
    events = [{"type": "turn/start", "seq": 4, "data": {"turn": 1}}, user_message(7, KEY)]
    if text is not None:
        events.append(assistant(18, text))
    return [*events, {"type": "step/end", "seq": 19, "data": {"turn": 1, "step": 1}}, turn_end(20, reason)]


def test_a_recorded_missing_credential_turn_is_failed():
    # DSH-HOST.md §6.5, verbatim but for elided events.
    events = [
        {"type": "agent/inbox/spliced", "seq": 3, "data": {"target": "next-turn", "start": 0, "inserted": []}},
        {"type": "turn/start", "seq": 4, "data": {"turn": 1}},
        {"type": "step/start", "seq": 6, "data": {"turn": 1, "step": 1}},
        user_message(7, KEY),
        {"type": "user/message", "seq": 8, "data": {"content": [], "source": {"kind": "plugin"}}},
        {"type": "step/end", "seq": 14, "data": {"turn": 1, "step": 1}},
        turn_end(
            15, {"kind": "error", "error": {"message": "llm-deepseek: no API key …", "code": "MISSING_CREDENTIAL"}}
        ),
    ]
    assert turn_end_of(events, KEY) == TurnEnd(
        "failed", error="DSH ended the turn with an error (MISSING_CREDENTIAL): llm-deepseek: no API key …"
    )


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ({"kind": "completed"}, TurnEnd("succeeded", summary="Deployed: all green.")),
        (
            {"kind": "aborted", "reason": {"kind": "user"}},
            TurnEnd("cancelled", summary="Deployed: all green.", error="DSH aborted the turn (a user cancelled it)."),
        ),
        (
            {"kind": "aborted", "reason": {"kind": "hook", "reason": "quota spent"}},
            TurnEnd("cancelled", "Deployed: all green.", "DSH aborted the turn (a hook cancelled it: quota spent)."),
        ),
        (
            {"kind": "aborted", "reason": {"kind": "parent"}},
            TurnEnd("cancelled", "Deployed: all green.", "DSH aborted the turn (its parent session cancelled it)."),
        ),
        (
            {"kind": "aborted", "reason": {"kind": "disposed"}},
            TurnEnd("cancelled", "Deployed: all green.", "DSH aborted the turn (its agent was disposed)."),
        ),
        (
            {"kind": "aborted", "reason": {"kind": "legacy"}},
            TurnEnd(
                "cancelled", "Deployed: all green.", "DSH aborted the turn (cancelled; the cause was not recorded)."
            ),
        ),
        (
            {"kind": "interrupted"},
            TurnEnd(
                "cancelled",
                "Deployed: all green.",
                "DSH stopped during the turn (interrupted): the turn did not finish.",
            ),
        ),
        (
            {"kind": "max-tokens"},
            TurnEnd(
                "failed",
                "Deployed: all green.",
                "DSH ended the turn with max-tokens: a model answer reached its output-token limit and was cut short.",
            ),
        ),
        (
            {"kind": "blocked"},
            TurnEnd("failed", error="DSH blocked the turn: a hook rejected its step, so it did not run."),
        ),
        (
            {"kind": "exploded"},
            TurnEnd("failed", error="DSH ended the turn with a reason dshloop does not know: 'exploded'."),
        ),
        ({}, TurnEnd("failed", error="DSH ended the turn with a reason dshloop does not know: 'none'.")),
    ],
)
def test_every_dsh_turn_end_kind_maps_to_an_outcome(reason, expected):
    assert turn_end_of(a_turn(reason, text="Deployed: all green."), KEY) == expected


def test_the_summary_is_the_turn_last_assistant_text_cut_to_4000():
    events = a_turn({"kind": "completed"}, text="x" * 5000)
    events.insert(2, assistant(10, "an earlier step's answer"))
    summary = turn_end_of(sorted(events, key=lambda e: e["seq"]), KEY).summary
    assert len(summary) == 4000 and summary == "x" * 3999 + "…"
    assert map_turn_end({"kind": "completed"}, []).summary == ""  # no assistant text: no summary
    long_error = map_turn_end({"kind": "error", "error": {"code": "E", "message": "m" * 5000}}, [])
    assert len(long_error.error) == 4000 and long_error.error.startswith("DSH ended the turn with an error (E): mmm")


def test_the_turn_is_the_first_to_end_after_our_message():
    # A turn running when our message was queued ends first (completed); ours is the next one.
    events = [
        {"type": "turn/start", "seq": 4, "data": {"turn": 1}},
        user_message(7, "someone-else"),
        {"type": "agent/inbox/spliced", "seq": 18, "data": {"target": "next-turn", "inserted": []}},
        assistant(24, "tick 0 tick 1"),
        turn_end(37, {"kind": "completed"}),
        {"type": "turn/start", "seq": 38, "data": {"turn": 2}},
        user_message(41, KEY),
        turn_end(44, {"kind": "error", "error": {"message": "stub refuses", "code": "INVALID_REQUEST"}}, turn=2),
        {"type": "turn/start", "seq": 46, "data": {"turn": 3}},
        user_message(49, KEY),  # DSH does not deduplicate an rpcId: the first message counts
        turn_end(55, {"kind": "completed"}, turn=3),
    ]
    assert turn_end_of(events, KEY).status == "failed"
    assert turn_end_of(events, "someone-else") == TurnEnd("succeeded", summary="tick 0 tick 1")
    assert turn_end_of(events[:7], KEY) is None  # our turn has not ended yet
    assert turn_end_of(events, "loop_other@1") is None  # not in the log


def tool_result(seq: int, text: str, *, is_error: bool = True) -> dict:
    block = {"type": "tool_result", "isError": is_error, "content": [{"type": "text", "text": text}]}
    message = {"role": "tool", "content": [block], "source": {"kind": "tool", "callId": f"call_{seq}"}}
    return {"type": "tool/result", "seq": seq, "data": {"message": message}}


def test_calls_the_fresh_run_boundary_refused_are_said_in_the_run_error_whatever_the_outcome():
    refused = [
        tool_result(10, "Error: dshloop refused subagent (rule fresh-run-tools): this is an unattended run …"),
        tool_result(12, "Error: dshloop refused bash (rule fresh-run-foreground): run_in_background starts …"),
        # Neither a tool's ordinary failure nor output that quotes the words is a refusal.
        tool_result(14, "Error: command exited with 1"),
        tool_result(16, "Error: dshloop refused x (rule fresh-run-tools)", is_error=False),
        tool_result(17, "cat: log says: Error: dshloop refused y (rule fresh-run-tools)"),
    ]
    note = "dshloop's fresh-run boundary refused: subagent (rule fresh-run-tools), bash (rule fresh-run-foreground)."
    completed = a_turn({"kind": "completed"}, text="Done without help.")
    assert turn_end_of([*completed[:2], *refused, *completed[2:]], KEY) == TurnEnd(
        "succeeded", summary="Done without help.", error=note
    )
    failed = a_turn({"kind": "error", "error": {"message": "stub refuses", "code": "INVALID_REQUEST"}})
    assert turn_end_of([*failed[:2], *refused, *failed[2:]], KEY) == TurnEnd(
        "failed", error=f"DSH ended the turn with an error (INVALID_REQUEST): stub refuses. {note}"
    )
    assert turn_end_of(completed, KEY) == TurnEnd("succeeded", summary="Done without help.")
