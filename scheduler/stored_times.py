"""Loop deadlines as SQLite stores them: text, compared as text, so only one form may be stored.

PostgreSQL keeps `next_at` as a typed timestamp. SQLite keeps whatever was written: Django writes
"YYYY-MM-DD HH:MM:SS[.ffffff]" in UTC, but a row written by hand or by another tool may hold
"2026-12-02T07:00:00Z", "…+08:00", an integer or garbage. Text comparison then puts it in the
wrong place in the clock's queue, the claim's compare-and-swap (which binds Django's form) never
matches it, and Django's converter raises on a value it cannot parse; left alone, such rows come
back at the head of every claim batch and nothing else fires.

So every stored deadline the scheduler meets is settled into Django's form: a readable one is
rewritten in place (and claimed only if it is due in truth), an unreadable one is set aside: the
loop is paused with UNREADABLE_REASON and an `auto_paused` event, which health reports as a
problem until an operator resumes the loop (its next occurrence is then computed from now).
The claim settles the due rows it reads; a housekeeping pass settles the rest, whose text form
hides them from the due query (`settle_step`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypedDict

from django.db import connection, transaction
from django.db.models import Min, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils.dateparse import parse_datetime

from loops.events import SCHEDULER, record_event
from loops.models import UNREADABLE_REASON, EventKind, Loop, LoopState

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

logger = logging.getLogger("dshloop.clock")

SETTLE_BATCH = 500  # loops per housekeeping step

# Django's stored form, as GLOB patterns: the rows the housekeeping pass need not look at.
_DIGITS = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
_STORED_FORMS = (_DIGITS, _DIGITS + ".[0-9][0-9][0-9][0-9][0-9][0-9]")


def stores_text() -> bool:
    """Whether deadlines are stored as text (SQLite) and so must be settled."""
    return connection.vendor == "sqlite"


class StoredNextAt(TypedDict):
    # The text the database holds (SQL NULL for a loop with no deadline).
    stored_next_at: str | None


def stored(queryset: QuerySet[Loop]) -> QuerySet[WithAnnotations[Loop, StoredNextAt]]:
    """`queryset` with each row's stored `next_at` as it is in the database (`stored_next_at`)."""
    return queryset.annotate(stored_next_at=Cast("next_at", output_field=TextField()))


def parse_stored(value: object) -> datetime | None:
    """The aware UTC moment a stored value names, in any form Django's parser reads (a naive
    one is UTC, as Django stores it), or None when it names none."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:  # the right shape, an impossible date ("2026-13-45 …")
            return None
        if parsed is None:
            return None
        moment = parsed
    else:  # an integer, a float, a blob: not a timestamp
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def django_form(moment: datetime) -> str:
    form = connection.ops.adapt_datetimefield_value(moment)
    assert form is not None  # None only stands for None
    return form


def settle(loop: Loop, raw: object, *, now: datetime) -> datetime | None:
    """Bring one scheduled loop's stored deadline `raw` into Django's form. Returns the moment it
    names, or None when it names none and the loop was set aside (paused). Inside the caller's
    transaction (SQLite's IMMEDIATE transactions hold the write lock: nobody races it)."""
    moment = parse_stored(raw)
    if moment is None:
        _set_aside(loop, raw, now=now)
        return None
    if raw != django_form(moment):
        Loop.objects.filter(loop_id=loop.loop_id).update(next_at=moment)
        logger.warning(
            "loop %s: next_at %r was not in the stored form; rewritten as %s", loop.loop_id, raw, django_form(moment)
        )
    return moment


def _set_aside(loop: Loop, raw: object, *, now: datetime) -> None:
    logger.error(
        "loop %s: next_at %r is not a timestamp; the loop is paused (resume it to schedule it from now)",
        loop.loop_id,
        raw,
    )
    loop.state, loop.next_at, loop.paused_at, loop.pause_reason = LoopState.PAUSED, None, now, UNREADABLE_REASON
    Loop.objects.filter(loop_id=loop.loop_id).update(
        state=loop.state, next_at=None, paused_at=now, pause_reason=UNREADABLE_REASON
    )
    record_event(loop, EventKind.AUTO_PAUSED, SCHEDULER, at=now)


def _in_stored_form(table: str, *, negate: bool = False) -> str:
    """A WHERE clause: the row's next_at is text in Django's form (or, negated, anything else)."""
    forms = " OR ".join(f"{table}.next_at GLOB '{form}'" for form in _STORED_FORMS)
    clause = f"(typeof({table}.next_at) = 'text' AND ({forms}))"
    return f"NOT {clause}" if negate else clause


def earliest_deadline(scheduled: QuerySet[Loop]) -> datetime | None:
    """MIN(next_at) of the `scheduled` loops whose deadline is in Django's form; the others are
    the claim's and the sweep's to settle, and must not keep the clock awake. None when none is,
    or when even that text names no moment (then the clock sleeps its longest and claims what
    the due query finds)."""
    table = connection.ops.quote_name(Loop._meta.db_table)
    earliest = stored(scheduled.extra(where=[_in_stored_form(table)])).aggregate(at=Min("stored_next_at"))["at"]
    return None if earliest is None else parse_stored(earliest)


def settle_step(*, now: datetime, limit: int = SETTLE_BATCH) -> bool:
    """Settle up to `limit` scheduled loops whose stored deadline is not in Django's form (a
    scan of loop_due_idx); True while more may remain. A no-op where deadlines are typed."""
    if not stores_text():
        return False
    table = connection.ops.quote_name(Loop._meta.db_table)
    with transaction.atomic(durable=True):
        loops = list(
            stored(Loop.objects.filter(state=LoopState.SCHEDULED, next_at__isnull=False))
            .extra(where=[_in_stored_form(table, negate=True)])
            .only("loop_id", "revision")[:limit]
        )
        for loop in loops:
            settle(loop, loop.stored_next_at, now=now)
    return len(loops) == limit
