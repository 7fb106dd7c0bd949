"""Paging a session's inbox (contract §10): GET /api/host/sessions/{id}/inbox?after=<message_id>&limit=."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from core.timeutil import truncate_to_ms
from scheduler.retention import prune
from sessions_app.api import inbox_messages
from sessions_app.models import InboxMessage
from sessions_app.services import inbox_deliver_many, session_upsert
from tests.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db

INBOX = "/api/host/sessions/ses_a/inbox"


def deliver(session_id: str, count: int, *, at) -> list[str]:
    """`count` messages delivered together (one created_at), in the inbox in the order given."""
    rows = []
    for _ in range(count):
        key = f"loop_1@{secrets.token_hex(6)}"
        source = {"kind": "loop", "loop_id": "loop_1", "run_id": "run_1", "occurrence_key": key, "scheduled_at": 0}
        rows.append((session_id, "text", source, key, "next_turn"))
    return inbox_deliver_many(rows, now=at)


@pytest.fixture
def inbox() -> list[str]:
    """ses_a's message IDs in inbox order: three deliveries, several messages sharing each instant."""
    session_upsert(session_id="ses_a", changes={})
    session_upsert(session_id="ses_b", changes={})
    t0 = truncate_to_ms(timezone.now()) - timedelta(minutes=10)
    ids = []
    for minute, count in ((0, 3), (1, 1), (2, 4)):
        ids += deliver("ses_a", count, at=t0 + timedelta(minutes=minute))
        deliver("ses_b", 1, at=t0 + timedelta(minutes=minute))
    return ids


def listed(host_api, **params) -> list[str]:
    response = host_api.get(INBOX, **params)
    assert response.status_code == 200, response.content
    return [message["message_id"] for message in response.json()["messages"]]


def test_without_after_or_limit_the_whole_inbox_oldest_first_as_before(host_api, inbox):
    assert listed(host_api) == inbox


def test_limit_alone_gives_the_oldest_messages(host_api, inbox):
    assert listed(host_api, limit=2) == inbox[:2]
    assert listed(host_api, limit=1000) == inbox


def test_after_gives_only_the_messages_after_it(host_api, inbox):
    for index, message_id in enumerate(inbox):
        assert listed(host_api, after=message_id) == inbox[index + 1 :], index


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
def test_paging_with_after_and_limit_visits_every_message_once_in_order(host_api, inbox, limit):
    seen, after = [], None
    while True:
        page = listed(host_api, limit=limit, **({"after": after} if after else {}))
        assert len(page) <= limit
        if not page:
            break
        seen += page
        after = page[-1]
    assert seen == inbox


def test_messages_delivered_after_a_page_appear_on_the_next_one(host_api, inbox):
    last = listed(host_api)[-1]
    [new] = deliver("ses_a", 1, at=timezone.now())
    assert listed(host_api, after=last) == [new]


def test_an_unknown_after_is_422_and_says_to_list_from_the_start(host_api, inbox):
    response = host_api.get(INBOX, after="msg_nope")
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "after")
    assert "expired" in error["message"] and "without 'after'" in error["message"]


def test_another_sessions_message_as_after_is_422(host_api, inbox):
    other = inbox_messages("ses_b").first().message_id
    error = error_of(host_api.get(INBOX, after=other))
    assert (error["code"], error["field"]) == ("invalid_input", "after")


def test_an_expired_after_is_422(host_api, inbox, settings):
    settings.DSHLOOP_INBOX_RETENTION_DAYS = 1
    [old] = deliver("ses_a", 1, at=timezone.now() - timedelta(days=2))
    assert listed(host_api, after=inbox[-1]) == [old]
    prune(now=timezone.now())

    error = error_of(host_api.get(INBOX, after=old))
    assert (error["code"], error["field"]) == ("invalid_input", "after")
    assert listed(host_api) == inbox


def test_the_inbox_is_in_delivery_order_not_created_at_order(host_api, inbox):
    """A message that committed after the others comes after them even with an earlier created_at
    (it was taken before its transaction committed): a host paging with `after` still gets it."""
    last = listed(host_api)[-1]
    [late] = deliver("ses_a", 1, at=timezone.now() - timedelta(hours=1))
    assert listed(host_api, after=last) == [late]
    assert listed(host_api) == [*inbox, late]


def test_numbers_follow_each_session_and_a_redelivery_adds_nothing(inbox):
    """Each session's messages are numbered from 1 in delivery order; an occurrence delivered twice
    keeps its first message, and the next message is numbered after the highest."""
    assert list(inbox_messages("ses_a").values_list("seq", flat=True)) == list(range(1, len(inbox) + 1))
    assert list(inbox_messages("ses_b").values_list("seq", flat=True)) == [1, 2, 3]
    first = InboxMessage.objects.get(message_id=inbox[0])
    again = (first.session_id, first.text, first.source, first.occurrence_key, first.delivery)
    assert inbox_deliver_many([again]) == [first.message_id]
    [new] = deliver("ses_a", 1, at=timezone.now())
    assert InboxMessage.objects.get(message_id=new).seq == len(inbox) + 1
    assert inbox_messages("ses_a", after=inbox[-1]).get().message_id == new


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"after": "msg\x00"}, "after"),
        ({"after": ""}, "after"),
    ],
)
def test_bad_parameters_are_422_with_the_field(host_api, inbox, params, field):
    response = host_api.get(INBOX, **params)
    assert response.status_code == 422, response.content
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", field)


def test_an_unknown_session_is_still_404(host_api, inbox):
    response = host_api.get("/api/host/sessions/ses_nobody/inbox", after=inbox[0])
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_the_inbox_needs_scope_host(tools_token, manage_token, inbox):
    assert ApiClient(None).get(INBOX, limit=1).status_code == 401
    assert error_of(ApiClient(tools_token).get(INBOX, limit=1))["code"] == "forbidden"
    assert error_of(ApiClient(manage_token).get(INBOX, limit=1))["code"] == "forbidden"


def test_the_route_documents_paging(host_api):
    response = host_api.get("/api/openapi.json")
    operation = response.json()["paths"]["/api/host/sessions/{session_id}/inbox"]["get"]
    assert {parameter["name"] for parameter in operation["parameters"]} >= {"after", "limit"}
    assert "after" in operation["description"] and "expire" in operation["description"]


def test_a_page_is_an_index_range_from_the_anchor(inbox):
    """inbox_session_seq (session_id, seq) bounds the page at the anchor's seq, so a page deep in a
    long inbox does not read the messages before it."""
    page = inbox_messages("ses_a", after=inbox[3], limit=2)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")  # the test table is tiny
            plan = page.explain()
        assert "inbox_session_seq" in plan
        assert "seq >" in plan.split("inbox_session_seq", 1)[1].split("Filter", 1)[0], plan
    else:
        plan = page.explain()
        # SQLite keeps the unique constraint in the table's definition: its index is an autoindex.
        assert re.search(r"USING INDEX \S+ \(session_id=\? AND seq>\?\)", plan), plan
