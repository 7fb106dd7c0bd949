"""Loop and run records as the contract's JSON shapes (epoch ms; unset fields omitted)."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from pydantic_core import to_json

from core.timeutil import to_ms
from loops import humanize
from loops.models import SCHEDULE_COLUMNS, DeletedLoop, Loop, LoopEvent, LoopRun, LoopState, schedule_of_columns
from sessions_app.models import ReservedTarget
from timing import schedules

# spec §4 / contract §3: scheduled, unclaimed, and next_at more than 30 s in the past.
OVERDUE_AFTER = timedelta(seconds=30)

# A list row's instants count microseconds from 2000-01-01 UTC, PostgreSQL's epoch, as
# selectors.loop_rows reads them (selectors.ROW_EPOCH); ROW_EPOCH_US is that moment in Unix epoch µs.
_ROW_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
ROW_EPOCH_US = 946_684_800_000_000
_ROW_EPOCH_MS = ROW_EPOCH_US // 1000
_SCHEDULED = LoopState.SCHEDULED.value


class LoopListRow(NamedTuple):
    """What a LoopView is made of: these Loop fields, its instants as integer microseconds since
    2000-01-01 UTC (`<field>_us`, see ROW_EPOCH_US). A list reads exactly these columns, in this
    order, as plain tuples (selectors.loop_rows): model instances and hundreds of thousands of
    timestamps made into datetimes would make a list of 100,000 loops take seconds. The schedule
    is the last five columns, loops.models.SCHEDULE_COLUMNS, as stored."""

    loop_id: str
    prompt: str
    session_id: str
    preset: str
    created_by_session_id: str
    last_result: str
    last_error: str
    state: str
    created_at_us: int
    next_at_us: int | None
    last_run_at_us: int | None
    kind: str
    every_seconds: int | None
    after_seconds: int | None
    cron_expr: str
    tz: str


LOOP_VIEW_COLUMNS = LoopListRow._fields
_SCHEDULE_START = len(LOOP_VIEW_COLUMNS) - len(SCHEDULE_COLUMNS)
assert LOOP_VIEW_COLUMNS[_SCHEDULE_START:] == SCHEDULE_COLUMNS


def _ms(moment: datetime | None) -> int | None:
    return to_ms(moment) if moment else None


def row_us(moment: datetime | None) -> int | None:
    """An instant as the integer a list row holds for it (exact, like the database's)."""
    return None if moment is None else (moment - _ROW_EPOCH) // timedelta(microseconds=1)


def schedule_view(schedule: schedules.Schedule) -> dict:
    """A schedule as the API shows it (contract §3 ScheduleIn: the tz only when one was given)."""
    match schedule:
        case schedules.Every(every_seconds=seconds):
            return {"kind": "every", "every_seconds": seconds}
        case schedules.After(after_seconds=seconds):
            return {"kind": "after", "after_seconds": seconds}
        case schedules.Cron(expr=expr, tz=tz):
            return {"kind": "cron", "expr": expr, **({"tz": tz} if tz else {})}
    raise AssertionError(f"unknown schedule {schedule!r}")


def loop_state(loop: Loop, now: datetime) -> str:
    if loop.state == LoopState.SCHEDULED and loop.next_at and loop.next_at < now - OVERDUE_AFTER:
        return "overdue"
    return loop.state


def loop_row(loop: Loop) -> LoopListRow:
    """A loop as the row a list reads for it."""
    return LoopListRow._make(
        row_us(getattr(loop, column.removesuffix("_us"))) if column.endswith("_us") else getattr(loop, column)
        for column in LOOP_VIEW_COLUMNS
    )


def loop_view(loop: Loop, *, now: datetime) -> dict:
    return loop_views([loop_row(loop)], now=now)[0]


def loop_views(rows: Iterable[Sequence[Any]], *, now: datetime) -> list[dict]:
    """LoopView (spec §4, contract §3) of each row (a LoopListRow, or a plain tuple in its order): the
    one definition of the shape, for one loop (loop_view) and for a list of 100,000 read straight
    from the database. Written for speed (a row unpacked into locals, no call per field), since it
    runs once per listed loop; unset fields are omitted. Loops with the same schedule share its
    view (a list holds few distinct schedules): treat the views as read-only."""
    overdue_before = row_us(now - OVERDUE_AFTER)
    schedule_views: dict[Any, dict[str, Any]] = {}  # by the row's schedule columns
    views: list[dict[str, Any]] = []
    append = views.append
    for row in rows:
        # The schedule's columns are not unpacked: its view is made once per distinct schedule.
        (
            loop_id,
            prompt,
            session_id,
            preset,
            created_by_session_id,
            last_result,
            last_error,
            state,
            created_at_us,
            next_at_us,
            last_run_at_us,
            _,
            _,
            _,
            _,
            _,
        ) = row
        key = row[_SCHEDULE_START:]
        schedule = schedule_views.get(key)
        if schedule is None:
            schedule = schedule_views[key] = schedule_view(schedule_of_columns(*key))
        view = {"loop_id": loop_id, "prompt": prompt, "schedule": schedule, "session_id": session_id}
        if preset:
            view["preset"] = preset
        view["created_by_session_id"] = created_by_session_id
        # Epoch ms: ROW_EPOCH_US is whole milliseconds, so the floor division commutes with it.
        view["created_at"] = created_at_us // 1000 + _ROW_EPOCH_MS
        if next_at_us is not None:
            view["next_at"] = next_at_us // 1000 + _ROW_EPOCH_MS
        if last_run_at_us is not None:
            view["last_run_at"] = last_run_at_us // 1000 + _ROW_EPOCH_MS
        if last_result:
            view["last_result"] = last_result
        if last_error:
            view["last_error"] = last_error
        # spec §4: overdue is derived when the loop is read (loop_state, for a model instance).
        if state == _SCHEDULED and next_at_us is not None and next_at_us < overdue_before:
            state = "overdue"
        view["state"] = state
        append(view)
    return views


# Loops per encoded chunk of a list: a list of 100,000 is never 100,000 views alive at once;
# making them all, collecting and freeing them cost more than encoding.
_CHUNK = 1000


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused (unless someone else paused it). A list's rows and views are
    a few hundred thousand short-lived objects and no reference cycle, all freed by reference
    counting; while they live, the collector's full passes over every object of the process would
    cost a large share of a long list's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def loop_list_json(rows: Sequence[Sequence[Any]], *, now: datetime, next_cursor: str | None = None) -> bytes:
    """LoopListOut as JSON, {"loops": [LoopView…], "next_cursor"?}, from list rows (LoopListRow order)."""
    chunks = (rows[i : i + _CHUNK] for i in range(0, len(rows), _CHUNK))
    return loop_list_json_of_chunks(chunks, now=now, next_cursor=next_cursor)


def loop_list_json_of_chunks(
    chunks: Iterable[Sequence[Sequence[Any]]], *, now: datetime, next_cursor: str | None = None
) -> bytes:
    """loop_list_json of the rows of `chunks`, in order (selectors.loop_row_chunks streams a whole
    list): each chunk's loop_views dicts encoded by pydantic-core (several times faster than the json
    module) as soon as it comes, never validated one by one through the model."""
    with _no_cycle_collection():
        encoded = [to_json(loop_views(chunk, now=now))[1:-1] for chunk in chunks if chunk]
    cursor = b',"next_cursor":' + to_json(next_cursor) if next_cursor is not None else b""
    head, tail = b'{"loops":[', b"]" + cursor + b"}"
    if not encoded:
        return head + tail
    # The answer is copied once, by the join (tens of MB for 100,000 loops), not once per concatenation.
    encoded[0] = head + encoded[0]
    encoded[-1] += tail
    return b",".join(encoded)


def run_view(run: LoopRun) -> dict:
    view = {
        "run_id": run.run_id,
        "loop_id": run.loop_id,
        "occurrence_key": run.occurrence_key,
        "scheduled_at": to_ms(run.scheduled_at),
        "status": run.status,
        "attempt": run.attempt,
        "missed": run.missed or None,
        "target_session_id": run.target_session_id or None,
        "started_at": _ms(run.started_at),
        "finished_at": _ms(run.finished_at),
        "error": run.error or None,
        "fallback": run.fallback or None,
        "revision": run.revision,
        "manual": run.manual,
        "outcome": run.outcome or None,
        "summary": run.summary or None,
        "outcome_at": _ms(run.outcome_at),
    }
    return {key: value for key, value in view.items() if value is not None}


def delivered_run_views(runs: Sequence[LoopRun]) -> list[dict]:
    """The operator API's runs (GET /api/runs): each RunView with its loop's name and whether that
    loop was deleted (its runs outlive it, spec §4), so a list of runs never shows a bare loop ID
    that leads nowhere. Two reads by primary key for the whole page, whatever its loops."""
    loop_ids = {run.loop_id for run in runs}
    live = dict(Loop.objects.filter(loop_id__in=loop_ids).values_list("loop_id", "name"))
    gone = dict(DeletedLoop.objects.filter(loop_id__in=loop_ids - set(live)).values_list("loop_id", "name"))
    views = []
    for run in runs:
        deleted = run.loop_id not in live
        name = gone.get(run.loop_id, "") if deleted else live[run.loop_id]
        views.append(run_view(run) | {"loop_deleted": deleted} | ({"loop_name": name} if name else {}))
    return views


def loop_detail_view(loop: Loop, *, now: datetime) -> dict:
    """contract §9 LoopDetail: the LoopView plus the operators' fields."""
    detail = {
        **loop_view(loop, now=now),
        "name": loop.name or None,
        "revision": loop.revision,
        "paused_at": _ms(loop.paused_at),
        "pause_reason": loop.pause_reason or None,
        "consecutive_failures": loop.consecutive_failures,
        # The panels' words (loops.humanize), so that DSH Web's say what dshloop's own panel says.
        "schedule_text": humanize.schedule_words(loop, now=now, host_tz=settings.TIME_ZONE)[0],
    }
    if loop.session_id == ReservedTarget.NEW:
        detail |= unattended_view(loop)
    detail = {key: value for key, value in detail.items() if value is not None}
    # contract §16: the bounds are always shown, null when unset (the routes exclude unset fields, not nulls).
    return detail | {"ends_at": _ms(loop.ends_at), "max_runs": loop.max_runs, "runs_delivered": loop.runs_delivered}


def unattended_view(loop: Loop) -> dict[str, str]:
    """contract §14: how a `new` loop's fresh sessions are placed and bounded."""
    return {"workspace": loop.workspace, "permission_preset": loop.permission_preset, "overlap": loop.overlap}


def event_view(event: LoopEvent) -> dict:
    view = {
        "at": to_ms(event.at),
        "kind": event.kind,
        "actor": {"kind": event.actor_kind, **({"id": event.actor_id} if event.actor_id else {})},
        "revision": event.revision,
        "changes": event.changes,
    }
    return {key: value for key, value in view.items() if value is not None}
