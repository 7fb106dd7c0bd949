"""contract §14 end to end: real `runloops` processes, a real DSH whose model is a stub that
streams slowly on `SLOW<n>`, and `new` loops bounded by the run timeout, overlap and capacity.
DSH's own session list and log are the proof."""

from __future__ import annotations

import time

import pytest

from loops.models import Loop, LoopRun, RunStatus
from tests.conftest import after, create_loop, every
from tests.processes import Schedulers, wait_for

pytestmark = [pytest.mark.process, pytest.mark.dsh, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def schedulers(modelled, settings, workspace, tmp_path):
    """This process and its schedulers talk to `modelled`; turns' ends are read every second."""
    env = {"DSHLOOP_HOST": "dsh", "DSHLOOP_DSH_URL": modelled.url, "DSHLOOP_DSH_CWD": str(workspace)}
    settings.DSHLOOP_HOST, settings.DSHLOOP_DSH_URL, settings.DSHLOOP_DSH_CWD = "dsh", modelled.url, str(workspace)
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 0  # occurrences seconds apart: the floor has its own tests
    running = Schedulers(
        tmp_path,
        **env,
        DSHLOOP_OUTCOME_POLL_SECONDS="1",
        DSHLOOP_MIN_NEW_INTERVAL_SECONDS="0",
        DSHLOOP_FAILURE_BACKOFF_SECONDS="1",
        DSHLOOP_AUTO_PAUSE_AFTER="0",
    )
    yield running
    running.close()


def runs_of(loop: Loop) -> list[LoopRun]:
    return list(LoopRun.objects.filter(loop_id=loop.loop_id).order_by("scheduled_at"))


def outcome_of(loop: Loop) -> LoopRun:
    """The loop's first run once its outcome is in."""
    return wait_for(
        lambda: LoopRun.objects.filter(loop_id=loop.loop_id).exclude(outcome="").first(),
        timeout=40,
        interval=0.3,
        message="the run's outcome",
    )


def turn_ends(real, session_id: str) -> list[dict]:
    return [event for event in real.history(session_id) if event.get("type") == "turn/end"]


def test_a_fresh_turn_past_the_time_limit_is_cancelled_in_dsh_and_the_run_failed(modelled, schedulers):
    schedulers.env["DSHLOOP_RUN_TIMEOUT_SECONDS"] = "3"
    loop = create_loop(after(1), prompt="SLOW40 then report", target="new")
    schedulers.start_ready()

    run = outcome_of(loop)
    assert (run.status, run.outcome) == (RunStatus.FAILED, "failed"), (run.status, run.outcome, run.error)
    assert run.error.startswith("timed out after 3 s (DSHLOOP_RUN_TIMEOUT_SECONDS)"), run.error
    # DSH itself cancelled the turn long before its 40 s: aborted by a user (session.cancel).
    [ended] = wait_for(lambda: turn_ends(modelled, run.target_session_id), timeout=10, message="the turn's end in DSH")
    assert ended["data"]["reason"]["kind"] == "aborted", ended
    assert not modelled.sessions()[run.target_session_id]["running"]
    assert (run.outcome_at - run.finished_at).total_seconds() < 20


def test_overlap_skip_records_skips_while_the_turn_runs_and_delivers_once_it_ended(modelled, schedulers):
    loop = create_loop(every(2), prompt="SLOW7 and summarise", target="new")
    Loop.objects.filter(loop_id=loop.loop_id).update(overlap="skip")
    schedulers.start_ready()

    def second_delivered():
        runs = [run for run in runs_of(loop) if run.status == RunStatus.DELIVERED]
        return len(runs) >= 2 and runs

    first, second = wait_for(second_delivered, timeout=60, interval=0.3, message="a second delivered run")[:2]
    skipped = [run for run in runs_of(loop) if first.scheduled_at < run.scheduled_at < second.scheduled_at]
    assert skipped and all(run.status == RunStatus.SKIPPED for run in skipped), [(r.status, r.error) for r in skipped]
    assert all(
        run.error.startswith(f"Skipped (overlap): the previous run {first.run_id} in session {first.target_session_id}")
        for run in skipped
    ), skipped[0].error
    # The second started only after DSH ended the first's turn, which dshloop had read.
    first.refresh_from_db()
    assert first.outcome == "succeeded" and first.outcome_at <= second.claimed_at
    [ended] = turn_ends(modelled, first.target_session_id)
    assert ended["data"]["reason"]["kind"] == "completed"


def test_two_schedulers_never_run_more_fresh_agents_than_the_cap(modelled, schedulers):
    schedulers.env["DSHLOOP_MAX_CONCURRENT_NEW_RUNS"] = "2"
    loops = [create_loop(every(3), prompt=f"SLOW5 job {index}", target="new") for index in range(5)]
    schedulers.start_ready(2)

    most, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:  # DSH's own view of its running turns, sampled
        running = [sid for sid, item in modelled.sessions().items() if sid.startswith("loop-") and item["running"]]
        most = max(most, len(running))
        assert len(running) <= 2, running
        time.sleep(0.2)
    delivered = LoopRun.objects.filter(loop_id__in=[loop.loop_id for loop in loops], status=RunStatus.DELIVERED)
    assert most == 2 and delivered.count() >= 4  # the cap was reached, and slots were freed and reused
    assert len({run.loop_id for run in delivered}) >= 3  # in deadline order: not one loop taking every slot


ESCALATE = (
    'CALLTOOL bash {"command": "touch /etc/dshloop-was-here", "description": "write outside", '
    '"sandbox_permissions": "danger-full-access", "justification": "it needs to"}'
)


def test_a_fresh_turn_waiting_for_an_approval_is_cancelled_and_fails_closed(modelled, schedulers):
    """DSH's read-only preset asks before a command escalates its sandbox, and an unwatched ask waits
    forever: the run fails at once, naming it, well before the run timeout."""
    loop = create_loop(after(1), prompt=ESCALATE, target="new")
    schedulers.start_ready()

    run = outcome_of(loop)
    assert (run.status, run.outcome) == (RunStatus.FAILED, "failed"), (run.status, run.outcome, run.error)
    assert "waited for an approval for bash" in run.error and "fails closed" in run.error, run.error
    session = modelled.sessions()[run.target_session_id]
    assert session["projections"]["values"]["permissions"]["currentValue"] == "read-only"
    assert not session["running"]
    events = modelled.history(run.target_session_id)
    [decided] = [event["data"] for event in events if event["type"] == "approval/decided"]
    [ended] = [event["data"] for event in events if event["type"] == "turn/end"]
    assert decided["outcome"] == "cancelled" and ended["reason"]["kind"] == "aborted", (decided, ended)
