"""Bounded storage (retention, contract §10): the sessions the embedded host made for `new` runs go
with the run history they belong to, with their inboxes; user sessions and the sessions of kept
runs stay. On both engines (the suite's two passes)."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from loops.events import Actor
from loops.models import ActorKind, Loop, LoopPrompt, LoopRun
from scheduler.retention import Pruner, prune
from sessions_app.models import InboxMessage, SessionHeader
from sessions_app.services import inbox_deliver_many, session_upsert
from tests.conftest import T0, create_loop, every, s
from tests.loops.new_runs import fire_at, new_loop_with_runs, sessions_made_for

pytestmark = pytest.mark.django_db

OPERATOR = Actor(ActorKind.TOKEN, "ops")


# -- (a) the sessions made for `new` runs ----------------------------------------------------------


def test_pruning_new_runs_removes_the_sessions_made_for_them_and_their_inboxes(settings, global_session):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 3650  # nothing goes by age here: only with the runs
    loop_id, runs = new_loop_with_runs(5)
    pruned, kept = runs[:3], runs[3:]
    assert len(sessions_made_for(runs)) == 5
    assert {run.target_session_id for run in runs} == sessions_made_for(runs)
    # A user's session with messages of its own, and one another loop delivers to.
    session_upsert(session_id="ses_user", changes={"status": "idle", "first_prompt": "mine"})
    inbox_deliver_many([("ses_user", "hello", {"kind": "loop"}, "occ-user", "next_turn")], now=T0)
    other = create_loop(every(10), target="ses_user", at=T0)
    for index in range(1, 4):
        fire_at(T0 + s(10 * index) + s(1))

    pruner = Pruner(now=timezone.now(), run_limit=2).run()

    assert set(LoopRun.objects.filter(loop_id=loop_id).values_list("run_id", flat=True)) == {r.run_id for r in kept}
    assert sessions_made_for(pruned) == set()
    assert sessions_made_for(kept) == {run.target_session_id for run in kept}
    assert not InboxMessage.objects.filter(session_id__in=[run.target_session_id for run in pruned]).exists()
    assert InboxMessage.objects.filter(session_id__in=[run.target_session_id for run in kept]).count() == 2
    # The user's sessions and their inboxes are untouched, though their loop lost a run too.
    assert LoopRun.objects.filter(loop_id=other.loop_id).count() == 2
    assert set(SessionHeader.objects.filter(created_for=None).values_list("session_id", flat=True)) >= {
        "ses_user",
        "ses_global",
    }
    assert InboxMessage.objects.filter(session_id="ses_user").count() == 4  # its own and three deliveries
    assert (pruner.runs, pruner.sessions, pruner.session_messages) == (4, 3, 3)


def test_a_run_whose_session_is_still_running_is_kept_with_its_session_until_its_turn_ends(settings, global_session):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 30
    loop_id, runs = new_loop_with_runs(4)
    busy = runs[0]
    session_upsert(session_id=busy.target_session_id, changes={"status": "running"})

    first = Pruner(now=timezone.now(), run_limit=1).run()

    assert set(LoopRun.objects.filter(loop_id=loop_id).values_list("run_id", flat=True)) == {
        busy.run_id,
        runs[-1].run_id,
    }
    assert sessions_made_for(runs) == {busy.target_session_id, runs[-1].target_session_id}
    assert (first.runs, first.sessions) == (2, 2)

    session_upsert(session_id=busy.target_session_id, changes={"status": "idle"})
    second = prune(now=timezone.now())
    assert (second.runs, second.sessions) == (0, 0)  # the limit is 200: only the rule's own runs go
    Pruner(now=timezone.now(), run_limit=1).run()
    assert list(LoopRun.objects.filter(loop_id=loop_id).values_list("run_id", flat=True)) == [runs[-1].run_id]
    assert sessions_made_for(runs) == {runs[-1].target_session_id}


def test_a_running_session_not_updated_for_the_inbox_retention_counts_as_abandoned(settings, global_session):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 1
    loop_id, runs = new_loop_with_runs(3)
    session_upsert(session_id=runs[0].target_session_id, changes={"status": "running"})

    Pruner(now=timezone.now() + timedelta(days=2), run_limit=1).run()

    assert list(LoopRun.objects.filter(loop_id=loop_id).values_list("run_id", flat=True)) == [runs[-1].run_id]
    assert sessions_made_for(runs) == {runs[-1].target_session_id}


def test_a_dry_run_counts_the_sessions_it_would_remove_and_removes_none(settings, global_session):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 3650
    _, runs = new_loop_with_runs(4)

    dry = Pruner(now=timezone.now(), run_limit=1, dry_run=True).run()
    assert len(sessions_made_for(runs)) == 4 and LoopRun.objects.count() == 4
    real = Pruner(now=timezone.now(), run_limit=1).run()

    assert (dry.runs, dry.sessions) == (real.runs, real.sessions) == (3, 3)


def test_sessions_go_in_the_pruners_bounded_batches(settings, global_session):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 3650
    _, runs = new_loop_with_runs(7)
    pruner = Pruner(now=timezone.now(), run_limit=1, batch=2)
    sessions = []
    while pruner.step():
        sessions.append(SessionHeader.objects.exclude(created_for=None).count())

    assert sessions_made_for(runs) == {runs[-1].target_session_id}
    assert max(a - b for a, b in zip([7, *sessions], sessions, strict=False)) <= 2


# -- what `manage.py prune` prints --------------------------------------------------------------------


def prune_command(*args: str) -> str:
    out = StringIO()
    call_command("prune", *args, stdout=out)
    return out.getvalue()


def test_the_prune_command_prints_every_inbox_message_and_prompt_it_removed(settings, global_session):
    """The messages that go with the sessions of pruned `new` runs are inbox messages removed too;
    each figure printed is what was removed, counted from the tables before and after."""
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 3650  # nothing goes by age: only with the runs
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 5
    loop_id, runs = new_loop_with_runs(75)
    # Two earlier revisions whose runs all go: their stored prompts (stored as the loop left them)
    # go with them.
    assert Loop.objects.get(loop_id=loop_id).revision == 1
    LoopRun.objects.filter(run_id__in=[run.run_id for run in runs[15:30]]).update(revision=2)
    LoopRun.objects.filter(run_id__in=[run.run_id for run in runs[30:]]).update(revision=3)
    Loop.objects.filter(loop_id=loop_id).update(revision=3)
    LoopPrompt.objects.bulk_create(
        [LoopPrompt(loop_id=loop_id, revision=revision, prompt=f"revision {revision}") for revision in (1, 2)]
    )
    before = (InboxMessage.objects.count(), SessionHeader.objects.count(), LoopPrompt.objects.count())

    dry = prune_command("--dry-run")
    real = prune_command()

    after = (InboxMessage.objects.count(), SessionHeader.objects.count(), LoopPrompt.objects.count())
    messages, sessions, prompts = (b - a for b, a in zip(before, after, strict=True))
    assert (messages, sessions, prompts) == (70, 70, 2)
    assert f"loop {loop_id}: removed 70 run(s);" in real
    assert "sessions the embedded host made for `new` runs: removed 70 with their runs" in real
    assert re.search(
        r"^inbox: removed 70 message\(s\): 70 of those sessions, 0 others created before \S+$", real, re.MULTILINE
    )
    assert "prompts no run refers to any more: removed 2" in real
    assert "total: removed 70 run(s) of 1 loop(s), 70 session(s), 70 inbox message(s) and 2 prompt(s)" in real
    # The dry run printed the same figures.
    assert [
        re.sub(r"created before \S+", "", line.replace("would remove", "removed")) for line in dry.splitlines()[1:]
    ] == [re.sub(r"created before \S+", "", line) for line in real.splitlines()[1:]]


def test_a_dry_run_counts_a_message_once_when_it_is_both_expired_and_of_a_pruned_session(settings, global_session):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 1
    _, runs = new_loop_with_runs(4)
    InboxMessage.objects.update(created_at=timezone.now() - timedelta(days=2))
    inbox_deliver_many([("ses_user", "old", {"kind": "loop"}, "occ-user", "next_turn")], now=T0)
    InboxMessage.objects.filter(session_id="ses_user").update(created_at=timezone.now() - timedelta(days=2))

    dry = Pruner(now=timezone.now(), run_limit=1, dry_run=True).run()
    real = Pruner(now=timezone.now(), run_limit=1).run()

    assert InboxMessage.objects.count() == 0
    assert (real.session_messages, real.inbox_messages, real.messages) == (3, 2, 5)
    assert (dry.session_messages, dry.inbox_messages, dry.messages) == (3, 2, 5)
