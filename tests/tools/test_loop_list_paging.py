"""loop_list paging and the list serializer (contract §3: limit, cursor, next_cursor).

Paged or whole, a list is the same loops in the same order (next_at, absent last; created_at;
loop_id); a cursor only continues the list it came from; and the rows-based serializer behind
lists (loops.presenters.loop_views over selectors.loop_rows) answers exactly what loop_view
answers for a loop, in every state and schedule kind.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import anyio
import pytest
import time_machine
from django.core import signing
from django.db import connections
from django.utils import timezone
from mcp import Client

from loops.models import Loop, LoopState
from loops.presenters import LOOP_VIEW_COLUMNS, OVERDUE_AFTER, loop_list_json, loop_view, loop_views
from loops.schemas import LoopListOut, LoopView
from loops.selectors import loop_list, loop_rows
from panel.queries import target_session_choices
from tests.conftest import T0, create_loop, error_of, every
from tools.mcp.server import build_server

EVERY_HOUR = every(3600)


def page(api, body: dict, *, session_id: str | None = None) -> dict:
    response = api.tool("loop_list", body, session_id=session_id)
    assert response.status_code == 200, response.content
    return response.json()


def ids(views: list[dict]) -> list[str]:
    return [view["loop_id"] for view in views]


def all_pages(api, body: dict, *, limit: int, session_id: str | None = None) -> list[list[str]]:
    """Every page of a list, first to last, following next_cursor; checks each page's size."""
    pages, request = [], {**body, "limit": limit}
    while True:
        answer = page(api, request, session_id=session_id)
        assert set(answer) <= {"loops", "next_cursor"}
        pages.append(ids(answer["loops"]))
        if "next_cursor" not in answer:
            assert len(pages[-1]) <= limit
            return pages
        assert len(pages[-1]) == limit  # a page short of the limit is the last one
        request = {**request, "cursor": answer["next_cursor"]}


def bulk_loops(count: int, *, session_id: str = "ses_caller", prefix: str = "loop_p") -> list[Loop]:
    """`count` loops with many ties: 7 next_at values (every 10th loop has none), 3 created_at
    values, states that lists show (and every 50th completed, which they leave out)."""
    loops = []
    for i in range(count):
        state = LoopState.COMPLETED if i % 50 == 49 else [LoopState.SCHEDULED, LoopState.RUNNING][i % 2]
        untimed = i % 10 == 3 or state == LoopState.COMPLETED
        loops.append(
            Loop(
                loop_id=f"{prefix}{i:05d}",
                prompt=f"prompt {i}",
                kind="every",
                every_seconds=3600,
                session_id=session_id,
                created_by_session_id="ses_caller",
                created_at=T0 + timedelta(milliseconds=i % 3),
                next_at=None if untimed else T0 + timedelta(hours=1, minutes=i % 7),
                state=state,
            )
        )
    Loop.objects.bulk_create(loops)
    return loops


def expected_order(loops: list[Loop]) -> list[str]:
    """contract §3, worked out here rather than by the database (the IDs share one prefix and
    differ in zero-padded digits, which every collation orders alike)."""
    active = [loop for loop in loops if loop.state != LoopState.COMPLETED]
    key = lambda loop: (loop.next_at is None, loop.next_at or T0, loop.created_at, loop.loop_id)  # noqa: E731
    return [loop.loop_id for loop in sorted(active, key=key)]


# --- paging gives exactly the whole list ------------------------------------------------------------


def test_pages_of_1000_are_the_whole_list_in_order_without_repeats(api):
    loops = bulk_loops(2_345)
    whole = ids(page(api, {"session_id": "global"})["loops"])
    assert whole == expected_order(loops)
    pages = all_pages(api, {"session_id": "global"}, limit=1000)
    assert [len(p) for p in pages] == [1000, 1000, len(whole) - 2000]
    paged = [loop_id for p in pages for loop_id in p]
    assert paged == whole and len(set(paged)) == len(paged)


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 10, 41, 1000])
def test_small_pages_cross_ties_and_the_loops_without_next_at(api, limit):
    # 45 loops: pages end inside groups that share next_at and created_at (loop_id decides), and on
    # the way from the loops with a next_at to those without.
    loops = bulk_loops(45)
    paged = [loop_id for p in all_pages(api, {"session_id": "global"}, limit=limit) for loop_id in p]
    assert paged == expected_order(loops)


def test_a_full_last_page_has_no_next_cursor(api):
    bulk_loops(6, prefix="loop_f")  # 6 loops, none completed
    assert [len(p) for p in all_pages(api, {"session_id": "global"}, limit=3)] == [3, 3]
    assert "next_cursor" not in page(api, {"session_id": "global", "limit": 1000})


def test_without_limit_there_is_no_next_cursor(api):
    bulk_loops(30)
    assert set(page(api, {"session_id": "global"})) == {"loops"}


def test_an_empty_list_pages_as_one_empty_page(api):
    assert page(api, {"session_id": "global", "limit": 5}) == {"loops": []}


def test_a_cursor_survives_the_deletion_of_its_loop(api):
    loops = bulk_loops(12, prefix="loop_d")
    first = page(api, {"session_id": "global", "limit": 4})
    Loop.objects.filter(loop_id=first["loops"][-1]["loop_id"]).delete()
    rest = all_pages(api, {"session_id": "global", "cursor": first["next_cursor"]}, limit=4)
    assert ids(first["loops"]) + [loop_id for p in rest for loop_id in p] == expected_order(loops)


def test_loops_created_after_the_cursor_position_show_up_on_later_pages(api):
    with time_machine.travel(T0, tick=False):
        early = [create_loop(every(60 + i), target="ses_caller").loop_id for i in range(3)]
        first = page(api, {"session_id": "global", "limit": 2})
        late = create_loop(every(3600), target="ses_caller").loop_id
        second = page(api, {"session_id": "global", "limit": 2, "cursor": first["next_cursor"]})
    assert ids(first["loops"]) == early[:2]
    assert ids(second["loops"]) == [early[2], late] and "next_cursor" not in second


# --- session-scoped lists page too ------------------------------------------------------------------


def test_the_callers_list_pages_and_its_cursor_continues_the_same_list_by_id(api, make_session):
    make_session("ses_other")
    mine = bulk_loops(25, prefix="loop_m")
    bulk_loops(25, session_id="ses_other", prefix="loop_o")
    first = page(api, {"limit": 10})
    # {} from ses_caller and {"session_id": "ses_caller"} are one list: the cursor continues it.
    rest = all_pages(api, {"session_id": "ses_caller", "cursor": first["next_cursor"]}, limit=10)
    assert ids(first["loops"]) + [loop_id for p in rest for loop_id in p] == expected_order(mine)


def test_the_global_interfaces_list_pages_through_its_self_loops(api, global_session):
    with time_machine.travel(T0, tick=False) as clock:
        made = []
        for i in range(7):
            made.append(create_loop(every(600 + i), target="self" if i % 2 else "ses_global").loop_id)
            clock.shift(timedelta(seconds=1))
        paged = [loop_id for p in all_pages(api, {"session_id": "ses_global"}, limit=3) for loop_id in p]
    assert paged == made


# --- limit and cursor are checked -------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0, -1, 1001, True, "5", 5.0, [5]])
def test_limit_must_be_an_integer_from_1_to_1000(api, limit):
    response = api.tool("loop_list", {"session_id": "global", "limit": limit})
    assert response.status_code == 422, response.content
    assert error_of(response)["field"] == "limit"
    assert error_of(response)["code"] == "invalid_input"


@pytest.mark.parametrize("limit", [1, 1000])
def test_limit_takes_its_bounds(api, limit):
    assert page(api, {"session_id": "global", "limit": limit}) == {"loops": []}


def a_cursor(api) -> str:
    bulk_loops(5, prefix="loop_c")
    return page(api, {"session_id": "global", "limit": 2})["next_cursor"]


def cursor_error(api, body: dict, **kwargs) -> dict:
    response = api.tool("loop_list", body, **kwargs)
    assert response.status_code == 422, response.content
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_input", "cursor"), error
    return error


def test_a_cursor_needs_limit(api):
    error = cursor_error(api, {"session_id": "global", "cursor": a_cursor(api)})
    assert "needs 'limit'" in error["message"]


def forged(payload: bytes, signature: str | None = None) -> str:
    encoded = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    return encoded if signature is None else f"{encoded}:{signature}"


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "!!!:???",
        forged(b'{"after": "loop_x"}'),  # valid base64 of JSON, unsigned
        forged(b'[1,"0000000000000000",null,0,"loop_x"]', "c2lnbmF0dXJl"),  # the right shape, a made-up signature
        "é" * 20,
    ],
)
def test_a_cursor_this_server_did_not_issue_is_refused(api, cursor):
    error = cursor_error(api, {"session_id": "global", "limit": 2, "cursor": cursor})
    assert "not a next_cursor this server issued" in error["message"]


def test_a_tampered_cursor_is_refused(api):
    cursor = a_cursor(api)
    payload, signature = cursor.split(":")
    value = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    value[-1] = "loop_c00000"  # start somewhere else
    cursor_error(api, {"session_id": "global", "limit": 2, "cursor": forged(json.dumps(value).encode(), signature)})
    flipped = ("A" if payload[5] != "A" else "B").join([payload[:5], payload[6:]])
    cursor_error(api, {"session_id": "global", "limit": 2, "cursor": f"{flipped}:{signature}"})


def test_a_signed_cursor_of_another_shape_is_refused(api):
    # What a future (or past) cursor format would look like to this server.
    cursor = signing.Signer(salt="dshloop.loop_list.cursor").sign_object({"v": 2, "after": "loop_x"})
    cursor_error(api, {"session_id": "global", "limit": 2, "cursor": cursor})


@pytest.mark.parametrize(
    "other, caller", [({"session_id": "ses_caller"}, None), ({}, None), ({}, "ses_other"), ({"session_id": "x"}, None)]
)
def test_a_cursor_only_continues_the_list_it_came_from(api, make_session, other, caller):
    make_session("ses_other")
    cursor = a_cursor(api)  # from the global list
    error = cursor_error(api, {**other, "limit": 2, "cursor": cursor}, session_id=caller)
    assert "belongs to another list" in error["message"]


@pytest.mark.parametrize(
    "cursor, message", [(123, "must be a string"), ("", "must not be empty"), ("x" * 1001, "too long")]
)
def test_cursor_must_be_a_short_string(api, cursor, message):
    error = cursor_error(api, {"session_id": "global", "limit": 2, "cursor": cursor})
    assert message in error["message"]


def test_a_list_scope_error_comes_before_the_cursor(api):
    response = api.tool("loop_list", {"session_id": "self", "limit": 2, "cursor": "garbage"})
    assert response.status_code == 422
    assert error_of(response)["field"] == "session_id"


# --- MCP answers the same pages -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_mcp_loop_list_with_limit_returns_next_cursor_and_the_rest_apis_pages(api, monkeypatch):
    bulk_loops(5, prefix="loop_x")
    # In process, the tool runs in a worker thread with a connection of its own: close it after each
    # call (the server only drops old ones), or the test database could not be dropped at the end.
    monkeypatch.setattr("tools.mcp.server.close_old_connections", connections.close_all)
    server = build_server(caller_of=lambda ctx: "ses_caller")

    async def scenario():
        async with Client(server) as client:
            first = await client.call_tool("loop_list", {"session_id": "global", "limit": 3})
            second = await client.call_tool(
                "loop_list", {"session_id": "global", "limit": 3, "cursor": first.structured_content["next_cursor"]}
            )
            wrong = await client.call_tool("loop_list", {"limit": 3, "cursor": first.structured_content["next_cursor"]})
            return first, second, wrong

    first, second, wrong = anyio.run(scenario)
    for result in (first, second):
        assert not result.is_error and json.loads(result.content[0].text) == result.structured_content
    assert first.structured_content == page(api, {"session_id": "global", "limit": 3})
    assert len(first.structured_content["loops"]) == 3 and "next_cursor" in first.structured_content
    assert second.structured_content == page(
        api, {"session_id": "global", "limit": 3, "cursor": first.structured_content["next_cursor"]}
    )
    assert len(second.structured_content["loops"]) == 2 and "next_cursor" not in second.structured_content
    assert wrong.is_error and wrong.structured_content["error"]["field"] == "cursor"


# --- the rows-based serializer is loop_view ------------------------------------------------------------


@pytest.fixture
def every_kind_of_loop(api, make_session, make_preset):
    """A loop in every state a list shows, of every schedule kind, with and without the optional
    fields, some instants to the microsecond; and a completed one, which lists leave out."""
    make_preset("reviewer")
    now = timezone.now().replace(microsecond=654321)
    schedules = {
        "every": every(600),
        "after": {"kind": "after", "after_seconds": 3600},
        "cron": {"kind": "cron", "expr": "30 9 * * 1-5"},
        "cron_tz": {"kind": "cron", "expr": "0 7 * * *", "tz": "Asia/Shanghai"},
    }
    states = {
        "scheduled": {},
        "overdue": {"next_at": now - OVERDUE_AFTER - timedelta(microseconds=1)},
        "due_at_the_edge": {"next_at": now - OVERDUE_AFTER},  # exactly 30 s late: not yet overdue
        "running_late": {"state": LoopState.RUNNING, "next_at": now - timedelta(hours=1)},
        "failed": {"state": LoopState.FAILED, "next_at": None, "last_result": "failed", "last_error": "gone"},
        "paused": {"state": LoopState.PAUSED, "next_at": None, "paused_at": now, "pause_reason": "operator"},
        "delivered": {"last_run_at": now - timedelta(seconds=5, microseconds=7), "last_result": "delivered"},
        "whole_second": {"next_at": now.replace(microsecond=0) + timedelta(minutes=5)},
        "completed": {"state": LoopState.COMPLETED, "next_at": None},
    }
    made = []
    for kind, schedule in schedules.items():
        for state, changes in states.items():
            target, preset = ("new", "reviewer") if state == "delivered" else ("ses_caller", None)
            loop = create_loop(schedule, target=target, preset=preset, prompt=f'{kind} {state} ✓ "quoted"')
            Loop.objects.filter(loop_id=loop.loop_id).update(**changes)
            made.append(loop.loop_id)
    return now, made


def test_the_list_serializer_answers_what_loop_view_answers_for_every_state_and_kind(every_kind_of_loop):
    now, made = every_kind_of_loop
    rows = loop_rows(loop_list(scope="global"), columns=LOOP_VIEW_COLUMNS)
    loops = {loop.loop_id: loop for loop in Loop.objects.all()}
    listed = [row[0] for row in rows]
    assert set(listed) == {loop_id for loop_id in made if loops[loop_id].state != LoopState.COMPLETED}
    assert loop_views(rows, now=now) == [loop_view(loops[loop_id], now=now) for loop_id in listed]
    states = {view["state"] for view in loop_views(rows, now=now)}
    assert states == {"scheduled", "overdue", "running", "failed", "paused"}


def test_the_encoded_list_is_loop_list_out_with_unset_fields_omitted(every_kind_of_loop):
    now, _ = every_kind_of_loop
    rows = loop_rows(loop_list(scope="global"), columns=LOOP_VIEW_COLUMNS)
    body = json.loads(loop_list_json(rows, now=now, next_cursor="abc:def"))
    assert body == {"loops": loop_views(rows, now=now), "next_cursor": "abc:def"}
    # What the model would have answered: the same JSON, nothing unset spelled out as null.
    assert LoopListOut.model_validate(body).model_dump(mode="json", exclude_none=True) == body
    for view in body["loops"]:
        assert None not in view.values()
        LoopView.model_validate(view)


def test_the_encoded_list_spans_chunks(api):
    bulk_loops(2_345)
    rows = loop_rows(loop_list(scope="global"), columns=LOOP_VIEW_COLUMNS)
    now = timezone.now()
    assert json.loads(loop_list_json(rows, now=now)) == {"loops": loop_views(rows, now=now)}
    assert json.loads(loop_list_json([], now=now)) == {"loops": []}


def test_the_rest_answer_is_the_list_serializers(api, every_kind_of_loop):
    with time_machine.travel(timezone.now(), tick=False):
        now = timezone.now()
        body = page(api, {"session_id": "global"})
        rows = loop_rows(loop_list(scope="global"), columns=LOOP_VIEW_COLUMNS)
    assert body == {"loops": loop_views(rows, now=now)}


# --- the panel's target filter reads the same way (a loose index scan) ------------------


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 200])
def test_the_panels_target_sessions_are_the_distinct_active_targets_by_id(api, limit):
    targets = {"ses_a": 3, "nex": 1, "new": 2, "o": 1, "self": 2, "ses_z": 1, "ses_done": 0, "zz": 2}
    for target, active in targets.items():
        for i in range(max(active, 1)):
            Loop.objects.create(
                loop_id=f"loop_{target}_{i}",
                prompt="p",
                kind="every",
                every_seconds=60,
                session_id=target,
                created_at=T0,
                next_at=T0,
                state=LoopState.SCHEDULED if active else LoopState.COMPLETED,
            )
    # The ORM's DISTINCT over every loop, plain and slow, is the oracle.
    oracle = list(
        Loop.objects.exclude(session_id__in=["self", "new"])
        .exclude(state=LoopState.COMPLETED)
        .order_by("session_id")
        .values_list("session_id", flat=True)
        .distinct()[:limit]
    )
    assert [session_id for session_id, _title in target_session_choices(limit)] == oracle
    assert "ses_done" not in oracle and len(oracle) == min(limit, 5)
