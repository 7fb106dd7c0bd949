"""The invariants every fault-injection scenario ends with (spec §3, §5; docs/tools-and-api.md "Semantics").

After any mix of racing schedulers, kill -9 and database restarts, for the loops of a scenario:

1. every due occurrence was delivered, or folded into a later delivery and counted in its `missed`
   (spec §3 anti-burst): consecutive runs of a loop sit exactly `period · (1 + missed)` apart, from
   `created_at` on, and no grid point before `until` is left behind;
2. no occurrence was dispatched twice: one run per occurrence key (the unique key makes a second
   claim impossible; the check proves the grid has no duplicate either) and one inbox message per
   delivered occurrence, in the target's inbox, naming that run;
3. every run scheduled before `until` is terminal (delivered); every later one is terminal or
   recoverable: still open with a `retry_at` at which any scheduler re-drives it;
4. a loop is `running` exactly while it has one occurrence in flight (docs/tools-and-api.md: "at most one
   occurrence in flight"), so no loop is stuck `running` with nothing to finish it;
5. no burst: a claim always takes the latest due occurrence, so a run is claimed less than one
   period after its scheduled time — a late scheduler delivers once, never replays the backlog.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from loops.models import Loop, LoopRun, LoopState
from loops.notify import notify_clocks
from loops.runs import OPEN_STATUSES
from loops.services import new_loop_id
from sessions_app.models import InboxMessage


def make_loops(count: int, every: int, sessions: list[str], *, first_in: float = 2.0) -> list[Loop]:
    """`every` loops whose first occurrences are spread over one period, starting `first_in` s from now."""
    start = timezone.now() + timedelta(seconds=first_in) - timedelta(seconds=every)
    loops = []
    for i in range(count):
        created_at = start + timedelta(milliseconds=i * every * 1000 // count)
        loops.append(
            Loop(
                loop_id=new_loop_id(),
                prompt=f"load {i}",
                kind="every",
                every_seconds=every,
                session_id=sessions[i % len(sessions)],
                created_by_session_id=sessions[0],
                created_at=created_at,
                next_at=created_at + timedelta(seconds=every),
                state=LoopState.SCHEDULED,
            )
        )
    created = Loop.objects.bulk_create(loops)
    notify_clocks()  # bulk_create bypasses loop_create, which wakes sleeping clocks
    return created


def settled(before: datetime) -> bool:
    """Every occurrence due before `before` has been claimed and has reached a terminal state."""
    open_before = LoopRun.objects.filter(scheduled_at__lt=before, status__in=OPEN_STATUSES).exists()
    unclaimed_before = Loop.objects.filter(state=LoopState.SCHEDULED, next_at__lt=before).exists()
    return not open_before and not unclaimed_before


def delivered_at_least(loops: list[Loop], occurrences: int) -> bool:
    """Every loop of the scenario has at least `occurrences` delivered runs."""
    per_loop = dict(
        LoopRun.objects.filter(loop_id__in=[loop.loop_id for loop in loops], status="delivered")
        .values_list("loop_id")
        .annotate(n=Count("run_id"))
    )
    return len(per_loop) == len(loops) and min(per_loop.values()) >= occurrences


def describe(loop_id: str, until: datetime) -> str:
    loop = Loop.objects.filter(loop_id=loop_id).first()
    runs = LoopRun.objects.filter(loop_id=loop_id).order_by("-scheduled_at")[:4]
    return f"until={until} loop={loop and (loop.state, loop.next_at)} runs=" + "; ".join(
        f"{r.scheduled_at:%H:%M:%S.%f} {r.status} a={r.attempt} m={r.missed} claimed={r.claimed_at:%H:%M:%S.%f} "
        f"finished={r.finished_at and f'{r.finished_at:%H:%M:%S.%f}'} retry={r.retry_at} err={r.error!r}"
        for r in runs
    )


@dataclass
class Tally:
    delivered: int  # occurrences delivered before `until`
    missed: int  # occurrences folded into a later delivery (anti-burst), before `until`
    redriven: int  # runs that needed more than one driver (a crash or a lease ran out)
    in_flight: int  # runs after `until` still open, recoverable


def check_invariants(loops: list[Loop], *, until: datetime, allow_missed: bool) -> Tally:
    """Assert the four invariants above; `until`: occurrences scheduled before it must be over."""
    loop_ids = [loop.loop_id for loop in loops]
    all_runs = list(LoopRun.objects.filter(loop_id__in=loop_ids).order_by("loop_id", "scheduled_at"))
    runs = [run for run in all_runs if run.scheduled_at < until]
    later = [run for run in all_runs if run.scheduled_at >= until]

    # 3. Terminal before `until`; after it, terminal or recoverable by any scheduler.
    statuses = Counter(run.status for run in runs)
    assert set(statuses) <= {"delivered"}, f"runs before the cut-off not delivered: {statuses}"
    stuck = [run.occurrence_key for run in later if run.status in OPEN_STATUSES and run.retry_at is None]
    assert not stuck, f"open runs no scheduler will re-drive: {stuck[:5]}"

    # 2. No occurrence twice: one run per key, one inbox message per delivered occurrence, in the
    # right inbox, from the run that was recorded (a re-driven delivery reuses its run).
    keys = Counter(run.occurrence_key for run in all_runs)
    assert max(keys.values(), default=1) == 1, keys.most_common(3)
    delivered = {run.occurrence_key: run for run in all_runs if run.status == "delivered"}
    messages = list(
        InboxMessage.objects.filter(occurrence_key__in=list(keys)).values("occurrence_key", "session_id", "source")
    )
    per_key = Counter(message["occurrence_key"] for message in messages)
    assert max(per_key.values(), default=1) == 1, per_key.most_common(3)
    missing = set(delivered) - set(per_key)
    assert not missing, f"delivered runs without an inbox message: {sorted(missing)[:5]}"
    by_id = {loop.loop_id: loop for loop in loops}
    for message in messages:
        run = delivered.get(message["occurrence_key"])
        if run is None:
            # Delivered to the host, not yet recorded: only a run still in flight may be like that.
            open_run = next(r for r in all_runs if r.occurrence_key == message["occurrence_key"])
            assert open_run.status in OPEN_STATUSES, describe(open_run.loop_id, until)
            continue
        assert message["source"]["run_id"] == run.run_id, message
        assert message["session_id"] == by_id[run.loop_id].session_id, f"delivered to the wrong inbox: {message}"

    # 1. Per loop: consecutive runs leave no gap that `missed` does not account for, and no grid
    # point before `until` was dropped (claimed or folded).
    by_loop = defaultdict(list)
    for run in all_runs:
        by_loop[run.loop_id].append(run)
    for loop in loops:
        period = timedelta(seconds=loop.every_seconds)
        previous = loop.created_at
        for run in by_loop[loop.loop_id]:
            assert run.scheduled_at - previous == period * (1 + run.missed), (
                "a gap that missed does not account for: " + describe(loop.loop_id, until)
            )
            previous = run.scheduled_at
        assert until - previous <= period, "a due occurrence was dropped: " + describe(loop.loop_id, until)
        # 5. No burst: nothing older than one period is ever claimed.
        late = [run for run in by_loop[loop.loop_id] if run.claimed_at - run.scheduled_at >= period]
        assert not late, "claimed a period or more late (a burst): " + describe(loop.loop_id, until)

    # 4. `running` exactly while one occurrence is in flight.
    open_per_loop = Counter(run.loop_id for run in all_runs if run.status in OPEN_STATUSES)
    assert max(open_per_loop.values(), default=1) == 1, open_per_loop.most_common(3)
    for loop in Loop.objects.filter(loop_id__in=loop_ids):
        in_flight = open_per_loop[loop.loop_id] == 1
        assert (loop.state == LoopState.RUNNING) == in_flight, (
            f"state {loop.state} with {open_per_loop[loop.loop_id]} run(s) in flight: " + describe(loop.loop_id, until)
        )

    missed = sum(run.missed for run in runs)
    if not allow_missed:
        assert missed == 0, f"{missed} occurrences folded"
    return Tally(
        delivered=len(runs),
        missed=missed,
        redriven=sum(run.attempt > 1 for run in all_runs),
        in_flight=sum(run.status in OPEN_STATUSES for run in later),
    )


def delivered_per_scheduler(outputs: list[str]) -> list[Counter]:
    """Per scheduler log: how often it recorded each occurrence as delivered (its clock's log lines)."""
    import re

    line = re.compile(r"loop=(\S+) scheduled=(\S+) outcome=delivered")
    return [Counter(match.groups() for match in line.finditer(output)) for output in outputs]


# -- operators racing the schedulers (test_operate_race.py) ----------------------------------------


def open_run_overlaps(loop_ids: list[str]) -> dict[str, int]:
    """Loops that have more than one run open right now. One statement, so one consistent snapshot
    of the database: sampled while the scenario runs, it sees the moment two runs are in flight."""
    return dict(
        LoopRun.objects.filter(loop_id__in=loop_ids, status__in=OPEN_STATUSES)
        .values_list("loop_id")
        .annotate(n=Count("run_id"))
        .filter(n__gt=1)
    )


def delivered_prompt(text: str) -> str:
    """The prompt a delivered message carries (contract §7: parsing gives it back byte for byte)."""
    from xml.etree import ElementTree

    return ElementTree.fromstring(text).findtext("prompt")


def check_runs_against_inbox(loop_ids: list[str]) -> list[LoopRun]:
    """For loops whose runs are all over: one run per occurrence key, one inbox message per
    delivered run (naming it, in the inbox of the session it resolved, carrying the prompt the run
    recorded) and no message for a run that was not delivered. Returns the runs."""
    runs = list(LoopRun.objects.filter(loop_id__in=loop_ids).order_by("loop_id", "claimed_at", "run_id"))
    still_open = [run.occurrence_key for run in runs if run.status in OPEN_STATUSES]
    assert not still_open, f"runs still open: {still_open[:5]}"
    keys = Counter(run.occurrence_key for run in runs)
    assert max(keys.values(), default=1) == 1, f"an occurrence key used twice: {keys.most_common(3)}"
    messages = list(
        InboxMessage.objects.filter(source__loop_id__in=loop_ids).values(
            "occurrence_key", "session_id", "source", "text"
        )
    )
    per_key = Counter(message["occurrence_key"] for message in messages)
    assert max(per_key.values(), default=1) == 1, f"an occurrence delivered twice: {per_key.most_common(3)}"
    by_key = {run.occurrence_key: run for run in runs}
    delivered = {key for key, run in by_key.items() if run.status == "delivered"}
    missing = delivered - set(per_key)
    assert not missing, f"delivered runs without an inbox message: {sorted(missing)[:5]}"
    stray = set(per_key) - delivered
    assert not stray, "inbox messages of runs not delivered: " + "; ".join(
        f"{key} ({by_key[key].status if key in by_key else 'no run'})" for key in sorted(stray)[:5]
    )
    wrong = []
    for message in messages:
        run = by_key[message["occurrence_key"]]
        if message["source"]["run_id"] != run.run_id or message["session_id"] != run.target_session_id:
            wrong.append(f"{run.occurrence_key}: message {message['source']} in {message['session_id']}")
        elif delivered_prompt(message["text"]) != run.prompt:
            wrong.append(
                f"{run.occurrence_key} (revision {run.revision}): delivered {delivered_prompt(message['text'])!r}, "
                f"the run records {run.prompt!r}"
            )
    assert not wrong, f"{len(wrong)} message(s) that do not match their run: " + "; ".join(wrong[:5])
    return runs


def runs_in_flight_together(runs: list[LoopRun]) -> list[str]:
    """Pairs of runs of one loop that were provably open at the same moment.

    A run's claim has committed before its `started_at` is read (a worker starts what a committed
    claim enqueued), and its outcome commits after its `finished_at` is read: so the run was open
    over [started_at, finished_at] at least, and two such spans that overlap mean two runs in
    flight at once. (Not claimed_at: a clock reads it before it waits for the loop's row.)"""
    spans = defaultdict(list)
    for run in runs:
        if run.started_at and run.finished_at:
            spans[run.loop_id].append(run)
    together = []
    for loop_runs in spans.values():
        loop_runs.sort(key=lambda run: run.started_at)
        latest = None  # the run that finishes last so far
        for run in loop_runs:
            if latest is not None and run.started_at < latest.finished_at:
                together.append(
                    f"{latest.occurrence_key} [{latest.started_at:%H:%M:%S.%f}, {latest.finished_at:%H:%M:%S.%f}] and "
                    f"{run.occurrence_key} [{run.started_at:%H:%M:%S.%f}, {run.finished_at:%H:%M:%S.%f}]"
                )
            if latest is None or run.finished_at > latest.finished_at:
                latest = run
    return together


def state_mismatches(loop_ids: list[str]) -> dict[str, str]:
    """Loops whose state contradicts their runs right now (one statement, one snapshot): `running`
    with no run open (stuck: no clock claims it again) or `scheduled` with one open (a clock may
    claim a second). A paused loop may have a run in flight; it finishes."""
    from django.db.models import Exists, OuterRef, Q

    busy = LoopRun.objects.filter(loop_id=OuterRef("loop_id"), status__in=OPEN_STATUSES)
    return dict(
        Loop.objects.filter(loop_id__in=loop_ids)
        .annotate(busy=Exists(busy))
        .filter(Q(state=LoopState.RUNNING, busy=False) | Q(state=LoopState.SCHEDULED, busy=True))
        .values_list("loop_id", "state")
    )
