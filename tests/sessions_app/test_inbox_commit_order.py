"""The inbox cursor follows commit order (contract §5): a host that pages
GET /api/host/sessions/{id}/inbox?after=<last>&limit= sees every message once, also when two
writers deliver to one session at the same time and the one that started first commits last.

On SQLite writers take the database lock when their transaction begins (IMMEDIATE), so a second
writer cannot commit while the first one's transaction is open: the interleaving exists on
PostgreSQL only.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.request
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from core.timeutil import truncate_to_ms
from sessions_app.models import InboxMessage
from sessions_app.services import inbox_deliver_many, session_upsert
from tests.conftest import create_loop, every
from tests.processes import wait_for
from tests.reliability.invariants import delivered_per_scheduler

SQLITE_SERIALIZES = (
    "SQLite begins every write transaction IMMEDIATE (one writer at a time), so a message cannot "
    "commit while an earlier writer's transaction is open: the interleaving exists on PostgreSQL only"
)


def message(session_id: str) -> tuple:
    key = f"loop_1@{secrets.token_hex(6)}"
    source = {"kind": "loop", "loop_id": "loop_1", "run_id": "run_1", "occurrence_key": key, "scheduled_at": 0}
    return (session_id, "text", source, key, "next_turn")


def page_through(host_api, session_id: str, after: str | None) -> list[str]:
    """What a polling host receives from `after` on, 50 at a time."""
    seen = []
    while True:
        params = {"limit": 50, **({"after": after} if after else {})}
        response = host_api.get(f"/api/host/sessions/{session_id}/inbox", **params)
        assert response.status_code == 200, response.content
        page = [m["message_id"] for m in response.json()["messages"]]
        if not page:
            return seen
        seen += page
        after = page[-1]


def waits_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.django_db(transaction=True)
def test_a_message_committed_after_a_later_one_is_still_paged_after_it(host_api):
    """Writer 1 delivers first (earlier created_at) and commits last; a poller pages between the two
    commits. It must still receive writer 1's message on its next page."""
    if connection.vendor == "sqlite":
        pytest.skip(SQLITE_SERIALIZES)
    session_upsert(session_id="ses_a", changes={})
    t0 = truncate_to_ms(timezone.now())
    delivered: dict[str, str] = {}
    pids: dict[str, int] = {}
    errors: list[BaseException] = []
    first_written, release_first = threading.Event(), threading.Event()

    def writer(name: str, at, *, written=None, release=None) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pids[name] = cursor.fetchone()[0]
            with transaction.atomic():
                [delivered[name]] = inbox_deliver_many([message("ses_a")], now=at)
                if written:
                    written.set()
                if release:
                    assert release.wait(30), "never released"
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(
        target=writer, args=("first", t0), kwargs={"written": first_written, "release": release_first}
    )
    first.start()
    try:
        assert first_written.wait(30), errors
        second = threading.Thread(target=writer, args=("second", t0 + timedelta(seconds=1)))
        second.start()
        # The second writer has committed, or it waits for the first one's lock: either way the
        # poller now pages while the first writer's message is written and not yet committed.
        wait_for(
            lambda: not second.is_alive() or ("second" in pids and waits_for_a_lock(pids["second"])),
            timeout=30,
            message="the second writer to commit or to wait for the first",
        )
        seen = page_through(host_api, "ses_a", None)
    finally:
        release_first.set()
        first.join(30)
    second.join(30)
    assert not errors, errors
    seen += page_through(host_api, "ses_a", seen[-1] if seen else None)

    assert seen == [delivered["first"], delivered["second"]], (seen, delivered)


SESSIONS = [f"ses_poll_{i}" for i in range(3)]
LOOPS = 150  # every second, spread over SESSIONS: ~50 messages a second per inbox
LOAD_SECONDS = 10


class Poller(threading.Thread):
    """A host polling one session's inbox over HTTP as a DSH host would: after=<last>&limit=50."""

    def __init__(self, base_url: str, token: str, session_id: str):
        super().__init__(daemon=True)
        self.url = f"{base_url}/api/host/sessions/{session_id}/inbox"
        self.token = token
        self.seen: list[str] = []
        self.polls = 0
        self.halt = threading.Event()
        self.crash: BaseException | None = None

    def page(self) -> list[str]:
        after = f"&after={self.seen[-1]}" if self.seen else ""
        request = urllib.request.Request(
            f"{self.url}?limit=50{after}", headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            page = [m["message_id"] for m in json.load(response)["messages"]]
        self.polls += 1
        self.seen += page
        return page

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                if not self.page():
                    time.sleep(0.002)
            while self.page():  # the rest, once nothing is written any more
                pass
        except BaseException as exc:
            self.crash = exc


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_two_schedulers_and_a_polling_host_every_message_seen_once(schedulers, make_session, live_server, host_token):
    """Two real `runloops` deliver a loop wave every second to a few sessions while a host pages
    each inbox over HTTP; at the end each poller has seen every message of its inbox exactly once."""
    if connection.vendor == "sqlite":
        pytest.skip(SQLITE_SERIALIZES)
    for session in SESSIONS:
        make_session(session, status="idle")
    schedulers.start_ready(2)
    pollers = [Poller(live_server.url, host_token, session) for session in SESSIONS]
    for poller in pollers:
        poller.start()
    [
        create_loop(every(1), target=SESSIONS[i % len(SESSIONS)], created_by=SESSIONS[0], prompt=f"poll {i}").loop_id
        for i in range(LOOPS)
    ]
    time.sleep(LOAD_SECONDS)
    for scheduler in schedulers.started:
        assert scheduler.running(), scheduler.output()[-3000:]
        assert scheduler.terminate() < 15
    for poller in pollers:
        poller.halt.set()
        poller.join(60)
        assert not poller.is_alive() and poller.crash is None, poller.crash

    messages = 0
    for session, poller in zip(SESSIONS, pollers, strict=True):
        stored = list(InboxMessage.objects.filter(session_id=session).values_list("message_id", flat=True))
        twice = [message_id for message_id, count in Counter(poller.seen).items() if count > 1]
        missed = set(stored) - set(poller.seen)
        assert not twice, f"{session}: {len(twice)} message(s) received twice"
        assert not missed, f"{session}: {len(missed)} of {len(stored)} message(s) never received"
        assert set(poller.seen) == set(stored)
        messages += len(stored)
    # It was a real race: both schedulers delivered, the pollers kept up while they did.
    workers = [sum(counts.values()) for counts in delivered_per_scheduler([s.output() for s in schedulers.started])]
    assert all(workers), workers
    assert messages >= LOOPS * (LOAD_SECONDS // 2), messages
    assert all(poller.polls > 100 for poller in pollers), [poller.polls for poller in pollers]
