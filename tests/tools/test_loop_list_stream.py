"""How a whole loop_list is read and encoded at 100,000 loops: streamed in
chunks (selectors.loop_row_chunks), instants read as integers from PostgreSQL's epoch, the cycle
collector paused while the rows live. None of it may show: the answer is the same JSON, and a
cursor still holds Unix epoch microseconds."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core import signing
from django.db import connection
from django.utils import timezone

from core.timeutil import to_ms
from loops.models import Loop, LoopState
from loops.presenters import LOOP_VIEW_COLUMNS, ROW_EPOCH_US, loop_list_json, loop_list_json_of_chunks, loop_views
from loops.selectors import ROW_EPOCH, loop_list, loop_row_chunks, loop_rows
from tests.tools.test_loop_list_paging import bulk_loops, ids, page


def whole_list():
    return loop_list(scope="global")


def test_the_streamed_chunks_are_the_rows_of_the_list_in_order(api):
    bulk_loops(2_345)
    chunks = list(loop_row_chunks(whole_list(), columns=LOOP_VIEW_COLUMNS, size=100))
    assert all(0 < len(chunk) <= 100 for chunk in chunks)
    assert [row for chunk in chunks for row in chunk] == loop_rows(whole_list(), columns=LOOP_VIEW_COLUMNS)


def test_an_empty_list_streams_no_chunk_and_encodes_as_an_empty_list(api):
    assert list(loop_row_chunks(whole_list(), columns=LOOP_VIEW_COLUMNS)) == []
    assert list(loop_row_chunks(Loop.objects.none(), columns=LOOP_VIEW_COLUMNS)) == []
    now = timezone.now()
    assert loop_list_json_of_chunks([], now=now) == b'{"loops":[]}'
    assert loop_list_json_of_chunks([[], []], now=now, next_cursor="c") == b'{"loops":[],"next_cursor":"c"}'


def test_the_whole_list_answer_is_the_rows_encoded_in_one_piece(api):
    bulk_loops(2_345)
    now = timezone.now()
    rows = loop_rows(whole_list(), columns=LOOP_VIEW_COLUMNS)
    streamed = loop_list_json_of_chunks(loop_row_chunks(whole_list(), columns=LOOP_VIEW_COLUMNS, size=333), now=now)
    assert streamed == loop_list_json(rows, now=now)
    assert json.loads(streamed) == {"loops": loop_views(rows, now=now)}
    assert ids(page(api, {"session_id": "global"})["loops"]) == [row[0] for row in rows]


@pytest.mark.django_db(transaction=True)
def test_a_stream_closed_early_leaves_the_connection_usable(api):
    # Autocommit, as a request runs: psycopg cancels the rest of the statement (or reads it out).
    bulk_loops(2_345)
    chunks = loop_row_chunks(whole_list(), columns=LOOP_VIEW_COLUMNS, size=10)
    assert len(next(chunks)) == 10
    chunks.close()
    assert Loop.objects.exclude(state=LoopState.COMPLETED).count() == len(loop_rows(whole_list(), columns=["loop_id"]))


@pytest.mark.parametrize(
    "field, moment",
    [
        ("created_at", datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)),
        ("created_at", datetime(1999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)),  # just before the rows' epoch
        ("created_at", datetime(2000, 1, 1, tzinfo=UTC)),
        ("created_at", datetime(2025, 6, 2, 10, 0, 0, 999_600, tzinfo=UTC)),  # SQLite's strftime made it 10:00:01
        ("next_at", datetime(2000, 1, 1, 0, 0, 0, 999, tzinfo=UTC)),
        ("next_at", datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)),
        ("last_run_at", datetime(2255, 6, 5, 23, 47, 34, 740_992, tzinfo=UTC)),  # 2^53 µs after 1970
    ],
)
def test_instants_far_from_the_rows_epoch_are_listed_exactly(api, field, moment):
    (loop,) = bulk_loops(1)
    Loop.objects.filter(loop_id=loop.loop_id).update(**{field: moment})
    body = page(api, {"session_id": "global"})
    assert body["loops"][0][field] == to_ms(moment)
    chunks = loop_row_chunks(whole_list(), columns=LOOP_VIEW_COLUMNS)
    assert json.loads(loop_list_json_of_chunks(chunks, now=timezone.now()))["loops"][0][field] == to_ms(moment)


def test_a_cursor_holds_unix_epoch_microseconds_as_before(api):
    # Cursors outlive a deployment: whatever the rows count from, a cursor's instants stay Unix µs.
    loops = bulk_loops(5)
    first = Loop.objects.get(loop_id=page(api, {"session_id": "global", "limit": 1})["loops"][0]["loop_id"])
    cursor = page(api, {"session_id": "global", "limit": 1})["next_cursor"]
    key = signing.Signer(salt="dshloop.loop_list.cursor").unsign_object(cursor)
    unix_us = lambda moment: (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)  # noqa: E731
    assert key[2:] == [unix_us(first.next_at), unix_us(first.created_at), first.loop_id]
    rest = page(api, {"session_id": "global", "limit": 10, "cursor": cursor})["loops"]
    assert [first.loop_id] + ids(rest) == ids(page(api, {"session_id": "global"})["loops"]) and len(rest) == len(
        loops
    ) - 1


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_is_paused_only_while_a_list_is_encoded(api, enabled):
    rows = loop_rows(whole_list(), columns=LOOP_VIEW_COLUMNS)
    seen = []

    def chunks():
        seen.append(gc.isenabled())
        yield rows

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        loop_list_json_of_chunks(chunks(), now=timezone.now())
        assert seen == [False]
        assert gc.isenabled() is enabled  # left as it was, a collector someone else paused too
    finally:
        (gc.enable if was else gc.disable)()


def test_rows_are_read_without_django_making_datetimes(api):
    # The point of reading instants as integers; on PostgreSQL in binary, on SQLite computed.
    bulk_loops(3)
    for row in loop_rows(whole_list(), columns=LOOP_VIEW_COLUMNS):
        assert all(isinstance(value, int) for value in row[-3:] if value is not None), (connection.vendor, row)


def test_the_reader_and_the_presenter_count_from_the_same_epoch():
    unix = datetime(1970, 1, 1, tzinfo=UTC)
    assert ROW_EPOCH_US == (ROW_EPOCH - unix) // timedelta(microseconds=1) == 946_684_800 * 10**6
