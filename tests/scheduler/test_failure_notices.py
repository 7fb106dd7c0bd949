"""Failure notices on the embedded host (contract §16): a loop that pauses itself after failures in a
row, or a `new` loop's failed run, puts one notice into its creator's inbox (else `self`'s): §7's
XML saying what failed, how often, the last error and what to do, with the loop's source marked
`notice: true`. Exactly once however often the sender runs or dies midway; none with
DSHLOOP_FAILURE_NOTICES=0; skipped when no session is left to tell. Driven with claim_due,
deliver_runs, the outcome API and send_notices under a frozen clock."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime

import pytest
import time_machine

from loops.counters import notices_name, read_counters
from loops.models import FailureEpisode, Loop, LoopState
from loops.runs import lease
from scheduler import failure_notices
from scheduler.failure_notices import send_notices
from tests.conftest import T0, every, fire_due, s

AUTO_PAUSE_AFTER = 2
ERROR = "DSH ended the turn with an error (invalid_request_error): stub refuses"


@pytest.fixture(autouse=True)
def pause_after_two(settings):
    settings.DSHLOOP_AUTO_PAUSE_AFTER = AUTO_PAUSE_AFTER
    settings.DSHLOOP_FAILURE_WEBHOOK_URL = ""


@pytest.fixture
def fail_turn(host_api):
    def post(run_id: str, *, at: datetime, error: str = ERROR):
        with time_machine.travel(at, tick=False):
            response = host_api.post(f"/api/host/runs/{run_id}/outcome", {"status": "failed", "error": error})
        assert response.status_code == 200, response.content

    return post


@pytest.fixture
def fail_until_paused(make, fail_turn):
    """A loop of ses_caller's into ses_target whose turns fail until it pauses itself; its loop_id."""

    def run(**body) -> str:
        loop_id = make(every(60), **body)["loop_id"]
        for n in range(1, AUTO_PAUSE_AFTER + 1):
            run = fire_due(loop_id, T0 + s(60 * n))
            fail_turn(run.run_id, at=T0 + s(60 * n + 2), error=f"{ERROR} #{n}")
        assert Loop.objects.get(loop_id=loop_id).state == LoopState.PAUSED
        return loop_id

    return run


def send(at: datetime) -> int:
    with time_machine.travel(at, tick=False):
        return send_notices()


def prompt_of(text: str) -> str:
    """The notice inside §7's XML, as an agent's parser reads it."""
    root = ET.fromstring(text)
    assert root.tag == "loop"
    return root.findtext("prompt") or ""


def test_an_auto_paused_loop_puts_one_notice_into_its_creators_inbox(fail_until_paused, host, host_api):
    loop_id = fail_until_paused(prompt="Check the nightly build")
    [episode] = FailureEpisode.objects.all()
    assert (episode.event, episode.consecutive_failures, episode.notice_status) == ("loop_auto_paused", 2, "pending")

    assert send(T0 + s(200)) == 1
    assert send(T0 + s(260)) == 0  # delivered: nothing owed any more

    [message] = host.messages("ses_caller")
    # The session whose turns failed has its two occurrences, and no notice.
    assert [m["source"].get("notice") for m in host.messages("ses_target")] == [None, None]
    source = message["source"]
    assert source["notice"] is True
    assert (source["kind"], source["loop_id"], source["occurrence_key"]) == (
        "loop",
        loop_id,
        f"{loop_id}@notice:{episode.run_id}",
    )
    notice = prompt_of(message["text"])
    assert f'loop {loop_id} ("Check the nightly build") paused itself after 2 failures in a row' in notice
    assert f"Last error: {ERROR} #2" in notice
    for action in ("resume", "PATCH /api/loops/", "loop_delete"):
        assert action in notice
    episode.refresh_from_db()
    assert (episode.notice_status, episode.notice_session_id) == ("delivered", "ses_caller")
    assert read_counters()[notices_name("delivered")] == 1

    # The embedded host's inbox API shows it with its source.
    [listed] = host_api.get("/api/host/sessions/ses_caller/inbox").json()["messages"]
    assert listed["source"] == {
        "kind": "loop",
        "loop_id": loop_id,
        "run_id": episode.run_id,
        "occurrence_key": f"{loop_id}@notice:{episode.run_id}",
        "scheduled_at": int(episode.at.timestamp() * 1000),
        "notice": True,
    }


@pytest.mark.both_hosts
def test_a_sender_that_died_after_delivering_leaves_one_notice(fail_until_paused, host):
    fail_until_paused()
    [episode] = FailureEpisode.objects.all()
    # A scheduler that delivered the notice and was killed before it recorded that.
    with time_machine.travel(T0 + s(200), tick=False):
        [taken] = failure_notices._take(T0 + s(200), 20)
        assert failure_notices._attempt(failure_notices.get_host(), taken).status == "delivered"
    assert send(T0 + s(201)) == 0  # leased by the dead sender until its lease runs out

    assert send(T0 + s(201) + lease()) == 1
    [message] = host.messages("ses_caller")  # the host kept one message for the episode's key
    assert message["occurrence_key"] == episode.key and message["source"]["notice"] is True
    episode.refresh_from_db()
    assert (episode.notice_status, episode.notice_attempts) == ("delivered", 2)


def test_a_retry_goes_where_the_first_attempt_went(fail_until_paused, host, global_session):
    """A host that took the notice but did not answer keeps one copy per session: the retry goes to
    the session the first attempt chose, even if the rule would now choose another."""
    fail_until_paused()
    # The first attempt chose self (say the creator was briefly unknown) and did not hear back.
    FailureEpisode.objects.update(notice_session_id="ses_global")
    assert send(T0 + s(200)) == 1
    assert [m["source"]["notice"] for m in host.messages("ses_global")] == [True]
    assert not host.messages("ses_caller")


def test_no_notice_with_notices_off(fail_until_paused, host, settings):
    settings.DSHLOOP_FAILURE_NOTICES = False
    fail_until_paused()
    assert not FailureEpisode.objects.exists()
    assert send(T0 + s(200)) == 0
    assert not host.messages("ses_caller")


def test_a_creator_that_no_longer_exists_is_replaced_by_self(fail_until_paused, host, global_session):
    from sessions_app.models import SessionHeader

    loop_id = fail_until_paused()
    SessionHeader.objects.filter(session_id="ses_caller").delete()
    assert send(T0 + s(200)) == 1
    [message] = host.messages("ses_global")
    assert message["source"]["loop_id"] == loop_id and message["source"]["notice"] is True


def test_a_creator_that_is_the_failing_target_is_replaced_by_self(make, fail_turn, host, global_session):
    loop_id = make(every(60), session_id="ses_caller")["loop_id"]  # ses_caller's loop into itself
    for n in (1, 2):
        fail_turn(fire_due(loop_id, T0 + s(60 * n)).run_id, at=T0 + s(60 * n + 2))
    assert send(T0 + s(200)) == 1
    assert len(host.messages("ses_caller")) == 2  # its two occurrences, no notice
    assert [m["source"]["loop_id"] for m in host.messages("ses_global")] == [loop_id]


def test_a_notice_with_no_session_left_to_tell_is_skipped(fail_until_paused, host):
    from sessions_app.models import SessionHeader

    fail_until_paused()
    SessionHeader.objects.filter(session_id="ses_caller").delete()  # and there is no global interface
    assert send(T0 + s(200)) == 1
    [episode] = FailureEpisode.objects.all()
    assert episode.notice_status == "skipped"
    assert "no global interface session" in episode.notice_error
    assert read_counters()[notices_name("skipped")] == 1
    assert send(T0 + s(300)) == 0


def test_a_failed_run_of_a_new_loop_is_an_episode_of_its_own(make, fail_turn, host, settings, make_preset):
    settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS = 60
    make_preset("coder")
    loop_id = make(every(60), session_id="new")["loop_id"]
    run = fire_due(loop_id, T0 + s(60))
    fail_turn(run.run_id, at=T0 + s(62), error="timed out after 1 h (DSHLOOP_RUN_TIMEOUT_SECONDS)")
    [episode] = FailureEpisode.objects.all()
    assert (episode.event, episode.run_id, episode.consecutive_failures) == ("run_failed", run.run_id, 1)
    assert episode.failed_session_id == run.target_session_id

    assert send(T0 + s(70)) == 1
    [message] = host.messages("ses_caller")
    notice = prompt_of(message["text"])
    assert f"run {run.run_id} of loop {loop_id}" in notice and run.target_session_id in notice
    assert "Last error: timed out after 1 h" in notice

    # Its second failure in a row pauses it: one more episode, the pause, not two.
    second = fire_due(loop_id, T0 + s(120))
    fail_turn(second.run_id, at=T0 + s(122))
    assert sorted(FailureEpisode.objects.values_list("event", flat=True)) == ["loop_auto_paused", "run_failed"]
