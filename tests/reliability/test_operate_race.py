"""Operators racing the schedulers (contract §9), on PostgreSQL with real processes.

200 loops every second, two `runloops` processes, and client threads that for DSHLOOP_TEST_RACE_SECONDS
(60 s unless shortened locally) pause, resume, edit (prompt, schedule, target), run now and, rarely,
delete loops at random through the REST API. Beside them a few one-shots whose target is gone fail
every time they fire, and the clients retry them, often right after a run now of the same loop. Then everything is paused, the runs in flight finish,
the schedulers stop gracefully, and the record must show:

- no occurrence dispatched twice: one run per occurrence key, one inbox message per delivered run
  (carrying the prompt and going to the target the run recorded: a run in flight finishes with its
  old revision), never more than one run of a loop open at once (sampled while it runs, and at the end);
- nothing of a paused loop after the pause committed: no scheduled run claimed, or started and
  finished, between the pause's answer and the next resume, and nothing that fell due while paused
  delivered or counted as missed; nothing of a deleted loop claimed or delivered after the delete;
- a failed one-shot retried while a run now of it is open is refused (409 run_in_flight), so it too
  never has two runs open, nor reads `scheduled` while one is: one scheduled run per 200 retry;
- every operation in the audit trail: per loop, the events of the owner's pauses, resumes, edits and
  delete in the order they were made, with their revisions, one run_now event per 202 (a 409
  records nothing), and a revision/prompt/target history that every run agrees with.

Each loop is operated by one client thread (so it knows whether a pause changes anything); run now
is called by every thread, also on a few hot loops at once, so that clicks collide.

Times are bounds, never guesses (no timing assertion; only the client's pacing sleeps): a pause has
committed when its answer arrives, a resume not before it is called; a scheduler reads a run's
claimed_at and started_at before it looks at the loop, and its finished_at after its start
committed. The events' `at` is read once the loop's row is locked but before the change commits, so
it bounds nothing (a run may start after a pause's `at` and before that pause commits); it is
checked against the answers.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from core.timeutil import to_ms
from loops.models import Loop, LoopEvent, LoopRun, LoopState
from loops.runs import OPEN_STATUSES
from scheduler.delivery import PAUSED_FIRST
from sessions_app.models import SessionHeader
from tests.conftest import ApiClient, after, create_loop, every
from tests.processes import wait_for
from tokens.services import token_create

from .invariants import (
    check_runs_against_inbox,
    delivered_at_least,
    delivered_per_scheduler,
    open_run_overlaps,
    runs_in_flight_together,
    state_mismatches,
)

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

RACE_SECONDS = float(os.environ.get("DSHLOOP_TEST_RACE_SECONDS", "60"))
LOOPS = 200
SESSIONS = [f"ses_race_{i}" for i in range(6)]
CREATOR = SESSIONS[0]
CLIENTS = 3  # client threads, each the only one to pause, resume, edit or delete its loops
PACE = 0.04  # mean seconds between one client's calls
HOT = 4  # loops every client runs now, so that clicks on one loop collide
MAX_DELETES = 4  # per client
FAILING = 6  # one-shots whose target is gone: failed, run now and retried by every client
GONE = "ses_race_gone"
SEED = 20261130
TOKEN_NAME = "race-client"
DELETED_FIRST = "The loop was deleted before this occurrence was delivered."
NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass
class Tracked:
    """What the client knows of one loop: it alone (its owner thread) changes it, but for run now."""

    loop_id: str
    index: int
    prompt: str
    target: str
    every_seconds: int = 1
    revision: int = 1
    paused: bool = False
    paused_at_ms: int | None = None
    deleted_at: datetime | None = None  # the delete's answer arrived (it had committed)
    # revision -> (prompt, target, every_seconds): what a run of that revision must record.
    revisions: dict = field(default_factory=dict)
    # The events the owner's calls must have recorded, in order: (kind, revision).
    expected: list = field(default_factory=list)
    # Paused stretches: [the pause's answer arrived, the next resume was called (None: still paused)].
    windows: list = field(default_factory=list)
    pause_answers: list = field(default_factory=list)  # paused_at of each pause that changed something

    def __post_init__(self):
        self.revisions[1] = (self.prompt, self.target, self.every_seconds)
        self.expected.append(("created", 1))


class Client:
    """One operator client thread: its own ApiClient (and so its own database connection)."""

    def __init__(
        self,
        index: int,
        token: str,
        owned: list[Tracked],
        everyone: list[Tracked],
        hot: list[Tracked],
        failing: tuple[str, ...] = (),
    ):
        self.index = index
        self.rng = random.Random(SEED + index)
        self.api = ApiClient(token, CREATOR)
        self.owned, self.everyone, self.hot, self.failing = owned, everyone, hot, list(failing)
        self.calls = Counter()  # (operation, status) -> count
        self.run_now_ok = Counter()  # loop_id -> 202 answers
        self.manual_runs: list[dict] = []  # the RunViews of the 202 answers
        self.not_found: set[str] = set()  # loops run now answered 404 for
        self.retried = Counter()  # failing loop_id -> 200 answers to retry
        self.failing_runs: list[str] = []  # run ids of the 202 answers to run now of a failing loop
        self.unexpected: list[str] = []
        self.crash: str | None = None
        self.deletes = 0
        self.n = 0

    # -- the calls -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body or {})
        return getattr(self.api.client, method)(
            path, data=data, content_type="application/json", headers=self.api.headers()
        )

    def expect(self, ok: bool, what: str, response) -> None:
        if not ok:
            self.unexpected.append(f"{what}: {response.status_code} {response.content[:600]!r}")

    def pause(self, loop: Tracked) -> None:
        response = self.request("post", f"/api/loops/{loop.loop_id}/pause")
        answered = timezone.now()
        self.calls["pause", response.status_code] += 1
        body = response.json()
        self.expect(response.status_code == 200 and body.get("state") == "paused", f"pause {loop.loop_id}", response)
        self.expect("next_at" not in body and "paused_at" in body, f"pause {loop.loop_id} fields", response)
        if loop.paused:  # idempotent: no event, the first pause's time stays
            self.expect(body.get("paused_at") == loop.paused_at_ms, f"pause again {loop.loop_id}", response)
            return
        loop.paused, loop.paused_at_ms = True, body.get("paused_at")
        loop.windows.append([answered, None])
        loop.pause_answers.append(loop.paused_at_ms)
        loop.expected.append(("paused", loop.revision))

    def resume(self, loop: Tracked) -> None:
        called = timezone.now()
        response = self.request("post", f"/api/loops/{loop.loop_id}/resume")
        self.calls["resume", response.status_code] += 1
        body = response.json()
        ok = response.status_code == 200 and body.get("state") in ("scheduled", "running") and "paused_at" not in body
        if loop.paused:  # contract §9: the first occurrence strictly after now
            ok = ok and body.get("next_at", 0) > to_ms(called)
        self.expect(ok, f"resume {loop.loop_id}", response)
        if not loop.paused:  # idempotent: nothing to record
            return
        loop.paused, loop.paused_at_ms = False, None
        loop.windows[-1][1] = called
        loop.expected.append(("resumed", loop.revision))

    def edit(self, loop: Tracked) -> None:
        self.n += 1
        prompt, target, every_seconds = loop.prompt, loop.target, loop.every_seconds
        change = self.rng.choices(["prompt", "schedule", "session_id"], weights=[2, 1, 1])[0]
        if change == "prompt":
            # XML specials and a CR: the delivered text must give it back byte for byte.
            prompt = f"race {loop.index} edit {self.index}.{self.n} <&> \r ünï"
            body = {"prompt": prompt}
        elif change == "schedule":
            every_seconds = 3 - every_seconds  # 1 <-> 2
            body = {"schedule": every(every_seconds)}
        else:
            target = self.rng.choice([session for session in SESSIONS if session != target])
            body = {"session_id": target}
        response = self.request("patch", f"/api/loops/{loop.loop_id}", body)
        self.calls["edit", response.status_code] += 1
        answer = response.json()
        ok = response.status_code == 200 and answer["revision"] == loop.revision + 1
        ok = ok and (answer["prompt"], answer["session_id"], answer["schedule"]) == (
            prompt,
            target,
            every(every_seconds),
        )
        ok = ok and (answer["state"] == "paused") == loop.paused
        self.expect(ok, f"edit {loop.loop_id} {body}", response)
        if response.status_code != 200:
            return
        loop.revision, loop.prompt, loop.target, loop.every_seconds = answer["revision"], prompt, target, every_seconds
        loop.revisions[loop.revision] = (prompt, target, every_seconds)
        loop.expected.append(("edited", loop.revision))

    def run_now(self, loop: Tracked) -> None:
        response = self.request("post", f"/api/loops/{loop.loop_id}/run")
        self.calls["run_now", response.status_code] += 1
        if response.status_code == 202:
            run = response.json()
            ok = run["manual"] is True and run["occurrence_key"] == f"{loop.loop_id}@manual:{run['run_id']}"
            self.expect(ok, f"run now {loop.loop_id}", response)
            self.run_now_ok[loop.loop_id] += 1
            self.manual_runs.append(run)
        elif response.status_code == 409:
            self.expect(response.json()["error"]["code"] == "run_in_flight", f"run now {loop.loop_id}", response)
        elif response.status_code == 404:
            # Only a loop its owner deleted meanwhile (checked at the end against the deletes).
            self.expect(response.json()["error"]["code"] == "unknown_loop", f"run now {loop.loop_id}", response)
            self.not_found.add(loop.loop_id)
        else:
            self.expect(False, f"run now {loop.loop_id}", response)

    def retry(self, loop_id: str) -> None:
        """Retry a failing one-shot, half the time right after a run now of it (the run now's run is
        usually still open then): a retry must never schedule the loop beside an open run."""
        if self.rng.random() < 0.5:
            response = self.request("post", f"/api/loops/{loop_id}/run")
            self.calls["run_now failing", response.status_code] += 1
            if response.status_code == 202:
                self.failing_runs.append(response.json()["run_id"])
            else:
                self.expect(
                    response.status_code == 409 and response.json()["error"]["code"] == "run_in_flight",
                    f"run now {loop_id}",
                    response,
                )
        response = self.request("post", f"/api/loops/{loop_id}/retry")
        body = response.json()
        if response.status_code == 200:
            self.calls["retry", 200] += 1
            self.retried[loop_id] += 1
            self.expect(body["state"] == "scheduled" and "next_at" in body, f"retry {loop_id}", response)
            return
        code = body.get("error", {}).get("code")
        self.calls[f"retry {code}", response.status_code] += 1
        # not_failed: another client's retry came first (it is scheduled, or its run is going).
        self.expect(
            response.status_code == 409 and code in ("run_in_flight", "not_failed"), f"retry {loop_id}", response
        )

    def delete(self, loop: Tracked) -> None:
        response = self.api.tool("loop_delete", {"loop_id": loop.loop_id})
        answered = timezone.now()
        self.calls["delete", response.status_code] += 1
        self.expect(
            response.status_code == 200 and response.json()["deleted"] is True, f"delete {loop.loop_id}", response
        )
        if response.status_code == 200:
            loop.deleted_at = answered
            loop.expected.append(("deleted", loop.revision))
            self.owned.remove(loop)
            self.deletes += 1

    # -- the thread ------------------------------------------------------------------------------

    def step(self) -> None:
        rng = self.rng
        operation = rng.choices(
            ["pause", "resume", "edit", "run_now", "delete", "retry"], weights=[24, 24, 24, 27, 1, 10]
        )[0]
        if operation == "retry":
            self.retry(rng.choice(self.failing))
        elif operation == "run_now":
            pool = self.hot if rng.random() < 0.3 else self.everyone
            self.run_now(rng.choice(pool))
        elif operation == "delete":
            if self.deletes < MAX_DELETES and len(self.owned) > 1:
                self.delete(rng.choice([loop for loop in self.owned if loop not in self.hot] or self.owned))
        else:
            getattr(self, operation)(rng.choice(self.owned))

    def run(self, deadline: float) -> None:
        try:
            while time.monotonic() < deadline:
                self.step()
                time.sleep(self.rng.uniform(0, 2 * PACE))  # pacing only: nothing waits for a condition
        except BaseException:
            self.crash = traceback.format_exc()
        finally:
            connections.close_all()  # this thread's connection


class Monitor(threading.Thread):
    """Samples, one consistent snapshot at a time, whether any loop has two runs open, or a state
    that contradicts its runs."""

    def __init__(self, loop_ids: list[str]):
        super().__init__(daemon=True)
        self.loop_ids = loop_ids
        self.halt = threading.Event()
        self.samples = 0
        self.overlaps: list[tuple[datetime, dict]] = []
        self.mismatches: list[tuple[datetime, dict]] = []
        self.crash: str | None = None

    def run(self) -> None:
        try:
            while not self.halt.wait(0.05):
                overlaps = open_run_overlaps(self.loop_ids)
                if overlaps:
                    self.overlaps.append((timezone.now(), overlaps))
                mismatches = state_mismatches(self.loop_ids)
                if mismatches:
                    self.mismatches.append((timezone.now(), mismatches))
                self.samples += 1
        except BaseException:
            self.crash = traceback.format_exc()
        finally:
            connections.close_all()


def test_operators_racing_two_schedulers_for_a_minute(schedulers, make_session):
    """Pause, edit, resume and run now at random against two schedulers."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serializes every writer, so nothing races there")
    for session in SESSIONS:
        make_session(session, status="idle")
    token = token_create(name=TOKEN_NAME, scopes=["manage", "tools"])[1]
    schedulers.start_ready(2)
    tracked = []
    for i in range(LOOPS):
        loop = create_loop(every(1), target=SESSIONS[i % len(SESSIONS)], created_by=CREATOR, prompt=f"race {i}")
        tracked.append(Tracked(loop.loop_id, i, loop.prompt, loop.session_id))
    by_id = {loop.loop_id: loop for loop in tracked}
    loop_ids = list(by_id)
    failing = failing_one_shots(make_session)
    # Warm: every loop delivered once, and every failing one-shot failed, before the operators start.
    wait_for(lambda: delivered_at_least(tracked, 1), timeout=60, interval=0.2, message="a first delivery per loop")
    wait_for(lambda: all_failed(failing), timeout=60, interval=0.2, message="the one-shots to fail")

    monitor = Monitor(loop_ids + failing)
    monitor.start()
    hot = tracked[:HOT]
    clients = [Client(i, token, tracked[i::CLIENTS], tracked, hot, tuple(failing)) for i in range(CLIENTS)]
    deadline = time.monotonic() + RACE_SECONDS
    threads = [threading.Thread(target=client.run, args=(deadline,), daemon=True) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_SECONDS + 60)
        assert not thread.is_alive(), "a client thread hangs"

    # Stop: pause what is left, so that no occurrence is claimed any more; let the runs in flight
    # finish (a scheduled one not yet started is skipped) and the last retries fail, then stop the
    # schedulers gracefully.
    closer = Client(CLIENTS, token, [], tracked, [])
    for loop in tracked:
        if loop.deleted_at is None:
            closer.pause(loop)
    wait_for(
        lambda: (
            not LoopRun.objects.filter(loop_id__in=loop_ids + failing, status__in=OPEN_STATUSES).exists()
            and all_failed(failing)
        ),
        timeout=60,
        interval=0.2,
        message="the runs in flight to finish",
    )
    monitor.halt.set()
    monitor.join(30)
    for scheduler in schedulers.started:
        assert scheduler.running(), scheduler.output()[-3000:]
        assert scheduler.terminate() < 15
    connections.close_all()

    clients.append(closer)
    report = Counter()
    for client in clients:
        assert client.crash is None, client.crash
        report.update(client.calls)
    assert monitor.crash is None, monitor.crash
    unexpected = [answer for client in clients for answer in client.unexpected]
    assert not unexpected, f"{len(unexpected)} unexpected answer(s): " + "; ".join(unexpected[:5])
    deleted = {loop.loop_id for loop in tracked if loop.deleted_at is not None}

    # 1. Nothing twice, and never two runs of one loop in flight.
    assert monitor.samples > 0
    assert not monitor.overlaps, f"two runs of one loop open at once: {monitor.overlaps[:3]}"
    assert not monitor.mismatches, f"a loop's state contradicts its runs: {monitor.mismatches[:3]}"
    runs = check_runs_against_inbox(loop_ids)
    together = runs_in_flight_together(runs)
    assert not together, f"{len(together)} time(s) two runs of one loop in flight: " + "; ".join(together[:3])
    for loop in Loop.objects.filter(loop_id__in=loop_ids):
        assert loop.state == LoopState.PAUSED and loop.next_at is None, (loop.loop_id, loop.state, loop.next_at)
        # No lost update: the last edit of each field is what the loop holds.
        known = by_id[loop.loop_id]
        assert (loop.revision, loop.prompt, loop.session_id, loop.every_seconds) == (
            known.revision,
            known.prompt,
            known.target,
            known.every_seconds,
        ), loop.loop_id
    assert Loop.objects.filter(loop_id__in=loop_ids).count() == LOOPS - len(deleted)

    check_revisions(runs, by_id, deleted)
    check_pauses_and_deletes(runs, by_id)
    events = check_trail(clients, tracked, runs, deleted)
    check_retries(clients, failing)

    # It really raced: each operation often, both kinds of run-now answer, both schedulers at work.
    for operation in ("pause", "resume", "edit", "run_now"):
        assert report[operation, 200 if operation != "run_now" else 202] >= RACE_SECONDS, report
    assert report["run_now", 409] > 0, report
    # Retries raced run now: some went through, some were refused for the run now they followed.
    assert report["retry", 200] > 0 and report["retry run_in_flight", 409] > 0, report
    workers = [sum(counts.values()) for counts in delivered_per_scheduler([s.output() for s in schedulers.started])]
    assert all(workers), workers
    # What the race exercised (printed with -s): how often an edit of the prompt or target landed
    # between a claim and its start, the claim-to-start latency, the answers and the runs.
    tight = {
        loop_id: [
            event.at for event in trail if event.kind == "edited" and {"prompt", "session_id"} & set(event.changes)
        ]
        for loop_id, trail in events.items()
    }
    started = [run for run in runs if run.started_at]
    edited_in_flight = sum(any(run.claimed_at < at < run.started_at for at in tight[run.loop_id]) for run in started)
    latency = sorted((run.started_at - run.claimed_at).total_seconds() for run in started)
    print(
        f"\nrace {RACE_SECONDS:.0f} s: answers {dict(sorted(report.items()))}",
        f"runs {dict(Counter((run.status, 'manual' if run.manual else 'scheduled') for run in runs))}",
        f"delivered per scheduler {workers}; loops deleted {len(deleted)}; open-run samples {monitor.samples}",
        f"prompt/target edits between a claim and its start {edited_in_flight}",
        f"claim to start: median {latency[len(latency) // 2]:.3f} s, max {latency[-1]:.3f} s",
        sep="\n  ",
    )


def failing_one_shots(make_session) -> list[str]:
    """One-shots due at once whose target session is gone by the time they fire: each of their
    runs fails for good, so each leaves its loop `failed` (retryable, spec §4) again."""
    make_session(GONE, status="idle")  # loop_create checks that the target exists
    loop_ids = [
        create_loop(after(2), target=GONE, created_by=CREATOR, prompt=f"failing {i}").loop_id for i in range(FAILING)
    ]
    SessionHeader.objects.filter(session_id=GONE).delete()
    return loop_ids


def all_failed(loop_ids: list[str]) -> bool:
    return Loop.objects.filter(loop_id__in=loop_ids, state=LoopState.FAILED).count() == len(loop_ids)


def check_retries(clients: list[Client], failing: list[str]) -> None:
    """A failing one-shot ran once when it fell due and once per 200 retry, each run failed, never
    two at once; a manual run for every 202 run now; one retried and one run_now event per answer."""
    runs = list(LoopRun.objects.filter(loop_id__in=failing))
    assert {run.status for run in runs} == {"failed"}, Counter(run.status for run in runs)
    together = runs_in_flight_together(runs)
    assert not together, f"{len(together)} time(s) two runs of a failing loop in flight: " + "; ".join(together[:3])
    retried, manual = Counter(), sorted(run_id for client in clients for run_id in client.failing_runs)
    for client in clients:
        retried.update(client.retried)
    scheduled = Counter(run.loop_id for run in runs if not run.manual)
    assert scheduled == Counter({loop_id: 1 + retried[loop_id] for loop_id in failing}), (scheduled, retried)
    assert sorted(run.run_id for run in runs if run.manual) == manual
    trail = Counter(
        LoopEvent.objects.filter(loop_id__in=failing, kind__in=["retried", "run_now"]).values_list("loop_id", "kind")
    )
    run_now = Counter(run.loop_id for run in runs if run.manual)
    expected = {(loop_id, "retried"): retried[loop_id] for loop_id in failing} | {
        (loop_id, "run_now"): run_now[loop_id] for loop_id in failing
    }
    assert +trail == +Counter(expected), (trail, expected)


def check_revisions(runs: list[LoopRun], by_id: dict[str, Tracked], deleted: set[str]) -> None:
    """Every run records the prompt and target of the revision it executed, and was delivered there
    (a run in flight finishes with its old revision); only the pause and the delete stop a run."""
    wrong = []
    for run in runs:
        loop = by_id[run.loop_id]
        prompt, target, _ = loop.revisions.get(run.revision, (None, None, None))
        if (run.prompt, run.target) != (prompt, target):
            wrong.append(f"{run.occurrence_key} r{run.revision}: {run.prompt!r} → {run.target}, expected {prompt!r}")
        elif run.status == "delivered" and run.target_session_id != run.target:
            wrong.append(f"{run.occurrence_key} r{run.revision} for {run.target} went to {run.target_session_id}")
        if run.status == "skipped":
            # Claimed before a pause, skipped at its start; or due and not yet claimed when a pause, a
            # new schedule or target, or the delete came (loops.services.unclaimed): never started.
            assert (run.manual, run.started_at) == (False, None), run.__dict__
            assert run.error == PAUSED_FIRST or left_unclaimed(run), run.__dict__
        elif run.status == "failed":
            # Only a run claimed before its loop was deleted may fail: the embedded host is always up.
            assert run.loop_id in deleted and run.error == DELETED_FIRST, run.__dict__
    assert not wrong, f"{len(wrong)} run(s) disagree with their revision: " + "; ".join(wrong[:5])


def left_unclaimed(run: LoopRun) -> bool:
    """A run recorded for due occurrences an operator's change left unclaimed (a scheduler had not
    reached them yet): at the change, never handed to a driver."""
    return run.error.startswith("Not delivered: ") and " and the loop was " in run.error and run.attempt == 0


def check_pauses_and_deletes(runs: list[LoopRun], by_id: dict[str, Tracked]) -> None:
    """Nothing of a paused loop after the pause committed and before a resume, nothing that fell due
    while it was paused; nothing of a deleted loop after the delete committed.

    The bounds are sound: a clock reads claimed_at, and a worker started_at, before it looks at the
    loop, and finished_at is read after the start committed; a pause has committed when its answer
    arrives, a resume not before it is called. So a scheduled run claimed inside a paused stretch,
    or started and finished inside it, saw the loop paused: a violation, never an artefact of timing.
    (The events' `at`, read under the loop's lock but before the change commits, is no such bound.)"""
    violations = []
    for run in runs:
        loop = by_id[run.loop_id]
        if loop.deleted_at is not None:  # manual runs too: run now answers 404 once it is deleted
            if run.claimed_at > loop.deleted_at:
                violations.append(f"{run.occurrence_key} claimed at {run.claimed_at}, deleted at {loop.deleted_at}")
            if run.started_at and run.started_at > loop.deleted_at and run.status == "delivered":
                violations.append(f"{run.occurrence_key} started after the delete at {loop.deleted_at}, delivered")
        if run.manual:  # run now works on paused loops
            continue
        period = timedelta(seconds=loop.revisions[run.revision][2])
        # The first occurrence this run stands for. A run recorded for occurrences an operator's change
        # left unclaimed counts itself in `missed` (loops.services.unclaimed); any other counts the
        # occurrences folded into it.
        folded = run.missed - 1 if run.status == "skipped" and left_unclaimed(run) else run.missed
        earliest = run.scheduled_at - period * folded
        for start, resumed in loop.windows:
            end, paused = resumed or NEVER, f"paused {start:%H:%M:%S.%f}..{resumed and f'{resumed:%H:%M:%S.%f}'}"
            if start < run.claimed_at < end:
                violations.append(f"{run.occurrence_key} claimed at {run.claimed_at:%H:%M:%S.%f}, {paused}")
            if run.started_at and start < run.started_at and run.finished_at < end:
                violations.append(
                    f"{run.occurrence_key} ({run.status}) started at {run.started_at:%H:%M:%S.%f} and finished at "
                    f"{run.finished_at:%H:%M:%S.%f}, {paused}"
                )
            if start < earliest <= end:
                violations.append(
                    f"{run.occurrence_key} (missed {run.missed}) stands for {earliest:%H:%M:%S.%f}, {paused}"
                )
    assert not violations, f"{len(violations)} violation(s): " + "; ".join(violations[:5])


def check_trail(clients: list[Client], tracked: list[Tracked], runs: list[LoopRun], deleted: set[str]) -> dict:
    """The audit trail: per loop, every change the client made, in order, with its revision and (a
    pause) the time its answer showed; one run_now event per 202 (a 409 records nothing); nothing
    else. Returns the events per loop."""
    run_now_ok = Counter()
    for client in clients:
        run_now_ok.update(client.run_now_ok)
    events = defaultdict(list)
    for event in LoopEvent.objects.filter(loop_id__in=[loop.loop_id for loop in tracked]).order_by("id"):
        events[event.loop_id].append(event)
    errors = []
    for loop in tracked:
        trail = events[loop.loop_id]
        changes = [(event.kind, event.revision) for event in trail if event.kind != "run_now"]
        if changes != loop.expected:
            errors.append(f"{loop.loop_id}: recorded {changes}, made {loop.expected}")
        run_now = sum(event.kind == "run_now" for event in trail)
        if run_now != run_now_ok[loop.loop_id]:
            errors.append(f"{loop.loop_id}: {run_now} run_now events for {run_now_ok[loop.loop_id]} runs")
        paused_at = [to_ms(event.at) for event in trail if event.kind == "paused"]
        if paused_at != loop.pause_answers:
            errors.append(f"{loop.loop_id}: paused events at {paused_at}, the answers said {loop.pause_answers}")
        # The operator API names its token; the tools name the calling session (create, delete).
        actors = {
            (event.kind, event.actor_kind, event.actor_id if event.actor_kind == "session" else TOKEN_NAME)
            for event in trail
        }
        expected = {("created", "session", CREATOR), ("deleted", "session", CREATOR)}
        if {actor for actor in actors if actor not in expected} - {
            (kind, "token", TOKEN_NAME) for kind in ("paused", "resumed", "edited", "run_now")
        }:
            errors.append(f"{loop.loop_id}: actors {actors}")
    assert not errors, f"{len(errors)} loop(s) whose trail is not what was done: " + "; ".join(errors[:5])
    # Run now: a manual run for every 202, and none without one; 404 only once the loop was deleted.
    manual = sorted(run.run_id for run in runs if run.manual)
    assert sorted(run["run_id"] for client in clients for run in client.manual_runs) == manual
    not_found = {loop_id for client in clients for loop_id in client.not_found}
    assert not_found <= deleted, f"run now answered 404 for loops never deleted: {not_found - deleted}"
    return events
