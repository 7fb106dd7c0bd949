"""Concurrent PUT /api/host/sessions/{id} (contract §5: an upsert; at most one global_interface).

Every caller gets the answer a sequential run would give it: a PUT that claims global_interface
moves the flag to its session (as one after the other does), and a new session written by many
callers at once is created by one of them and updated by the others. Each thread has its own
database connection and a barrier starts them together; on PostgreSQL these raced to 500s.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client

from sessions_app.models import SessionHeader
from sessions_app.services import session_headers_cache

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Answer:
    status: int
    body: dict | None
    raw: bytes


def put_all(token: str, calls: list[tuple[str, dict]]) -> list[Answer]:
    """Send the PUTs at once, one thread (and connection) each; the answers in the calls' order."""
    start = threading.Barrier(len(calls))
    answers: list[Answer | None] = [None] * len(calls)
    errors: list[BaseException] = []

    def put(index: int, session_id: str, body: dict) -> None:
        # A 500 is an answer to report, not an exception to raise in this thread.
        client = Client(raise_request_exception=False)
        try:
            start.wait(10)
            response = client.put(
                f"/api/host/sessions/{session_id}",
                data=json.dumps(body),
                content_type="application/json",
                headers={"Authorization": f"Bearer {token}"},
            )
            is_json = response.get("Content-Type", "").startswith("application/json")
            answers[index] = Answer(response.status_code, response.json() if is_json else None, response.content)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=put, args=(i, *call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert all(answer is not None for answer in answers), "a PUT did not answer within 60 s"
    return answers  # type: ignore[return-value]


def assert_all_200(answers: list[Answer]) -> None:
    statuses = Counter(answer.status for answer in answers)
    assert statuses == {200: len(answers)}, [(a.status, a.raw[:200]) for a in answers if a.status != 200]


def test_ten_sessions_claiming_the_global_interface_at_once_all_get_it_in_turn(host_token):
    """Claiming moves the flag (sequential PUTs do so), so each claim is a 200 that was true when it
    committed, and the last to commit holds it: the one whose updated_at is newest."""
    SessionHeader.objects.create(session_id="ses_holder", global_interface=True, updated_at="2025-01-01T00:00Z")
    claimers = [f"ses_claim_{i}" for i in range(10)]
    # Half are new sessions, half known ones: the insert and the update both move the flag.
    for session_id in claimers[5:]:
        SessionHeader.objects.create(session_id=session_id, updated_at="2025-01-01T00:00Z")

    answers = put_all(host_token, [(session_id, {"global_interface": True}) for session_id in claimers])

    assert_all_200(answers)
    assert [(a.body["session_id"], a.body["global_interface"]) for a in answers] == [(s, True) for s in claimers]
    holders = list(SessionHeader.objects.filter(global_interface=True))
    assert len(holders) == 1
    (holder,) = holders
    claimed = SessionHeader.objects.filter(session_id__in=claimers)
    assert claimed.count() == len(claimers)
    assert holder.session_id in claimers
    # The claims were serialized: the holder is the last claim, the newest of them.
    assert holder.updated_at == max(claimed.values_list("updated_at", flat=True))


def test_claims_and_releases_of_the_global_interface_at_once_leave_at_most_one(host_token):
    """A PUT that sets global_interface false on the holder races the claims: still only 200s,
    and at most one global interface after (none if the release committed last)."""
    SessionHeader.objects.create(session_id="ses_holder", global_interface=True, updated_at="2025-01-01T00:00Z")
    calls = [(f"ses_claim_{i}", {"global_interface": True}) for i in range(6)]
    calls += [("ses_holder", {"global_interface": False, "status": "running"})] * 2
    calls += [(f"ses_claim_{i}", {"global_interface": False}) for i in range(2)]

    answers = put_all(host_token, calls)

    assert_all_200(answers)
    assert SessionHeader.objects.filter(global_interface=True).count() <= 1
    assert SessionHeader.objects.get(session_id="ses_holder").global_interface is False


def test_twelve_clients_writing_one_new_session_all_get_200_and_one_row(host_token):
    """An upsert: one caller creates the session, the others update it; the row ends as one
    caller wrote it (every caller sends every field, so no mix of two callers can remain)."""
    bodies = [
        {"user_title": f"client {i}", "status": "running", "preset": f"preset{i}", "model": f"model{i}"}
        for i in range(12)
    ]

    answers = put_all(host_token, [("ses_new", body) for body in bodies])

    assert_all_200(answers)
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.body["session_id"] == "ses_new"
        assert (answer.body["title"], answer.body["preset"], answer.body["model"]) == (
            body["user_title"],
            body["preset"],
            body["model"],
        )
    rows = list(SessionHeader.objects.filter(session_id="ses_new").values("user_title", "preset", "model", "status"))
    assert len(rows) == 1
    assert rows[0] in bodies


def test_host_header_refreshes_listing_sessions_in_other_orders_do_not_deadlock():
    """Two refreshes of a host's cached headers at once, with the same sessions in opposite orders
    (a host lists newest first, and that order changes between calls): both complete."""
    base = datetime(2025, 6, 2, tzinfo=UTC)
    ids = [f"ses_cached_{i:03}" for i in range(300)]
    SessionHeader.objects.bulk_create(SessionHeader(session_id=i, updated_at=base) for i in ids)
    errors: list[BaseException] = []

    def refresh(order: list[str], rounds: int, start: threading.Barrier) -> None:
        try:
            for round_ in range(rounds):
                start.wait(10)
                at = base + timedelta(seconds=round_)
                session_headers_cache(headers=[SessionHeader(session_id=i, updated_at=at) for i in order])
        except BaseException as exc:
            errors.append(exc)
            start.abort()
        finally:
            connection.close()

    start = threading.Barrier(2)
    threads = [threading.Thread(target=refresh, args=(order, 20, start)) for order in (ids, list(reversed(ids)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert SessionHeader.objects.count() == len(ids)
