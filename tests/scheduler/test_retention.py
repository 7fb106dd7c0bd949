"""Retention (contract §10): each loop keeps its newest DSHLOOP_RUN_HISTORY_LIMIT terminal
runs, the embedded inbox DSHLOOP_INBOX_RETENTION_DAYS of messages; open runs and events are kept.
On both engines (the suite's two passes), and once through a real `runloops`."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from core.timeutil import iso
from loops.events import Actor
from loops.models import DeletedLoop, LoopEvent, LoopPrompt, LoopRun, RunStatus
from loops.runs import occurrence_key
from loops.services import lifecycle
from scheduler.retention import Pruner, prune
from sessions_app.models import InboxMessage
from sessions_app.services import inbox_deliver_many
from tests.conftest import T0, create_loop, every, s
from tests.processes import wait_for

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


def add_runs(
    loop_id: str, count: int, *, status: str = RunStatus.DELIVERED, start=T0, step=MINUTE, tag: str = ""
) -> list[LoopRun]:
    """`count` runs of one loop, one per `step` from `start` (oldest first)."""
    runs = []
    for index in range(count):
        scheduled_at = start + index * step
        runs.append(
            LoopRun(
                run_id=f"run_{status[0]}{status[-2]}{tag}{index:05d}_{loop_id}",  # at most 40 characters
                loop_id=loop_id,
                occurrence_key=f"{occurrence_key(loop_id, scheduled_at)}:{status}{tag}:{index}",
                scheduled_at=scheduled_at,
                status=status,
                claimed_at=scheduled_at,
                finished_at=None if status in (RunStatus.CLAIMED, RunStatus.DELIVERING) else scheduled_at,
            )
        )
    return LoopRun.objects.bulk_create(runs)


def kept(loop_id: str) -> list[str]:
    return sorted(LoopRun.objects.filter(loop_id=loop_id).values_list("run_id", flat=True))


def newest(runs: list[LoopRun], count: int) -> list[str]:
    return sorted(run.run_id for run in sorted(runs, key=lambda run: (run.scheduled_at, run.run_id))[-count:])


def test_a_loop_with_1000_runs_keeps_its_newest_200():
    runs = add_runs("loop_busy", 1000)

    pruned = prune(now=timezone.now())

    assert kept("loop_busy") == newest(runs, 200)
    assert (pruned.runs, pruned.loops) == (800, 1)


def test_the_limit_comes_from_the_setting(settings):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 7
    runs = add_runs("loop_busy", 20)

    prune(now=timezone.now())

    assert kept("loop_busy") == newest(runs, 7)


def test_open_runs_are_kept_and_do_not_count_even_when_older_than_all(settings):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 5
    terminal = add_runs("loop_a", 4, status=RunStatus.FAILED, start=T0)
    terminal += add_runs("loop_a", 4, status=RunStatus.SKIPPED, start=T0 + s(30))
    terminal += add_runs("loop_a", 4, status=RunStatus.DELIVERED, start=T0 + 10 * MINUTE)
    stuck = add_runs("loop_a", 1, status=RunStatus.CLAIMED, start=T0 - MINUTE)  # older than every other run
    in_flight = add_runs("loop_a", 2, status=RunStatus.DELIVERING, start=T0 + 20 * MINUTE)  # the newest

    prune(now=timezone.now())

    assert kept("loop_a") == sorted(newest(terminal, 5) + [run.run_id for run in stuck + in_flight])


def test_a_loop_whose_runs_are_mostly_open_loses_nothing(settings):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 3
    runs = add_runs("loop_a", 2) + add_runs("loop_a", 5, status=RunStatus.CLAIMED, start=T0 + s(1))

    assert prune(now=timezone.now()).runs == 0
    assert kept("loop_a") == sorted(run.run_id for run in runs)


def test_other_loops_are_untouched():
    busy = add_runs("loop_busy", 250)
    full = add_runs("loop_full", 200)
    young = add_runs("loop_young", 10)

    pruned = prune(now=timezone.now())

    assert kept("loop_busy") == newest(busy, 200)
    assert kept("loop_full") == sorted(run.run_id for run in full)
    assert kept("loop_young") == sorted(run.run_id for run in young)
    assert (pruned.runs, pruned.loops) == (50, 1)


def test_a_deleted_loops_runs_are_pruned_too_and_its_events_kept(settings, make_session):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 3
    make_session("ses_target")
    loop = create_loop(every(60), target="ses_target")
    runs = add_runs(loop.loop_id, 10)
    lifecycle.loop_delete(loop_id=loop.loop_id, actor=Actor.session("ses_target"))
    events = LoopEvent.objects.filter(loop_id=loop.loop_id).count()
    assert events >= 2  # created, deleted

    prune(now=timezone.now())

    assert kept(loop.loop_id) == newest(runs, 3)
    assert LoopEvent.objects.filter(loop_id=loop.loop_id).count() == events


def test_a_loop_deleted_before_the_inbox_cutoff_loses_all_its_runs_and_what_was_kept_of_it(settings, make_session):
    """Runs outlive their loop (spec §4) as long as the messages they delivered, not for good: a loop
    deleted more than DSHLOOP_INBOX_RETENTION_DAYS ago has nothing new added to its history, so its
    last runs go, then its DeletedLoop; an open run keeps it until the run ends. A loop deleted since
    keeps the runs of any loop. Events stay. The dry run counts what the pass removes."""
    settings.DSHLOOP_RUN_HISTORY_LIMIT, settings.DSHLOOP_INBOX_RETENTION_DAYS = 3, 30
    make_session("ses_target")
    now = T0 + timedelta(days=40)
    # Nothing falls due before they are deleted (a due occurrence would be recorded as a skipped run).
    old, open_, recent = (create_loop(every(10**8), target="ses_target", at=T0) for _ in range(3))
    add_runs(old.loop_id, 5)
    add_runs(open_.loop_id, 2)
    add_runs(open_.loop_id, 1, status=RunStatus.CLAIMED, tag="o")
    recent_runs = add_runs(recent.loop_id, 5)
    actor = Actor.session("ses_target")
    for loop, deleted_at in ((old, T0 + s(600)), (open_, T0 + s(600)), (recent, now - timedelta(days=1))):
        lifecycle.loop_delete(loop_id=loop.loop_id, actor=actor, now=deleted_at)
    events = LoopEvent.objects.count()

    dry = Pruner(now=now, dry_run=True).run()
    real = Pruner(now=now).run()

    assert (dry.runs, dry.deleted_loops) == (real.runs, real.deleted_loops) == (5 + 2 + 2, 1)
    assert kept(old.loop_id) == [] and not LoopPrompt.objects.filter(loop_id=old.loop_id).exists()
    assert [run.status for run in LoopRun.objects.filter(loop_id=open_.loop_id)] == [RunStatus.CLAIMED]
    assert kept(recent.loop_id) == newest(recent_runs, 3)
    assert set(DeletedLoop.objects.values_list("loop_id", flat=True)) == {open_.loop_id, recent.loop_id}
    assert LoopEvent.objects.count() == events
    # Once its last run has ended, the next pass removes it and what was kept of its loop.
    LoopRun.objects.filter(loop_id=open_.loop_id).update(status=RunStatus.DELIVERED, finished_at=now)
    assert Pruner(now=now).run().deleted_loops == 1
    assert kept(open_.loop_id) == [] and set(DeletedLoop.objects.values_list("loop_id", flat=True)) == {recent.loop_id}


def test_runs_at_the_same_instant_are_ordered_by_run_id(settings):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 3
    # Skipped and manual runs may share an instant with another run of their loop.
    same_instant = add_runs("loop_a", 4, step=timedelta(0), start=T0 + MINUTE)
    older = add_runs("loop_a", 2, status=RunStatus.SKIPPED, start=T0, step=s(1))

    prune(now=timezone.now())

    assert kept("loop_a") == newest(same_instant + older, 3) == [run.run_id for run in same_instant[1:]]


def test_a_pass_walks_loops_across_pages(settings):
    settings.DSHLOOP_RUN_HISTORY_LIMIT = 2
    runs = {f"loop_{index:02d}": add_runs(f"loop_{index:02d}", 2 + index % 3) for index in range(25)}

    pruned = Pruner(now=timezone.now(), page=4).run()

    for loop_id, loop_runs in runs.items():
        assert kept(loop_id) == newest(loop_runs, 2), loop_id
    assert pruned.runs == sum(len(loop_runs) - 2 for loop_runs in runs.values())


def test_headroom_leaves_a_loop_until_it_passes_the_limit_by_more_than_the_headroom(settings):
    near = add_runs("loop_near", 250)
    over = add_runs("loop_over", 251)

    Pruner(now=timezone.now(), run_limit=200, headroom=50).run()

    assert kept("loop_near") == sorted(run.run_id for run in near)
    assert kept("loop_over") == newest(over, 200)  # then down to the limit exactly


def messages_at(*moments) -> list[str]:
    """One inbox message created at each moment; their IDs."""
    ids = []
    for moment in moments:
        key = f"occ-{secrets.token_hex(4)}"
        ids += inbox_deliver_many([("ses_a", "text", {"kind": "loop"}, key, "next_turn")], now=moment)
    return ids


def test_inbox_messages_older_than_the_retention_are_deleted_newer_kept(settings):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 30
    now = timezone.now().replace(microsecond=0)
    cutoff = now - timedelta(days=30)
    expired = messages_at(now - timedelta(days=400), cutoff - s(1))
    fresh = messages_at(cutoff, cutoff + s(1), now)

    pruned = prune(now=now)

    assert sorted(InboxMessage.objects.values_list("message_id", flat=True)) == sorted(fresh)
    assert (pruned.inbox_messages, pruned.inbox_cutoff) == (len(expired), cutoff)


def test_steps_are_bounded_batches_and_report_more_work_until_drained(settings):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 1
    add_runs("loop_busy", 450)
    add_runs("loop_other", 230)
    old = timezone.now() - timedelta(days=2)
    inbox_deliver_many([("ses_a", "t", {"kind": "loop"}, f"occ-{i}", "next_turn") for i in range(250)], now=old)
    pruner = Pruner(now=timezone.now(), run_limit=200, batch=100)

    removed_per_step, answers = [], []
    before = LoopRun.objects.count() + InboxMessage.objects.count()
    while not pruner.done:
        answers.append(pruner.step())
        after = LoopRun.objects.count() + InboxMessage.objects.count()
        removed_per_step.append(before - after)
        before = after

    assert max(removed_per_step) == 100  # never more than one batch a step
    assert answers[-1] is False and all(answers[:-1])
    assert pruner.step() is False  # a finished pass stays finished
    assert (LoopRun.objects.count(), InboxMessage.objects.count()) == (400, 0)
    assert (pruner.runs, pruner.loops, pruner.inbox_messages) == (280, 2, 250)


def test_dry_run_deletes_nothing_and_computes_the_same_numbers(settings):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 1
    add_runs("loop_busy", 450)
    add_runs("loop_other", 230)
    add_runs("loop_small", 5)
    inbox_deliver_many([("ses_a", "t", {"kind": "loop"}, "occ-1", "next_turn")], now=timezone.now() - timedelta(days=3))
    now = timezone.now()
    dry_loops, real_loops = [], []

    dry = Pruner(now=now, dry_run=True, on_loop=dry_loops.append).run()
    assert (LoopRun.objects.count(), InboxMessage.objects.count()) == (685, 1)
    real = Pruner(now=now, on_loop=real_loops.append).run()

    assert dry_loops == real_loops and len(real_loops) == 2
    assert (dry.runs, dry.loops, dry.inbox_messages) == (real.runs, real.loops, real.inbox_messages) == (280, 2, 1)
    assert LoopRun.objects.count() == 405


def run_prune(*args) -> str:
    out = StringIO()
    call_command("prune", *args, stdout=out)
    return out.getvalue()


def test_prune_command_dry_run_changes_nothing_and_prints_the_same_numbers(settings):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 30
    runs = add_runs("loop_busy", 1000)
    add_runs("loop_young", 10)
    messages_at(timezone.now() - timedelta(days=31), timezone.now() - timedelta(days=40), timezone.now())

    dry = run_prune("--dry-run")
    assert (LoopRun.objects.count(), InboxMessage.objects.count()) == (1010, 3)
    real = run_prune()

    assert (LoopRun.objects.count(), InboxMessage.objects.count()) == (210, 1)
    oldest_kept = sorted(runs, key=lambda run: run.scheduled_at)[800]
    assert (
        f"loop loop_busy: removed 800 run(s); the oldest kept was scheduled at {iso(oldest_kept.scheduled_at)}" in real
    )
    assert re.search(r"^inbox: removed 2 message\(s\): 0 of those sessions, 2 others created before \S+$", real, re.M)
    assert "total: removed 800 run(s) of 1 loop(s), 0 session(s), 2 inbox message(s) and 0 prompt(s)" in real
    assert "loop_young" not in real
    # The same lines, but for the verb and the dry run's note (inbox cutoffs differ by the seconds between).
    same = [re.sub(r"created before \S+", "", line) for line in real.splitlines()[1:]]
    assert [
        re.sub(r"created before \S+", "", line.replace("would remove", "removed")) for line in dry.splitlines()[1:]
    ] == same
    assert "dry run" in dry.splitlines()[0]


def test_prune_command_with_nothing_to_remove_says_so():
    add_runs("loop_young", 10)
    out = run_prune()
    assert "total: removed 0 run(s) of 0 loop(s), 0 session(s), 0 inbox message(s) and 0 prompt(s)" in out
    assert LoopRun.objects.count() == 10


# -- a real scheduler -------------------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_runloops_prunes_at_start_and_every_interval_and_keeps_scheduling(schedulers, make_session):
    make_session("ses_target")
    loop = create_loop(every(1), target="ses_target")
    add_runs(loop.loop_id, 20, start=T0)  # history from long ago
    add_runs("loop_gone", 20, start=T0)  # a deleted loop's runs
    [expired] = messages_at(timezone.now() - timedelta(days=40))
    schedulers.env.update(
        DSHLOOP_RUN_HISTORY_LIMIT="5", DSHLOOP_INBOX_RETENTION_DAYS="30", DSHLOOP_PRUNE_INTERVAL_SECONDS="2"
    )

    [scheduler] = schedulers.start_ready()

    wait_for(lambda: LoopRun.objects.filter(loop_id="loop_gone").count() == 5, timeout=30, message="the first pass")
    wait_for(lambda: not InboxMessage.objects.filter(message_id=expired).exists(), timeout=10, message="the inbox")
    # The loop itself lost its old history and goes on firing.
    wait_for(
        lambda: not LoopRun.objects.filter(loop_id=loop.loop_id, scheduled_at__lt=T0 + 15 * MINUTE).exists(),
        timeout=30,
        message="the loop's old runs to go",
    )
    pruned_at = timezone.now()
    fired = LoopRun.objects.filter(loop_id=loop.loop_id, status=RunStatus.DELIVERED, scheduled_at__gt=pruned_at)
    wait_for(lambda: fired.count() >= 2, timeout=30, message="deliveries after the prune")
    # A later pass, one interval on, prunes what has piled up since.
    add_runs("loop_gone", 20, start=T0 - timedelta(days=1), tag="later")
    wait_for(lambda: LoopRun.objects.filter(loop_id="loop_gone").count() == 5, timeout=30, message="a later pass")
    assert scheduler.running()

    assert scheduler.terminate() < 10
    output = scheduler.output()
    assert re.search(r"pruned \d+ run\(s\) of \d+ loop\(s\) and 1 inbox message\(s\)", output), output[-3000:]
    assert "Traceback" not in output
