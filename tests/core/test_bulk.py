"""core.bulk: one statement for many rows, on both engines. On PostgreSQL a column with one value
in every row is bound once; the rows written must not show it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from core.bulk import insert_rows, update_rows
from loops.models import LoopRun, RunStatus
from scheduler.rows import NEW_RUN_COLUMNS as COLUMNS
from scheduler.rows import NewRun
from sessions_app.models import InboxMessage
from tests.conftest import T0

pytestmark = pytest.mark.django_db


ON_KEY = ("occurrence_key",)
INBOX_COLUMNS = (
    "message_id",
    "session_id",
    "text",
    "wakeup",
    "delivery",
    "source",
    "occurrence_key",
    "created_at",
    "seq",
)


def message(name: str, session_id: str, place: int, key: str | None = None) -> tuple:
    """An inbox message's row in INBOX_COLUMNS' order: its place (or seq) last."""
    return (name, session_id, "text", True, "next_turn", {}, key or name, T0, place)


def row(i: int, *, retry_at=None, error: str = "") -> list:
    run = NewRun(
        *(f"run_{i}", "loop_a", f"loop_a@{i}", T0 + timedelta(seconds=i), RunStatus.CLAIMED, 1, i % 2, "self"),
        claimed_at=T0,
        retry_at=retry_at,
        revision=1,
        error=error,
    )
    return [getattr(run, name) for name in COLUMNS]


def stored() -> list[tuple]:
    return list(LoopRun.objects.order_by("run_id").values_list(*COLUMNS))


@pytest.mark.parametrize("count", [1, 3])
def test_rows_with_shared_and_varying_columns_are_inserted_as_given(count):
    rows = [row(i, error="same" if i else "first") for i in range(count)]

    assert insert_rows(LoopRun, COLUMNS, rows) == {f"run_{i}" for i in range(count)}

    assert stored() == [tuple(values) for values in rows]


def test_insert_skipping_conflicts_returns_only_the_new_keys():
    insert_rows(LoopRun, COLUMNS, [row(0)])

    inserted = insert_rows(LoopRun, COLUMNS, [["run_x", *row(0)[1:]], row(1)], skip_conflicts_on=ON_KEY)

    assert inserted == {"run_1"}  # run_x holds run_0's occurrence key
    assert [values[0] for values in stored()] == ["run_0", "run_1"]


def test_insert_skipping_occurrence_key_conflicts_raises_on_another_unique_key():
    """Only the named key's conflicts are skipped: a row that breaks another unique constraint (here
    the primary key, with an occurrence key of its own) is refused, not dropped as if written."""
    insert_rows(LoopRun, COLUMNS, [row(0)])

    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(LoopRun, COLUMNS, [["run_0", "loop_a", "loop_a@new", *row(1)[3:]]], skip_conflicts_on=ON_KEY)

    assert [values[:3] for values in stored()] == [("run_0", "loop_a", "loop_a@0")]


def test_an_inbox_message_whose_seq_is_taken_raises_instead_of_vanishing():
    """A (session_id, seq) collision is a bug to surface: skipped, the message would be lost and
    its caller (sessions_app.services.inbox_deliver_many) would not find the ID it wrote."""
    insert_rows(InboxMessage, INBOX_COLUMNS, [message("a1", "ses_a", 1)])

    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(InboxMessage, INBOX_COLUMNS, [message("a2", "ses_a", 1)], skip_conflicts_on=ON_KEY)

    assert list(InboxMessage.objects.values_list("message_id", "seq")) == [("a1", 1)]


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="SQLite numbers one row after the other")
def test_two_rows_of_one_batch_numbered_alike_raise_on_postgresql():
    """count_on's numbers come from the rows' places: two rows of a session given one place would
    take one seq. On PostgreSQL that is one statement, which must fail whole, not drop a message."""
    batch = [message("a1", "ses_a", 1), message("a2", "ses_a", 1)]

    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(InboxMessage, INBOX_COLUMNS, batch, skip_conflicts_on=ON_KEY, count_on=("seq", "session_id"))

    assert not InboxMessage.objects.exists()


def test_the_skipped_key_must_be_a_unique_key_of_the_model():
    with pytest.raises(AssertionError, match="no unique key"):
        insert_rows(InboxMessage, INBOX_COLUMNS, [message("a1", "ses_a", 1)], skip_conflicts_on=("session_id",))


def test_update_sets_each_row_its_own_values_shared_or_not():
    insert_rows(LoopRun, COLUMNS, [row(i) for i in range(3)])

    later = T0 + timedelta(minutes=1)
    update_rows(
        LoopRun,
        ("status", "retry_at", "error"),
        [["run_0", RunStatus.DELIVERED, None, ""], ["run_2", RunStatus.DELIVERED, later, "late"]],
    )

    fields = [COLUMNS.index(name) for name in ("run_id", "status", "retry_at", "error", "claimed_at")]
    assert [tuple(values[i] for i in fields) for values in stored()] == [
        ("run_0", RunStatus.DELIVERED, None, "", T0),
        ("run_1", RunStatus.CLAIMED, None, "", T0),
        ("run_2", RunStatus.DELIVERED, later, "late", T0),
    ]


def test_count_on_numbers_each_group_on_from_its_highest_also_past_a_skipped_row():
    """InboxMessage.seq's way (sessions_app.services.inbox_deliver_many): each row gives its place
    in its group within the batch; it is stored after the group's highest number."""
    columns = INBOX_COLUMNS

    def numbers() -> dict[str, int]:
        return dict(InboxMessage.objects.values_list("message_id", "seq"))

    count_on = ("seq", "session_id")
    insert_rows(InboxMessage, columns, [message("a1", "ses_a", 1), message("a2", "ses_a", 2)], count_on=count_on)
    inserted = insert_rows(
        InboxMessage,
        columns,
        # One session alone (a constant on PostgreSQL), one whose key is taken already (skipped).
        [message("b1", "ses_b", 1), message("dup", "ses_a", 1, key="a1"), message("a3", "ses_a", 2)],
        skip_conflicts_on=ON_KEY,
        count_on=count_on,
    )

    assert inserted == {"b1", "a3"}
    assert numbers()["a1"] == 1 and numbers()["a2"] == 2 and numbers()["b1"] == 1
    # After the highest: on PostgreSQL the skipped row's place is left unused (a gap, which paging
    # does not mind); SQLite inserts one row after the other, each after the highest.
    assert numbers()["a3"] == (4 if connection.vendor == "postgresql" else 3)
