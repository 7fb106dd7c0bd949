"""Reads of the loop registry (spec §2.2) and of run history."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import UTC, datetime, timedelta
from itertools import islice

import psycopg
from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import BigIntegerField, F, Func, Q, QuerySet
from psycopg import capabilities
from psycopg.types.numeric import Int8BinaryLoader

from core.errors import InvalidInput, UnknownLoop
from loops.models import DeletedLoop, Loop, LoopRun, LoopState
from sessions_app.models import ReservedTarget
from timing import ends, schedules


def _ordered(loops: QuerySet[Loop]) -> QuerySet[Loop]:
    # contract §3: by next_at (absent last), then created_at; loop_id makes ties stable.
    return loops.order_by(F("next_at").asc(nulls_last=True), "created_at", "loop_id")


def active_loops() -> QuerySet[Loop]:
    # spec §4: completed `after` loops keep their history but leave the active list.
    return Loop.objects.exclude(state=LoopState.COMPLETED)


def loops_targeting(session_id: str, *, global_session_id: str | None) -> QuerySet[Loop]:
    """Active loops that deliver to one session, including `self` loops when it is the global
    interface session (`global_session_id`, as the host names it now; None while there is none)."""
    target = Q(session_id=session_id)
    if global_session_id is not None and global_session_id == session_id:
        target |= Q(session_id=ReservedTarget.SELF)
    return _ordered(active_loops().filter(target))


def loop_list(*, scope: str, global_session_id: str | None = None) -> QuerySet[Loop]:
    """spec §2.2: every active loop (scope "global"), or those that deliver to one session (see
    loops_targeting for `global_session_id`)."""
    if scope == ReservedTarget.GLOBAL:
        return _ordered(active_loops())
    if scope in {ReservedTarget.SELF, ReservedTarget.NEW}:
        raise InvalidInput(
            f"'{scope}' is a loop_create target, not a list scope; use {{}} for your session, "
            '"global" for all loops, or a session ID.',
            field="session_id",
        )
    return loops_targeting(scope, global_session_id=global_session_id)


# The instants of a list row (presenters.LoopListRow): integer microseconds since 2000-01-01 UTC,
# PostgreSQL's own epoch. That is what PostgreSQL sends for a timestamptz in binary, so a long list
# reads each instant as a plain 8-byte integer. Django's loader makes each timestamp a datetime in
# Python, microseconds apiece (seconds for a list of 100,000 loops); EXTRACT(EPOCH …) to the Unix
# epoch is numeric arithmetic sent as text, which costs PostgreSQL more over such a list.
ROW_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class _RowMicroseconds(Func):
    """A timestamp column as it reads into a list row: on PostgreSQL the column itself, which
    _read_binary loads as microseconds since ROW_EPOCH; on SQLite that integer, computed."""

    arity = 1
    output_field = BigIntegerField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="%(expressions)s", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        # Django stores 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC: the whole seconds since ROW_EPOCH
        # (946684800 is ROW_EPOCH in Unix seconds), then the microseconds ('' when there are none casts
        # to 0). strftime gets the whole seconds alone: it rounds a fraction to milliseconds, so
        # .9995 and later made the next second (and 9999-12-31 23:59:59.9995 no time at all). The
        # doubled %s reaches SQLite as strftime's own %s.
        template = (
            "((CAST(strftime('%%%%s', substr(%(expressions)s, 1, 19)) AS INTEGER) - 946684800) * 1000000"
            " + CAST(substr(%(expressions)s, 21, 6) AS INTEGER))"
        )
        return self.as_sql(compiler, connection, template=template, **extra)


_CHUNK = 1000  # rows per chunk of a read

# A position in a list: the (next_at, created_at, loop_id) of the last loop a page showed, the
# instants in microseconds since ROW_EPOCH (next_at None: the loop had none).
Position = tuple[int | None, int, str]


def _instant(us: int) -> datetime:
    return ROW_EPOCH + timedelta(microseconds=us)


def _statement(queryset: QuerySet[Loop], columns: Sequence[str], count: int | None) -> tuple[str, Sequence] | None:
    """The SQL and parameters that read `columns` of `queryset` (at most `count` rows), or None when
    the query can match nothing. The ORM writes the statement; the rows are taken as the driver
    returns them: Django's own iteration (a tuple copy, a reorder or a dict per row) cost more than
    the query at 100,000 rows (STYLE 18: raw only on a measured hot path, on Django's connection)."""
    instants = {column: _RowMicroseconds(column.removesuffix("_us")) for column in columns if column.endswith("_us")}
    query = queryset.annotate(**instants).values_list(*columns)[:count].query
    try:
        return query.get_compiler(using=queryset.db).as_sql()
    except EmptyResultSet:
        return None


def _read(queryset: QuerySet[Loop], columns: Sequence[str], *, count: int | None, size: int) -> Iterator[list[tuple]]:
    """The rows of a list (see loop_rows), in lists of at most `size`: one statement."""
    statement = _statement(queryset, columns, count)
    if statement is None:
        return
    connection = connections[queryset.db]
    with connection.cursor() as cursor:  # Django's checks (thread, broken transaction); connects
        if connection.vendor == "postgresql":
            yield from _read_binary(connection, cursor.connection, statement, size=size)
        else:
            cursor.execute(*statement)
            while chunk := cursor.fetchmany(size):
                yield chunk


def _read_binary(connection, pg_connection, statement: tuple[str, Sequence], *, size: int) -> Iterator[list[tuple]]:
    """A statement's rows from PostgreSQL in binary, each timestamptz as the integer it is sent as
    (microseconds since ROW_EPOCH), on a cursor of Django's connection (binding its parameters on
    the server, since Django's client-side cursors read text only). Errors are Django's
    DatabaseError (STYLE 18).

    With libpq 17 or later the rows are streamed (its chunked mode): the server reads and sends the
    rest while the caller works on a chunk, instead of the two taking turns. The
    connection runs nothing else until the chunks are all read or the iterator is closed; closing it
    early cancels the statement and leaves the connection usable (psycopg)."""
    with connection.wrap_database_errors, psycopg.Cursor(pg_connection) as cursor:
        cursor.adapters.register_loader("timestamptz", Int8BinaryLoader)
        if capabilities.has_stream_chunked():
            # stream() is typed an Iterator; it is a generator, whose close() cancels the statement.
            with closing(cursor.stream(*statement, binary=True, size=size)) as rows:  # type: ignore[type-var]
                while chunk := list(islice(rows, size)):
                    yield chunk
        else:
            cursor.execute(*statement, binary=True)
            while chunk := cursor.fetchmany(size):
                yield chunk


def loop_rows(
    loops: QuerySet[Loop], *, columns: Sequence[str], after: Position | None = None, limit: int | None = None
) -> list[tuple]:
    """The rows of a list from loop_list or loops_targeting, in its order, as tuples of `columns`
    (fields that need no conversion: text, integers, and `<field>_us`, that instant in microseconds
    since ROW_EPOCH): all of them, or at most `limit` after the position `after` (keyset paging:
    each page is an index range scan on loop_list_idx, however deep).

    Without `after` it is one statement, so the whole list is one consistent snapshot (a whole list
    that is only encoded reads faster through loop_row_chunks). After a position with a next_at, the
    rest is the loops after it that have a next_at, then all those without (absent last): two range
    scans, two statements."""

    def read(queryset: QuerySet[Loop], count: int | None) -> list[tuple]:
        return [row for chunk in _read(queryset, columns, count=count, size=_CHUNK) for row in chunk]

    if after is None:
        return read(loops, limit)
    next_us, created_us, loop_id = after
    created_at = _instant(created_us)
    later = Q(created_at__gt=created_at) | Q(created_at=created_at, loop_id__gt=loop_id)
    untimed = loops.filter(next_at__isnull=True)
    if next_us is None:  # the page ended among the loops without a next_at
        # created_at >= … is implied by `later`, and spelled out so that it bounds the index scan.
        return read(untimed.filter(Q(created_at__gte=created_at) & later), limit)
    next_at = _instant(next_us)
    timed = loops.filter(Q(next_at__gte=next_at) & (Q(next_at__gt=next_at) | Q(next_at=next_at) & later))
    rows = read(timed, limit)
    if limit is not None and len(rows) >= limit:
        return rows
    # A loop paused between the two statements (its next_at gone) would be read by both: keep the
    # first. `limit` more rows are enough, since at most len(rows) of them can be repeats.
    key = columns.index("loop_id")
    seen = {row[key] for row in rows}
    rest = [row for row in read(untimed, limit) if row[key] not in seen]
    return rows + (rest if limit is None else rest[: limit - len(rows)])


def loop_row_chunks(loops: QuerySet[Loop], *, columns: Sequence[str], size: int = _CHUNK) -> Iterator[list[tuple]]:
    """The whole list, the rows loop_rows(loops, columns=columns) reads, in lists of at most `size`
    as the database sends them: one statement, so one consistent snapshot, as loop_rows'. On
    PostgreSQL they are streamed (_read_binary), so a caller that encodes each chunk as it comes
    works while the server reads the rest; it must not use the connection until the end."""
    return _read(loops, columns, count=None, size=size)


def loop_get(loop_id: str) -> Loop:
    loop = Loop.objects.filter(loop_id=loop_id).first()
    if loop is None:
        raise UnknownLoop(f"No loop {loop_id!r}; loop_list shows the loops that exist.", field="loop_id")
    return loop


# The runs a loop's page shows (the panel's and the admin's), newest first.
RUN_PAGE = 50


def loop_runs(loop_id: str, *, limit: int) -> QuerySet[LoopRun]:
    """Newest first. Runs outlive their loop, so an unknown loop with history still answers."""
    runs = LoopRun.objects.filter(loop_id=loop_id).order_by("-scheduled_at", "-claimed_at")[:limit]
    if not runs and not Loop.objects.filter(loop_id=loop_id).exists():
        raise UnknownLoop(f"No loop {loop_id!r} and no runs recorded for it.", field="loop_id")
    return runs


def runs_delivered_into(session_id: str, *, global_session_id: str | None, limit: int) -> QuerySet[LoopRun]:
    """The runs whose message went into one session, newest first: those of the loops that target
    it (`self` ones too when it is the global interface; completed loops included, and deleted ones,
    whose runs outlive them, through the target kept as they were deleted), found through the loops'
    session indexes and then each loop's runs (run_loop_idx), and the fresh runs that made it
    (run_fresh_session_idx). Never a scan of every run by its target: runs have no index on
    target_session_id alone."""
    targets = Q(session_id=session_id)
    if global_session_id is not None and global_session_id == session_id:
        targets |= Q(session_id=ReservedTarget.SELF)
    loop_ids = Loop.objects.filter(targets).values("loop_id")
    deleted_ids = DeletedLoop.objects.filter(targets).values("loop_id")
    fresh = Q(target=ReservedTarget.NEW, target_session_id=session_id)
    delivered_here = Q(loop_id__in=loop_ids) | Q(loop_id__in=deleted_ids)
    runs = LoopRun.objects.filter((delivered_here & Q(target_session_id=session_id)) | fresh)
    return runs.order_by("-scheduled_at", "-claimed_at")[:limit]


def fire_times(loop: Loop, *, now: datetime, count: int) -> list[datetime]:
    """The next `count` fire times, as the scheduler will use them (contract §4)."""
    if loop.next_at is None or loop.state in {LoopState.COMPLETED, LoopState.FAILED}:
        return []
    if ends.past_end(loop.next_at, loop.ends_at):
        return []
    timing = loop.timing  # with a cron jitter, the delayed times (contract §16)
    start = loop.next_at
    times = []
    if start <= now:
        # Overdue: the clock will deliver one catch-up occurrence now (spec §3 anti-burst).
        catch_up = schedules.catch_up(
            timing,
            created_at=loop.anchor,
            due_at=start,
            now=ends.catch_up_until(now, loop.ends_at),
            host_tz=settings.TIME_ZONE,
        )
        times.append(catch_up.deliver_at)
        if catch_up.next_at is None or count == 1:
            return times
        start = catch_up.next_at
    times += schedules.upcoming(
        timing, created_at=loop.anchor, start=start, count=count - len(times), host_tz=settings.TIME_ZONE
    )
    # contract §16: the times stop at the loop's end; max_runs stops them after the runs it has left.
    times = [moment for moment in times if not ends.past_end(moment, loop.ends_at)]
    if loop.max_runs is not None:
        times = times[: max(0, loop.max_runs - loop.runs_delivered)]
    return times


def active_loops_in_quota(*, target: str, created_by: str | None) -> int:
    """How many active loops count against the quota a new loop for `target` would join.

    An actual session ID: the active loops whose target is that session. "new" and "self" name no
    session that could answer for them, so they are counted per creator: the active "new" and "self"
    loops `created_by` created, together (one bucket, so alternating the two does not double it).
    Each count is one index range: the session_id index, or loop_creator_idx.
    """
    per_creator = [ReservedTarget.NEW, ReservedTarget.SELF]
    if target in per_creator:
        loops = active_loops().filter(created_by_session_id=created_by, session_id__in=per_creator)
    else:
        loops = active_loops().filter(session_id=target)
    return loops.count()


def made_for_fresh_run(session_id: str) -> bool:
    """Whether dshloop made this session for a run of a `new` loop (contract §15), on every host:
    such a run records the session it made as its target_session_id (scheduler.targets; before
    delivering, on a remote host). One probe of run_fresh_session_idx. A session whose runs
    retention has pruned counts as anyone's again: by then it is no longer an unattended run's."""
    return LoopRun.objects.filter(target=ReservedTarget.NEW, target_session_id=session_id).exists()
