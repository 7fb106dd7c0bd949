"""core.bulk: one statement for many rows, on both engines. On PostgreSQL a column with one value
in every row is bound once; the rows written must not show it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from core.bulk import insert_rows, update_rows
from loops.models import LoopRun, RunStatus
from scheduler.rows import NEW_RUN_COLUMNS as COLUMNS
from scheduler.rows import NewRun
from sessions_app.models import InboxMessage
from tests.conftest import T0

pytestmark = pytest.mark.django_db


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

    inserted = insert_rows(LoopRun, COLUMNS, [["run_x", *row(0)[1:]], row(1)], skip_conflicts=True)

    assert inserted == {"run_1"}  # run_x holds run_0's occurrence key
    assert [values[0] for values in stored()] == ["run_0", "run_1"]


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
    columns = (
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
        return (name, session_id, "text", True, "next_turn", {}, key or name, T0, place)

    def numbers() -> dict[str, int]:
        return dict(InboxMessage.objects.values_list("message_id", "seq"))

    count_on = ("seq", "session_id")
    insert_rows(InboxMessage, columns, [message("a1", "ses_a", 1), message("a2", "ses_a", 2)], count_on=count_on)
    inserted = insert_rows(
        InboxMessage,
        columns,
        # One session alone (a constant on PostgreSQL), one whose key is taken already (skipped).
        [message("b1", "ses_b", 1), message("dup", "ses_a", 1, key="a1"), message("a3", "ses_a", 2)],
        skip_conflicts=True,
        count_on=count_on,
    )

    assert inserted == {"b1", "a3"}
    assert numbers()["a1"] == 1 and numbers()["a2"] == 2 and numbers()["b1"] == 1
    # After the highest: on PostgreSQL the skipped row's place is left unused (a gap, which paging
    # does not mind); SQLite inserts one row after the other, each after the highest.
    assert numbers()["a3"] == (4 if connection.vendor == "postgresql" else 3)
