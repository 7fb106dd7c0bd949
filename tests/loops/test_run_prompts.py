"""Bounded storage: a prompt is stored once per loop revision (LoopPrompt), when the loop leaves the
revision or is deleted, and runs read theirs through (loop_id, revision): the loop's own while it is
at the revision, so an occurrence writes none. Delivery delivers the run's revision's prompt. On
both engines (the suite's two passes)."""

from __future__ import annotations

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from loops.events import Actor
from loops.models import ActorKind, LoopPrompt, LoopRun
from loops.services.edit import loop_edit
from loops.services.lifecycle import loop_delete, loop_run_now
from scheduler.claims import claim_due
from scheduler.delivery import deliver_run
from scheduler.message import loop_message
from scheduler.retention import Pruner
from sessions_app.models import InboxMessage
from tests.conftest import T0, create_loop, every, s
from tests.loops.new_runs import LONG, fire_at, new_loop_with_runs

pytestmark = pytest.mark.django_db

OPERATOR = Actor(ActorKind.TOKEN, "ops")


# -- (b) one prompt per revision -------------------------------------------------------------------


def test_runs_of_one_revision_share_one_stored_prompt_kept_when_the_loop_leaves_it(global_session):
    loop_id, runs = new_loop_with_runs(5)

    # While the loop is at the revision, its runs read the loop's prompt: no occurrence wrote one.
    assert not LoopPrompt.objects.filter(loop_id=loop_id).exists()
    assert "prompt" not in {field.name for field in LoopRun._meta.get_fields()}
    assert all(LoopRun.objects.get(run_id=run.run_id).prompt == LONG for run in runs)

    loop_edit(loop_id=loop_id, changes={"prompt": "shorter"}, actor=OPERATOR)

    assert list(LoopPrompt.objects.filter(loop_id=loop_id).values_list("revision", "prompt")) == [(1, LONG)]
    assert all(LoopRun.objects.get(run_id=run.run_id).prompt == LONG for run in runs)


def test_a_revision_no_run_refers_to_is_not_stored(make_session):
    make_session("ses_target", status="idle")
    loop = create_loop(every(3600), prompt="never ran", target="ses_target", at=T0)
    with time_machine.travel(T0 + s(5), tick=False):
        loop_edit(loop_id=loop.loop_id, changes={"prompt": "nor this"}, actor=OPERATOR)
        loop_delete(loop_id=loop.loop_id, actor=OPERATOR)

    assert not LoopPrompt.objects.filter(loop_id=loop.loop_id).exists()


def test_runs_keep_their_prompt_after_the_loop_is_edited_and_after_it_is_deleted(make_session):
    make_session("ses_target", status="idle")
    loop = create_loop(every(10), prompt="first words", target="ses_target", at=T0)
    [first] = fire_at(T0 + s(10))
    with time_machine.travel(T0 + s(11), tick=False):
        loop_edit(loop_id=loop.loop_id, changes={"prompt": "second words"}, actor=OPERATOR)
    [second] = fire_at(T0 + s(20))
    with time_machine.travel(T0 + s(21), tick=False):
        loop_edit(loop_id=loop.loop_id, changes={"name": "renamed"}, actor=OPERATOR)
    [third] = fire_at(T0 + s(30))

    loop_delete(loop_id=loop.loop_id, actor=OPERATOR)

    read = {run.revision: run.prompt for run in LoopRun.objects.filter(loop_id=loop.loop_id)}
    assert read == {1: "first words", 2: "second words", 3: "second words"}
    assert [first.revision, second.revision, third.revision] == [1, 2, 3]
    assert LoopPrompt.objects.filter(loop_id=loop.loop_id).count() == 3


def test_a_run_claimed_before_an_edit_delivers_its_own_revisions_prompt(make_session):
    make_session("ses_target", status="idle")
    loop = create_loop(every(10), prompt="before", target="ses_target", at=T0)
    with time_machine.travel(T0 + s(10), tick=False):
        [run_id] = claim_due(now=T0 + s(10))
    with time_machine.travel(T0 + s(10), tick=False):
        loop_edit(loop_id=loop.loop_id, changes={"prompt": "after"}, actor=OPERATOR)
        assert deliver_run(run_id) is True

    [message] = InboxMessage.objects.filter(occurrence_key=LoopRun.objects.get(run_id=run_id).occurrence_key)
    assert message.text == loop_message(loop_id=loop.loop_id, prompt="before")
    assert list(LoopPrompt.objects.filter(loop_id=loop.loop_id).values_list("revision", "prompt")) == [(1, "before")]


def test_run_now_after_an_edit_delivers_the_new_revisions_prompt_and_stores_it_once_left(make_session):
    make_session("ses_target", status="idle")
    loop = create_loop(every(3600), prompt="before", target="ses_target", at=T0)
    with time_machine.travel(T0 + s(5), tick=False):
        loop_edit(loop_id=loop.loop_id, changes={"prompt": "after"}, actor=OPERATOR)
        run = loop_run_now(loop_id=loop.loop_id, actor=OPERATOR)
        assert deliver_run(run.run_id) is True
        second = loop_run_now(loop_id=loop.loop_id, actor=OPERATOR)
        assert deliver_run(second.run_id) is True

    texts = list(InboxMessage.objects.filter(session_id="ses_target").values_list("text", flat=True))
    assert texts == [loop_message(loop_id=loop.loop_id, prompt="after")] * 2
    assert LoopRun.objects.get(run_id=run.run_id).prompt == "after"
    with time_machine.travel(T0 + s(6), tick=False):
        loop_edit(loop_id=loop.loop_id, changes={"prompt": "later"}, actor=OPERATOR)
    assert list(LoopPrompt.objects.filter(loop_id=loop.loop_id).values_list("revision", "prompt")) == [(2, "after")]
    assert LoopRun.objects.get(run_id=second.run_id).prompt == "after"


def test_a_delivery_at_the_loops_revision_reads_no_stored_prompt(make_session):
    """The hot path: the loop row the batch locks holds the prompt of its current revision."""
    make_session("ses_target", status="idle")
    create_loop(every(10), prompt="words", target="ses_target", at=T0)
    with time_machine.travel(T0 + s(10), tick=False):
        [run_id] = claim_due(now=T0 + s(10))
        with CaptureQueriesContext(connection) as queries:
            assert deliver_run(run_id) is True

    assert not [query for query in queries.captured_queries if "loops_loopprompt" in query["sql"]]


def test_pruning_drops_prompts_no_run_refers_to_but_never_the_loops_current_one(make_session):
    make_session("ses_target", status="idle")
    loop = create_loop(every(10), prompt="one", target="ses_target", at=T0)
    fire_at(T0 + s(10))
    for index, words in enumerate(["two", "three"], start=2):
        with time_machine.travel(T0 + s(10 * index - 5), tick=False):
            loop_edit(loop_id=loop.loop_id, changes={"prompt": words}, actor=OPERATOR)
        fire_at(T0 + s(10 * index))
    with time_machine.travel(T0 + s(35), tick=False):
        loop_edit(loop_id=loop.loop_id, changes={"prompt": "four"}, actor=OPERATOR)  # no run yet

    pruner = Pruner(now=timezone.now(), run_limit=1).run()

    assert list(LoopRun.objects.filter(loop_id=loop.loop_id).values_list("revision", flat=True)) == [3]
    assert list(LoopPrompt.objects.filter(loop_id=loop.loop_id).values_list("revision", "prompt")) == [(3, "three")]
    assert pruner.prompts == 2
    [run] = fire_at(T0 + s(40))
    assert (run.revision, LoopRun.objects.get(run_id=run.run_id).prompt) == (4, "four")
