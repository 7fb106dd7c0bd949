"""Operators racing for one loop (contract §9), each client a thread with its own database
connection, on the real clock: edits, pauses and resumes, run now, deletes.

What the record must show: the audit trail ordered by time is the order in which the changes were
made (their revisions, each `edited` event's old value the previous one's new value, pause and
resume alternating); the manual runs of one loop never overlap in time; of ten deletes one
deletes the loop and records it, the others answer unknown_loop. On PostgreSQL the loop's row lock
orders the writers; on SQLite its IMMEDIATE transactions do.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from itertools import pairwise

import pytest
from django.db import connection

from core.timeutil import to_ms
from loops.models import EventKind, Loop, LoopEvent, LoopRun
from scheduler.delivery import deliver_runs
from tests.conftest import ApiClient, create_loop, error_of, every

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = 10
ROUNDS = 4


def concurrently(work: Callable[[int], None], *, clients: int = CLIENTS) -> None:
    """work(i) in `clients` threads released together; each thread's queries use its own connection."""
    start = threading.Barrier(clients)
    failures: list[str] = []

    def client(index: int) -> None:
        try:
            start.wait(30)
            work(index)
        except BaseException:
            failures.append(traceback.format_exc())
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a client thread hangs"
    assert not failures, failures[0]


def patch(client: ApiClient, loop_id: str, body: dict):
    return client.client.patch(
        f"/api/loops/{loop_id}", data=json.dumps(body), content_type="application/json", headers=client.headers()
    )


def trail(client: ApiClient, loop_id: str) -> list[dict]:
    """The loop's events as the API orders them (by time), oldest first."""
    response = client.get(f"/api/loops/{loop_id}/events", limit=500)
    assert response.status_code == 200, response.content
    return response.json()["events"][::-1]


@pytest.fixture
def target(make_session) -> str:
    make_session("ses_target", status="idle")
    return "ses_target"


def test_the_trail_of_concurrent_edits_and_pauses_in_time_order_is_the_order_they_were_made(manage_token, target):
    loop = create_loop(every(60), target=target, prompt="p0")
    answers: list[tuple] = []  # list.append is atomic across threads

    def operate(index: int) -> None:
        client = ApiClient(manage_token)
        for n in range(ROUNDS):
            edited = patch(client, loop.loop_id, {"prompt": f"p{index}.{n}", "name": f"n{index}.{n}"})
            answers.append(("edit", edited.status_code))
            action = "pause" if (index + n) % 2 else "resume"
            answers.append((action, client.post(f"/api/loops/{loop.loop_id}/{action}").status_code))

    concurrently(operate)

    expected = {("edit", 200): CLIENTS * ROUNDS, ("pause", 200): CLIENTS * ROUNDS // 2}
    assert Counter(answers) == {**expected, ("resume", 200): CLIENTS * ROUNDS // 2}, Counter(answers)
    events = trail(ApiClient(manage_token), loop.loop_id)
    assert events[0]["kind"] == "created"

    now = {"prompt": "p0", "name": None}
    paused, chain = False, []
    for event in events[1:]:
        if event["kind"] == "edited":
            for field, (old, new) in event["changes"].items():
                if old != now[field]:
                    chain.append(f"r{event['revision']} {field}: old {old!r}, the previous new {now[field]!r}")
                now[field] = new
        else:
            # Pause and resume are idempotent: each recorded one changed the state.
            if (event["kind"] == "paused") == paused:
                chain.append(f"r{event['revision']} {event['kind']} at {event['at']} while paused={paused}")
            paused = event["kind"] == "paused"
    assert not chain, f"{len(chain)} event(s) out of order: " + "; ".join(chain[:5])
    edits = [event for event in events if event["kind"] == "edited"]
    assert [event["revision"] for event in edits] == list(range(2, CLIENTS * ROUNDS + 2))
    revisions = [event["revision"] for event in events]
    assert revisions == sorted(revisions), revisions
    # By time as by commit: the ids are handed out in the order the writers held the loop's lock.
    committed = LoopEvent.objects.filter(loop_id=loop.loop_id).order_by("id")
    assert [(event["kind"], event["revision"], event["at"]) for event in events] == [
        (row.kind, row.revision, to_ms(row.at)) for row in committed
    ]

    final = Loop.objects.get(loop_id=loop.loop_id)
    assert (final.prompt, final.name or None, final.revision) == (now["prompt"], now["name"], CLIENTS * ROUNDS + 1)
    assert (final.state == "paused") == paused
    if paused:
        assert to_ms(final.paused_at) == [event["at"] for event in events if event["kind"] == "paused"][-1]


def test_concurrent_run_now_with_edits_claims_each_run_after_the_previous_one_finished(manage_token, target):
    loop = create_loop(every(3600), target=target, prompt="p0")
    answers: list[tuple] = []  # list.append is atomic across threads

    def operate(index: int) -> None:
        client = ApiClient(manage_token)
        for n in range(ROUNDS):
            response = client.post(f"/api/loops/{loop.loop_id}/run")
            answers.append(("run", response.status_code))
            if response.status_code == 202:
                # The embedded host delivers in this thread: the run is finished when this returns.
                assert deliver_runs([response.json()["run_id"]]) == 1
            else:
                assert error_of(response)["code"] == "run_in_flight", response.content
            answers.append(("edit", patch(client, loop.loop_id, {"prompt": f"p{index}.{n}"}).status_code))

    concurrently(operate)

    answers = Counter(answers)
    assert answers["run", 202] >= 2 and answers["edit", 200] == CLIENTS * ROUNDS, answers
    runs = list(LoopRun.objects.filter(loop_id=loop.loop_id).order_by("claimed_at", "scheduled_at"))
    assert len(runs) == answers["run", 202] and all(run.status == "delivered" for run in runs)
    overlaps = [
        f"{run.run_id} (r{run.revision}) claimed at {run.claimed_at:%H:%M:%S.%f}, before {previous.run_id} "
        f"(r{previous.revision}) finished at {previous.finished_at:%H:%M:%S.%f}"
        for previous, run in pairwise(runs)
        if run.claimed_at < previous.finished_at
    ]
    assert not overlaps, f"{len(overlaps)} overlapping run(s): " + "; ".join(overlaps[:5])
    assert all(run.scheduled_at == run.claimed_at for run in runs)
    assert [run.revision for run in runs] == sorted(run.revision for run in runs)

    # Each run records the revision in force when it was claimed: claimed no earlier than the edit
    # that made that revision, and no later than the next edit.
    edited_at = {
        event.revision: event.at
        for event in LoopEvent.objects.filter(loop_id=loop.loop_id, kind__in=[EventKind.CREATED, EventKind.EDITED])
    }
    misplaced = [
        f"{run.run_id} r{run.revision} claimed at {run.claimed_at:%H:%M:%S.%f}"
        for run in runs
        if not edited_at[run.revision] <= run.claimed_at <= edited_at.get(run.revision + 1, run.claimed_at)
    ]
    assert not misplaced, misplaced[:5]
    # A run_now event per run, timed as its claim.
    run_now = LoopEvent.objects.filter(loop_id=loop.loop_id, kind=EventKind.RUN_NOW).order_by("id")
    assert [event.at for event in run_now] == [run.claimed_at for run in runs]


def test_of_ten_concurrent_deletes_one_deletes_the_loop_and_nine_find_it_gone(tools_token, host, target):
    loops = [create_loop(every(60), target=target) for _ in range(5)]
    answers: list[list] = [[] for _ in loops]
    rounds = [threading.Barrier(CLIENTS) for _ in loops]

    def delete(index: int) -> None:
        client = ApiClient(tools_token, target)
        for loop, together, answered in zip(loops, rounds, answers, strict=True):
            together.wait(30)  # every client at once, loop after loop
            response = client.tool("loop_delete", {"loop_id": loop.loop_id})
            ok = response.status_code == 200
            answered.append((response.status_code, response.json()["deleted"] if ok else error_of(response)["code"]))

    concurrently(delete)

    for loop, answered in zip(loops, answers, strict=True):
        assert sorted(answered) == [(200, True)] + [(404, "unknown_loop")] * (CLIENTS - 1), (loop.loop_id, answered)
        assert LoopEvent.objects.filter(loop_id=loop.loop_id, kind=EventKind.DELETED).count() == 1
    assert not Loop.objects.filter(loop_id__in=[loop.loop_id for loop in loops]).exists()
