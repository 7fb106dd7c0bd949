"""An inbox message whose number (`seq`) is taken is refused, never lost (sessions_app.services
inbox_deliver_many over core.bulk.insert_rows): only a second delivery of one occurrence is skipped.

The writers of a session's inbox take its lock, so a seq is taken twice only by a writer that does
not (a bug, a hand-made INSERT). On PostgreSQL such a writer's uncommitted row makes the delivery's
INSERT wait, then conflict on (session_id, seq) once it commits: the case is real concurrency, with
two connections. SQLite serializes writers, so it cannot arise there.
"""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from sessions_app.models import InboxMessage
from sessions_app.services import inbox_deliver_many
from tests.processes import wait_for
from tests.sessions_app.test_inbox_commit_order import message, waits_for_a_lock


@pytest.mark.django_db(transaction=True)
def test_a_delivery_whose_seq_another_writer_took_fails_rather_than_dropping_its_message():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serializes writers: no INSERT can wait for another writer's row")
    errors: list[BaseException] = []
    pid: list[int] = []

    def deliver() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            inbox_deliver_many([message("ses_a")])
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            connection.close()

    with transaction.atomic():  # a writer without the session's lock holds seq 1, uncommitted
        InboxMessage.objects.create(
            message_id="msg_rogue",
            session_id="ses_a",
            text="t",
            delivery="next_turn",
            source={},
            occurrence_key="rogue",
            created_at=timezone.now(),
            seq=1,
        )
        deliverer = threading.Thread(target=deliver)
        deliverer.start()
        wait_for(lambda: pid and waits_for_a_lock(pid[0]), timeout=30, message="the delivery to wait for seq 1")
    deliverer.join(30)

    assert [type(error) for error in errors] == [IntegrityError], errors
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == ["msg_rogue"]
